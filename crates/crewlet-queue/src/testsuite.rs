//! The conformance suite: the semantics of `docs/queue.md` ("Semantics") every [`EventQueue`] backend
//! must keep. Run it with [`conformance_tests!`](crate::conformance_tests),
//! which makes one `#[tokio::test]` per case:
//!
//! ```text
//! crewlet_queue::conformance_tests!(Some(MyFactory::new()));
//! ```
//!
//! The factory expression is evaluated in each test; `None` skips the test
//! (a backend whose service is absent outside CI). Every case uses topics with
//! a fresh uuid, so cases run in parallel against one broker. Cases never
//! assert on speed; they wait (bounded by [`QueueFactory::patience`]) for what
//! must happen and wait a short grace period for what must not.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use crewlet_core::{Event, EventType};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::topics::{self, DEAD_LETTER_GROUP};
use crate::{
    Delivery, DeliveryOptions, EventHandler, EventQueue, EventStream, HandlerError,
    PublishListener, QueueError, handler_fn,
};

/// Makes nodes (clients) of the backend under test, all on one broker.
#[async_trait]
pub trait QueueFactory: Send + Sync {
    /// A new node with these delivery options.
    async fn node(&self, delivery: DeliveryOptions) -> Arc<dyn EventQueue>;

    /// How long to wait for something that must happen.
    fn patience(&self) -> Duration {
        Duration::from_secs(30)
    }

    /// How long to wait before concluding something did not happen.
    fn grace(&self) -> Duration {
        Duration::from_millis(500)
    }
}

/// Short delays so the suite runs quickly: 50 ms redelivery, cap 3.
pub fn fast_delivery() -> DeliveryOptions {
    DeliveryOptions {
        redelivery_delay: Duration::from_millis(50),
        max_redeliveries: 3,
        prefetch: 64,
        shutdown_timeout: Duration::from_secs(10),
        stream_buffer: 10_000,
    }
}

/// A topic no other test uses: `crewlet.test.{case}.{uuid}`.
pub fn unique_topic(case: &str) -> String {
    format!("crewlet.test.{case}.{}", Uuid::new_v4().simple())
}

/// A test event whose summary says what it is.
pub fn test_event(summary: impl Into<String>) -> Event {
    Event::new(
        EventType::Other("test.event".into()),
        "crewlet-queue.testsuite",
    )
    .with_summary(summary)
}

/// Records what a handler saw and wakes waiters.
#[derive(Default)]
pub struct Recorder {
    seen: Mutex<Vec<Delivery>>,
    changed: Notify,
}

impl Recorder {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn record(&self, d: Delivery) {
        self.seen.lock().push(d);
        self.changed.notify_waiters();
    }

    pub fn seen(&self) -> Vec<Delivery> {
        self.seen.lock().clone()
    }

    pub fn len(&self) -> usize {
        self.seen.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until at least `n` deliveries were recorded; panics after `patience`.
    pub async fn wait_for(&self, n: usize, patience: Duration, what: &str) {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let len = self.len();
            if len >= n {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                panic!("{what}: waited {patience:?} for {n} deliveries, got {len}");
            }
        }
    }

    /// A handler that records and acknowledges.
    pub fn handler(self: &Arc<Self>) -> Arc<dyn EventHandler> {
        let me = self.clone();
        handler_fn(move |d| {
            let me = me.clone();
            async move {
                me.record(d);
                Ok(())
            }
        })
    }

    /// A handler that records, fails every attempt before `attempt`, then
    /// acknowledges.
    pub fn handler_failing_before(self: &Arc<Self>, attempt: u32) -> Arc<dyn EventHandler> {
        let me = self.clone();
        handler_fn(move |d| {
            let me = me.clone();
            async move {
                let this = d.attempt;
                me.record(d);
                if this < attempt {
                    Err(HandlerError::new("not yet"))
                } else {
                    Ok(())
                }
            }
        })
    }

    /// A handler that records and always fails.
    pub fn failing_handler(self: &Arc<Self>) -> Arc<dyn EventHandler> {
        let me = self.clone();
        handler_fn(move |d| {
            let me = me.clone();
            async move {
                me.record(d);
                Err(HandlerError::new("boom"))
            }
        })
    }
}

/// Reads a stream into a recorder-like list in the background.
struct StreamTap {
    seen: Arc<Mutex<Vec<(String, Event)>>>,
    changed: Arc<Notify>,
    _task: tokio::task::JoinHandle<()>,
}

impl StreamTap {
    fn new(mut stream: EventStream) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let changed = Arc::new(Notify::new());
        let (s, c) = (seen.clone(), changed.clone());
        let task = tokio::spawn(async move {
            while let Some(item) = stream.recv().await {
                s.lock()
                    .push((item.topic.to_string(), (*item.event).clone()));
                c.notify_waiters();
            }
        });
        Self {
            seen,
            changed,
            _task: task,
        }
    }

    fn seen(&self) -> Vec<(String, Event)> {
        self.seen.lock().clone()
    }

    async fn wait_until(
        &self,
        patience: Duration,
        what: &str,
        mut done: impl FnMut(&[(String, Event)]) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if done(&self.seen()) {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                panic!(
                    "{what}: condition not met after {patience:?}; saw {:?}",
                    self.seen()
                        .iter()
                        .map(|(t, e)| (t.clone(), e.summary.clone()))
                        .collect::<Vec<_>>()
                );
            }
        }
    }
}

