//! The located tree itself: nodes that remember their line and column, and
//! the [`Locator`] that maps many [`YamlPath`]s back to positions.

use std::collections::HashMap;

use serde_saphyr::granit_parser::Span;

use super::path::{Seg, YamlPath};

/// A 1-based line and column in the source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Loc {
    pub line: u32,
    pub column: u32,
}

impl Loc {
    pub(super) fn of(span: &Span) -> Self {
        Self {
            line: u32::try_from(span.start.line()).unwrap_or(u32::MAX),
            column: u32::try_from(span.start.col() + 1).unwrap_or(u32::MAX),
        }
    }
}

/// A scalar as written: its text and whether it was plain (unquoted, so
/// `true`, `12` or `null` may mean a bool, a number or nothing).
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar {
    pub text: String,
    pub plain: bool,
}

impl Scalar {
    /// A plain `null`, `~` or empty value.
    pub fn is_null(&self) -> bool {
        self.plain && matches!(self.text.as_str(), "" | "~" | "null" | "Null" | "NULL")
    }
}

/// One `key: value` pair of a mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: String,
    pub key_loc: Loc,
    pub value: Node,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    Scalar(Scalar),
    Seq(Vec<Node>),
    Map(Vec<Entry>),
}

/// A YAML node and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub kind: NodeKind,
    pub loc: Loc,
}

impl Node {
    /// The value of `key` when this is a mapping.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.entry(key).map(|e| &e.value)
    }

    pub fn entry(&self, key: &str) -> Option<&Entry> {
        match &self.kind {
            NodeKind::Map(entries) => entries.iter().find(|e| e.key == key),
            _ => None,
        }
    }

    /// Where the key ending `path` is written (for a path ending in an
    /// index, where the item starts); `None` when the document lacks it.
    pub fn key_loc(&self, path: &YamlPath) -> Option<Loc> {
        let mut node = self;
        let last = path.0.len().checked_sub(1)?;
        for (i, seg) in path.0.iter().enumerate() {
            match (seg, &node.kind) {
                (Seg::Key(k), NodeKind::Map(_)) => {
                    let entry = node.entry(k)?;
                    if i == last {
                        return Some(entry.key_loc);
                    }
                    node = &entry.value;
                }
                (Seg::Index(n), NodeKind::Seq(items)) => {
                    node = items.get(*n)?;
                    if i == last {
                        return Some(node.loc);
                    }
                }
                _ => return None,
            }
        }
        None
    }

    /// The node at `path`, if the document has it.
    #[cfg(test)]
    pub fn at(&self, path: &YamlPath) -> Option<&Node> {
        let mut node = self;
        for seg in &path.0 {
            node = match (seg, &node.kind) {
                (Seg::Key(k), NodeKind::Map(_)) => node.get(k)?,
                (Seg::Index(i), NodeKind::Seq(items)) => items.get(*i)?,
                _ => return None,
            };
        }
        Some(node)
    }

    /// The position of the deepest node along `path` that exists: the value
    /// itself when the document has it, otherwise its nearest ancestor.
    /// (Checks use a [`Locator`], which is quick for many paths.)
    #[cfg(test)]
    pub fn locate(&self, path: &YamlPath) -> Loc {
        Locator::new(self).locate(path)
    }

    /// A short description for messages: `a map`, `a list`, or the scalar.
    pub fn describe(&self) -> String {
        match &self.kind {
            NodeKind::Map(_) => "a map".into(),
            NodeKind::Seq(_) => "a list".into(),
            NodeKind::Scalar(s) if s.is_null() => "nothing (null)".into(),
            NodeKind::Scalar(s) => {
                let mut shown: String = s.text.chars().take(40).collect();
                if shown.len() < s.text.len() {
                    shown.push('…');
                }
                format!("`{shown}`")
            }
        }
    }

    pub(super) fn size(&self) -> usize {
        match &self.kind {
            NodeKind::Scalar(_) => 1,
            NodeKind::Seq(items) => 1 + items.iter().map(Node::size).sum::<usize>(),
            NodeKind::Map(entries) => 1 + entries.iter().map(|e| 1 + e.value.size()).sum::<usize>(),
        }
    }
}

/// Maps with more keys than this are indexed by a [`Locator`]; smaller ones
/// are searched in place.
const SMALL_MAP: usize = 16;

/// Finds the positions of many paths in one tree. A map with many keys is
/// indexed the first time a path goes through it, so locating n problems in
/// a map of n keys costs n steps, not n².
pub struct Locator<'t> {
    root: &'t Node,
    maps: HashMap<*const Node, HashMap<&'t str, &'t Node>>,
}

impl<'t> Locator<'t> {
    pub fn new(root: &'t Node) -> Self {
        Self {
            root,
            maps: HashMap::new(),
        }
    }

    /// As [`Node::locate`] on the root.
    pub fn locate(&mut self, path: &YamlPath) -> Loc {
        let mut node = self.root;
        for seg in &path.0 {
            let next = match (seg, &node.kind) {
                (Seg::Key(k), NodeKind::Map(entries)) if entries.len() > SMALL_MAP => self
                    .maps
                    .entry(std::ptr::from_ref(node))
                    .or_insert_with(|| entries.iter().map(|e| (e.key.as_str(), &e.value)).collect())
                    .get(k.as_str())
                    .copied(),
                (Seg::Key(k), NodeKind::Map(_)) => node.get(k),
                (Seg::Index(i), NodeKind::Seq(items)) => items.get(*i),
                _ => None,
            };
            match next {
                Some(n) => node = n,
                None => break,
            }
        }
        node.loc
    }
}
