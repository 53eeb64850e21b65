//! A YAML document as a tree of nodes that remember where they are.
//!
//! serde stops at the first error and forgets positions, so the configuration
//! checks work on this tree instead: it is built from the events of
//! serde-saphyr's own parser (`granit_parser`), keeps the line and column of
//! every key and value, resolves anchors, aliases and `<<` merge keys, and
//! reports duplicate keys. A [`YamlPath`] such as `units[0].roles[2].handle`
//! finds its way back to a line through [`Node::locate`].

mod parse;
mod path;
mod tree;

pub use parse::{Parsed, TreeProblem, parse};
pub use path::YamlPath;
pub use tree::{Loc, Locator, Node, NodeKind, Scalar};
// Not named outside this module today, but `yaml::Seg` and `yaml::Entry` were
// paths before the split and stay paths.
#[allow(unused_imports)]
pub use {path::Seg, tree::Entry};

#[cfg(test)]
mod tests;
