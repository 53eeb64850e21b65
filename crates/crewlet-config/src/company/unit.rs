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
    /// The role (handle or name, among this unit's own `roles`) that leads the
    /// unit. Unset: the parent unit's lead. The lead manages every seat of the
    /// unit that nobody `manages`, and receives the unit's unrouted notifications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lead: Option<String>,
    /// What the unit is working towards.
    #[serde(default)]
    pub goals: Vec<String>,
    /// The unit's own seats.
    #[serde(default)]
    pub roles: Vec<Role>,
    /// Sub-units.
    #[serde(default)]
    pub children: Vec<Unit>,
    /// Recurring work for the unit, sent to its lead or to each agent seat.
    #[serde(default)]
    pub schedules: Vec<Schedule>,
    /// What the unit owns on outside systems, for routing.
    #[serde(default)]
    pub integrations: UnitIntegrations,
    /// Credentials for `per_role` MCP servers shared by every seat of the unit
    /// and its sub-units; a role's own `mcp_env` wins.
    #[serde(default)]
    pub mcp_env: IndexMap<String, String>,
}

fn default_unit_type() -> String {
    "team".into()
}
