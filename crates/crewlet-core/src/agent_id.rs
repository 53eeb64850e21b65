use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The fixed namespace under which every agent id is derived: the original
/// Crewlet engine's (`c1ea9c6e-3f5d-4c9c-9e9f-1d2c3b4a5e6f`), so a company
/// moved from it keeps its seats' ids, and with them their budgets, diaries
/// and markers. Never change it: agent ids are stored in the database.
pub const AGENT_ID_NAMESPACE: Uuid = Uuid::from_u128(0xc1ea_9c6e_3f5d_4c9c_9e9f_1d2c_3b4a_5e6f);

/// A seat's stable identity: uuid5 of `"{company}:{handle}"` under
/// [`AGENT_ID_NAMESPACE`], identical in every process and after every restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AgentId(Uuid);

impl AgentId {
    /// The id of the seat `handle` in the company named `company`.
    pub fn for_seat(company: &str, handle: &str) -> Self {
        let name = format!("{company}:{handle}");
        Self(Uuid::new_v5(&AGENT_ID_NAMESPACE, name.as_bytes()))
    }

    pub fn from_uuid(id: Uuid) -> Self {
        Self(id)
    }

    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl FromStr for AgentId {
    type Err = uuid::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_company_and_handle_give_the_same_id() {
        assert_eq!(
            AgentId::for_seat("Acme", "eng"),
            AgentId::for_seat("Acme", "eng")
        );
    }

    #[test]
    fn company_and_handle_both_matter() {
        let a = AgentId::for_seat("Acme", "eng");
        assert_ne!(a, AgentId::for_seat("Acme", "pm"));
        assert_ne!(a, AgentId::for_seat("Globex", "eng"));
    }

    #[test]
    fn id_is_uuid_version_5_and_pinned() {
        let id = AgentId::for_seat("Acme", "eng");
        assert_eq!(id.as_uuid().get_version_num(), 5);
        // Pinned so an accidental namespace or format change fails loudly.
        assert_eq!(id.to_string(), "abc7088f-1d7a-5c79-85f7-a7f260c08bcf");
        assert_eq!(id.to_string().parse::<AgentId>().ok(), Some(id));
    }

    /// The original engine's recipe, `uuid5(ns, f"{org_name}:{handle}")`
    /// with its namespace, computed independently (Python's `uuid.uuid5`):
    /// the same seat of the same company has the same id in both engines.
    #[test]
    fn ids_match_the_original_engines_recipe() {
        assert_eq!(
            AGENT_ID_NAMESPACE.to_string(),
            "c1ea9c6e-3f5d-4c9c-9e9f-1d2c3b4a5e6f"
        );
        for (company, handle, expected) in [
            (
                "Nimbus",
                "agent-ceo",
                "0ec3466a-48af-545d-a23a-ef0e47702917",
            ),
            (
                "Minimal Corp",
                "engineer",
                "a4b9bc61-264e-5bf7-8bc6-2c87caf372b7",
            ),
            ("Acme AI", "ceo", "2ceeb519-da94-59de-aaf2-be0042636a9f"),
            // Non-ASCII company names: UTF-8 bytes, as Python encodes them.
            (
                "Ünïcode Co",
                "dev-1",
                "b2a53ff8-754a-549b-a557-e83aeb330470",
            ),
        ] {
            assert_eq!(AgentId::for_seat(company, handle).to_string(), expected);
        }
    }

    #[test]
    fn serializes_as_a_plain_string() {
        let id = AgentId::for_seat("Acme", "eng");
        let json = serde_json::to_string(&id).unwrap_or_default();
        assert_eq!(json, format!("\"{id}\""));
    }
}
