//! [`PlaneSearcher`]: the knowledge base on Plane pages, searched live with
//! the workspace page search (`GET /api/v1/workspaces/{slug}/pages/search/
//! ?query=..&projects=<uuid,..>&per_page=N`, rows `{id, name, project_id,
//! parent_id, snippet}`, newest first).
//!
//! That search is a strict AND across the query's words, so a query that
//! finds nothing is retried shorter: all its words (at most 16 distinct
//! ones, the server's cap), then its first four, then its first two; the
//! first non-empty answer wins.
//!
//! Credentials: the seat's own `integrations.plane.token` (Plane then
//! applies project membership and page access natively), else the org
//! `integrations.plane.token`. Scope: `knowledge.plane_projects`
//! identifiers, resolved to project ids through the project list; a scope
//! that resolves to nothing searches nothing (it never widens). Pages of
//! the Tool Skills project, pages under a parent titled
//! [`AUTO_DRAFTED_PARENT`] (or another excluded title) and pages whose
//! title starts with [`AUTO_DRAFT_TITLE_PREFIX`] are never hits, nor is a
//! row that names no project.

use std::collections::HashMap;

use async_trait::async_trait;
use crewlet_config::Company;
use parking_lot::RwLock;

use super::creds::expand;
use super::markdown::html_to_text;
use super::{AUTO_DRAFTED_PARENT, KnowledgeHit, KnowledgeSearcher, snippet};
use crate::plane::{PlaneClient, PlaneError, SearchRow, http_client};

/// Title prefix of auto-drafted skill pages: hidden even when their
/// parent cannot be looked up.
pub const AUTO_DRAFT_TITLE_PREFIX: &str = "[Auto-draft] ";
/// The Tool Skills project the importer publishes to by default.
pub const DEFAULT_SKILLS_PROJECT: &str = super::import::DEFAULT_SKILLS_CONTAINER;
/// Most distinct words the server accepts in one query.
pub const MAX_QUERY_TOKENS: usize = 16;
/// Shorter queries tried, in order, when the full one finds nothing.
const RELAX_PREFIXES: [usize; 2] = [4, 2];
const MAX_QUERY_CHARS: usize = 200;
const OVERFETCH: usize = 5;

/// Plane knowledge search, one account per seat.
pub struct PlaneSearcher {
    http: reqwest::Client,
    url: String,
    workspace: String,
    /// Upper-case project identifiers; empty: unscoped (own token only).
    scope: Vec<String>,
    skills_project: Option<String>,
    org: Option<String>,
    /// Agent handle -> the seat's own token, if it has one.
    seats: HashMap<String, Option<String>>,
    /// Project id -> identifier, as far as seen.
    projects: RwLock<HashMap<String, String>>,
    /// Page id -> title, for parent lookups.
    parents: RwLock<HashMap<String, String>>,
}

impl std::fmt::Debug for PlaneSearcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlaneSearcher")
            .field("url", &self.url)
            .field("workspace", &self.workspace)
            .field("scope", &self.scope)
            .field("skills_project", &self.skills_project)
            .field("org_token", &self.org.is_some())
            .field("seats", &self.seats.len())
            .finish()
    }
}

/// The query's words, at most [`MAX_QUERY_TOKENS`] distinct ones, and the
/// shorter attempts after it.
pub fn relaxed_queries(query: &str) -> Vec<String> {
    let query: String = query.trim().chars().take(MAX_QUERY_CHARS).collect();
    let mut seen: Vec<String> = Vec::new();
    let mut words: Vec<&str> = Vec::new();
    for word in query.split_whitespace() {
        let folded = word.to_lowercase();
        if !seen.contains(&folded) {
            if seen.len() >= MAX_QUERY_TOKENS {
                break;
            }
            seen.push(folded);
        }
        words.push(word);
    }
    if words.is_empty() {
        return Vec::new();
    }
    let mut out = vec![words.join(" ")];
    for n in RELAX_PREFIXES {
        if words.len() > n {
            out.push(words[..n].join(" "));
        }
    }
    out
}

