//! [`EventStore`] conformance.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Duration, SubsecRound, Utc};
use crewlet_core::{AgentId, Category, Event, EventType, TraceContext};
use serde_json::json;
use uuid::Uuid;

use super::ok;
use crate::StoreError;
use crate::events::{BreakdownQuery, EventQuery, EventStore, MAX_TRACE_EVENTS, TokenTotals};

fn at(event: Event, t: DateTime<Utc>) -> Event {
    Event {
        timestamp: t,
        ..event
    }
}

/// A realistic phase event: `agent` ran `phase` on `model` in `turn`.
pub fn phase_event(
    agent: &str,
    phase: &str,
    model: &str,
    turn: &str,
    input: u64,
    output: u64,
) -> Event {
    Event::new(EventType::AgentPhaseCompleted, "turn")
        .with_agent(AgentId::for_seat("Conformance", agent), agent)
        .with_payload(json!({
            "phase": phase,
            "model": model,
            "provider": "openai",
            "input_tokens": input,
            "output_tokens": output,
            "turn_id": turn,
        }))
}

/// `event` with `calls` (LLM completions) in its payload.
pub fn with_calls(mut event: Event, calls: u64) -> Event {
    if let Some(p) = event.payload.as_object_mut() {
        p.insert("calls".into(), json!(calls));
    }
    event
}

pub async fn append_then_get_round_trips_the_full_envelope(store: Arc<dyn EventStore>) {
    let event = Event::new(EventType::AgentPhaseCompleted, "turn")
        .with_summary("plan done")
        .with_agent(AgentId::for_seat("Acme", "eng"), "Engineer")
        .with_task("task-1")
        .with_channel("C123")
        .with_sender("U42")
        .with_trace(TraceContext::new_root().child())
        .with_delegation_depth(2)
        .with_tag("phase", "plan")
        .with_payload(
            json!({"input_tokens": 120, "output_tokens": 30, "model": "gpt-x",
                             "nested": {"list": [1, "two", null]}}),
        );
    let minimal = Event::new(EventType::Other("future.kind".into()), "elsewhere")
        .with_category(Category::Other("telemetry".into()));
    ok(
        store.append(&[event.clone(), minimal.clone()]).await,
        "append",
    );

    let mut expected = event.clone();
    expected.timestamp = expected.timestamp.trunc_subsecs(6);
    assert_eq!(ok(store.get(event.id).await, "get"), Some(expected));
    let mut expected = minimal.clone();
    expected.timestamp = expected.timestamp.trunc_subsecs(6);
    assert_eq!(ok(store.get(minimal.id).await, "get"), Some(expected));
}

pub async fn turn_progress_is_never_stored(store: Arc<dyn EventStore>) {
    let progress = Event::new(EventType::AgentTurnProgress, "turn");
    let kept = Event::new(EventType::TaskStarted, "engine");
    ok(
        store.append(&[progress.clone(), kept.clone()]).await,
        "append",
    );
    assert!(ok(store.get(progress.id).await, "get").is_none());
    let page = ok(store.recent(&EventQuery::default()).await, "recent");
    assert_eq!(page.events.len(), 1);
    assert_eq!(page.events[0].id, kept.id);
}

pub async fn duplicate_ids_are_stored_once(store: Arc<dyn EventStore>) {
    let e = Event::new(EventType::TaskStarted, "engine");
    ok(
        store.append(&[e.clone(), e.clone()]).await,
        "append a batch with a repeat",
    );
    ok(store.append(std::slice::from_ref(&e)).await, "append again");
    let page = ok(store.recent(&EventQuery::default()).await, "recent");
    assert_eq!(page.events.len(), 1);
}

