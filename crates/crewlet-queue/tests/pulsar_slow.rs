//! SLOW Pulsar tests (about a minute and a half in all; they run in parallel):
//!
//! - `slow_broker_restart_*` starts its OWN throwaway standalone broker
//!   (ports 6660/8090, wiped temp data dir, from the jars `cargo xtask
//!   services up` cached) so that it can SIGKILL and restart it without
//!   disturbing the shared broker.
//! - `slow_long_handler_*` holds one message in a handler for 35 s on the
//!   shared broker, longer than every timeout in play.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crewlet_queue::testsuite::{Recorder, fast_delivery, test_event, unique_topic};
use crewlet_queue::{EventQueue, PulsarOptions, PulsarQueue, QueueError, handler_fn};
use support::ThrowawayPulsar;

fn options(url: &str) -> PulsarOptions {
    let mut o = PulsarOptions::new(url).with_delivery(fast_delivery());
    o.operation_timeout = Duration::from_secs(2);
    o.publish_backoff = vec![Duration::from_millis(200); 4];
    o.reconnect_max_backoff = Duration::from_secs(1);
    o
}

async fn ready(broker: ThrowawayPulsar) -> ThrowawayPulsar {
    let waited = tokio::task::spawn_blocking(move || {
        let mut b = broker;
        let r = b.wait_ready(Duration::from_secs(240));
        (b, r)
    })
    .await;
    match waited {
        Ok((b, Ok(()))) => b,
        Ok((_, Err(e))) => panic!("throwaway broker: {e}"),
        Err(e) => panic!("waiting for the broker: {e}"),
    }
}

/// Acknowledged publishes survive a broker crash (SIGKILL) and restart; a
/// publish during the outage retries and then fails naming the topic; the
/// consumer comes back on its own (the member's supervisor) and receives
/// everything published before and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_broker_restart_loses_no_acknowledged_publish() {
    let Some(jars) = support::require_jars() else {
        return;
    };
    let broker = match ThrowawayPulsar::start(jars, 6660, 8090) {
        Ok(b) => b,
        Err(e) => panic!("cannot start a throwaway broker: {e}"),
    };
    let mut broker = ready(broker).await;
    let q = match PulsarQueue::connect(options(&broker.url())).await {
        Ok(q) => q,
        Err(e) => panic!("connect: {e}"),
    };
    let topic = unique_topic("restart");
    let rec = Recorder::new();
    let _sub = match q.subscribe(&topic, "g", rec.handler()).await {
        Ok(s) => s,
        Err(e) => panic!("subscribe: {e}"),
    };
    let mut acked = Vec::new();
    for i in 0..20 {
        let e = test_event(format!("before {i}"));
        if let Err(err) = q.publish(&topic, &e).await {
            panic!("publish before the crash: {err}");
        }
        acked.push(e.id);
    }
    rec.wait_for(20, Duration::from_secs(60), "before the crash")
        .await;

    broker.kill();
    match q.publish(&topic, &test_event("during the outage")).await {
        Err(e @ QueueError::Publish { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(&topic) && msg.contains("5 attempt"), "{msg}");
        }
        other => panic!("publish during the outage: {other:?}"),
    }

    if let Err(e) = broker.restart() {
        panic!("restart: {e}");
    }
    let _broker = ready(broker).await;
    // The broker takes a moment to load the topic again: publish until it takes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut after = 0;
    while after < 20 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "publishing after the restart never succeeded"
        );
        let e = test_event(format!("after {after}"));
        match q.publish(&topic, &e).await {
            Ok(()) => {
                acked.push(e.id);
                after += 1;
            }
            Err(err) => eprintln!("publish after restart not yet: {err}"),
        }
    }
    let want: BTreeSet<_> = acked.iter().copied().collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let got: BTreeSet<_> = rec.seen().iter().map(|d| d.event.id).collect();
        let missing = want.difference(&got).count();
        if missing == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{missing} acknowledged events never arrived after the restart"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    q.shutdown().await;
}

const LONG_TURN: Duration = Duration::from_secs(35);

/// A handler that runs longer than the broker keep-alive (30 s), the client
/// operation timeout (2 s here) and the redelivery delay is not redelivered
/// mid-turn, not even to an idle second member: there is no ack timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_long_handler_is_delivered_exactly_once() {
    let url = crewlet_test_support::require!(pulsar);
    let topic = unique_topic("long-turn");
    let starts = Arc::new(AtomicUsize::new(0));
    let done = Recorder::new();
    let handler = {
        let (starts, done) = (starts.clone(), done.clone());
        handler_fn(move |d| {
            let (starts, done) = (starts.clone(), done.clone());
            async move {
                starts.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(LONG_TURN).await;
                done.record(d);
                Ok(())
            }
        })
    };
    let mut nodes = Vec::new();
    let mut subs = Vec::new();
    for _ in 0..2 {
        let q = match PulsarQueue::connect(options(&url)).await {
            Ok(q) => q,
            Err(e) => panic!("connect: {e}"),
        };
        match q.subscribe(&topic, "seat", handler.clone()).await {
            Ok(s) => subs.push(s),
            Err(e) => panic!("subscribe: {e}"),
        }
        nodes.push(q);
    }
    if let Err(e) = nodes[0].publish(&topic, &test_event("an LLM turn")).await {
        panic!("publish: {e}");
    }
    done.wait_for(1, LONG_TURN + Duration::from_secs(60), "long turn")
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(starts.load(Ordering::SeqCst), 1, "delivered exactly once");
    assert_eq!(done.len(), 1);
    for q in nodes {
        q.shutdown().await;
    }
}
