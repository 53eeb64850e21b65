//! [`ConfluenceSearcher`]: the knowledge base on Confluence, searched live
//! with CQL (`GET /rest/api/content/search`).
//!
//! The query becomes `text ~ "<query>"` (quotes and backslashes escaped),
//! narrowed to pages (`type = page`) and, when `knowledge.confluence_spaces`
//! lists spaces, to those (`space IN (...)`). The request runs as the
//! seat's own account when its role has `integrations.confluence.token`
//! (Basic `user:token` with a `user`, Bearer without), so Confluence's page
//! restrictions apply natively; otherwise as the org account
//! (`integrations.confluence.email` + `token`). An empty scope searches
//! everything for a seat on its own account and nothing for a seat on the
//! org account.

use std::collections::HashMap;

use async_trait::async_trait;
use crewlet_config::Company;
use serde_json::Value;

use super::confluence_client::{ConfluenceClient, http_client};
use super::creds::{ConfluenceAuth, expand};
use super::markdown::html_to_text;
use super::{AUTO_DRAFTED_PARENT, KnowledgeHit, KnowledgeSearcher, excluded, snippet};

/// Longest query text put into the CQL, in characters.
const MAX_QUERY_CHARS: usize = 200;
/// Extra rows asked for so the exclusions still leave `limit` hits.
const OVERFETCH: usize = 5;
/// What each hit is expanded with.
const EXPAND: &str = "ancestors,space,body.view";

/// The Tool Skills space the importer publishes to by default; its pages
/// never come back as knowledge hits.
pub const DEFAULT_SKILLS_SPACE: &str = super::import::DEFAULT_SKILLS_CONTAINER;

/// Confluence knowledge search, one account per seat.
pub struct ConfluenceSearcher {
    http: reqwest::Client,
    base: String,
    /// Upper-case space keys; empty: unscoped (own credentials only).
    scope: Vec<String>,
    skills_space: Option<String>,
    org: Option<ConfluenceAuth>,
    /// Agent handle -> the seat's own credentials, if it has them.
    seats: HashMap<String, Option<ConfluenceAuth>>,
}

impl std::fmt::Debug for ConfluenceSearcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let own = self.seats.values().filter(|a| a.is_some()).count();
        f.debug_struct("ConfluenceSearcher")
            .field("base", &self.base)
            .field("scope", &self.scope)
            .field("skills_space", &self.skills_space)
            .field("org_token", &self.org.is_some())
            .field("seats", &self.seats.len())
            .field("seats_with_own_token", &own)
            .finish()
    }
}

impl ConfluenceSearcher {
    /// The searcher for `company`, or `None` without `integrations.confluence`
    /// and a site `url`. `env` expands `${VAR}`s; a variable it does not
    /// know leaves that credential unset.
    pub fn from_company(
        company: &Company,
        env: impl Fn(&str) -> Option<String>,
    ) -> Option<ConfluenceSearcher> {
        let env: &dyn Fn(&str) -> Option<String> = &env;
        let cfg = company.integrations.confluence.as_ref()?;
        let base = expand(cfg.url.as_deref(), env)?;
        let org = ConfluenceAuth::from_parts(
            expand(cfg.email.as_deref(), env),
            expand(cfg.token.as_deref(), env),
        );
        let org_chart = company.organization();
        let seats = org_chart
            .agents()
            .map(|seat| {
                let own = seat.role.integrations.confluence.as_ref().and_then(|c| {
                    ConfluenceAuth::from_parts(
                        expand(c.user.as_deref(), env),
                        expand(c.token.as_deref(), env),
                    )
                });
                (seat.handle.clone(), own)
            })
            .collect();
        let scope = company
            .knowledge
            .as_ref()
            .map(|k| normalize_keys(&k.confluence_spaces))
            .unwrap_or_default();
        let http = match http_client() {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(error = %e, "confluence knowledge search: no http client");
                return None;
            }
        };
        Some(ConfluenceSearcher {
            http,
            base: base.trim_end_matches('/').to_owned(),
            scope,
            skills_space: Some(DEFAULT_SKILLS_SPACE.to_owned()),
            org,
            seats,
        })
    }

    /// Pages of this space are never hits (`None`: no such space).
    pub fn with_skills_space(mut self, key: Option<&str>) -> Self {
        self.skills_space = key
            .map(|k| k.trim().to_ascii_uppercase())
            .filter(|k| !k.is_empty());
        self
    }

    /// The credentials a search by `seat` uses, and whether they are its own.
    fn auth(&self, seat: &str) -> Option<(&ConfluenceAuth, bool)> {
        match self.seats.get(seat)? {
            Some(own) => Some((own, true)),
            None => self.org.as_ref().map(|org| (org, false)),
        }
    }

    fn parse(&self, answer: &Value, limit: usize, exclude: &[String]) -> Vec<KnowledgeHit> {
        let link_base = answer
            .get("_links")
            .and_then(|l| l.get("base"))
            .and_then(Value::as_str)
            .unwrap_or(&self.base)
            .trim_end_matches('/')
            .to_owned();
        let Some(results) = answer.get("results").and_then(Value::as_array) else {
            tracing::warn!("confluence knowledge search: answer without results");
            return Vec::new();
        };
        results
            .iter()
            .filter_map(|page| hit(page, &link_base))
            .filter(|h| !excluded(h, exclude))
            .filter(|h| {
                self.skills_space
                    .as_deref()
                    .is_none_or(|s| !h.container.eq_ignore_ascii_case(s))
            })
            .take(limit)
            .collect()
    }
}

