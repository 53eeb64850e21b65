//! The scopes an API token carries (`api.auth.tokens[].scopes`).

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What an API token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The reads: agents, org, tools, events, tokens, budgets.
    Read,
    /// Running work: tasks and budgets (every write that is not `/config`).
    Operate,
    /// The company configuration: `GET`/`PUT /config`, revisions, reverts.
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 3] = [Scope::Read, Scope::Operate, Scope::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Operate => "operate",
            Scope::Admin => "admin",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
