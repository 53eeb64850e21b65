//! Colleague asks: `a2a_ask(handle, question)`.
//!
//! An ask to an agent seat posts a `colleague` task to its inbox carrying an
//! [`AskRef`] (who asked, the chain of seats waiting, the delegation depth
//! one deeper than the asker's, the asker's trace). The asking turn waits,
//! bounded, for the answer: the answering turn's result. An answer that
//! comes after the asker stopped waiting reaches it as a new task. Asks
//! deeper than `turn_engine.delegation_depth_limit` (3) and asks to a seat
//! already waiting on the chain (a cycle) are refused to the caller, who
//! answers from what it knows instead.
//!
//! A human seat is asked on chat, as a direct message from the asker's own
//! bot: on Mattermost to the human's `contact.mattermost_user_id`, else on
//! Slack to their `contact.slack_user_id`; their reply arrives like any DM.
//!
//! Nobody answering within the escalation deadline (or the colleague's turn
//! failing) sends the question one step up the target's manager chain,
//! again after each deadline until the top; every step is an
//! `ask_escalated` event. The first answer wins; later ones are dropped.

mod tool;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crewlet_config::{Organization, Seat, SeatKind};
use crewlet_core::payload::{AskRef, TaskRequest};
use crewlet_core::{Event, EventType, TraceContext};
use crewlet_queue::EventQueue;
use crewlet_turn::TurnOutcome;
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::oneshot;
use tracing::{info, warn};
use uuid::Uuid;

pub(crate) use tool::AskColleague;

use crate::inbox::Inbox;
use crate::mattermost::Mattermost;
use crate::sink::publish_event;
use crate::slack::SlackSeats;
use crate::task::derived_task_id;

/// The `source` of colleague tasks and of this module's events.
pub(crate) const SOURCE: &str = "colleague";
/// How long an unanswered ask waits before it goes up the manager chain.
pub(crate) const DEFAULT_ESCALATE_AFTER: Duration = Duration::from_secs(15 * 60);
/// How long the asking turn waits by default, and at most.
pub(crate) const DEFAULT_WAIT: Duration = Duration::from_secs(120);
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(600);

/// How colleague asks behave.
#[derive(Debug, Clone)]
pub(crate) struct AskSettings {
    /// `turn_engine.delegation_depth_limit`.
    pub max_depth: u32,
    pub escalate_after: Duration,
    /// With one turn slot the asker would hold the slot its colleague
    /// needs: asks then never wait.
    pub can_wait: bool,
}

/// An answer to an ask.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub from: String,
    pub text: String,
}

struct Pending {
    asker: String,
    /// Who holds the question now (the target, then managers).
    holder: String,
    question: String,
    chain: Vec<String>,
    depth: u32,
    asked_at: Instant,
    trace: TraceContext,
    waiter: Option<oneshot::Sender<Answer>>,
}

/// The engine's colleague asks.
pub(crate) struct Asks {
    org: Arc<Organization>,
    queue: Arc<dyn EventQueue>,
    settings: AskSettings,
    mattermost: Option<Arc<Mattermost>>,
    slack: Option<Arc<SlackSeats>>,
    pending: Mutex<HashMap<Uuid, Pending>>,
}

/// What an ask came to, for the tool's answer.
#[derive(Debug)]
pub(crate) enum Asked {
    Answered(Answer),
    /// Posted; the answer comes later as a message.
    Waiting {
        target: String,
        waited: Duration,
    },
    /// A human, asked on chat.
    OnChat {
        target: String,
        channel: String,
    },
}

