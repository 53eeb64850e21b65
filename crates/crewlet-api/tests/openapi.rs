//! `docs/openapi.json` is the generated document, and it lists every route.

use std::path::PathBuf;

/// Every route the router serves, by method and path.
const ROUTES: &[(&str, &str)] = &[
    ("post", "/agents/{handle}/tasks"),
    ("get", "/stream/snapshot"),
    ("get", "/schedules"),
    ("get", "/health"),
    ("get", "/ready"),
    ("get", "/agents"),
    ("get", "/agents/{id}"),
    ("get", "/agents/{id}/memory"),
    ("get", "/org"),
    ("get", "/tools"),
    ("get", "/events"),
    ("get", "/events/{id}"),
    ("get", "/events/trace/{trace_id}"),
    ("get", "/tokens/breakdown"),
    ("get", "/budgets"),
    ("get", "/config"),
    ("put", "/config"),
    ("get", "/config/revisions"),
    ("get", "/config/audit"),
    ("get", "/config/revisions/{id}"),
    ("get", "/config/revisions/{id}/diff"),
    ("post", "/config/revisions/{id}/revert"),
    ("post", "/config/revisions/{id}/activate"),
    ("get", "/config/identity"),
    ("put", "/config/identity"),
    ("get", "/config/turn-engine"),
    ("put", "/config/turn-engine"),
    ("get", "/config/learning"),
    ("put", "/config/learning"),
    ("get", "/config/embeddings"),
    ("put", "/config/embeddings"),
    ("get", "/config/llm-providers"),
    ("get", "/config/llm-providers/{key}"),
    ("put", "/config/llm-providers/{key}"),
    ("delete", "/config/llm-providers/{key}"),
    ("get", "/config/integrations"),
    ("get", "/config/integrations/{kind}"),
    ("put", "/config/integrations/{kind}"),
    ("delete", "/config/integrations/{kind}"),
    ("get", "/config/mcp-servers"),
    ("post", "/config/mcp-servers"),
    ("get", "/config/mcp-servers/{name}"),
    ("put", "/config/mcp-servers/{name}"),
    ("delete", "/config/mcp-servers/{name}"),
    ("get", "/config/roles"),
    ("post", "/config/roles"),
    ("get", "/config/roles/{handle}"),
    ("put", "/config/roles/{handle}"),
    ("delete", "/config/roles/{handle}"),
    ("get", "/config/units"),
    ("post", "/config/units"),
    ("get", "/config/units/{name}"),
    ("put", "/config/units/{name}"),
    ("delete", "/config/units/{name}"),
    ("post", "/webhooks/slack/{handle}"),
    ("post", "/webhooks/github"),
    ("post", "/webhooks/github/{handle}"),
    ("post", "/webhooks/gitlab"),
    ("post", "/webhooks/gitlab/{handle}"),
    ("post", "/webhooks/plane"),
    ("post", "/webhooks/plane/{handle}"),
    ("post", "/webhooks/jira"),
    ("post", "/webhooks/jira/{handle}"),
    ("post", "/webhooks/confluence"),
    ("post", "/webhooks/confluence/{handle}"),
    ("get", "/openapi.json"),
    ("post", "/budgets/{scope}/reset"),
    ("get", "/fleet"),
    ("post", "/fleet/nodes/{id}/drain"),
    ("get", "/config/budgets"),
    ("put", "/config/budgets"),
];

fn committed() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

#[test]
fn docs_openapi_json_is_up_to_date() {
    assert!(
        committed() == crewlet_api::openapi::json(),
        "docs/openapi.json is out of date: run `cargo xtask schema` and commit the result"
    );
}

#[test]
fn the_document_lists_every_route_and_nothing_else() {
    let doc: serde_json::Value = serde_json::from_str(&crewlet_api::openapi::json()).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    let mut listed = Vec::new();
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            listed.push((method.clone(), path.clone()));
        }
    }
    let mut expected: Vec<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    listed.sort();
    expected.sort();
    assert_eq!(listed, expected);
    // Webhooks are documented without bearer auth; /config with it.
    assert_eq!(
        doc["paths"]["/webhooks/github"]["post"]["security"],
        serde_json::json!([{}])
    );
    assert_eq!(
        doc["paths"]["/config"]["put"]["security"],
        serde_json::json!([{"bearer": []}])
    );
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
}

#[tokio::test]
async fn every_documented_route_is_served() {
    // Answers other than the router's JSON 404 prove the route exists.
    let stores = crewlet_store::Stores::memory();
    let queue = std::sync::Arc::new(crewlet_queue::MemoryQueue::standalone());
    let api = crewlet_api::ApiBuilder::new(crewlet_config::ApiConfig::default(), queue, &stores)
        .build()
        .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let _ = api.serve(listener, std::future::pending()).await;
    });
    let http = reqwest::Client::new();
    for (method, path) in ROUTES {
        let concrete = path
            .replace("{id}", "1")
            .replace("{trace_id}", "0af7651916cd43dd8448eb211c80319c")
            .replace("{handle}", "x")
            .replace("{name}", "x")
            .replace("{key}", "x")
            .replace("{kind}", "slack");
        let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let r = http
            .request(m, format!("{base}{concrete}"))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body = r.text().await.unwrap_or_default();
        assert!(
            !(status == 404 && body.contains("no route for")),
            "{method} {path} is documented but not served"
        );
        assert_ne!(status, 405, "{method} {path}");
    }
    server.abort();
}
