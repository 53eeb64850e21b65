//! The episodes over `episodes` (partitioned by `ended_at`).

use async_trait::async_trait;
use crewlet_core::AgentId;
use crewlet_store::{Database, StoreError, query_err};
use tokio_postgres::Row;
use tokio_postgres::types::Json;
use uuid::Uuid;

use super::{
    NearestSql, Params, decode, execute, nearest, padded, padded_opt, query, score, sql_int,
};
use crate::error::MemoryError;
use crate::repos::{EpisodeFilter, Episodes};
use crate::rules::{compacted as check_compacted, require_text};
use crate::types::{Episode, EpisodeCounts, EpisodeKind, NewEpisode, Page, Scored};

const TABLE: &str = "episodes";

/// The primary key `(ended_at, id)` makes a second record of one turn a
/// no-op.
const INSERT: &str = "INSERT INTO episodes (id, agent_handle, agent_id, turn_id, task_id,
            task_summary, plan_summary, tool_sequence, skills_used, review_outcome,
            started_at, ended_at, duration_ms, embedding, kind, work_key)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
        ON CONFLICT DO NOTHING";

const CONTAINS: &str = "SELECT 1 FROM episodes WHERE agent_handle = $1 AND id = $2 LIMIT 1";

const RECENT: &str = "SELECT id, agent_handle, agent_id, task_id, task_summary, plan_summary,
            tool_sequence, skills_used, review_outcome, started_at, ended_at, duration_ms,
            kind, work_key
        FROM episodes
        WHERE agent_handle = $1
          AND ($2::text IS NULL OR review_outcome = $2)
          AND ($3::text IS NULL OR kind = $3)
        ORDER BY ended_at DESC, id DESC
        OFFSET $4 LIMIT $5";

const SIMILAR: NearestSql = NearestSql {
    approx: "WITH nearest AS MATERIALIZED (
            SELECT id, agent_handle, agent_id, task_id, task_summary, plan_summary,
                   tool_sequence, skills_used, review_outcome, started_at, ended_at,
                   duration_ms, kind, work_key, embedding <=> $2 AS distance
            FROM episodes
            WHERE agent_handle = $1 AND embedding IS NOT NULL
              AND ($3::text IS NULL OR review_outcome = $3)
              AND ($4::text IS NULL OR kind = $4)
            ORDER BY embedding <=> $2
            LIMIT $5)
        SELECT * FROM nearest ORDER BY distance + 0, ended_at DESC, id DESC",
    exact: "SELECT * FROM (
            SELECT id, agent_handle, agent_id, task_id, task_summary, plan_summary,
                   tool_sequence, skills_used, review_outcome, started_at, ended_at,
                   duration_ms, kind, work_key, embedding <=> $2 AS distance
            FROM episodes
            WHERE agent_handle = $1 AND embedding IS NOT NULL
              AND ($3::text IS NULL OR review_outcome = $3)
              AND ($4::text IS NULL OR kind = $4)) matching
        ORDER BY distance + 0, ended_at DESC, id DESC
        LIMIT $5",
};

const COUNTS: &str = "SELECT count(*) FILTER (WHERE kind = 'raw'),
            count(*) FILTER (WHERE kind = 'compacted')
        FROM episodes WHERE agent_handle = $1";

const OVER_THRESHOLD: &str = "SELECT agent_handle, count(*) FROM episodes
        WHERE kind = 'raw'
        GROUP BY agent_handle
        HAVING count(*) > $1
        ORDER BY agent_handle COLLATE \"C\"";

const OLDEST_RAW: &str = "SELECT id, agent_handle, agent_id, task_id, task_summary, plan_summary,
            tool_sequence, skills_used, review_outcome, started_at, ended_at, duration_ms,
            kind, work_key
        FROM episodes
        WHERE agent_handle = $1 AND kind = 'raw'
        ORDER BY ended_at, id
        LIMIT $2";

const DELETE_REPLACED: &str =
    "DELETE FROM episodes WHERE agent_handle = $1 AND kind = 'raw' AND id = ANY($2)";

/// [`Episodes`] over PostgreSQL.
#[derive(Clone, Debug)]
pub struct PostgresEpisodes {
    db: Database,
    dim: usize,
}

impl PostgresEpisodes {
    /// `dim`: the embedding column's width.
    pub fn new(db: Database, dim: usize) -> Self {
        Self { db, dim }
    }
}

fn read(r: &Row) -> Result<Episode, MemoryError> {
    let d = decode(TABLE);
    let kind: String = r.try_get("kind").map_err(&d)?;
    let agent_id: Option<Uuid> = r.try_get("agent_id").map_err(&d)?;
    let Json(tool_sequence): Json<Vec<String>> = r.try_get("tool_sequence").map_err(&d)?;
    let Json(skills_used): Json<Vec<String>> = r.try_get("skills_used").map_err(&d)?;
    Ok(Episode {
        id: r.try_get("id").map_err(&d)?,
        agent_handle: r.try_get("agent_handle").map_err(&d)?,
        agent_id: agent_id.map(AgentId::from_uuid),
        task_id: r.try_get("task_id").map_err(&d)?,
        task_summary: r.try_get("task_summary").map_err(&d)?,
        plan_summary: r.try_get("plan_summary").map_err(&d)?,
        tool_sequence,
        skills_used,
        review_outcome: r.try_get("review_outcome").map_err(&d)?,
        started_at: r.try_get("started_at").map_err(&d)?,
        ended_at: r.try_get("ended_at").map_err(&d)?,
        duration_ms: r.try_get("duration_ms").map_err(&d)?,
        kind: EpisodeKind::parse(&kind)
            .ok_or_else(|| StoreError::decode(TABLE, format!("unknown kind `{kind}`")))?,
        work_key: r.try_get("work_key").map_err(&d)?,
    })
}

