//! `cargo xtask bench tokens`: what one reference turn sends to the model.
//!
//! The reference turn (`xtask/assets/tokens/reference.json`): the engineer
//! seat of a small company file, woken by a GitHub issue assigned to it,
//! three domain tools, and a scripted model (Plan -> submit_plan, Execute ->
//! three tool calls and a report, Review -> submit_review done). It runs
//! `--iterations` times on one engine; a recording in-process model keeps
//! every request as the OpenAI chat completions body the engine would send.
//!
//! Per phase it prints the requests, prompt tokens (OpenAI's `o200k_base`
//! BPE through `tiktoken-rs`), the part of them that is the tools schema,
//! the script's completion tokens, the bytes of the request bodies and the
//! cached-prefix share (see [`cache_prefix`]). With `--original FILE` (the
//! requests the original engine sent on the same turn, recorded by
//! `xtask/assets/tokens/original_turn.py`) it prints the same table for
//! the original, counted the same way.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use crewlet_config::{Company, Organization};
use crewlet_llm::{
    Completion, CompletionRequest, LlmError, LlmProvider, LlmRegistry, Message, OpenAiProvider,
    ProviderConfig, ProviderKind, ToolCall, http_client,
};
use crewlet_store::MemoryTokenLedger;
use crewlet_turn::{
    CompanyProfile, CountingEventSink, SeatProfile, Tool, ToolAnnotations, ToolContext, ToolError,
    ToolOutput, ToolRegistry, Trigger, TurnDecision, TurnEngine, Visibility,
};
use parking_lot::Mutex;
use serde_json::Value;
use tiktoken_rs::CoreBPE;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// OpenAI's prompt cache: nothing below 1,024 tokens, then 128-token steps.
const OPENAI_CACHE_MIN: usize = 1024;
const OPENAI_CACHE_STEP: usize = 128;

/// One request as the model saw it.
#[derive(Clone, Debug)]
struct Recorded {
    iteration: u32,
    phase: String,
    /// The OpenAI chat completions request body.
    body: Value,
    /// What the script answered: text, then `name(arguments)` per call.
    completion: Vec<String>,
}

/// A domain tool of the reference turn: fixed output, declared read-only or not.
struct RefTool {
    name: String,
    description: String,
    parameters: Value,
    read_only: bool,
    output: String,
}

#[async_trait]
impl Tool for RefTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn schema(&self) -> Value {
        self.parameters.clone()
    }
    fn annotations(&self) -> ToolAnnotations {
        if self.read_only {
            ToolAnnotations::read_only()
        } else {
            ToolAnnotations::default()
        }
    }
    async fn invoke(&self, _: &ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(self.output.clone()))
    }
}

/// The scripted model: answers by phase and keeps every request.
struct Recorder {
    script: Value,
    wire: OpenAiProvider,
    iteration: Mutex<u32>,
    requests: Mutex<Vec<Recorded>>,
}

fn phase_of(request: &CompletionRequest) -> &'static str {
    let system = request
        .system
        .first()
        .map(|b| b.text.as_str())
        .unwrap_or("");
    for (marker, phase) in [
        ("# Phase: Plan", "plan"),
        ("# Phase: Execute", "execute"),
        ("# Phase: Review", "review"),
    ] {
        if system.contains(marker) {
            return phase;
        }
    }
    "other"
}

fn call(id: String, name: &str, args: &Value) -> Completion {
    Completion {
        tool_calls: vec![ToolCall {
            id,
            name: name.to_owned(),
            arguments: args.to_string(),
        }],
        ..Completion::default()
    }
}

