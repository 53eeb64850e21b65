//! The knowledge base, searched live at query time: one
//! [`KnowledgeSearcher`] per company (Confluence or Plane, or the in-memory
//! [`MemorySearcher`] for tests and laptops).
//!
//! The contract every backend keeps:
//! - **Scope lives behind the seam.** A searcher is built from the company
//!   (its `knowledge.*` scope list and every seat's credentials); callers
//!   pass a seat handle and a plain-text query, never backend syntax.
//! - **The seat's own credentials** (`integrations.confluence.token`,
//!   `integrations.plane.token` on the role) are used when it has them, so
//!   the backend enforces its page permissions natively; otherwise the
//!   org token. With an empty scope list a seat with its own credentials
//!   searches unscoped (its account's view), and a seat on the org token
//!   searches nothing.
//! - **Best effort.** [`KnowledgeSearcher::search`] never fails: an
//!   unreachable backend, a refused token or an unreadable answer is
//!   logged and yields no hits.
//! - **Auto-drafts are excluded**: hits under a page titled
//!   [`AUTO_DRAFTED_PARENT`] (any ancestor) never surface.

mod confluence;
mod confluence_client;
pub(crate) mod creds;
pub mod import;
mod import_confluence;
mod import_plane;
pub mod markdown;
mod memory;
mod plane;
pub mod skills;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use confluence::{ConfluenceSearcher, DEFAULT_SKILLS_SPACE, build_cql, escape_cql};
pub use confluence_client::{ConfluenceClient, ConfluenceError, IMPORT_PROPERTY, PageRef};
pub use creds::ConfluenceAuth;
pub use import_confluence::{ConfluencePublisher, DOC_LABEL, SKILL_LABEL};
pub use import_plane::{EXTERNAL_SOURCE, PlanePublisher, external_id};
pub use memory::{MemoryPage, MemorySearcher};
pub use plane::{
    AUTO_DRAFT_TITLE_PREFIX, DEFAULT_SKILLS_PROJECT, MAX_QUERY_TOKENS, PlaneSearcher,
    relaxed_queries,
};
pub use skills::{ConfluenceSkills, DirSkills, PlaneSkills, SkillPage, SkillSource, SkillWalk};

/// The parent page of unreviewed skill drafts.
pub const AUTO_DRAFTED_PARENT: &str = "Auto-Drafted Skills";
/// Longest snippet a hit carries, in characters.
pub const SNIPPET_CHARS: usize = 200;

/// One page a search found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnowledgeHit {
    pub title: String,
    /// A link a person can open; empty when none can be built.
    pub url: String,
    /// Confluence space key or Plane project identifier.
    pub container: String,
    pub page_id: String,
    /// Plain text, at most [`SNIPPET_CHARS`] characters; may be empty.
    pub snippet: String,
    /// Titles of the page's ancestors, root first (empty on Plane).
    pub ancestors: Vec<String>,
}

/// A knowledge backend.
#[async_trait]
pub trait KnowledgeSearcher: Send + Sync {
    /// The backend's name (`confluence`, `plane`, `memory`).
    fn name(&self) -> &'static str;

    /// Whether a search by `seat` could find anything at all (no I/O): lets
    /// the prefetch skip writing a query that cannot hit.
    fn can_search(&self, seat: &str) -> bool;

    /// At most `limit` pages matching `query` that `seat` may read, best
    /// first, without those under an ancestor titled in `exclude_ancestors`.
    /// Never fails: problems are logged and give no hits.
    async fn search(
        &self,
        seat: &str,
        query: &str,
        limit: usize,
        exclude_ancestors: &[String],
    ) -> Vec<KnowledgeHit>;
}

/// The scope rule every backend keeps: a seat searching with its own
/// credentials may search unscoped; on the org token only within a scope.
pub(crate) fn may_search(own_credentials: bool, scoped: bool) -> bool {
    own_credentials || scoped
}

/// Whether `hit` sits under one of `exclude` (case-insensitive titles).
pub fn excluded(hit: &KnowledgeHit, exclude: &[String]) -> bool {
    hit.ancestors.iter().any(|a| {
        exclude
            .iter()
            .any(|e| e.trim().eq_ignore_ascii_case(a.trim()))
    })
}

/// `text` as a snippet: whitespace collapsed, at most [`SNIPPET_CHARS`].
pub fn snippet(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= SNIPPET_CHARS {
        return flat;
    }
    let mut out: String = flat.chars().take(SNIPPET_CHARS - 3).collect();
    out.push_str("...");
    out
}
