//! Shared by the end-to-end tests that run `crewlet` as real processes:
//! child processes with their stderr in a file, polling, the fake model's
//! script for one happy turn, signed webhooks, throwaway Pulsar namespaces.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crewlet_test_support::e2e::slack_signed;
// Shared with the other end-to-end tests; not every test binary uses each one.
#[allow(unused_imports)]
pub use crewlet_test_support::e2e::{Signed, free_port, get, github_issue, post, temp_dir};
use crewlet_test_support::fake_llm::{Reply, Script, When};
use crewlet_test_support::services::pulsar_admin_url;
use serde_json::json;

/// How long any one wait of these tests may take.
pub const WAIT: Duration = Duration::from_secs(90);

/// Usage the fake model reports per call of the happy turn (plan, tool
/// call, answer after the tool, review).
pub const TURN_USAGE: [(u64, u64); 4] = [(100, 20), (200, 30), (50, 10), (80, 15)];

/// Runs `cmd` to its end off the async runtime (the fakes it talks to
/// keep serving meanwhile).
pub async fn output(mut cmd: Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("cannot run crewlet: {e}"))
}

/// A finished command's stdout, then its stderr.
pub fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The `crewlet` binary, with none of the machine's `CREWLET_*` settings.
pub fn crewlet() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_crewlet"));
    for (k, _) in std::env::vars() {
        if k.starts_with("CREWLET_") || k.starts_with("OTEL_") {
            c.env_remove(k);
        }
    }
    c
}

/// A child process killed (SIGKILL) if the test ends without stopping it.
pub struct Proc {
    pub name: &'static str,
    child: Option<Child>,
    log: PathBuf,
}

impl Proc {
    /// `crewlet args...` in `dir`, stderr to `dir/{name}.log`, with
    /// `RUST_LOG=info,crewlet_engine=debug`.
    pub fn spawn(name: &'static str, dir: &Path, args: &[&str]) -> Self {
        Self::spawn_env(
            name,
            dir,
            args,
            &[("RUST_LOG", "info,crewlet_engine=debug")],
        )
    }

    /// `crewlet args...` in `dir` with exactly these extra variables (no
    /// `RUST_LOG` unless given), stderr to `dir/{name}.log` (not a terminal:
    /// JSON log lines).
    pub fn spawn_env(name: &'static str, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{e}"));
        let mut cmd = crewlet();
        cmd.env_remove("RUST_LOG");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .args(args)
            .current_dir(dir)
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

    /// What the process wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGKILL: the process dies at once, as in a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then waits for a clean exit.
    pub async fn stop(&mut self) -> Option<i32> {
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

/// Polls `check` until it returns `Some`; panics with the processes' logs
/// when one of them exits or after [`WAIT`].
pub async fn wait_for<T, F, Fut>(what: &str, procs: &mut [&mut Proc], mut check: F) -> T
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

/// One turn against the fake model: plan to post, call
/// `chat__post_message` in `C777`, say so, review done ([`TURN_USAGE`]).
pub fn script() -> Script {
    let [plan, call, after, review] = TURN_USAGE;
    Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "plan", "reasoning": "reply in the thread",
                       "steps": [{"intent": "post", "tools": ["chat__post_message"]}]}),
            )
            .usage(plan.0, plan.1),
        )
        .on(
            When::tool_offered("chat__post_message").and_after_tool_result(false),
            Reply::tool_call("chat__post_message", json!({"channel": "C777", "text": "hello from the engine"}))
                .usage(call.0, call.1),
        )
        .on(
            When::tool_offered("chat__post_message").and_after_tool_result(true),
            Reply::text("posted").usage(after.0, after.1),
        )
        .on(
            When::tool_offered("submit_review"),
            Reply::tool_call(
                "submit_review",
                json!({"decision": "done", "notes": "ok", "completed_work": "posted", "final_artifact": "posted"}),
            )
            .usage(review.0, review.1),
        )
}