impl Recorder {
    fn answer(&self, phase: &str, request: &CompletionRequest) -> Result<Completion, LlmError> {
        let script = |path: &str| {
            self.script.pointer(path).ok_or_else(|| LlmError::Decode {
                provider: "recorder".into(),
                message: format!("reference.json has no script{path}"),
            })
        };
        Ok(match phase {
            "plan" => call("call_plan".into(), "submit_plan", script("/plan")?),
            "review" => call("call_review".into(), "submit_review", script("/review")?),
            "execute" => {
                let done = request
                    .messages
                    .iter()
                    .filter(|m| matches!(m, Message::Tool { .. }))
                    .count();
                match script("/execute")?.get(done) {
                    Some(step) => call(
                        format!("call_{done}"),
                        step.get("tool").and_then(Value::as_str).unwrap_or_default(),
                        step.get("arguments").unwrap_or(&Value::Null),
                    ),
                    None => Completion {
                        content: script("/execute_final")?
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        ..Completion::default()
                    },
                }
            }
            _ => Completion::default(),
        })
    }
}

#[async_trait]
impl LlmProvider for Recorder {
    fn name(&self) -> &str {
        "main"
    }
    fn model(&self) -> &str {
        "gpt-4.1-mini"
    }
    async fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError> {
        let phase = phase_of(request);
        let answer = self.answer(phase, request)?;
        let mut completion = Vec::new();
        if !answer.content.is_empty() {
            completion.push(answer.content.clone());
        }
        for c in &answer.tool_calls {
            completion.push(format!("{}({})", c.name, c.arguments));
        }
        self.requests.lock().push(Recorded {
            iteration: *self.iteration.lock(),
            phase: phase.to_owned(),
            body: self.wire.body(request, false),
            completion,
        });
        Ok(answer)
    }
}

fn text<'a>(v: &'a Value, path: &str) -> BenchResult<&'a str> {
    v.pointer(path)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("reference.json: {path} must be a string").into())
}

fn seat_profile(company: &Company, handle: &str) -> BenchResult<SeatProfile> {
    let org = Organization::new(company);
    let seat = org
        .seat(handle)
        .ok_or_else(|| format!("the company has no seat `{handle}`"))?;
    Ok(crewlet_engine::seat_profile(company, &org, seat))
}

/// Runs the reference turn `iterations` times on our engine.
async fn run_ours(args: &Args, reference: &Value) -> BenchResult<Vec<Recorded>> {
    let root = args.root.clone();
    let company = Company::load(&root.join(text(reference, "/company")?))?;
    let seat = seat_profile(&company, text(reference, "/seat")?)?;
    let tools = Arc::new(ToolRegistry::new());
    for t in reference
        .get("tools")
        .and_then(Value::as_array)
        .ok_or("reference.json: tools must be a list")?
    {
        tools.register(
            Arc::new(RefTool {
                name: text(t, "/name")?.to_owned(),
                description: text(t, "/description")?.to_owned(),
                parameters: t.get("parameters").cloned().unwrap_or(Value::Null),
                read_only: t.get("read_only").and_then(Value::as_bool).unwrap_or(false),
                output: text(t, "/output")?.to_owned(),
            }),
            Visibility::All,
        )?;
    }
    let config = ProviderConfig::new("main", ProviderKind::OpenAi, "gpt-4.1-mini");
    let recorder = Arc::new(Recorder {
        script: reference.get("script").cloned().unwrap_or(Value::Null),
        wire: OpenAiProvider::new(&config, http_client()?)?,
        iteration: Mutex::new(0),
        requests: Mutex::new(Vec::new()),
    });
    let mut llm = LlmRegistry::new();
    llm.insert(recorder.clone());
    let profile = CompanyProfile {
        name: company.name.clone(),
        mission: company.mission.clone().unwrap_or_default(),
        vision: company.vision.clone().unwrap_or_default(),
        policies: company.policies.clone(),
        ..CompanyProfile::default()
    };
    let engine = TurnEngine::new(
        profile,
        llm,
        Arc::new(MemoryTokenLedger::new()),
        Arc::new(CountingEventSink::default()),
    )
    .with_tools(tools);
    for i in 1..=args.iterations {
        *recorder.iteration.lock() = i;
        // Each wake is a new task, as a second issue assigned later would be.
        let mut trigger = Trigger::new(
            format!("task-{i}"),
            text(reference, "/trigger/source")?,
            text(reference, "/trigger/content")?,
        );
        trigger.sender = Some(text(reference, "/trigger/sender")?.to_owned());
        trigger.channel = Some(text(reference, "/trigger/channel")?.to_owned());
        let outcome = engine.run_turn(&seat, &trigger).await;
        if outcome.decision != TurnDecision::Done {
            return Err(format!(
                "reference turn {i} ended {:?}: {:?}",
                outcome.decision, outcome.failure
            )
            .into());
        }
    }
    let requests = std::mem::take(&mut *recorder.requests.lock());
    Ok(requests)
}

