use std::collections::BTreeMap;

use chrono::Utc;
use crewlet_queue::MemoryQueue;
use crewlet_store::{MemoryThreadFollows, MemoryWebhookDeliveries};
use serde_json::Value;

use super::*;

const COMPANY: &str = r#"
name: Routing Co
roles:
  - {name: Founder, handle: founder, kind: human, contact: {email: f@x.io, github_login: foundergh, slack_user_id: UFOUNDER}}
  - {name: CEO, handle: ceo}
units:
  - name: Engineering
    lead: CTO
    integrations: {github_repositories: [acme/app], slack_channels: [CENG]}
    roles:
      - name: CTO
        handle: cto
      - name: Engineer
        handle: eng
        integrations:
          github: {user: eng-bot}
          slack: {bot_user_id: UENG}
    children:
      - name: Platform
        lead: ops
        integrations: {github_repositories: [acme/infra]}
        roles:
          - {name: Ops, handle: ops}
  - name: Design
    lead: lead-designer
    integrations: {github_repositories: [acme/design]}
    roles:
      - {name: Lead Designer, handle: lead-designer, kind: human, contact: {email: d@x.io}}
"#;

fn router() -> NotificationRouter {
    let company = Company::from_yaml("t", &format!("{COMPANY}{}", crate::TEST_LLM))
        .unwrap_or_else(|e| panic!("{e}"));
    let org = Arc::new(company.organization());
    NotificationRouter::new(
        &company,
        org,
        Arc::new(MemoryQueue::standalone()),
        Arc::new(MemoryThreadFollows::new()),
        Arc::new(MemoryWebhookDeliveries::new()),
    )
}

fn raw(source: Source, project: &str, handle: Option<&str>) -> RawWebhook {
    RawWebhook {
        source,
        handle: handle.map(str::to_owned),
        headers: BTreeMap::new(),
        notification: Notification {
            source,
            kind: "issues.opened".into(),
            delivery_key: "d1".into(),
            channel_or_project: project.into(),
            thread: Some("7".into()),
            sender: Some("someone".into()),
            sender_is_bot: false,
            direct: false,
            title: Some("Bug".into()),
            text: "it breaks".into(),
            assignees: vec![],
            mentions: vec![],
            url: None,
            raw: Value::Null,
        },
        body: Value::Null,
        received_at: Utc::now(),
        replay_key: None,
        dedupe_deferred: false,
    }
}

fn raw_event(w: &RawWebhook) -> Event {
    Event::new(EventType::RawWebhook, "api.webhooks")
        .with_trace(TraceContext::new_root())
        .with_payload(serde_json::to_value(w).unwrap_or_default())
}

#[tokio::test]
async fn a_delivery_the_api_could_not_dedupe_is_routed_once_and_a_replay_not_at_all() {
    let r = router();
    // The API's dedupe was down: the same delivery arrives as two events.
    let mut w = raw(Source::Github, "acme/app", None);
    w.dedupe_deferred = true;
    w.replay_key = Some("sha256:aa".into());
    let first = r
        .route(&raw_event(&w))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(first, Some(Routing::Seat { .. })), "{first:?}");
    let again = r
        .route(&raw_event(&w))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, None);
    // The same signed body under a fresh delivery id: a replay.
    w.notification.delivery_key = "d2".into();
    let replay = r
        .route(&raw_event(&w))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(replay, None);
    // A new body under a new id is new.
    w.notification.delivery_key = "d3".into();
    w.replay_key = Some("sha256:bb".into());
    let new = r
        .route(&raw_event(&w))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(new, Some(Routing::Seat { .. })), "{new:?}");
}

