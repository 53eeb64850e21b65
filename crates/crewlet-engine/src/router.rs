//! The [`NotificationRouter`]: turns each verified `raw_webhook` on
//! `crewlet.notifications.inbound` (group `notification-svc-inbound`) into a
//! task for exactly one seat.
//!
//! The recipient is, in order:
//! 1. the seat named in the webhook URL (`/webhooks/slack/{handle}`, ...);
//! 2. the first assignee that is a seat;
//! 3. the first @-mention that is a seat;
//! 4. a seat following the thread (`chat_thread_follows`);
//! 5. the lead of the unit that owns the channel or project (the unit's
//!    `integrations`: `slack_channels`, `github_repositories`, ...; the
//!    deepest matching unit wins);
//! 6. the top-level lead: the first agent seat with no agent above it (the CEO).
//!
//! Identities are matched per source: a seat's own account
//! (`integrations.github.user`, `integrations.slack.bot_user_id`, ...), a
//! human's `contact`, or the handle itself. Human seats are never given a
//! turn: a notification addressed to a human (and to no agent) is skipped
//! with `notification_skipped {reason}`, as is a seat's own message. Routed
//! notifications are recorded as `external_notification` and published as a
//! `task_created` on the seat's inbox, continuing the webhook's trace. A
//! Slack message routed to a seat makes it follow the thread, so replies
//! without a mention reach it too.
//!
//! Delivery is at least once: the router remembers the event ids it handled
//! (and claims each id in `webhook_deliveries` under source `engine.router`,
//! so two engines on one database route it once).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use crewlet_api::RawWebhook;
use crewlet_config::{Company, Organization, Seat, SeatKind};
use crewlet_core::{Event, EventType, TraceContext};
use crewlet_integrations::{Notification, Source};
use crewlet_queue::{Delivery, EventHandler, EventQueue, HandlerError, topics};
use crewlet_store::{Patience, ThreadFollows, ThreadRef, WebhookDeliveries, retry_transient};
use serde_json::json;
use tracing::{Instrument, debug, info, warn};
use uuid::Uuid;

mod identity;

use identity::{UnitOwns, identities, same, seat_owns, unit_owns, units_preorder};

use crate::recent::RecentIds;
use crate::sink::publish_event;
use crate::task::{TaskRequest, derived_task_id};

/// The dedupe source under which routed event ids are claimed.
pub const ROUTER_CLAIM_SOURCE: &str = "engine.router";
/// The `source` of the router's events.
const EVENT_SOURCE: &str = "engine.router";

/// Which rule chose the recipient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteRule {
    UrlHandle,
    Assignee,
    Mention,
    ThreadFollow,
    /// An org-wide seat that owns the project (`integrations.jira.project`, ...).
    ProjectOwner,
    UnitLead,
    TopLead,
}

impl RouteRule {
    pub fn as_str(&self) -> &'static str {
        match self {
            RouteRule::UrlHandle => "url_handle",
            RouteRule::Assignee => "assignee",
            RouteRule::Mention => "mention",
            RouteRule::ThreadFollow => "thread_follow",
            RouteRule::ProjectOwner => "project_owner",
            RouteRule::UnitLead => "unit_lead",
            RouteRule::TopLead => "top_lead",
        }
    }
}

/// Where a notification goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routing {
    Seat { handle: String, rule: RouteRule },
    Skip { reason: String },
}

/// Resolves notifications to seats and publishes their tasks.
pub struct NotificationRouter {
    org: Arc<Organization>,
    /// `integrations` of each unit, aligned with `org.units()`.
    units: Vec<UnitOwns>,
    queue: Arc<dyn EventQueue>,
    follows: Arc<dyn ThreadFollows>,
    claims: Arc<dyn WebhookDeliveries>,
    handled: RecentIds<Uuid>,
    /// Claimed ids whose publish failed and whose claim could not be
    /// released: their redelivery is let through by this router.
    unpublished: Mutex<HashSet<Uuid>>,
    /// Set when the engine stops: a claim held for an unavailable store
    /// gives its message back to the queue.
    stopping: AtomicBool,
}

