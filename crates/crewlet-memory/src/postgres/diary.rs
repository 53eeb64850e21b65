//! The diary over `agent_diary`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewlet_core::AgentId;
use crewlet_store::{Database, query_err};
use tokio_postgres::Row;
use uuid::Uuid;

use super::{
    NearestSql, decode, execute, nearest, padded, padded_opt, query, query_opt, score, sql_int,
};
use crate::error::MemoryError;
use crate::repos::Diary;
use crate::rules::require_text;
use crate::types::{DiaryEntry, DiaryKind, DiaryWrite, NewDiaryEntry, Page, Scored};

const TABLE: &str = "agent_diary";

/// Serializes writes of one content by one agent, so two concurrent writes
/// of the same fact cannot both pass the duplicate guard.
const LOCK: &str = "SELECT pg_advisory_xact_lock(
        hashtextextended('agent_diary:' || $1::uuid::text || ':' || md5($2::text), 0))";

/// `md5(content)` lets the guard use `agent_diary_content`; the
/// `content =` comparison makes a digest collision harmless.
const FIND_LIVE_DUPLICATE: &str = "SELECT id, agent_id, kind, content, ttl_until, created_at
        FROM agent_diary
        WHERE agent_id = $1 AND md5(content) = md5($2) AND content = $2
          AND (ttl_until IS NULL OR ttl_until > $3)
        ORDER BY created_at, id
        LIMIT 1";

const INSERT: &str =
    "INSERT INTO agent_diary (id, agent_id, kind, content, embedding, ttl_until, created_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7)
        RETURNING id, agent_id, kind, content, ttl_until, created_at";

const RECENT: &str = "SELECT id, agent_id, kind, content, ttl_until, created_at
        FROM agent_diary
        WHERE agent_id = $1 AND (ttl_until IS NULL OR ttl_until > $2)
        ORDER BY created_at DESC, id DESC
        OFFSET $3 LIMIT $4";

const SIMILAR: NearestSql = NearestSql {
    approx: "WITH nearest AS MATERIALIZED (
            SELECT id, agent_id, kind, content, ttl_until, created_at,
                   embedding <=> $2 AS distance
            FROM agent_diary
            WHERE agent_id = $1 AND embedding IS NOT NULL
              AND (ttl_until IS NULL OR ttl_until > $3)
            ORDER BY embedding <=> $2
            LIMIT $4)
        SELECT * FROM nearest ORDER BY distance + 0, created_at DESC, id DESC",
    exact: "SELECT * FROM (
            SELECT id, agent_id, kind, content, ttl_until, created_at,
                   embedding <=> $2 AS distance
            FROM agent_diary
            WHERE agent_id = $1 AND embedding IS NOT NULL
              AND (ttl_until IS NULL OR ttl_until > $3)) live
        ORDER BY distance + 0, created_at DESC, id DESC
        LIMIT $4",
};

const COUNT: &str = "SELECT count(*) FROM agent_diary
        WHERE agent_id = $1 AND (ttl_until IS NULL OR ttl_until > $2)";

const DELETE: &str = "DELETE FROM agent_diary WHERE agent_id = $1 AND id = $2";

const DELETE_EXPIRED: &str = "DELETE FROM agent_diary WHERE ttl_until <= $1";

/// [`Diary`] over PostgreSQL.
#[derive(Clone, Debug)]
pub struct PostgresDiary {
    db: Database,
    dim: usize,
}

impl PostgresDiary {
    /// `dim`: the embedding column's width (see
    /// `crewlet_store::stored_embedding_dim`).
    pub fn new(db: Database, dim: usize) -> Self {
        Self { db, dim }
    }
}

fn read(r: &Row) -> Result<DiaryEntry, MemoryError> {
    let d = decode(TABLE);
    let kind: String = r.try_get("kind").map_err(&d)?;
    Ok(DiaryEntry {
        id: r.try_get("id").map_err(&d)?,
        agent_id: AgentId::from_uuid(r.try_get("agent_id").map_err(&d)?),
        kind: DiaryKind::parse(&kind).ok_or_else(|| {
            crewlet_store::StoreError::decode(TABLE, format!("unknown kind `{kind}`"))
        })?,
        content: r.try_get("content").map_err(&d)?,
        ttl_until: r.try_get("ttl_until").map_err(&d)?,
        created_at: r.try_get("created_at").map_err(&d)?,
    })
}

