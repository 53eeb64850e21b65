//! `cargo xtask bench subagent`: what a sub-agent costs a turn, with an
//! in-process zero-latency model (so the figures are the engine's own work).
//!
//! Three turns of one seat, each run N times one after another:
//! - plain: Plan -> Execute calls `lookup` and answers -> Review (4
//!   completions, 1 tool call);
//! - one sub-agent: Execute hands the lookup to `spawn_subagent`; the child
//!   calls `lookup` and answers (6 completions, 2 tool calls, a child loop
//!   with its own events and a capped share of the budget);
//! - a batch of 3: Execute calls `spawn_subagent_batch` with three tasks
//!   (10 completions, 4 tool calls).
//!
//! Printed: p50 / p99 of a turn's wall time for each, and the p50 overhead
//! of the sub-agent turns over the plain one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use crewlet_llm::{
    Completion, CompletionRequest, LlmError, LlmRegistry, Message, ScriptedProvider, ToolCall,
    Usage,
};
use crewlet_store::MemoryTokenLedger;
use crewlet_turn::{
    CompanyProfile, CountingEventSink, SeatProfile, Tool, ToolAnnotations, ToolContext, ToolError,
    ToolOutput, ToolRegistry, Trigger, TurnDecision, TurnEngine, Visibility,
};
use serde_json::{Value, json};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

struct Lookup;

#[async_trait]
impl Tool for Lookup {
    fn name(&self) -> &str {
        "lookup"
    }
    fn description(&self) -> &str {
        "Looks a fact up in the company wiki."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"q": {"type": "string"}}})
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn invoke(&self, _: &ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("wiki says: 42"))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Plain,
    One,
    Batch,
}

impl Shape {
    fn label(self) -> &'static str {
        match self {
            Shape::Plain => "plain turn (Execute calls lookup)",
            Shape::One => "one sub-agent (spawn_subagent -> lookup)",
            Shape::Batch => "batch of 3 (spawn_subagent_batch)",
        }
    }

    fn tool(self) -> &'static str {
        match self {
            Shape::Plain => "lookup",
            Shape::One => "spawn_subagent",
            Shape::Batch => "spawn_subagent_batch",
        }
    }

    fn call_args(self) -> Value {
        let task = |i: usize| {
            json!({"task_prompt": format!("Look up fact {i} in the wiki."),
                   "system_prompt": "Use lookup, then answer in one line."})
        };
        match self {
            Shape::Plain => json!({"q": "answer"}),
            Shape::One => {
                let mut args = task(0);
                args["tool_names"] = json!(["lookup"]);
                args
            }
            Shape::Batch => json!({"tasks": [task(0), task(1), task(2)], "tool_names": ["lookup"]}),
        }
    }
}

fn call(name: &str, args: &Value) -> Completion {
    Completion {
        tool_calls: vec![ToolCall {
            id: format!("call_{name}"),
            name: name.to_owned(),
            arguments: args.to_string(),
        }],
        ..Completion::default()
    }
}

fn text(t: &str) -> Completion {
    Completion {
        content: t.into(),
        ..Completion::default()
    }
}

fn scripted(shape: Shape, request: &CompletionRequest) -> Result<Completion, LlmError> {
    let offered = |n: &str| request.tools.iter().any(|t| t.name == n);
    let after_tool = matches!(request.messages.last(), Some(Message::Tool { .. }));
    let child = request
        .system
        .first()
        .is_some_and(|b| b.text.contains("You are a sub-agent"));
    let mut c = if offered("submit_plan") {
        call(
            "submit_plan",
            &json!({"decision": "plan", "reasoning": "the wiki has it",
                    "steps": [{"intent": "find it", "approach": "search", "tools": [shape.tool()],
                               "on_failure": "ask"}],
                    "tools_needed": [shape.tool()], "success_criteria": ["answered"]}),
        )
    } else if offered("submit_review") {
        call(
            "submit_review",
            &json!({"decision": "done", "notes": "ok", "completed_work": "looked it up",
                    "final_artifact": "42"}),
        )
    } else if child {
        if after_tool {
            text("42")
        } else {
            call("lookup", &json!({"q": "answer"}))
        }
    } else if after_tool {
        text("The answer is 42")
    } else {
        call(shape.tool(), &shape.call_args())
    };
    c.usage = Usage {
        input_tokens: 100,
        output_tokens: 10,
        cache_read_tokens: 0,
    };
    Ok(c)
}

