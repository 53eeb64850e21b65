//! `crewlet replay TASK_ID [--from-step N --model NAME] [--live-tools]
//! [--json]`: a recorded turn run again from its effect journal, printing
//! each step. Without `--from-step` nothing is asked and nothing runs.
//! The work is done by `crewlet_engine::replay`.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Result, anyhow};
use crewlet_engine::replay::{ReplayOptions, replay};
use crewlet_turn::{StepObserver, StepSource, StepView};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The task whose turn to replay.
    pub task_id: String,
    /// Which of the task's turns (its trigger's event id); default the latest.
    #[arg(long)]
    pub trigger: Option<String>,
    /// Run the turn live from this step on (the steps before come from the
    /// journal).
    #[arg(long, value_name = "N")]
    pub from_step: Option<i32>,
    /// The `providers.llm` entry the live steps ask.
    #[arg(long, value_name = "NAME", requires = "from_step")]
    pub model: Option<String>,
    /// Run tools for real in the live steps (default: a dry run).
    #[arg(long, requires = "from_step")]
    pub live_tools: bool,
    /// One JSON object per step, then the outcome.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub database: super::DatabaseArgs,
}

struct Printer {
    json: bool,
}

fn source(s: StepSource) -> &'static str {
    match s {
        StepSource::Journal => "journal",
        StepSource::Live => "live",
        StepSource::DryRun => "dry run",
        StepSource::Uncertain => "effect uncertain",
    }
}

fn one_line(text: &str, max: usize) -> String {
    let flat = text.replace('\n', " ⏎ ");
    match flat.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

impl StepObserver for Printer {
    fn step(&self, step: &StepView) {
        if self.json {
            println!("{}", serde_json::to_string(step).unwrap_or_default());
            return;
        }
        match step.kind {
            "model" => println!(
                "step {:>3}  model  [{}] {}: {}",
                step.step,
                source(step.source),
                step.name,
                one_line(&step.text, 300)
            ),
            _ => println!(
                "step {:>3}  tool   [{}] {}({}) -> {}{}",
                step.step,
                source(step.source),
                step.name,
                one_line(
                    &step
                        .arguments
                        .as_ref()
                        .map(|a| a.to_string())
                        .unwrap_or_default(),
                    120
                ),
                if step.is_error { "error: " } else { "" },
                one_line(step.text.trim_start_matches("error: "), 200)
            ),
        }
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    let json = args.json;
    super::with_stores(
        &args.database,
        "crewlet replay",
        |bootstrap, stores| async move {
            let (company, revision) = crewlet_engine::active_company(stores.config.as_ref())
                .await?
                .ok_or_else(|| anyhow!("no company revision is active"))?;
            let secrets = crewlet_backends::Secrets::open(&bootstrap, &stores).await?;
            let env = bootstrap
                .security
                .company_lookup(secrets.lookup(Arc::new(crewlet_config::process_env)));
            let options = ReplayOptions {
                task_id: args.task_id,
                trigger: args.trigger,
                from_step: args.from_step,
                model: args.model,
                live_tools: args.live_tools,
            };
            let report =
                replay(&stores, company, &env, &options, Arc::new(Printer { json })).await?;
            let o = &report.outcome;
            let failure = o.failure.as_ref().map(|f| f.detail.clone());
            if json {
                println!(
                    "{}",
                    serde_json::json!({
                        "task_id": o.task_id,
                        "seat": report.seat,
                        "trigger": report.trigger,
                        "revision_id": revision.revision_id,
                        "journal_entries": report.journal_entries,
                        "decision": o.decision.as_str(),
                        "failure": failure,
                        "final_artifact": o.final_artifact,
                        "recorded_outcome": report.recorded_outcome,
                        "diverged_at": report.diverged_at,
                    })
                );
            } else {
                println!(
                    "\n{} of task {} on {} ({} journal entries): {}{}",
                    if options.from_step.is_some() {
                        "partial replay"
                    } else {
                        "replay"
                    },
                    o.task_id,
                    report.seat,
                    report.journal_entries,
                    o.decision.as_str(),
                    failure.map(|f| format!(" ({f})")).unwrap_or_default()
                );
                if let Some(recorded) = &report.recorded_outcome {
                    println!("the recorded turn ended: {recorded}");
                }
                if let Some(step) = report.diverged_at {
                    println!("the replay left the journal's path at step {step}");
                }
                if !o.final_artifact.is_empty() {
                    println!("final artifact:\n{}", o.final_artifact);
                }
            }
            Ok(ExitCode::SUCCESS)
        },
    )
}
