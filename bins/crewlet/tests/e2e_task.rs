//! A first turn with no integration at all: `crewlet run` on the memory
//! defaults with no API token configured writes a local operator token for
//! its loopback listener, and `crewlet task send eng "..." --wait`, reading
//! it, posts a task, follows its events and prints the outcome. Without the
//! token file the send is refused with a reason; the token never reaches
//! the engine's log.

mod common;

use std::process::Output;

use common::*;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use serde_json::json;

fn turn() -> Script {
    Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "direct", "reasoning": "a greeting", "steps": [{"intent": "answer"}]}),
            )
            .usage(10, 5),
        )
        .on(When::any(), Reply::text("Hello, founder.").usage(10, 5))
}

async fn send(dir: &std::path::Path, home: &std::path::Path, args: &[&str]) -> Output {
    let mut cmd = crewlet();
    cmd.env("HOME", home).current_dir(dir).args(args);
    tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("cannot run crewlet task send: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_sent_from_the_cli_runs_and_its_outcome_is_printed() {
    let llm = FakeLlmServer::start(turn())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = temp_dir("task-send");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap_or_else(|e| panic!("{e}"));
    let port = free_port();
    std::fs::write(
        dir.join("cfg.yaml"),
        format!(
            "api:\n  host: 127.0.0.1\n  port: {port}\n  auth:\n    allow_anonymous_read: true\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.join("company.yaml"),
        format!(
            "name: Task Co\nproviders:\n  llm:\n    fake:\n      type: openai-compatible\n      model: fake-model\n      base_url: \"{}\"\n      timeout_seconds: 30\nroles:\n  - name: Engineer\n    handle: eng\n",
            llm.openai_base_url()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let home_var = home.to_string_lossy().into_owned();
    let mut engine = Proc::spawn_env(
        "engine",
        &dir,
        &["run", "cfg.yaml", "--import-company", "company.yaml"],
        &[("RUST_LOG", "info"), ("HOME", home_var.as_str())],
    );
    let base = format!("http://127.0.0.1:{port}");
    wait_for("the engine to be ready", &mut [&mut engine], || async {
        (get(&base, "/ready").await.0 == 200).then_some(())
    })
    .await;
    let token_file = home.join(".crewlet/run").join(format!("api-{port}.token"));
    let token = std::fs::read_to_string(&token_file)
        .unwrap_or_else(|e| panic!("the local token file {}: {e}", token_file.display()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file)
            .unwrap_or_else(|e| panic!("{e}"))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "only the user reads the token");
    }

    let out = send(
        &dir,
        &home,
        &[
            "task",
            "send",
            "eng",
            "Say hello to the founder.",
            "--wait",
            "--timeout",
            "60",
            "-c",
            "cfg.yaml",
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("posted to eng"), "{stdout}");
    assert!(
        stdout.contains("task_started"),
        "the steps are printed: {stdout}"
    );
    assert!(stdout.contains("completed"), "{stdout}");
    assert!(
        stdout.contains("Hello, founder."),
        "the outcome is printed: {stdout}"
    );

    // Someone without the token file is refused, with the way out named.
    let stranger = dir.join("stranger");
    std::fs::create_dir_all(&stranger).unwrap_or_else(|e| panic!("{e}"));
    let out = send(
        &dir,
        &stranger,
        &["task", "send", "eng", "x", "-c", "cfg.yaml"],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("401") && stderr.contains("operate"),
        "{stderr}"
    );

    assert_eq!(engine.stop().await, Some(0));
    let log = engine.log();
    assert!(
        log.contains("local operator token"),
        "the log names the file"
    );
    assert!(
        !log.contains(token.trim()),
        "the token itself is never logged"
    );
}