#[async_trait]
impl Diary for PostgresDiary {
    async fn write(
        &self,
        entry: NewDiaryEntry,
        now: DateTime<Utc>,
    ) -> Result<DiaryWrite, MemoryError> {
        require_text("diary content", &entry.content)?;
        let embedding = padded_opt("diary embedding", entry.embedding.as_deref(), self.dim)?;
        let agent = entry.agent_id.as_uuid();
        let what = format!("writing to the diary of {}", entry.agent_id);
        let mut client = self.db.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(query_err(what.clone()))?;
        execute(&tx, &what, LOCK, &[&agent, &entry.content]).await?;
        let existing = query_opt(
            &tx,
            &what,
            FIND_LIVE_DUPLICATE,
            &[&agent, &entry.content, &now],
        )
        .await?;
        let written = match existing {
            Some(row) => DiaryWrite::Duplicate(read(&row)?),
            None => {
                let row = query(
                    &tx,
                    &what,
                    INSERT,
                    &[
                        &Uuid::now_v7(),
                        &agent,
                        &entry.kind.as_str(),
                        &entry.content,
                        &embedding,
                        &entry.ttl_until,
                        &now,
                    ],
                )
                .await?;
                let row = row.first().ok_or_else(|| {
                    crewlet_store::StoreError::decode(TABLE, "the insert returned no row")
                })?;
                DiaryWrite::Written(read(row)?)
            }
        };
        tx.commit().await.map_err(query_err(what))?;
        Ok(written)
    }

    async fn recent(
        &self,
        agent: &AgentId,
        page: Page,
        now: DateTime<Utc>,
    ) -> Result<Vec<DiaryEntry>, MemoryError> {
        let client = self.db.client().await?;
        let rows = query(
            &client,
            &format!("reading the diary of {agent}"),
            RECENT,
            &[
                &agent.as_uuid(),
                &now,
                &sql_int(page.offset),
                &sql_int(page.limit),
            ],
        )
        .await?;
        rows.iter().map(read).collect()
    }

    async fn similar(
        &self,
        agent: &AgentId,
        query_vector: &[f32],
        limit: usize,
        now: DateTime<Utc>,
    ) -> Result<Vec<Scored<DiaryEntry>>, MemoryError> {
        let q = padded("diary query vector", query_vector, self.dim)?;
        let rows = nearest(
            &self.db,
            &format!("searching the diary of {agent}"),
            &SIMILAR,
            &[&agent.as_uuid(), &q, &now, &sql_int(limit)],
            limit,
        )
        .await?;
        rows.iter()
            .map(|r| {
                Ok(Scored {
                    item: read(r)?,
                    score: score(r, TABLE)?,
                })
            })
            .collect()
    }

    async fn count(&self, agent: &AgentId, now: DateTime<Utc>) -> Result<usize, MemoryError> {
        let client = self.db.client().await?;
        let rows = query(
            &client,
            &format!("counting the diary of {agent}"),
            COUNT,
            &[&agent.as_uuid(), &now],
        )
        .await?;
        let n: i64 = match rows.first() {
            Some(r) => r.try_get(0).map_err(decode(TABLE))?,
            None => 0,
        };
        Ok(super::count(n))
    }

    async fn delete(&self, agent: &AgentId, id: Uuid) -> Result<bool, MemoryError> {
        let client = self.db.client().await?;
        let n = execute(
            &client,
            &format!("deleting diary row {id} of {agent}"),
            DELETE,
            &[&agent.as_uuid(), &id],
        )
        .await?;
        Ok(n > 0)
    }

    async fn delete_expired(&self, now: DateTime<Utc>) -> Result<u64, MemoryError> {
        let client = self.db.client().await?;
        execute(
            &client,
            "deleting expired diary rows",
            DELETE_EXPIRED,
            &[&now],
        )
        .await
    }
}