impl PlaneSearcher {
    /// The searcher for `company`, or `None` unless `integrations.plane` is
    /// enabled with a `workspace`. `env` expands `${VAR}`s.
    pub fn from_company(
        company: &Company,
        env: impl Fn(&str) -> Option<String>,
    ) -> Option<PlaneSearcher> {
        let env: &dyn Fn(&str) -> Option<String> = &env;
        let cfg = company.integrations.plane.as_ref().filter(|p| p.enabled)?;
        let url = expand(Some(&cfg.url), env)?;
        let workspace = expand(cfg.workspace.as_deref(), env)?;
        let org_chart = company.organization();
        let seats = org_chart
            .agents()
            .map(|seat| {
                let own = seat
                    .role
                    .integrations
                    .plane
                    .as_ref()
                    .and_then(|p| expand(p.token.as_deref(), env));
                (seat.handle.clone(), own)
            })
            .collect();
        let mut scope: Vec<String> = Vec::new();
        for p in company.knowledge.iter().flat_map(|k| &k.plane_projects) {
            let p = p.trim().to_ascii_uppercase();
            if !p.is_empty() && !scope.contains(&p) {
                scope.push(p);
            }
        }
        let http = match http_client() {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(error = %e, "plane knowledge search: no http client");
                return None;
            }
        };
        Some(PlaneSearcher {
            http,
            url: url.trim_end_matches('/').to_owned(),
            workspace,
            scope,
            skills_project: Some(DEFAULT_SKILLS_PROJECT.to_owned()),
            org: expand(cfg.token.as_deref(), env),
            seats,
            projects: RwLock::default(),
            parents: RwLock::default(),
        })
    }

    /// Pages of this project are never hits (`None`: no such project).
    pub fn with_skills_project(mut self, identifier: Option<&str>) -> Self {
        self.skills_project = identifier
            .map(|k| k.trim().to_ascii_uppercase())
            .filter(|k| !k.is_empty());
        self
    }

    fn token(&self, seat: &str) -> Option<(&str, bool)> {
        match self.seats.get(seat)? {
            Some(own) => Some((own, true)),
            None => self.org.as_deref().map(|org| (org, false)),
        }
    }

    /// The id of project `identifier`, from the cache.
    fn project_id(&self, identifier: &str) -> Option<String> {
        self.projects
            .read()
            .iter()
            .find(|(_, ident)| ident.eq_ignore_ascii_case(identifier))
            .map(|(id, _)| id.clone())
    }

    /// Reads the project list into the cache.
    async fn refresh_projects(&self, client: &PlaneClient) -> Result<(), PlaneError> {
        let list = client.projects().await?;
        let mut cache = self.projects.write();
        for p in list {
            cache.insert(p.id.to_ascii_lowercase(), p.identifier.to_ascii_uppercase());
        }
        Ok(())
    }

    /// The title of page `id` in `project`; `None` when it cannot be read.
    async fn parent_title(&self, client: &PlaneClient, project: &str, id: &str) -> Option<String> {
        if let Some(t) = self.parents.read().get(id) {
            return Some(t.clone());
        }
        match client.page(project, id).await {
            Ok(page) => {
                self.parents
                    .write()
                    .insert(id.to_owned(), page.name.clone());
                Some(page.name)
            }
            Err(e) => {
                tracing::debug!(error = %e, "plane knowledge search: parent page lookup failed");
                None
            }
        }
    }

    async fn run(
        &self,
        client: &PlaneClient,
        query: &str,
        limit: usize,
        exclude: &[String],
    ) -> Result<Vec<KnowledgeHit>, PlaneError> {
        let wanted: Vec<&String> = self.scope.iter().chain(&self.skills_project).collect();
        if wanted.iter().any(|p| self.project_id(p).is_none()) {
            self.refresh_projects(client).await?;
        }
        let scope_ids: Vec<String> = self
            .scope
            .iter()
            .filter_map(|p| self.project_id(p))
            .collect();
        if !self.scope.is_empty() && scope_ids.is_empty() {
            tracing::warn!(scope = ?self.scope, "plane knowledge search: no project of the scope is visible");
            return Ok(Vec::new());
        }
        let skills_id = self
            .skills_project
            .as_deref()
            .and_then(|p| self.project_id(p));
        let mut rows: Vec<SearchRow> = Vec::new();
        for attempt in relaxed_queries(query) {
            rows = client
                .search_pages(&attempt, &scope_ids, limit + OVERFETCH)
                .await?;
            if !rows.is_empty() {
                break;
            }
        }
        let unknown = rows.iter().any(|r| {
            r.project_id
                .as_ref()
                .is_some_and(|p| !self.projects.read().contains_key(&p.to_ascii_lowercase()))
        });
        if unknown {
            self.refresh_projects(client).await?;
        }
        let mut hits = Vec::new();
        for row in rows {
            if hits.len() >= limit {
                break;
            }
            // A row without a project cannot be checked: dropped.
            let Some(project) = row.project_id.as_deref().map(str::to_ascii_lowercase) else {
                continue;
            };
            if skills_id.as_deref() == Some(project.as_str())
                || row.name.starts_with(AUTO_DRAFT_TITLE_PREFIX)
            {
                continue;
            }
            if let Some(parent) = &row.parent_id
                && let Some(title) = self.parent_title(client, &project, parent).await
                && exclude
                    .iter()
                    .any(|e| e.trim().eq_ignore_ascii_case(title.trim()))
            {
                continue;
            }
            let container = self
                .projects
                .read()
                .get(&project)
                .cloned()
                .unwrap_or_default();
            hits.push(KnowledgeHit {
                url: format!(
                    "{}/{}/projects/{project}/pages/{}",
                    self.url, self.workspace, row.id
                ),
                title: row.name,
                container,
                page_id: row.id,
                snippet: snippet(&html_to_text(&row.snippet)),
                ancestors: Vec::new(),
            });
        }
        Ok(hits)
    }
}

