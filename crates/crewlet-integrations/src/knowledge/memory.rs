//! [`MemorySearcher`]: pages held in memory, with per-seat read access, for
//! tests and for a laptop without a knowledge backend.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use parking_lot::RwLock;

use super::{KnowledgeHit, KnowledgeSearcher, excluded, snippet};

/// A page of the in-memory knowledge base.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryPage {
    pub id: String,
    pub container: String,
    pub title: String,
    pub body: String,
    pub ancestors: Vec<String>,
    /// Seats that may read it; empty: everyone.
    pub readers: BTreeSet<String>,
}

/// Pages in memory. A page matches when every word of the query appears
/// in its title or body (case-insensitive); hits are ranked by how many
/// times the words appear, title matches counting double.
#[derive(Debug, Default)]
pub struct MemorySearcher {
    pages: RwLock<BTreeMap<String, MemoryPage>>,
    /// Seats that may search; empty: every seat.
    seats: BTreeSet<String>,
}

impl MemorySearcher {
    pub fn new() -> Self {
        Self::default()
    }

    /// Only these seats can search.
    pub fn for_seats<I: IntoIterator<Item = S>, S: Into<String>>(seats: I) -> Self {
        Self {
            pages: RwLock::default(),
            seats: seats.into_iter().map(Into::into).collect(),
        }
    }

    /// Adds or replaces a page (by id).
    pub fn put(&self, page: MemoryPage) {
        self.pages.write().insert(page.id.clone(), page);
    }

    fn score(page: &MemoryPage, words: &[String]) -> Option<usize> {
        let title = page.title.to_lowercase();
        let body = page.body.to_lowercase();
        let mut score = 0;
        for w in words {
            let n = title.matches(w.as_str()).count() * 2 + body.matches(w.as_str()).count();
            if n == 0 {
                return None;
            }
            score += n;
        }
        Some(score)
    }
}

#[async_trait]
impl KnowledgeSearcher for MemorySearcher {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn can_search(&self, seat: &str) -> bool {
        self.seats.is_empty() || self.seats.contains(seat)
    }

    async fn search(
        &self,
        seat: &str,
        query: &str,
        limit: usize,
        exclude: &[String],
    ) -> Vec<KnowledgeHit> {
        if !self.can_search(seat) {
            return Vec::new();
        }
        let words: Vec<String> = query
            .split_whitespace()
            .map(|w| {
                w.trim_matches(|c: char| !c.is_alphanumeric())
                    .to_lowercase()
            })
            .filter(|w| !w.is_empty())
            .collect();
        if words.is_empty() {
            return Vec::new();
        }
        let pages = self.pages.read();
        let mut scored: Vec<(usize, &MemoryPage)> = pages
            .values()
            .filter(|p| p.readers.is_empty() || p.readers.contains(seat))
            .filter_map(|p| Self::score(p, &words).map(|s| (s, p)))
            .collect();
        scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.title.cmp(&b.1.title)));
        scored
            .into_iter()
            .map(|(_, p)| KnowledgeHit {
                title: p.title.clone(),
                url: String::new(),
                container: p.container.clone(),
                page_id: p.id.clone(),
                snippet: snippet(&p.body),
                ancestors: p.ancestors.clone(),
            })
            .filter(|h| !excluded(h, exclude))
            .take(limit)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knowledge::AUTO_DRAFTED_PARENT;

    fn page(id: &str, title: &str, body: &str, readers: &[&str], ancestors: &[&str]) -> MemoryPage {
        MemoryPage {
            id: id.into(),
            container: "ENG".into(),
            title: title.into(),
            body: body.into(),
            ancestors: ancestors.iter().map(|s| (*s).to_owned()).collect(),
            readers: readers.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[tokio::test]
    async fn search_respects_readers_drafts_and_ranks_title_matches_first() {
        let s = MemorySearcher::new();
        s.put(page(
            "1",
            "Deploy runbook",
            "how to deploy the api",
            &[],
            &[],
        ));
        s.put(page("2", "Notes", "deploy deploy deploy", &[], &[]));
        s.put(page("3", "Secret deploy plan", "deploy", &["cto"], &[]));
        s.put(page(
            "4",
            "Draft deploy skill",
            "deploy",
            &[],
            &[AUTO_DRAFTED_PARENT],
        ));
        let ex = vec![AUTO_DRAFTED_PARENT.to_owned()];
        let eng: Vec<String> = s
            .search("eng", "deploy", 10, &ex)
            .await
            .into_iter()
            .map(|h| h.page_id)
            .collect();
        assert_eq!(eng, ["1", "2"], "a tie goes to the title order");
        let cto: Vec<String> = s
            .search("cto", "Deploy!", 10, &ex)
            .await
            .into_iter()
            .map(|h| h.page_id)
            .collect();
        assert!(cto.contains(&"3".to_owned()) && !cto.contains(&"4".to_owned()));
        assert!(
            s.search("eng", "deploy kubernetes", 10, &ex)
                .await
                .is_empty(),
            "every word must match"
        );
        assert_eq!(s.search("eng", "deploy", 1, &ex).await.len(), 1);
        let only = MemorySearcher::for_seats(["cto"]);
        assert!(!only.can_search("eng") && only.can_search("cto"));
    }
}
