//! The dashboard in a real headless Chromium against a real engine.
//!
//! `crewlet run` serves a small scripted company (a CEO, an Engineering
//! unit) over the fake model server, whose turns take a moment per phase so
//! Plan, Execute and Review can be watched. One task is run first so every
//! room has history (a trace, token use, events). Then
//! `tests/browser/run.mjs` (playwright-core driving Debian's Chromium)
//! opens every room; on the agent page, read anonymously, it finds the
//! notice that prompts and responses are hidden (anonymous reads are
//! metadata only), pastes the token from it, sends a task and watches its
//! phases arrive live and in order; it opens the task's trace without a
//! token (prompts hidden) and with one, inspects an LLM event's recorded
//! prompt, checks the token totals against
//! `/tokens/breakdown`, and reconnects the socket mid-turn without losing
//! or repeating an event. Screenshots go to a temporary folder, or to
//! `docs/dashboard/` with `CREWLET_UPDATE_SCREENSHOTS=1`.
//!
//! A `coder` seat has a code sandbox (a real local box): the page lists
//! its coding agent under "Running sandboxes" while it works (the agent
//! waits for the browser check's go) and drops it when the run ends.
//!
//! `CREWLET_DASHBOARD_HOLD=1` keeps the engine up after the seeding task
//! (printing its URL and token) instead of running the checks: a way to
//! look at the page by hand.
//!
//! Needs Chromium, Node and the `tests/browser` packages (`cargo xtask
//! services up` installs them): skipped without them, failed under CI.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use serde_json::{Value, json};

const TOKEN: &str = "dashboard-e2e-token-5Qw8";
/// How long each phase's model call takes: long enough to see it live.
const PHASE: Duration = Duration::from_millis(1500);

/// The `coder` seat's system prompt names it.
const CODER: &str = "# Your seat: Coder";

fn script() -> Script {
    Script::new()
        .on(
            When::tool_offered("submit_plan").and_system_contains(CODER),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "plan", "reasoning": "code work",
                       "steps": [{"intent": "have it coded", "tools": ["run_sandbox"]}],
                       "tools_needed": ["run_sandbox"], "success_criteria": ["coded"]}),
            )
            .delay(PHASE),
        )
        .on(
            When::tool_offered("run_sandbox")
                .and_after_tool_result(false)
                .and_system_contains(CODER),
            Reply::tool_call("run_sandbox", json!({"brief": "Tidy the build script."})),
        )
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "plan", "reasoning": "write it up",
                       "steps": [{"intent": "write the summary"}]}),
            )
            .usage(120, 30)
            .delay(PHASE),
        )
        .on(
            When::tool_offered("submit_review"),
            Reply::tool_call(
                "submit_review",
                json!({"decision": "done", "notes": "complete", "completed_work": "summary written",
                       "final_artifact": "The week: two releases, no incidents."}),
            )
            .usage(80, 15)
            .delay(PHASE),
        )
        .on(
            When::any(),
            Reply::text("The week: two releases, no incidents.")
                .usage(60, 20)
                .delay(PHASE),
        )
}

/// The coding agent: waits for the browser check's go (a file in the
/// gate folder), then reports.
const GATED_AGENT: &str = "while [ ! -f /gate/go ]; do sleep 0.1; done; echo 'Tidied the build script.' > /home/user/.crewlet/findings.md";

fn company(base_url: &str, dir: &std::path::Path) -> String {
    format!(
        r#"name: Dashboard Co
mission: Ship small, useful things.
providers:
  llm:
    fake:
      type: openai-compatible
      model: fake-model
      base_url: "{base_url}"
      timeout_seconds: 30
  sandbox:
    type: local
    default_coding_agent: command
    command: ["/bin/sh", "-c", "{GATED_AGENT}", "agent"]
    poll_seconds: 0.2
    local:
      containment: bubblewrap
      state_dir: "{boxes}"
      network: none
      mounts: ["{gate}:/gate"]
roles:
  - name: CEO
    handle: ceo
    goal: Keep the company pointed at its mission.
units:
  - name: Engineering
    lead: cto
    roles:
      - name: CTO
        handle: cto
      - name: Engineer
        handle: eng
        goal: Build and ship.
      - name: Coder
        handle: coder
        sandbox: {{enabled: true}}
    schedules:
      - name: weekly-summary
        cron: "0 9 * * 1"
        timezone: Europe/Berlin
        task: Summarise the week for the founder.
        target: lead
"#,
        boxes = dir.join("boxes").display(),
        gate = dir.join("gate").display(),
    )
}

