//! The per-entity `/config` collections: LLM providers, MCP servers, roles
//! and units. Each: list, get, write (a new active revision in the audit),
//! a located 400 that stores nothing, 404 for an unknown one, delete, and
//! a delete that would leave a reference behind refused.

mod common;

use common::Harness;
use common::entities::*;
use serde_json::json;

#[tokio::test]
async fn llm_providers_round_trip_with_secret_references_as_written() {
    let h = Harness::start().await;
    assert_eq!(
        get(&h, "/config/llm-providers").await,
        (200, json!(["main"]))
    );
    let main = get(&h, "/config/llm-providers/main").await;
    assert_eq!(main.0, 200);
    assert_eq!(main.1["api_keys"], json!(["${OPENAI_API_KEY}"]));

    let backup =
        json!({"type": "anthropic", "model": "claude-test", "api_keys": ["${ANTHROPIC_API_KEY}"]});
    let r = call(
        &h,
        reqwest::Method::PUT,
        "/config/llm-providers/backup",
        Some(&backup),
    )
    .await;
    assert_written(&h, &r, "Added LLM provider 'backup'").await;
    // The ETag is the new revision, and it is the active one.
    let etag = request(&h, reqwest::Method::GET, "/config", None)
        .send()
        .await
        .unwrap();
    assert_eq!(
        etag.headers()["etag"].to_str().unwrap(),
        format!("\"{}\"", r.1["revision_id"].as_str().unwrap())
    );
    assert_eq!(
        get(&h, "/config/llm-providers").await,
        (200, json!(["backup", "main"]))
    );
    let got = get(&h, "/config/llm-providers/backup").await.1;
    assert_eq!(got["type"], "anthropic");
    assert_eq!(got["model"], "claude-test");
    assert_eq!(got["api_keys"], json!(["${ANTHROPIC_API_KEY}"]));

    // Replacing it: the body is the whole provider; X-Summary wins.
    let r = request(
        &h,
        reqwest::Method::PUT,
        "/config/llm-providers/backup",
        Some(&json!({"type": "openai", "model": "gpt-other"})),
    )
    .header("x-summary", "cheaper backup")
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(latest(&h).await["summary"], "cheaper backup");
    let got = get(&h, "/config/llm-providers/backup").await.1;
    assert_eq!(got["model"], "gpt-other");
    assert_eq!(got["type"], "openai");
    assert!(got.get("api_keys").is_none_or(|k| k == &json!([])), "{got}");
    // Each write announced the activation.
    assert_eq!(
        h.published
            .on("crewlet.events.config_revision_activated")
            .len(),
        2
    );

    let r = delete(&h, "/config/llm-providers/backup").await;
    assert_written(&h, &r, "Removed LLM provider 'backup'").await;
    assert_eq!(
        get(&h, "/config/llm-providers").await,
        (200, json!(["main"]))
    );
    h.stop().await;
}

#[tokio::test]
async fn llm_provider_problems_are_located_and_store_nothing() {
    let h = Harness::start().await;
    let before = revision_count(&h).await;
    let r = put(&h, "/config/llm-providers/main", json!({"type": "martian"})).await;
    assert_refused(
        &h,
        &r,
        "validation_error",
        "providers.llm.main.type",
        before,
    )
    .await;
    let problem = &r.1["problems"][0];
    assert!(
        problem["line"].is_null(),
        "no lines of a text never sent: {problem}"
    );
    // A `${VAR}` the `security` block does not allow is refused too.
    let r = put(
        &h,
        "/config/llm-providers/main",
        json!({"api_keys": ["${AWS_SECRET_ACCESS_KEY}"]}),
    )
    .await;
    assert_refused(&h, &r, "not_allowed", "providers.llm.main.api_keys", before).await;
    // A body that is not a mapping.
    let r = put(&h, "/config/llm-providers/main", json!(["a"])).await;
    assert_eq!((r.0, r.1["error"].clone()), (400, json!("invalid_body")));
    let r = request(&h, reqwest::Method::PUT, "/config/llm-providers/main", None)
        .header("content-type", "application/json")
        .body("{\"type\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["error"],
        "invalid_body"
    );
    assert_eq!(revision_count(&h).await, before);
    assert_eq!(
        get(&h, "/config/llm-providers/main").await.1["model"],
        "gpt-test"
    );
    h.stop().await;
}