pub async fn recent_filters_by_type_category_agent_task_and_time(store: Arc<dyn EventStore>) {
    let now = Utc::now().trunc_subsecs(6);
    let eng = AgentId::for_seat("Conformance", "eng");
    let pm = AgentId::for_seat("Conformance", "pm");
    let events = vec![
        at(
            Event::new(EventType::TaskStarted, "e")
                .with_agent(eng, "eng")
                .with_task("t1"),
            now - Duration::minutes(5),
        ),
        at(
            Event::new(EventType::TaskCompleted, "e")
                .with_agent(eng, "eng")
                .with_task("t1"),
            now - Duration::minutes(4),
        ),
        at(
            Event::new(EventType::TaskStarted, "e")
                .with_agent(pm, "pm")
                .with_task("t2"),
            now - Duration::minutes(3),
        ),
        at(
            Event::new(EventType::MessageSent, "e").with_agent(pm, "pm"),
            now - Duration::minutes(2),
        ),
        at(
            Event::new(EventType::RawWebhook, "api"),
            now - Duration::minutes(1),
        ),
    ];
    ok(store.append(&events).await, "append");
    let ids = |q: EventQuery| {
        let store = Arc::clone(&store);
        async move {
            ok(store.recent(&q).await, "recent")
                .events
                .iter()
                .map(|e| e.id)
                .collect::<Vec<Uuid>>()
        }
    };
    let all = ids(EventQuery::default()).await;
    assert_eq!(
        all,
        events.iter().rev().map(|e| e.id).collect::<Vec<_>>(),
        "newest first"
    );
    let q = EventQuery {
        event_type: Some(EventType::TaskStarted),
        ..EventQuery::default()
    };
    assert_eq!(ids(q).await, vec![events[2].id, events[0].id]);
    let q = EventQuery {
        category: Some(Category::Task),
        ..EventQuery::default()
    };
    assert_eq!(ids(q).await.len(), 3);
    let q = EventQuery {
        agent_id: Some(pm.to_string()),
        ..EventQuery::default()
    };
    assert_eq!(ids(q).await, vec![events[3].id, events[2].id]);
    let q = EventQuery {
        task_id: Some("t1".into()),
        ..EventQuery::default()
    };
    assert_eq!(ids(q).await, vec![events[1].id, events[0].id]);
    let q = EventQuery {
        since: Some(now - Duration::minutes(4)),
        until: Some(now - Duration::minutes(2)),
        ..EventQuery::default()
    };
    assert_eq!(
        ids(q).await,
        vec![events[2].id, events[1].id],
        "since inclusive, until exclusive"
    );
    let q = EventQuery {
        event_type: Some(EventType::TaskStarted),
        agent_id: Some(eng.to_string()),
        ..EventQuery::default()
    };
    assert_eq!(ids(q).await, vec![events[0].id]);
    let q = EventQuery {
        agent_id: Some("nobody".into()),
        ..EventQuery::default()
    };
    assert!(ids(q).await.is_empty());
}

pub async fn keyset_paging_walks_every_event_once_newest_first(store: Arc<dyn EventStore>) {
    // 120 events over 40 distinct instants: ties are broken by id.
    let base = Utc::now().trunc_subsecs(6) - Duration::hours(1);
    let events: Vec<Event> = (0..120)
        .map(|i| {
            at(
                Event::new(EventType::TaskStarted, "e"),
                base + Duration::seconds(i / 3),
            )
        })
        .collect();
    ok(store.append(&events).await, "append");
    let mut seen = Vec::new();
    let mut query = EventQuery {
        limit: Some(50),
        ..EventQuery::default()
    };
    let mut pages = 0;
    loop {
        let page = ok(store.recent(&query).await, "recent");
        pages += 1;
        assert!(page.events.len() <= 50);
        seen.extend(page.events.iter().map(|e| (e.timestamp, e.id)));
        match page.next {
            Some(next) => query.after = Some(next),
            None => break,
        }
        assert!(pages < 10, "paging does not end");
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 120);
    let unique: HashSet<_> = seen.iter().map(|(_, id)| *id).collect();
    assert_eq!(unique.len(), 120, "no event twice");
    let mut sorted = seen.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(seen, sorted, "strictly newest first across pages");
}

