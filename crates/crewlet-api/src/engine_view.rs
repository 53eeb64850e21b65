//! [`EngineView`]: how the API sees the running company without depending on
//! the engine. The engine implements it when the API is embedded in its
//! process; the standalone API uses [`StaticEngineView`], built from the
//! active company revision's organization.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use crewlet_config::{Company, Organization, Seat, SeatKind};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Where a seat's runtime is (`docs/engine.md`, "Seat runtime": Created -> Idle -> Working -> Idle | Terminated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentState {
    Created,
    Idle,
    Working,
    /// A token budget the seat spends from is spent: its tasks wait in its
    /// inbox until an operator raises the cap or resets the budget, or the
    /// budget's period starts over.
    Paused,
    /// Its turn waits for a coding agent working in a sandbox
    /// (`run_sandbox`); its tasks wait in its inbox until the turn goes on.
    AwaitingSandbox,
    Terminated,
}

/// The turn a seat is running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CurrentTask {
    pub task_id: String,
    /// The task's text, shortened; content, left out for a caller without
    /// `read:content`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
    pub started_at: DateTime<Utc>,
    /// `plan`, `execute` or `review`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// Where a seat may run in a fleet: the role's `placement` (empty: any
/// node that runs seats).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Placement {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<std::collections::BTreeMap<String, String>>,
}

/// One seat as the API shows it: the original engine's fields (`id`,
/// `name`, `role`, `goal`, `handle`, `token_budget`, `placement`), then ours.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AgentView {
    /// The agent id: uuid5 of `"{company}:{handle}"`.
    pub id: String,
    pub handle: String,
    pub name: String,
    /// The seat's name again (the original engine's `role`).
    #[serde(default)]
    pub role: String,
    /// What the seat is for; empty when the company does not say.
    #[serde(default)]
    pub goal: String,
    /// The seat's lifetime token cap; 0 = unlimited.
    #[serde(default)]
    pub token_budget: u64,
    #[serde(default)]
    pub placement: Placement,
    /// `agent` or `human`.
    pub kind: String,
    /// Unit names from the top down; empty for org-wide roles.
    pub unit_path: Vec<String>,
    pub manager: Option<String>,
    pub reports: Vec<String>,
    /// Live state; `null` when the API runs outside the engine process.
    pub state: Option<AgentState>,
    /// The running turn, when the seat is working.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_task: Option<CurrentTask>,
}

impl AgentView {
    /// The seat as written in the company, with no live state.
    pub fn from_seat(seat: &Seat) -> Self {
        Self {
            id: seat.agent_id.to_string(),
            handle: seat.handle.clone(),
            name: seat.name.clone(),
            role: seat.name.clone(),
            goal: seat.role.goal.clone().unwrap_or_default(),
            token_budget: seat.role.token_budget,
            placement: seat
                .role
                .placement
                .as_deref()
                .map(|p| Placement {
                    node: Some(p.node.clone()).filter(|n| !n.is_empty()),
                    labels: Some(
                        p.labels
                            .iter()
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect(),
                    )
                    .filter(|l: &std::collections::BTreeMap<String, String>| !l.is_empty()),
                })
                .unwrap_or_default(),
            kind: match seat.kind {
                SeatKind::Agent => "agent".into(),
                SeatKind::Human => "human".into(),
            },
            unit_path: seat.unit_path.clone(),
            manager: seat.manager.clone(),
            reports: seat.reports.clone(),
            state: None,
            current_task: None,
        }
    }
}

/// MCP-style hints about a tool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ToolAnnotations {
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub destructive: bool,
    #[serde(default)]
    pub idempotent: bool,
    #[serde(default)]
    pub open_world: bool,
}

/// A tool a seat can call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolView {
    pub name: String,
    pub description: String,
    /// `builtin`, or the MCP server's name.
    pub provider: String,
    #[serde(default)]
    pub annotations: ToolAnnotations,
    /// JSON Schema of the arguments.
    #[schema(value_type = Object)]
    pub input_schema: serde_json::Value,
}

/// A stored company revision as an engine runs it.
#[derive(Clone)]
pub struct RunningCompany {
    pub revision_id: i64,
    pub company: Arc<Company>,
    pub org: Arc<Organization>,
}

/// The engine's live state, read by the API. Implemented by the engine when
/// the API runs inside its process. Every method is a cheap snapshot: the API
/// calls them per request.
pub trait EngineView: Send + Sync + 'static {
    /// Every seat, with live state.
    fn agents(&self) -> Vec<AgentView>;

    /// One seat, by agent id or handle.
    fn agent(&self, id_or_handle: &str) -> Option<AgentView> {
        self.agents()
            .into_iter()
            .find(|a| a.id == id_or_handle || a.handle == id_or_handle)
    }

    /// Tools of one seat (`Some(handle)`), or of every seat.
    fn tools(&self, handle: Option<&str>) -> Vec<ToolView>;

    /// Whether the engine runs a company and takes work.
    fn is_ready(&self) -> bool;

    /// Whether the engine is shutting down.
    fn is_draining(&self) -> bool;

    /// The organization the engine runs.
    fn organization(&self) -> Option<Arc<Organization>>;

    /// The company revision the engine runs, when it knows.
    fn revision_id(&self) -> Option<i64> {
        None
    }

    /// The stored revision the engine runs with its parsed company and
    /// organization, so an API in the same process shares them instead of
    /// holding a second copy (about 3 KiB per seat).
    fn running(&self) -> Option<RunningCompany> {
        None
    }

    /// Whether `agents()` reports live state (false for [`StaticEngineView`]).
    fn is_live(&self) -> bool {
        true
    }

    /// Called after the API stored and activated a company revision
    /// (`PUT /config`, revert), so the engine can reload without polling.
    fn config_activated(&self, _revision_id: i64) {}
}

/// The organization as written, without live state: the standalone API's view.
#[derive(Debug, Clone, Default)]
pub struct StaticEngineView {
    organization: Option<Arc<Organization>>,
    revision_id: Option<i64>,
}

impl StaticEngineView {
    pub fn new(organization: Option<Arc<Organization>>, revision_id: Option<i64>) -> Self {
        Self {
            organization,
            revision_id,
        }
    }
}

impl EngineView for StaticEngineView {
    fn agents(&self) -> Vec<AgentView> {
        self.organization
            .as_ref()
            .map(|org| {
                org.seats()
                    .iter()
                    .map(|s| AgentView::from_seat(s))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn agent(&self, id_or_handle: &str) -> Option<AgentView> {
        let org = self.organization.as_ref()?;
        org.seat(id_or_handle)
            .or_else(|| {
                org.seats()
                    .iter()
                    .find(|s| s.agent_id.to_string() == id_or_handle)
            })
            .map(|s| AgentView::from_seat(s))
    }

    fn tools(&self, _handle: Option<&str>) -> Vec<ToolView> {
        Vec::new()
    }

    fn is_ready(&self) -> bool {
        self.organization.is_some()
    }

    fn is_draining(&self) -> bool {
        false
    }

    fn organization(&self) -> Option<Arc<Organization>> {
        self.organization.clone()
    }

    fn revision_id(&self) -> Option<i64> {
        self.revision_id
    }

    fn is_live(&self) -> bool {
        false
    }
}