impl Asks {
    pub fn new(
        org: Arc<Organization>,
        queue: Arc<dyn EventQueue>,
        settings: AskSettings,
        mattermost: Option<Arc<Mattermost>>,
        slack: Option<Arc<SlackSeats>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            org,
            queue,
            settings,
            mattermost,
            slack,
            pending: Mutex::new(HashMap::new()),
        })
    }

    /// Asks `target` on behalf of `asker` (whose turn is `depth` deep with
    /// `chain` waiting above it) and waits up to `wait` for the answer.
    #[allow(clippy::too_many_arguments)]
    pub async fn ask(
        self: &Arc<Self>,
        asker: &str,
        target: &str,
        question: &str,
        depth: u32,
        chain: &[String],
        wait: Duration,
        trace: TraceContext,
    ) -> Result<Asked, String> {
        let target = target.trim().trim_start_matches('@');
        let seat = self.org.seat(target).ok_or_else(|| {
            format!("no colleague with handle `{target}`; lookup_colleague lists them")
        })?;
        if seat.handle == asker {
            return Err("that is you: a question to yourself is answered by thinking it through in this turn".into());
        }
        if seat.kind == SeatKind::Human {
            return self.ask_human(asker, seat, question).await;
        }
        if depth + 1 > self.settings.max_depth {
            return Err(format!(
                "this work is already {depth} delegations deep (the limit is {}): answer from what you know, or say what is missing",
                self.settings.max_depth
            ));
        }
        if chain.iter().any(|h| h == &seat.handle) {
            return Err(format!(
                "`{}` is already waiting on this question chain ({}): asking them back would be a cycle; answer from what you know",
                seat.handle,
                chain.join(" -> ")
            ));
        }
        let ask_id = Uuid::now_v7();
        let mut full_chain = chain.to_vec();
        full_chain.push(asker.to_owned());
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(
            ask_id,
            Pending {
                asker: asker.to_owned(),
                holder: seat.handle.clone(),
                question: question.to_owned(),
                chain: full_chain.clone(),
                depth: depth + 1,
                asked_at: Instant::now(),
                trace,
                waiter: Some(tx),
            },
        );
        let content = format!(
            "@{asker} asks you:\n\n{question}\n\nYour final answer in this turn is sent back to @{asker}."
        );
        if let Err(e) = self.post(ask_id, seat, &content).await {
            self.pending.lock().remove(&ask_id);
            return Err(e);
        }
        self.record(
            EventType::ContributionRequested,
            trace,
            format!("{asker} asked {} a question", seat.handle),
            json!({"ask_id": ask_id, "asker": asker, "target": seat.handle, "question": question,
                   "depth": depth + 1, "chain": full_chain}),
        )
        .await;
        self.arm_escalation(ask_id);
        let wait = if self.settings.can_wait {
            wait.min(MAX_WAIT)
        } else {
            Duration::ZERO
        };
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(answer)) => Ok(Asked::Answered(answer)),
            _ => {
                // The answer now comes as a message.
                if let Some(p) = self.pending.lock().get_mut(&ask_id) {
                    p.waiter = None;
                }
                Ok(Asked::Waiting {
                    target: seat.handle.clone(),
                    waited: wait,
                })
            }
        }
    }

    /// Posts the question (as held by `seat`) to its inbox.
    async fn post(&self, ask_id: Uuid, seat: &Seat, content: &str) -> Result<(), String> {
        let (asker, question, chain, depth, trace) = {
            let pending = self.pending.lock();
            let p = pending.get(&ask_id).ok_or("the ask is gone")?;
            (
                p.asker.clone(),
                p.question.clone(),
                p.chain.clone(),
                p.depth,
                p.trace,
            )
        };
        let mut request = TaskRequest::new(&seat.handle, SOURCE, content);
        request.sender = Some(asker.clone());
        request.ask = Some(AskRef {
            ask_id,
            asker,
            question,
            chain,
            depth,
        });
        let task_id = derived_task_id(&format!("ask:{ask_id}:{}", seat.handle));
        Inbox::new(self.queue.as_ref())
            .post(seat, &task_id, &request, SOURCE, Some(trace.child()))
            .await
            .map(drop)
            .map_err(|e| format!("cannot reach {}: {e}", seat.handle))
    }

    /// A human is asked on chat by the asker's own bot: Mattermost when
    /// both are there, else Slack.
    async fn ask_human(&self, asker: &str, human: &Seat, question: &str) -> Result<Asked, String> {
        let contact = human.role.contact.as_ref();
        let mm_user = contact.and_then(|c| c.mattermost_user_id.as_deref());
        let mm_bot = self
            .mattermost
            .as_ref()
            .and_then(|mm| mm.bots.get(asker).cloned());
        if let (Some(user), Some(bot)) = (mm_user, mm_bot) {
            let me = bot.account().await?;
            let other = bot
                .client
                .user_by_username(user)
                .await
                .map_err(|e| format!("cannot find @{user} on Mattermost: {e}"))?;
            let channel = bot
                .client
                .direct_channel(&me.user_id, &other.id)
                .await
                .map_err(|e| format!("cannot open a DM with @{user}: {e}"))?;
            bot.client
                .create_post(&channel.id, question, None)
                .await
                .map_err(|e| format!("cannot send the DM: {e}"))?;
            return Ok(Asked::OnChat {
                target: human.handle.clone(),
                channel: format!("a Mattermost DM with @{user}"),
            });
        }
        let slack_user = contact.and_then(|c| c.slack_user_id.as_deref());
        if let (Some(user), Some(slack)) =
            (slack_user, self.slack.as_ref().filter(|s| s.has_bot(asker)))
        {
            slack
                .post_as(asker, user, question)
                .await
                .map_err(|e| format!("cannot send the Slack DM: {e}"))?;
            return Ok(Asked::OnChat {
                target: human.handle.clone(),
                channel: format!("a Slack DM with <@{user}>"),
            });
        }
        Err(format!(
            "`{}` is a person; you can reach them only on a chat you both use (their contact: {}), and you have no bot there",
            human.handle,
            describe_contact(human)
        ))
    }

    /// The answering turn of `ask` ended (by `answerer`).
    pub async fn answered(self: &Arc<Self>, answerer: &str, ask: &AskRef, outcome: &TurnOutcome) {
        if !outcome.succeeded() {
            info!(ask_id = %ask.ask_id, answerer, "the colleague's turn failed; the question goes up the chain");
            self.escalate(ask.ask_id).await;
            return;
        }
        let Some(p) = self.pending.lock().remove(&ask.ask_id) else {
            return;
        };
        let answer = Answer {
            from: answerer.to_owned(),
            text: outcome.final_artifact.trim().to_owned(),
        };
        let waited = p.asked_at.elapsed();
        let mut p = p;
        let sent = match p.waiter.take() {
            Some(tx) => tx.send(answer.clone()).is_ok(),
            None => false,
        };
        let delivered = if sent {
            "in_turn"
        } else {
            self.deliver_later(ask.ask_id, &p, &answer).await
        };
        self.record(
            EventType::ContributionReceived,
            p.trace,
            format!("{answerer} answered {}", p.asker),
            json!({"ask_id": ask.ask_id, "asker": p.asker, "from": answerer,
                   "waited_ms": waited.as_millis() as u64, "delivered": delivered,
                   "answer": answer.text.chars().take(500).collect::<String>()}),
        )
        .await;
    }

    /// The answer as a new task for the asker.
    async fn deliver_later(&self, ask_id: Uuid, p: &Pending, answer: &Answer) -> &'static str {
        let Some(seat) = self.org.seat(&p.asker) else {
            return "dropped";
        };
        let content = format!(
            "@{} answered your question\n> {}\n\n{}",
            answer.from,
            p.question.lines().next().unwrap_or_default(),
            answer.text
        );
        let mut request = TaskRequest::new(&p.asker, SOURCE, content);
        request.sender = Some(answer.from.clone());
        let task_id = derived_task_id(&format!("answer:{ask_id}"));
        match Inbox::new(self.queue.as_ref())
            .post(seat, &task_id, &request, SOURCE, Some(p.trace.child()))
            .await
        {
            Ok(_) => "as_message",
            Err(e) => {
                warn!(asker = %p.asker, error = %e, "cannot deliver a colleague's answer");
                "dropped"
            }
        }
    }

    fn arm_escalation(self: &Arc<Self>, ask_id: Uuid) {
        let me = Arc::downgrade(self);
        let after = self.settings.escalate_after;
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            if let Some(asks) = me.upgrade() {
                asks.escalate(ask_id).await;
            }
        });
    }

    /// Sends an unanswered question one step up the holder's manager chain.
    async fn escalate(self: &Arc<Self>, ask_id: Uuid) {
        let (holder, asker, chain, trace, question, since) = {
            let pending = self.pending.lock();
            let Some(p) = pending.get(&ask_id) else {
                return;
            };
            (
                p.holder.clone(),
                p.asker.clone(),
                p.chain.clone(),
                p.trace,
                p.question.clone(),
                p.asked_at.elapsed(),
            )
        };
        let manager = self
            .org
            .seat(&holder)
            .and_then(|s| s.manager_chain.first())
            .and_then(|m| self.org.seat(m))
            .filter(|m| m.handle != asker && !chain.contains(&m.handle));
        let Some(manager) = manager else {
            self.record(
                EventType::AskEscalated,
                trace,
                format!("{holder} did not answer {asker}, and there is nobody above to ask"),
                json!({"ask_id": ask_id, "asker": asker, "from": holder, "to": null,
                       "waited_s": since.as_secs()}),
            )
            .await;
            self.pending.lock().remove(&ask_id);
            return;
        };
        let minutes = since.as_secs() / 60;
        let outcome = if manager.kind == SeatKind::Human {
            match self.ask_human(&asker, manager, &format!(
                "@{asker} asked @{holder} {minutes} min ago and has no answer yet:\n\n{question}"
            )).await {
                Ok(_) => "asked on chat".to_owned(),
                Err(e) => format!("could not reach them: {e}"),
            }
        } else {
            if let Some(p) = self.pending.lock().get_mut(&ask_id) {
                p.holder = manager.handle.clone();
            }
            let content = format!(
                "@{asker} asked @{holder} {minutes} min ago and has no answer yet. Please answer, or say who can:\n\n{question}\n\nYour final answer in this turn is sent back to @{asker}."
            );
            match self.post(ask_id, manager, &content).await {
                Ok(()) => {
                    self.arm_escalation(ask_id);
                    "asked".to_owned()
                }
                Err(e) => e,
            }
        };
        self.record(
            EventType::AskEscalated,
            trace,
            format!("{holder} did not answer {asker}; asked {}", manager.handle),
            json!({"ask_id": ask_id, "asker": asker, "from": holder, "to": manager.handle,
                   "waited_s": since.as_secs(), "outcome": outcome}),
        )
        .await;
        if manager.kind == SeatKind::Human {
            // A person's reply arrives as a DM; nothing more to wait for here.
            self.pending.lock().remove(&ask_id);
        }
    }

    async fn record(
        &self,
        kind: EventType,
        trace: TraceContext,
        summary: String,
        payload: serde_json::Value,
    ) {
        let event = Event::new(kind, "engine.colleagues")
            .with_summary(summary)
            .with_trace(trace.child())
            .with_payload(payload);
        publish_event(self.queue.as_ref(), event).await;
    }
}