pub async fn page_size_defaults_to_50_and_is_capped_at_500(store: Arc<dyn EventStore>) {
    let base = Utc::now().trunc_subsecs(6) - Duration::hours(2);
    let events: Vec<Event> = (0..600)
        .map(|i| {
            at(
                Event::new(EventType::MessageSent, "e"),
                base + Duration::milliseconds(i),
            )
        })
        .collect();
    ok(store.append(&events).await, "append");
    let page = ok(store.recent(&EventQuery::default()).await, "recent");
    assert_eq!(page.events.len(), 50);
    assert!(page.next.is_some());
    let q = EventQuery {
        limit: Some(10_000),
        ..EventQuery::default()
    };
    let page = ok(store.recent(&q).await, "recent");
    assert_eq!(page.events.len(), 500);
    let q = EventQuery {
        limit: Some(600),
        after: page.next,
        ..EventQuery::default()
    };
    let rest = ok(store.recent(&q).await, "recent");
    assert_eq!(rest.events.len(), 100);
    assert!(rest.next.is_none());
}

pub async fn by_trace_is_ordered_oldest_first_and_capped(store: Arc<dyn EventStore>) {
    let root = TraceContext::new_root();
    let base = Utc::now().trunc_subsecs(6) - Duration::minutes(30);
    let traced: Vec<Event> = (0..3)
        .rev()
        .map(|i| {
            at(
                Event::new(EventType::TaskStarted, "e").with_trace(root.child()),
                base + Duration::seconds(i),
            )
        })
        .collect();
    let other = Event::new(EventType::TaskStarted, "e").with_trace(TraceContext::new_root());
    ok(store.append(&traced).await, "append");
    ok(store.append(&[other]).await, "append");
    let got: Vec<Uuid> = ok(store.by_trace(&root.trace_id).await, "by_trace")
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(got, traced.iter().rev().map(|e| e.id).collect::<Vec<_>>());

    let big = TraceContext::new_root();
    let many: Vec<Event> = (0..MAX_TRACE_EVENTS as i64 + 10)
        .map(|i| {
            at(
                Event::new(EventType::MessageSent, "e").with_trace(big.child()),
                base + Duration::milliseconds(i),
            )
        })
        .collect();
    ok(store.append(&many).await, "append");
    let got = ok(store.by_trace(&big.trace_id).await, "by_trace");
    assert_eq!(got.len(), MAX_TRACE_EVENTS);
    assert_eq!(
        got.first().map(|e| e.id),
        Some(many[0].id),
        "the oldest are kept"
    );
}

/// `by_turn` keeps the turns that ended last, each whole: a long turn whose
/// first phase ran hours before the others still counts from its start.
pub async fn by_turn_keeps_the_latest_turns_whole(store: Arc<dyn EventStore>) {
    let now = Utc::now();
    let mut events = vec![
        at(
            phase_event("eng", "plan", "big", "long", 10, 1),
            now - Duration::hours(10),
        ),
        at(
            phase_event("eng", "review", "big", "long", 20, 2),
            now - Duration::minutes(1),
        ),
    ];
    for i in 0..40 {
        events.push(at(
            phase_event("pm", "plan", "big", &format!("short-{i:02}"), 100, 0),
            now - Duration::minutes(100 - i),
        ));
    }
    // A chatty turn: more phase events than a first look at the newest
    // events of the window reads, so a store walking them must look further.
    for i in 0..70 {
        events.push(at(
            phase_event("qa", "execute", "big", "chatty", 1, 0),
            now - Duration::minutes(2) - Duration::seconds(i),
        ));
    }
    ok(store.append(&events).await, "append");
    let mut query = BreakdownQuery::days(1);
    query.recent_turns = 3;
    let b = ok(store.token_breakdown(&query).await, "breakdown");
    let turns: Vec<(&str, u64)> = b
        .by_turn
        .iter()
        .map(|t| (t.turn_id.as_str(), t.tokens.total_tokens))
        .collect();
    assert_eq!(turns, vec![("long", 33), ("chatty", 70), ("short-39", 100)]);
    let long = &b.by_turn[0];
    let started = chrono::DateTime::parse_from_rfc3339(&long.started_at)
        .unwrap_or_else(|e| panic!("started_at {}: {e}", long.started_at));
    assert!(
        started < now - Duration::hours(9),
        "started_at {}",
        long.started_at
    );
    // Every other grouping still counts every turn.
    assert_eq!(b.totals.total_tokens, 33 + 70 + 40 * 100);
}