/// Inserts one episode on `client`; whether a row was written.
async fn insert(
    client: &impl crewlet_store::GenericClient,
    new: &NewEpisode,
    dim: usize,
) -> Result<bool, MemoryError> {
    let e = &new.episode;
    require_text("episode agent handle", &e.agent_handle)?;
    let embedding = padded_opt("episode embedding", new.embedding.as_deref(), dim)?;
    let turn_id = (e.kind == EpisodeKind::Raw).then(|| e.id.to_string());
    let params: &Params<'_> = &[
        &e.id,
        &e.agent_handle,
        &e.agent_id.map(|a| a.as_uuid()),
        &turn_id,
        &e.task_id,
        &e.task_summary,
        &e.plan_summary,
        &Json(&e.tool_sequence),
        &Json(&e.skills_used),
        &e.review_outcome,
        &e.started_at,
        &e.ended_at,
        &e.duration_ms,
        &embedding,
        &e.kind.as_str(),
        &e.work_key,
    ];
    let what = format!("recording episode {} of `{}`", e.id, e.agent_handle);
    Ok(execute(client, &what, INSERT, params).await? == 1)
}

#[async_trait]
impl Episodes for PostgresEpisodes {
    async fn record(&self, episode: NewEpisode) -> Result<bool, MemoryError> {
        let client = self.db.client().await?;
        insert(&client, &episode, self.dim).await
    }

    async fn contains(&self, agent_handle: &str, id: Uuid) -> Result<bool, MemoryError> {
        let client = self.db.client().await?;
        let rows = query(
            &client,
            &format!("looking up episode {id} of `{agent_handle}`"),
            CONTAINS,
            &[&agent_handle, &id],
        )
        .await?;
        Ok(!rows.is_empty())
    }

    async fn recent(
        &self,
        agent_handle: &str,
        filter: EpisodeFilter<'_>,
        page: Page,
    ) -> Result<Vec<Episode>, MemoryError> {
        let client = self.db.client().await?;
        let kind = filter.kind.map(EpisodeKind::as_str);
        let rows = query(
            &client,
            &format!("reading the episodes of `{agent_handle}`"),
            RECENT,
            &[
                &agent_handle,
                &filter.outcome,
                &kind,
                &sql_int(page.offset),
                &sql_int(page.limit),
            ],
        )
        .await?;
        rows.iter().map(read).collect()
    }

    async fn similar(
        &self,
        agent_handle: &str,
        query_vector: &[f32],
        filter: EpisodeFilter<'_>,
        limit: usize,
    ) -> Result<Vec<Scored<Episode>>, MemoryError> {
        let q = padded("episode query vector", query_vector, self.dim)?;
        let kind = filter.kind.map(EpisodeKind::as_str);
        let rows = nearest(
            &self.db,
            &format!("searching the episodes of `{agent_handle}`"),
            &SIMILAR,
            &[&agent_handle, &q, &filter.outcome, &kind, &sql_int(limit)],
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

    async fn counts(&self, agent_handle: &str) -> Result<EpisodeCounts, MemoryError> {
        let client = self.db.client().await?;
        let rows = query(
            &client,
            &format!("counting the episodes of `{agent_handle}`"),
            COUNTS,
            &[&agent_handle],
        )
        .await?;
        let Some(r) = rows.first() else {
            return Ok(EpisodeCounts::default());
        };
        let d = decode(TABLE);
        Ok(EpisodeCounts {
            raw: super::count(r.try_get(0).map_err(&d)?),
            compacted: super::count(r.try_get(1).map_err(&d)?),
        })
    }

    async fn over_raw_threshold(
        &self,
        raw_threshold: usize,
    ) -> Result<Vec<(String, usize)>, MemoryError> {
        let client = self.db.client().await?;
        let rows = query(
            &client,
            "finding agents over the raw episode threshold",
            OVER_THRESHOLD,
            &[&sql_int(raw_threshold)],
        )
        .await?;
        let d = decode(TABLE);
        rows.iter()
            .map(|r| {
                let n: i64 = r.try_get(1).map_err(&d)?;
                Ok((r.try_get(0).map_err(&d)?, super::count(n)))
            })
            .collect()
    }

    async fn oldest_raw(
        &self,
        agent_handle: &str,
        limit: usize,
    ) -> Result<Vec<Episode>, MemoryError> {
        let client = self.db.client().await?;
        let rows = query(
            &client,
            &format!("reading the oldest raw episodes of `{agent_handle}`"),
            OLDEST_RAW,
            &[&agent_handle, &sql_int(limit)],
        )
        .await?;
        rows.iter().map(read).collect()
    }

    async fn compact(
        &self,
        agent_handle: &str,
        replaced: &[Uuid],
        compacted: NewEpisode,
    ) -> Result<usize, MemoryError> {
        check_compacted(agent_handle, &compacted.episode)?;
        let what = format!("compacting the episodes of `{agent_handle}`");
        let mut client = self.db.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(query_err(what.clone()))?;
        // Deleting first takes the rows' locks: a concurrent compaction of
        // the same rows waits here, then finds them gone and writes nothing.
        let removed = execute(&tx, &what, DELETE_REPLACED, &[&agent_handle, &replaced]).await?;
        if removed == 0 {
            tx.rollback().await.map_err(query_err(what))?;
            return Ok(0);
        }
        insert(&tx, &compacted, self.dim).await?;
        tx.commit().await.map_err(query_err(what))?;
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }
}
