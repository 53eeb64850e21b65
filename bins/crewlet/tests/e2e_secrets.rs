//! The secret store end to end, as an operator uses it: `crewlet secrets
//! keygen`, a bootstrap `secrets` keyring, `crewlet secrets set` (value on
//! stdin) and `list` against a fresh PostgreSQL database, then `crewlet run`
//! on a company whose model key and Slack signing secret are `${NAME}`s that
//! only the store answers (the process environment has neither). A signed
//! Slack mention drives a full turn: the API verified the signature with the
//! stored secret and the model was called with the stored key. No stored
//! value reaches the log, the listing or the table in the clear. Then the
//! same store under the wrong key material stops `crewlet run` at start with
//! an error naming the key id, and `rekey` moves every secret to a new key.

mod common;

use std::io::Write as _;
use std::process::Stdio;

use common::*;
use crewlet_test_support::database::FreshDatabase;
use crewlet_test_support::fake_llm::FakeLlmServer;
use serde_json::Value;

const KEY_VAR: &str = "E2E_SECRETS_KEY";
const MODEL_KEY: &str = "e2e-stored-model-key-4Rt8Yu2Io6Pa";
const SLACK_SIGNING: &str = "e2e-stored-slack-signing-7Df3Gh9Jk1";

/// `crewlet secrets keygen`'s key (its first line).
async fn keygen(id: &str) -> String {
    let mut cmd = crewlet();
    cmd.args(["secrets", "keygen", "--key-id", id]);
    let out = output(cmd).await;
    assert!(out.status.success(), "{}", text(&out));
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        printed.contains(&format!("active_key_id: \"{id}\"")),
        "{printed}"
    );
    printed.lines().next().unwrap_or_default().trim().to_owned()
}

