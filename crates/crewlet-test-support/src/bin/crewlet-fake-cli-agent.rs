//! A fake `claude` for the cli-agent provider's tests: it answers like
//! `claude -p --output-format json` (the prompt on stdin, one JSON result
//! document on stdout with the answer and usage). Standard library only.
//!
//! Knobs, all environment variables (the provider passes them through
//! `cli.env`; the fake sees nothing else of the test's environment):
//! - `FAKE_CLI_MODE`: `answer` (default), `tool` (a reply-format envelope
//!   calling `FAKE_CLI_TOOL` with `FAKE_CLI_TOOL_ARGS`), `env` (the answer is
//!   its environment, cwd and argv, one `KEY=VALUE` a line), `hang` (writes
//!   its pid and a child's pid to `FAKE_CLI_PIDFILE`, then sleeps forever),
//!   `limit` (a usage-limit notice on a clean exit), `crash` (exit 3),
//!   `empty` (prints nothing), `turn` (a whole engine turn: it calls
//!   `submit_review` (done) or `submit_plan` (direct) when the prompt offers
//!   them, and answers `FAKE_CLI_ANSWER` otherwise);
//! - `FAKE_CLI_ANSWER`: the answer of `answer` mode;
//! - `FAKE_CLI_FORMAT=codex`: prints like `codex exec --json` instead (JSONL
//!   events: the answer in an `item.completed` agent message, usage in
//!   `turn.completed`), and its login is `$CODEX_HOME/auth.json`;
//! - `FAKE_CLI_REFRESH`: rewrites its credentials file with this content,
//!   as a CLI does when it refreshes an OAuth token mid-run;
//! - `FAKE_CLI_FORBID`: comma-separated variable names; if any is in its
//!   environment it fails (exit 5) naming it, whatever the mode;
//! - `FAKE_CLI_USAGE`: `IN,OUT,CACHE_READ` tokens to report (default
//!   `42,7,5`); `none` reports no usage;
//! - `FAKE_CLI_INFLIGHT_DIR`, `FAKE_CLI_HOLD`, `FAKE_CLI_TOTAL`,
//!   `FAKE_CLI_LINGER_MS`: concurrency probe. Each run leaves a `run-PID`
//!   marker while alive and stays until `HOLD` markers exist at once, or
//!   `TOTAL` runs have started, or `LINGER_MS` (default 1000) have passed,
//!   recording the most markers it saw in `max-PID`. The linger only widens
//!   the window in which runs overlap; nothing is timed.
//!
//! Without `$CLAUDE_CONFIG_DIR/.credentials.json` (else
//! `$HOME/.claude/.credentials.json`) or `CLAUDE_CODE_OAUTH_TOKEN` it says
//! it is not logged in and exits 1, as the real CLI does. Every run writes a
//! transcript to `$CLAUDE_CONFIG_DIR/projects/fake/session.jsonl` (which
//! the provider must prune) and reports in `env` mode whether a previous
//! run's transcript was still there. `--version`, `setup-token` and
//! `/login` behave like the real ones, minus the browser.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn config_dir() -> PathBuf {
    match var("CLAUDE_CONFIG_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(var("HOME").unwrap_or_else(|| ".".into())).join(".claude"),
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn result_doc(text: &str, is_error: bool) -> String {
    let usage = match var("FAKE_CLI_USAGE").as_deref() {
        Some("none") => String::new(),
        other => {
            let n: Vec<u64> = other
                .unwrap_or("42,7,5")
                .split(',')
                .map(|p| p.trim().parse().unwrap_or(0))
                .collect();
            let at = |i: usize| n.get(i).copied().unwrap_or(0);
            format!(
                ",\"usage\":{{\"input_tokens\":{},\"output_tokens\":{},\"cache_read_input_tokens\":{},\"cache_creation_input_tokens\":0}}",
                at(0),
                at(1),
                at(2)
            )
        }
    };
    format!(
        "{{\"type\":\"result\",\"subtype\":\"{}\",\"is_error\":{is_error},\"result\":{},\"session_id\":\"fake\"{usage}}}",
        if is_error { "error" } else { "success" },
        json_string(text)
    )
}

fn sleep_forever() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Starts a child that sleeps too, writes both pids to `FAKE_CLI_PIDFILE`,
/// and never answers.
fn hang() -> ! {
    let child = std::env::current_exe()
        .and_then(|exe| Command::new(exe).env("FAKE_CLI_MODE", "sleep").spawn());
    if let Some(pidfile) = var("FAKE_CLI_PIDFILE") {
        let mut pids = std::process::id().to_string();
        if let Ok(child) = &child {
            pids.push_str(&format!("\n{}", child.id()));
        }
        let _ = std::fs::write(pidfile, pids);
    }
    sleep_forever();
}

fn codex() -> bool {
    var("FAKE_CLI_FORMAT").as_deref() == Some("codex")
}

fn logged_in() -> bool {
    if codex() {
        let dir = var("CODEX_HOME").map_or_else(|| PathBuf::from(".codex"), PathBuf::from);
        return dir.join("auth.json").is_file();
    }
    var("CLAUDE_CODE_OAUTH_TOKEN").is_some() || config_dir().join(".credentials.json").is_file()
}

/// `codex exec --json` output: a few events, one JSON object a line.
fn codex_events(text: &str) -> String {
    let usage = var("FAKE_CLI_USAGE").unwrap_or_else(|| "42,7,5".into());
    let n: Vec<u64> = usage
        .split(',')
        .map(|p| p.trim().parse().unwrap_or(0))
        .collect();
    let at = |i: usize| n.get(i).copied().unwrap_or(0);
    [
        "{\"type\":\"thread.started\",\"thread_id\":\"fake\"}".to_owned(),
        "{\"type\":\"turn.started\"}".to_owned(),
        format!(
            "{{\"type\":\"item.completed\",\"item\":{{\"id\":\"item_0\",\"type\":\"agent_message\",\"text\":{}}}}}",
            json_string(text)
        ),
        format!(
            "{{\"type\":\"turn.completed\",\"usage\":{{\"input_tokens\":{},\"cached_input_tokens\":{},\"output_tokens\":{}}}}}",
            at(0),
            at(2),
            at(1)
        ),
    ]
    .join("\n")
}

/// The concurrency probe: see the module docs.
fn hold(dir: &Path) {
    let pid = std::process::id();
    let _ = std::fs::create_dir_all(dir);
    let marker = dir.join(format!("run-{pid}"));
    let _ = std::fs::write(dir.join(format!("started-{pid}")), b"");
    let _ = std::fs::write(&marker, b"");
    let want: usize = var("FAKE_CLI_HOLD")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let total: usize = var("FAKE_CLI_TOTAL")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let linger = Duration::from_millis(
        var("FAKE_CLI_LINGER_MS")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000),
    );
    let started = std::time::Instant::now();
    let count = |prefix: &str| {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                    .count()
            })
            .unwrap_or(0)
    };
    let mut max = 0;
    loop {
        let alive = count("run-");
        max = max.max(alive);
        if alive >= want || count("started-") >= total || started.elapsed() >= linger {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // one more look, so a run that arrived together with us is counted
    max = max.max(count("run-"));
    let _ = std::fs::write(dir.join(format!("max-{pid}")), max.to_string());
    let _ = std::fs::remove_file(&marker);
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--version") {
        println!("9.9.9 (Fake Claude Code)");
        return ExitCode::SUCCESS;
    }
    match args.first().map(String::as_str) {
        Some("setup-token") => {
            println!("Open the browser to log in...");
            println!("Your OAuth token (valid for one year):");
            println!("sk-ant-oat01-fakefakefakefakefakefakefake0123");
            println!("Store this token securely.");
            return ExitCode::SUCCESS;
        }
        Some("/login") => {
            let dir = config_dir();
            let written = std::fs::create_dir_all(&dir).and_then(|()| {
                std::fs::write(dir.join(".credentials.json"), b"{\"fake\":\"login\"}")
            });
            return if written.is_ok() {
                println!("Login successful.");
                ExitCode::SUCCESS
            } else {
                eprintln!("cannot write credentials");
                ExitCode::from(1)
            };
        }
        _ => {}
    }
    let leaked: Vec<String> = var("FAKE_CLI_FORBID")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty() && std::env::var_os(n).is_some())
        .map(str::to_owned)
        .collect();
    if !leaked.is_empty() {
        eprintln!(
            "fake cli: leaked into my environment: {}",
            leaked.join(", ")
        );
        return ExitCode::from(5);
    }
    let mode = var("FAKE_CLI_MODE").unwrap_or_else(|| "answer".into());
    if mode == "sleep" {
        sleep_forever();
    }
    if mode == "hang" {
        // first thing, so the pids are on disk long before any deadline
        hang();
    }
    let mut prompt = String::new();
    let _ = std::io::stdin().read_to_string(&mut prompt);

    if !logged_in() {
        if codex() {
            eprintln!("Not logged in. Run `codex login`.");
        } else {
            println!("{}", result_doc("Not logged in · Please run /login", true));
        }
        return ExitCode::from(1);
    }
    if let Some(content) = var("FAKE_CLI_REFRESH") {
        let _ = std::fs::write(config_dir().join(".credentials.json"), content);
    }
    let transcript = config_dir()
        .join("projects")
        .join("fake")
        .join("session.jsonl");
    let previous = transcript.exists();
    if let Some(parent) = transcript.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let _ = std::fs::write(&transcript, prompt.as_bytes());

    if let Some(dir) = var("FAKE_CLI_INFLIGHT_DIR") {
        hold(Path::new(&dir));
    }
    let call = |name: &str, args: &str| {
        format!(
            "```json\n{{\"message\": \"\", \"tool_calls\": [{{\"name\": {}, \"arguments\": {args}}}]}}\n```",
            json_string(name)
        )
    };
    let offers = |name: &str| prompt.contains(&format!("\"name\": \"{name}\""));
    let answer = match mode.as_str() {
        "turn" if offers("submit_review") => call(
            "submit_review",
            r#"{"decision": "done", "notes": "ok", "completed_work": "answered", "final_artifact": "answered"}"#,
        ),
        "turn" if offers("submit_plan") => call(
            "submit_plan",
            r#"{"decision": "direct", "reasoning": "a simple question", "steps": [{"intent": "answer"}]}"#,
        ),
        "turn" => var("FAKE_CLI_ANSWER").unwrap_or_else(|| "done".into()),
        "tool" => {
            let name = var("FAKE_CLI_TOOL").unwrap_or_else(|| "post_message".into());
            let args = var("FAKE_CLI_TOOL_ARGS").unwrap_or_else(|| "{\"text\":\"hi\"}".into());
            format!(
                "I will call the tool.\n```json\n{{\"message\": \"calling {name}\", \"tool_calls\": [{{\"name\": {}, \"arguments\": {args}}}]}}\n```",
                json_string(&name)
            )
        }
        "env" => {
            let env: BTreeMap<String, String> = std::env::vars().collect();
            let mut lines: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let cwd = std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default();
            lines.push(format!("cwd={cwd}"));
            lines.push(format!("argv={}", args.join(" ")));
            lines.push(format!(
                "previous_transcript={}",
                if previous { "yes" } else { "no" }
            ));
            // scratch the cwd, so a test can check the directory goes
            let _ = std::fs::write("scratch.txt", b"left behind");
            lines.join("\n")
        }
        "limit" => "Claude usage limit reached. Your limit will reset at 4pm (UTC).".into(),
        "crash" => {
            eprintln!("fake cli: internal error, giving up");
            return ExitCode::from(3);
        }
        "empty" => return ExitCode::SUCCESS,
        _ => var("FAKE_CLI_ANSWER").unwrap_or_else(|| "fake answer".into()),
    };
    let mut out = std::io::stdout().lock();
    let printed = if codex() {
        codex_events(&answer)
    } else {
        result_doc(&answer, false)
    };
    let _ = writeln!(out, "{printed}");
    ExitCode::SUCCESS
}