/// A Slack `app_mention` of `UENG` in `C777`, signed now with `secret`.
pub fn slack_mention(secret: &str, event_id: &str) -> Signed {
    let body = json!({
        "type": "event_callback", "event_id": event_id, "api_app_id": "AENG",
        "event": {"type": "app_mention", "user": "U9", "text": "<@UENG> say hello",
                  "channel": "C777", "ts": "1700000001.000200"}
    })
    .to_string()
    .into_bytes();
    slack_signed(secret, body)
}

/// Whether the engine's log (`dir/engine.log`) says it runs the company
/// (after its router subscribed).
pub fn engine_running(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("engine.log"))
        .unwrap_or_default()
        .contains("engine running")
}

/// `crewlet config import company.yaml --config cfg.yaml` in `dir`; panics
/// unless it made revision 1.
pub fn import_company(dir: &Path) {
    let import = crewlet()
        .args(["config", "import", "company.yaml", "--config", "cfg.yaml"])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&import.stdout),
        String::from_utf8_lossy(&import.stderr)
    );
    assert!(import.status.success(), "config import failed: {out}");
    assert!(out.contains("as revision 1"), "{out}");
}

/// A Pulsar namespace `public/{prefix}-{uuid}` created through the admin
/// REST API, deleted (forced) by [`PulsarNamespace::delete`].
pub struct PulsarNamespace {
    pub tenant: String,
    pub name: String,
    admin: String,
}

impl PulsarNamespace {
    pub async fn create(prefix: &str) -> Self {
        let name = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
        let admin = pulsar_admin_url();
        let created = reqwest::Client::new()
            .put(format!("{admin}/admin/v2/namespaces/public/{name}"))
            .json(&json!({}))
            .send()
            .await
            .unwrap_or_else(|e| panic!("pulsar admin: {e}"));
        assert!(
            created.status().is_success(),
            "cannot create namespace public/{name}: {}",
            created.status()
        );
        Self {
            tenant: "public".into(),
            name,
            admin,
        }
    }

    pub async fn delete(&self) {
        let _ = reqwest::Client::new()
            .delete(format!(
                "{}/admin/v2/namespaces/{}/{}?force=true",
                self.admin, self.tenant, self.name
            ))
            .send()
            .await;
    }
}

/// `dsn` (URL form) with `password` for its user, unless it has one; and
/// the password the DSN ends up with.
pub fn dsn_with_password(dsn: &str, password: &str) -> (String, String) {
    let Some((scheme, rest)) = dsn.split_once("://") else {
        panic!("not a URL DSN: {dsn}");
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return (
            format!("{scheme}://postgres:{password}@{authority}{tail}"),
            password.to_owned(),
        );
    };
    if let Some((_, existing)) = userinfo.split_once(':')
        && !existing.is_empty()
    {
        return (dsn.to_owned(), existing.to_owned());
    }
    let user = userinfo.split(':').next().unwrap_or(userinfo);
    (
        format!("{scheme}://{user}:{password}@{host}{tail}"),
        password.to_owned(),
    )
}

/// The split deployment as two real processes: `crewlet run cfg.yaml`
/// (engine, `api.port: 0`) and `crewlet run api cfg.yaml --port P`, on a
/// fresh Pulsar namespace and the database at `dsn`, with one Engineer seat
/// (`eng`) whose Slack app signs with `slack_secret`, the fake model at
/// `llm_base_url` and the fake MCP server logging to `mcp_log`.
pub struct SplitDeployment {
    pub dir: PathBuf,
    pub mcp_log: PathBuf,
    pub namespace: PulsarNamespace,
    pub engine: Proc,
    pub api: Proc,
    /// `http://127.0.0.1:{port}` of the API process.
    pub base: String,
}

/// What differs between the split-deployment tests.
pub struct SplitOptions<'a> {
    pub name: &'a str,
    pub pulsar_url: &'a str,
    pub dsn: &'a str,
    pub llm_base_url: &'a str,
    pub slack_secret: &'a str,
    pub engine_env: &'a [(&'a str, &'a str)],
    pub api_env: &'a [(&'a str, &'a str)],
    /// An API bearer token with every scope (none: the API's own local
    /// operator token only).
    pub api_token: Option<&'a str>,
}

