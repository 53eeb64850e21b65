//! The local model's figures for `cargo xtask bench local-model` (run in
//! release mode), beside llama-server's on the same prompts when one is
//! given: prompt tokens/s and time to first token on a long prompt (cold,
//! then with its prefix cached), generated tokens/s, CPU time per token,
//! the cost of constrained decoding per token, and the process's RSS around
//! the load.
//!
//! `local_model_bench --model M.gguf --out DIR [--prompt-tokens 2000]
//! [--gen-tokens 128] [--runs 3] [--server http://127.0.0.1:58080
//! --server-key KEY [--server-pid PID]]` writes `DIR/figures.json` and the
//! rendered prompts (`DIR/long_prompt.txt`, `DIR/gen_prompt.txt`).
//!
//! The two engines take turns run by run, so a machine whose load changes
//! (other builds on its cores) weighs on both alike; each figure is
//! reported as the median and the best run. llama-server is sent the
//! rendered prompt text on its own `/completion` endpoint without its
//! prompt cache, and its own `timings` are read; its CPU time comes from
//! `/proc/PID/stat` when its pid is given.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use crewlet_llm::{CompletionRequest, Message, SystemBlock, ToolChoice, ToolSpec};
use crewlet_llm_local::grammar::AnswerShape;
use crewlet_llm_local::template::ChatMessage;
use crewlet_llm_local::{GenerateOptions, Generated, LocalModel, prompt};
use serde_json::{Value, json};

struct Args {
    model: PathBuf,
    out: PathBuf,
    prompt_tokens: usize,
    gen_tokens: usize,
    runs: usize,
    server: Option<Server>,
}

struct Server {
    host_port: String,
    key: String,
    pid: Option<u32>,
}

fn args() -> Result<Args> {
    let mut model = None;
    let mut out = None;
    let mut prompt_tokens = 2000;
    let mut gen_tokens = 128;
    let mut runs = 3;
    let mut url = None;
    let mut key = None;
    let mut pid = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--model" => model = Some(PathBuf::from(value()?)),
            "--out" => out = Some(PathBuf::from(value()?)),
            "--prompt-tokens" => prompt_tokens = value()?.parse()?,
            "--gen-tokens" => gen_tokens = value()?.parse()?,
            "--runs" => runs = value()?.parse()?,
            "--server" => url = Some(value()?),
            "--server-key" => key = Some(value()?),
            "--server-pid" => pid = Some(value()?.parse()?),
            other => bail!("unknown argument {other}"),
        }
    }
    let server = match url {
        None => None,
        Some(url) => Some(Server {
            host_port: url
                .strip_prefix("http://")
                .with_context(|| format!("--server {url}: an http:// URL is needed"))?
                .trim_end_matches('/')
                .to_owned(),
            key: key.context("--server needs --server-key")?,
            pid,
        }),
    };
    Ok(Args {
        model: model.context("--model M.gguf is required")?,
        out: out.context("--out DIR is required")?,
        prompt_tokens,
        gen_tokens,
        runs: runs.max(1),
        server,
    })
}

/// A line of `/proc/self/status` in KiB (`VmRSS`, `VmHWM`).
fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// User plus system CPU time of process `pid` (`self` for this one).
fn cpu_time(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // Clock ticks are 100 per second on Linux.
    Some(Duration::from_millis((utime + stime) * 10))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Median and best of a figure over the runs.
#[derive(Default)]
struct Samples(Vec<f64>);

impl Samples {
    fn push(&mut self, v: f64) {
        self.0.push(v);
    }

    /// `{median, best}`; best is the highest when `higher_is_better`.
    fn summary(&self, higher_is_better: bool) -> Value {
        let mut xs = self.0.clone();
        xs.sort_by(f64::total_cmp);
        let n = xs.len();
        if n == 0 {
            return Value::Null;
        }
        let median = if n % 2 == 1 {
            xs[n / 2]
        } else {
            (xs[n / 2 - 1] + xs[n / 2]) / 2.0
        };
        let best = if higher_is_better { xs[n - 1] } else { xs[0] };
        json!({ "median": median, "best": best, "runs": n })
    }
}

/// A user message of varied sentences whose rendered chat is about
/// `target` tokens.
fn long_chat(model: &LocalModel, target: usize) -> Result<Vec<ChatMessage>> {
    let subjects = [
        "The engineer",
        "A customer",
        "The support lead",
        "Our CEO",
        "The new hire",
    ];
    let verbs = ["reviewed", "rewrote", "questioned", "shipped", "tested"];
    let objects = [
        "the billing service",
        "the quarterly report",
        "a flaky integration test",
        "the onboarding guide",
        "the search index",
    ];
    let mut text =
        String::from("Here are the notes of the week. Summarise them in three bullet points.\n\n");
    let mut chat = Vec::new();
    for i in 0.. {
        let s = subjects[i % subjects.len()];
        let v = verbs[(i / 5) % verbs.len()];
        let o = objects[(i / 25) % objects.len()];
        text.push_str(&format!(
            "{}. {s} {v} {o} on day {} and wrote down what changed. ",
            i + 1,
            i % 7 + 1
        ));
        if i % 10 == 9 {
            chat = vec![
                ChatMessage {
                    role: "system",
                    content: "You are a helpful assistant.".into(),
                },
                ChatMessage {
                    role: "user",
                    content: text.clone(),
                },
            ];
            if model.prompt_tokens(&chat)?.len() >= target {
                break;
            }
        }
    }
    Ok(chat)
}

/// Leaves the model's one cached conversation unrelated to every prompt
/// here, so the next prompt runs cold.
fn evict(model: &LocalModel) -> Result<()> {
    let tokens = model.tokenizer.encode("evict")?;
    model.generate(&tokens, None, &options(1), |_| ControlFlow::Continue(()))?;
    Ok(())
}

fn options(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        temperature: 0.0,
    }
}