/// The original's requests, as original_turn.py wrote them.
fn read_original(path: &PathBuf) -> BenchResult<Vec<Recorded>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
    let mut out = Vec::new();
    for r in v
        .get("requests")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{} has no requests list", path.display()))?
    {
        let completion = r.get("completion");
        let mut parts = Vec::new();
        if let Some(c) = completion
            .and_then(|c| c.get("content"))
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
        {
            parts.push(c.to_owned());
        }
        for c in completion
            .and_then(|c| c.get("tool_calls"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            parts.push(format!(
                "{}({})",
                c.get("name").and_then(Value::as_str).unwrap_or_default(),
                c.get("arguments")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            ));
        }
        out.push(Recorded {
            iteration: r.get("iteration").and_then(Value::as_u64).unwrap_or(0) as u32,
            phase: r
                .get("phase")
                .and_then(Value::as_str)
                .unwrap_or("other")
                .to_owned(),
            body: r.get("body").cloned().unwrap_or(Value::Null),
            completion: parts,
        });
    }
    Ok(out)
}

/// The token figures of one request.
struct Counted {
    /// Messages: 3 per message + role + content + each tool call's name
    /// and arguments (+ tool_call_id), + 3 for the reply (OpenAI's
    /// counting recipe), plus `tools`.
    prompt: usize,
    /// Tokens of the `tools` array as sent (JSON).
    tools: usize,
    completion: usize,
    bytes: usize,
    /// The prompt as a prefix cache sees it: the tools JSON, then each
    /// message (role, content, tool calls) in order.
    sequence: Vec<u32>,
}

fn count(bpe: &CoreBPE, r: &Recorded) -> Counted {
    let tokens = |s: &str| bpe.encode_ordinary(s);
    let mut sequence = Vec::new();
    let mut tools = 0;
    if let Some(t) = r.body.get("tools") {
        let t = tokens(&t.to_string());
        tools = t.len();
        sequence.extend(t);
    }
    let mut messages = 3;
    for m in r
        .body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let mut rendered = String::new();
        rendered.push_str(m.get("role").and_then(Value::as_str).unwrap_or_default());
        rendered.push('\n');
        rendered.push_str(m.get("content").and_then(Value::as_str).unwrap_or_default());
        if let Some(id) = m.get("tool_call_id").and_then(Value::as_str) {
            rendered.push('\n');
            rendered.push_str(id);
        }
        for c in m
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let f = c.get("function");
            let field = |k: &str| {
                f.and_then(|f| f.get(k))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            };
            rendered.push('\n');
            rendered.push_str(field("name"));
            rendered.push_str(field("arguments"));
        }
        let t = tokens(&rendered);
        messages += 3 + t.len();
        sequence.extend(t);
    }
    Counted {
        prompt: messages + tools,
        tools,
        completion: r.completion.iter().map(|c| tokens(c).len()).sum(),
        bytes: serde_json::to_vec(&r.body).map(|b| b.len()).unwrap_or(0),
        sequence,
    }
}

