//! The per-entity `/config` singletons (identity, turn engine, learning,
//! embeddings) and integrations, and what every per-entity write shares:
//! `If-Match`, the audit record, auth, and 409 before any company.

mod common;

use common::entities::*;
use common::{Harness, Options};
use reqwest::Method;
use serde_json::{Value, json};

#[tokio::test]
async fn identity_round_trip_and_problems() {
    let h = Harness::start().await;
    let (status, identity) = get(&h, "/config/identity").await;
    assert_eq!(status, 200);
    assert_eq!(identity, json!({"name": "Test Co", "policies": []}));

    let r = put(
        &h,
        "/config/identity",
        json!({"mission": "Ship", "policies": ["Write it down"]}),
    )
    .await;
    assert_written(&h, &r, "Updated identity (mission, policies)").await;
    assert_eq!(
        get(&h, "/config/identity").await.1,
        json!({"name": "Test Co", "mission": "Ship", "policies": ["Write it down"]})
    );
    // `null` unsets.
    let r = put(&h, "/config/identity", json!({"mission": null})).await;
    assert_written(&h, &r, "Updated identity (mission)").await;
    assert!(get(&h, "/config/identity").await.1.get("mission").is_none());

    let before = revision_count(&h).await;
    let r = put(&h, "/config/identity", json!({"name": ""})).await;
    assert_refused(&h, &r, "validation_error", "name", before).await;
    let r = put(&h, "/config/identity", json!({"colour": "blue"})).await;
    assert_refused(&h, &r, "validation_error", "colour", before).await;
    assert_eq!(get(&h, "/config/identity").await.1["name"], "Test Co");
    h.stop().await;
}

#[tokio::test]
async fn turn_engine_and_learning_are_replaced_whole() {
    let h = Harness::start().await;
    let (status, te) = get(&h, "/config/turn-engine").await;
    assert_eq!(status, 200);
    let default_rounds = te["max_tool_rounds"].clone();
    assert!(default_rounds.is_u64(), "{te}");
    assert_ne!(default_rounds, json!(7));

    let r = put(&h, "/config/turn-engine", json!({"max_tool_rounds": 7})).await;
    assert_written(&h, &r, "Updated turn_engine").await;
    let te = get(&h, "/config/turn-engine").await.1;
    assert_eq!(te["max_tool_rounds"], 7);
    assert!(te["max_iterations"].is_u64(), "the rest are defaults: {te}");

    let before = revision_count(&h).await;
    let r = put(&h, "/config/turn-engine", json!({"max_tool_rounds": 0})).await;
    assert_refused(
        &h,
        &r,
        "validation_error",
        "turn_engine.max_tool_rounds",
        before,
    )
    .await;
    let r = put(&h, "/config/turn-engine", json!({"max_tool_round": 3})).await;
    assert_refused(
        &h,
        &r,
        "validation_error",
        "turn_engine.max_tool_round",
        before,
    )
    .await;

    assert_eq!(get(&h, "/config/learning").await.0, 200);
    let r = put(&h, "/config/learning", json!({"enabled": false})).await;
    assert_written(&h, &r, "Updated learning").await;
    assert_eq!(get(&h, "/config/learning").await.1["enabled"], false);
    let before = revision_count(&h).await;
    let r = put(&h, "/config/learning", json!({"enabled": "maybe"})).await;
    assert_refused(&h, &r, "validation_error", "learning.enabled", before).await;
    h.stop().await;
}

#[tokio::test]
async fn embeddings_round_trip_with_the_key_as_a_reference() {
    let h = Harness::start().await;
    let r = get(&h, "/config/embeddings").await;
    assert_eq!(
        (r.0, r.1["error"].clone()),
        (404, json!("not_found")),
        "none yet"
    );

    let body = json!({"type": "openai", "model": "text-embedding-3-small", "api_key": "${OPENAI_API_KEY}", "dimensions": 1536});
    let r = put(&h, "/config/embeddings", body).await;
    assert_written(&h, &r, "Updated embeddings").await;
    let got = get(&h, "/config/embeddings").await.1;
    assert_eq!(got["api_key"], "${OPENAI_API_KEY}");
    assert_eq!(got["dimensions"], 1536);

    let before = revision_count(&h).await;
    let r = put(&h, "/config/embeddings", json!({"dimensions": "many"})).await;
    assert_refused(
        &h,
        &r,
        "validation_error",
        "providers.embeddings.dimensions",
        before,
    )
    .await;
    assert_eq!(
        get(&h, "/config/embeddings").await.1["model"],
        "text-embedding-3-small"
    );
    h.stop().await;
}

