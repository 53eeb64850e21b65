//! Before a company runs, the seat reads answer 503 with `Retry-After: 15`,
//! embedded (the engine waits for a revision) and standalone alike.

mod common;

use std::sync::Arc;

use common::{Harness, Options};

/// An engine process still waiting for its first company revision.
struct WaitingEngine;

impl crewlet_api::EngineView for WaitingEngine {
    fn agents(&self) -> Vec<crewlet_api::AgentView> {
        Vec::new()
    }

    fn tools(&self, _handle: Option<&str>) -> Vec<crewlet_api::ToolView> {
        Vec::new()
    }

    fn is_ready(&self) -> bool {
        false
    }

    fn is_draining(&self) -> bool {
        false
    }

    fn organization(&self) -> Option<Arc<crewlet_config::Organization>> {
        None
    }
}

async fn assert_not_configured(h: &Harness) {
    // As the original: no seats yet is an empty list, one is not found.
    let r = h.get("/agents").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap(),
        serde_json::json!([])
    );
    let r = h.get("/agents/eng").send().await.unwrap();
    assert_eq!(r.status(), 404);
    for path in ["/tools", "/tools?handle=eng", "/org"] {
        let r = h.get(path).send().await.unwrap();
        assert_eq!(r.status(), 503, "{path}");
        assert_eq!(
            r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
            Some("15"),
            "{path}"
        );
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"], "not_configured", "{path}");
        assert!(body["reason"].as_str().is_some_and(|r| !r.is_empty()));
    }
    let r = h.get("/ready").send().await.unwrap();
    assert_eq!(r.status(), 503);
}

#[tokio::test]
async fn embedded_before_the_engine_runs_a_company() {
    let h = Harness::with(Options {
        company: None,
        engine: Some(Arc::new(WaitingEngine)),
        ..Options::default()
    })
    .await;
    assert_not_configured(&h).await;
    h.stop().await;
}

#[tokio::test]
async fn standalone_before_any_revision() {
    let h = Harness::with(Options {
        company: None,
        ..Options::default()
    })
    .await;
    assert_not_configured(&h).await;
    h.stop().await;
}
