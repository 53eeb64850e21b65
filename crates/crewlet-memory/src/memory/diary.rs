//! The diary's in-memory twin.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewlet_core::AgentId;
use parking_lot::RwLock;
use uuid::Uuid;

use crate::error::MemoryError;
use crate::repos::Diary;
use crate::rules::{check, check_opt, cosine, micros, paged, require_text};
use crate::types::{DiaryEntry, DiaryWrite, NewDiaryEntry, Page, Scored};

struct Row {
    entry: DiaryEntry,
    embedding: Option<Vec<f32>>,
}

impl Row {
    fn live(&self, now: DateTime<Utc>) -> bool {
        self.entry.ttl_until.is_none_or(|t| t > micros(now))
    }
}

/// [`Diary`] in process memory.
pub struct MemoryDiary {
    dim: usize,
    rows: RwLock<Vec<Row>>,
}

impl Default for MemoryDiary {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryDiary {
    pub fn new() -> Self {
        Self::with_embedding_dim(super::default_dim())
    }

    /// A twin whose pretend embedding column is `dim` wide.
    pub fn with_embedding_dim(dim: usize) -> Self {
        Self {
            dim,
            rows: RwLock::new(Vec::new()),
        }
    }
}

/// Newest first; the id breaks ties as PostgreSQL's `id DESC` does.
fn newest_first(a: &DiaryEntry, b: &DiaryEntry) -> std::cmp::Ordering {
    b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id))
}

#[async_trait]
impl Diary for MemoryDiary {
    async fn write(
        &self,
        entry: NewDiaryEntry,
        now: DateTime<Utc>,
    ) -> Result<DiaryWrite, MemoryError> {
        require_text("diary content", &entry.content)?;
        check_opt("diary embedding", entry.embedding.as_deref(), self.dim)?;
        let now = micros(now);
        let mut rows = self.rows.write();
        if let Some(existing) = rows.iter().find(|r| {
            r.entry.agent_id == entry.agent_id && r.entry.content == entry.content && r.live(now)
        }) {
            return Ok(DiaryWrite::Duplicate(existing.entry.clone()));
        }
        let written = DiaryEntry {
            id: Uuid::now_v7(),
            agent_id: entry.agent_id,
            kind: entry.kind,
            content: entry.content,
            ttl_until: entry.ttl_until.map(micros),
            created_at: now,
        };
        rows.push(Row {
            entry: written.clone(),
            embedding: entry.embedding,
        });
        Ok(DiaryWrite::Written(written))
    }

    async fn recent(
        &self,
        agent: &AgentId,
        page: Page,
        now: DateTime<Utc>,
    ) -> Result<Vec<DiaryEntry>, MemoryError> {
        let rows = self.rows.read();
        let mut live: Vec<DiaryEntry> = rows
            .iter()
            .filter(|r| r.entry.agent_id == *agent && r.live(now))
            .map(|r| r.entry.clone())
            .collect();
        live.sort_by(newest_first);
        Ok(paged(live, page))
    }

    async fn similar(
        &self,
        agent: &AgentId,
        query: &[f32],
        limit: usize,
        now: DateTime<Utc>,
    ) -> Result<Vec<Scored<DiaryEntry>>, MemoryError> {
        check("diary query vector", query, self.dim)?;
        let rows = self.rows.read();
        let mut scored: Vec<Scored<DiaryEntry>> = rows
            .iter()
            .filter(|r| r.entry.agent_id == *agent && r.live(now))
            .filter_map(|r| {
                r.embedding.as_ref().map(|e| Scored {
                    score: cosine(query, e),
                    item: r.entry.clone(),
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

    async fn count(&self, agent: &AgentId, now: DateTime<Utc>) -> Result<usize, MemoryError> {
        let rows = self.rows.read();
        Ok(rows
            .iter()
            .filter(|r| r.entry.agent_id == *agent && r.live(now))
            .count())
    }

    async fn delete(&self, agent: &AgentId, id: Uuid) -> Result<bool, MemoryError> {
        let mut rows = self.rows.write();
        let before = rows.len();
        rows.retain(|r| !(r.entry.agent_id == *agent && r.entry.id == id));
        Ok(rows.len() < before)
    }

    async fn delete_expired(&self, now: DateTime<Utc>) -> Result<u64, MemoryError> {
        let mut rows = self.rows.write();
        let before = rows.len();
        rows.retain(|r| r.live(now));
        Ok((before - rows.len()) as u64)
    }
}