#[tokio::test]
async fn an_unknown_provider_is_404_and_one_a_seat_uses_cannot_go() {
    let h = Harness::start().await;
    for r in [
        get(&h, "/config/llm-providers/ghost").await,
        delete(&h, "/config/llm-providers/ghost").await,
    ] {
        assert_eq!(r.0, 404, "{}", r.1);
        assert_eq!(r.1["error"], "not_found");
    }
    // The CEO's seat names `main`; deleting it is refused, located at the seat.
    let r = put(&h, "/config/roles/ceo", json!({"llm": "main"})).await;
    assert_written(&h, &r, "Updated role 'CEO' (llm)").await;
    let spare = put(
        &h,
        "/config/llm-providers/spare",
        json!({"model": "gpt-spare"}),
    )
    .await;
    assert_eq!(spare.0, 201);
    let before = revision_count(&h).await;
    let r = delete(&h, "/config/llm-providers/main").await;
    assert_refused(&h, &r, "validation_error", "roles[0].llm", before).await;
    assert!(
        r.1["reason"]
            .as_str()
            .unwrap()
            .contains("`main` is still referenced"),
        "{}",
        r.1
    );
    assert_eq!(
        get(&h, "/config/llm-providers").await.1,
        json!(["main", "spare"])
    );
    h.stop().await;
}

fn search_server() -> serde_json::Value {
    json!({"name": "search", "transport": "http", "url": "https://mcp.example.com/search", "shared": false})
}

#[tokio::test]
async fn mcp_servers_round_trip() {
    let h = Harness::start().await;
    assert_eq!(get(&h, "/config/mcp-servers").await, (200, json!([])));
    let r = post(&h, "/config/mcp-servers", search_server()).await;
    assert_written(&h, &r, "Added MCP server 'search'").await;
    assert_eq!(
        get(&h, "/config/mcp-servers").await,
        (200, json!(["search"]))
    );
    let got = get(&h, "/config/mcp-servers/search").await.1;
    assert_eq!(got["url"], "https://mcp.example.com/search");
    assert_eq!(got["shared"], false);

    // PUT merges the body's keys over the server's; the name is the path's.
    let r = put(
        &h,
        "/config/mcp-servers/search",
        json!({"name": "renamed", "request_timeout_seconds": 30.0}),
    )
    .await;
    assert_written(
        &h,
        &r,
        "Updated MCP server 'search' (request_timeout_seconds)",
    )
    .await;
    let got = get(&h, "/config/mcp-servers/search").await.1;
    assert_eq!(got["request_timeout_seconds"], 30.0);
    assert_eq!(got["url"], "https://mcp.example.com/search", "kept");
    assert_eq!(got["name"], "search");

    // POSTing a name in use is refused.
    let before = revision_count(&h).await;
    let r = post(&h, "/config/mcp-servers", search_server()).await;
    assert_refused(&h, &r, "validation_error", "name", before).await;
    let r = post(
        &h,
        "/config/mcp-servers",
        json!({"url": "https://x.example.com"}),
    )
    .await;
    assert_refused(&h, &r, "validation_error", "name", before).await;

    let r = delete(&h, "/config/mcp-servers/search").await;
    assert_written(&h, &r, "Removed MCP server 'search'").await;
    assert_eq!(get(&h, "/config/mcp-servers").await, (200, json!([])));
    h.stop().await;
}

