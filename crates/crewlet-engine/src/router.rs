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
//! (and claims each delivery's keys in `webhook_deliveries` under source
//! `engine.router`, so two engines on one database route it once), with the
//! claim-then-publish-then-release policy the API's webhook route uses too
//! (`crewlet_integrations::webhook::dedupe`).
//!
//! What is per source (who a seat is on it, what a unit owns there, the
//! chat loop guard, thread follows) is asked of the source
//! (`crewlet_integrations::WebhookSource`); the `raw_webhook` payload is
//! `crewlet_integrations::RawWebhook`, and the router's own records are the
//! typed [`ExternalNotification`] and [`NotificationSkipped`].

use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use crewlet_config::{Company, Organization, Seat, SeatKind};
use crewlet_core::payload::{EventPayload, PayloadError};
use crewlet_core::{Event, EventType, TraceContext};
use crewlet_integrations::webhook::TAG_WEBHOOK_SOURCE;
use crewlet_integrations::webhook::dedupe::{self, Claim, ClaimStore};
use crewlet_integrations::{Notification, RawWebhook, Source};
use crewlet_queue::{Delivery, EventHandler, EventQueue, HandlerError};
use crewlet_store::{
    Patience, StoreError, ThreadFollows, ThreadRef, WebhookDeliveries, retry_transient,
};
use tracing::{Instrument, debug, info, warn};
use uuid::Uuid;

mod identity;
mod reason;
mod records;
mod valve;

use identity::{UnitOwns, identities, same, seat_owns, unit_owns, units_preorder};
pub use records::{ExternalNotification, NotificationSkipped};

use crate::inbox::Inbox;
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
    /// `notification_rate_limit`, when set.
    valve: Option<valve::RateValve>,
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
            valve: valve::RateValve::new(company.notification_rate_limit),
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
        self.org
            .agents()
            .find(|s| {
                s.manager_chain
                    .iter()
                    .all(|m| self.org.seat(m).is_none_or(|m| m.kind == SeatKind::Human))
            })
            .map(Arc::as_ref)
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
        if n.source.webhook().bot_messages_need_a_mention()
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
        // The type was checked above: the error is the payload's shape.
        let raw = match RawWebhook::deserialize_payload(event).map_err(malformed) {
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
        let store = RouterClaims {
            store: self.claims.as_ref(),
            stopping: &self.stopping,
        };
        // Seen before: unless it is ours, claimed by a publish that failed.
        let let_through = || self.unpublished.lock().remove(&event.id);
        let claim = match dedupe::claim(&store, ROUTER_CLAIM_SOURCE, &keys, let_through).await {
            Claim::New(claim) => claim,
            Claim::Seen { .. } => {
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
            // Fails closed: while the store is unavailable the claim is held
            // and retried ([`RouterClaims`]); if the engine stops meanwhile
            // the message goes back to the queue, so an outage neither drops
            // nor doubles it.
            Claim::Unavailable(e) => {
                return Err(HandlerError::new(format!(
                    "routing dedupe unavailable; the notification stays queued: {e}"
                )));
            }
        };
        let routed = claim
            .publish(async {
                let mut routing = self.resolve(&raw).await;
                if let Routing::Seat { handle, .. } = &routing
                    && let Some(valve) = &self.valve
                    && let Err(reason) = valve.admit(handle)
                {
                    warn!(seat = %handle, dropped = valve.dropped(), "notification dropped by notification_rate_limit");
                    routing = Routing::Skip { reason };
                }
                let outcome = match &routing {
                    Routing::Skip { reason } => {
                        info!(source = %raw.source, kind = %raw.notification.kind, %reason, "notification skipped");
                        self.record_skip(event, Some(&raw), reason.clone()).await;
                        Ok(())
                    }
                    Routing::Seat { handle, rule } => self.deliver(event, &raw, handle, *rule).await,
                };
                outcome.map(|()| routing)
            })
            .await;
        match routed {
            Ok(published) => {
                self.handled.insert(event.id);
                Ok(Some(published.value))
            }
            Err(failed) => {
                // The claims were given back so the redelivery is routed (here
                // or by another engine); remember it locally if even that failed.
                for release in &failed.unreleased {
                    warn!(error = %release, "cannot release the routing claim");
                    self.unpublished.lock().insert(event.id);
                }
                Err(failed.error)
            }
        }
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
        let text = crewlet_integrations::webhook::prompt::render(n, &raw.body);
        let mut request = TaskRequest::new(handle, n.source.as_str(), text);
        request.sender = n.sender.clone();
        request.channel = Some(n.channel_or_project.clone());
        request.thread = n.thread.clone();
        request.url = n.url.clone();
        request.reason = Some(self.reason(raw, seat, rule).await);
        request.direct = n.direct;
        // The routing span this runs in (exported), so the seat's turn nests
        // under it; without a subscriber, ids of the same shape.
        let router_span = crewlet_telemetry::current_trace_context()
            .filter(|c| Some(c.trace_id) == event.trace_id)
            .unwrap_or_else(|| Self::parent(event).child());
        Inbox::new(self.queue.as_ref())
            .post(seat, &task_id, &request, EVENT_SOURCE, Some(router_span))
            .await
            .map_err(|e| HandlerError::new(e.to_string()))?;
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
            .with_tag(TAG_WEBHOOK_SOURCE, n.source.as_str())
            .with_tag("rule", rule.as_str())
            .with_payload(
                ExternalNotification::routed(n, handle, rule, &task_id, event.id).to_payload(),
            );
        let record = match &n.sender {
            Some(s) => record.with_sender(s.as_str()),
            None => record,
        };
        publish_event(self.queue.as_ref(), record).await;
        if n.source.webhook().follows_threads()
            && let Some(thread) = &n.thread
        {
            let t = ThreadRef::new(
                n.source.as_str(),
                n.channel_or_project.as_str(),
                thread.as_str(),
            );
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
            .with_payload(NotificationSkipped::of(event, raw, reason).to_payload());
        if let Some(r) = raw {
            skip = skip
                .with_channel(r.notification.channel_or_project.as_str())
                .with_tag(TAG_WEBHOOK_SOURCE, r.source.as_str());
            if let Some(s) = &r.notification.sender {
                skip = skip.with_sender(s.as_str());
            }
        }
        publish_event(self.queue.as_ref(), skip).await;
    }
}

/// The error of a payload that does not read, as the skip record names it:
/// the shape's error itself.
fn malformed(e: PayloadError) -> String {
    match e {
        PayloadError::Malformed { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

/// The router's claims store for the shared dedupe policy: a claim is held
/// and retried while the store is unavailable (fail closed), until it
/// answers or the engine stops.
struct RouterClaims<'a> {
    store: &'a dyn WebhookDeliveries,
    stopping: &'a AtomicBool,
}

impl ClaimStore for RouterClaims<'_> {
    type Error = StoreError;

    async fn claim(&self, source: &str, key: &str) -> Result<bool, StoreError> {
        let stopping = || self.stopping.load(Ordering::Acquire);
        retry_transient(
            "claiming a notification",
            Patience::UNTIL_BACK,
            &stopping,
            || self.store.claim(source, key),
        )
        .await
    }

    async fn is_claimed(&self, source: &str, key: &str) -> Result<bool, StoreError> {
        self.store.is_claimed(source, key).await
    }

    async fn release(&self, source: &str, key: &str) -> Result<(), StoreError> {
        self.store.release(source, key).await
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
mod tests;
