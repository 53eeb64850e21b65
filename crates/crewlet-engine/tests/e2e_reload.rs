//! `crewlet run` waits for a company when none is known, boots when one is
//! stored through the embedded API, and applies a newer revision.

mod common;

use std::time::Duration;

use common::*;
use crewlet_config::{ApiToken, Bootstrap};
use crewlet_engine::RunOptions;
use crewlet_engine::run::run_until;
use serde_json::Value;
use tokio::sync::oneshot;

const WAIT: Duration = Duration::from_secs(60);
const TOKEN: &str = "e2e-reload-token";

async fn put_company(base: &str, yaml: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .put(format!("{base}/config"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/yaml")
        .header("x-summary", "e2e")
        .body(yaml.to_owned())
        .send()
        .await
        .unwrap_or_else(|e| panic!("PUT /config: {e}"));
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn company(handles: &[&str]) -> String {
    let mut y = "name: Reload Co\nproviders:\n  llm:\n    m: {type: openai-compatible, model: m, base_url: \"http://127.0.0.1:9/v1\"}\nroles:\n".to_owned();
    for h in handles {
        y.push_str(&format!("  - {{name: Seat {h}, handle: {h}}}\n"));
    }
    y
}

async fn handles(base: &str) -> Vec<String> {
    let (_, agents) = get(base, "/agents").await;
    let mut out: Vec<String> = agents
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x["handle"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_a_company_then_follows_new_revisions() {
    let port = free_port();
    let mut bootstrap = Bootstrap::default();
    bootstrap.api.port = port;
    bootstrap.api.auth.tokens = vec![ApiToken {
        id: "founder".into(),
        token: TOKEN.into(),
        scopes: None,
    }];
    let (stop, stopped) = oneshot::channel::<()>();
    let engine = tokio::spawn(run_until(bootstrap, RunOptions::default(), async move {
        let _ = stopped.await;
    }));
    let base = format!("http://127.0.0.1:{port}");
    wait_for("/health", WAIT, || async {
        (get(&base, "/health").await.0 == 200).then_some(())
    })
    .await;
    assert_eq!(get(&base, "/ready").await.0, 503, "no company yet");

    let (status, body) = put_company(&base, &company(&["alpha"])).await;
    assert_eq!(status, 201, "{body}");
    wait_ready(&base, WAIT).await;
    assert_eq!(handles(&base).await, ["alpha"]);

    let (status, body) = put_company(&base, &company(&["alpha", "beta"])).await;
    assert_eq!(status, 201, "{body}");
    wait_for("the engine on revision 2", WAIT, || async {
        let (s, ready) = get(&base, "/ready").await;
        (s == 200 && ready["engine_revision_id"] == 2).then_some(())
    })
    .await;
    assert_eq!(handles(&base).await, ["alpha", "beta"]);
    // alpha moves to the new engine once the old one gives it up (at
    // once: it runs no turn); beta is new.
    wait_for("both seats idle on revision 2", WAIT, || async {
        let (_, agents) = get(&base, "/agents").await;
        agents
            .as_array()
            .is_some_and(|a| a.len() == 2 && a.iter().all(|x| x["state"] == "idle"))
            .then_some(())
    })
    .await;

    let _ = stop.send(());
    let result = tokio::time::timeout(WAIT, engine).await;
    assert!(matches!(result, Ok(Ok(Ok(())))), "{result:?}");
}