#[tokio::test]
async fn mcp_server_problems_unknown_names_and_references() {
    let h = Harness::start().await;
    let before = revision_count(&h).await;
    let r = post(
        &h,
        "/config/mcp-servers",
        json!({"name": "bad", "transport": "carrier-pigeon"}),
    )
    .await;
    assert_refused(
        &h,
        &r,
        "validation_error",
        "mcp_servers[0].transport",
        before,
    )
    .await;
    // A stdio program the `security` block does not list.
    let r = post(
        &h,
        "/config/mcp-servers",
        json!({"name": "shell", "command": "bash"}),
    )
    .await;
    assert_refused(&h, &r, "not_allowed", "mcp_servers[0]", before).await;
    for r in [
        get(&h, "/config/mcp-servers/ghost").await,
        delete(&h, "/config/mcp-servers/ghost").await,
    ] {
        assert_eq!(
            (r.0, r.1["error"].clone()),
            (404, json!("not_found")),
            "{}",
            r.1
        );
    }
    // A seat with credentials for the server keeps it.
    assert_eq!(
        post(&h, "/config/mcp-servers", search_server()).await.0,
        201
    );
    let r = put(
        &h,
        "/config/roles/eng",
        json!({"mcp_env": {"search": {"TOKEN": "t"}}}),
    )
    .await;
    assert_eq!(r.0, 201, "{}", r.1);
    let before = revision_count(&h).await;
    let r = delete(&h, "/config/mcp-servers/search").await;
    assert_refused(
        &h,
        &r,
        "validation_error",
        "units[0].roles[1].mcp_env.search",
        before,
    )
    .await;
    h.stop().await;
}

#[tokio::test]
async fn roles_round_trip_org_wide_and_in_units() {
    let h = Harness::start().await;
    assert_eq!(
        get(&h, "/config/roles").await,
        (200, json!(["ceo", "cto", "eng"]))
    );
    // A role in a unit, by handle; the secret stays a reference.
    let ceo = get(&h, "/config/roles/ceo").await.1;
    assert_eq!(ceo["name"], "CEO");
    assert_eq!(ceo["integrations"]["slack"]["bot_token"], "xoxb-test");
    assert_eq!(get(&h, "/config/roles/cto").await.1["name"], "CTO");

    // PUT merges: `goal` set, `name` kept.
    let r = put(&h, "/config/roles/eng", json!({"goal": "Ship it"})).await;
    assert_written(&h, &r, "Updated role 'Engineer' (goal)").await;
    let eng = get(&h, "/config/roles/eng").await.1;
    assert_eq!(
        (eng["goal"].clone(), eng["name"].clone()),
        (json!("Ship it"), json!("Engineer"))
    );

    // POST adds an org-wide role, found by the handle its name derives to.
    let r = post(
        &h,
        "/config/roles",
        json!({"name": "QA Lead", "goal": "Test"}),
    )
    .await;
    assert_written(&h, &r, "Added role 'QA Lead'").await;
    assert_eq!(get(&h, "/config/roles/qa-lead").await.1["goal"], "Test");
    assert_eq!(
        get(&h, "/config/roles").await.1,
        json!(["ceo", "cto", "eng", "qa-lead"])
    );
    // PUT of a handle no role has adds one with that handle (ours).
    let r = put(&h, "/config/roles/ops", json!({"name": "Operations"})).await;
    assert_written(&h, &r, "Added role 'Operations'").await;
    assert_eq!(get(&h, "/config/roles/ops").await.1["handle"], "ops");

    let r = delete(&h, "/config/roles/qa-lead").await;
    assert_written(&h, &r, "Removed role 'QA Lead'").await;
    assert_eq!((get(&h, "/config/roles/qa-lead").await.0), 404);
    h.stop().await;
}