/// Trimmed, upper-case, non-empty, unique space keys.
fn normalize_keys(keys: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for k in keys {
        let k = k.trim().to_ascii_uppercase();
        if !k.is_empty() && !out.contains(&k) {
            out.push(k);
        }
    }
    out
}

/// `value` as the inside of a CQL double-quoted string.
pub fn escape_cql(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The CQL for `query` over `spaces` (empty: every space).
pub fn build_cql(query: &str, spaces: &[String]) -> String {
    let terms: String = query.trim().chars().take(MAX_QUERY_CHARS).collect();
    let text = format!("type = page AND text ~ \"{}\"", escape_cql(&terms));
    if spaces.is_empty() {
        return text;
    }
    let list = spaces
        .iter()
        .map(|s| format!("\"{}\"", escape_cql(s)))
        .collect::<Vec<_>>()
        .join(",");
    format!("space IN ({list}) AND {text}")
}

fn hit(page: &Value, link_base: &str) -> Option<KnowledgeHit> {
    let page_id = match page.get("id")? {
        Value::String(s) if !s.is_empty() => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let str_at = |path: &[&str]| {
        let mut v = page;
        for key in path {
            v = v.get(key)?;
        }
        v.as_str().map(str::to_owned)
    };
    let ancestors = page
        .get("ancestors")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|a| a.get("title").and_then(Value::as_str))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let text = str_at(&["excerpt"])
        .filter(|e| !e.trim().is_empty())
        .or_else(|| str_at(&["body", "view", "value"]))
        .or_else(|| str_at(&["body", "storage", "value"]))
        .unwrap_or_default();
    let url = match str_at(&["_links", "webui"]) {
        Some(webui) if webui.starts_with("http") => webui,
        Some(webui) => format!("{link_base}{webui}"),
        None => format!("{link_base}/pages/viewpage.action?pageId={page_id}"),
    };
    Some(KnowledgeHit {
        title: str_at(&["title"]).unwrap_or_default(),
        url,
        container: str_at(&["space", "key"]).unwrap_or_default(),
        page_id,
        snippet: snippet(&html_to_text(&text)),
        ancestors,
    })
}

#[async_trait]
impl KnowledgeSearcher for ConfluenceSearcher {
    fn name(&self) -> &'static str {
        "confluence"
    }

    fn can_search(&self, seat: &str) -> bool {
        self.auth(seat)
            .is_some_and(|(_, own)| super::may_search(own, !self.scope.is_empty()))
    }

    async fn search(
        &self,
        seat: &str,
        query: &str,
        limit: usize,
        exclude_ancestors: &[String],
    ) -> Vec<KnowledgeHit> {
        let Some((auth, own)) = self.auth(seat) else {
            return Vec::new();
        };
        if !super::may_search(own, !self.scope.is_empty()) || query.trim().is_empty() || limit == 0
        {
            return Vec::new();
        }
        let cql = build_cql(query, &self.scope);
        let client = ConfluenceClient::with_http(self.http.clone(), &self.base, auth.clone());
        let answer = match client.search(&cql, limit + OVERFETCH, EXPAND).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(seat, own_account = own, error = %e, "confluence knowledge search failed");
                return Vec::new();
            }
        };
        let mut exclude = exclude_ancestors.to_vec();
        exclude.push(AUTO_DRAFTED_PARENT.to_owned());
        self.parse(&answer, limit, &exclude)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cql_is_escaped_and_scoped() {
        assert_eq!(
            build_cql(r#"say "hi" \ now"#, &[]),
            r#"type = page AND text ~ "say \"hi\" \\ now""#
        );
        assert_eq!(
            build_cql(
                "deploy",
                &normalize_keys(&[" eng ".into(), "HB".into(), "ENG".into()])
            ),
            r#"space IN ("ENG","HB") AND type = page AND text ~ "deploy""#
        );
    }
}