fn engine(shape: Shape) -> BenchResult<TurnEngine> {
    let tools = Arc::new(ToolRegistry::new());
    tools.register(Arc::new(Lookup), Visibility::All)?;
    for tool in crewlet_turn::subagent::spawn_tools() {
        tools.register(tool, Visibility::All)?;
    }
    let mut llm = LlmRegistry::new();
    llm.insert(Arc::new(ScriptedProvider::new(
        "main",
        "scripted",
        move |r: &CompletionRequest| scripted(shape, r),
    )));
    Ok(TurnEngine::new(
        CompanyProfile {
            name: "Bench".into(),
            mission: "Measure sub-agents".into(),
            ..CompanyProfile::default()
        },
        llm,
        Arc::new(MemoryTokenLedger::new()),
        Arc::new(CountingEventSink::default()),
    )
    .with_tools(tools))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // An index into a short list.
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

struct Figures {
    shape: Shape,
    p50: Duration,
    p99: Duration,
}

async fn measure(shape: Shape, runs: usize) -> BenchResult<Figures> {
    let engine = engine(shape)?;
    let seat = SeatProfile::new("Bench", "eng", "Engineer");
    let trigger = Trigger::new("bench", "bench", "What does the wiki say?");
    for _ in 0..runs.div_ceil(10) {
        let o = engine.run_turn(&seat, &trigger).await;
        if o.decision != TurnDecision::Done {
            return Err(format!(
                "{}: the turn did not finish: {:?}",
                shape.label(),
                o.failure
            )
            .into());
        }
    }
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let o = engine.run_turn(&seat, &trigger).await;
        samples.push(started.elapsed());
        if o.decision != TurnDecision::Done {
            return Err(format!(
                "{}: the turn did not finish: {:?}",
                shape.label(),
                o.failure
            )
            .into());
        }
    }
    samples.sort_unstable();
    Ok(Figures {
        shape,
        p50: percentile(&samples, 0.5),
        p99: percentile(&samples, 0.99),
    })
}

fn runs() -> BenchResult<usize> {
    let mut runs = 2_000;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => runs = 200,
            "--runs" => {
                runs = it
                    .next()
                    .ok_or("--runs needs a number")?
                    .parse()
                    .map_err(|e| format!("--runs: {e}"))?;
            }
            other => {
                return Err(
                    format!("unknown argument `{other}` (expected --runs N or --quick)").into(),
                );
            }
        }
    }
    if runs == 0 {
        return Err("--runs must be at least 1".into());
    }
    Ok(runs)
}

fn main() -> BenchResult<()> {
    let runs = runs()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        println!(
            "subagent bench: {runs} turns per shape after a warm-up, one seat, in-process zero-latency model"
        );
        let mut figures = Vec::new();
        for shape in [Shape::Plain, Shape::One, Shape::Batch] {
            figures.push(measure(shape, runs).await?);
        }
        let plain = figures[0].p50;
        println!("{:<44} {:>10} {:>10} {:>14}", "turn", "p50 us", "p99 us", "p50 over plain");
        for f in &figures {
            let over = if f.shape == Shape::Plain {
                "-".to_owned()
            } else {
                format!("+{:.1} us", us(f.p50.saturating_sub(plain)))
            };
            println!(
                "{:<44} {:>10.1} {:>10.1} {:>14}",
                f.shape.label(),
                us(f.p50),
                us(f.p99),
                over
            );
        }
        Ok(())
    })
}
