//! The original engine's HTTP contract for `/config`, `/budgets` and
//! `/tokens/breakdown` (issue 12): shapes, status codes and error bodies.

mod common;

use common::json_of;

use chrono::{Duration as ChronoDuration, Utc};
use common::*;
use crewlet_core::{AgentId, Event, EventType};
use crewlet_store::{BudgetCharge, ChargeOutcome};
use serde_json::{Value, json};

fn is_uuid(v: &Value) -> bool {
    v.as_str().is_some_and(|s| uuid::Uuid::parse_str(s).is_ok())
}

/// The active revision's uuid, from `GET /config`'s ETag.
async fn active_id(h: &Harness) -> String {
    let r = h.authed(h.get("/config")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.headers()["etag"]
        .to_str()
        .unwrap()
        .trim_matches('"')
        .to_owned()
}

fn put(h: &Harness, body: impl Into<String>) -> reqwest::RequestBuilder {
    h.authed(h.http.put(h.url("/config")))
        .header("content-type", "application/yaml")
        .body(body.into())
}

#[tokio::test]
async fn get_config_is_the_active_payload_as_json_or_yaml() {
    let h = Harness::start().await;
    let r = h.authed(h.get("/config")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let etag = r.headers()["etag"].to_str().unwrap().to_owned();
    let body = json_of(r).await;
    assert_eq!(body["name"], "Test Co");
    assert_eq!(
        body["integrations"]["github"]["webhook_secret"], "${GH_SECRET}",
        "never expanded"
    );
    let active = h.stores.config.active().await.unwrap().unwrap();
    assert_eq!(etag, format!("\"{}\"", active.uuid));
    for yaml in [
        h.authed(h.get("/config?format=yaml")),
        h.authed(h.get("/config?format=YAML")),
        h.authed(h.get("/config"))
            .header("accept", "application/yaml"),
    ] {
        let r = yaml.send().await.unwrap();
        assert_eq!(r.headers()["content-type"], "application/yaml");
        let text = r.text().await.unwrap();
        assert!(text.contains("name: Test Co"), "{text}");
    }
    // Any other format is JSON.
    let r = h.authed(h.get("/config?format=json")).send().await.unwrap();
    assert_eq!(json_of(r).await["name"], "Test Co");
    h.stop().await;
}

#[tokio::test]
async fn get_config_unconfigured_is_404_no_active_revision() {
    let h = Harness::with(Options {
        company: None,
        ..Options::default()
    })
    .await;
    let r = h.authed(h.get("/config")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(json_of(r).await["error"], "no_active_revision");
    // The history is an empty list, not an error.
    let r = h.authed(h.get("/config/revisions")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(json_of(r).await, json!([]));
    h.stop().await;
}

#[tokio::test]
async fn put_config_needs_a_summary() {
    let h = Harness::start().await;
    for blank in [None, Some("   ")] {
        let mut req = put(&h, COMPANY.replace("Test Co", "Renamed"));
        if let Some(b) = blank {
            req = req.header("x-summary", b);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 400);
        let body = json_of(r).await;
        assert_eq!(body["error"], "summary_required");
        assert!(
            body["hint"].as_str().unwrap().contains("X-Summary"),
            "{body}"
        );
    }
    assert_eq!(
        h.stores.config.list(10).await.unwrap().len(),
        1,
        "nothing stored"
    );

    // `_summary` in the body works and is not part of the company.
    let yaml = format!(
        "_summary: rename via body\n{}",
        COMPANY.replace("Test Co", "Body Co")
    );
    let r = put(&h, yaml).send().await.unwrap();
    assert_eq!(r.status(), 201);
    let rev = json_of(r).await;
    assert_eq!(rev["summary"], "rename via body");
    let active = h.stores.config.active().await.unwrap().unwrap();
    assert_eq!(active.payload["name"], "Body Co");
    assert!(active.payload.get("_summary").is_none());
    // In a JSON body too, and the header wins over it.
    let mut company: Value =
        serde_json::to_value(crewlet_config::check_company("t", COMPANY).unwrap().0).unwrap();
    company["_summary"] = json!("from the body");
    let r = h
        .authed(h.http.put(h.url("/config")))
        .header("content-type", "application/json")
        .header("x-summary", "from the header")
        .body(company.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(json_of(r).await["summary"], "from the header");
    h.stop().await;
}

#[tokio::test]
async fn put_config_is_201_with_the_revision_record() {
    let h = Harness::start().await;
    let base = active_id(&h).await;
    let r = put(&h, COMPANY.replace("name: Test Co", "name: Test Co Two"))
        .header("if-match", base.as_str())
        .header("x-summary", "rename the company")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let etag = r.headers()["etag"].to_str().unwrap().to_owned();
    let rev = json_of(r).await;
    assert!(is_uuid(&rev["revision_id"]), "{rev}");
    assert_eq!(
        etag,
        format!("\"{}\"", rev["revision_id"].as_str().unwrap())
    );
    assert_eq!(rev["parent_revision_id"], base.as_str());
    assert_eq!(rev["summary"], "rename the company");
    assert_eq!(rev["source"], "api");
    assert_eq!(rev["created_by"], "api:ops");
    assert_eq!(rev["is_active"], true);
    for t in ["created_at", "activated_at"] {
        let text = rev[t].as_str().unwrap();
        assert!(text.ends_with("+00:00"), "{t}: {text}");
        assert!(
            chrono::DateTime::parse_from_rfc3339(text).is_ok(),
            "{t}: {text}"
        );
    }
    // Ours, kept as extra fields.
    assert_eq!(rev["revision_number"], 2);
    assert_eq!(rev["parent_revision_number"], 1);
    assert_eq!(rev["company"], "Test Co Two");
    assert_eq!(active_id(&h).await, rev["revision_id"].as_str().unwrap());
    let org = json_of(h.get("/org").send().await.unwrap()).await;
    assert_eq!(org["company"], "Test Co Two");
    let activated = h.published.on("crewlet.events.config_revision_activated");
    assert_eq!(activated.len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn a_stale_if_match_is_409_revision_advanced() {
    let h = Harness::start().await;
    let first = active_id(&h).await;
    let r = put(&h, COMPANY.replace("Test Co", "Two"))
        .header("x-summary", "two")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "no If-Match: last writer wins");
    let second = json_of(r).await["revision_id"].as_str().unwrap().to_owned();

    for stale in [
        first.clone(),
        format!("\"{first}\""),
        "none".into(),
        "garbage".into(),
        "1".into(),
    ] {
        let r = put(&h, COMPANY.replace("Test Co", "Three"))
            .header("x-summary", "three")
            .header("if-match", stale.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 409, "If-Match {stale}");
        let body = json_of(r).await;
        assert_eq!(body["error"], "revision_advanced");
        assert_eq!(body["current_revision_id"], second.as_str());
        assert_eq!(body["your_base"], stale.as_str());
    }
    assert_eq!(
        h.stores.config.list(10).await.unwrap().len(),
        2,
        "nothing stored"
    );
    // The current one (as uuid, entity tag, or our number) goes through.
    for (good, n) in [
        (format!("W/\"{second}\""), 3),
        ("3".to_owned(), 4),
        ("*".to_owned(), 5),
    ] {
        let r = put(&h, COMPANY.replace("Test Co", &format!("Co {n}")))
            .header("x-summary", "next")
            .header("if-match", good.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "If-Match {good}");
        assert_eq!(json_of(r).await["revision_number"], n);
    }
    h.stop().await;
}

#[tokio::test]
async fn if_match_without_a_revision_is_412_and_none_is_accepted() {
    let h = Harness::with(Options {
        company: None,
        ..Options::default()
    })
    .await;
    let some = uuid::Uuid::new_v4().to_string();
    for wanted in [some.as_str(), "*", "1"] {
        let r = put(&h, COMPANY)
            .header("x-summary", "first")
            .header("if-match", wanted)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 412, "If-Match {wanted}");
        assert_eq!(
            json_of(r).await["error"],
            "if_match_must_be_none_when_unconfigured"
        );
    }
    let r = put(&h, COMPANY)
        .header("x-summary", "first")
        .header("if-match", "none")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let rev = json_of(r).await;
    assert!(rev["parent_revision_id"].is_null());
    assert_eq!(rev["revision_number"], 1);
    h.stop().await;
}

#[tokio::test]
async fn bad_bodies_are_400_with_the_originals_codes() {
    let h = Harness::start().await;
    let cases = [
        ("", "invalid_body"),
        ("- a\n- b\n", "invalid_body"),
        ("name: [unclosed", "invalid_body"),
        ("name: Broken\ncolour: blue\n", "validation_error"),
    ];
    for (body, code) in cases {
        let r = put(&h, body).header("x-summary", "x").send().await.unwrap();
        assert_eq!(r.status(), 400, "{body:?}");
        let b = json_of(r).await;
        assert_eq!(b["error"], code, "{body:?}: {b}");
        assert!(b["detail"].is_string(), "{b}");
    }
    // A validation error keeps our located problems.
    let bad = "name: Broken\nunits:\n  - name: Eng\n    lead: ghost\n    roles:\n      - name: A\n        handle: Bad Handle\n    colour: blue\n";
    let b = json_of(put(&h, bad).header("x-summary", "x").send().await.unwrap()).await;
    assert_eq!(b["error"], "validation_error");
    let problems = b["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p["path"].as_str().unwrap().contains("colour") && p["line"] == 8),
        "{problems:#?}"
    );
    // A syntax error is located too.
    let b = json_of(
        put(&h, "name: [unclosed")
            .header("x-summary", "x")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(b["problems"][0]["line"].is_number(), "{b}");
    // Ours: a body that is neither YAML nor JSON by its type is 415.
    let r = h
        .authed(h.http.put(h.url("/config")))
        .header("content-type", "text/xml")
        .header("x-summary", "x")
        .body("<company/>")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    assert_eq!(
        h.stores.config.list(10).await.unwrap().len(),
        1,
        "nothing stored"
    );
    h.stop().await;
}

#[tokio::test]
async fn revisions_are_a_paged_array_newest_first() {
    let h = Harness::start().await;
    for n in 2..=5 {
        let r = put(&h, COMPANY.replace("Test Co", &format!("Co {n}")))
            .header("x-summary", format!("make {n}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    let all = json_of(h.authed(h.get("/config/revisions")).send().await.unwrap()).await;
    let all = all.as_array().unwrap();
    let numbers: Vec<i64> = all
        .iter()
        .map(|r| r["revision_number"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, [5, 4, 3, 2, 1]);
    let keys: Vec<&str> = all[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for k in [
        "revision_id",
        "parent_revision_id",
        "created_at",
        "created_by",
        "source",
        "summary",
        "is_active",
        "activated_at",
    ] {
        assert!(keys.contains(&k), "{k} missing from {keys:?}");
    }
    assert!(all[0].get("payload").is_none());
    assert_eq!(all[0]["is_active"], true);
    assert_eq!(all[1]["is_active"], false);
    assert_eq!(all[0]["parent_revision_id"], all[1]["revision_id"]);

    let page = |q: &str| {
        let req = h.authed(h.get(&format!("/config/revisions?{q}")));
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), json_of(r).await)
        }
    };
    let (s, p) = page("limit=2").await;
    assert_eq!(s, 200);
    assert_eq!(p.as_array().unwrap()[..], all[..2]);
    let (_, p) = page("limit=2&offset=2").await;
    assert_eq!(p.as_array().unwrap()[..], all[2..4]);
    let (_, p) = page("limit=2&offset=4").await;
    assert_eq!(p.as_array().unwrap()[..], all[4..]);
    let (_, p) = page("offset=9").await;
    assert_eq!(p, json!([]));
    let (_, p) = page("limit=0").await;
    assert_eq!(p, json!([]));
    for bad in ["limit=x", "offset=-1", "limit=-5", "limit=1.5"] {
        let (s, b) = page(bad).await;
        assert_eq!(s, 400, "{bad}");
        assert_eq!(b["error"], "invalid_pagination", "{bad}");
    }

    // The audit view: the same records in a wrapper.
    let r = h
        .authed(h.get("/config/audit?limit=3"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let audit = json_of(r).await;
    assert_eq!(audit["revisions"].as_array().unwrap()[..], all[..3]);
    for bad in ["0", "501", "x"] {
        let r = h
            .authed(h.get(&format!("/config/audit?limit={bad}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{bad}");
        assert_eq!(json_of(r).await["error"], "invalid_limit");
    }
    h.stop().await;
}

#[tokio::test]
async fn one_revision_with_its_payload_and_a_diff() {
    let h = Harness::start().await;
    let first = active_id(&h).await;
    let r = put(&h, COMPANY.replace("Test Co", "Two Co"))
        .header("x-summary", "rename")
        .send()
        .await
        .unwrap();
    let second = json_of(r).await["revision_id"].as_str().unwrap().to_owned();

    let r = h
        .authed(h.get(&format!("/config/revisions/{first}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let rev = json_of(r).await;
    assert_eq!(rev["revision_id"], first.as_str());
    assert_eq!(rev["payload"]["name"], "Test Co");
    assert_eq!(rev["is_active"], false);
    // Ours: the number names it too.
    let by_number = json_of(h.authed(h.get("/config/revisions/1")).send().await.unwrap()).await;
    assert_eq!(by_number["revision_id"], first.as_str());
    let r = h
        .authed(h.get("/config/revisions/not-a-uuid"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(json_of(r).await["error"], "invalid_uuid");
    let missing = uuid::Uuid::new_v4();
    let r = h
        .authed(h.get(&format!("/config/revisions/{missing}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(json_of(r).await["error"], "not_found");

    // Against the active revision by default.
    let r = h
        .authed(h.get(&format!("/config/revisions/{first}/diff")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let d = json_of(r).await;
    assert_eq!(d["from"], second.as_str());
    assert_eq!(d["to"], first.as_str());
    assert_eq!(
        d["changes"],
        json!([{"op": "replace", "path": "/name", "old": "Two Co", "new": "Test Co"}])
    );
    let d = json_of(
        h.authed(h.get(&format!("/config/revisions/{second}/diff?against={first}")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(d["changes"][0]["new"], "Two Co");
    let r = h
        .authed(h.get(&format!("/config/revisions/{first}/diff?against=zzz")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(json_of(r).await["error"], "invalid_against_uuid");
    let r = h
        .authed(h.get(&format!("/config/revisions/{first}/diff?against={missing}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(json_of(r).await["error"], "against_not_found");
    h.stop().await;
}

#[tokio::test]
async fn revert_makes_a_new_active_revision_with_the_old_payload() {
    let h = Harness::start().await;
    let first = active_id(&h).await;
    import(&h.stores, COMPANY_NO_SECRETS).await;
    let second = active_id(&h).await;

    let r = h
        .authed(
            h.http
                .post(h.url(&format!("/config/revisions/{first}/revert"))),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let rev = json_of(r).await;
    assert!(is_uuid(&rev["revision_id"]));
    assert_ne!(rev["revision_id"], first.as_str(), "a new revision");
    assert_eq!(rev["parent_revision_id"], second.as_str());
    assert_eq!(rev["source"], "api.revert");
    assert_eq!(rev["summary"], format!("revert to {first}"));
    assert_eq!(rev["company"], "Test Co");
    assert_eq!(active_id(&h).await, rev["revision_id"].as_str().unwrap());
    let ready = json_of(h.get("/ready").send().await.unwrap()).await;
    assert_eq!(ready["revision_id"], 3);

    let r = h
        .authed(h.http.post(h.url("/config/revisions/1/revert")))
        .header("x-summary", "back again")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(json_of(r).await["summary"], "back again");

    let missing = uuid::Uuid::new_v4();
    let r = h
        .authed(
            h.http
                .post(h.url(&format!("/config/revisions/{missing}/revert"))),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(json_of(r).await["error"], "not_found");
    let r = h
        .authed(h.http.post(h.url("/config/revisions/nope/revert")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(json_of(r).await["error"], "invalid_uuid");

    // Ours: `activate` is the same revert answering 200, with If-Match.
    let r = h
        .authed(
            h.http
                .post(h.url(&format!("/config/revisions/{second}/activate"))),
        )
        .header("if-match", first.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    assert_eq!(json_of(r).await["error"], "revision_advanced");
    let r = h
        .authed(
            h.http
                .post(h.url(&format!("/config/revisions/{second}/activate"))),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(json_of(r).await["company"], "Bare Co");
    h.stop().await;
}

fn phase(role: &str, phase: &str, turn: &str, input: u64, at: chrono::DateTime<Utc>) -> Event {
    let mut e = Event::new(EventType::AgentPhaseCompleted, "turn")
        .with_agent(AgentId::for_seat("Test Co", role), role)
        .with_payload(json!({
            "phase": phase, "model": "gpt-test", "provider": "openai",
            "input_tokens": input, "output_tokens": 1, "turn_id": turn,
        }));
    e.timestamp = at;
    e
}

#[tokio::test]
async fn token_breakdown_has_the_originals_parameters_and_shape() {
    let h = Harness::start().await;
    let now = Utc::now();
    h.stores
        .events
        .append(&[
            phase("eng", "plan", "t1", 10, now - ChronoDuration::hours(3)),
            phase("eng", "execute", "t1", 20, now - ChronoDuration::hours(2)),
            phase("cto", "plan", "t2", 5, now - ChronoDuration::hours(1)),
            phase("cto", "plan", "t3", 7, now - ChronoDuration::days(3)),
        ])
        .await
        .unwrap();
    let get = |q: &str| {
        let req = h.get(&format!("/tokens/breakdown{q}"));
        let q = q.to_owned();
        async move {
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 200, "{q}");
            json_of(r).await
        }
    };
    // Default window is 7 days.
    let b = get("").await;
    assert_eq!(b["since_days"], 7);
    assert_eq!(b["agent_role"], "");
    assert_eq!(
        b["totals"],
        json!({"input_tokens": 42, "output_tokens": 4, "total_tokens": 46, "calls": 4})
    );
    for key in ["by_phase", "by_model", "by_worker", "by_agent", "by_turn"] {
        assert!(b[key].is_array(), "{key}");
    }
    assert_eq!(b["by_phase"][0]["phase"], "plan");
    assert_eq!(b["by_phase"][0]["total_tokens"], 25);
    assert_eq!(b["by_model"][0]["model"], "gpt-test");
    let eng = &b["by_agent"][0];
    assert_eq!(eng["role"], "eng");
    assert_eq!(eng["handle"], "eng", "filled in from the organization");
    assert_eq!(
        eng["agent_id"],
        AgentId::for_seat("Test Co", "eng").to_string()
    );
    assert_eq!(eng["total_tokens"], 32);
    assert_eq!(eng["by_phase"]["plan"]["total_tokens"], 11);
    assert_eq!(eng["by_phase"]["execute"]["calls"], 1);
    // Turns newest first, with their span.
    let turns: Vec<&str> = b["by_turn"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["turn_id"].as_str().unwrap())
        .collect();
    assert_eq!(turns, ["t2", "t1", "t3"]);
    let t1 = &b["by_turn"][1];
    assert!(t1["started_at"].as_str().unwrap() < t1["ended_at"].as_str().unwrap());
    assert_eq!(t1["handle"], "eng");
    assert_eq!(t1["by_phase"]["execute"]["input_tokens"], 20);
    assert_eq!(b["aggregated_through"], b["by_turn"][0]["ended_at"]);

    // since_days is cut to 1..=30; not a number is the default.
    assert_eq!(get("?since_days=1").await["totals"]["calls"], 3);
    assert_eq!(get("?since_days=0").await["since_days"], 1);
    assert_eq!(get("?since_days=365").await["since_days"], 30);
    assert_eq!(get("?since_days=soon").await["since_days"], 7);
    // One role.
    let cto = get("?agent_role=cto").await;
    assert_eq!(cto["agent_role"], "cto");
    assert_eq!(cto["totals"]["calls"], 2);
    assert_eq!(cto["by_agent"].as_array().unwrap().len(), 1);
    assert_eq!(
        get("?agent_role=").await["totals"]["calls"],
        4,
        "empty is every role"
    );
    // recent_turns caps by_turn (cut to 1..=500).
    assert_eq!(
        get("?recent_turns=1").await["by_turn"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        get("?recent_turns=0").await["by_turn"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        get("?recent_turns=many").await["by_turn"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    // Nothing matched: the same skeleton, empty watermark.
    let none = get("?agent_role=ghost").await;
    assert_eq!(none["totals"]["calls"], 0);
    assert_eq!(none["aggregated_through"], "");
    h.stop().await;
}

#[tokio::test]
async fn budgets_show_caps_durable_usage_and_refusals() {
    let yaml = COMPANY
        .replace("name: Test Co", "name: Test Co\ntoken_budget: 1000")
        .replace("handle: eng", "handle: eng\n        token_budget: 100");
    let h = Harness::with(Options {
        company: Some(Box::leak(yaml.into_boxed_str())),
        ..Options::default()
    })
    .await;
    let eng = AgentId::for_seat("Test Co", "eng");
    let charge = |tokens| BudgetCharge::new(eng, "eng", tokens, 1000, 100);
    let ledger = &h.stores.ledger;
    assert_eq!(
        ledger.charge(&charge(60)).await.unwrap(),
        ChargeOutcome::Charged
    );
    assert!(matches!(
        ledger.charge(&charge(60)).await.unwrap(),
        ChargeOutcome::Refused(_)
    ));

    let r = h.get("/budgets").send().await.unwrap();
    assert_eq!(r.status(), 200);
    let b = json_of(r).await;
    assert_eq!(b["durable"], true);
    assert_eq!(b["org"]["max_tokens"], 1000);
    assert_eq!(b["org"]["durable_used"], 60);
    assert!(b["org"]["live_used"].is_null() && b["org"]["live_max"].is_null());
    assert_eq!(b["org"]["refused_at"], "");
    let seats = b["seats"].as_array().unwrap();
    assert_eq!(seats.len(), 3, "every agent seat");
    let first = &seats[0];
    assert_eq!(first["handle"], "eng", "most spent first");
    assert_eq!(first["role"], "Engineer");
    assert_eq!(first["agent_id"], eng.to_string());
    assert_eq!(first["max_tokens"], 100);
    assert_eq!(first["durable_used"], 60);
    assert!(
        chrono::DateTime::parse_from_rfc3339(first["durable_updated_at"].as_str().unwrap()).is_ok()
    );
    assert!(
        chrono::DateTime::parse_from_rfc3339(first["refused_at"].as_str().unwrap()).is_ok(),
        "the refusal is exhaustion: {first}"
    );
    assert_eq!(seats[1]["durable_used"], 0);
    assert_eq!(seats[1]["durable_updated_at"], "");
    // Ours, kept: the ledger rows and lifetime usage.
    assert!(b["budgets"].is_array() && b["usage"].is_array());
    h.stop().await;
}
