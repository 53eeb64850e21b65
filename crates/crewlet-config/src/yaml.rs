//! A YAML document as a tree of nodes that remember where they are.
//!
//! serde stops at the first error and forgets positions, so the configuration
//! checks work on this tree instead: it is built from the events of
//! serde-saphyr's own parser (`granit_parser`), keeps the line and column of
//! every key and value, resolves anchors, aliases and `<<` merge keys, and
//! reports duplicate keys. A [`YamlPath`] such as `units[0].roles[2].handle`
//! finds its way back to a line through [`Node::locate`].

use std::collections::HashMap;
use std::fmt;

use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle, Span};

/// A 1-based line and column in the source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Loc {
    pub line: u32,
    pub column: u32,
}

impl Loc {
    fn of(span: &Span) -> Self {
        Self {
            line: u32::try_from(span.start.line()).unwrap_or(u32::MAX),
            column: u32::try_from(span.start.col() + 1).unwrap_or(u32::MAX),
        }
    }
}

/// One step of a [`YamlPath`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// Where a node sits in a document, e.g. `units[0].roles[2].handle`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct YamlPath(pub Vec<Seg>);

impl YamlPath {
    pub fn root() -> Self {
        Self(Vec::new())
    }

    /// A path extended by a key.
    pub fn key(&self, key: &str) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Key(key.to_owned()));
        p
    }

    /// A path extended by a list index.
    pub fn index(&self, i: usize) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Index(i));
        p
    }

    /// Parses the dotted form produced by `Display` (`a.b[2].c`); keys that
    /// needed quoting are not supported and yield `None`.
    pub fn parse(text: &str) -> Option<Self> {
        let mut segs = Vec::new();
        for part in text.split('.').filter(|p| !p.is_empty()) {
            let (key, mut rest) = match part.find('[') {
                Some(i) => (&part[..i], &part[i..]),
                None => (part, ""),
            };
            if !key.is_empty() {
                segs.push(Seg::Key(key.to_owned()));
            }
            while let Some(stripped) = rest.strip_prefix('[') {
                let end = stripped.find(']')?;
                segs.push(Seg::Index(stripped[..end].parse().ok()?));
                rest = &stripped[end + 1..];
            }
            if !rest.is_empty() {
                return None;
            }
        }
        Some(Self(segs))
    }
}

fn plain_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl fmt::Display for YamlPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Key(k) if plain_key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Seg::Key(k) => {
                    let quoted = serde_json::to_string(k).unwrap_or_else(|_| format!("\"{k}\""));
                    write!(f, "[{quoted}]")?;
                }
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
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

    fn size(&self) -> usize {
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

/// A problem found while building the tree, before any schema is involved.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeProblem {
    pub path: YamlPath,
    pub loc: Loc,
    pub message: String,
}

/// The result of reading a document: the tree (absent when the text is not
/// YAML at all or is empty) and the problems found on the way.
#[derive(Debug, Default)]
pub struct Parsed {
    pub root: Option<Node>,
    pub problems: Vec<TreeProblem>,
}

/// Alias expansion cap: a config file has hundreds of nodes, not millions, and
/// this keeps "billion laughs" documents from exhausting memory.
const MAX_NODES: usize = 250_000;

enum Frame {
    Seq {
        items: Vec<Node>,
        loc: Loc,
        anchor: usize,
        path: YamlPath,
    },
    Map {
        entries: Vec<Entry>,
        loc: Loc,
        anchor: usize,
        path: YamlPath,
        key: Option<(String, Loc)>,
        merges: Vec<(Node, Loc)>,
        /// Position in `entries` of each key, so duplicates are found in
        /// constant time however many keys the map has.
        index: HashMap<String, usize>,
    },
}

struct Builder {
    stack: Vec<Frame>,
    anchors: HashMap<usize, Node>,
    root: Option<Node>,
    problems: Vec<TreeProblem>,
    nodes: usize,
}

impl Builder {
    /// The path of the node about to be added to the innermost collection.
    fn next_path(&self) -> YamlPath {
        match self.stack.last() {
            None => YamlPath::root(),
            Some(Frame::Seq { items, path, .. }) => path.index(items.len()),
            Some(Frame::Map {
                key: Some((k, _)),
                path,
                ..
            }) => path.key(k),
            Some(Frame::Map { path, .. }) => path.clone(),
        }
    }

    fn problem(&mut self, path: YamlPath, loc: Loc, message: String) {
        self.problems.push(TreeProblem { path, loc, message });
    }

