//! GitLab from provisioning to a turn: `crewlet run` serves a company whose
//! unit owns `acme/app`; `crewlet gitlab provision` (a real process)
//! creates the seats' users, tokens and the group hook on the fake GitLab,
//! pointing it at our API; a comment on an issue of `acme/app` that
//! mentions one seat's GitLab username is delivered by the fake through
//! that hook, with the hook's token, and starts that seat's turn (not the
//! unit lead's). A second provisioning run changes nothing. Without an
//! engine: a dry run exits 0 and writes nothing, a non-admin token exits 2,
//! a seat that fails exits 1 after the others were provisioned.

mod common;

use std::path::Path;
use std::process::Output;

use common::*;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use crewlet_test_support::gitlab::FakeGitlab;
use serde_json::{Value, json};

const HOOK_TOKEN: &str = "gitlab-hook-token-e2e";

fn turn() -> Script {
    Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "direct", "reasoning": "a question on an issue",
                       "steps": [{"intent": "answer"}]}),
            )
            .usage(10, 5),
        )
        .on(When::any(), Reply::text("Looking into it.").usage(10, 5))
}

fn company(llm: &str, gitlab: &str) -> String {
    format!(
        r#"name: GitLab E2E Co
providers:
  llm:
    fake: {{type: openai-compatible, model: fake-model, base_url: "{llm}", timeout_seconds: 30}}
integrations:
  gitlab:
    enabled: true
    url: "{gitlab}"
    webhook_token: "${{GITLAB_WEBHOOK_TOKEN}}"
    provisioning:
      group: acme
units:
  - name: Platform
    lead: Platform Lead
    integrations:
      gitlab_projects: [acme/app]
    roles:
      - name: Platform Lead
        handle: lead
        integrations:
          gitlab: {{user: agent-lead, token: "${{GL_LEAD}}"}}
      - name: Engineer
        handle: eng
        integrations:
          gitlab: {{user: agent-eng, token: "${{GL_ENG}}"}}
"#
    )
}

/// `crewlet gitlab provision company.yaml --base-url BASE` in `dir`.
async fn provision(dir: &Path, home: &Path, base: &str, admin: &str) -> Output {
    let mut cmd = crewlet();
    cmd.current_dir(dir)
        .env("HOME", home)
        .env("GITLAB_ADMIN_TOKEN", admin)
        .env("GITLAB_WEBHOOK_TOKEN", HOOK_TOKEN)
        .args([
            "gitlab",
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
    let gitlab = FakeGitlab::start().await;
    let admin = gitlab.add_admin("root");
    gitlab.add_group("acme");
    gitlab.add_project("acme/app");
    gitlab.add_user("alice", false);

    let dir = temp_dir("gitlab-provision");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap_or_else(|e| panic!("{e}"));
    let port = free_port();
    std::fs::write(
        dir.join("cfg.yaml"),
        format!(
            "api:\n  host: 127.0.0.1\n  port: {port}\n  auth:\n    allow_anonymous_read: true\n\
             security:\n  company_env:\n    names: [GITLAB_WEBHOOK_TOKEN, GL_LEAD, GL_ENG]\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.join("company.yaml"),
        company(&llm.openai_base_url(), &gitlab.url()),
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
            ("GITLAB_WEBHOOK_TOKEN", HOOK_TOKEN),
        ],
    );
    let base = format!("http://127.0.0.1:{port}");
    wait_for("the engine to be ready", &mut [&mut engine], || async {
        (get(&base, "/ready").await.0 == 200).then_some(())
    })
    .await;

    // Provision: users, memberships, tokens into .env, the hook to our API.
    let out = provision(&dir, &home, &base, &admin).await;
    let printed = text(&out);
    assert_eq!(out.status.code(), Some(0), "{printed}");
    assert!(printed.contains("plan:"), "{printed}");
    assert!(printed.contains("created the hook"), "{printed}");
    let env = std::fs::read_to_string(dir.join(".env")).unwrap_or_default();
    let minted: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('=').map(|(_, v)| v))
        .collect();
    assert_eq!(minted.len(), 2, "two tokens in .env");
    for token in &minted {
        assert!(!printed.contains(token), "a minted token is never printed");
    }
    let hooks = gitlab.hooks("acme");
    assert_eq!(hooks.len(), 1);
    assert_eq!(hooks[0].url, format!("{base}/webhooks/gitlab"));

    // A comment mentioning the engineer's GitLab user, through the hook.
    let sent = gitlab
        .fire_issue_comment(
            "acme/app",
            7,
            "alice",
            "@agent-eng could you look at the failing job?",
        )
        .await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].status, 202, "{:?}", sent[0]);
    let trace_id = sent[0].body["trace_id"]
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

    // Provisioning again finds nothing to do.
    let before = gitlab.writes().len();
    let again = provision(&dir, &home, &base, &admin).await;
    let printed = text(&again);
    assert_eq!(again.status.code(), Some(0), "{printed}");
    assert!(printed.contains("nothing to change"), "{printed}");
    assert_eq!(gitlab.writes().len(), before, "{printed}");

    assert_eq!(engine.stop().await, Some(0));
    let log = engine.log();
    assert!(!log.contains(HOOK_TOKEN), "the hook token is never logged");
    for token in &minted {
        assert!(!log.contains(token));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_tell_a_dry_run_a_refusal_and_a_failed_seat_apart() {
    let gitlab = FakeGitlab::start().await;
    let admin = gitlab.add_admin("root");
    gitlab.add_group("acme");
    let uid = gitlab.add_user("mallory", false);
    let not_admin = gitlab.add_token(uid);
    let dir = temp_dir("gitlab-provision-exit");
    std::fs::write(
        dir.join("company.yaml"),
        company("http://127.0.0.1:9/v1", &gitlab.url()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let base = "http://crewlet.test";

    let dry = {
        let mut cmd = crewlet();
        cmd.current_dir(&dir)
            .env("GITLAB_ADMIN_TOKEN", &admin)
            .env("GITLAB_WEBHOOK_TOKEN", HOOK_TOKEN)
            .args(["gitlab", "provision", "company.yaml", "--dry-run"])
            .args(["--base-url", base]);
        tokio::task::spawn_blocking(move || cmd.output())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let printed = text(&dry);
    assert_eq!(dry.status.code(), Some(0), "{printed}");
    assert!(printed.contains("change(s) planned"), "{printed}");
    assert!(
        printed.contains("dry run: nothing was changed"),
        "{printed}"
    );
    assert_eq!(gitlab.writes(), [], "a dry run writes nothing");
    assert!(!dir.join(".env").exists());

    let refused = provision(&dir, &dir, base, &not_admin).await;
    let printed = text(&refused);
    assert_eq!(refused.status.code(), Some(2), "{printed}");
    assert!(printed.contains("refusing to provision"), "{printed}");
    assert!(!printed.contains(&not_admin), "the token is never printed");
    assert_eq!(gitlab.writes(), []);

    gitlab.reject_username("agent-lead");
    let failed = provision(&dir, &dir, base, &admin).await;
    let printed = text(&failed);
    assert_eq!(failed.status.code(), Some(1), "{printed}");
    assert!(
        printed.contains("FAILED: cannot create the user"),
        "{printed}"
    );
    assert!(gitlab.user("agent-eng").is_some(), "the other seat went on");
    let _ = std::fs::remove_dir_all(&dir);
}