/// A claims store that is down until `up` is set.
struct DownClaims {
    inner: MemoryWebhookDeliveries,
    up: std::sync::atomic::AtomicBool,
    attempts: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl WebhookDeliveries for DownClaims {
    async fn claim_at(
        &self,
        source: &str,
        delivery_key: &str,
        at: chrono::DateTime<Utc>,
    ) -> Result<bool, crewlet_store::StoreError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        if !self.up.load(Ordering::SeqCst) {
            return Err(crewlet_store::StoreError::Unavailable {
                what: "claim".into(),
                reason: "down".into(),
            });
        }
        self.inner.claim_at(source, delivery_key, at).await
    }
    async fn is_claimed_at(
        &self,
        source: &str,
        key: &str,
        at: chrono::DateTime<Utc>,
    ) -> Result<bool, crewlet_store::StoreError> {
        self.inner.is_claimed_at(source, key, at).await
    }
    async fn release(&self, source: &str, key: &str) -> Result<(), crewlet_store::StoreError> {
        self.inner.release(source, key).await
    }
    async fn gc_at(&self, at: chrono::DateTime<Utc>) -> Result<u64, crewlet_store::StoreError> {
        self.inner.gc_at(at).await
    }
}

#[tokio::test]
async fn routing_holds_while_the_dedupe_store_is_down_and_never_lets_a_delivery_through_unchecked()
{
    let company = Company::from_yaml("t", &format!("{COMPANY}{}", crate::TEST_LLM))
        .unwrap_or_else(|e| panic!("{e}"));
    let claims = Arc::new(DownClaims {
        inner: MemoryWebhookDeliveries::new(),
        up: std::sync::atomic::AtomicBool::new(false),
        attempts: std::sync::atomic::AtomicUsize::new(0),
    });
    let r = Arc::new(NotificationRouter::new(
        &company,
        Arc::new(company.organization()),
        Arc::new(MemoryQueue::standalone()),
        Arc::new(MemoryThreadFollows::new()),
        claims.clone(),
    ));
    let event = raw_event(&raw(Source::Github, "acme/app", None));
    let routing = tokio::spawn({
        let (r, event) = (r.clone(), event.clone());
        async move { r.route(&event).await }
    });
    // It retries while the store is down, without routing anything.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while claims.attempts.load(Ordering::SeqCst) < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the router never retried its claim"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!routing.is_finished());
    claims.up.store(true, Ordering::SeqCst);
    let routed = routing.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        matches!(routed, Ok(Some(Routing::Seat { .. }))),
        "{routed:?}"
    );

    // Stopping while it holds gives the message back to the queue.
    claims.up.store(false, Ordering::SeqCst);
    let mut second = raw(Source::Github, "acme/app", None);
    second.notification.delivery_key = "d9".into();
    r.stop();
    let held = r.route(&raw_event(&second)).await;
    assert!(held.is_err(), "{held:?}");
}

fn seat(r: Routing) -> (String, &'static str) {
    match r {
        Routing::Seat { handle, rule } => (handle, rule.as_str()),
        Routing::Skip { reason } => (format!("skip: {reason}"), "skip"),
    }
}

#[tokio::test]
async fn rules_apply_in_order() {
    let r = router();
    // url handle first
    let mut w = raw(Source::Github, "acme/app", Some("ops"));
    w.notification.assignees = vec!["eng-bot".into()];
    assert_eq!(seat(r.resolve(&w).await), ("ops".into(), "url_handle"));
    // assignee, then mention
    w.handle = None;
    w.notification.mentions = vec!["cto".into()];
    assert_eq!(seat(r.resolve(&w).await), ("eng".into(), "assignee"));
    w.notification.assignees.clear();
    assert_eq!(seat(r.resolve(&w).await), ("cto".into(), "mention"));
    // unit lead: deepest owning unit
    let w = raw(Source::Github, "acme/infra", None);
    assert_eq!(seat(r.resolve(&w).await), ("ops".into(), "unit_lead"));
    let w = raw(Source::Github, "ACME/App", None);
    assert_eq!(seat(r.resolve(&w).await), ("cto".into(), "unit_lead"));
    // nobody owns it: the top lead (ceo; the founder is human)
    let w = raw(Source::Jira, "OPS", None);
    assert_eq!(seat(r.resolve(&w).await), ("ceo".into(), "top_lead"));
}