/// One local generation: the answer, the time to its first piece of text
/// and the CPU time it took.
struct Timed {
    g: Generated,
    first: Duration,
    cpu: Duration,
}

fn timed(
    model: &LocalModel,
    tokens: &[u32],
    constrained: Option<&AnswerShape>,
    max_tokens: usize,
) -> Result<Timed> {
    let matcher = constrained
        .and_then(AnswerShape::grammar)
        .map(|g| model.matcher(g))
        .transpose()?;
    let cpu_before = cpu_time("self").unwrap_or_default();
    let start = Instant::now();
    let mut first = None;
    let g = model.generate(tokens, matcher, &options(max_tokens), |_| {
        first.get_or_insert_with(|| start.elapsed());
        ControlFlow::Continue(())
    })?;
    let first = first.unwrap_or_else(|| start.elapsed());
    let cpu = cpu_time("self")
        .unwrap_or_default()
        .saturating_sub(cpu_before);
    Ok(Timed { g, first, cpu })
}

/// `POST /completion` on llama-server: its answer, the wall time and the
/// server's CPU time (when its pid is known).
fn completion(server: &Server, body: &Value) -> Result<(Value, Duration, Option<Duration>)> {
    let body = body.to_string();
    let addr: SocketAddr = server
        .host_port
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {}", server.host_port))?
        .next()
        .with_context(|| format!("{} resolves to no address", server.host_port))?;
    let pid = server.pid.map(|p| p.to_string());
    let cpu_before = pid.as_deref().and_then(cpu_time);
    let started = Instant::now();
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .with_context(|| format!("cannot connect to {}", server.host_port))?;
    let head = format!(
        "POST /completion HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        server.host_port,
        server.key,
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .context("cannot read llama-server's answer")?;
    let wall = started.elapsed();
    let cpu = match (pid.as_deref().and_then(cpu_time), cpu_before) {
        (Some(after), Some(before)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("llama-server's answer has no headers")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let body = &raw[split + 4..];
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(body)?
    } else {
        body.to_vec()
    };
    let body = String::from_utf8_lossy(&body);
    if !head.starts_with("http/1.1 200") {
        bail!(
            "POST /completion: {}: {body}",
            head.lines().next().unwrap_or("")
        );
    }
    let answer: Value = serde_json::from_str(&body).context("llama-server's answer is not JSON")?;
    Ok((answer, wall, cpu))
}

/// The body of a `Transfer-Encoding: chunked` answer.
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("a chunk without its size line")?;
        let line = String::from_utf8_lossy(&rest[..line_end]);
        let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            .with_context(|| format!("a bad chunk size {line:?}"))?;
        if size == 0 {
            return Ok(out);
        }
        let data = &rest[line_end + 2..];
        out.extend_from_slice(data.get(..size).context("a chunk cut short")?);
        rest = data.get(size + 2..).unwrap_or_default();
    }
}

fn ticket_tool() -> ToolSpec {
    ToolSpec {
        name: "file_ticket".into(),
        description: "File a ticket in the team's tracker.".into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "priority": {"type": "string", "enum": ["low", "medium", "high"]},
                "estimate_hours": {"type": "integer"},
                "labels": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["title", "priority", "estimate_hours", "labels"]
        }),
    }
}

