//! `cargo xtask bench turn`: turns per second, CPU time per turn and memory
//! of the turn engine, for one seat running full turns one after another
//! (Plan -> submit_plan, Execute -> one lookup call -> answer, Review ->
//! submit_review done: four completions and one tool call per turn).
//!
//! Two models:
//! - in-process: a zero-latency `ScriptedProvider`, so the figures are the
//!   engine's own overhead (prompts, tool loop, budget charges, events);
//! - loopback HTTP: the fake OpenAI server of `crewlet-test-support` on
//!   127.0.0.1, in this same process (its CPU and memory are counted too).
//!
//! Then the in-process model again with the `crewlet-telemetry` subscriber
//! installed (turn, phase, llm and tool spans with OpenTelemetry ids, log
//! lines written to a sink, no exporter): the span overhead a process pays.
//!
//! RSS is sampled after a warm-up and then every tenth of the run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use crewlet_llm::{
    Completion, CompletionRequest, LlmError, LlmRegistry, Message, ProviderConfig, ProviderKind,
    ScriptedProvider, ToolCall, Usage, build_provider, http_client,
};
use crewlet_store::MemoryTokenLedger;
use crewlet_telemetry::TelemetryOptions;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
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
        "Looks a fact up in the company wiki. Returns the matching paragraph."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn invoke(&self, _: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let q = args.get("q").and_then(Value::as_str).unwrap_or("?");
        Ok(ToolOutput::text(format!("wiki says: {q} = 42")))
    }
}

fn plan_args() -> Value {
    json!({"decision": "plan", "reasoning": "the wiki has it",
           "steps": [{"intent": "find the answer", "approach": "search", "tools": ["lookup"],
                      "on_failure": "ask"}],
           "tools_needed": ["lookup"], "success_criteria": ["the answer is stated"]})
}

fn review_args() -> Value {
    json!({"decision": "done", "notes": "ok", "completed_work": "looked it up",
           "final_artifact": "The answer is 42"})
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: 0,
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

/// The same four answers as the HTTP script, decided the same way.
fn scripted(request: &CompletionRequest) -> Result<Completion, LlmError> {
    let offered = |n: &str| request.tools.iter().any(|t| t.name == n);
    let after_tool = matches!(request.messages.last(), Some(Message::Tool { .. }));
    let mut c = if offered("submit_plan") {
        call("submit_plan", &plan_args())
    } else if offered("submit_review") {
        call("submit_review", &review_args())
    } else if after_tool {
        Completion {
            content: "The answer is 42".into(),
            ..Completion::default()
        }
    } else {
        call("lookup", &json!({"q": "answer"}))
    };
    c.usage = usage(100, 10);
    Ok(c)
}

fn http_script() -> Script {
    Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call("submit_plan", plan_args()).usage(100, 10),
        )
        .on(
            When::tool_offered("submit_review"),
            Reply::tool_call("submit_review", review_args()).usage(100, 10),
        )
        .on(
            When::after_tool_result(),
            Reply::text("The answer is 42").usage(100, 10),
        )
        .on(
            When::tool_offered("lookup"),
            Reply::tool_call("lookup", json!({"q": "answer"})).usage(100, 10),
        )
}

fn engine(llm: LlmRegistry) -> BenchResult<(TurnEngine, Arc<CountingEventSink>)> {
    let tools = Arc::new(ToolRegistry::new());
    tools.register(Arc::new(Lookup), Visibility::All)?;
    let sink = Arc::new(CountingEventSink::default());
    let company = CompanyProfile {
        name: "Bench".into(),
        mission: "Measure the turn engine".into(),
        policies: vec!["Be quick".into()],
        token_budget: 0,
        ..CompanyProfile::default()
    };
    let engine = TurnEngine::new(
        company,
        llm,
        Arc::new(MemoryTokenLedger::new()),
        sink.clone(),
    )
    .with_tools(tools);
    Ok((engine, sink))
}

/// Process CPU time (user + system, all threads) from /proc/self/stat.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // USER_HZ is 100 on every Linux architecture's /proc interface.
    Some(Duration::from_millis((utime + stime) * 10))
}

/// Resident set size in KiB from /proc/self/status.
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

struct Figures {
    label: &'static str,
    turns: usize,
    wall: Duration,
    cpu: Duration,
    rss_samples: Vec<u64>,
    events: u64,
}