#[tokio::test]
async fn role_problems_unknown_handles_and_references() {
    let h = Harness::start().await;
    let before = revision_count(&h).await;
    let r = put(&h, "/config/roles/eng", json!({"handle": "Bad Handle"})).await;
    assert_refused(
        &h,
        &r,
        "validation_error",
        "units[0].roles[1].handle",
        before,
    )
    .await;
    let r = post(&h, "/config/roles", json!({"name": "CEO"})).await;
    assert_refused(&h, &r, "validation_error", "handle", before).await;
    let r = post(&h, "/config/roles", json!({"goal": "nameless"})).await;
    assert_refused(&h, &r, "validation_error", "name", before).await;
    let r = put(
        &h,
        "/config/roles/new",
        json!({"name": "New", "handle": "other"}),
    )
    .await;
    assert_refused(&h, &r, "validation_error", "handle", before).await;
    for r in [
        get(&h, "/config/roles/ghost").await,
        delete(&h, "/config/roles/ghost").await,
    ] {
        assert_eq!(
            (r.0, r.1["error"].clone()),
            (404, json!("not_found")),
            "{}",
            r.1
        );
    }
    // The CTO leads Engineering: deleting the seat is refused at the lead.
    let r = delete(&h, "/config/roles/cto").await;
    assert_refused(&h, &r, "validation_error", "units[0].lead", before).await;
    assert_eq!(get(&h, "/config/roles/cto").await.0, 200);
    h.stop().await;
}

#[tokio::test]
async fn units_round_trip_at_any_depth() {
    let h = Harness::start().await;
    assert_eq!(
        get(&h, "/config/units").await,
        (200, json!(["Engineering"]))
    );
    let sales = json!({
        "name": "Sales",
        "lead": "seller",
        "roles": [{"name": "Seller", "handle": "seller"}],
        "children": [{"name": "Inside Sales", "roles": [{"name": "Caller", "handle": "caller"}]}]
    });
    let r = post(&h, "/config/units", sales).await;
    assert_written(&h, &r, "Added unit 'Sales'").await;
    assert_eq!(
        get(&h, "/config/units").await.1,
        json!(["Engineering", "Inside Sales", "Sales"])
    );
    let inside = get(&h, "/config/units/Inside%20Sales").await.1;
    assert_eq!(inside["roles"][0]["handle"], "caller");
    // Its seats are roles too.
    assert_eq!(get(&h, "/config/roles/caller").await.1["name"], "Caller");

    // PUT merges the unit's keys; its roles and children stay.
    let r = put(
        &h,
        "/config/units/Inside%20Sales",
        json!({"purpose": "Phone"}),
    )
    .await;
    assert_written(&h, &r, "Updated unit 'Inside Sales' (purpose)").await;
    let inside = get(&h, "/config/units/Inside%20Sales").await.1;
    assert_eq!(inside["purpose"], "Phone");
    assert_eq!(inside["roles"][0]["handle"], "caller");

    let r = delete(&h, "/config/units/Sales").await;
    assert_written(&h, &r, "Removed unit 'Sales'").await;
    assert_eq!(get(&h, "/config/units").await.1, json!(["Engineering"]));
    assert_eq!(
        get(&h, "/config/roles/caller").await.0,
        404,
        "its seats went with it"
    );
    h.stop().await;
}

#[tokio::test]
async fn unit_problems_unknown_names_and_references() {
    let h = Harness::start().await;
    let before = revision_count(&h).await;
    let r = put(&h, "/config/units/Engineering", json!({"children": "none"})).await;
    assert_refused(&h, &r, "validation_error", "units[0].children", before).await;
    let r = post(&h, "/config/units", json!({"name": "Engineering"})).await;
    assert_refused(&h, &r, "validation_error", "name", before).await;
    for r in [
        get(&h, "/config/units/Ghost").await,
        delete(&h, "/config/units/Ghost").await,
    ] {
        assert_eq!(
            (r.0, r.1["error"].clone()),
            (404, json!("not_found")),
            "{}",
            r.1
        );
    }
    // The CEO manages the CTO of Engineering: the unit cannot go.
    assert_eq!(
        put(&h, "/config/roles/ceo", json!({"manages": ["CTO"]}))
            .await
            .0,
        201
    );
    let before = revision_count(&h).await;
    let r = delete(&h, "/config/units/Engineering").await;
    assert_refused(&h, &r, "validation_error", "roles[0].manages", before).await;
    assert_eq!(get(&h, "/config/units").await.1, json!(["Engineering"]));
    h.stop().await;
}