#[tokio::test]
async fn integrations_round_trip_by_kind() {
    let h = Harness::start().await;
    assert_eq!(
        get(&h, "/config/integrations").await,
        (
            200,
            json!(["confluence", "github", "gitlab", "jira", "plane"])
        )
    );
    // The API itself expands `${GH_SECRET}` to verify GitHub: reads never do.
    let github = get(&h, "/config/integrations/github").await.1;
    assert_eq!(github["webhook_secret"], "${GH_SECRET}");

    let r = get(&h, "/config/integrations/slack").await;
    assert_eq!((r.0, r.1["error"].clone()), (404, json!("not_found")));
    let r = put(
        &h,
        "/config/integrations/slack",
        json!({"api_url": "https://slack.example.com/api"}),
    )
    .await;
    assert_written(&h, &r, "Updated integration 'slack'").await;
    assert_eq!(
        get(&h, "/config/integrations/slack").await.1["api_url"],
        "https://slack.example.com/api"
    );

    let r = delete(&h, "/config/integrations/jira").await;
    assert_written(&h, &r, "Removed integration 'jira'").await;
    assert_eq!(
        get(&h, "/config/integrations").await.1,
        json!(["confluence", "github", "gitlab", "plane", "slack"])
    );
    h.stop().await;
}

#[tokio::test]
async fn integration_problems_and_unknown_kinds() {
    let h = Harness::start().await;
    let before = revision_count(&h).await;
    let r = put(&h, "/config/integrations/plane", json!({"colour": "blue"})).await;
    assert_refused(
        &h,
        &r,
        "validation_error",
        "integrations.plane.colour",
        before,
    )
    .await;
    for r in [
        get(&h, "/config/integrations/teams").await,
        put(&h, "/config/integrations/teams", json!({})).await,
        delete(&h, "/config/integrations/teams").await,
    ] {
        assert_eq!(
            (r.0, r.1["error"].clone()),
            (404, json!("unknown_integration")),
            "{}",
            r.1
        );
    }
    let r = delete(&h, "/config/integrations/slack").await;
    assert_eq!((r.0, r.1["error"].clone()), (404, json!("not_found")));
    assert_eq!(revision_count(&h).await, before);
    h.stop().await;
}

/// One write of each kind, valid against the harness company.
fn writes() -> Vec<(Method, &'static str, Option<Value>)> {
    vec![
        (
            Method::PUT,
            "/config/identity",
            Some(json!({"vision": "v"})),
        ),
        (
            Method::PUT,
            "/config/turn-engine",
            Some(json!({"max_iterations": 2})),
        ),
        (
            Method::PUT,
            "/config/learning",
            Some(json!({"enabled": true})),
        ),
        (
            Method::PUT,
            "/config/embeddings",
            Some(json!({"model": "text-embedding-3-small"})),
        ),
        (
            Method::PUT,
            "/config/llm-providers/main",
            Some(json!({"model": "gpt-x"})),
        ),
        (Method::DELETE, "/config/integrations/jira", None),
        (
            Method::PUT,
            "/config/integrations/jira",
            Some(json!({"webhook_secret": "s"})),
        ),
        (
            Method::POST,
            "/config/mcp-servers",
            Some(json!({"name": "m", "transport": "http", "url": "https://m.example.com"})),
        ),
        (
            Method::PUT,
            "/config/mcp-servers/m",
            Some(json!({"shared": true})),
        ),
        (Method::DELETE, "/config/mcp-servers/m", None),
        (Method::POST, "/config/roles", Some(json!({"name": "Temp"}))),
        (
            Method::PUT,
            "/config/roles/temp",
            Some(json!({"goal": "g"})),
        ),
        (Method::DELETE, "/config/roles/temp", None),
        (Method::POST, "/config/units", Some(json!({"name": "Lab"}))),
        (
            Method::PUT,
            "/config/units/Lab",
            Some(json!({"purpose": "p"})),
        ),
        (Method::DELETE, "/config/units/Lab", None),
    ]
}