async fn measure(
    label: &'static str,
    engine: &TurnEngine,
    sink: &CountingEventSink,
    turns: usize,
) -> BenchResult<Figures> {
    let seat = SeatProfile::new("Bench", "eng", "Engineer");
    let trigger = Trigger::new("task-bench", "bench", "What is the answer?");
    let warmup = (turns / 20).clamp(50, 500);
    for _ in 0..warmup {
        let o = engine.run_turn(&seat, &trigger).await;
        if o.decision != TurnDecision::Done {
            return Err(format!(
                "{label}: warm-up turn ended {:?}: {:?}",
                o.decision, o.failure
            )
            .into());
        }
    }
    let events_before = sink.count();
    let mut rss_samples = vec![rss_kib().unwrap_or(0)];
    let step = (turns / 10).max(1);
    let cpu0 = cpu_time().unwrap_or_default();
    let t0 = Instant::now();
    for i in 1..=turns {
        let o = engine.run_turn(&seat, &trigger).await;
        if o.decision != TurnDecision::Done {
            return Err(
                format!("{label}: turn {i} ended {:?}: {:?}", o.decision, o.failure).into(),
            );
        }
        if i % step == 0 {
            rss_samples.push(rss_kib().unwrap_or(0));
        }
    }
    let wall = t0.elapsed();
    let cpu = cpu_time().unwrap_or_default().saturating_sub(cpu0);
    Ok(Figures {
        label,
        turns,
        wall,
        cpu,
        rss_samples,
        events: sink.count() - events_before,
    })
}

fn print(figures: &[Figures]) {
    println!();
    println!(
        "| model | turns | turns/s | wall per turn | CPU per turn | events per turn | RSS after warm-up | RSS at end | RSS min..max during run |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for f in figures {
        let n = f.turns as f64;
        let first = f.rss_samples.first().copied().unwrap_or(0);
        let last = f.rss_samples.last().copied().unwrap_or(0);
        let min = f.rss_samples.iter().min().copied().unwrap_or(0);
        let max = f.rss_samples.iter().max().copied().unwrap_or(0);
        println!(
            "| {} | {} | {:.0} | {:.3} ms | {:.3} ms | {:.1} | {:.1} MiB | {:.1} MiB | {:.1}..{:.1} MiB |",
            f.label,
            f.turns,
            n / f.wall.as_secs_f64(),
            f.wall.as_secs_f64() * 1000.0 / n,
            f.cpu.as_secs_f64() * 1000.0 / n,
            f.events as f64 / n,
            first as f64 / 1024.0,
            last as f64 / 1024.0,
            min as f64 / 1024.0,
            max as f64 / 1024.0,
        );
    }
    println!();
    println!("targets: engine overhead < 0.5 ms per turn; loopback HTTP < 3 ms per turn; flat RSS");
}

struct Args {
    turns: usize,
}

fn args() -> BenchResult<Args> {
    let mut out = Args { turns: 10_000 };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => out.turns = 1_000,
            "--turns" => {
                out.turns = it
                    .next()
                    .ok_or("--turns needs a number")?
                    .parse()
                    .map_err(|e| format!("--turns: {e}"))?;
            }
            other => {
                return Err(
                    format!("unknown argument `{other}` (expected --turns N or --quick)").into(),
                );
            }
        }
    }
    if out.turns == 0 {
        return Err("--turns must be at least 1".into());
    }
    Ok(out)
}

fn main() -> BenchResult<()> {
    let args = args()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        println!(
            "turn bench: {} turns per model, one seat, plan -> lookup -> review done (4 completions, 1 tool call per turn)",
            args.turns
        );
        let mut figures = Vec::new();

        let mut llm = LlmRegistry::new();
        llm.insert(Arc::new(ScriptedProvider::new("main", "scripted", scripted)));
        let (e, sink) = engine(llm)?;
        figures.push(measure("in-process (engine overhead)", &e, &sink, args.turns).await?);
        drop(e);

        let server = FakeLlmServer::start(http_script()).await?;
        server.set_recording(false);
        let config = ProviderConfig::new("main", ProviderKind::OpenAi, "gpt-fake")
            .with_base_url(server.openai_base_url())
            .with_keys(["bench-key"]);
        let mut llm = LlmRegistry::new();
        llm.insert(build_provider(&config, &http_client()?)?);
        let (e, sink) = engine(llm)?;
        figures.push(measure("loopback HTTP (fake OpenAI server, same process)", &e, &sink, args.turns).await?);
        drop(e);

        // What a process runs with: the crewlet-telemetry subscriber (spans
        // with OpenTelemetry ids, JSON lines at INFO), export off.
        let _telemetry = crewlet_telemetry::try_init(
            TelemetryOptions::new("crewlet-turn-bench")
                .ignore_env()
                .with_writer(std::io::sink),
        )?;
        let mut llm = LlmRegistry::new();
        llm.insert(Arc::new(ScriptedProvider::new("main", "scripted", scripted)));
        let (e, sink) = engine(llm)?;
        figures.push(
            measure("in-process, telemetry on (spans, no export)", &e, &sink, args.turns).await?,
        );

        print(&figures);
        Ok(())
    })
}
