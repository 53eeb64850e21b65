//! Building the tree from parser events: anchors, aliases, `<<` merges,
//! duplicate keys, and the problems found on the way.

use std::collections::HashMap;

use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle};

use super::path::YamlPath;
use super::tree::{Entry, Loc, Node, NodeKind, Scalar};

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
