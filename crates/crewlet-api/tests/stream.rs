//! The live stream: the snapshot shows the company's seats with the state
//! the events gave them; a socket gets its snapshot, then every event in
//! publish order with the seat changes they cause; a socket that resumes
//! with `after` gets exactly what it missed, once; subject filters hold;
//! a client that stops reading is closed (4008), not buffered.

mod common;

use std::time::Duration;

use common::{Harness, json_of};
use crewlet_core::payload::{EventPayload, TaskStarted, TriggerSummary};
use crewlet_core::{AgentId, Event, EventType};
use crewlet_queue::{EventQueue, topics};
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

const WAIT: Duration = Duration::from_secs(20);

fn eng_event(kind: EventType, summary: &str) -> Event {
    Event::new(kind, "test")
        .with_summary(summary)
        .with_agent(AgentId::for_seat("Test Co", "eng"), "Engineer")
        .with_agent_handle("eng")
        .with_task("t-1")
}

fn task_started() -> Event {
    let payload = TaskStarted {
        turn_id: uuid::Uuid::now_v7(),
        trigger: TriggerSummary {
            source: "api".into(),
            sender: None,
            channel: None,
            task_id: "t-1".into(),
            delegation_depth: 0,
            summary: "write the notes".into(),
        },
    };
    let mut e = eng_event(EventType::TaskStarted, "eng started t-1");
    e.payload = payload.to_payload();
    e
}

async fn publish(h: &Harness, e: &Event) {
    h.queue
        .publish(&topics::events(&e.event_type), e)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
}

async fn connect(h: &Harness, query: &str) -> Socket {
    let url = format!("{}/ws/stream{query}", h.base.replacen("http", "ws", 1));
    let (socket, _) = tokio_tungstenite::connect_async(url)
        .await
        .unwrap_or_else(|e| panic!("connecting the socket: {e}"));
    socket
}

/// The next frame as JSON (skipping heartbeats).
async fn next(s: &mut Socket) -> Value {
    loop {
        let msg = tokio::time::timeout(WAIT, s.next())
            .await
            .unwrap_or_else(|_| panic!("no frame within {WAIT:?}"))
            .unwrap_or_else(|| panic!("the socket closed"))
            .unwrap_or_else(|e| panic!("{e}"));
        if let Message::Text(t) = msg {
            let v: Value = serde_json::from_str(t.as_str()).unwrap_or_else(|e| panic!("{e}"));
            if v["kind"] != "heartbeat" {
                return v;
            }
        }
    }
}

/// Event frames until `n` of them, ignoring seat frames.
async fn events(s: &mut Socket, n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    while out.len() < n {
        let f = next(s).await;
        if f["kind"] == "event" {
            out.push(f["data"].clone());
        }
    }
    out
}

/// One seat of a snapshot.
fn seat(snap: &Value, handle: &str) -> Value {
    snap["seats"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["handle"] == handle))
        .cloned()
        .unwrap_or_else(|| panic!("no seat {handle} in {snap}"))
}

/// Waits until the hub has applied `id` (the feed is asynchronous).
async fn applied(h: &Harness, id: uuid::Uuid) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let snap = json_of(
            h.get("/stream/snapshot")
                .send()
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        )
        .await;
        if snap["cursor"] == id.to_string() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "event {id} never reached the snapshot: {snap}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_snapshot_shows_seats_and_their_live_state() {
    let h = Harness::start().await;
    let snap = json_of(h.get("/stream/snapshot").send().await.unwrap()).await;
    let seats = snap["seats"].as_array().unwrap();
    let eng = seats.iter().find(|s| s["handle"] == "eng").unwrap();
    assert_eq!(eng["state"], "idle");
    assert_eq!(snap["company"], "Test Co");
    let started = task_started();
    publish(&h, &started).await;
    applied(&h, started.id).await;
    let snap = json_of(h.get("/stream/snapshot").send().await.unwrap()).await;
    let eng = seat(&snap, "eng");
    assert_eq!(eng["state"], "working");
    assert_eq!(eng["task"]["task_id"], "t-1");
    assert_eq!(snap["events"][0]["id"], started.id.to_string());
    assert!(
        snap["events"][0].get("payload").is_none(),
        "snapshot rows carry no payload"
    );

    let failed = {
        let mut e = eng_event(EventType::TaskFailed, "eng failed t-1");
        e.payload = serde_json::json!({"turn_id": uuid::Uuid::now_v7(), "reason": "max_iter", "detail": "ran out", "will_retry": false});
        e
    };
    publish(&h, &failed).await;
    applied(&h, failed.id).await;
    let snap = json_of(h.get("/stream/snapshot").send().await.unwrap()).await;
    let eng = seat(&snap, "eng");
    assert_eq!(eng["state"], "failed");
    assert_eq!(eng["last_error"]["reason"], "max_iter");
    assert_eq!(snap["attention"][0]["kind"], "task_failed");
    assert_eq!(snap["today"]["tasks_failed"], 1);
    assert_eq!(snap["events"][0]["failed"], true);
    h.stop().await;
}