impl SplitDeployment {
    /// Writes the files, imports the company, starts both processes and
    /// waits until the engine runs the company and the API is ready.
    pub async fn start(o: SplitOptions<'_>) -> Self {
        let namespace = PulsarNamespace::create(&format!("e2e-{}", o.name)).await;
        let dir = temp_dir(o.name);
        let mcp_log = dir.join("mcp.jsonl");
        let fake_mcp = crewlet_fake_mcp::binary_path().unwrap_or_else(|e| panic!("{e}"));
        let config = format!(
            "providers:\n  queue:\n    type: pulsar\n    url: \"{pulsar}\"\n    tenant: {tenant}\n    namespace: \"{ns}\"\n  database:\n    dsn: \"{dsn}\"\napi:\n  host: 127.0.0.1\n  port: 0\n{auth}security:\n  mcp_commands: [\"{mcp}\"]\n",
            auth = o.api_token.map_or_else(String::new, |t| format!(
                "  auth:\n    tokens:\n      - {{id: e2e-admin, token: \"{t}\", scopes: [read, operate, admin]}}\n"
            )),
            pulsar = o.pulsar_url,
            tenant = namespace.tenant,
            ns = namespace.name,
            dsn = o.dsn,
            mcp = fake_mcp.display(),
        );
        std::fs::write(dir.join("cfg.yaml"), config).unwrap_or_else(|e| panic!("{e}"));
        let company = format!(
            r#"name: "{name} Co {ns}"
providers:
  llm:
    fake: {{type: openai-compatible, model: fake-model, base_url: "{base}", timeout_seconds: 30}}
mcp_servers:
  - name: chat
    shared: false
    command: "{bin}"
    env: {{FAKE_MCP_LOG: "{log}"}}
roles:
  - name: Engineer
    handle: eng
    mcp_env: {{chat: {{FAKE_MCP_IDENTITY: eng-bot}}}}
    integrations:
      slack: {{signing_secret: "{secret}", bot_user_id: UENG}}
"#,
            name = o.name,
            ns = namespace.name,
            base = o.llm_base_url,
            bin = fake_mcp.display(),
            log = mcp_log.display(),
            secret = o.slack_secret,
        );
        std::fs::write(dir.join("company.yaml"), company).unwrap_or_else(|e| panic!("{e}"));
        import_company(&dir);

        let port = free_port();
        let port_arg = port.to_string();
        let mut engine = Proc::spawn_env("engine", &dir, &["run", "cfg.yaml"], o.engine_env);
        let mut api = Proc::spawn_env(
            "api",
            &dir,
            &["run", "api", "cfg.yaml", "--port", &port_arg],
            o.api_env,
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
            || async { (get(&base, "/ready").await.0 == 200).then_some(()) },
        )
        .await;
        Self {
            dir,
            mcp_log,
            namespace,
            engine,
            api,
            base,
        }
    }

    /// The events of `trace_id` once its turn completed and the API's own
    /// `raw_webhook` (buffered, flushed every second) is stored too.
    pub async fn completed_trace(&mut self, trace_id: &str) -> Vec<serde_json::Value> {
        let base = self.base.clone();
        wait_for(
            "the turn to complete",
            &mut [&mut self.engine, &mut self.api],
            || async {
                let (_, body) = get(&base, &format!("/events/trace/{trace_id}")).await;
                let events = body["events"].as_array().cloned().unwrap_or_default();
                let done = events.iter().any(|e| e["type"] == "task_completed")
                    && events.iter().any(|e| e["type"] == "raw_webhook");
                done.then_some(events)
            },
        )
        .await
    }

    /// Stops both processes with SIGTERM and asserts each exited with 0.
    pub async fn stop_cleanly(&mut self) {
        assert_eq!(
            self.engine.stop().await,
            Some(0),
            "engine exit:\n{}",
            self.engine.log()
        );
        assert_eq!(
            self.api.stop().await,
            Some(0),
            "api exit:\n{}",
            self.api.log()
        );
    }

    /// Drops the namespace and the folder (the processes stop on drop).
    pub async fn clean_up(self) {
        self.namespace.delete().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
