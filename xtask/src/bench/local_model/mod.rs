//! `cargo xtask bench local-model`: the in-process model (the `local`
//! provider's engine, `crewlet-llm-local`) beside llama.cpp's
//! `llama-server` serving the same GGUF (SmolLM2-135M-Instruct, Q4_1) on
//! this machine (`cargo xtask services up --only llm`).
//!
//! The work is done by `crates/crewlet-llm-local/examples/local_model_bench.rs`
//! in release mode: it loads the model, then runs each measurement on both
//! engines by turns (llama-server gets the same rendered prompt text on its
//! `/completion` endpoint, prompt cache off, and reports its own
//! `timings`), and writes `target/bench/local-model/figures.json`, which
//! this prints beside the targets: prompt tokens/s and time to first token
//! on a ~2,000-token prompt, generated tokens/s, CPU time per token, RSS of
//! the loaded model, and the cost of constrained decoding per token.
//! Targets: within 1.5x of llama-server's tokens/s, constrained decoding
//! under 10% of a token's time. Then `--turns` whole quickstart turns as a
//! new user runs them (`turn.rs`: the release `crewlet run` with no key,
//! `crewlet task send ceo ... --wait`), against a target of 20 s.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::services::config::Layout;
use crate::{cmd, http};

const MODEL: &str = "smollm2-135m-instruct";
/// llama-server's tokens/s over ours may be at most this.
const RATIO_TARGET: f64 = 1.5;
/// Grammar masks may take at most this share of a constrained token's time.
const CONSTRAIN_TARGET_PCT: f64 = 10.0;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Tokens of the long prompt (prompt tokens/s, time to first token).
    #[arg(long, default_value_t = 2000)]
    pub prompt_tokens: usize,
    /// Tokens generated per generation run.
    #[arg(long, default_value_t = 128)]
    pub gen_tokens: usize,
    /// Runs of each measurement per engine (median and best reported).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Only our figures (no llama-server).
    #[arg(long)]
    pub no_server: bool,
    /// Quickstart turns to time on the release `crewlet run` with no key,
    /// one after another (0: none).
    #[arg(long, default_value_t = 2)]
    pub turns: usize,
}

mod turn;

/// A whole quickstart turn may take at most this.
const TURN_TARGET: Duration = Duration::from_secs(20);

pub fn run(args: Args) -> Result<()> {
    let model = crewlet_models::installed(MODEL)
        .with_context(|| format!("cannot look up the model {MODEL}"))?
        .with_context(|| {
            format!(
                "the model {MODEL} is not installed; run `cargo xtask services up --only model` (or `crewlet models pull {MODEL}`)"
            )
        })?;
    let out = super::target_dir().join("bench").join("local-model");
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let figures_path = out.join("figures.json");
    let _ = std::fs::remove_file(&figures_path);

    let mut cargo = super::release_example("crewlet-llm-local", None, "local_model_bench");
    cargo
        .arg("--model")
        .arg(&model)
        .arg("--out")
        .arg(&out)
        .args([
            "--prompt-tokens",
            &args.prompt_tokens.to_string(),
            "--gen-tokens",
            &args.gen_tokens.to_string(),
            "--runs",
            &args.runs.to_string(),
        ]);
    let mut described = cmd::describe(&cargo);
    let server = if args.no_server {
        Err("--no-server".to_owned())
    } else {
        server().map_err(|e| format!("{e:#}"))
    };
    match &server {
        Ok((url, key, pid)) => {
            cargo.args(["--server", url, "--server-key", key]);
            // The key stays out of the printed command.
            described.push_str(&format!(" --server {url} --server-key ***"));
            if let Some(pid) = pid {
                cargo.args(["--server-pid", &pid.to_string()]);
                described.push_str(&format!(" --server-pid {pid}"));
            }
        }
        Err(why) => println!("bench: llama-server is not measured: {why}"),
    }
    println!("bench: {described}");
    println!("bench: load average before: {}", load_average());
    cmd::run(&mut cargo).context("the local model bench failed")?;
    let turns = if args.turns > 0 {
        println!("bench: load average before the turns: {}", load_average());
        let turns = turn::quickstart_turns(args.turns)?;
        println!("bench: load average after the turns: {}", load_average());
        turns
    } else {
        Vec::new()
    };
    report(&read_json(&figures_path)?, &args);
    for (i, t) in turns.iter().enumerate() {
        let verdict = if t.wall < TURN_TARGET { "met" } else { "MISSED" };
        println!(
            "| one whole quickstart turn ({}; `crewlet task send ceo ... --wait`, {}) | {:.1} s | - | - | under {} s | {verdict} |",
            if i == 0 { "the first" } else { "a later one" },
            t.outcome,
            t.wall.as_secs_f64(),
            TURN_TARGET.as_secs()
        );
    }
    Ok(())
}

/// llama-server's URL, first key and pid, if it answers `/health`.
fn server() -> Result<(String, String, Option<u32>)> {
    let url = crewlet_test_support::services::llm_server_url();
    let host_port = url
        .strip_prefix("http://")
        .with_context(|| format!("{url} is not an http:// URL"))?
        .trim_end_matches('/');
    let health = http::get(host_port, "/health", Duration::from_secs(5)).with_context(|| {
        format!("no llama-server at {url}; start it with `cargo xtask services up --only llm`")
    })?;
    if !health.is_success() {
        bail!("{url}/health answers {}: {}", health.status, health.body);
    }
    let key = crewlet_test_support::services::llm_server_keys()
        .into_iter()
        .next()
        .context("no llama-server key")?;
    let pid = std::fs::read_to_string(Layout::from_env().llm_pid())
        .ok()
        .and_then(|p| p.trim().parse().ok());
    Ok((url, key, pid))
}

