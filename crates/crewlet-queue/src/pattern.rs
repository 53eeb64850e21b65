use crate::QueueError;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Literal(String),
    /// `*`: exactly one segment.
    One,
    /// `>`: one or more trailing segments.
    Rest,
}

/// A stream pattern over dot-separated topics: `*` matches one segment, `>`
/// (last only) matches one or more remaining segments; anything else matches
/// itself. `crewlet.agent.*.inbox`, `crewlet.events.>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicPattern {
    source: String,
    tokens: Vec<Token>,
}

impl TopicPattern {
    pub fn parse(pattern: &str) -> Result<Self, QueueError> {
        let bad = |reason| {
            Err(QueueError::InvalidPattern {
                pattern: pattern.to_owned(),
                reason,
            })
        };
        if pattern.is_empty() {
            return bad("pattern is empty");
        }
        let segments: Vec<&str> = pattern.split('.').collect();
        let mut tokens = Vec::with_capacity(segments.len());
        for (i, seg) in segments.iter().enumerate() {
            let token = match *seg {
                "" => return bad("empty segment (leading, trailing or doubled `.`)"),
                "*" => Token::One,
                ">" if i + 1 == segments.len() => Token::Rest,
                ">" => return bad("`>` is only allowed as the last segment"),
                s if s.contains(['*', '>']) => {
                    return bad("`*` and `>` must be whole segments");
                }
                s if crate::topics::validate_topic(s).is_err() => {
                    return bad("only letters, digits and `_ - = :` are allowed in a segment");
                }
                s => Token::Literal(s.to_owned()),
            };
            tokens.push(token);
        }
        Ok(Self {
            source: pattern.to_owned(),
            tokens,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the pattern has no wildcard (it names one topic).
    pub fn is_exact(&self) -> bool {
        self.tokens.iter().all(|t| matches!(t, Token::Literal(_)))
    }

    pub fn matches(&self, topic: &str) -> bool {
        let mut segments = topic.split('.');
        for token in &self.tokens {
            match token {
                Token::Rest => return segments.next().is_some_and(|s| !s.is_empty()),
                Token::One => match segments.next() {
                    Some(s) if !s.is_empty() => {}
                    _ => return false,
                },
                Token::Literal(lit) => match segments.next() {
                    Some(s) if s == lit => {}
                    _ => return false,
                },
            }
        }
        segments.next().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, t: &str) -> bool {
        TopicPattern::parse(p)
            .map(|p| p.matches(t))
            .unwrap_or(false)
    }

    #[test]
    fn star_matches_exactly_one_segment() {
        assert!(m("crewlet.agent.*.inbox", "crewlet.agent.eng.inbox"));
        assert!(!m("crewlet.agent.*.inbox", "crewlet.agent.eng.x.inbox"));
        assert!(!m("crewlet.agent.*.inbox", "crewlet.agent.eng.control"));
        assert!(!m("crewlet.*", "crewlet"));
        assert!(m("*", "crewlet"));
    }

    #[test]
    fn rest_matches_one_or_more_trailing_segments() {
        assert!(m("crewlet.events.>", "crewlet.events.task_started"));
        assert!(m("crewlet.events.>", "crewlet.events.turn.guard_breach"));
        assert!(!m("crewlet.events.>", "crewlet.events"));
        assert!(!m("crewlet.events.>", "crewlet.eventsx.a"));
        assert!(m(">", "a.b.c"));
    }

    #[test]
    fn literal_patterns_match_only_their_topic() {
        assert!(m("crewlet.a", "crewlet.a"));
        assert!(!m("crewlet.a", "crewlet.a.b"));
        assert!(!m("crewlet.a.b", "crewlet.a"));
        assert!(
            TopicPattern::parse("crewlet.a")
                .map(|p| p.is_exact())
                .unwrap_or(false)
        );
    }

    #[test]
    fn malformed_patterns_are_refused() {
        for p in ["", "a..b", "a.>.b", "a.b*", "a.>x", ".a", "a b"] {
            let err = TopicPattern::parse(p)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(&format!("`{p}`")), "{p}: {err}");
        }
    }
}
