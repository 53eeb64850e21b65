use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The fixed namespace under which every agent id is derived. Never change it:
/// agent ids are stored in the database and must stay stable across releases.
pub const AGENT_ID_NAMESPACE: Uuid = Uuid::from_u128(0x6f1c_2a4e_9b3d_5c7a_8e21_0d4f_3a6b_9c12);

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
        assert_eq!(id.to_string(), "58e6e698-e622-5fa5-80cf-642f762b2c03");
        assert_eq!(id.to_string().parse::<AgentId>().ok(), Some(id));
    }

    #[test]
    fn serializes_as_a_plain_string() {
        let id = AgentId::for_seat("Acme", "eng");
        let json = serde_json::to_string(&id).unwrap_or_default();
        assert_eq!(json, format!("\"{id}\""));
    }
}