/// Cached prefix of each request: the longest common token prefix with any
/// earlier request of the same engine (a provider cache keeps every prefix
/// it has seen within its lifetime), as OpenAI bills it too (0 below
/// 1,024 tokens, then whole 128-token steps).
fn cache_prefix(counted: &[Counted]) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(counted.len());
    for (i, c) in counted.iter().enumerate() {
        let shared = counted[..i]
            .iter()
            .map(|e| {
                e.sequence
                    .iter()
                    .zip(&c.sequence)
                    .take_while(|(a, b)| a == b)
                    .count()
            })
            .max()
            .unwrap_or(0);
        let billed = if shared < OPENAI_CACHE_MIN {
            0
        } else {
            OPENAI_CACHE_MIN + (shared - OPENAI_CACHE_MIN) / OPENAI_CACHE_STEP * OPENAI_CACHE_STEP
        };
        out.push((shared, billed));
    }
    out
}

#[derive(Default)]
struct Row {
    requests: usize,
    prompt: usize,
    tools: usize,
    completion: usize,
    bytes: usize,
    cached_first: usize,
    prompt_first: usize,
    cached_warm: usize,
    billed_warm: usize,
    prompt_warm: usize,
}

fn pct(part: usize, whole: usize) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.0}%", part as f64 * 100.0 / whole as f64)
    }
}

/// The per-phase table of one engine: tokens and bytes of the first turn,
/// cached-prefix shares of the first turn (cold cache) and of the later
/// ones (warm).
fn table(engine: &str, bpe: &CoreBPE, requests: &[Recorded]) -> Vec<String> {
    let counted: Vec<Counted> = requests.iter().map(|r| count(bpe, r)).collect();
    let cached = cache_prefix(&counted);
    let first = requests.iter().map(|r| r.iteration).min().unwrap_or(0);
    let mut rows: BTreeMap<usize, (String, Row)> = BTreeMap::new();
    let order = |p: &str| match p {
        "plan" => 0,
        "execute" => 1,
        "review" => 2,
        _ => 3,
    };
    for ((r, c), (shared, billed)) in requests.iter().zip(&counted).zip(&cached) {
        let (_, row) = rows
            .entry(order(&r.phase))
            .or_insert_with(|| (r.phase.clone(), Row::default()));
        if r.iteration == first {
            row.requests += 1;
            row.prompt += c.prompt;
            row.tools += c.tools;
            row.completion += c.completion;
            row.bytes += c.bytes;
            row.cached_first += shared;
            row.prompt_first += c.sequence.len();
        } else {
            row.cached_warm += shared;
            row.billed_warm += billed;
            row.prompt_warm += c.sequence.len();
        }
    }
    let mut total = Row::default();
    let mut lines = Vec::new();
    let line = |phase: &str, r: &Row| {
        format!(
            "| {engine} | {phase} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.requests,
            r.prompt,
            r.tools,
            r.completion,
            r.bytes,
            pct(r.cached_first, r.prompt_first),
            pct(r.cached_warm, r.prompt_warm),
            pct(r.billed_warm, r.prompt_warm),
        )
    };
    for (phase, r) in rows.values() {
        lines.push(line(phase, r));
        total.requests += r.requests;
        total.prompt += r.prompt;
        total.tools += r.tools;
        total.completion += r.completion;
        total.bytes += r.bytes;
        total.cached_first += r.cached_first;
        total.prompt_first += r.prompt_first;
        total.cached_warm += r.cached_warm;
        total.billed_warm += r.billed_warm;
        total.prompt_warm += r.prompt_warm;
    }
    lines.push(line("**turn**", &total));
    lines
}

