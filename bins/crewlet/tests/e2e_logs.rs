//! No secret reaches a log line, and the log lines are the structured JSON
//! the seed describes.
//!
//! `crewlet run cfg.yaml --import-company company.yaml --debug` runs as a
//! real process (memory queue, a fresh PostgreSQL database reached with a
//! password in its DSN, the embedded API) with its stderr in a file, so not
//! a terminal: JSON lines. Every credential it knows is a distinctive value:
//! the model API key (a `${VAR}` in the company file), the seat's Slack
//! signing secret and bot token, the GitHub webhook secret and token, the
//! API bearer token, the DSN password, and MCP credentials in the server's
//! `env` and the seat's `mcp_env`. A signed Slack webhook drives a full turn
//! (fake model, fake MCP server), reads go through the bearer token, and
//! two webhooks with bad signatures are refused. Then no secret (nor the
//! tail of one) may appear anywhere in the log, while the log must show the
//! turn (its task id, its token counts, its trace) and one secret that was
//! certainly written (the MCP server prints its identity) as `[redacted]`.

mod common;

use common::*;
use crewlet_test_support::database::FreshDatabase;
use crewlet_test_support::fake_llm::FakeLlmServer;
use serde_json::{Map, Value};

const MODEL_KEY_VAR: &str = "E2E_LOGS_MODEL_KEY";
const MODEL_KEY: &str = "e2e-model-key-7Hq2Vx9PzL4w";
const SLACK_SIGNING_SECRET: &str = "e2e-slack-signing-4Jd8Rw2Nc6Tb";
const SLACK_BOT_TOKEN: &str = "e2e-slack-bot-9Kf3Lm7Xp1Qs";
const GITHUB_WEBHOOK_SECRET: &str = "e2e-github-hook-5Vb8Nz2Wq4Er";
const GITHUB_TOKEN: &str = "e2e-github-rest-6Yh2Kd9Ws1Pa";
const API_TOKEN: &str = "e2e-api-bearer-3Ty6Ui9Op2As";
const DSN_PASSWORD: &str = "S3cr3t-dsn-pw";
const MCP_ENV_TOKEN: &str = "e2e-mcp-env-8Gh1Jk4Lz7Xc";
const MCP_ROLE_SECRET: &str = "e2e-mcp-role-2Bn5Mq8Wr3Ty";
/// The seat's MCP identity: the fake MCP server prints it on its stderr
/// (`serving stdio as ...`), which the engine relays into its log, so this
/// one is certain to reach the log writer.
const MCP_IDENTITY: &str = "e2e-mcp-identity-1Wq7Zr4Hn6Vm";