/// The original engine's routing keys: a unit's single `jira.project`,
/// `confluence.space`, `plane.project` and `slack_channel`, an org-wide
/// seat's own project, and a role's `email`.
#[tokio::test]
async fn the_original_formats_routing_keys_route() {
    let yaml = format!(
        r#"
name: Original Co
roles:
  - {{name: CEO, handle: ceo}}
  - name: Triage
    handle: triage
    email: triage@x.io
    integrations: {{jira: {{project: SUP}}, confluence: {{space: HELP}}}}
units:
  - name: Engineering
    lead: CTO
    slack_channel: CENG
    integrations: {{jira: {{project: ENG}}, plane: {{project: web}}, confluence: {{space: ENGDOCS}}}}
    roles:
      - {{name: CTO, handle: cto}}
      - {{name: Engineer, handle: eng, email: eng@x.io}}
{}"#,
        crate::TEST_LLM
    );
    let company = Company::from_yaml("t", &yaml).unwrap_or_else(|e| panic!("{e}"));
    let org = Arc::new(company.organization());
    let r = NotificationRouter::new(
        &company,
        org,
        Arc::new(MemoryQueue::standalone()),
        Arc::new(MemoryThreadFollows::new()),
        Arc::new(MemoryWebhookDeliveries::new()),
    );
    for (source, project, want) in [
        (Source::Jira, "ENG", ("cto", "unit_lead")),
        (Source::Plane, "WEB", ("cto", "unit_lead")),
        (Source::Confluence, "ENGDOCS", ("cto", "unit_lead")),
        (Source::Slack, "CENG", ("cto", "unit_lead")),
        (Source::Jira, "sup", ("triage", "project_owner")),
        (Source::Confluence, "HELP", ("triage", "project_owner")),
        (Source::Jira, "OTHER", ("ceo", "top_lead")),
    ] {
        let w = raw(source, project, None);
        assert_eq!(
            seat(r.resolve(&w).await),
            (want.0.to_owned(), want.1),
            "{source:?} {project}"
        );
    }
    let mut w = raw(Source::Github, "acme/none", None);
    w.notification.assignees = vec!["ENG@x.io".into()];
    assert_eq!(seat(r.resolve(&w).await), ("eng".into(), "assignee"));
}

#[tokio::test]
async fn humans_are_never_targets() {
    let r = router();
    let w = raw(Source::Slack, "C1", Some("founder"));
    assert!(seat(r.resolve(&w).await).0.contains("human seat"));
    let mut w = raw(Source::Github, "acme/app", None);
    w.notification.assignees = vec!["foundergh".into()];
    let (s, rule) = seat(r.resolve(&w).await);
    assert_eq!(rule, "skip");
    assert!(s.contains("founder"), "{s}");
    // a human assignee and an agent mention: the agent gets it
    w.notification.mentions = vec!["@eng".into()];
    assert_eq!(seat(r.resolve(&w).await), ("eng".into(), "mention"));
    // a unit led by a human
    let w = raw(Source::Github, "acme/design", None);
    assert!(seat(r.resolve(&w).await).0.contains("lead-designer"));
}

#[tokio::test]
async fn bots_wake_only_the_seats_they_mention() {
    let r = router();
    let mut w = raw(Source::Slack, "C9", Some("eng"));
    w.notification.sender = Some("UOTHERBOT".into());
    w.notification.sender_is_bot = true;
    assert!(seat(r.resolve(&w).await).0.contains("loop guard"));
    w.notification.mentions = vec!["UENG".into()];
    assert_eq!(seat(r.resolve(&w).await), ("eng".into(), "url_handle"));
}