async fn publish_ok(q: &dyn EventQueue, topic: &str, event: &Event) {
    if let Err(e) = q.publish(topic, event).await {
        panic!("publish to {topic} failed: {e}");
    }
}

async fn subscribe_ok(
    q: &dyn EventQueue,
    topic: &str,
    group: &str,
    handler: Arc<dyn EventHandler>,
) -> crate::Subscription {
    match q.subscribe(topic, group, handler).await {
        Ok(s) => s,
        Err(e) => panic!("subscribe to {topic} as {group} failed: {e}"),
    }
}

fn ids(ds: &[Delivery]) -> Vec<Uuid> {
    ds.iter().map(|d| d.event.id).collect()
}

fn assert_exactly_once(delivered: &[Uuid], published: &[Uuid], what: &str) {
    let mut counts: BTreeMap<Uuid, usize> = BTreeMap::new();
    for id in delivered {
        *counts.entry(*id).or_default() += 1;
    }
    let dups: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dups.is_empty(), "{what}: duplicated deliveries {dups:?}");
    let want: BTreeSet<Uuid> = published.iter().copied().collect();
    let got: BTreeSet<Uuid> = counts.keys().copied().collect();
    assert_eq!(
        got, want,
        "{what}: delivered set differs from published set"
    );
}

/// Published events reach the subscriber once; an acknowledged message is not redelivered.
pub async fn publish_is_delivered_once_and_acked(f: &dyn QueueFactory) {
    let q = f.node(fast_delivery()).await;
    let topic = unique_topic("publish");
    let rec = Recorder::new();
    let _sub = subscribe_ok(&*q, &topic, "g", rec.handler()).await;
    let mut published = Vec::new();
    for i in 0..20 {
        let e = test_event(format!("m{i}"));
        published.push(e.id);
        publish_ok(&*q, &topic, &e).await;
    }
    rec.wait_for(20, f.patience(), "publish/ack").await;
    tokio::time::sleep(f.grace()).await;
    let seen = rec.seen();
    assert_exactly_once(&ids(&seen), &published, "publish/ack");
    assert!(
        seen.iter()
            .all(|d| d.attempt == 1 && *d.topic == *topic && &*d.group == "g")
    );
    // In order for a single member.
    assert_eq!(ids(&seen), published, "a single member sees publish order");
    q.shutdown().await;
}