    /// Adds a finished node to the innermost collection. `weight` is how many
    /// new nodes it brings: 1, or the whole copied tree for an alias.
    fn add(&mut self, node: Node, anchor: usize, weight: usize) -> Result<(), ()> {
        self.nodes += weight;
        if self.nodes > MAX_NODES {
            self.problem(
                YamlPath::root(),
                node.loc,
                format!("the document expands to more than {MAX_NODES} nodes (aliases?)"),
            );
            return Err(());
        }
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        let Some(frame) = self.stack.last_mut() else {
            self.root = Some(node);
            return Ok(());
        };
        match frame {
            Frame::Seq { items, .. } => items.push(node),
            Frame::Map {
                key: slot @ None,
                path,
                ..
            } => match node.kind {
                NodeKind::Scalar(s) => *slot = Some((s.text, node.loc)),
                _ => {
                    let path = path.clone();
                    *slot = Some(("<complex key>".into(), node.loc));
                    self.problem(path, node.loc, "mapping keys must be plain values".into());
                }
            },
            Frame::Map {
                key: slot @ Some(_),
                entries,
                merges,
                path,
                index,
                ..
            } => {
                let Some((key, key_loc)) = slot.take() else {
                    return Ok(());
                };
                if key == "<<" {
                    merges.push((node, key_loc));
                } else if let Some(first) = index.get(&key).and_then(|&i| entries.get(i)) {
                    let message = format!(
                        "duplicate key `{key}` (first defined at line {})",
                        first.key_loc.line
                    );
                    let path = path.key(&key);
                    self.problem(path, key_loc, message);
                } else {
                    index.insert(key.clone(), entries.len());
                    entries.push(Entry {
                        key,
                        key_loc,
                        value: node,
                    });
                }
            }
        }
        Ok(())
    }

    fn end_map(&mut self, frame: Frame) -> Result<(), ()> {
        let Frame::Map {
            mut entries,
            loc,
            anchor,
            path,
            merges,
            mut index,
            ..
        } = frame
        else {
            return Ok(());
        };
        // `<<: *base` or `<<: [*a, *b]`: keys written in the mapping win, then
        // earlier merge sources over later ones.
        for (source, key_loc) in merges {
            let sources = match source.kind {
                NodeKind::Seq(items) => items,
                _ => vec![source],
            };
            for src in sources {
                match src.kind {
                    NodeKind::Map(merged) => {
                        for e in merged {
                            if !index.contains_key(&e.key) {
                                index.insert(e.key.clone(), entries.len());
                                entries.push(e);
                            }
                        }
                    }
                    _ => self.problem(
                        path.key("<<"),
                        key_loc,
                        "a `<<` merge key needs a map or a list of maps".into(),
                    ),
                }
            }
        }
        self.add(
            Node {
                kind: NodeKind::Map(entries),
                loc,
            },
            anchor,
            1,
        )
    }
}

