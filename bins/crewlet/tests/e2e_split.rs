//! The split deployment as real processes on real Pulsar and PostgreSQL:
//! `crewlet config import`, then `crewlet run cfg.yaml` (engine, no API) and
//! `crewlet run api cfg.yaml --port P` side by side. A signed Slack webhook
//! sent to the API process wakes the seat in the engine process; its turn
//! runs against the fake model and posts through the fake MCP server; the
//! API shows the whole trace from the shared database.
//!
//! Isolation: a fresh database and a fresh Pulsar namespace (created in the
//! test through the admin REST API; the engine itself never calls it).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crewlet_integrations::webhook::slack;
use crewlet_test_support::database::FreshDatabase;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use crewlet_test_support::services::pulsar_admin_url;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(90);
const SLACK_SECRET: &str = "split-slack-secret";

fn crewlet() -> Command {
    Command::new(env!("CARGO_BIN_EXE_crewlet"))
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "crewlet-e2e-split-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    dir
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A child process killed (SIGKILL) if the test ends without stopping it.
struct Proc {
    name: &'static str,
    child: Option<Child>,
    log: PathBuf,
}

impl Proc {
    fn spawn(name: &'static str, dir: &Path, args: &[&str]) -> Self {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{e}"));
        let child = crewlet()
            .args(args)
            .current_dir(dir)
            .env("RUST_LOG", "info,crewlet_engine=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start crewlet {args:?}: {e}"));
        Self {
            name,
            child: Some(child),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGTERM, then waits for a clean exit.
    async fn stop(&mut self) -> Option<i32> {
        let child = self.child.as_mut()?;
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        for _ in 0..300 {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return status.code();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            eprintln!(
                "--- {} log ---\n{}",
                self.name,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }
}

async fn wait_for<T, F, Fut>(what: &str, procs: &mut [&mut Proc], mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        for p in procs.iter_mut() {
            if !p.is_running() {
                panic!("{} exited while waiting for {what}:\n{}", p.name, p.log());
            }
        }
        if tokio::time::Instant::now() > deadline {
            for p in procs.iter() {
                eprintln!("--- {} log ---\n{}", p.name, p.log());
            }
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn get(url: &str) -> (u16, Value) {
    match reqwest::get(url).await {
        Ok(r) => {
            let s = r.status().as_u16();
            (s, r.json().await.unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

fn script() -> Script {
    Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "plan", "reasoning": "reply in the thread",
                       "steps": [{"intent": "post", "tools": ["chat__post_message"]}]}),
            )
            .usage(100, 20),
        )
        .on(
            When::tool_offered("chat__post_message").and_after_tool_result(false),
            Reply::tool_call("chat__post_message", json!({"channel": "C777", "text": "hello from the engine"}))
                .usage(200, 30),
        )
        .on(
            When::tool_offered("chat__post_message").and_after_tool_result(true),
            Reply::text("posted").usage(50, 10),
        )
        .on(
            When::tool_offered("submit_review"),
            Reply::tool_call(
                "submit_review",
                json!({"decision": "done", "notes": "ok", "completed_work": "posted", "final_artifact": "posted"}),
            )
            .usage(80, 15),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhook_to_api_process_runs_a_turn_in_the_engine_process() {
    let pulsar = crewlet_test_support::require!(pulsar);
    let admin_dsn = crewlet_test_support::require!(postgres);
    let db = FreshDatabase::create(&admin_dsn).await;
    let namespace = format!("e2e-split-{}", uuid::Uuid::new_v4().simple());
    let admin = pulsar_admin_url();
    let http = reqwest::Client::new();
    let created = http
        .put(format!("{admin}/admin/v2/namespaces/public/{namespace}"))
        .json(&json!({}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("pulsar admin: {e}"));
    assert!(
        created.status().is_success(),
        "cannot create namespace: {}",
        created.status()
    );

    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = temp_dir();
    let mcp_log = dir.join("mcp.jsonl");
    let fake_mcp = crewlet_fake_mcp::binary_path().unwrap_or_else(|e| panic!("{e}"));
    let config = format!(
        "providers:\n  queue:\n    type: pulsar\n    url: \"{pulsar}\"\n    tenant: public\n    namespace: \"{namespace}\"\n  database:\n    dsn: \"{dsn}\"\napi:\n  host: 127.0.0.1\n  port: 0\n",
        dsn = db.dsn
    );
    std::fs::write(dir.join("cfg.yaml"), config).unwrap_or_else(|e| panic!("{e}"));
    let company = format!(
        r#"name: "Split Co {namespace}"
providers:
  llm:
    fake: {{type: openai-compatible, model: fake-model, base_url: "{base}", timeout_seconds: 30}}
mcp_servers:
  chat:
    scope: per_role
    command: "{bin}"
    env: {{FAKE_MCP_LOG: "{log}"}}
roles:
  - name: Engineer
    handle: eng
    mcp_servers: [chat]
    mcp_env: {{FAKE_MCP_IDENTITY: eng-bot}}
    integrations:
      slack: {{signing_secret: "{SLACK_SECRET}", bot_user_id: UENG}}
"#,
        base = llm.openai_base_url(),
        bin = fake_mcp.display(),
        log = mcp_log.display(),
    );
    std::fs::write(dir.join("company.yaml"), company).unwrap_or_else(|e| panic!("{e}"));

    let import = crewlet()
        .args(["config", "import", "company.yaml", "--config", "cfg.yaml"])
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        import.status.success(),
        "config import failed: {}{}",
        String::from_utf8_lossy(&import.stdout),
        String::from_utf8_lossy(&import.stderr)
    );
    assert!(String::from_utf8_lossy(&import.stdout).contains("as revision 1"));

    let port = free_port();
    let port_arg = port.to_string();
    let mut engine = Proc::spawn("engine", &dir, &["run", "cfg.yaml"]);
    let mut api = Proc::spawn(
        "api",
        &dir,
        &["run", "api", "cfg.yaml", "--port", &port_arg],
    );
    let base = format!("http://127.0.0.1:{port}");

    wait_for(
        "the engine to run the company",
        &mut [&mut engine, &mut api],
        || async { engine_running(&dir).then_some(()) },
    )
    .await;
    wait_for(
        "the api to be ready",
        &mut [&mut engine, &mut api],
        || async { (get(&format!("{base}/ready")).await.0 == 200).then_some(()) },
    )
    .await;

    let body = json!({
        "type": "event_callback", "event_id": "Ev-split-1", "api_app_id": "AENG",
        "event": {"type": "app_mention", "user": "U9", "text": "<@UENG> say hello",
                  "channel": "C777", "ts": "1700000001.000200"}
    })
    .to_string();
    let ts = chrono::Utc::now().timestamp().to_string();
    let sig = slack::signature(SLACK_SECRET.as_bytes(), &ts, body.as_bytes());
    let resp = http
        .post(format!("{base}/webhooks/slack/eng"))
        .header("content-type", "application/json")
        .header(slack::TIMESTAMP_HEADER, &ts)
        .header(slack::SIGNATURE_HEADER, sig)
        .body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resp.status().as_u16(), 200);
    let accepted: Value = resp.json().await.unwrap_or(Value::Null);
    let trace_id = accepted["trace_id"].as_str().unwrap_or_default().to_owned();
    assert!(!trace_id.is_empty(), "{accepted}");

    let events = wait_for(
        "the turn to complete",
        &mut [&mut engine, &mut api],
        || async {
            let (_, body) = get(&format!("{base}/events/trace/{trace_id}")).await;
            let events = body["events"].as_array().cloned().unwrap_or_default();
            // The API process buffers its own writes (flushed every second).
            let done = events.iter().any(|e| e["type"] == "task_completed")
                && events.iter().any(|e| e["type"] == "raw_webhook");
            done.then_some(events)
        },
    )
    .await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    for expected in [
        "raw_webhook",
        "external_notification",
        "task_created",
        "task_started",
        "agent_turn_completed",
        "task_completed",
    ] {
        assert!(kinds.contains(&expected), "{expected} missing: {kinds:?}");
    }
    let calls: Vec<Value> = std::fs::read_to_string(&mcp_log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["event"] == "tool_call")
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["identity"], "eng-bot");

    assert_eq!(
        engine.stop().await,
        Some(0),
        "engine exit:\n{}",
        engine.log()
    );
    assert_eq!(api.stop().await, Some(0), "api exit:\n{}", api.log());
    assert!(engine.log().contains("org_stopped") || engine.log().contains("engine stopped"));

    let _ = http
        .delete(format!(
            "{admin}/admin/v2/namespaces/public/{namespace}?force=true"
        ))
        .send()
        .await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether the engine's log says it runs the company (after its router subscribed).
fn engine_running(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("engine.log"))
        .unwrap_or_default()
        .contains("engine running")
}