/// The 1, 5 and 15 minute load averages.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn read_json(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// `median (best b)` of a `{median, best}` figure.
fn summary(v: &Value, decimals: usize, unit: &str) -> String {
    match (num(&v["median"]), num(&v["best"])) {
        (Some(m), Some(b)) => format!("{m:.decimals$}{unit} (best {b:.decimals$})"),
        _ => "-".to_owned(),
    }
}

/// llama-server's rate over ours (median, best) and the verdict on the
/// medians.
fn ratio(ours: &Value, theirs: &Value) -> (String, String) {
    let r = |k: &str| match (num(&ours[k]), num(&theirs[k])) {
        (Some(o), Some(t)) if o > 0.0 && t > 0.0 => Some(t / o),
        _ => None,
    };
    match (r("median"), r("best")) {
        (Some(m), Some(b)) => {
            let verdict = if m <= RATIO_TARGET { "met" } else { "MISSED" };
            (format!("{m:.2}x (best {b:.2}x)"), verdict.to_owned())
        }
        _ => ("-".to_owned(), "not measured".to_owned()),
    }
}

fn mib(kib: Option<f64>) -> String {
    kib.map_or("-".to_owned(), |k| format!("{:.0} MiB", k / 1024.0))
}

fn report(figures: &Value, args: &Args) {
    let ours = &figures["ours"];
    let server = &figures["server"];
    println!();
    println!(
        "local model: {} ({} bytes), {} threads, loaded in {:.0} ms; {} runs per engine, by turns; load average after: {}",
        figures["model"].as_str().unwrap_or(""),
        figures["file_bytes"],
        figures["threads"],
        num(&figures["load_ms"]).unwrap_or(0.0),
        args.runs,
        load_average()
    );
    println!();
    println!(
        "| figure (median, best run) | crewlet (candle, in process) | llama-server | llama-server / ours | target | verdict |"
    );
    println!("|---|---:|---:|---:|---|---|");
    // A tokens/s row: ours, the server's, their ratio against the target.
    let speed_row = |label: String, key: &str, decimals: usize| {
        let (r, verdict) = ratio(&ours[key], &server[key]);
        println!(
            "| {label} | {} | {} | {r} | within {RATIO_TARGET}x | {verdict} |",
            summary(&ours[key], decimals, ""),
            summary(&server[key], decimals, ""),
        );
    };
    speed_row(
        format!(
            "prompt tokens/s ({} tokens, cold; server: {})",
            ours["prompt_tokens"], server["prompt_tokens"]
        ),
        "prompt_tokens_per_s",
        0,
    );
    speed_row(
        format!(
            "generated tokens/s ({} tokens; server: {})",
            ours["gen_tokens"], server["gen_tokens"]
        ),
        "gen_tokens_per_s",
        1,
    );
    println!(
        "| time to first token, {} tokens (server: the whole HTTP request, n_predict 1) | {} | {} | - | - | - |",
        ours["prompt_tokens"],
        summary(&ours["ttft_ms"], 0, " ms"),
        summary(&server["ttft_ms"], 0, " ms"),
    );
    println!(
        "| time to first token, the same prompt again ({} tokens cached) | {:.0} ms | - | - | - | - |",
        figures["warm"]["cached_tokens"],
        num(&figures["warm"]["ttft_ms"]).unwrap_or(0.0),
    );
    println!(
        "| CPU ms per prompt token | {} | {} | - | - | - |",
        summary(&ours["prompt_cpu_ms_per_token"], 2, ""),
        summary(&server["prompt_cpu_ms_per_token"], 2, ""),
    );
    println!(
        "| CPU ms per generated token (the call's short prompt included) | {} | {} | - | - | - |",
        summary(&ours["gen_cpu_ms_per_token"], 1, ""),
        summary(&server["gen_cpu_ms_per_token"], 1, ""),
    );
    println!(
        "| RSS: before load -> loaded -> after the long prompt (peak) | {} -> {} -> {} ({}) | - | - | - | - |",
        mib(num(&figures["rss_before_kib"])),
        mib(num(&figures["rss_loaded_kib"])),
        mib(num(&figures["rss_after_long_prompt_kib"])),
        mib(num(&figures["peak_rss_kib"])),
    );
    let c = &figures["constrained"];
    let free = &figures["free"];
    let share = match (
        num(&c["mask_ms_per_token"]["median"]),
        num(&c["ms_per_token"]["median"]),
    ) {
        (Some(mask), Some(total)) if total > 0.0 => Some(100.0 * mask / total),
        _ => None,
    };
    let verdict = match share {
        Some(s) if s < CONSTRAIN_TARGET_PCT => "met",
        Some(_) => "MISSED",
        None => "not measured",
    };
    println!(
        "| constrained decoding: grammar mask ms per token (share of the token's time) | {} ({}) | - | - | under {CONSTRAIN_TARGET_PCT}% | {verdict} |",
        summary(&c["mask_ms_per_token"], 2, ""),
        share.map_or("-".to_owned(), |s| format!("{s:.1}%")),
    );
    println!(
        "| tool-call prompt ({} tokens): ms per token constrained ({} tokens) vs free ({} tokens, its special-token mask {}) | {} vs {} | - | - | - | - |",
        figures["call_prompt_tokens"],
        c["output_tokens"],
        free["output_tokens"],
        summary(&free["mask_ms_per_token"], 2, " ms"),
        summary(&c["ms_per_token"], 1, " ms"),
        summary(&free["ms_per_token"], 1, " ms"),
    );
}