/// Reads one YAML document into a [`Node`] tree.
pub fn parse(text: &str) -> Parsed {
    let mut b = Builder {
        stack: Vec::new(),
        anchors: HashMap::new(),
        root: None,
        problems: Vec::new(),
        nodes: 0,
    };
    let mut documents = 0;
    for item in Parser::new_from_str(text) {
        let (event, span) = match item {
            Ok(ev) => ev,
            Err(e) => {
                let loc = Loc {
                    line: u32::try_from(e.marker().line()).unwrap_or(u32::MAX),
                    column: u32::try_from(e.marker().col() + 1).unwrap_or(u32::MAX),
                };
                let path = b.next_path();
                b.problem(path, loc, format!("invalid YAML: {}", e.info()));
                return Parsed {
                    root: None,
                    problems: b.problems,
                };
            }
        };
        let loc = Loc::of(&span);
        let step = match event {
            Event::DocumentStart(..) => {
                documents += 1;
                if documents > 1 {
                    b.problem(
                        YamlPath::root(),
                        loc,
                        "only one YAML document is allowed per file".into(),
                    );
                    break;
                }
                Ok(())
            }
            Event::Scalar(text, style, anchor, tag) => {
                let is_str_tag = tag
                    .as_ref()
                    .is_some_and(|t| t.is_yaml_core_schema_tag("str"));
                let plain = style == ScalarStyle::Plain && !is_str_tag;
                let node = Node {
                    kind: NodeKind::Scalar(Scalar {
                        text: text.into_owned(),
                        plain,
                    }),
                    loc,
                };
                b.add(node, anchor, 1)
            }
            Event::Alias(id) => match b.anchors.get(&id).cloned() {
                Some(node) => {
                    let weight = node.size();
                    b.add(node, 0, weight)
                }
                None => {
                    let path = b.next_path();
                    b.problem(path, loc, "alias to an unknown anchor".into());
                    Err(())
                }
            },
            Event::SequenceStart(_, anchor, _) => {
                let path = b.next_path();
                b.stack.push(Frame::Seq {
                    items: Vec::new(),
                    loc,
                    anchor,
                    path,
                });
                Ok(())
            }
            Event::MappingStart(_, anchor, _) => {
                let path = b.next_path();
                b.stack.push(Frame::Map {
                    entries: Vec::new(),
                    loc,
                    anchor,
                    path,
                    key: None,
                    merges: Vec::new(),
                    index: HashMap::new(),
                });
                Ok(())
            }
            Event::SequenceEnd => match b.stack.pop() {
                Some(Frame::Seq {
                    items, loc, anchor, ..
                }) => b.add(
                    Node {
                        kind: NodeKind::Seq(items),
                        loc,
                    },
                    anchor,
                    1,
                ),
                _ => Err(()),
            },
            Event::MappingEnd => match b.stack.pop() {
                Some(frame @ Frame::Map { .. }) => b.end_map(frame),
                _ => Err(()),
            },
            _ => Ok(()),
        };
        if step.is_err() {
            return Parsed {
                root: None,
                problems: b.problems,
            };
        }
    }
    Parsed {
        root: b.root,
        problems: b.problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(text: &str) -> Node {
        let parsed = parse(text);
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        parsed.root.unwrap_or(Node {
            kind: NodeKind::Scalar(Scalar {
                text: String::new(),
                plain: true,
            }),
            loc: Loc { line: 0, column: 0 },
        })
    }

    #[test]
    fn paths_display_and_parse_back() {
        let p = YamlPath::root()
            .key("units")
            .index(0)
            .key("roles")
            .index(2)
            .key("handle");
        assert_eq!(p.to_string(), "units[0].roles[2].handle");
        assert_eq!(YamlPath::parse("units[0].roles[2].handle"), Some(p));
        assert_eq!(
            YamlPath::root().key("llm").key("gpt 4").to_string(),
            "llm[\"gpt 4\"]"
        );
        assert_eq!(YamlPath::parse(""), Some(YamlPath::root()));
    }

    #[test]
    fn nodes_know_their_lines_and_columns() {
        let root = tree("name: Acme\nunits:\n  - name: Eng\n    roles:\n      - name: CTO\n");
        let p = YamlPath::parse("units[0].roles[0].name").unwrap_or_default();
        assert_eq!(
            root.locate(&p),
            Loc {
                line: 5,
                column: 15
            }
        );
        // A path that goes past the document stops at the deepest node.
        let missing = YamlPath::parse("units[0].roles[0].handle").unwrap_or_default();
        assert_eq!(root.locate(&missing).line, 5);
    }

    #[test]
    fn scalars_remember_whether_they_were_quoted() {
        let root = tree("a: 12\nb: '12'\nc: !!str 12\nd:\n");
        let plain = |k: &str| match root.get(k).map(|n| &n.kind) {
            Some(NodeKind::Scalar(s)) => s.plain,
            _ => false,
        };
        assert!(plain("a"));
        assert!(!plain("b"));
        assert!(!plain("c"));
        assert!(plain("d"));
    }

    #[test]
    fn duplicate_keys_are_reported_with_both_lines() {
        let parsed = parse("name: a\nmission: x\nname: b\n");
        assert_eq!(parsed.problems.len(), 1);
        let p = &parsed.problems[0];
        assert_eq!(p.loc.line, 3);
        assert!(
            p.message.contains("first defined at line 1"),
            "{}",
            p.message
        );
    }

    #[test]
    fn anchors_aliases_and_merge_keys_resolve() {
        let root = tree(
            "base: &b\n  type: openai\n  model: m\nllm:\n  x:\n    <<: *b\n    model: n\n  y: *b\n",
        );
        let x = root.at(&YamlPath::parse("llm.x").unwrap_or_default());
        let keys: Vec<&str> = match x.map(|n| &n.kind) {
            Some(NodeKind::Map(e)) => e.iter().map(|e| e.key.as_str()).collect(),
            _ => vec![],
        };
        assert_eq!(keys, ["model", "type"]);
        assert!(
            root.at(&YamlPath::parse("llm.y.type").unwrap_or_default())
                .is_some()
        );
    }

    #[test]
    fn syntax_errors_are_located() {
        let parsed = parse("name: a\nunits: [\n");
        assert!(parsed.root.is_none());
        assert_eq!(parsed.problems.len(), 1);
        assert!(parsed.problems[0].message.starts_with("invalid YAML"));
        assert!(parsed.problems[0].loc.line >= 2);
    }

    #[test]
    fn a_second_document_is_refused() {
        let parsed = parse("name: a\n---\nname: b\n");
        assert_eq!(parsed.problems.len(), 1);
        assert_eq!(parsed.problems[0].loc.line, 2);
    }

    #[test]
    fn alias_bombs_are_capped() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let prev = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        let parsed = parse(&text);
        assert!(parsed.root.is_none());
        assert!(parsed.problems[0].message.contains("more than"));
    }
}
