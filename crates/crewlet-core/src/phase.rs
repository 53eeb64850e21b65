//! The phases of a turn, plus the auxiliary calls of learning workers: the
//! one definition the configuration (per-phase model choice), the model
//! registry (per-phase resolution) and the turn engine share.

use std::fmt;

/// A phase of a turn, plus the auxiliary calls of learning workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    Plan,
    Execute,
    Review,
    /// Cheap side work: filtering diary entries, post-turn reflection.
    Auxiliary,
}

impl Phase {
    pub const ALL: [Phase; 4] = [Phase::Plan, Phase::Execute, Phase::Review, Phase::Auxiliary];

    /// The wire name: `plan`, `execute`, `review`, `auxiliary`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Plan => "plan",
            Phase::Execute => "execute",
            Phase::Review => "review",
            Phase::Auxiliary => "auxiliary",
        }
    }

    /// The phase with wire name `s`; `None` for anything else.
    pub fn parse(s: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_have_wire_names() {
        for p in Phase::ALL {
            assert_eq!(Phase::parse(p.as_str()), Some(p));
            assert_eq!(p.to_string(), p.as_str());
        }
        assert_eq!(Phase::parse("dream"), None);
    }
}