pub async fn token_breakdown_groups_by_phase_model_worker_agent_and_turn(
    store: Arc<dyn EventStore>,
) {
    let now = Utc::now();
    let recent = now - Duration::hours(2);
    let mut aux = phase_event("eng", "auxiliary", "mini", "t1", 5, 1);
    if let Some(p) = aux.payload.as_object_mut() {
        p.insert("auxiliary".into(), json!("diary_filter"));
    }
    // `calls` is the LLM completions of a phase; an event without it (older
    // or foreign producers) counts as one call.
    let events = vec![
        at(
            with_calls(phase_event("eng", "plan", "big", "t1", 100, 10), 2),
            recent,
        ),
        at(
            with_calls(phase_event("eng", "execute", "big", "t1", 200, 20), 2),
            recent,
        ),
        at(phase_event("eng", "review", "mini", "t1", 50, 5), recent),
        at(aux, recent),
        at(
            with_calls(phase_event("pm", "plan", "big", "t2", 1000, 100), 2),
            recent,
        ),
        // Outside a 1-day window, inside a 7-day one.
        at(
            with_calls(phase_event("pm", "plan", "big", "t3", 7, 7), 2),
            now - Duration::days(3),
        ),
        // Not a phase event: ignored, `calls` included.
        at(
            Event::new(EventType::AgentTurnCompleted, "turn")
                .with_payload(json!({"input_tokens": 999, "calls": 9})),
            recent,
        ),
    ];
    ok(store.append(&events).await, "append");

    let day = BreakdownQuery::days(1);
    let b = ok(store.token_breakdown(&day).await, "breakdown");
    assert_eq!((b.since_days, b.agent_role.as_str()), (1, ""));
    // 5 phase events in the window, 8 LLM calls: 2 + 2 + 1 + 1 + 2.
    assert_eq!(
        (
            b.totals.input_tokens,
            b.totals.output_tokens,
            b.totals.total_tokens,
            b.totals.calls
        ),
        (1355, 136, 1491, 8)
    );
    let sums = |t: &TokenTotals| (t.total_tokens, t.calls);
    let rows = |groups: Vec<(&str, &TokenTotals)>| -> Vec<(String, u64, u64)> {
        groups
            .into_iter()
            .map(|(k, t)| (k.to_owned(), t.total_tokens, t.calls))
            .collect()
    };
    assert_eq!(
        rows(
            b.by_phase
                .iter()
                .map(|g| (g.phase.as_str(), &g.tokens))
                .collect()
        ),
        vec![
            ("plan".into(), 1210, 4),
            ("execute".into(), 220, 2),
            ("review".into(), 55, 1),
            ("auxiliary".into(), 6, 1),
        ]
    );
    assert_eq!(
        rows(
            b.by_model
                .iter()
                .map(|g| (g.model.as_str(), &g.tokens))
                .collect()
        ),
        vec![("big".into(), 1430, 6), ("mini".into(), 61, 2)]
    );
    assert_eq!(b.by_model[0].provider.as_deref(), Some("openai"));
    assert_eq!(
        rows(
            b.by_worker
                .iter()
                .map(|g| (g.worker.as_str(), &g.tokens))
                .collect()
        ),
        vec![("diary_filter".into(), 6, 1)]
    );
    let pm = AgentId::for_seat("Conformance", "pm").to_string();
    let eng = AgentId::for_seat("Conformance", "eng").to_string();
    // Keyed by role, each with the agent id and a split by phase.
    assert_eq!(
        b.by_agent
            .iter()
            .map(|g| (g.role.as_str(), g.agent_id.as_str(), sums(&g.tokens)))
            .collect::<Vec<_>>(),
        vec![
            ("pm", pm.as_str(), (1100, 2)),
            ("eng", eng.as_str(), (391, 6))
        ]
    );
    let eng_row = &b.by_agent[1];
    assert_eq!(
        eng_row
            .by_phase
            .iter()
            .map(|(p, t)| (p.as_str(), sums(t)))
            .collect::<Vec<_>>(),
        vec![
            ("auxiliary", (6, 1)),
            ("execute", (220, 2)),
            ("plan", (110, 2)),
            ("review", (55, 1)),
        ]
    );
    assert_eq!(eng_row.handle, "", "the store does not know handles");
    // Turns newest first: all of t1 and t2 are at `recent`, so ties go by id.
    assert_eq!(
        b.by_turn
            .iter()
            .map(|g| (g.turn_id.as_str(), g.role.as_str(), sums(&g.tokens)))
            .collect::<Vec<_>>(),
        vec![("t1", "eng", (391, 6)), ("t2", "pm", (1100, 2))]
    );
    let stamp = recent.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    assert_eq!(b.by_turn[0].started_at, stamp);
    assert_eq!(b.by_turn[0].ended_at, stamp);
    assert_eq!(b.by_turn[0].by_phase.len(), 4);
    assert_eq!(b.aggregated_through, stamp);

    let week = ok(
        store.token_breakdown(&BreakdownQuery::days(7)).await,
        "breakdown",
    );
    assert_eq!(week.totals.calls, 10);
    assert_eq!(week.by_turn.len(), 3);
    assert_eq!(week.by_phase[0].phase, "plan");
    assert_eq!(sums(&week.by_phase[0].tokens), (1224, 6));
    // The oldest turn comes last.
    assert_eq!(week.by_turn[2].turn_id, "t3");

    // One role; and a shorter turn list.
    let pm_only = ok(
        store
            .token_breakdown(&BreakdownQuery {
                since_days: 7,
                agent_role: Some("pm".into()),
                recent_turns: 1,
            })
            .await,
        "breakdown",
    );
    assert_eq!(pm_only.agent_role, "pm");
    assert_eq!(sums(&pm_only.totals), (1114, 4));
    assert_eq!(
        pm_only
            .by_agent
            .iter()
            .map(|g| g.role.as_str())
            .collect::<Vec<_>>(),
        vec!["pm"]
    );
    assert_eq!(
        pm_only
            .by_turn
            .iter()
            .map(|g| g.turn_id.as_str())
            .collect::<Vec<_>>(),
        vec!["t2"],
        "the latest turn only"
    );
    let nobody = ok(
        store
            .token_breakdown(&BreakdownQuery {
                agent_role: Some("nobody".into()),
                ..BreakdownQuery::days(7)
            })
            .await,
        "breakdown",
    );
    assert_eq!(nobody.totals, TokenTotals::default());
    assert_eq!(nobody.aggregated_through, "");
}