/// The words a seat reads for a notification.
fn task_text(n: &Notification) -> String {
    let mut head = format!("{} {} in {}", n.source, n.kind, n.channel_or_project);
    if let Some(thread) = &n.thread {
        head.push_str(&format!(" (thread {thread})"));
    }
    if let Some(sender) = &n.sender {
        head.push_str(&format!(" from {sender}"));
    }
    let mut out = head;
    if let Some(title) = n.title.as_deref().filter(|t| !t.trim().is_empty()) {
        out.push_str(&format!("\nTitle: {title}"));
    }
    if !n.text.trim().is_empty() {
        out.push_str(&format!("\n\n{}", n.text.trim()));
    }
    out
}

impl NotificationRouter {
    pub fn new(
        company: &Company,
        org: Arc<Organization>,
        queue: Arc<dyn EventQueue>,
        follows: Arc<dyn ThreadFollows>,
        claims: Arc<dyn WebhookDeliveries>,
    ) -> Self {
        let mut units = Vec::new();
        units_preorder(&company.units, &mut units);
        if units.len() != org.units().len() {
            units.resize(org.units().len(), UnitOwns::default());
        }
        Self {
            org,
            units,
            queue,
            follows,
            claims,
            handled: RecentIds::new(8192),
            unpublished: Mutex::new(HashSet::new()),
            stopping: AtomicBool::new(false),
        }
    }

    /// Stops holding notifications for an unavailable dedupe store: they
    /// stay on the queue for the next engine.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// The router's dedupe keys of a delivery: its id and, where the source
    /// does not sign the id, the digest of its signed body (a replay).
    fn claim_keys(raw: &RawWebhook) -> Vec<String> {
        let source = raw.source.as_str();
        std::iter::once(format!("{source}/{}", raw.notification.delivery_key))
            .chain(raw.replay_key.iter().map(|k| format!("{source}/{k}")))
            .collect()
    }

