//! The persist decider: after a turn that ended `done` or `failed`, the
//! auxiliary model decides whether something from it belongs in the
//! seat's diary, durable (`LONG`), situational with a TTL (`SHORT`), or
//! nothing (`NOOP`). `DOC` (a rule for the whole team) is not personal
//! memory: it is logged, not written.

use std::fmt::Write as _;

use crewlet_memory::DiaryKind;
use crewlet_turn::{AuxCall, SeatProfile};
use serde_json::Value;
use uuid::Uuid;

use crate::learning::{DiaryNote, EventContext, Learning};
use crate::text::{clip, field, json_in};

const DECIDER_SYSTEM: &str = "You decide what an agent should remember from a turn it just finished. \
Most turns teach nothing lasting: then answer NOOP. Remember only facts that will matter in later, \
different tasks: a person's preference, a project convention, a schedule, the state of something that \
lasts. Write the memory as a short declarative fact about the world (\"The deploy window is Tuesday\"), \
never as an instruction to yourself (\"Always deploy on Tuesday\"). Tiers: LONG for lasting facts; SHORT \
for situations that will expire (give ttl_days); DOC for a rule the whole team should follow (it belongs \
in the team's documentation, not in personal memory); NOOP for nothing. Answer with one JSON object: \
{\"tier\": \"LONG\"|\"SHORT\"|\"DOC\"|\"NOOP\", \"content\": string, \"ttl_days\": integer}.";

/// The decider's choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    Remember {
        kind: DiaryKind,
        content: String,
        ttl_days: Option<u32>,
    },
    Doc(String),
    Noop,
}

pub(crate) fn parse_decision(answer: &str) -> Decision {
    if answer.trim().eq_ignore_ascii_case("noop") {
        return Decision::Noop;
    }
    let Some(v) = json_in(answer, '{') else {
        return Decision::Noop;
    };
    let content = field(&v, "content").unwrap_or("").to_owned();
    let ttl_days = v
        .get("ttl_days")
        .and_then(Value::as_u64)
        .and_then(|d| u32::try_from(d).ok());
    match field(&v, "tier").map(str::to_ascii_uppercase).as_deref() {
        Some("LONG") if !content.is_empty() => Decision::Remember {
            kind: DiaryKind::Long,
            content,
            ttl_days: None,
        },
        Some("SHORT") if !content.is_empty() => Decision::Remember {
            kind: DiaryKind::Short,
            content,
            ttl_days,
        },
        Some("DOC") if !content.is_empty() => Decision::Doc(content),
        _ => Decision::Noop,
    }
}

/// What the decider reads of a finished turn.
pub(crate) struct TurnDigest<'a> {
    pub task: &'a str,
    pub decision: &'a str,
    pub plan: &'a str,
    pub completed_work: &'a str,
    pub notes: &'a str,
    pub artifact: &'a str,
    pub failure: Option<&'a str>,
}

impl Learning {
    pub(crate) async fn decide_and_persist(
        &self,
        seat: &SeatProfile,
        turn: &TurnDigest<'_>,
        turn_id: Uuid,
        context: EventContext<'_>,
    ) {
        let mut user = String::new();
        let _ = writeln!(user, "Task:\n{}\n", clip(turn.task, 4000));
        let _ = writeln!(user, "Outcome: {}", turn.decision);
        if let Some(f) = turn.failure {
            let _ = writeln!(user, "Failure: {}", clip(f, 500));
        }
        for (label, text) in [
            ("Plan", turn.plan),
            ("Completed work", turn.completed_work),
            ("Review notes", turn.notes),
            ("Result", turn.artifact),
        ] {
            if !text.trim().is_empty() {
                let _ = writeln!(user, "{label}: {}", clip(text, 2000));
            }
        }
        let Ok(answer) = self
            .ask(AuxCall {
                seat,
                worker: "persist_decider",
                system: DECIDER_SYSTEM.to_owned(),
                user,
                max_tokens: 400,
                task_id: context.task_id,
                turn_id: Some(turn_id),
                trace: context.trace,
            })
            .await
        else {
            return;
        };
        match parse_decision(&answer) {
            Decision::Remember {
                kind,
                content,
                ttl_days,
            } => {
                let note = DiaryNote {
                    content: &content,
                    kind,
                    ttl_days,
                    writer: "persist_decider",
                    turn_id: Some(turn_id),
                    context,
                };
                if let Err(e) = self.write_diary(seat, note).await {
                    tracing::warn!(agent = %seat.handle, error = %e, "the persist decider's diary write failed");
                }
            }
            Decision::Doc(rule) => {
                tracing::info!(agent = %seat.handle, rule = %clip(&rule, 200),
                    "the persist decider saw a team rule; it belongs in the team's documentation, not the diary");
            }
            Decision::Noop => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_four_tiers() {
        assert_eq!(
            parse_decision(r#"{"tier":"LONG","content":"The deploy window is Tuesday"}"#),
            Decision::Remember {
                kind: DiaryKind::Long,
                content: "The deploy window is Tuesday".into(),
                ttl_days: None
            }
        );
        assert_eq!(
            parse_decision(r#"ok: {"tier":"short","content":"Ada is away","ttl_days":7}"#),
            Decision::Remember {
                kind: DiaryKind::Short,
                content: "Ada is away".into(),
                ttl_days: Some(7)
            }
        );
        assert_eq!(
            parse_decision(r#"{"tier":"DOC","content":"Tag releases"}"#),
            Decision::Doc("Tag releases".into())
        );
        assert_eq!(parse_decision("NOOP"), Decision::Noop);
        assert_eq!(
            parse_decision(r#"{"tier":"LONG","content":""}"#),
            Decision::Noop
        );
        assert_eq!(parse_decision("I think nothing"), Decision::Noop);
    }
}
