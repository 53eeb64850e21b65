//! The cli-agent provider against `crewlet-fake-cli-agent`, a fake `claude
//! -p --output-format json` (crewlet-test-support): answers, tool calls,
//! typed failures, the deadline, the concurrency limit and the isolation
//! of every run (environment, working directory, seat homes).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crewlet_llm::cli_agent::{CliAgentError, ENGINE_SEAT};
use crewlet_llm::{
    CliAgentProvider, CliAgentSettings, CompletionRequest, ErrorClass, LlmError, LlmProvider,
    Message, ToolChoice, ToolSpec, with_seat,
};
use serde_json::{Value, json};

fn fake() -> PathBuf {
    crewlet_test_support::fake_cli_agent::binary_path()
        .unwrap_or_else(|e| panic!("fake cli agent: {e}"))
}

/// A fresh state directory, removed when dropped.
struct State(PathBuf);

impl State {
    fn new(logged_in: bool) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "crewlet-cli-agent-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let creds = dir.join("credentials/.claude");
        std::fs::create_dir_all(&creds).unwrap_or_else(|e| panic!("{e}"));
        if logged_in {
            std::fs::write(creds.join(".credentials.json"), b"{\"fake\":1}")
                .unwrap_or_else(|e| panic!("{e}"));
        }
        Self(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for State {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A claude-code provider running the fake, with `env` as its `cli.env`.
fn provider_with(state: &State, cli: Value) -> CliAgentProvider {
    let mut block = json!({
        "agent": "claude-code",
        "state_dir": state.path().display().to_string(),
        "timeout_seconds": 60,
        "overrides": {"binary": fake().display().to_string()},
    });
    if let (Some(b), Some(extra)) = (block.as_object_mut(), cli.as_object()) {
        for (k, v) in extra {
            if k == "overrides" {
                if let Some(o) = b.get_mut("overrides").and_then(Value::as_object_mut)
                    && let Some(more) = v.as_object()
                {
                    o.extend(more.clone());
                }
            } else {
                b.insert(k.clone(), v.clone());
            }
        }
    }
    // The engine's environment, as the provider sees it: nothing at all,
    // so no token or key of the test machine can reach the fake.
    let settings = CliAgentSettings::from_cli_block("sub", "sonnet", &block, &[], &|_| None)
        .unwrap_or_else(|e| panic!("settings: {e}"));
    CliAgentProvider::new(settings).unwrap_or_else(|e| panic!("provider: {e}"))
}

fn provider(state: &State, env: Value) -> CliAgentProvider {
    provider_with(state, json!({ "env": env }))
}

fn ask(text: &str) -> CompletionRequest {
    CompletionRequest {
        messages: vec![Message::user(text)],
        ..CompletionRequest::default()
    }
}

fn cli_error(result: Result<crewlet_llm::Completion, LlmError>) -> (ErrorClass, CliAgentError) {
    match result {
        Err(e @ LlmError::CliAgent { .. }) => {
            let class = e.class();
            match e {
                LlmError::CliAgent { source, .. } => (class, source),
                _ => unreachable!(),
            }
        }
        other => panic!("expected a cli-agent error, got {other:?}"),
    }
}

/// The `KEY=VALUE` lines of an `env`-mode answer.
fn env_answer(content: &str) -> HashMap<String, String> {
    content
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[tokio::test]
async fn an_answer_comes_back_with_the_cli_usage() -> Result<(), LlmError> {
    let state = State::new(true);
    let p = provider(
        &state,
        json!({"FAKE_CLI_ANSWER": "Hello from the subscription."}),
    );
    let c = p.complete(&ask("Say hello")).await?;
    assert_eq!(c.content, "Hello from the subscription.");
    assert!(c.tool_calls.is_empty());
    assert_eq!(
        (
            c.usage.input_tokens,
            c.usage.output_tokens,
            c.usage.cache_read_tokens
        ),
        (42, 7, 5)
    );
    assert_eq!((c.provider.as_str(), c.model.as_str()), ("sub", "sonnet"));
    // the run's transcript is conversation memory: gone; the seeded settings stay
    let home = state.path().join("seats").join(ENGINE_SEAT).join("home");
    assert!(!home.join(".claude/projects").exists());
    assert!(home.join(".claude/settings.json").is_file());
    Ok(())
}

#[tokio::test]
async fn without_usage_the_tokens_are_estimated() -> Result<(), LlmError> {
    let state = State::new(true);
    let p = provider(
        &state,
        json!({"FAKE_CLI_USAGE": "none", "FAKE_CLI_ANSWER": "x".repeat(40)}),
    );
    let c = p.complete(&ask(&"word ".repeat(100))).await?;
    assert!(c.usage.input_tokens >= 100, "{:?}", c.usage);
    assert_eq!(c.usage.output_tokens, 10);
    Ok(())
}

#[tokio::test]
async fn a_tool_call_is_read_from_the_envelope() -> Result<(), LlmError> {
    let state = State::new(true);
    let p = provider(
        &state,
        json!({"FAKE_CLI_MODE": "tool", "FAKE_CLI_TOOL_ARGS": "{\"channel\": \"general\", \"text\": \"hi\"}"}),
    );
    let request = CompletionRequest {
        tools: vec![ToolSpec {
            name: "post_message".into(),
            description: "Post to a channel".into(),
            parameters: json!({"type": "object"}),
        }],
        tool_choice: ToolChoice::Required,
        ..ask("Greet the channel")
    };
    let c = p.complete(&request).await?;
    assert_eq!(c.content, "calling post_message");
    assert_eq!(c.tool_calls.len(), 1);
    assert_eq!(c.tool_calls[0].name, "post_message");
    assert_eq!(
        c.tool_calls[0].parsed_arguments().ok(),
        Some(json!({"channel": "general", "text": "hi"}))
    );
    Ok(())
}

#[tokio::test]
async fn a_missing_or_unrunnable_binary_is_named() {
    let state = State::new(true);
    let p = provider_with(
        &state,
        json!({"overrides": {"binary": "crewlet-no-such-cli-7f3a"}}),
    );
    let (class, err) = cli_error(p.complete(&ask("hi")).await);
    assert!(matches!(err, CliAgentError::NotInstalled { .. }), "{err}");
    assert_eq!(class, ErrorClass::Fatal);
    assert!(
        err.to_string().contains("crewlet-no-such-cli-7f3a"),
        "{err}"
    );

    let plain = state.path().join("not-executable");
    std::fs::write(&plain, b"#!/bin/sh\n").unwrap_or_else(|e| panic!("{e}"));
    let p = provider_with(
        &state,
        json!({"overrides": {"binary": plain.display().to_string()}}),
    );
    let (_, err) = cli_error(p.complete(&ask("hi")).await);
    assert!(matches!(err, CliAgentError::NotExecutable { .. }), "{err}");
}

#[tokio::test]
async fn a_logged_out_cli_is_an_auth_error_that_says_how_to_log_in() {
    let state = State::new(false);
    let p = provider(&state, json!({}));
    let (class, err) = cli_error(p.complete(&ask("hi")).await);
    assert!(matches!(err, CliAgentError::LoggedOut { .. }), "{err}");
    assert_eq!(class, ErrorClass::Auth);
    assert!(err.to_string().contains("crewlet llm login sub"), "{err}");
}

#[tokio::test]
async fn other_failures_are_typed() {
    let state = State::new(true);
    let limit = provider(&state, json!({"FAKE_CLI_MODE": "limit"}));
    let (class, err) = cli_error(limit.complete(&ask("hi")).await);
    assert!(matches!(err, CliAgentError::UsageLimit { .. }), "{err}");
    assert_eq!(class, ErrorClass::RateLimit);

    // the same words inside the reply format are the model's answer
    let about_limits = provider(
        &state,
        json!({"FAKE_CLI_ANSWER": "```json\n{\"message\": \"Added a rate limit of 429 after 10 requests.\", \"tool_calls\": []}\n```"}),
    );
    let c = about_limits
        .complete(&CompletionRequest {
            tools: vec![ToolSpec {
                name: "t".into(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            }],
            ..ask("hi")
        })
        .await
        .unwrap_or_else(|e| panic!("an answer about rate limits was refused: {e}"));
    assert_eq!(c.content, "Added a rate limit of 429 after 10 requests.");

    let crash = provider(&state, json!({"FAKE_CLI_MODE": "crash"}));
    let (_, err) = cli_error(crash.complete(&ask("hi")).await);
    assert!(matches!(err, CliAgentError::Failed { .. }), "{err}");
    assert!(err.to_string().contains("status 3"), "{err}");

    let empty = provider(&state, json!({"FAKE_CLI_MODE": "empty"}));
    let (_, err) = cli_error(empty.complete(&ask("hi")).await);
    assert!(matches!(err, CliAgentError::BadOutput { .. }), "{err}");
}

fn dead(pid: &str) -> bool {
    // gone, or a zombie nobody has reaped yet
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn a_hung_cli_times_out_and_its_whole_group_is_killed() {
    let state = State::new(true);
    let pidfile = state.path().join("pids");
    let p = provider_with(
        &state,
        json!({
            "timeout_seconds": 3,
            "env": {"FAKE_CLI_MODE": "hang", "FAKE_CLI_PIDFILE": pidfile.display().to_string()}
        }),
    );
    let (class, err) = cli_error(p.complete(&ask("hi")).await);
    assert!(matches!(err, CliAgentError::Timeout { .. }), "{err}");
    assert_eq!(class, ErrorClass::Timeout);
    let pids = std::fs::read_to_string(&pidfile).unwrap_or_else(|e| panic!("pid file: {e}"));
    let pids: Vec<&str> = pids.lines().collect();
    assert_eq!(pids.len(), 2, "the fake and its child: {pids:?}");
    // SIGKILL is delivered by now; the child may still await its reaper
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pids.iter().all(|p| dead(p)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for pid in pids {
        assert!(dead(pid), "process {pid} survived the timeout");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_more_than_max_concurrent_clis_run_at_once() {
    let state = State::new(true);
    let probe = state.path().join("inflight");
    let p = provider_with(
        &state,
        json!({
            "max_concurrent": 2,
            "env": {
                "FAKE_CLI_INFLIGHT_DIR": probe.display().to_string(),
                // every run waits for all five: only the limit keeps them apart
                "FAKE_CLI_HOLD": "5",
                "FAKE_CLI_TOTAL": "5",
                // how long a run waits for the others (slots permitting)
                "FAKE_CLI_LINGER_MS": "3000"
            }
        }),
    );
    let calls = (0..5).map(|i| {
        let p = &p;
        with_seat(
            format!("seat-{i}"),
            async move { p.complete(&ask("hi")).await },
        )
    });
    for result in futures::future::join_all(calls).await {
        result.unwrap_or_else(|e| panic!("call failed: {e}"));
    }
    let seen: Vec<usize> = std::fs::read_dir(&probe)
        .unwrap_or_else(|e| panic!("{e}"))
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("max-"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
        .collect();
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert_eq!(seen.iter().max(), Some(&2), "runs alive at once: {seen:?}");
}

#[tokio::test]
async fn the_cli_gets_an_allowlisted_environment_and_its_own_home() -> Result<(), LlmError> {
    // Cargo sets these in every test process; the CLI must not inherit them.
    assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
    let state = State::new(true);
    let p = provider(
        &state,
        json!({"FAKE_CLI_MODE": "env", "OPERATOR_SETTING": "on"}),
    );
    let c = with_seat("alice", p.complete(&ask("hi"))).await?;
    let env = env_answer(&c.content);
    for leaked in ["CARGO_PKG_NAME", "CARGO_MANIFEST_DIR", "RUST_TEST_THREADS"] {
        assert!(!env.contains_key(leaked), "{leaked} leaked: {env:?}");
    }
    let home = state.path().join("seats/alice/home").display().to_string();
    assert_eq!(env.get("HOME"), Some(&home));
    assert_eq!(
        env.get("CLAUDE_CONFIG_DIR"),
        Some(&format!("{home}/.claude"))
    );
    assert_eq!(env.get("XDG_CONFIG_HOME"), Some(&format!("{home}/.config")));
    assert_eq!(
        env.get("DISABLE_AUTOUPDATER").map(String::as_str),
        Some("1")
    );
    assert_eq!(env.get("OPERATOR_SETTING").map(String::as_str), Some("on"));
    assert!(env.contains_key("PATH"));
    let tmp = env.get("TMPDIR").cloned().unwrap_or_default();
    assert!(
        tmp.starts_with(&state.path().join("seats/alice/work").display().to_string()),
        "{tmp}"
    );
    // the model reaches argv; the prompt does not (it went on stdin)
    let argv = env.get("argv").cloned().unwrap_or_default();
    assert!(
        argv.contains("--model sonnet") && argv.contains("-p"),
        "{argv}"
    );
    assert!(!argv.contains("## User"), "{argv}");
    Ok(())
}

#[tokio::test]
async fn each_call_runs_in_a_scratch_directory_that_is_removed() -> Result<(), LlmError> {
    let state = State::new(true);
    let p = provider(&state, json!({"FAKE_CLI_MODE": "env"}));
    let c = with_seat("bob", p.complete(&ask("hi"))).await?;
    let cwd = PathBuf::from(env_answer(&c.content).remove("cwd").unwrap_or_default());
    assert!(
        cwd.starts_with(state.path().join("seats/bob/work")),
        "{}",
        cwd.display()
    );
    assert!(!cwd.exists(), "{} was left behind", cwd.display());
    let again = with_seat("bob", p.complete(&ask("hi"))).await?;
    let second = env_answer(&again.content);
    assert_ne!(second.get("cwd"), Some(&cwd.display().to_string()));
    // the first run's transcript did not survive into the second
    assert_eq!(
        second.get("previous_transcript").map(String::as_str),
        Some("no")
    );
    Ok(())
}

#[tokio::test]
async fn two_seats_get_different_homes() -> Result<(), LlmError> {
    let state = State::new(true);
    let p = provider(&state, json!({"FAKE_CLI_MODE": "env"}));
    let a = env_answer(&with_seat("alice", p.complete(&ask("hi"))).await?.content);
    let b = env_answer(&with_seat("bob", p.complete(&ask("hi"))).await?.content);
    let (home_a, home_b) = (a.get("HOME"), b.get("HOME"));
    assert!(home_a.is_some() && home_b.is_some());
    assert_ne!(home_a, home_b);
    assert!(
        home_a.is_some_and(|h| h.ends_with("seats/alice/home")),
        "{home_a:?}"
    );
    assert!(
        home_b.is_some_and(|h| h.ends_with("seats/bob/home")),
        "{home_b:?}"
    );
    // both were seeded with the one shared login
    for seat in ["alice", "bob"] {
        let cred = state
            .path()
            .join(format!("seats/{seat}/home/.claude/.credentials.json"));
        assert!(cred.is_file(), "{}", cred.display());
    }
    // private to the engine's user, down to the seat directories
    #[cfg(unix)]
    for dir in [
        "seats",
        "seats/alice",
        "seats/alice/home",
        "seats/bob/cache",
    ] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(state.path().join(dir))
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0);
        assert_eq!(mode, 0o700, "{dir}: {mode:o}");
    }
    Ok(())
}

#[tokio::test]
async fn a_login_refreshed_during_a_call_is_written_back_and_a_logout_stays() -> Result<(), LlmError>
{
    let state = State::new(true);
    let shared = state.path().join("credentials/.claude/.credentials.json");
    let p = provider(&state, json!({"FAKE_CLI_REFRESH": "{\"fake\":2}"}));
    with_seat("alice", p.complete(&ask("hi"))).await?;
    assert_eq!(
        std::fs::read_to_string(&shared).ok().as_deref(),
        Some("{\"fake\":2}")
    );
    // logged out meanwhile: the seat's old copy is not seeded back, nor adopted
    std::fs::remove_file(&shared).unwrap_or_else(|e| panic!("{e}"));
    let (_, err) = cli_error(with_seat("alice", p.complete(&ask("hi"))).await);
    assert!(matches!(err, CliAgentError::LoggedOut { .. }), "{err}");
    assert!(!shared.exists());
    Ok(())
}

/// The codex profile, unchanged but for the binary: the same provider code
/// reads its JSONL events and relocates its home through `CODEX_HOME`.
#[tokio::test]
async fn the_codex_profile_runs_from_its_data_alone() -> Result<(), LlmError> {
    let state = State::new(false);
    let creds = state.path().join("credentials/.codex");
    std::fs::create_dir_all(&creds).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(creds.join("auth.json"), b"{}").unwrap_or_else(|e| panic!("{e}"));
    let block = json!({
        "agent": "codex",
        "state_dir": state.path().display().to_string(),
        "env": {"FAKE_CLI_FORMAT": "codex", "FAKE_CLI_ANSWER": "from codex"},
        "overrides": {"binary": fake().display().to_string()},
    });
    let settings = CliAgentSettings::from_cli_block("codex-sub", "o3", &block, &[], &|_| None)
        .unwrap_or_else(|e| panic!("settings: {e}"));
    let p = CliAgentProvider::new(settings).unwrap_or_else(|e| panic!("provider: {e}"));
    let c = p.complete(&ask("hi")).await?;
    assert_eq!(c.content, "from codex");
    assert_eq!(
        (
            c.usage.input_tokens,
            c.usage.output_tokens,
            c.usage.cache_read_tokens
        ),
        (42, 7, 5)
    );

    let mut block = block;
    block["env"]["FAKE_CLI_MODE"] = json!("env");
    let settings = CliAgentSettings::from_cli_block("codex-sub", "o3", &block, &[], &|_| None)
        .unwrap_or_else(|e| panic!("settings: {e}"));
    let p = CliAgentProvider::new(settings).unwrap_or_else(|e| panic!("provider: {e}"));
    let env = env_answer(&with_seat("cto", p.complete(&ask("hi"))).await?.content);
    let home = state.path().join("seats/cto/home").display().to_string();
    assert_eq!(env.get("CODEX_HOME"), Some(&format!("{home}/.codex")));
    let argv = env.get("argv").cloned().unwrap_or_default();
    assert!(
        argv.starts_with("exec --json --skip-git-repo-check --sandbox read-only -"),
        "{argv}"
    );
    assert!(argv.ends_with("--model o3"), "{argv}");

    // logged out: codex says so on stderr, still an auth error
    std::fs::remove_file(creds.join("auth.json")).unwrap_or_else(|e| panic!("{e}"));
    let (class, err) = cli_error(p.complete(&ask("hi")).await);
    assert!(matches!(err, CliAgentError::LoggedOut { .. }), "{err}");
    assert_eq!(class, ErrorClass::Auth);
    Ok(())
}

/// `crewlet validate` checks `cli.overrides` keys against the company
/// file's list of profile fields: it must be exactly `CliProfile`'s.
#[test]
fn the_validator_knows_every_profile_field() {
    let profile = crewlet_llm::cli_agent::CliProfile::default();
    let fields: Vec<String> = match serde_json::to_value(&profile) {
        Ok(Value::Object(map)) => map.keys().cloned().collect(),
        other => panic!("a profile is an object: {other:?}"),
    };
    let known: Vec<String> = crewlet_config::cli_agent::PROFILE_FIELDS
        .iter()
        .map(|f| (*f).to_owned())
        .collect();
    assert_eq!(fields, known);
}
