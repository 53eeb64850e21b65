//! Plane from provisioning to a turn: `crewlet run` serves a company whose
//! unit owns the Plane project `APP`; `crewlet plane provision` (a real
//! process) adds the seats to the project and registers the workspace
//! webhook on the fake Plane, pointing it at our API and offering the
//! company's `webhook_secret`; a work-item comment that mentions one seat's
//! Plane user is delivered by the fake through that webhook, signed with
//! the hook's secret, and starts that seat's turn (not the unit lead's). A
//! second provisioning run changes nothing.

mod common;

use std::path::Path;
use std::process::Output;

use common::*;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use crewlet_test_support::plane::FakePlane;
use serde_json::{Value, json};

const WEBHOOK_SECRET: &str = "plane-webhook-secret-e2e";
const WORKSPACE: &str = "acme";

fn turn() -> Script {
    Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "direct", "reasoning": "a question on a work item",
                       "steps": [{"intent": "answer"}]}),
            )
            .usage(10, 5),
        )
        .on(When::any(), Reply::text("Looking into it.").usage(10, 5))
}

/// The seats' Plane users are the fake's user ids: what Plane's mention
/// components carry.
fn company(llm: &str, plane: &str, lead_id: &str, eng_id: &str) -> String {
    format!(
        r#"name: Plane E2E Co
providers:
  llm:
    fake: {{type: openai-compatible, model: fake-model, base_url: "{llm}", timeout_seconds: 30}}
integrations:
  plane:
    enabled: true
    url: "{plane}"
    workspace: {WORKSPACE}
    webhook_secret: "${{PLANE_WEBHOOK_SECRET}}"
units:
  - name: Platform
    lead: Platform Lead
    integrations:
      plane: {{project: APP}}
    roles:
      - name: Platform Lead
        handle: lead
        integrations:
          plane: {{user: "{lead_id}", token: "${{PL_LEAD}}"}}
      - name: Engineer
        handle: eng
        integrations:
          plane: {{user: "{eng_id}", token: "${{PL_ENG}}"}}
"#
    )
}