async fn get_with_token(base: &str, path: &str, token: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// The log's lines as JSON objects; panics on a line that is not one.
fn json_lines(log: &str) -> Vec<Map<String, Value>> {
    log.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match serde_json::from_str::<Value>(l) {
            Ok(Value::Object(m)) => m,
            _ => panic!("not a JSON object log line: {l}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_configured_secret_reaches_the_logs_of_a_full_turn() {
    let admin_dsn = crewlet_test_support::require!(postgres);
    let db = FreshDatabase::create(&admin_dsn).await;
    // The test server trusts local connections: any password is accepted.
    let (dsn, dsn_password) = dsn_with_password(&db.dsn, DSN_PASSWORD);
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let dir = temp_dir("logs");
    let mcp_log = dir.join("mcp.jsonl");
    let fake_mcp = crewlet_fake_mcp::binary_path().unwrap_or_else(|e| panic!("{e}"));
    let port = free_port();
    let config = format!(
        "providers:\n  database:\n    dsn: \"{dsn}\"\napi:\n  host: 127.0.0.1\n  port: {port}\n  auth:\n    tokens:\n      - id: ops\n        token: \"{API_TOKEN}\"\nsecurity:\n  mcp_commands: [\"{bin}\"]\n  company_env:\n    names: [{MODEL_KEY_VAR}]\n",
        bin = fake_mcp.display(),
    );
    std::fs::write(dir.join("cfg.yaml"), config).unwrap_or_else(|e| panic!("{e}"));
    let company = format!(
        r#"name: "Logs Co"
providers:
  llm:
    fake:
      type: openai-compatible
      model: fake-model
      base_url: "{base}"
      api_keys: ["${{{MODEL_KEY_VAR}}}"]
      timeout_seconds: 30
integrations:
  github:
    webhook_secret: "{GITHUB_WEBHOOK_SECRET}"
    token: "{GITHUB_TOKEN}"
mcp_servers:
  - name: chat
    shared: false
    command: "{bin}"
    env:
      FAKE_MCP_LOG: "{log}"
      CHAT_API_TOKEN: "{MCP_ENV_TOKEN}"
roles:
  - name: Engineer
    handle: eng
    mcp_env:
      chat:
        FAKE_MCP_IDENTITY: "{MCP_IDENTITY}"
        CHAT_SESSION_SECRET: "{MCP_ROLE_SECRET}"
    integrations:
      slack:
        signing_secret: "{SLACK_SIGNING_SECRET}"
        bot_token: "{SLACK_BOT_TOKEN}"
        bot_user_id: UENG
"#,
        base = llm.openai_base_url(),
        bin = fake_mcp.display(),
        log = mcp_log.display(),
    );
    std::fs::write(dir.join("company.yaml"), company).unwrap_or_else(|e| panic!("{e}"));

    let mut engine = Proc::spawn_env(
        "engine",
        &dir,
        &[
            "run",
            "cfg.yaml",
            "--import-company",
            "company.yaml",
            "--debug",
        ],
        &[(MODEL_KEY_VAR, MODEL_KEY)],
    );
    let base = format!("http://127.0.0.1:{port}");
    wait_for("the engine to be ready", &mut [&mut engine], || async {
        (get(&base, "/ready").await.0 == 200).then_some(())
    })
    .await;
    let (status, agents) = get_with_token(&base, "/agents", API_TOKEN).await;
    assert_eq!(status, 200, "{agents}");

    // A full turn.
    let (body, headers) = slack_mention(SLACK_SIGNING_SECRET, "Ev-logs-1");
    let (status, accepted) = post(&base, "/webhooks/slack/eng", body, &headers).await;
    assert_eq!(status, 200, "{accepted}");
    let trace_id = accepted["trace_id"].as_str().unwrap_or_default().to_owned();
    assert!(!trace_id.is_empty(), "{accepted}");
    let events = wait_for("the turn to complete", &mut [&mut engine], || async {
        let (_, body) =
            get_with_token(&base, &format!("/events/trace/{trace_id}"), API_TOKEN).await;
        let events = body["events"].as_array().cloned().unwrap_or_default();
        events
            .iter()
            .any(|e| e["type"] == "task_completed")
            .then_some(events)
    })
    .await;
    let task_id = events
        .iter()
        .find(|e| e["type"] == "task_completed")
        .and_then(|e| e["task_id"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(!task_id.is_empty(), "{events:?}");
    assert!(
        llm.keys_used()
            .iter()
            .all(|k| k.as_deref() == Some(MODEL_KEY)),
        "the model was called with the configured key: {:?}",
        llm.keys_used().len()
    );
    let posts = std::fs::read_to_string(&mcp_log).unwrap_or_default();
    assert!(
        posts.contains("tool_call") && posts.contains(MCP_IDENTITY),
        "the turn posted with the seat's identity: {posts}"
    );

    // Refused deliveries: wrong signing secrets.
    let (body, headers) = slack_mention("not-the-signing-secret", "Ev-logs-bad");
    let (status, refused) = post(&base, "/webhooks/slack/eng", body, &headers).await;
    assert_eq!(status, 401, "{refused}");
    let (body, headers) = github_issue("not-the-webhook-secret", "delivery-bad-1");
    let (status, refused) = post(&base, "/webhooks/github", body, &headers).await;
    assert_eq!(status, 401, "{refused}");
    // A read with a wrong token.
    let (status, _) = get_with_token(&base, "/agents", "e2e-wrong-bearer-token").await;
    assert!(status == 200 || status == 401, "{status}");

    assert_eq!(
        engine.stop().await,
        Some(0),
        "engine exit:\n{}",
        engine.log()
    );
    let log = engine.log();

    // No secret, in full or in part.
    for (what, secret) in [
        ("model api key", MODEL_KEY),
        ("slack signing secret", SLACK_SIGNING_SECRET),
        ("slack bot token", SLACK_BOT_TOKEN),
        ("github webhook secret", GITHUB_WEBHOOK_SECRET),
        ("github token", GITHUB_TOKEN),
        ("api bearer token", API_TOKEN),
        ("database password", dsn_password.as_str()),
        ("mcp server env credential", MCP_ENV_TOKEN),
        ("mcp_env credential", MCP_ROLE_SECRET),
        ("mcp_env identity", MCP_IDENTITY),
    ] {
        let tail = &secret[secret.len().saturating_sub(8)..];
        let leaks: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(secret) || l.contains(tail))
            .collect();
        assert!(
            leaks.is_empty(),
            "the {what} is in the log:\n{}",
            leaks.join("\n")
        );
    }

    // The log is not trivially clean: a secret was written and redacted,
    // and the turn shows, at DEBUG.
    assert!(
        log.contains("serving stdio as [redacted]"),
        "the MCP server's stderr line is relayed, redacted:\n{log}"
    );
    assert!(log.contains(&task_id), "the task id is logged:\n{log}");
    assert!(
        log.contains("llm_input_tokens"),
        "token counts are logged:\n{log}"
    );
    assert!(log.contains(&trace_id), "the trace id is logged:\n{log}");

    // Structured JSON lines with the seed's fields.
    let lines = json_lines(&log);
    assert!(lines.len() > 10, "{log}");
    for l in &lines {
        let line = Value::Object(l.clone());
        let ts = l.get("timestamp").and_then(Value::as_str).unwrap_or("");
        assert!(
            chrono::DateTime::parse_from_rfc3339(ts).is_ok(),
            "timestamp: {line}"
        );
        let level = l.get("level").and_then(Value::as_str).unwrap_or("");
        assert!(
            ["trace", "debug", "info", "warn", "error"].contains(&level),
            "level: {line}"
        );
        assert!(
            l.get("component")
                .or_else(|| l.get("target"))
                .and_then(Value::as_str)
                .is_some_and(|c| !c.is_empty()),
            "component: {line}"
        );
        assert!(l.contains_key("message"), "message: {line}");
    }
    assert!(
        lines.iter().any(|l| l["level"] == "debug"
            && l["component"]
                .as_str()
                .is_some_and(|c| c.starts_with("crewlet"))),
        "--debug logs crewlet's DEBUG lines"
    );

    // Lines logged in the spans of the task carry its trace; inside the turn
    // also the agent and role.
    let in_turn: Vec<&Map<String, Value>> = lines
        .iter()
        .filter(|l| l.get("task_id").and_then(Value::as_str) == Some(task_id.as_str()))
        .collect();
    assert!(!in_turn.is_empty(), "{log}");
    for l in &in_turn {
        let line = Value::Object((*l).clone());
        let Some(span) = l.get("span").and_then(Value::as_str) else {
            continue; // logged outside any span (e.g. the seat after its turn)
        };
        assert_eq!(
            l.get("trace_id"),
            Some(&Value::from(trace_id.as_str())),
            "{line}"
        );
        if ["turn", "phase", "llm", "tool"].contains(&span) {
            assert!(
                l.get("agent_id")
                    .and_then(Value::as_str)
                    .is_some_and(|a| !a.is_empty()),
                "{line}"
            );
            assert_eq!(l.get("role"), Some(&Value::from("Engineer")), "{line}");
        }
    }
    let finished = in_turn
        .iter()
        .find(|l| l.get("event").and_then(Value::as_str) == Some("turn_completed"))
        .unwrap_or_else(|| panic!("no turn_completed line for task {task_id}:\n{log}"));
    let line = Value::Object((*finished).clone());
    let input: u64 = TURN_USAGE.iter().map(|u| u.0).sum();
    let output: u64 = TURN_USAGE.iter().map(|u| u.1).sum();
    assert_eq!(line["llm_input_tokens"], input, "{line}");
    assert_eq!(line["llm_output_tokens"], output, "{line}");
    assert!(line["duration_ms"].is_u64(), "{line}");
    assert_eq!(line["role"], "Engineer", "{line}");
    assert!(
        line["agent_id"].as_str().is_some_and(|a| !a.is_empty()),
        "{line}"
    );
    assert_eq!(line["level"], "info", "{line}");

    let _ = std::fs::remove_dir_all(&dir);
}