/// `crewlet secrets ARGS --config cfg.yaml` in `dir` with the key in the
/// environment and `stdin` piped in.
async fn secrets(
    dir: &std::path::Path,
    key: &str,
    args: &[&str],
    stdin: &str,
) -> std::process::Output {
    let mut cmd = crewlet();
    cmd.arg("secrets")
        .args(args)
        .args(["--config", "cfg.yaml"])
        .current_dir(dir)
        .env(KEY_VAR, key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let stdin = stdin.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{e}"));
        if let Some(mut pipe) = child.stdin.take() {
            pipe.write_all(stdin.as_bytes())
                .unwrap_or_else(|e| panic!("{e}"));
        }
        child.wait_with_output().unwrap_or_else(|e| panic!("{e}"))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stored_secrets_answer_the_company_and_never_show() {
    let admin_dsn = crewlet_test_support::require!(postgres);
    let db = FreshDatabase::create(&admin_dsn).await;
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let key = keygen("k1").await;
    assert_eq!(key.len(), 44, "base64 of 32 bytes: {key}");

    let dir = temp_dir("secrets");
    let fake_mcp = crewlet_fake_mcp::binary_path().unwrap_or_else(|e| panic!("{e}"));
    let port = free_port();
    let config = format!(
        "providers:\n  database:\n    dsn: \"{dsn}\"\napi:\n  host: 127.0.0.1\n  port: {port}\nsecurity:\n  mcp_commands: [\"{bin}\"]\n  company_env:\n    names: [STORED_MODEL_KEY, STORED_SLACK_SIGNING]\nsecrets:\n  active_key_id: k1\n  keys:\n    - id: k1\n      material: \"${{{KEY_VAR}}}\"\n",
        dsn = db.dsn,
        bin = fake_mcp.display(),
    );
    std::fs::write(dir.join("cfg.yaml"), config).unwrap_or_else(|e| panic!("{e}"));
    let company = format!(
        r#"name: "Secrets Co"
providers:
  llm:
    fake:
      type: openai-compatible
      model: fake-model
      base_url: "{base}"
      api_keys: ["${{STORED_MODEL_KEY}}"]
      timeout_seconds: 30
mcp_servers:
  - name: chat
    shared: false
    command: "{bin}"
roles:
  - name: Engineer
    handle: eng
    mcp_env:
      chat:
        FAKE_MCP_IDENTITY: eng-bot
    integrations:
      slack:
        signing_secret: "${{STORED_SLACK_SIGNING}}"
        bot_token: xoxb-not-secret-here
        bot_user_id: UENG
"#,
        base = llm.openai_base_url(),
        bin = fake_mcp.display(),
    );
    std::fs::write(dir.join("company.yaml"), company).unwrap_or_else(|e| panic!("{e}"));

    // Store both; a trailing line break is not part of the value.
    for (name, value) in [
        ("STORED_MODEL_KEY", MODEL_KEY),
        ("STORED_SLACK_SIGNING", SLACK_SIGNING),
    ] {
        let out = secrets(&dir, &key, &["set", name], &format!("{value}\n")).await;
        assert!(out.status.success(), "{}", text(&out));
        assert!(
            text(&out).contains("sealed with key `k1`"),
            "{}",
            text(&out)
        );
    }
    let bad = secrets(&dir, &key, &["set", "not-a-name"], "v").await;
    assert!(!bad.status.success(), "{}", text(&bad));
    let empty = secrets(&dir, &key, &["set", "EMPTY_ONE"], "").await;
    assert!(
        !empty.status.success() && text(&empty).contains("empty"),
        "{}",
        text(&empty)
    );

    // Listings show names and key ids only.
    let listed = secrets(&dir, &key, &["list"], "").await;
    let shown = text(&listed);
    assert!(listed.status.success(), "{shown}");
    assert!(
        shown.contains("STORED_MODEL_KEY") && shown.contains("k1"),
        "{shown}"
    );
    assert!(
        !shown.contains(MODEL_KEY) && !shown.contains(SLACK_SIGNING),
        "{shown}"
    );
    let json = secrets(&dir, &key, &["list", "--json"], "").await;
    let rows: Value = serde_json::from_slice(&json.stdout).unwrap_or(Value::Null);
    let names: Vec<&str> = rows
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        names,
        ["STORED_MODEL_KEY", "STORED_SLACK_SIGNING"],
        "{rows}"
    );
    assert!(
        rows.as_array()
            .is_some_and(|a| a.iter().all(|r| r.get("value").is_none()))
    );

    // The table holds envelopes.
    let (client, connection) = tokio_postgres::connect(&db.dsn, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(connection);
    let stored = client
        .query(
            "SELECT name, value, key_id FROM secret_values ORDER BY name",
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stored.len(), 2);
    for row in &stored {
        let value: String = row.get(1);
        let key_id: String = row.get(2);
        assert!(value.starts_with("enc:v1:k1:"), "{value}");
        assert!(!value.contains(MODEL_KEY) && !value.contains(SLACK_SIGNING));
        assert_eq!(key_id, "k1");
    }

    // The company runs on them: neither name is in the environment.
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
        &[(KEY_VAR, key.as_str())],
    );
    let base = format!("http://127.0.0.1:{port}");
    wait_for("the engine to be ready", &mut [&mut engine], || async {
        (get(&base, "/ready").await.0 == 200).then_some(())
    })
    .await;
    let (body, headers) = slack_mention("not-the-signing-secret", "Ev-secrets-bad");
    let (status, refused) = post(&base, "/webhooks/slack/eng", body, &headers).await;
    assert_eq!(status, 401, "a wrong signature is refused: {refused}");
    let (body, headers) = slack_mention(SLACK_SIGNING, "Ev-secrets-1");
    let (status, accepted) = post(&base, "/webhooks/slack/eng", body, &headers).await;
    assert_eq!(status, 200, "signed with the stored secret: {accepted}");
    let trace_id = accepted["trace_id"].as_str().unwrap_or_default().to_owned();
    wait_for("the turn to complete", &mut [&mut engine], || async {
        let (_, body) = get(&base, &format!("/events/trace/{trace_id}")).await;
        body["events"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["type"] == "task_completed"))
            .then_some(())
    })
    .await;
    let keys = llm.keys_used();
    assert!(!keys.is_empty());
    assert!(
        keys.iter().all(|k| k.as_deref() == Some(MODEL_KEY)),
        "the model was called with the stored key ({} calls)",
        keys.len()
    );
    assert_eq!(
        engine.stop().await,
        Some(0),
        "engine exit:\n{}",
        engine.log()
    );
    let log = engine.log();
    assert!(log.contains("secret store loaded"), "{log}");
    for secret in [MODEL_KEY, SLACK_SIGNING, key.as_str()] {
        let tail = &secret[secret.len() - 8..];
        assert!(
            !log.contains(secret) && !log.contains(tail),
            "a stored secret is in the log"
        );
    }

    // The same id with other material: the start stops, naming the key.
    let wrong = keygen("k1").await;
    let mut refused = Proc::spawn_env(
        "refused",
        &dir,
        &["run", "cfg.yaml"],
        &[(KEY_VAR, wrong.as_str())],
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    while refused.is_running() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "crewlet run did not stop:\n{}",
            refused.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let log = refused.log();
    assert!(
        log.contains("`k1`") && log.contains("STORED_"),
        "the error names the key and the secret:\n{log}"
    );
    assert!(!log.contains(MODEL_KEY) && !log.contains(wrong.as_str()));

    // A new key: rekey with both listed, then the old one can go.
    let k2 = keygen("k2").await;
    let both = format!(
        "providers:\n  database:\n    dsn: \"{dsn}\"\nsecrets:\n  active_key_id: k2\n  keys:\n    - id: k1\n      material: \"${{{KEY_VAR}}}\"\n    - id: k2\n      material: \"{k2}\"\n",
        dsn = db.dsn,
    );
    std::fs::write(dir.join("cfg.yaml"), both).unwrap_or_else(|e| panic!("{e}"));
    let out = secrets(&dir, &key, &["rekey"], "").await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).starts_with("2 sealed again under `k2`"),
        "{}",
        text(&out)
    );
    let keys: Vec<String> = client
        .query("SELECT key_id FROM secret_values", &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(keys, ["k2", "k2"]);
    let removed = secrets(&dir, &key, &["rm", "STORED_MODEL_KEY"], "").await;
    assert!(removed.status.success(), "{}", text(&removed));
    let again = secrets(&dir, &key, &["rm", "STORED_MODEL_KEY"], "").await;
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
}