#[async_trait]
impl KnowledgeSearcher for PlaneSearcher {
    fn name(&self) -> &'static str {
        "plane"
    }

    fn can_search(&self, seat: &str) -> bool {
        self.token(seat)
            .is_some_and(|(_, own)| super::may_search(own, !self.scope.is_empty()))
    }

    async fn search(
        &self,
        seat: &str,
        query: &str,
        limit: usize,
        exclude_ancestors: &[String],
    ) -> Vec<KnowledgeHit> {
        let Some((token, own)) = self.token(seat) else {
            return Vec::new();
        };
        if !super::may_search(own, !self.scope.is_empty()) || query.trim().is_empty() || limit == 0
        {
            return Vec::new();
        }
        let client = PlaneClient::with_http(self.http.clone(), &self.url, &self.workspace, token);
        let mut exclude = exclude_ancestors.to_vec();
        exclude.push(AUTO_DRAFTED_PARENT.to_owned());
        match self.run(&client, query, limit, &exclude).await {
            Ok(hits) => hits,
            Err(e) => {
                tracing::warn!(seat, own_account = own, error = %e, "plane knowledge search failed");
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relaxation_ladder_and_token_cap() {
        assert_eq!(
            relaxed_queries("a b c d e"),
            ["a b c d e", "a b c d", "a b"]
        );
        assert_eq!(relaxed_queries("a b c"), ["a b c", "a b"]);
        assert_eq!(relaxed_queries("a"), ["a"]);
        assert!(relaxed_queries("  ").is_empty());
        let many: Vec<String> = (0..20).map(|i| format!("w{i}")).collect();
        let first = &relaxed_queries(&many.join(" "))[0];
        assert_eq!(first.split(' ').count(), MAX_QUERY_TOKENS);
        // Repeats do not count against the cap.
        assert_eq!(relaxed_queries("a A a b")[0], "a A a b");
    }
}