/// The figures of one engine.
#[derive(Default)]
struct Engine {
    prompt_rate: Samples,
    ttft_ms: Samples,
    prompt_cpu_ms_per_token: Samples,
    gen_rate: Samples,
    gen_cpu_ms_per_token: Samples,
    prompt_tokens: u64,
    gen_tokens: u64,
}

impl Engine {
    fn to_json(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "prompt_tokens_per_s": self.prompt_rate.summary(true),
            "ttft_ms": self.ttft_ms.summary(false),
            "prompt_cpu_ms_per_token": self.prompt_cpu_ms_per_token.summary(false),
            "gen_tokens": self.gen_tokens,
            "gen_tokens_per_s": self.gen_rate.summary(true),
            "gen_cpu_ms_per_token": self.gen_cpu_ms_per_token.summary(false),
        })
    }
}

fn main() -> Result<()> {
    let args = args()?;
    std::fs::create_dir_all(&args.out)?;
    let rss_before = status_kib("VmRSS");
    let t = Instant::now();
    let model = LocalModel::load(&args.model, None, 1)?;
    let load = t.elapsed();
    let rss_loaded = status_kib("VmRSS");
    eprintln!(
        "loaded {} in {:.0} ms; RSS {} -> {} MiB",
        args.model.display(),
        ms(load),
        rss_before / 1024,
        rss_loaded / 1024
    );

    let long = long_chat(&model, args.prompt_tokens)?;
    let long_tokens = model.prompt_tokens(&long)?;
    let long_text = model.template.render(&long)?;
    std::fs::write(args.out.join("long_prompt.txt"), &long_text)?;
    let story = vec![
        ChatMessage {
            role: "system",
            content: "You are a helpful assistant.".into(),
        },
        ChatMessage {
            role: "user",
            content:
                "Write a long story about a dragon who learns to cook. Use at least five paragraphs."
                    .into(),
        },
    ];
    let story_tokens = model.prompt_tokens(&story)?;
    let story_text = model.template.render(&story)?;
    std::fs::write(args.out.join("gen_prompt.txt"), &story_text)?;

    let mut ours = Engine {
        prompt_tokens: long_tokens.len() as u64,
        ..Default::default()
    };
    let mut theirs = Engine::default();
    let mut rss_after_long = 0;
    let mut warm = Value::Null;
    for run in 0..args.runs {
        // The long prompt, cold: prompt tokens/s and time to first token.
        evict(&model)?;
        let t = timed(&model, &long_tokens, None, 1)?;
        if t.g.cached_tokens != 0 {
            bail!(
                "run {run}: the long prompt was not cold ({} cached)",
                t.g.cached_tokens
            );
        }
        ours.prompt_rate
            .push(t.g.prompt_tokens as f64 / t.g.prompt_time.as_secs_f64());
        ours.ttft_ms.push(ms(t.first));
        ours.prompt_cpu_ms_per_token
            .push(ms(t.cpu) / t.g.prompt_tokens as f64);
        rss_after_long = rss_after_long.max(status_kib("VmRSS"));
        if run == 0 {
            // The same prompt again: all but its last token come from the
            // cache.
            let again = timed(&model, &long_tokens, None, 1)?;
            warm = json!({"cached_tokens": again.g.cached_tokens, "ttft_ms": ms(again.first)});
        }
        eprintln!(
            "run {run}: ours: {} prompt tokens in {:.0} ms (CPU {:.0} ms), first token at {:.0} ms",
            t.g.prompt_tokens,
            ms(t.g.prompt_time),
            ms(t.cpu),
            ms(t.first)
        );
        if let Some(server) = &args.server {
            let (answer, wall, cpu) = completion(
                server,
                &json!({"prompt": long_text, "n_predict": 1, "temperature": 0, "cache_prompt": false}),
            )?;
            let timings = &answer["timings"];
            let n = timings["prompt_n"].as_u64().unwrap_or(0);
            theirs.prompt_tokens = n;
            theirs
                .prompt_rate
                .push(timings["prompt_per_second"].as_f64().unwrap_or(0.0));
            theirs.ttft_ms.push(ms(wall));
            if let Some(cpu) = cpu {
                theirs
                    .prompt_cpu_ms_per_token
                    .push(ms(cpu) / n.max(1) as f64);
            }
            eprintln!(
                "run {run}: llama-server: {n} prompt tokens in {:.0} ms (CPU {}), answered in {:.0} ms",
                timings["prompt_ms"].as_f64().unwrap_or(0.0),
                cpu.map_or("?".into(), |c| format!("{:.0} ms", ms(c))),
                ms(wall)
            );
        }

        // Generation on a prompt the model answers at length.
        evict(&model)?;
        let t = timed(&model, &story_tokens, None, args.gen_tokens)?;
        let n = t.g.output_tokens.max(1) as f64;
        ours.gen_tokens = t.g.output_tokens as u64;
        ours.gen_rate.push(n / t.g.generate_time.as_secs_f64());
        // The whole call's CPU time, its short prompt included (so too for
        // llama-server).
        ours.gen_cpu_ms_per_token.push(ms(t.cpu) / n);
        eprintln!(
            "run {run}: ours: {} tokens generated in {:.0} ms (CPU {:.0} ms for the call, {:?})",
            t.g.output_tokens,
            ms(t.g.generate_time),
            ms(t.cpu),
            t.g.stop
        );
        if let Some(server) = &args.server {
            let (answer, _, cpu) = completion(
                server,
                &json!({
                    "prompt": story_text,
                    "n_predict": args.gen_tokens,
                    "temperature": 0,
                    "cache_prompt": false,
                    "ignore_eos": true,
                }),
            )?;
            let timings = &answer["timings"];
            let n = timings["predicted_n"].as_u64().unwrap_or(0);
            theirs.gen_tokens = n;
            theirs
                .gen_rate
                .push(timings["predicted_per_second"].as_f64().unwrap_or(0.0));
            if let Some(cpu) = cpu {
                theirs.gen_cpu_ms_per_token.push(ms(cpu) / n.max(1) as f64);
            }
            eprintln!(
                "run {run}: llama-server: {n} tokens generated in {:.0} ms (CPU {} for the call)",
                timings["predicted_ms"].as_f64().unwrap_or(0.0),
                cpu.map_or("?".into(), |c| format!("{:.0} ms", ms(c))),
            );
        }
    }
    // Constrained decoding: a tool-call prompt, under its grammar and free.
    let tools = vec![ticket_tool()];
    let request = CompletionRequest {
        system: vec![SystemBlock::stable(
            "You are the support lead. Track every problem you hear about.",
        )],
        messages: vec![Message::user(
            "Customers report the invoice PDF has the wrong currency symbol; it blocks billing.",
        )],
        tools: tools.clone(),
        tool_choice: ToolChoice::Required,
        ..Default::default()
    };
    let shape = AnswerShape::of(&tools, &ToolChoice::Required);
    let call_tokens = model.prompt_tokens(&prompt::chat(&request, &shape))?;
    let per_token = |constrained: bool| -> Result<Value> {
        let mut totals = Samples::default();
        let mut masks = Samples::default();
        let mut outputs = 0;
        let mut text = String::new();
        for _ in 0..args.runs {
            evict(&model)?;
            let t = timed(
                &model,
                &call_tokens,
                constrained.then_some(&shape),
                args.gen_tokens,
            )?;
            let n = t.g.output_tokens.max(1) as f64;
            totals.push(ms(t.g.generate_time) / n);
            masks.push(ms(t.g.constrain_time) / n);
            outputs = t.g.output_tokens;
            text = t.g.text;
        }
        eprintln!(
            "{} answer: {text:?}",
            if constrained { "constrained" } else { "free" }
        );
        Ok(json!({
            "output_tokens": outputs,
            "ms_per_token": totals.summary(false),
            "mask_ms_per_token": masks.summary(false),
        }))
    };
    let constrained = per_token(true)?;
    let free = per_token(false)?;

    let figures = json!({
        "model": args.model.display().to_string(),
        "file_bytes": model.file_size,
        "threads": rayon::current_num_threads(),
        "load_ms": ms(load),
        "rss_before_kib": rss_before,
        "rss_loaded_kib": rss_loaded,
        "rss_after_long_prompt_kib": rss_after_long,
        "peak_rss_kib": status_kib("VmHWM"),
        "ours": ours.to_json(),
        "server": args.server.as_ref().map(|_| theirs.to_json()),
        "warm": warm,
        "call_prompt_tokens": call_tokens.len(),
        "constrained": constrained,
        "free": free,
    });
    let path = args.out.join("figures.json");
    std::fs::write(&path, serde_json::to_string_pretty(&figures)?)?;
    eprintln!("figures written to {}", path.display());
    Ok(())
}