/// Whether each phase's system message starts the same in every turn: the
/// bytes of the common prefix of the first request of each phase across
/// iterations, against the whole system message.
fn system_stability(requests: &[Recorded]) -> Vec<String> {
    let mut first: BTreeMap<(String, u32), String> = BTreeMap::new();
    for r in requests {
        let system = r
            .body
            .pointer("/messages/0/content")
            .and_then(Value::as_str)
            .unwrap_or_default();
        first
            .entry((r.phase.clone(), r.iteration))
            .or_insert_with(|| system.to_owned());
    }
    let mut by_phase: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
    for ((phase, _), system) in &first {
        by_phase.entry(phase.as_str()).or_default().push(system);
    }
    by_phase
        .into_iter()
        .map(|(phase, systems)| {
            let head = systems[0].as_bytes();
            let common = systems
                .iter()
                .map(|s| {
                    s.as_bytes()
                        .iter()
                        .zip(head)
                        .take_while(|(a, b)| a == b)
                        .count()
                })
                .min()
                .unwrap_or(0);
            let identical = systems.iter().all(|s| *s == systems[0]);
            format!(
                "{phase}: system message {} bytes, {} across {} turns (common prefix {} bytes)",
                head.len(),
                if identical {
                    "byte-identical"
                } else {
                    "differs"
                },
                systems.len(),
                common
            )
        })
        .collect()
}

struct Args {
    root: PathBuf,
    reference: PathBuf,
    iterations: u32,
    original: Option<PathBuf>,
    original_note: Option<String>,
}

fn args() -> BenchResult<Args> {
    let mut out = Args {
        root: PathBuf::from("."),
        reference: PathBuf::from("xtask/assets/tokens/reference.json"),
        iterations: 3,
        original: None,
        original_note: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--root" => out.root = PathBuf::from(value()?),
            "--reference" => out.reference = PathBuf::from(value()?),
            "--original" => out.original = Some(PathBuf::from(value()?)),
            "--original-unavailable" => out.original_note = Some(value()?),
            "--iterations" => {
                out.iterations = value()?.parse().map_err(|e| format!("--iterations: {e}"))?;
            }
            other => {
                return Err(format!(
                    "unknown argument `{other}` (expected --root DIR, --reference FILE, \
                     --iterations N, --original FILE or --original-unavailable WHY)"
                )
                .into());
            }
        }
    }
    if out.iterations < 2 {
        return Err("--iterations must be at least 2 (the cache needs a second turn)".into());
    }
    Ok(out)
}

fn main() -> BenchResult<()> {
    let args = args()?;
    let path = args.root.join(&args.reference);
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?,
    )
    .map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let ours = runtime.block_on(run_ours(&args, &reference))?;
    let bpe = tiktoken_rs::o200k_base_singleton();

    println!(
        "tokens bench: reference turn (seat `{}` of {}, trigger: {} from {}), {} turns per engine, \
         tokenizer o200k_base",
        text(&reference, "/seat")?,
        text(&reference, "/company")?,
        text(&reference, "/trigger/source")?,
        text(&reference, "/trigger/sender")?,
        args.iterations
    );
    println!();
    println!(
        "| engine | phase | requests | prompt tokens | of which tools schema | completion tokens | bytes sent | cached prefix, turn 1 | cached prefix, turns 2+ | OpenAI-cached, turns 2+ |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for line in table("ours", bpe, &ours) {
        println!("{line}");
    }
    let original = match (&args.original, &args.original_note) {
        (Some(file), _) => Some(read_original(file)?),
        (None, _) => None,
    };
    if let Some(original) = &original {
        for line in table("original", bpe, original) {
            println!("{line}");
        }
    }
    println!();
    println!(
        "Requests, tokens and bytes are one turn's (the first); cached-prefix shares are of prompt tokens."
    );
    println!("system prefix stability, ours:");
    for line in system_stability(&ours) {
        println!("  {line}");
    }
    match &original {
        Some(original) => {
            println!("system prefix stability, original:");
            for line in system_stability(original) {
                println!("  {line}");
            }
        }
        None => println!(
            "original: comparison unavailable ({})",
            args.original_note
                .as_deref()
                .unwrap_or("no --original file given")
        ),
    }
    Ok(())
}