async fn post_task(base: &str, handle: &str, text: &str) -> String {
    let r = reqwest::Client::new()
        .post(format!("{base}/agents/{handle}/tasks"))
        .bearer_auth(TOKEN)
        .json(&json!({ "text": text }))
        .send()
        .await
        .unwrap_or_else(|e| panic!("posting a task: {e}"));
    assert_eq!(r.status().as_u16(), 202);
    let body: Value = r.json().await.unwrap_or(Value::Null);
    body["task_id"].as_str().unwrap_or_default().to_owned()
}

async fn completed(base: &str, task_id: &str) -> bool {
    let (status, page) = get(
        base,
        &format!("/events?task_id={task_id}&type=task_completed"),
    )
    .await;
    status == 200 && page["events"].as_array().is_some_and(|a| !a.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_room_renders_and_a_task_runs_live_in_chromium() {
    let browser = crewlet_test_support::require!(browser);
    let dir = temp_dir("dashboard");
    // The sandbox check runs where a local box can (always under CI).
    let sandbox = crewlet_sandbox::testsuite::local_or_skip(dir.join("probe"))
        .await
        .is_some();
    let gate = dir.join("gate");
    std::fs::create_dir_all(&gate).unwrap_or_else(|e| panic!("{e}"));
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let port = free_port();
    std::fs::write(
        dir.join("cfg.yaml"),
        format!(
            "api:\n  host: 127.0.0.1\n  port: {port}\n  auth:\n    allow_anonymous_read: true\n    tokens:\n      - id: founder\n        token: {TOKEN}\n        scopes: [operate, admin]\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.join("company.yaml"),
        company(&llm.openai_base_url(), &dir),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut engine = Proc::spawn_env(
        "engine",
        &dir,
        &["run", "cfg.yaml", "--import-company", "company.yaml"],
        &[("RUST_LOG", "info")],
    );
    let base = format!("http://127.0.0.1:{port}");
    wait_for("the engine to be ready", &mut [&mut engine], || async {
        (get(&base, "/ready").await.0 == 200).then_some(())
    })
    .await;

    // History for every room: one finished task.
    let seeded = post_task(&base, "eng", "Summarise the week for the founder.").await;
    wait_for(
        "the seeding task to complete",
        &mut [&mut engine],
        || async { completed(&base, &seeded).await.then_some(()) },
    )
    .await;

    if std::env::var_os("CREWLET_DASHBOARD_HOLD").is_some() {
        println!(
            "dashboard: {base}/dashboard  token: {TOKEN}  (engine log: {})",
            dir.display()
        );
        while engine.is_running() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        return;
    }

    let shots = if std::env::var_os("CREWLET_UPDATE_SCREENSHOTS").is_some() {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/dashboard")
    } else {
        dir.join("screenshots")
    };
    let mut node = Command::new("node");
    node.arg("run.mjs")
        .current_dir(&browser.dir)
        .env("CREWLET_URL", &base)
        .env("CREWLET_TOKEN", TOKEN)
        .env("CREWLET_ENGINE", "1")
        .env("CREWLET_ENGINE_SEAT", "eng")
        .env(
            "CREWLET_SANDBOX_GATE",
            if sandbox {
                gate.as_os_str()
            } else {
                std::ffi::OsStr::new("")
            },
        )
        .env("CHROMIUM", &browser.chromium)
        .env("SCREENSHOTS", &shots);
    let out = tokio::task::spawn_blocking(move || node.output())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("cannot run node: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the browser checks failed:\n{stdout}\n{stderr}\n--- engine log ---\n{}",
        engine.log()
    );
    for room in [
        "mission",
        "agents",
        "traces",
        "tokens",
        "events",
        "content-hidden",
    ] {
        assert!(
            shots.join(format!("{room}.png")).is_file(),
            "no screenshot of {room} in {}",
            shots.display()
        );
    }
    assert_eq!(engine.stop().await, Some(0));
}
