//! The scopes an API token carries (`api.auth.tokens[].scopes`).

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What an API token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The reads, metadata only: seats, states, counts, event types,
    /// timings, token figures, ids. Content fields are left out.
    Read,
    /// The reads with their content: prompts, responses, tool arguments and
    /// results, memory, task and trigger text, findings, questions. Includes
    /// `read`.
    #[serde(rename = "read:content")]
    ReadContent,
    /// Running work: tasks and budgets (every write that is not `/config`).
    /// Includes `read:content`.
    Operate,
    /// The company configuration: `GET`/`PUT /config`, revisions, reverts.
    /// Includes `operate`.
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 4] = [
        Scope::Read,
        Scope::ReadContent,
        Scope::Operate,
        Scope::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::ReadContent => "read:content",
            Scope::Operate => "operate",
            Scope::Admin => "admin",
        }
    }

    /// Whether holding `self` grants `other`: scopes nest, `admin` ⊇
    /// `operate` ⊇ `read:content` ⊇ `read`.
    pub fn includes(self, other: Scope) -> bool {
        self.rank() >= other.rank()
    }

    fn rank(self) -> u8 {
        match self {
            Scope::Read => 0,
            Scope::ReadContent => 1,
            Scope::Operate => 2,
            Scope::Admin => 3,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