#[tokio::test]
async fn every_write_honours_if_match_and_is_audited() {
    let h = Harness::start().await;
    let mut stale = latest(&h).await["revision_id"].as_str().unwrap().to_owned();
    for (method, path, body) in writes() {
        let current = latest(&h).await;
        let before = revision_count(&h).await;
        // Based on a revision that is no longer active: 409, nothing stored.
        if stale != current["revision_id"] {
            let r = request(&h, method.clone(), path, body.as_ref())
                .header("if-match", format!("\"{stale}\""))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 409, "{method} {path}");
            let b: Value = r.json().await.unwrap();
            assert_eq!(b["error"], "revision_advanced", "{method} {path}");
            assert_eq!(b["current_revision_id"], current["revision_id"]);
            assert_eq!(revision_count(&h).await, before, "{method} {path}");
        }
        // Based on the active one: written, with the caller's summary.
        let r = request(&h, method.clone(), path, body.as_ref())
            .header("if-match", current["revision_number"].to_string())
            .header("x-summary", format!("test {method} {path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{method} {path}");
        let etag = r.headers()["etag"].to_str().unwrap().to_owned();
        let record: Value = r.json().await.unwrap();
        assert_eq!(
            etag,
            format!("\"{}\"", record["revision_id"].as_str().unwrap())
        );
        assert_eq!(
            record["parent_revision_id"], current["revision_id"],
            "{method} {path}"
        );
        let audit = latest(&h).await;
        assert_eq!(audit["revision_id"], record["revision_id"]);
        assert_eq!(audit["created_by"], "api:ops");
        assert_eq!(audit["source"], "api.entity");
        assert_eq!(audit["summary"], format!("test {method} {path}"));
        stale = current["revision_id"].as_str().unwrap().to_owned();
    }
    assert_eq!(revision_count(&h).await, 1 + writes().len());
    h.stop().await;
}

#[tokio::test]
async fn writes_need_a_company_and_a_token() {
    let h = Harness::with(Options {
        company: None,
        ..Options::default()
    })
    .await;
    for (method, path, body) in writes() {
        let r = call(&h, method.clone(), path, body.as_ref()).await;
        assert_eq!(r.0, 409, "{method} {path}: {}", r.1);
        assert_eq!(r.1["error"], "company_not_initialised");
        assert!(r.1["hint"].as_str().unwrap().contains("PUT /config"));
        let r = h
            .http
            .request(method.clone(), h.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{method} {path}");
    }
    for path in [
        "/config/identity",
        "/config/roles",
        "/config/units/Eng",
        "/config/llm-providers",
    ] {
        let r = get(&h, path).await;
        assert_eq!(
            (r.0, r.1["error"].clone()),
            (404, json!("no_active_revision")),
            "{path}"
        );
        let r = h.get(path).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
    }
    assert_eq!(revision_count(&h).await, 0);
    h.stop().await;
}

#[tokio::test]
async fn budgets_are_set_read_and_reset_through_the_api() {
    let h = Harness::start().await;
    let r = put(
        &h,
        "/config/budgets",
        json!({"token_budget": 1000, "budget_policy": {"period": "daily", "warn_at": 0.5}}),
    )
    .await;
    assert_written(&h, &r, "Updated budgets (token_budget, budget_policy)").await;
    assert_eq!(
        get(&h, "/config/budgets").await.1,
        json!({"token_budget": 1000, "budget_policy": {"period": "daily", "warn_at": 0.5}})
    );
    let before = revision_count(&h).await;
    let r = put(
        &h,
        "/config/budgets",
        json!({"budget_policy": {"period": "hourly"}}),
    )
    .await;
    assert_refused(&h, &r, "validation_error", "budget_policy.period", before).await;
    let r = put(&h, "/config/budgets", json!({"roles": []})).await;
    assert_refused(&h, &r, "validation_error", "roles", before).await;

    // 600 of 1000 charged this period: past the 50% warning; then refused.
    let window = crewlet_core::BudgetPeriod::Daily.window(chrono::Utc::now());
    let agent = crewlet_core::AgentId::for_seat("Test Co", "nobody");
    let mut charge = crewlet_store::BudgetCharge::new(agent, "nobody", 600, 1000, 0);
    charge.window = window;
    let ledger = &h.stores.ledger;
    assert_eq!(
        ledger.charge(&charge).await.ok(),
        Some(crewlet_store::ChargeOutcome::Charged)
    );
    let (status, b) = get(&h, "/budgets").await;
    assert_eq!(status, 200);
    assert_eq!(b["org"]["durable_used"], 600);
    assert_eq!(b["org"]["max_tokens"], 1000);
    assert_eq!(b["org"]["period"], "daily");
    assert_eq!(b["org"]["state"], "warning", "{b}");
    assert_eq!(b["org"]["reserved_tokens"], 0);
    assert!(matches!(
        ledger.charge(&charge).await.ok(),
        Some(crewlet_store::ChargeOutcome::Refused(_))
    ));
    assert_eq!(get(&h, "/budgets").await.1["org"]["state"], "exhausted");

    // Reset: admin only; an unknown scope is 404.
    let (status, _) = call(&h, Method::POST, "/budgets/org/reset", None).await;
    assert_eq!(status, 200);
    let b = get(&h, "/budgets").await.1;
    assert_eq!(
        (b["org"]["durable_used"].clone(), b["org"]["state"].clone()),
        (json!(0), json!("ok"))
    );
    let (status, e) = call(&h, Method::POST, "/budgets/nobody-here/reset", None).await;
    assert_eq!(status, 404, "{e}");
    h.stop().await;
}
