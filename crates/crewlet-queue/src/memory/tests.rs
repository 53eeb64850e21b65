use crate::{EventHandler, EventQueue};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crewlet_core::EventType;

use super::*;
use crate::handler_fn;

fn ev(n: usize) -> Event {
    Event::new(EventType::Other("t".into()), "test").with_summary(n.to_string())
}

fn quick() -> DeliveryOptions {
    DeliveryOptions {
        redelivery_delay: Duration::from_millis(10),
        max_redeliveries: 1,
        shutdown_timeout: Duration::from_millis(100),
        stream_buffer: 2,
        ..DeliveryOptions::default()
    }
}

async fn until(mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not met in 5 s");
}

fn counting(n: &Arc<AtomicUsize>) -> Arc<dyn EventHandler> {
    let n = n.clone();
    handler_fn(move |_| {
        n.fetch_add(1, Ordering::SeqCst);
        async { Ok(()) }
    })
}

#[tokio::test]
async fn retention_is_bounded_and_replayed_to_a_new_group() -> Result<(), QueueError> {
    let broker = MemoryBroker::with_options(MemoryBrokerOptions {
        retained_per_topic: 3,
        delivery: quick(),
    });
    let q = broker.client();
    for i in 0..5 {
        q.publish("crewlet.t", &ev(i)).await?;
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let _sub = q
        .subscribe(
            "crewlet.t",
            "g",
            handler_fn(move |d| {
                s.lock().push(d.event.summary.clone());
                async { Ok(()) }
            }),
        )
        .await?;
    until(|| seen.lock().len() == 3).await;
    assert_eq!(*seen.lock(), vec!["2", "3", "4"]);
    Ok(())
}

#[tokio::test]
async fn without_retention_a_new_group_starts_at_the_end() -> Result<(), QueueError> {
    let broker = MemoryBroker::with_options(MemoryBrokerOptions {
        retained_per_topic: 0,
        delivery: quick(),
    });
    let q = broker.client();
    q.publish("crewlet.t", &ev(0)).await?;
    let n = Arc::new(AtomicUsize::new(0));
    let _sub = q.subscribe("crewlet.t", "g", counting(&n)).await?;
    assert_eq!(broker.backlog("crewlet.t", "g"), Some(0));
    q.publish("crewlet.t", &ev(1)).await?;
    until(|| n.load(Ordering::SeqCst) == 1).await;
    Ok(())
}

#[tokio::test]
async fn backlog_counts_unacked_mail_and_dead_letters_are_kept() -> Result<(), QueueError> {
    let broker = MemoryBroker::with_options(MemoryBrokerOptions {
        retained_per_topic: 16,
        delivery: quick(),
    });
    let q = broker.client();
    assert_eq!(broker.backlog("crewlet.t", "g"), None);
    let sub = q
        .subscribe("crewlet.t", "g", counting(&Arc::new(AtomicUsize::new(0))))
        .await?;
    sub.close().await;
    q.publish("crewlet.t", &ev(0)).await?;
    q.publish("crewlet.t", &ev(1)).await?;
    assert_eq!(broker.backlog("crewlet.t", "g"), Some(2));

    let _failing = q
        .subscribe("crewlet.t", "g", handler_fn(|_| async { Err("no".into()) }))
        .await?;
    let dlq = topics::dlq("crewlet.t", "g");
    until(|| broker.backlog(&dlq, DEAD_LETTER_GROUP) == Some(2)).await;
    until(|| broker.backlog("crewlet.t", "g") == Some(0)).await;

    // A group created later on the DLQ replays them with their origin.
    let origins = Arc::new(Mutex::new(Vec::new()));
    let o = origins.clone();
    let _inspect = q
        .subscribe(
            &dlq,
            "inspect",
            handler_fn(move |d| {
                o.lock().push(
                    d.dead_letter
                        .as_ref()
                        .map(|i| (i.topic.clone(), i.attempts)),
                );
                async { Ok(()) }
            }),
        )
        .await?;
    until(|| origins.lock().len() == 2).await;
    assert!(
        origins
            .lock()
            .iter()
            .all(|o| *o == Some(("crewlet.t".to_owned(), 2)))
    );
    Ok(())
}

#[tokio::test]
async fn an_abandoned_handler_gives_its_message_back() -> Result<(), QueueError> {
    let broker = MemoryBroker::with_options(MemoryBrokerOptions {
        retained_per_topic: 0,
        delivery: quick(),
    });
    let q = broker.client();
    let started = Arc::new(AtomicUsize::new(0));
    let st = started.clone();
    let _stuck = q
        .subscribe(
            "crewlet.t",
            "g",
            handler_fn(move |_| {
                st.fetch_add(1, Ordering::SeqCst);
                async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok(())
                }
            }),
        )
        .await?;
    q.publish("crewlet.t", &ev(0)).await?;
    until(|| started.load(Ordering::SeqCst) == 1).await;
    let report = q.shutdown().await;
    assert_eq!(report.abandoned, 1);

    let n = Arc::new(AtomicUsize::new(0));
    let _next = broker
        .client()
        .subscribe("crewlet.t", "g", counting(&n))
        .await?;
    until(|| n.load(Ordering::SeqCst) == 1).await;
    Ok(())
}

#[tokio::test]
async fn a_slow_stream_drops_instead_of_blocking_publishers() -> Result<(), QueueError> {
    let q = MemoryBroker::new().client_with(quick());
    let stream = q.subscribe_stream("crewlet.>").await?;
    for i in 0..5 {
        q.publish("crewlet.t", &ev(i)).await?;
    }
    assert_eq!(stream.dropped(), 3);
    drop(stream);
    q.publish("crewlet.t", &ev(9)).await?;
    Ok(())
}

/// A member working through a backlog with a handler that never waits must
/// still let other tasks run: on one thread, a task spawned while 20,000
/// messages wait runs long before the last of them is handled.
#[tokio::test(flavor = "current_thread")]
async fn a_member_with_a_backlog_leaves_room_for_other_tasks() -> Result<(), QueueError> {
    const BACKLOG: usize = 20_000;
    let broker = MemoryBroker::with_options(MemoryBrokerOptions {
        retained_per_topic: BACKLOG,
        delivery: quick(),
    });
    let q = broker.client();
    for i in 0..BACKLOG {
        q.publish("crewlet.t", &ev(i)).await?;
    }
    let handled = Arc::new(AtomicUsize::new(0));
    let _sub = q.subscribe("crewlet.t", "g", counting(&handled)).await?;
    // The member task is queued first; this one is queued behind it.
    let seen = handled.clone();
    let other = tokio::spawn(async move { seen.load(Ordering::SeqCst) });
    let handled_when_other_ran = other.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        handled_when_other_ran < BACKLOG,
        "the other task waited for the whole backlog ({handled_when_other_ran} handled)"
    );
    until(|| handled.load(Ordering::SeqCst) == BACKLOG).await;
    Ok(())
}