#[tokio::test]
async fn a_redelivered_webhook_is_routed_once() {
    let r = router();
    let mut w = raw(Source::Github, "acme/app", None);
    w.body = Value::Null;
    let event = Event::new(EventType::RawWebhook, "api.webhooks")
        .with_trace(TraceContext::new_root())
        .with_payload(serde_json::to_value(&w).unwrap_or_default());
    let first = r.route(&event).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(first, Some(Routing::Seat { .. })), "{first:?}");
    let again = r.route(&event).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, None);
    // Another router (another engine) on the same claims store: also none.
    let other = NotificationRouter::new(
        &Company::from_yaml("t", &format!("{COMPANY}{}", crate::TEST_LLM))
            .unwrap_or_else(|e| panic!("{e}")),
        r.org.clone(),
        r.queue.clone(),
        r.follows.clone(),
        r.claims.clone(),
    );
    assert_eq!(
        other.route(&event).await.unwrap_or_else(|e| panic!("{e}")),
        None
    );
}

#[tokio::test]
async fn thread_followers_and_own_messages() {
    let r = router();
    let t = ThreadRef::new("slack", "C9", "1712.5");
    let _ = r.follows.follow("eng", &t).await;
    let mut w = raw(Source::Slack, "C9", None);
    w.notification.thread = Some("1712.5".into());
    assert_eq!(seat(r.resolve(&w).await), ("eng".into(), "thread_follow"));
    w.notification.sender = Some("UENG".into());
    assert_eq!(seat(r.resolve(&w).await).1, "skip");
}

#[tokio::test]
async fn notifications_over_the_rate_limit_are_skipped_with_the_count() {
    let company = Company::from_yaml(
        "t",
        &format!("{COMPANY}notification_rate_limit: 1\n{}", crate::TEST_LLM),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let org = Arc::new(company.organization());
    let mut r = NotificationRouter::new(
        &company,
        org,
        Arc::new(MemoryQueue::standalone()),
        Arc::new(MemoryThreadFollows::new()),
        Arc::new(MemoryWebhookDeliveries::new()),
    );
    // A clock that stands still: every notification falls in one second.
    r.valve = r.valve.map(|v| v.with_clock(Arc::new(|| 7)));
    let mut routed = Vec::new();
    for i in 0..3 {
        let mut w = raw(Source::Github, "acme/app", Some("eng"));
        w.notification.delivery_key = format!("storm-{i}");
        routed.push(
            r.route(&raw_event(&w))
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        );
    }
    assert!(
        matches!(routed[0], Some(Routing::Seat { .. })),
        "{routed:?}"
    );
    for (n, skipped) in routed[1..].iter().enumerate() {
        match skipped {
            Some(Routing::Skip { reason }) => assert!(
                reason.contains("rate limited") && reason.contains(&format!("{} dropped", n + 1)),
                "{reason}"
            ),
            other => panic!("expected a skip, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_chat_task_says_how_the_message_addressed_the_seat() {
    let r = router();
    let eng = r
        .org
        .seat("eng")
        .cloned()
        .unwrap_or_else(|| panic!("no eng"));
    let slack = |kind: &str, direct: bool, mentions: Vec<String>| {
        let mut w = raw(Source::Slack, "CENG", Some("eng"));
        w.notification.kind = kind.into();
        w.notification.direct = direct;
        w.notification.mentions = mentions;
        w
    };
    let why = |w: RawWebhook| {
        let eng = eng.clone();
        let r = &r;
        async move { r.reason(&w, &eng, RouteRule::UrlHandle).await }
    };
    assert_eq!(why(slack("message", true, vec![])).await, "dm");
    assert_eq!(why(slack("app_mention", false, vec![])).await, "mention");
    assert_eq!(
        why(slack("message", false, vec!["UENG".into()])).await,
        "mention"
    );
    assert_eq!(why(slack("message", false, vec![])).await, "channel");
    let t = ThreadRef::new("slack", "CENG", "7");
    r.follows
        .follow("eng", &t)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(why(slack("message", false, vec![])).await, "thread_follow");

    let mut mm = raw(Source::Mattermost, "c1", Some("eng"));
    mm.body = serde_json::json!({"addressed": "dm"});
    assert_eq!(why(mm).await, "dm");
    let gh = raw(Source::Github, "acme/app", None);
    assert_eq!(r.reason(&gh, &eng, RouteRule::Assignee).await, "assignee");
}
