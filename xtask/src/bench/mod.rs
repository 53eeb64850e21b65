//! `cargo xtask bench <name>`: benchmarks that print figures (tests never
//! assert on wall-clock time).
//!
//! Adding a bench: create `xtask/src/bench/<name>.rs` (or `<name>/mod.rs`) with
//! `pub struct Args` (deriving `clap::Args`) and `pub fn run(args: Args) ->
//! anyhow::Result<()>`, then add one line to the [`benches!`] list below. The
//! helpers here ([`cargo_build_release`], [`release_binary`], [`Stats`]) are
//! shared.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::{cmd, workspace_root};

/// Declares the bench modules and the `Bench` subcommand enum that
/// dispatches to them.
macro_rules! benches {
    ($($(#[$doc:meta])* $variant:ident => $module:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// The benchmarks.
        #[derive(Debug, clap::Subcommand)]
        pub enum Bench {
            $($(#[$doc])* $variant($module::Args),)*
        }

        impl Bench {
            pub fn run(self) -> Result<()> {
                match self {
                    $(Bench::$variant(args) => $module::run(args),)*
                }
            }
        }
    };
}

benches! {
    /// The ceilings of this machine: Pulsar's own `pulsar-perf` (produce unbatched and batched, produce -> consume) and a raw PostgreSQL `COPY`; written to target/bench/ceilings.json for the other benches.
    Ceilings => ceilings,
    /// Wall time of `crewlet validate` on a company file (release build).
    Validate => validate,
    /// Wall time and peak RSS of validating huge generated company files (a 10,000-seat manager chain, 100,000 unknown keys).
    ValidateScale => validate_scale,
    /// Event store inserts/s (buffered, per publish, raw COPY) and token-breakdown latency.
    Store => store,
    /// Queue publish->handler->ack events/s and publish latency (memory broker and Pulsar).
    Queue => queue,
    /// Webhook ingest: signed GitHub deliveries/s and p50/p99 latency (memory broker; Pulsar + PostgreSQL).
    Api => api,
    /// Turn engine: turns/s, CPU and RSS per turn (in-process model; fake OpenAI server over loopback).
    Turn => turn,
    /// Engine: boot time (to /ready 200) and idle RSS of `crewlet run` with 10, 100 and 1,000 agent seats (memory backends).
    Engine => engine,
    /// Agent memory: prefetch candidate selection at scale, diary writes with embedding, local embedder throughput and RSS.
    Memory => memory,
    /// Dashboard: page weight, /stream/snapshot p50/p99 at 1,000 seats, WS fan-out lag to 50 clients at 10,000 events/s, time to first render of Mission control (1,000 seats, 1,000,000 stored events) in Chromium.
    Dashboard => dashboard,
    /// Inbox batching: 1,000 comments over 50 conversations into one busy seat: turns per conversation, time to drain, memory.
    Inbox => inbox,
    /// Mattermost: 100 seat websockets against the fake server: connect time, RSS per seat, live publish time, reconnect storm after a server restart (backfill, duplicates).
    Mattermost => mattermost,
    /// Knowledge: search latency as a seat (p50/p99, the auxiliary query excluded) and the import of 1,000 Markdown pages, against the fake Confluence and Plane.
    Knowledge => knowledge,
    /// Tokens per turn: prompt, tools-schema and completion tokens per phase (o200k_base), bytes sent and cached-prefix share of a reference turn, beside the original engine's on the same turn.
    Tokens => tokens,
    /// Budgets: 1,000 concurrent reserve-then-settle calls against one capped budget (memory, PostgreSQL): overspend (must be 0), calls served, calls/s, p50/p99.
    Budgets => budgets,
    /// Sub-agents: p50/p99 wall time of a turn that delegates to one sub-agent and to a batch of three, beside a plain turn (in-process model).
    Subagent => subagent,
    /// Provider quotas: 100 seats against a fake provider capped at 60 requests per minute (429 + Retry-After), memory and PostgreSQL limiters: 429s seen (target 0), achieved rate (target within 5% of the cap).
    Quotas => quotas,
    /// Live edit: PUT /config/roles/{handle} on the standalone API to `config_revision_applied` from the engine, on Pulsar + PostgreSQL: p50/p99 (target < 2 s).
    LiveEdit => live_edit,
    /// Fleet: 10,000 seats over 3 `crewlet run` nodes on Pulsar + PostgreSQL: boot to every seat placed and attached, RSS per node, turns/s on the fleet against one node, failover after SIGKILL (p50/p99); and the effect journal's cost per tool call.
    Fleet => fleet,
    /// Code sandbox (local: bubblewrap + cgroups): start to first command p50/p99, 20 concurrent boxes on this machine (wall, failures, memory).
    Sandbox => sandbox,
    /// Local model (SmolLM2-135M in process, release) beside llama-server on the same GGUF: prompt and generated tokens/s, time to first token on a 2,000-token prompt, RSS of the loaded model, constrained decoding's cost per token.
    LocalModel => local_model,
}

/// `cargo build --release -p <package>` in the workspace root.
pub fn cargo_build_release(package: &str) -> Result<()> {
    let mut cargo = cmd::cargo();
    cargo
        .current_dir(workspace_root())
        .args(["build", "--release", "-p", package]);
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).with_context(|| format!("cannot build {package} in release mode"))
}

/// Path of a release binary, honouring `CARGO_TARGET_DIR`.
pub fn release_binary(name: &str) -> PathBuf {
    target_dir().join("release").join(name)
}

pub(crate) fn target_dir() -> PathBuf {
    let root = workspace_root();
    match std::env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()) {
        Some(dir) if Path::new(&dir).is_absolute() => PathBuf::from(dir),
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

/// Min / median / max of a set of wall times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub min: Duration,
    pub median: Duration,
    pub max: Duration,
    pub runs: usize,
}

impl Stats {
    /// `None` for no samples. The median of an even count is the mean of the
    /// two middle samples.
    pub fn from_samples(samples: &[Duration]) -> Option<Self> {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let n = sorted.len();
        let (&min, &max) = (sorted.first()?, sorted.last()?);
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2
        };
        Some(Self {
            min,
            median,
            max,
            runs: n,
        })
    }

    /// `runs=20 min=1.23 ms median=1.50 ms max=2.00 ms`.
    pub fn to_line(&self) -> String {
        format!(
            "runs={} min={:.2} ms median={:.2} ms max={:.2} ms",
            self.runs,
            ms(self.min),
            ms(self.median),
            ms(self.max)
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `cargo run --quiet --release -p {package} [--features {features}]
/// --example {example} --` in the workspace root: the benchmark binaries
/// are examples of the crate they measure; the caller appends their args.
pub fn release_example(
    package: &str,
    features: Option<&str>,
    example: &str,
) -> std::process::Command {
    let mut cargo = cmd::cargo();
    cargo
        .current_dir(workspace_root())
        .args(["run", "--quiet", "--release", "-p", package]);
    if let Some(features) = features {
        cargo.args(["--features", features]);
    }
    cargo.args(["--example", example, "--"]);
    cargo
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_odd_and_even_counts() {
        let d = Duration::from_millis;
        let s = Stats::from_samples(&[d(5), d(1), d(3)]).expect("samples");
        assert_eq!((s.min, s.median, s.max, s.runs), (d(1), d(3), d(5), 3));
        let s = Stats::from_samples(&[d(4), d(1), d(2), d(8)]).expect("samples");
        assert_eq!(s.median, Duration::from_millis(3));
        assert!(Stats::from_samples(&[]).is_none());
        assert!(s.to_line().starts_with("runs=4 min=1.00 ms median=3.00 ms"));
    }
}
