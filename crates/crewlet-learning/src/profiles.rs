//! Counterparty profiles: what a seat learns of the people who write to
//! it, one profile per (observer, subject, platform), private to the
//! observer.

use std::fmt::Write as _;

use chrono::Utc;
use crewlet_core::payload::ProfileUpdated;
use crewlet_memory::{CounterpartyProfile, ProfileObservation};
use crewlet_turn::{AuxCall, SeatProfile};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::learning::{EventContext, Learning};
use crate::text::{clip, field, json_in};

const PROFILE_SYSTEM: &str = "You keep an agent's private notes on a person it works with. From the \
message below and the notes so far, update what is worth knowing for working with this person: how they \
like to communicate, what they care about, decisions or preferences they stated. Record only what the \
message shows; do not guess. Answer with a JSON object: {\"display_name\": string or null, \"summary\": \
one or two sentences about the person, \"traits\": {short_key: short value}}. Answer {} when the message \
shows nothing about the person.";

/// A profile as the Plan prompt and `lookup_colleague` show it.
pub fn render(p: &CounterpartyProfile) -> String {
    let mut out = String::new();
    let name = p.display_name.as_deref().unwrap_or(&p.subject);
    let _ = write!(out, "{name} ({} on {})", p.subject, p.platform);
    let _ = write!(out, ", {} interaction(s)", p.interaction_count);
    if !p.summary.trim().is_empty() {
        let _ = write!(out, ": {}", clip(&p.summary, 600));
    }
    if let Some(traits) = p.traits.as_object()
        && !traits.is_empty()
    {
        let list: Vec<String> = traits
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}: {s}"),
                other => format!("{k}: {other}"),
            })
            .collect();
        let _ = write!(out, "\nTraits: {}", clip(&list.join("; "), 600));
    }
    out
}

impl Learning {
    /// One observation of the trigger's sender by `seat`.
    pub(crate) async fn observe_sender(
        &self,
        seat: &SeatProfile,
        sender: &str,
        platform: &str,
        message: &str,
        turn_id: Uuid,
        context: EventContext<'_>,
    ) {
        let previous = self
            .stores
            .profiles
            .get(&seat.handle, sender, platform)
            .await
            .ok()
            .flatten();
        let mut user = String::new();
        let _ = writeln!(user, "Person: {sender} on {platform}");
        if let Some(p) = &previous {
            let _ = writeln!(user, "Notes so far: {}", render(p));
        }
        let _ = writeln!(user, "\nMessage:\n{}", clip(message, 4000));
        let answer = self
            .ask(AuxCall {
                seat,
                worker: "counterparty_profiler",
                system: PROFILE_SYSTEM.to_owned(),
                user,
                max_tokens: 400,
                task_id: context.task_id,
                turn_id: Some(turn_id),
                trace: context.trace,
            })
            .await;
        // Without an answer the interaction still counts.
        let parsed = answer.ok().and_then(|a| json_in(&a, '{'));
        let traits: Map<String, Value> = parsed
            .as_ref()
            .and_then(|v| v.get("traits"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let summary = parsed
            .as_ref()
            .and_then(|v| field(v, "summary"))
            .map(str::to_owned);
        let display_name = parsed
            .as_ref()
            .and_then(|v| field(v, "display_name"))
            .map(str::to_owned);
        let embed_text = summary.clone().unwrap_or_default();
        let embedding = if embed_text.is_empty() {
            None
        } else {
            self.embed(&embed_text).await
        };
        let keys: Vec<String> = traits.keys().cloned().collect();
        match self
            .stores
            .profiles
            .observe(ProfileObservation {
                observer: seat.handle.clone(),
                subject: sender.to_owned(),
                platform: platform.to_owned(),
                display_name,
                summary,
                traits,
                seen_at: Utc::now(),
                embedding,
            })
            .await
        {
            Ok(p) => {
                let payload = ProfileUpdated {
                    subject: p.subject.clone(),
                    platform: p.platform.clone(),
                    interaction_count: p.interaction_count,
                    traits: keys,
                    turn_id: Some(turn_id),
                };
                let summary = format!("{} updated its notes on {}", seat.handle, p.subject);
                self.emit(seat, context, summary, &payload).await;
            }
            Err(e) => {
                tracing::warn!(agent = %seat.handle, error = %e, "writing a counterparty profile failed");
            }
        }
    }
}