    /// The seat among `candidates` (identities on `source`) that is
    /// addressed, first candidate first: an agent seat, or the first human
    /// when no agent is among them.
    fn first_seat<'a>(
        &'a self,
        source: Source,
        candidates: &[String],
    ) -> (Option<&'a Seat>, Option<&'a Seat>) {
        let mut human = None;
        for who in candidates {
            let seat = self
                .org
                .seats()
                .iter()
                .find(|s| identities(s, source).iter().any(|id| same(id, who)));
            match seat {
                Some(s) if s.kind == SeatKind::Agent => return (Some(s), human),
                Some(s) => {
                    human = human.or(Some(s));
                }
                None => {}
            }
        }
        (None, human)
    }

    /// The first agent seat with no agent above it (the CEO of the company).
    fn top_lead(&self) -> Option<&Seat> {
        self.org.agents().find(|s| {
            s.manager_chain
                .iter()
                .all(|m| self.org.seat(m).is_none_or(|m| m.kind == SeatKind::Human))
        })
    }

    /// Where `raw` goes; no side effects.
    pub async fn resolve(&self, raw: &RawWebhook) -> Routing {
        let n = &raw.notification;
        let skip = |reason: String| Routing::Skip { reason };
        let chosen = |seat: &Seat, rule| Routing::Seat {
            handle: seat.handle.clone(),
            rule,
        };

        if let Some(handle) = &raw.handle {
            return match self.org.seat(handle) {
                None => skip(format!(
                    "no seat with handle `{handle}` (from the webhook url)"
                )),
                Some(s) if s.kind == SeatKind::Human => skip(format!(
                    "`{handle}` (from the webhook url) is a human seat, which never runs turns"
                )),
                Some(s) => self.unless_own_message(s, n, chosen(s, RouteRule::UrlHandle)),
            };
        }
        let mut addressed_human = None;
        for (rule, candidates) in [
            (RouteRule::Assignee, &n.assignees),
            (RouteRule::Mention, &n.mentions),
        ] {
            let (agent, human) = self.first_seat(n.source, candidates);
            if let Some(s) = agent {
                return self.unless_own_message(s, n, chosen(s, rule));
            }
            addressed_human = addressed_human.or(human);
        }
        if let Some(h) = addressed_human {
            return skip(format!(
                "addressed to human seat `{}` and to no agent seat; humans never run turns",
                h.handle
            ));
        }
        if let Some(thread) = &n.thread {
            let t = ThreadRef::new(
                n.source.as_str(),
                n.channel_or_project.as_str(),
                thread.as_str(),
            );
            match self.follows.followers(&t).await {
                Ok(followers) => {
                    if let Some(s) = followers
                        .iter()
                        .filter_map(|h| self.org.seat(h))
                        .find(|s| s.kind == SeatKind::Agent)
                    {
                        return self.unless_own_message(s, n, chosen(s, RouteRule::ThreadFollow));
                    }
                }
                Err(e) => warn!(error = %e, "cannot read thread follows; routing without them"),
            }
        }
        // An org-wide seat owning the project (the original's routing for
        // root roles' `integrations.jira.project`, ...).
        if let Some(s) = self
            .org
            .seats()
            .iter()
            .filter(|s| s.unit.is_none() && s.kind == SeatKind::Agent)
            .find(|s| seat_owns(s, n.source, &n.channel_or_project))
        {
            return self.unless_own_message(s, n, chosen(s, RouteRule::ProjectOwner));
        }
        // The deepest unit owning the channel or project (parents come first).
        let owner = self.org.units().iter().enumerate().rev().find(|(i, _)| {
            self.units
                .get(*i)
                .is_some_and(|u| unit_owns(u, n.source, &n.channel_or_project))
        });
        if let Some((_, unit)) = owner {
            return match unit.lead.as_deref().and_then(|h| self.org.seat(h)) {
                Some(s) if s.kind == SeatKind::Agent => {
                    self.unless_own_message(s, n, chosen(s, RouteRule::UnitLead))
                }
                Some(s) => skip(format!(
                    "{} belongs to unit `{}`, whose lead `{}` is a human seat",
                    n.channel_or_project, unit.name, s.handle
                )),
                None => match self.top_lead() {
                    Some(s) => self.unless_own_message(s, n, chosen(s, RouteRule::TopLead)),
                    None => skip("no agent seat in the company".into()),
                },
            };
        }
        match self.top_lead() {
            Some(s) => self.unless_own_message(s, n, chosen(s, RouteRule::TopLead)),
            None => skip("no agent seat in the company".into()),
        }
    }

    /// A seat is never woken by its own message.
    fn unless_own_message(&self, seat: &Seat, n: &Notification, routing: Routing) -> Routing {
        if let Some(sender) = &n.sender
            && identities(seat, n.source)
                .iter()
                .any(|id| same(id, sender) && !same(id, &seat.handle))
        {
            return Routing::Skip {
                reason: format!("the sender `{sender}` is seat `{}` itself", seat.handle),
            };
        }
        // Two seats' bots in one channel would otherwise wake each other
        // forever: a bot's chat message wakes only the seats it mentions.
        if n.source == Source::Slack
            && n.sender_is_bot
            && !identities(seat, n.source)
                .iter()
                .any(|id| n.mentions.iter().any(|m| same(id, m)))
        {
            return Routing::Skip {
                reason: format!(
                    "a bot's chat message that does not mention seat `{}` (loop guard)",
                    seat.handle
                ),
            };
        }
        routing
    }

    /// Routes one `raw_webhook` event: publishes the task (or the skip) and
    /// its record. `Err` means "try again later" (the queue redelivers).
    pub async fn route(&self, event: &Event) -> Result<Option<Routing>, HandlerError> {
        if event.event_type != EventType::RawWebhook {
            debug!(event_type = %event.event_type, "not a raw_webhook; ignored by the router");
            return Ok(None);
        }
        if self.handled.contains(&event.id) {
            debug!(event_id = %event.id, "raw_webhook already routed; acknowledging the repeat");
            return Ok(None);
        }
        let raw = match RawWebhook::from_event(event) {
            Ok(r) => r,
            Err(e) => {
                warn!(event_id = %event.id, error = %e, "raw_webhook payload unreadable; dropped");
                self.record_skip(event, None, format!("unreadable raw_webhook payload: {e}"))
                    .await;
                self.handled.insert(event.id);
                return Ok(None);
            }
        };
        let keys = Self::claim_keys(&raw);
        let claimed = match self.claim(event.id, &keys).await? {
            Some(claimed) => claimed,
            None => {
                debug!(event_id = %event.id, delivery = %raw.notification.delivery_key, deferred = raw.dedupe_deferred,
                       "delivery already routed by this or another engine (a retry or a replay)");
                // The API let it through only because its dedupe store was
                // down: say where the copy went.
                if raw.dedupe_deferred {
                    self.record_skip(
                        event,
                        Some(&raw),
                        "duplicate delivery (a retry or replay of one already routed)".into(),
                    )
                    .await;
                }
                self.handled.insert(event.id);
                return Ok(None);
            }
        };
        let routing = self.resolve(&raw).await;
        let outcome = match &routing {
            Routing::Skip { reason } => {
                info!(source = %raw.source, kind = %raw.notification.kind, %reason, "notification skipped");
                self.record_skip(event, Some(&raw), reason.clone()).await;
                Ok(())
            }
            Routing::Seat { handle, rule } => self.deliver(event, &raw, handle, *rule).await,
        };
        match outcome {
            Ok(()) => {
                self.handled.insert(event.id);
                Ok(Some(routing))
            }
            Err(e) => {
                // Give the claims back so the redelivery is routed (here or
                // by another engine); remember it locally if even that fails.
                for key in &claimed {
                    if let Err(release) = self.claims.release(ROUTER_CLAIM_SOURCE, key).await {
                        warn!(error = %release, "cannot release the routing claim");
                        self.unpublished
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(event.id);
                    }
                }
                Err(e)
            }
        }
    }

    /// Claims every key of the delivery carried by event `id`: the keys
    /// claimed when all are new, `None` for a delivery routed before (or a
    /// replay). Fails closed: while the store is unavailable the claim is
    /// held and retried, and if the engine stops meanwhile the message goes
    /// back to the queue (`Err`), so an outage neither drops nor doubles it.
    async fn claim(&self, id: Uuid, keys: &[String]) -> Result<Option<Vec<String>>, HandlerError> {
        let stopping = || self.stopping.load(Ordering::Acquire);
        let mut claimed = Vec::with_capacity(keys.len());
        let mut let_through = None;
        for key in keys {
            let first = retry_transient(
                "claiming a notification",
                Patience::UNTIL_BACK,
                &stopping,
                || self.claims.claim(ROUTER_CLAIM_SOURCE, key),
            )
            .await
            .map_err(|e| {
                HandlerError::new(format!(
                    "routing dedupe unavailable; the notification stays queued: {e}"
                ))
            })?;
            if first {
                claimed.push(key.clone());
                continue;
            }
            // Seen before: unless it is ours, claimed by a publish that failed.
            let ours = *let_through.get_or_insert_with(|| {
                self.unpublished
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id)
            });
            if !ours {
                return Ok(None);
            }
        }
        Ok(Some(claimed))
    }

    fn parent(event: &Event) -> TraceContext {
        event.trace().unwrap_or_else(TraceContext::new_root)
    }

    async fn deliver(
        &self,
        event: &Event,
        raw: &RawWebhook,
        handle: &str,
        rule: RouteRule,
    ) -> Result<(), HandlerError> {
        let Some(seat) = self.org.seat(handle) else {
            return Ok(());
        };
        let n = &raw.notification;
        let task_id = derived_task_id(&format!("{}:{}", event.id, handle));
        let mut request = TaskRequest::new(handle, n.source.as_str(), task_text(n));
        request.sender = n.sender.clone();
        request.channel = Some(n.channel_or_project.clone());
        request.thread = n.thread.clone();
        request.url = n.url.clone();
        request.reason = Some(rule.as_str().to_owned());
        // The routing span this runs in (exported), so the seat's turn nests
        // under it; without a subscriber, ids of the same shape.
        let router_span = crewlet_telemetry::current_trace_context()
            .filter(|c| Some(c.trace_id) == event.trace_id)
            .unwrap_or_else(|| Self::parent(event).child());
        let task = request.to_event(seat, &task_id, EVENT_SOURCE, Some(router_span));
        let inbox = topics::agent_inbox(handle).topic;
        let task = Arc::new(task);
        self.queue
            .publish_shared(&inbox, task.clone())
            .await
            .map_err(|e| HandlerError::new(format!("cannot publish the task to {inbox}: {e}")))?;
        // The live view sees the task on the event stream too (stored once: same id).
        publish_event(self.queue.as_ref(), (*task).clone()).await;
        let record = Event::new(EventType::ExternalNotification, EVENT_SOURCE)
            .with_summary(format!(
                "{} {} in {} routed to {handle} ({})",
                n.source,
                n.kind,
                n.channel_or_project,
                rule.as_str()
            ))
            .with_agent(seat.agent_id, seat.name.as_str())
            .with_task(task_id.as_str())
            .with_channel(n.channel_or_project.as_str())
            .with_trace(router_span)
            .with_agent_handle(handle)
            .with_tag("webhook_source", n.source.as_str())
            .with_tag("rule", rule.as_str())
            .with_payload(json!({
                "source": n.source.as_str(),
                "kind": n.kind,
                "delivery_key": n.delivery_key,
                "channel": n.channel_or_project,
                "thread": n.thread,
                "sender": n.sender,
                "handle": handle,
                "rule": rule.as_str(),
                "task_id": task_id,
                "webhook_event_id": event.id,
            }));
        let record = match &n.sender {
            Some(s) => record.with_sender(s.as_str()),
            None => record,
        };
        publish_event(self.queue.as_ref(), record).await;
        if n.source == Source::Slack
            && let Some(thread) = &n.thread
        {
            let t = ThreadRef::new("slack", n.channel_or_project.as_str(), thread.as_str());
            if let Err(e) = self.follows.follow(handle, &t).await {
                warn!(error = %e, agent = handle, "cannot record the thread follow");
            }
        }
        info!(agent = handle, rule = rule.as_str(), task_id = %task_id, source = %n.source, "notification routed");
        Ok(())
    }

    async fn record_skip(&self, event: &Event, raw: Option<&RawWebhook>, reason: String) {
        let routing = crewlet_telemetry::current_trace_context()
            .filter(|c| Some(c.trace_id) == event.trace_id)
            .unwrap_or_else(|| Self::parent(event).child());
        let mut skip = Event::new(EventType::NotificationSkipped, EVENT_SOURCE)
            .with_summary(format!("notification skipped: {reason}"))
            .with_trace(routing)
            .with_payload(json!({
                "reason": reason,
                "webhook_event_id": event.id,
                "source": raw.map(|r| r.source.as_str()),
                "kind": raw.map(|r| r.notification.kind.clone()),
                "delivery_key": raw.map(|r| r.notification.delivery_key.clone()),
                "channel": raw.map(|r| r.notification.channel_or_project.clone()),
                "handle": raw.and_then(|r| r.handle.clone()),
            }));
        if let Some(r) = raw {
            skip = skip
                .with_channel(r.notification.channel_or_project.as_str())
                .with_tag("webhook_source", r.source.as_str());
            if let Some(s) = &r.notification.sender {
                skip = skip.with_sender(s.as_str());
            }
        }
        publish_event(self.queue.as_ref(), skip).await;
    }
}

/// The router as the handler of `crewlet.notifications.inbound`.
pub(crate) struct RouterHandler(pub Arc<NotificationRouter>);

#[async_trait]
impl EventHandler for RouterHandler {
    async fn handle(&self, delivery: Delivery) -> Result<(), HandlerError> {
        let consume = crewlet_telemetry::span_from_event("route", &delivery.event);
        let span = consume.in_scope(crewlet_telemetry::routing_span);
        span.record("event_type", delivery.event.event_type.as_str());
        let routed = self
            .0
            .route(&delivery.event)
            .instrument(span.clone())
            .await?;
        if let Some(Routing::Seat { handle, .. }) = &routed {
            span.record("recipient", handle.as_str());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
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
}