pub async fn token_breakdown_accepts_1_to_30_days_only(store: Arc<dyn EventStore>) {
    for bad in [0, 31, 365] {
        assert!(
            matches!(
                store.token_breakdown(&BreakdownQuery::days(bad)).await,
                Err(StoreError::InvalidInput { .. })
            ),
            "{bad} days accepted"
        );
    }
    for turns in [0, 501] {
        let q = BreakdownQuery {
            recent_turns: turns,
            ..BreakdownQuery::days(1)
        };
        assert!(
            matches!(
                store.token_breakdown(&q).await,
                Err(StoreError::InvalidInput { .. })
            ),
            "{turns} turns accepted"
        );
    }
    for good in [1, 30] {
        let b = ok(
            store.token_breakdown(&BreakdownQuery::days(good)).await,
            "breakdown",
        );
        assert_eq!(b.totals.calls, 0);
        assert!(b.by_phase.is_empty() && b.by_turn.is_empty());
        assert_eq!(b.aggregated_through, "");
    }
}

pub async fn unknown_id_is_none(store: Arc<dyn EventStore>) {
    assert!(ok(store.get(Uuid::now_v7()).await, "get").is_none());
    assert!(
        ok(
            store.by_trace(&TraceContext::new_root().trace_id).await,
            "by_trace"
        )
        .is_empty()
    );
}
