//! A unit of the org chart: a department, team, squad, ...

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::integrations::UnitIntegrations;
use super::role::Role;
use super::schedule::Schedule;

/// A unit: a group of seats with a lead, nesting to any depth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Unit {
    /// Unit name, unique in the company; `manages` may refer to it.
    #[schemars(length(min = 1))]
    pub name: String,
    /// What kind of unit this is (`division`, `department`, `team`, ...);
    /// informational.
    #[serde(rename = "type", default = "default_unit_type")]
    pub kind: String,
    /// Why the unit exists; shown to its seats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// The role (by name, or handle) that leads the unit: one of its own
    /// roles, a role of a sub-unit, or a role elsewhere (an org-wide role, a
    /// parent unit's). Unset or empty: the parent unit's lead. The lead
    /// manages the unit's own roles that no role of the unit manages, and
    /// receives the unit's unrouted notifications. A lead that names no role
    /// is a warning (the unit then has no lead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lead: Option<String>,
    /// Tokens the unit's seats (and its sub-units' seats) may spend
    /// together, counted like the company's; 0 = unlimited.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub token_budget: u64,
    /// What the unit is working towards.
    #[serde(default)]
    pub goals: Vec<String>,
    /// The unit's Slack channel id: messages there that address no seat go to
    /// the unit's lead. Sub-units without one share it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack_channel: Option<String>,
    /// Free-text references to the unit's knowledge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "the knowledge system is not built yet"))]
    pub knowledge: Option<Vec<String>>,
    /// The unit's own seats.
    #[serde(default)]
    pub roles: Vec<Role>,
    /// Sub-units.
    #[serde(default)]
    pub children: Vec<Unit>,
    /// Recurring work for the unit, sent to its lead or to each agent seat.
    #[serde(default)]
    pub schedules: Vec<Schedule>,
    /// What the unit owns on outside systems, for routing: the original's
    /// `jira.project`, `confluence.space`, `plane.project`, and Crewlet's
    /// lists (`github_repositories`, `slack_channels`, ...).
    #[serde(default)]
    pub integrations: UnitIntegrations,
    /// MCP credentials per server (`mcp_env.<server>.<NAME>`) for every
    /// agent seat among the unit's own `roles` (not those of sub-units); a
    /// role's own value wins, name by name.
    #[serde(default)]
    pub mcp_env: IndexMap<String, IndexMap<String, String>>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn default_unit_type() -> String {
    "team".into()
}

impl Unit {
    /// The lead as written, `None` when unset or empty.
    pub fn explicit_lead(&self) -> Option<&str> {
        self.lead.as_deref().filter(|l| !l.trim().is_empty())
    }
}