/// Members of one group on different nodes split the load: every message to
/// exactly one of them, none lost.
pub async fn competing_members_split_the_load(f: &dyn QueueFactory) {
    let (a, b) = (f.node(fast_delivery()).await, f.node(fast_delivery()).await);
    let topic = unique_topic("compete");
    let (ra, rb) = (Recorder::new(), Recorder::new());
    let slow = |rec: Arc<Recorder>| {
        handler_fn(move |d| {
            let rec = rec.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                rec.record(d);
                Ok(())
            }
        })
    };
    let _sa = subscribe_ok(&*a, &topic, "workers", slow(ra.clone())).await;
    let _sb = subscribe_ok(&*b, &topic, "workers", slow(rb.clone())).await;
    let mut published = Vec::new();
    for i in 0..200 {
        let e = test_event(format!("w{i}"));
        published.push(e.id);
        publish_ok(&*a, &topic, &e).await;
    }
    let deadline = tokio::time::Instant::now() + f.patience();
    while ra.len() + rb.len() < 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "competing: only {} of 200 delivered",
            ra.len() + rb.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(f.grace()).await;
    let mut all = ids(&ra.seen());
    all.extend(ids(&rb.seen()));
    assert_exactly_once(&all, &published, "competing members");
    assert!(
        !ra.is_empty() && !rb.is_empty(),
        "both members got work: {} / {}",
        ra.len(),
        rb.len()
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// A subscription keeps its mail while no member is attached and replays it
/// to the next member, on any node.
pub async fn backlog_is_kept_while_detached_and_replayed(f: &dyn QueueFactory) {
    let topic = unique_topic("backlog");
    let first = f.node(fast_delivery()).await;
    let rec1 = Recorder::new();
    let sub = subscribe_ok(&*first, &topic, "inbox", rec1.handler()).await;
    let e0 = test_event("before detach");
    publish_ok(&*first, &topic, &e0).await;
    rec1.wait_for(1, f.patience(), "first member").await;
    sub.close().await;

    let publisher = f.node(fast_delivery()).await;
    let mut published = Vec::new();
    for i in 0..10 {
        let e = test_event(format!("while detached {i}"));
        published.push(e.id);
        publish_ok(&*publisher, &topic, &e).await;
    }
    tokio::time::sleep(f.grace()).await;
    assert_eq!(rec1.len(), 1, "a closed member gets nothing");

    let later = f.node(fast_delivery()).await;
    let rec2 = Recorder::new();
    let _sub2 = subscribe_ok(&*later, &topic, "inbox", rec2.handler()).await;
    rec2.wait_for(10, f.patience(), "replayed backlog").await;
    tokio::time::sleep(f.grace()).await;
    assert_exactly_once(&ids(&rec2.seen()), &published, "replayed backlog");
    for q in [first, publisher, later] {
        q.shutdown().await;
    }
}

/// A member blocked in a long handler holds at most about its prefetch:
/// the rest of the group's messages go to the other members.
pub async fn small_prefetch_keeps_work_flowing_to_other_members(f: &dyn QueueFactory) {
    let (a, b) = (f.node(fast_delivery()).await, f.node(fast_delivery()).await);
    let topic = unique_topic("prefetch");
    let release = Arc::new(Notify::new());
    let held = Recorder::new();
    let blocked = {
        let (release, held) = (release.clone(), held.clone());
        handler_fn(move |d| {
            let (release, held) = (release.clone(), held.clone());
            async move {
                held.record(d);
                release.notified().await;
                Ok(())
            }
        })
    };
    let one = crate::SubscribeOptions::default().with_prefetch(1);
    let _sa = match a.subscribe_with(&topic, "g", blocked, one.clone()).await {
        Ok(s) => s,
        Err(e) => panic!("subscribe: {e}"),
    };
    let mut published = Vec::new();
    let first = test_event("blocks member a");
    published.push(first.id);
    publish_ok(&*a, &topic, &first).await;
    held.wait_for(1, f.patience(), "member a took the first message")
        .await;

    let rb = Recorder::new();
    let _sb = match b.subscribe_with(&topic, "g", rb.handler(), one).await {
        Ok(s) => s,
        Err(e) => panic!("subscribe: {e}"),
    };
    for i in 0..10 {
        let e = test_event(format!("flows {i}"));
        published.push(e.id);
        publish_ok(&*a, &topic, &e).await;
    }
    // Member a may have a couple of messages queued behind its blocked one
    // (client-side buffering); everything else must reach b meanwhile.
    rb.wait_for(7, f.patience(), "member b keeps getting work")
        .await;
    // Unblock member a for good.
    let releaser = {
        let release = release.clone();
        tokio::spawn(async move {
            loop {
                release.notify_waiters();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let deadline = tokio::time::Instant::now() + f.patience();
    while held.len() + rb.len() < published.len() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "released messages were not all handled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(f.grace()).await;
    let mut all = ids(&held.seen());
    all.extend(ids(&rb.seen()));
    assert_exactly_once(&all, &published, "prefetch");
    a.shutdown().await;
    b.shutdown().await;
    releaser.abort();
}

/// A group's first subscribe starts at the oldest message the topic retains
/// (Pulsar: `Earliest`), so mail published before the seat first came up is not lost.
pub async fn new_group_starts_at_earliest(f: &dyn QueueFactory) {
    let topic = unique_topic("earliest");
    let q = f.node(fast_delivery()).await;
    let mut published = Vec::new();
    for i in 0..3 {
        let e = test_event(format!("early {i}"));
        published.push(e.id);
        publish_ok(&*q, &topic, &e).await;
    }
    let rec = Recorder::new();
    let _sub = subscribe_ok(&*q, &topic, "late-group", rec.handler()).await;
    rec.wait_for(3, f.patience(), "earliest").await;
    assert_exactly_once(&ids(&rec.seen()), &published, "earliest");
    q.shutdown().await;
}

/// One call of a batch handler: the summaries and attempts it got, and
/// whether it succeeded.
#[derive(Clone, Debug)]
struct BatchCall {
    summaries: Vec<String>,
    ids: Vec<Uuid>,
    attempts: Vec<u32>,
    ok: bool,
}

/// Records batch calls; fails a part holding `fail` on its first attempt.
struct BatchRecorder {
    calls: Arc<Mutex<Vec<BatchCall>>>,
    fail: &'static str,
}

#[async_trait]
impl EventHandler for BatchRecorder {
    async fn handle(&self, _: Delivery) -> Result<(), HandlerError> {
        Err(HandlerError::new("a batch subscription called handle"))
    }

    async fn handle_batch(&self, batch: Vec<Delivery>) -> Result<(), HandlerError> {
        let ok = !batch
            .iter()
            .any(|d| d.event.summary == self.fail && d.attempt == 1);
        self.calls.lock().push(BatchCall {
            summaries: batch.iter().map(|d| d.event.summary.clone()).collect(),
            ids: batch.iter().map(|d| d.event.id).collect(),
            attempts: batch.iter().map(|d| d.attempt).collect(),
            ok,
        });
        if ok {
            Ok(())
        } else {
            Err(HandlerError::new("this part fails once"))
        }
    }
}

/// A batch subscription takes what waits (within its linger), splits it by
/// key into parts of at most `max_batch` and calls the handler once per
/// part: a part's messages in order, an unkeyed message alone; a failing
/// part is redelivered without the others.
pub async fn batches_split_by_key_and_settle_per_part(f: &dyn QueueFactory) {
    let q = f.node(fast_delivery()).await;
    let topic = unique_topic("batch");
    // Published before the subscription exists: all of it waits when the
    // member attaches (a new group starts at the earliest message).
    let mut sent: BTreeMap<String, Uuid> = BTreeMap::new();
    let mut order = Vec::new();
    for i in 1..=10 {
        order.push(format!("a:{i}"));
        if i == 3 {
            order.push("b:1".into());
            order.push("solo".into());
        }
        if i == 6 {
            order.push("b:fail".into());
        }
    }
    order.push("b:3".into());
    for summary in &order {
        let e = test_event(summary.clone());
        sent.insert(summary.clone(), e.id);
        publish_ok(&*q, &topic, &e).await;
    }
    let key: crate::BatchKey = Arc::new(|e: &Event| {
        let k = e.summary.split(':').next().unwrap_or_default();
        (k != "solo").then(|| k.to_owned())
    });
    let calls = Arc::new(Mutex::new(Vec::new()));
    let handler = Arc::new(BatchRecorder {
        calls: calls.clone(),
        fail: "b:fail",
    });
    // The linger only has to outlast the broker handing over a backlog it
    // already holds.
    let options = crate::SubscribeOptions::default().with_batch(crate::BatchOptions::new(
        Duration::from_secs(2),
        4,
        key,
    ));
    let _sub = match q.subscribe_with(&topic, "batcher", handler, options).await {
        Ok(s) => s,
        Err(e) => panic!("batch subscribe: {e}"),
    };
    let deadline = tokio::time::Instant::now() + f.patience();
    loop {
        let done: usize = calls
            .lock()
            .iter()
            .filter(|c| c.ok)
            .map(|c| c.ids.len())
            .sum();
        if done >= order.len() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "batches never settled: {:?}",
            calls.lock()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(f.grace()).await;
    let calls = calls.lock().clone();
    for c in &calls {
        let keys: BTreeSet<&str> = c
            .summaries
            .iter()
            .map(|s| s.split(':').next().unwrap_or_default())
            .collect();
        assert_eq!(keys.len(), 1, "one key per call: {c:?}");
        if keys.contains("solo") {
            assert_eq!(c.summaries.len(), 1, "an unkeyed message stands alone");
        }
        assert!(c.ids.len() <= 4, "at most max_batch: {c:?}");
    }
    let a: Vec<&BatchCall> = calls
        .iter()
        .filter(|c| c.summaries[0].starts_with("a:"))
        .collect();
    // The ten a's: cut at max_batch, in order, each handled once.
    let parts: Vec<Vec<String>> = a.iter().map(|c| c.summaries.clone()).collect();
    let want: Vec<Vec<String>> = [1..=4, 5..=8, 9..=10]
        .into_iter()
        .map(|r| r.map(|i| format!("a:{i}")).collect())
        .collect();
    assert_eq!(parts, want, "{calls:?}");
    let b: Vec<&BatchCall> = calls
        .iter()
        .filter(|c| c.summaries[0].starts_with("b:"))
        .collect();
    assert_eq!(b[0].summaries, vec!["b:1", "b:fail", "b:3"], "{calls:?}");
    assert!(!b[0].ok);
    // The failed part comes back (each message with its next attempt); the
    // a part is not redelivered.
    let b_done: Vec<Uuid> = b
        .iter()
        .filter(|c| c.ok)
        .flat_map(|c| c.ids.clone())
        .collect();
    let b_sent: Vec<Uuid> = ["b:1", "b:fail", "b:3"].iter().map(|s| sent[*s]).collect();
    assert_exactly_once(&b_done, &b_sent, "the retried part");
    assert!(
        b.iter()
            .filter(|c| c.ok)
            .all(|c| c.attempts.iter().all(|a| *a == 2)),
        "{b:?}"
    );
    let all_ok: Vec<Uuid> = calls
        .iter()
        .filter(|c| c.ok)
        .flat_map(|c| c.ids.clone())
        .collect();
    let all_sent: Vec<Uuid> = sent.values().copied().collect();
    assert_exactly_once(&all_ok, &all_sent, "every message settled once");
    q.shutdown().await;
}

/// A failed message is redelivered after the delay with its attempt count,
/// until the handler succeeds.
pub async fn failed_message_is_redelivered_until_success(f: &dyn QueueFactory) {
    let q = f.node(fast_delivery()).await;
    let topic = unique_topic("retry");
    let rec = Recorder::new();
    let _sub = subscribe_ok(&*q, &topic, "g", rec.handler_failing_before(3)).await;
    let e = test_event("flaky");
    publish_ok(&*q, &topic, &e).await;
    rec.wait_for(3, f.patience(), "redelivery").await;
    tokio::time::sleep(f.grace()).await;
    let seen = rec.seen();
    assert_eq!(
        seen.iter().map(|d| d.attempt).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(seen.iter().all(|d| d.event.id == e.id));
    q.shutdown().await;
}

/// A retry is for the failing group alone: another group of the same topic
/// and a stream see the message once, at its first attempt, while the
/// failing group sees it again with the next attempt number.
pub async fn a_retry_reaches_only_the_failing_group(f: &dyn QueueFactory) {
    let q = f.node(fast_delivery()).await;
    let topic = unique_topic("retry-one-group");
    let tap = StreamTap::new(stream_ok(&*q, &topic).await);
    let flaky = Recorder::new();
    let steady = Recorder::new();
    let _a = subscribe_ok(&*q, &topic, "flaky", flaky.handler_failing_before(2)).await;
    let _b = subscribe_ok(&*q, &topic, "steady", steady.handler()).await;
    // Streams may attach a little after they open (Pulsar finds topics by
    // listing): publish markers until the stream has one.
    let deadline = tokio::time::Instant::now() + f.patience();
    while tap.seen().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream never attached"
        );
        publish_ok(&*q, &topic, &test_event("marker")).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let e = test_event("fails once for one group");
    publish_ok(&*q, &topic, &e).await;
    let of_e = |ds: Vec<Delivery>| -> Vec<u32> {
        ds.into_iter()
            .filter(|d| d.event.id == e.id)
            .map(|d| d.attempt)
            .collect()
    };
    let deadline = tokio::time::Instant::now() + f.patience();
    while of_e(flaky.seen()).len() < 2 || of_e(steady.seen()).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no retry: flaky {:?}, steady {:?}",
            of_e(flaky.seen()),
            of_e(steady.seen())
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(f.grace()).await;
    assert_eq!(of_e(flaky.seen()), [1, 2], "the failing group");
    assert_eq!(of_e(steady.seen()), [1], "the other group");
    let streamed = tap.seen().iter().filter(|(_, ev)| ev.id == e.id).count();
    assert_eq!(streamed, 1, "the stream saw the event once");
    q.shutdown().await;
}

/// Event topics may batch on the wire (Pulsar does): many concurrent
/// publishes each return only once stored, every message reaches the group
/// exactly once, and a message whose handler fails is retried on its own
/// while the rest of its batch stays done.
pub async fn event_topics_deliver_each_message_once_and_retry_one(f: &dyn QueueFactory) {
    let q = f.node(fast_delivery()).await;
    let topic = format!("crewlet.events.test-batched.{}", Uuid::new_v4().simple());
    let rec = Recorder::new();
    let r = rec.clone();
    let handler = handler_fn(move |d: Delivery| {
        let r = r.clone();
        async move {
            let fail = d.event.summary == "e17" && d.attempt == 1;
            r.record(d);
            if fail {
                Err(HandlerError::new("once"))
            } else {
                Ok(())
            }
        }
    });
    let _sub = subscribe_ok(&*q, &topic, "g", handler).await;
    let events: Vec<Event> = (0..300).map(|i| test_event(format!("e{i}"))).collect();
    let published: Vec<_> = events.iter().map(|e| e.id).collect();
    let results = futures::future::join_all(events.iter().map(|e| q.publish(&topic, e))).await;
    assert!(results.iter().all(Result::is_ok), "a publish failed");
    rec.wait_for(301, f.patience(), "batched delivery").await;
    tokio::time::sleep(f.grace()).await;
    let seen = rec.seen();
    let done: Vec<_> = seen
        .iter()
        .filter(|d| !(d.event.summary == "e17" && d.attempt == 1))
        .map(|d| d.event.id)
        .collect();
    assert_exactly_once(&done, &published, "batched delivery");
    let retried: Vec<u32> = seen
        .iter()
        .filter(|d| d.event.summary == "e17")
        .map(|d| d.attempt)
        .collect();
    assert_eq!(retried, [1, 2], "only the failed message is retried");
    q.shutdown().await;
}

/// After `max_redeliveries` the message goes to `dlq-{topic}-{group}`; the
/// attempt count survives a member detaching and another node attaching.
pub async fn exhausted_message_is_dead_lettered_with_attempts_intact(f: &dyn QueueFactory) {
    let opts = fast_delivery();
    let cap = opts.max_redeliveries;
    let topic = unique_topic("dlq");
    let group = "g";
    let first = f.node(opts.clone()).await;
    let rec1 = Recorder::new();
    let sub1 = subscribe_ok(&*first, &topic, group, rec1.failing_handler()).await;
    let e = test_event("poison");
    publish_ok(&*first, &topic, &e).await;
    rec1.wait_for(2, f.patience(), "first member attempts")
        .await;
    sub1.close().await;

    let second = f.node(opts.clone()).await;
    let rec2 = Recorder::new();
    let _sub2 = subscribe_ok(&*second, &topic, group, rec2.failing_handler()).await;

    let dlq = topics::dlq(&topic, group);
    let dead = Recorder::new();
    let _dsub = subscribe_ok(&*second, &dlq, DEAD_LETTER_GROUP, dead.handler()).await;
    dead.wait_for(1, f.patience(), "dead letter").await;
    tokio::time::sleep(f.grace() + opts.redelivery_delay * 4).await;

    let mut attempts: Vec<u32> = rec1
        .seen()
        .iter()
        .chain(rec2.seen().iter())
        .map(|d| d.attempt)
        .collect();
    attempts.sort_unstable();
    let want: Vec<u32> = (1..=cap + 1).collect();
    assert_eq!(
        attempts, want,
        "each attempt once, counted across the reconnect"
    );
    let dl = dead.seen();
    assert_eq!(dl.len(), 1, "exactly one dead letter");
    assert_eq!(dl[0].event.id, e.id);
    let info = dl[0]
        .dead_letter
        .as_ref()
        .unwrap_or_else(|| panic!("dead letter carries its origin"));
    assert_eq!(
        (info.topic.as_str(), info.group.as_str(), info.attempts),
        (topic.as_str(), group, cap + 1)
    );
    assert!(info.error.contains("boom"), "{}", info.error);
    first.shutdown().await;
    second.shutdown().await;
}

/// `*` matches one segment, `>` the rest; streams see only matching topics.
pub async fn streams_match_wildcards(f: &dyn QueueFactory) {
    let q = f.node(fast_delivery()).await;
    let p = unique_topic("stream");
    let inbox_a = format!("{p}.agent.a.inbox");
    let inbox_b = format!("{p}.agent.b.inbox");
    let control_a = format!("{p}.agent.a.control");
    let ev_x = format!("{p}.events.x");
    let ev_yz = format!("{p}.events.y.z");
    let all = [&inbox_a, &inbox_b, &control_a, &ev_x, &ev_yz];
    let inboxes = StreamTap::new(stream_ok(&*q, &format!("{p}.agent.*.inbox")).await);
    let events = StreamTap::new(stream_ok(&*q, &format!("{p}.events.>")).await);
    let one = StreamTap::new(stream_ok(&*q, &format!("{p}.events.*")).await);
    let cases: [(&StreamTap, Vec<&String>); 3] = [
        (&inboxes, vec![&inbox_a, &inbox_b]),
        (&events, vec![&ev_x, &ev_yz]),
        (&one, vec![&ev_x]),
    ];

    // Backends that discover topics asynchronously (Pulsar) see a stream start
    // a little after it is attached: publish markers until every stream has one
    // from each topic it matches.
    let deadline = tokio::time::Instant::now() + f.patience();
    loop {
        for t in all {
            publish_ok(&*q, t, &test_event("marker")).await;
        }
        let ready = cases.iter().all(|(tap, want)| {
            let seen: BTreeSet<String> = tap.seen().into_iter().map(|(t, _)| t).collect();
            want.iter().all(|t| seen.contains(*t))
        });
        if ready {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "streams never attached"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut real = BTreeMap::new();
    for t in all {
        let e = test_event(format!("real on {t}"));
        real.insert(t.to_string(), e.id);
        publish_ok(&*q, t, &e).await;
    }
    for (tap, want) in &cases {
        let want_ids: BTreeSet<Uuid> = want.iter().map(|t| real[t.as_str()]).collect();
        tap.wait_until(f.patience(), "stream real events", |seen| {
            let got: BTreeSet<Uuid> = seen.iter().map(|(_, e)| e.id).collect();
            want_ids.is_subset(&got)
        })
        .await;
    }
    tokio::time::sleep(f.grace()).await;
    for (tap, want) in &cases {
        for (topic, event) in tap.seen() {
            assert!(
                want.iter().any(|t| **t == topic),
                "stream saw a non-matching topic {topic}"
            );
            if event.summary != "marker" {
                assert_eq!(real.get(&topic), Some(&event.id));
            }
        }
    }
    q.shutdown().await;
}

/// The first event on a topic created after a stream opened reaches the
/// stream (a dashboard must not miss the first `task_completed` of a new
/// deployment), once.
pub async fn streams_see_the_first_event_of_a_new_topic(f: &dyn QueueFactory) {
    let q = f.node(fast_delivery()).await;
    let p = unique_topic("stream-new");
    let tap = StreamTap::new(stream_ok(&*q, &format!("{p}.events.>")).await);
    let first = test_event("the first event on a new topic");
    let topic = format!("{p}.events.fresh");
    publish_ok(&*q, &topic, &first).await;
    tap.wait_until(f.patience(), "the first event of a new topic", |seen| {
        seen.iter().any(|(_, e)| e.id == first.id)
    })
    .await;
    tokio::time::sleep(f.grace()).await;
    let seen = tap.seen();
    assert_eq!(seen.len(), 1, "seen once: {seen:?}");
    assert_eq!(seen[0].0, topic);
    q.shutdown().await;
}

async fn stream_ok(q: &dyn EventQueue, pattern: &str) -> EventStream {
    match q.subscribe_stream(pattern).await {
        Ok(s) => s,
        Err(e) => panic!("stream {pattern}: {e}"),
    }
}

/// A stream ends (yields `None`) when its node shuts down.
pub async fn streams_end_on_shutdown(f: &dyn QueueFactory) {
    let q = f.node(fast_delivery()).await;
    let topic = unique_topic("stream-end");
    publish_ok(&*q, &topic, &test_event("creates the topic")).await;
    let mut stream = stream_ok(&*q, &topic).await;
    q.shutdown().await;
    let deadline = tokio::time::Instant::now() + f.patience();
    loop {
        match tokio::time::timeout_at(deadline, stream.recv()).await {
            Ok(None) => break,
            Ok(Some(_)) => {}
            Err(_) => panic!("the stream did not end after shutdown"),
        }
    }
}

/// Pausing a group on a node holds its messages; resuming delivers them.
pub async fn pause_holds_messages_until_resume(f: &dyn QueueFactory) {
    let q = f.node(fast_delivery()).await;
    let topic = unique_topic("pause");
    let rec = Recorder::new();
    let _sub = subscribe_ok(&*q, &topic, "g", rec.handler()).await;
    publish_ok(&*q, &topic, &test_event("before pause")).await;
    rec.wait_for(1, f.patience(), "before pause").await;

    if let Err(e) = q.pause(&topic, "g") {
        panic!("pause: {e}");
    }
    let mut published = Vec::new();
    for i in 0..5 {
        let e = test_event(format!("while paused {i}"));
        published.push(e.id);
        publish_ok(&*q, &topic, &e).await;
    }
    tokio::time::sleep(f.grace() * 2).await;
    assert_eq!(rec.len(), 1, "nothing is handled while paused");

    if let Err(e) = q.resume(&topic, "g") {
        panic!("resume: {e}");
    }
    rec.wait_for(6, f.patience(), "after resume").await;
    tokio::time::sleep(f.grace()).await;
    let seen = rec.seen();
    assert_exactly_once(&ids(&seen[1..]), &published, "after resume");
    q.shutdown().await;
}

/// `shutdown()` lets running handlers finish and ack, refuses new work, and
/// leaves unhandled messages in the subscription for the next node.
pub async fn shutdown_drains_in_flight_handlers(f: &dyn QueueFactory) {
    let q = f.node(fast_delivery()).await;
    let topic = unique_topic("shutdown");
    let started = Arc::new(AtomicUsize::new(0));
    let done = Recorder::new();
    let first_started = Arc::new(Notify::new());
    let handler = {
        let (started, done, first_started) = (started.clone(), done.clone(), first_started.clone());
        handler_fn(move |d| {
            let (started, done, first_started) =
                (started.clone(), done.clone(), first_started.clone());
            async move {
                started.fetch_add(1, Ordering::SeqCst);
                first_started.notify_one();
                tokio::time::sleep(Duration::from_millis(400)).await;
                done.record(d);
                Ok(())
            }
        })
    };
    let _sub = subscribe_ok(&*q, &topic, "g", handler).await;
    let mut published = Vec::new();
    for i in 0..3 {
        let e = test_event(format!("job {i}"));
        published.push(e.id);
        publish_ok(&*q, &topic, &e).await;
    }
    if tokio::time::timeout(f.patience(), first_started.notified())
        .await
        .is_err()
    {
        panic!("no handler started");
    }
    let report = q.shutdown().await;
    assert_eq!(report.abandoned, 0);
    assert_eq!(
        started.load(Ordering::SeqCst),
        done.len(),
        "every started handler finished before shutdown returned"
    );
    assert!(!done.is_empty());
    match q.publish(&topic, &test_event("late")).await {
        Err(QueueError::ShutDown { .. }) => {}
        other => panic!("publish after shutdown: {other:?}"),
    }

    let next = f.node(fast_delivery()).await;
    let rest = Recorder::new();
    let _sub2 = subscribe_ok(&*next, &topic, "g", rest.handler()).await;
    let remaining = 3 - done.len();
    if remaining > 0 {
        rest.wait_for(remaining, f.patience(), "rest after shutdown")
            .await;
    }
    tokio::time::sleep(f.grace()).await;
    let mut all = ids(&done.seen());
    all.extend(ids(&rest.seen()));
    assert_exactly_once(&all, &published, "shutdown then next node");
    next.shutdown().await;
}

struct Recording(Mutex<Vec<(String, Uuid)>>);

#[async_trait]
impl PublishListener for Recording {
    async fn on_publish(&self, topic: &str, event: &Event) -> Result<(), HandlerError> {
        self.0.lock().push((topic.to_owned(), event.id));
        Ok(())
    }
}

struct Failing;

#[async_trait]
impl PublishListener for Failing {
    async fn on_publish(&self, _: &str, _: &Event) -> Result<(), HandlerError> {
        Err(HandlerError::new("event store is down"))
    }
}

struct Panicking;

#[async_trait]
impl PublishListener for Panicking {
    async fn on_publish(&self, _: &str, _: &Event) -> Result<(), HandlerError> {
        panic!("listener bug")
    }
}

/// Listeners run after each publish on their node; a failing or panicking
/// listener neither fails the publish nor stops later listeners or delivery.
pub async fn listeners_run_and_never_fail_publish(f: &dyn QueueFactory) {
    let q = f.node(fast_delivery()).await;
    let other = f.node(fast_delivery()).await;
    let topic = unique_topic("listeners");
    let recording = Arc::new(Recording(Mutex::new(Vec::new())));
    q.add_publish_listener(Arc::new(Failing));
    q.add_publish_listener(Arc::new(Panicking));
    q.add_publish_listener(recording.clone());
    let rec = Recorder::new();
    let _sub = subscribe_ok(&*q, &topic, "g", rec.handler()).await;

    let e = test_event("listened");
    publish_ok(&*q, &topic, &e).await;
    assert_eq!(
        recording.0.lock().clone(),
        vec![(topic.clone(), e.id)],
        "listener ran inline"
    );
    let e2 = test_event("from another node");
    publish_ok(&*other, &topic, &e2).await;
    rec.wait_for(2, f.patience(), "delivery despite failing listeners")
        .await;
    assert_eq!(
        recording.0.lock().len(),
        1,
        "listeners belong to their node"
    );
    q.shutdown().await;
    other.shutdown().await;
}

/// Bad names are refused with the name in the error.
pub async fn invalid_names_are_refused(f: &dyn QueueFactory) {
    let q = f.node(fast_delivery()).await;
    match q.publish("bad topic", &test_event("x")).await {
        Err(QueueError::InvalidTopic { topic, .. }) => assert_eq!(topic, "bad topic"),
        other => panic!("bad topic: {other:?}"),
    }
    match q
        .subscribe("crewlet.ok", "bad group", Recorder::new().handler())
        .await
    {
        Err(QueueError::InvalidGroup { group, .. }) => assert_eq!(group, "bad group"),
        other => panic!("bad group: {other:?}"),
    }
    match q.subscribe_stream("crewlet.>.x").await {
        Err(QueueError::InvalidPattern { pattern, .. }) => assert_eq!(pattern, "crewlet.>.x"),
        other => panic!("bad pattern: {other:?}"),
    }
    q.shutdown().await;
}

/// Every case, in turn.
pub async fn run_all(f: &dyn QueueFactory) {
    publish_is_delivered_once_and_acked(f).await;
    competing_members_split_the_load(f).await;
    small_prefetch_keeps_work_flowing_to_other_members(f).await;
    backlog_is_kept_while_detached_and_replayed(f).await;
    new_group_starts_at_earliest(f).await;
    batches_split_by_key_and_settle_per_part(f).await;
    failed_message_is_redelivered_until_success(f).await;
    a_retry_reaches_only_the_failing_group(f).await;
    event_topics_deliver_each_message_once_and_retry_one(f).await;
    exhausted_message_is_dead_lettered_with_attempts_intact(f).await;
    streams_match_wildcards(f).await;
    streams_see_the_first_event_of_a_new_topic(f).await;
    streams_end_on_shutdown(f).await;
    pause_holds_messages_until_resume(f).await;
    shutdown_drains_in_flight_handlers(f).await;
    listeners_run_and_never_fail_publish(f).await;
    invalid_names_are_refused(f).await;
}

/// One `#[tokio::test]` per conformance case. `$factory` is an expression
/// of type `Option<impl QueueFactory>`, evaluated in each test; `None` skips.
#[macro_export]
macro_rules! conformance_tests {
    ($factory:expr) => {
        $crate::conformance_tests!(@cases $factory;
            publish_is_delivered_once_and_acked,
            competing_members_split_the_load,
            small_prefetch_keeps_work_flowing_to_other_members,
            backlog_is_kept_while_detached_and_replayed,
            new_group_starts_at_earliest,
            batches_split_by_key_and_settle_per_part,
            failed_message_is_redelivered_until_success,
            a_retry_reaches_only_the_failing_group,
            event_topics_deliver_each_message_once_and_retry_one,
            exhausted_message_is_dead_lettered_with_attempts_intact,
            streams_match_wildcards,
            streams_see_the_first_event_of_a_new_topic,
            streams_end_on_shutdown,
            pause_holds_messages_until_resume,
            shutdown_drains_in_flight_handlers,
            listeners_run_and_never_fail_publish,
            invalid_names_are_refused,
        );
    };
    (@cases $factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let Some(factory) = $factory else { return };
                $crate::testsuite::$case(&factory).await;
            }
        )*
    };
}