#[tokio::test]
async fn a_socket_gets_every_event_in_order_and_resumes_without_gaps_or_duplicates() {
    let h = Harness::start().await;
    let mut s = connect(&h, "").await;
    let first = next(&mut s).await;
    assert_eq!(first["kind"], "snapshot");

    let started = task_started();
    publish(&h, &started).await;
    let mut seen_seat = false;
    let mut got_event = false;
    while !(seen_seat && got_event) {
        let f = next(&mut s).await;
        match f["kind"].as_str() {
            Some("event") => {
                assert_eq!(f["data"]["id"], started.id.to_string());
                assert!(
                    f["data"]["payload"].is_object(),
                    "socket events carry the payload"
                );
                got_event = true;
            }
            Some("seat") => {
                assert_eq!(f["data"]["handle"], "eng");
                assert_eq!(f["data"]["state"], "working");
                seen_seat = true;
            }
            other => panic!("unexpected frame {other:?}: {f}"),
        }
    }
    let batch: Vec<Event> = (0..20)
        .map(|i| eng_event(EventType::MessageSent, &format!("m{i}")))
        .collect();
    for e in &batch[..5] {
        publish(&h, e).await;
    }
    let got = events(&mut s, 5).await;
    let last = got[4]["id"].as_str().unwrap().to_owned();
    assert_eq!(last, batch[4].id.to_string());
    drop(s);

    // Missed while away: 15 events.
    for e in &batch[5..] {
        publish(&h, e).await;
    }
    applied(&h, batch[19].id).await;
    let mut s = connect(&h, &format!("?after={last}")).await;
    assert_eq!(next(&mut s).await["kind"], "snapshot");
    let replay = events(&mut s, 15).await;
    let ids: Vec<String> = replay
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    let want: Vec<String> = batch[5..].iter().map(|e| e.id.to_string()).collect();
    assert_eq!(ids, want, "exactly the missed events, in order");
    let resumed = next(&mut s).await;
    assert_eq!(resumed["kind"], "resumed");
    assert_eq!(resumed["data"]["replayed"], 15);
    assert_eq!(resumed["data"]["complete"], true);
    // Live again, nothing repeated.
    let more = eng_event(EventType::MessageSent, "after");
    publish(&h, &more).await;
    let f = events(&mut s, 1).await;
    assert_eq!(f[0]["id"], more.id.to_string());

    // A cursor nobody knows is said to be incomplete.
    let mut s = connect(&h, &format!("?after={}", uuid::Uuid::now_v7())).await;
    assert_eq!(next(&mut s).await["kind"], "snapshot");
    let r = next(&mut s).await;
    assert_eq!(r["kind"], "resumed");
    assert_eq!(r["data"]["complete"], false);
    s.send(Message::Text(r#"{"kind":"ping"}"#.into()))
        .await
        .unwrap();
    assert_eq!(next(&mut s).await["kind"], "pong");
    h.stop().await;
}

#[tokio::test]
async fn subjects_filter_events_and_bad_ones_are_refused() {
    let h = Harness::start().await;
    let mut s = connect(
        &h,
        "?subjects=crewlet.events.task_started,crewlet.events.task_completed",
    )
    .await;
    assert_eq!(next(&mut s).await["kind"], "snapshot");
    publish(&h, &eng_event(EventType::MessageSent, "chatter")).await;
    let started = task_started();
    publish(&h, &started).await;
    let got = events(&mut s, 1).await;
    assert_eq!(
        got[0]["id"],
        started.id.to_string(),
        "message_sent was filtered out"
    );
    let r = h
        .get("/ws/stream?subjects=a..b")
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_not_buffered() {
    let h = Harness::start().await;
    let mut s = connect(&h, "").await;
    assert_eq!(next(&mut s).await["kind"], "snapshot");
    // Far more than the socket buffers and the broadcast ring hold.
    let pad = "x".repeat(2000);
    let mut last = None;
    for i in 0..40_000 {
        let e = eng_event(EventType::MessageSent, &format!("{i} {pad}"));
        publish(&h, &e).await;
        last = Some(e.id);
        if i % 200 == 199 {
            // Let the feed keep up (its upstream buffer is bounded too):
            // the test is about the socket falling behind, not the feed.
            applied(&h, e.id).await;
        }
    }
    // Every event reached the hub while this client read nothing.
    applied(&h, last.unwrap_or_default()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let code = loop {
        assert!(tokio::time::Instant::now() < deadline, "never closed");
        match tokio::time::timeout(WAIT, s.next()).await {
            Ok(Some(Ok(Message::Close(Some(f))))) => {
                break (u16::from(f.code), f.reason.to_string());
            }
            Ok(Some(Ok(_))) => continue,
            other => panic!("unexpected end of the socket: {other:?}"),
        }
    };
    assert_eq!(code.0, 4008, "{code:?}");
    assert!(code.1.starts_with("too slow"), "{code:?}");
    h.stop().await;
}

const BUDGET_CO: &str = r#"
name: Budget Co
token_budget: 10000
providers:
  llm:
    main:
      type: openai
      model: gpt-test
      api_keys: ["${OPENAI_API_KEY}"]
roles:
  - name: Engineer
    handle: eng
    token_budget: 1000
  - name: Writer
    handle: writer
"#;

/// Frames until one of `kind` whose data satisfies `until` (the ledger is
/// read every 2 s, so earlier readings may come first).
async fn frame_of(s: &mut Socket, kind: &str, until: impl Fn(&Value) -> bool) -> Value {
    loop {
        let f = next(s).await;
        if f["kind"] == kind && until(&f["data"]) {
            return f["data"].clone();
        }
    }
}

#[tokio::test]
async fn budgets_follow_the_ledger_and_a_cap_at_eighty_percent_needs_attention() {
    use crewlet_store::BudgetCharge;
    let h = Harness::with(common::Options {
        company: Some(BUDGET_CO),
        ..common::Options::default()
    })
    .await;
    let snap = json_of(h.get("/stream/snapshot").send().await.unwrap()).await;
    assert_eq!(seat(&snap, "eng")["budget"]["max"], 1000);
    assert_eq!(seat(&snap, "eng")["budget"]["used"], 0);
    assert!(seat(&snap, "writer")["budget"].is_null(), "no per-seat cap");

    let mut s = connect(&h, "").await;
    assert_eq!(next(&mut s).await["kind"], "snapshot");
    let charge = |handle: &str, tokens| {
        BudgetCharge::new(
            AgentId::for_seat("Budget Co", handle),
            handle,
            tokens,
            10_000,
            if handle == "eng" { 1000 } else { 0 },
        )
    };
    h.stores
        .ledger
        .charge(&charge("eng", 850))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // A seat frame carries the new figure, and a budget frame the org's
    // and the attention item the crossing raised.
    let eng = frame_of(&mut s, "seat", |f| {
        f["handle"] == "eng" && f["budget"]["used"] != 0
    })
    .await;
    assert_eq!(eng["budget"]["used"], 850);
    let budget = frame_of(&mut s, "budget", |f| f["org"]["used"] != 0).await;
    assert_eq!(budget["org"]["used"], 850);
    assert_eq!(budget["org"]["max"], 10_000);
    let raised = budget["attention"].as_array().cloned().unwrap_or_default();
    assert_eq!(raised.len(), 1, "{budget}");
    assert_eq!(raised[0]["kind"], "budget_near");
    assert_eq!(raised[0]["handle"], "eng");
    assert!(raised[0]["event_id"].is_null());

    // The writer spends without a cap of its own: the org moves, nothing
    // needs attention again (eng was already reported).
    h.stores
        .ledger
        .charge(&charge("writer", 100))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let budget = frame_of(&mut s, "budget", |_| true).await;
    assert_eq!(budget["org"]["used"], 950);
    assert_eq!(budget["attention"], serde_json::json!([]));

    let snap = json_of(h.get("/stream/snapshot").send().await.unwrap()).await;
    assert_eq!(snap["budget"]["org"]["used"], 950);
    assert_eq!(seat(&snap, "eng")["budget"]["used"], 850);
    let near: Vec<&Value> = snap["attention"]
        .as_array()
        .map(|a| a.iter().filter(|a| a["kind"] == "budget_near").collect())
        .unwrap_or_default();
    assert_eq!(near.len(), 1, "{snap}");
    h.stop().await;
}

#[tokio::test]
async fn a_large_snapshot_is_gzipped_for_a_client_that_takes_gzip() {
    use std::io::Read as _;
    // Enough seats for a snapshot over the 8 KB threshold.
    let mut yaml = String::from(
        "name: Big Co\nproviders:\n  llm:\n    main: {type: openai, model: m, api_keys: [\"${OPENAI_API_KEY}\"]}\nroles:\n",
    );
    for i in 0..60 {
        yaml.push_str(&format!("  - name: Seat {i}\n    handle: s{i}\n"));
    }
    let yaml: &'static str = Box::leak(yaml.into_boxed_str());
    let h = Harness::with(common::Options {
        company: Some(yaml),
        ..common::Options::default()
    })
    .await;
    let plain = h.get("/stream/snapshot").send().await.unwrap();
    assert!(plain.headers().get("content-encoding").is_none());
    let plain = json_of(plain).await;
    assert_eq!(plain["seats"].as_array().map(Vec::len), Some(60));

    let r = h
        .get("/stream/snapshot")
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-encoding"], "gzip");
    assert_eq!(r.headers()["content-type"], "application/json");
    let gz = r.bytes().await.unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("not gzip: {e}"));
    assert!(gz.len() * 3 < text.len(), "{} of {}", gz.len(), text.len());
    let unzipped: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(unzipped["seats"], plain["seats"]);
    h.stop().await;
}