fn describe_contact(seat: &Seat) -> String {
    let Some(c) = &seat.role.contact else {
        return "none".into();
    };
    let mut out = Vec::new();
    for (k, v) in [
        ("mattermost", &c.mattermost_user_id),
        ("slack", &c.slack_user_id),
        ("email", &c.email),
    ] {
        if let Some(v) = v {
            out.push(format!("{k} {v}"));
        }
    }
    if out.is_empty() {
        "none".into()
    } else {
        out.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use crewlet_config::Company;
    use crewlet_queue::MemoryBroker;

    use super::*;

    fn asks(max_concurrent: u32) -> Arc<Asks> {
        let yaml = format!(
            "name: T\nturn_engine: {{max_concurrent_turns: {max_concurrent}}}\nroles:\n  - {{name: Boss, kind: human, manages: [ceo], contact: {{email: b@x.io}}}}\n  - {{name: CEO, handle: ceo, manages: [eng]}}\n  - {{name: Engineer, handle: eng}}\n"
        );
        let company = Company::from_yaml("t", &yaml).unwrap_or_else(|e| panic!("{e}"));
        let queue: Arc<dyn EventQueue> = Arc::new(MemoryBroker::new().client());
        Asks::new(
            Arc::new(company.organization()),
            queue,
            AskSettings {
                max_depth: 3,
                escalate_after: Duration::from_secs(600),
                can_wait: max_concurrent > 1,
            },
            None,
            None,
        )
    }

    async fn refused(
        a: &Arc<Asks>,
        asker: &str,
        target: &str,
        depth: u32,
        chain: &[&str],
    ) -> String {
        let chain: Vec<String> = chain.iter().map(|s| (*s).to_owned()).collect();
        match a
            .ask(
                asker,
                target,
                "q?",
                depth,
                &chain,
                Duration::ZERO,
                TraceContext::new_root(),
            )
            .await
        {
            Err(e) => e,
            Ok(other) => panic!("asking {target} was not refused: {other:?}"),
        }
    }

    #[tokio::test]
    async fn depth_cycles_self_strangers_and_unreachable_people_are_refused() {
        let a = asks(10);
        assert!(
            refused(&a, "eng", "ghost", 0, &[])
                .await
                .contains("no colleague with handle `ghost`")
        );
        assert!(
            refused(&a, "eng", "@eng", 0, &[])
                .await
                .contains("that is you")
        );
        assert!(
            refused(&a, "eng", "ceo", 3, &[])
                .await
                .contains("3 delegations deep (the limit is 3)")
        );
        let cycle = refused(&a, "eng", "ceo", 1, &["ceo"]).await;
        assert!(cycle.contains("cycle") && cycle.contains("ceo"), "{cycle}");
        let person = refused(&a, "ceo", "boss", 0, &[]).await;
        assert!(
            person.contains("is a person") && person.contains("email b@x.io"),
            "{person}"
        );
        assert!(a.pending.lock().is_empty());
    }

    #[tokio::test]
    async fn an_ask_within_the_cap_is_posted_and_waits_no_longer_than_asked() {
        let a = asks(1);
        let asked = a
            .ask(
                "eng",
                "ceo",
                "q?",
                2,
                &[],
                Duration::from_secs(30),
                TraceContext::new_root(),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        // One turn slot: the asker must not hold it while the colleague waits.
        match asked {
            Asked::Waiting { target, waited } => {
                assert_eq!(target, "ceo");
                assert_eq!(waited, Duration::ZERO);
            }
            other => panic!("{other:?}"),
        }
        let pending = a.pending.lock();
        let p = pending
            .values()
            .next()
            .unwrap_or_else(|| panic!("nothing pending"));
        assert_eq!((p.depth, p.chain.clone()), (3, vec!["eng".to_owned()]));
        assert!(p.waiter.is_none());
    }
}
