use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The broad family of an event, used for filtering and dashboards.
///
/// Unknown categories (from a newer producer) are kept verbatim in `Other`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    Lifecycle,
    Task,
    System,
    Communication,
    Decision,
    Knowledge,
    Notification,
    Learning,
    Webhook,
    Other(String),
}

impl Category {
    pub const KNOWN: [Category; 9] = [
        Category::Lifecycle,
        Category::Task,
        Category::System,
        Category::Communication,
        Category::Decision,
        Category::Knowledge,
        Category::Notification,
        Category::Learning,
        Category::Webhook,
    ];

    pub fn as_str(&self) -> &str {
        match self {
            Category::Lifecycle => "lifecycle",
            Category::Task => "task",
            Category::System => "system",
            Category::Communication => "communication",
            Category::Decision => "decision",
            Category::Knowledge => "knowledge",
            Category::Notification => "notification",
            Category::Learning => "learning",
            Category::Webhook => "webhook",
            Category::Other(s) => s,
        }
    }

    pub fn parse(s: &str) -> Category {
        Category::KNOWN
            .iter()
            .find(|c| c.as_str() == s)
            .cloned()
            .unwrap_or_else(|| Category::Other(s.to_owned()))
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Category {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Category {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::wire::deserialize_str(d, "a category", |s| {
            Ok::<_, std::convert::Infallible>(Category::parse(s))
        })
    }
}

macro_rules! event_types {
    ($( $variant:ident = $wire:literal => $cat:ident ),* $(,)?) => {
        /// The type of an event. Known types carry their default category; any
        /// other string is kept verbatim in `Other` and round-trips unchanged.
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum EventType {
            $( $variant, )*
            Other(String),
        }

        impl EventType {
            /// Every known type, in catalogue order.
            pub const KNOWN: &'static [EventType] = &[ $( EventType::$variant, )* ];

            /// The wire name, e.g. `task_started` or `turn.guard_breach`.
            pub fn as_str(&self) -> &str {
                match self {
                    $( EventType::$variant => $wire, )*
                    EventType::Other(s) => s,
                }
            }

            /// The category a known type belongs to; `None` for unknown types.
            pub fn category(&self) -> Option<Category> {
                match self {
                    $( EventType::$variant => Some(Category::$cat), )*
                    EventType::Other(_) => None,
                }
            }

            pub fn parse(s: &str) -> EventType {
                match s {
                    $( $wire => EventType::$variant, )*
                    other => EventType::Other(other.to_owned()),
                }
            }
        }
    };
}

event_types! {
    // lifecycle
    AgentSpawned = "agent_spawned" => Lifecycle,
    AgentTerminated = "agent_terminated" => Lifecycle,
    OrgStarted = "org_started" => Lifecycle,
    OrgStopped = "org_stopped" => Lifecycle,
    RoleUpdated = "role_updated" => Lifecycle,
    AgentStateChanged = "agent_state_changed" => Lifecycle,
    // task
    TaskCreated = "task_created" => Task,
    TaskStarted = "task_started" => Task,
    TaskCompleted = "task_completed" => Task,
    TaskFailed = "task_failed" => Task,
    TaskDelegated = "task_delegated" => Task,
    // system
    AgentTurnCompleted = "agent_turn_completed" => System,
    AgentTurnProgress = "agent_turn_progress" => System,
    AgentPhaseStarted = "agent_phase_started" => System,
    AgentPhaseCompleted = "agent_phase_completed" => System,
    BudgetExhausted = "budget_exhausted" => System,
    BudgetWarning = "budget_warning" => System,
    TurnGuardBreach = "turn.guard_breach" => System,
    LlmUnavailable = "llm_unavailable" => System,
    ProviderFallback = "provider_fallback" => System,
    ProviderCircuitOpened = "provider_circuit_opened" => System,
    ProviderCircuitClosed = "provider_circuit_closed" => System,
    McpServerFailed = "mcp_server_failed" => System,
    ToolSkillBlocked = "phase.tool_skill_blocked" => System,
    ToolActivated = "phase.tool_activated" => System,
    ExecuteMissingTool = "execute.missing_tool" => System,
    ConfigRevisionActivated = "config_revision_activated" => System,
    ConfigRevisionApplied = "config_revision_applied" => System,
    SeatControl = "seat_control" => System,
    EffectUncertain = "effect_uncertain" => System,
    TurnResumed = "turn_resumed" => System,
    TurnTriggerSkipped = "turn_trigger_skipped" => System,
    SeatClaimed = "seat_claimed" => System,
    SeatReleased = "seat_released" => System,
    FleetControl = "fleet_control" => System,
    SandboxRunStarted = "sandbox_run_started" => System,
    SandboxClarificationRequested = "sandbox_clarification_requested" => System,
    SandboxRunCompleted = "sandbox_run_completed" => System,
    SandboxEscapeRefused = "sandbox_escape_refused" => System,
    // communication
    MessageSent = "message_sent" => Communication,
    // decision
    DecisionRequested = "decision_requested" => Decision,
    DecisionResolved = "decision_resolved" => Decision,
    ContributionRequested = "contribution_requested" => Decision,
    ContributionReceived = "contribution_received" => Decision,
    AskEscalated = "ask_escalated" => Decision,
    // knowledge
    DocumentCreated = "document_created" => Knowledge,
    DocumentUpdated = "document_updated" => Knowledge,
    // notification
    ExternalNotification = "external_notification" => Notification,
    NotificationSkipped = "notification_skipped" => Notification,
    NotificationsCoalesced = "notifications_coalesced" => Notification,
    // learning
    DiaryWritten = "diary_written" => Learning,
    EpisodeRecorded = "episode_recorded" => Learning,
    SkillSynthesized = "skill_synthesized" => Learning,
    SkillRefined = "skill_refined" => Learning,
    MemoryPrefetched = "memory_prefetched" => Learning,
    ProfileUpdated = "profile_updated" => Learning,
    AgentOnboarded = "agent_onboarded" => Learning,
    KnowledgePrefetched = "knowledge_prefetched" => Learning,
    // webhook
    RawWebhook = "raw_webhook" => Webhook,
    ScheduleFired = "schedule_fired" => Task,
}

impl EventType {
    /// Stream-only types are published for live subscribers and never stored.
    pub fn is_stream_only(&self) -> bool {
        matches!(self, EventType::AgentTurnProgress)
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EventType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::wire::deserialize_str(d, "an event type", |s| {
            Ok::<_, std::convert::Infallible>(EventType::parse(s))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_type_parses_back_to_itself_and_has_a_category() {
        for t in EventType::KNOWN {
            assert_eq!(&EventType::parse(t.as_str()), t);
            assert!(t.category().is_some(), "{t} has no category");
        }
    }

    #[test]
    fn catalogue_follows_the_seed_table() {
        use Category::*;
        let cases = [
            ("agent_spawned", Lifecycle),
            ("org_stopped", Lifecycle),
            ("task_delegated", Task),
            ("agent_phase_completed", System),
            ("turn.guard_breach", System),
            ("llm_unavailable", System),
            ("message_sent", Communication),
            ("contribution_received", Decision),
            ("document_updated", Knowledge),
            ("notification_skipped", Notification),
            ("skill_synthesized", Learning),
            ("raw_webhook", Webhook),
        ];
        for (wire, cat) in cases {
            assert_eq!(EventType::parse(wire).category(), Some(cat), "{wire}");
        }
    }

    #[test]
    fn only_turn_progress_is_stream_only() {
        let stream_only: Vec<_> = EventType::KNOWN
            .iter()
            .filter(|t| t.is_stream_only())
            .collect();
        assert_eq!(stream_only, vec![&EventType::AgentTurnProgress]);
        assert!(!EventType::Other("x".into()).is_stream_only());
    }

    #[test]
    fn unknown_type_and_category_are_kept_verbatim() {
        let t: EventType =
            serde_json::from_str("\"future.thing\"").unwrap_or(EventType::TaskFailed);
        assert_eq!(t, EventType::Other("future.thing".into()));
        assert_eq!(
            serde_json::to_string(&t).unwrap_or_default(),
            "\"future.thing\""
        );
        let c: Category = serde_json::from_str("\"telemetry\"").unwrap_or(Category::Task);
        assert_eq!(c, Category::Other("telemetry".into()));
        assert_eq!(Category::parse("webhook"), Category::Webhook);
    }
}
