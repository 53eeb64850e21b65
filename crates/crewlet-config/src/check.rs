//! The validation pipeline shared by both tiers: parse the YAML into a
//! located tree, walk it against the tier's JSON Schema, deserialize what is
//! left, and turn findings of meaning into located [`Problem`]s.

use serde::de::DeserializeOwned;

use crate::error::Problem;
use crate::schema::Tier;
use crate::schema_check::Walk;
use crate::yaml::{self, Loc, Locator, Node, NodeKind, YamlPath};

/// A problem of meaning, found on typed values: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    pub path: YamlPath,
    pub message: String,
    /// A warning: the file is accepted, but something in it may not do what
    /// its author meant (or does nothing yet).
    pub warning: bool,
}

impl Finding {
    pub fn new(path: YamlPath, message: impl Into<String>) -> Self {
        Self {
            path,
            message: message.into(),
            warning: false,
        }
    }

    pub fn warning(path: YamlPath, message: impl Into<String>) -> Self {
        Self {
            path,
            message: message.into(),
            warning: true,
        }
    }
}

/// What the structural pass produced.
pub(crate) struct Structural<T> {
    /// The located tree; `None` when the text is not YAML.
    pub tree: Option<Node>,
    /// The typed value: present when the document could be deserialized
    /// after leaving out the nodes with problems.
    pub value: Option<T>,
    pub problems: Vec<Problem>,
}

pub(crate) fn structural<T: DeserializeOwned>(
    source: &str,
    text: &str,
    tier: Tier,
) -> Structural<T> {
    structural_parsed(source, yaml::parse(text), tier)
}

/// As [`structural`] for text already read into a located tree.
pub(crate) fn structural_parsed<T: DeserializeOwned>(
    source: &str,
    parsed: yaml::Parsed,
    tier: Tier,
) -> Structural<T> {
    let mut problems: Vec<Problem> = parsed
        .problems
        .into_iter()
        .map(|p| Problem::new(source, &p.path, Some(p.loc), p.message))
        .collect();
    let tree = match parsed.root {
        Some(root) => root,
        // An empty document is an empty map: the schema then names what is required.
        None if problems.is_empty() => Node {
            kind: NodeKind::Map(Vec::new()),
            loc: Loc { line: 1, column: 1 },
        },
        None => {
            return Structural {
                tree: None,
                value: None,
                problems,
            };
        }
    };
    let mut walk = Walk::new(tier.schema());
    let json = walk.run(&tree);
    problems.extend(
        walk.problems
            .into_iter()
            .map(|p| Problem::new(source, &p.path, Some(p.loc), p.message)),
    );
    let value = json.and_then(|json| match serde_json::from_value::<T>(json) {
        Ok(v) => Some(v),
        Err(e) => {
            // The schema and the types come from the same definitions, so this
            // only happens when an earlier problem removed a required value.
            // Located at the document, so that it still has a line.
            if problems.is_empty() {
                problems.push(Problem::new(
                    source,
                    &YamlPath::root(),
                    Some(tree.loc),
                    e.to_string(),
                ));
            }
            None
        }
    });
    sort(&mut problems);
    Structural {
        tree: Some(tree),
        value,
        problems,
    }
}

/// Findings as problems, located in `tree` when it has the path.
pub(crate) fn locate(source: &str, tree: Option<&Node>, findings: Vec<Finding>) -> Vec<Problem> {
    let mut locator = tree.map(Locator::new);
    let mut problems: Vec<Problem> = findings
        .into_iter()
        .map(|f| {
            let loc = locator.as_mut().map(|l| l.locate(&f.path));
            Problem::new(source, &f.path, loc, f.message)
        })
        .collect();
    sort(&mut problems);
    problems
}

/// File order: by line and column, unlocated problems last, ties kept in
/// the order found.
pub(crate) fn sort(problems: &mut [Problem]) {
    problems.sort_by_key(|p| (p.line.is_none(), p.line, p.column));
}