/// `crewlet plane provision company.yaml --base-url BASE` in `dir`.
async fn provision(dir: &Path, home: &Path, base: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = crewlet();
    cmd.current_dir(dir)
        .env("HOME", home)
        .env("PLANE_WEBHOOK_SECRET", WEBHOOK_SECRET)
        .envs(env.iter().copied())
        .args([
            "plane",
            "provision",
            "company.yaml",
            "--base-url",
            base,
            "--env-file",
            ".env",
        ]);
    output(cmd).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comment_mentioning_a_provisioned_seat_starts_its_turn() {
    let llm = FakeLlmServer::start(turn())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let plane = FakePlane::start(WORKSPACE).await;
    let admin = plane.add_user("root", true);
    let alice = plane.add_user("alice", false);
    let lead = plane.add_user("agent-lead", false);
    let eng = plane.add_user("agent-eng", false);
    let app = plane.add_project("APP");
    plane.join(&app, &alice.id);
    plane.join(&app, &lead.id);

    let dir = temp_dir("plane-provision");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap_or_else(|e| panic!("{e}"));
    let port = free_port();
    std::fs::write(
        dir.join("cfg.yaml"),
        format!(
            "api:\n  host: 127.0.0.1\n  port: {port}\n  auth:\n    allow_anonymous_read: true\n\
             security:\n  company_env:\n    names: [PLANE_WEBHOOK_SECRET, PL_LEAD, PL_ENG]\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.join("company.yaml"),
        company(&llm.openai_base_url(), &plane.url(), &lead.id, &eng.id),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let home_var = home.to_string_lossy().into_owned();
    let mut engine = Proc::spawn_env(
        "engine",
        &dir,
        &["run", "cfg.yaml", "--import-company", "company.yaml"],
        &[
            ("RUST_LOG", "info"),
            ("HOME", home_var.as_str()),
            ("PLANE_WEBHOOK_SECRET", WEBHOOK_SECRET),
        ],
    );
    let base = format!("http://127.0.0.1:{port}");
    wait_for("the engine to be ready", &mut [&mut engine], || async {
        (get(&base, "/ready").await.0 == 200).then_some(())
    })
    .await;

    // Provision: the engineer joins APP, the webhook points at our API.
    let env = [
        ("PLANE_PROVISION_TOKEN", admin.token.as_str()),
        ("PL_LEAD", lead.token.as_str()),
        ("PL_ENG", eng.token.as_str()),
    ];
    let out = provision(&dir, &home, &base, &env).await;
    let printed = text(&out);
    assert_eq!(out.status.code(), Some(0), "{printed}");
    assert!(printed.contains("plan:"), "{printed}");
    assert!(printed.contains("lead in APP: member"), "{printed}");
    assert!(printed.contains("eng in APP: add as member"), "{printed}");
    assert!(printed.contains("eng added to APP as member"), "{printed}");
    let hook_url = format!("{base}/webhooks/plane");
    assert!(
        printed.contains(&format!("webhook {hook_url} created")),
        "{printed}"
    );
    assert!(printed.contains("lead token: ok"), "{printed}");
    assert!(printed.contains("eng token: ok"), "{printed}");
    for secret in [WEBHOOK_SECRET, &admin.token, &lead.token, &eng.token] {
        assert!(!printed.contains(secret), "a secret is never printed");
    }
    let hooks = plane.webhooks();
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0].url, hook_url);
    assert!(hooks[0].is_active);
    assert_eq!(
        hooks[0].secret_key, WEBHOOK_SECRET,
        "the company's secret was offered and kept"
    );
    // Plane kept our secret: nothing had to be written to the env file.
    let written = std::fs::read_to_string(dir.join(".env")).unwrap_or_default();
    assert!(!written.contains("PLANE_WEBHOOK_SECRET"), "{written}");
    let members = plane
        .project_by_identifier("APP")
        .unwrap_or_else(|| panic!("no project APP"))
        .members;
    assert!(members.contains_key(&eng.id), "{members:?}");

    // A comment on a work item of APP mentioning the engineer's Plane user,
    // through the webhook.
    let comment = json!({
        "event": "issue_comment",
        "action": "created",
        "webhook_id": hooks[0].id,
        "workspace_id": "ws-acme",
        "data": {
            "id": "comment-1",
            "issue": "item-7",
            "project": app,
            "project_detail": {"id": app, "identifier": "APP", "name": "APP"},
            "issue_detail": {"id": "item-7", "name": "Login job fails"},
            "comment_html": format!(
                "<p><mention-component entity_identifier=\"{}\" entity_name=\"user_mention\"></mention-component> could you look at the failing job?</p>",
                eng.id
            ),
            "comment_stripped": " could you look at the failing job?",
        },
        "activity": {"actor": {"id": alice.id, "display_name": "alice", "is_bot": false}},
    });
    let sent = plane.deliver(&comment).await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].url, hook_url);
    assert_eq!(sent[0].status, Some(202), "{:?}", sent[0]);
    let answer: Value = serde_json::from_str(&sent[0].body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", sent[0]));
    let trace_id = answer["trace_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no trace id: {:?}", sent[0]))
        .to_owned();
    let events: Vec<Value> = wait_for("the engineer's turn", &mut [&mut engine], || async {
        let (_, body) = get(&base, &format!("/events/trace/{trace_id}")).await;
        let events = body["events"].as_array().cloned().unwrap_or_default();
        let started = events.iter().any(|e| e["type"] == "task_started");
        started.then_some(events)
    })
    .await;
    let routed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "external_notification")
        .collect();
    assert_eq!(routed.len(), 1, "{events:?}");
    assert_eq!(routed[0]["payload"]["handle"], "eng", "{events:?}");
    assert_eq!(routed[0]["payload"]["rule"], "mention", "{events:?}");
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "task_started")
        .collect();
    assert_eq!(started.len(), 1, "{events:?}");
    assert!(routed[0]["task_id"].is_string(), "{events:?}");
    assert_eq!(
        started[0]["task_id"], routed[0]["task_id"],
        "the routed task is the one that started: {events:?}"
    );

    // Provisioning again finds nothing to do.
    let before = plane.writes().len();
    let again = provision(&dir, &home, &base, &env).await;
    let printed = text(&again);
    assert_eq!(again.status.code(), Some(0), "{printed}");
    assert!(printed.contains("nothing to change"), "{printed}");
    assert!(
        printed.contains(&format!("webhook {hook_url}: ok")),
        "{printed}"
    );
    assert!(!printed.contains("applying:"), "{printed}");
    assert_eq!(plane.writes().len(), before, "{printed}");
    assert_eq!(plane.webhooks().len(), 1);

    assert_eq!(engine.stop().await, Some(0));
    let log = engine.log();
    assert!(
        !log.contains(WEBHOOK_SECRET),
        "the webhook secret is never logged"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
