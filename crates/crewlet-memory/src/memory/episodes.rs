//! The episodes' in-memory twin.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use parking_lot::RwLock;
use uuid::Uuid;

use crate::error::MemoryError;
use crate::repos::{EpisodeFilter, Episodes};
use crate::rules::{check, check_opt, cosine, micros, paged, require_text};
use crate::types::{Episode, EpisodeCounts, EpisodeKind, NewEpisode, Page, Scored};

/// Keyed like the table's primary key, `(ended_at, id)`.
type Key = (DateTime<Utc>, Uuid);

/// [`Episodes`] in process memory.
pub struct MemoryEpisodes {
    dim: usize,
    rows: RwLock<BTreeMap<Key, NewEpisode>>,
}

impl Default for MemoryEpisodes {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryEpisodes {
    pub fn new() -> Self {
        Self::with_embedding_dim(super::default_dim())
    }

    /// A twin whose pretend embedding column is `dim` wide.
    pub fn with_embedding_dim(dim: usize) -> Self {
        Self {
            dim,
            rows: RwLock::new(BTreeMap::new()),
        }
    }

    /// The stored form: what PostgreSQL would hand back.
    fn normalized(&self, new: NewEpisode) -> Result<NewEpisode, MemoryError> {
        require_text("episode agent handle", &new.episode.agent_handle)?;
        check_opt("episode embedding", new.embedding.as_deref(), self.dim)?;
        let mut stored = new;
        stored.episode.started_at = micros(stored.episode.started_at);
        stored.episode.ended_at = micros(stored.episode.ended_at);
        Ok(stored)
    }
}

fn matches(e: &Episode, agent_handle: &str, filter: &EpisodeFilter<'_>) -> bool {
    e.agent_handle == agent_handle
        && filter
            .outcome
            .is_none_or(|o| e.review_outcome.as_deref() == Some(o))
        && filter.kind.is_none_or(|k| e.kind == k)
}

/// Newest first by `ended_at`, then id, as the SQL orders them.
fn newest_first(a: &Episode, b: &Episode) -> std::cmp::Ordering {
    b.ended_at.cmp(&a.ended_at).then(b.id.cmp(&a.id))
}

#[async_trait]
impl Episodes for MemoryEpisodes {
    async fn record(&self, episode: NewEpisode) -> Result<bool, MemoryError> {
        let stored = self.normalized(episode)?;
        let key = (stored.episode.ended_at, stored.episode.id);
        let mut rows = self.rows.write();
        if rows.contains_key(&key) {
            return Ok(false);
        }
        rows.insert(key, stored);
        Ok(true)
    }

    async fn contains(&self, agent_handle: &str, id: Uuid) -> Result<bool, MemoryError> {
        Ok(self
            .rows
            .read()
            .values()
            .any(|r| r.episode.agent_handle == agent_handle && r.episode.id == id))
    }

    async fn recent(
        &self,
        agent_handle: &str,
        filter: EpisodeFilter<'_>,
        page: Page,
    ) -> Result<Vec<Episode>, MemoryError> {
        let mut found: Vec<Episode> = self
            .rows
            .read()
            .values()
            .filter(|r| matches(&r.episode, agent_handle, &filter))
            .map(|r| r.episode.clone())
            .collect();
        found.sort_by(newest_first);
        Ok(paged(found, page))
    }

    async fn similar(
        &self,
        agent_handle: &str,
        query: &[f32],
        filter: EpisodeFilter<'_>,
        limit: usize,
    ) -> Result<Vec<Scored<Episode>>, MemoryError> {
        check("episode query vector", query, self.dim)?;
        let mut scored: Vec<Scored<Episode>> = self
            .rows
            .read()
            .values()
            .filter(|r| matches(&r.episode, agent_handle, &filter))
            .filter_map(|r| {
                r.embedding.as_ref().map(|e| Scored {
                    score: cosine(query, e),
                    item: r.episode.clone(),
                })
            })
            .collect();
        scored.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| newest_first(&a.item, &b.item))
        });
        scored.truncate(limit);
        Ok(scored)
    }

    async fn counts(&self, agent_handle: &str) -> Result<EpisodeCounts, MemoryError> {
        let mut counts = EpisodeCounts::default();
        for r in self.rows.read().values() {
            if r.episode.agent_handle == agent_handle {
                match r.episode.kind {
                    EpisodeKind::Raw => counts.raw += 1,
                    EpisodeKind::Compacted => counts.compacted += 1,
                }
            }
        }
        Ok(counts)
    }

    async fn over_raw_threshold(
        &self,
        raw_threshold: usize,
    ) -> Result<Vec<(String, usize)>, MemoryError> {
        let mut raw: BTreeMap<String, usize> = BTreeMap::new();
        for r in self.rows.read().values() {
            if r.episode.kind == EpisodeKind::Raw {
                *raw.entry(r.episode.agent_handle.clone()).or_default() += 1;
            }
        }
        // BTreeMap: by handle, bytewise, as `ORDER BY agent_handle COLLATE "C"`.
        Ok(raw
            .into_iter()
            .filter(|(_, n)| *n > raw_threshold)
            .collect())
    }

    async fn oldest_raw(
        &self,
        agent_handle: &str,
        limit: usize,
    ) -> Result<Vec<Episode>, MemoryError> {
        // The map is ordered by (ended_at, id): oldest first already.
        Ok(self
            .rows
            .read()
            .values()
            .filter(|r| {
                r.episode.agent_handle == agent_handle && r.episode.kind == EpisodeKind::Raw
            })
            .take(limit)
            .map(|r| r.episode.clone())
            .collect())
    }

    async fn compact(
        &self,
        agent_handle: &str,
        replaced: &[Uuid],
        compacted: NewEpisode,
    ) -> Result<usize, MemoryError> {
        crate::rules::compacted(agent_handle, &compacted.episode)?;
        let stored = self.normalized(compacted)?;
        let mut rows = self.rows.write();
        let before = rows.len();
        rows.retain(|_, r| {
            !(r.episode.agent_handle == agent_handle
                && r.episode.kind == EpisodeKind::Raw
                && replaced.contains(&r.episode.id))
        });
        let removed = before - rows.len();
        if removed > 0 {
            rows.entry((stored.episode.ended_at, stored.episode.id))
                .or_insert(stored);
        }
        Ok(removed)
    }
}
