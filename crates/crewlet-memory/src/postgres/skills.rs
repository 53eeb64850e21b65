//! Synthesized skills over `synthesized_skills` and
//! `synthesized_skill_versions`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewlet_store::{Database, GenericClient, StoreError, query_err};
use tokio_postgres::Row;
use tokio_postgres::types::Json;
use uuid::Uuid;

use super::{
    NearestSql, decode, execute, nearest, padded, padded_opt, query, query_opt, score, sql_int,
};
use crate::error::MemoryError;
use crate::repos::Skills;
use crate::rules::{require_text, skill_body, skill_cap, skill_conflict, skill_not_found};
use crate::types::{NewSkill, Scored, Skill, SkillChange, SkillLimits, SkillState, SkillVersion};

const TABLE: &str = "synthesized_skills";
const VERSIONS: &str = "synthesized_skill_versions";

/// Serializes skill creation per agent, so two creates cannot both pass
/// the per-agent cap.
const LOCK_AGENT: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('synthesized_skills:' || $1::text, 0))";

const EXISTS: &str = "SELECT 1 FROM synthesized_skills WHERE agent_handle = $1 AND name = $2";

const LIVE_COUNT: &str = "SELECT count(*) FROM synthesized_skills
        WHERE agent_handle = $1 AND state IN ('active', 'stale')";

const INSERT: &str = "INSERT INTO synthesized_skills
            (id, agent_handle, name, description, body, tool_sequence, embedding)
        VALUES ($1, $2, $3, $4, $5, $6, $7)
        RETURNING id, agent_handle, name, description, body, tool_sequence, state, version,
            use_count, last_used_at, created_at, updated_at";

const GET: &str = "SELECT id, agent_handle, name, description, body, tool_sequence, state, version,
            use_count, last_used_at, created_at, updated_at
        FROM synthesized_skills WHERE agent_handle = $1 AND name = $2";

const GET_FOR_UPDATE: &str = "SELECT id, agent_handle, name, description, body, tool_sequence,
            state, version, use_count, last_used_at, created_at, updated_at
        FROM synthesized_skills WHERE agent_handle = $1 AND name = $2
        FOR UPDATE";

const LIST: &str =
    "SELECT id, agent_handle, name, description, body, tool_sequence, state, version,
            use_count, last_used_at, created_at, updated_at
        FROM synthesized_skills
        WHERE agent_handle = $1 AND (cardinality($2::text[]) = 0 OR state = ANY($2))
        ORDER BY name COLLATE \"C\"";

const ARCHIVE: &str = "INSERT INTO synthesized_skill_versions
            (skill_id, version, description, body, change_note)
        VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (skill_id, version) DO UPDATE
        SET description = EXCLUDED.description, body = EXCLUDED.body,
            change_note = EXCLUDED.change_note, created_at = now()";

const APPLY: &str = "UPDATE synthesized_skills
        SET description = COALESCE($2, description), body = $3,
            embedding = COALESCE($4, embedding), version = version + 1, updated_at = now()
        WHERE id = $1
        RETURNING id, agent_handle, name, description, body, tool_sequence, state, version,
            use_count, last_used_at, created_at, updated_at";

const PRUNE: &str = "DELETE FROM synthesized_skill_versions
        WHERE skill_id = $1 AND version NOT IN (
            SELECT version FROM synthesized_skill_versions
            WHERE skill_id = $1 ORDER BY version DESC LIMIT $2)";

const LIST_VERSIONS: &str = "SELECT v.skill_id, v.version, v.description, v.body, v.change_note,
            v.created_at
        FROM synthesized_skill_versions v
        JOIN synthesized_skills s ON s.id = v.skill_id
        WHERE s.agent_handle = $1 AND s.name = $2
        ORDER BY v.version DESC";

/// `last_used_at` never moves back (GREATEST ignores the NULL of a first use).
const RECORD_USE: &str = "UPDATE synthesized_skills
        SET use_count = use_count + 1, last_used_at = GREATEST(last_used_at, $3)
        WHERE agent_handle = $1 AND name = $2
        RETURNING id, agent_handle, name, description, body, tool_sequence, state, version,
            use_count, last_used_at, created_at, updated_at";

const SET_STATE: &str = "UPDATE synthesized_skills SET state = $3, updated_at = now()
        WHERE agent_handle = $1 AND name = $2
        RETURNING id, agent_handle, name, description, body, tool_sequence, state, version,
            use_count, last_used_at, created_at, updated_at";

const SIMILAR: NearestSql = NearestSql {
    approx: "WITH nearest AS MATERIALIZED (
            SELECT id, agent_handle, name, description, body, tool_sequence, state, version,
                   use_count, last_used_at, created_at, updated_at,
                   embedding <=> $2 AS distance
            FROM synthesized_skills
            WHERE agent_handle = $1 AND state = 'active' AND embedding IS NOT NULL
            ORDER BY embedding <=> $2
            LIMIT $3)
        SELECT * FROM nearest ORDER BY distance + 0, name COLLATE \"C\"",
    exact: "SELECT * FROM (
            SELECT id, agent_handle, name, description, body, tool_sequence, state, version,
                   use_count, last_used_at, created_at, updated_at,
                   embedding <=> $2 AS distance
            FROM synthesized_skills
            WHERE agent_handle = $1 AND state = 'active' AND embedding IS NOT NULL) active
        ORDER BY distance + 0, name COLLATE \"C\"
        LIMIT $3",
};

/// [`Skills`] over PostgreSQL.
#[derive(Clone, Debug)]
pub struct PostgresSkills {
    db: Database,
    dim: usize,
}

impl PostgresSkills {
    /// `dim`: the embedding column's width.
    pub fn new(db: Database, dim: usize) -> Self {
        Self { db, dim }
    }
}

fn read(r: &Row) -> Result<Skill, MemoryError> {
    let d = decode(TABLE);
    let state: String = r.try_get("state").map_err(&d)?;
    let Json(tool_sequence): Json<Vec<String>> = r.try_get("tool_sequence").map_err(&d)?;
    Ok(Skill {
        id: r.try_get("id").map_err(&d)?,
        agent_handle: r.try_get("agent_handle").map_err(&d)?,
        name: r.try_get("name").map_err(&d)?,
        description: r.try_get("description").map_err(&d)?,
        body: r.try_get("body").map_err(&d)?,
        tool_sequence,
        state: SkillState::parse(&state)
            .ok_or_else(|| StoreError::decode(TABLE, format!("unknown state `{state}`")))?,
        version: r.try_get("version").map_err(&d)?,
        use_count: r.try_get("use_count").map_err(&d)?,
        last_used_at: r.try_get("last_used_at").map_err(&d)?,
        created_at: r.try_get("created_at").map_err(&d)?,
        updated_at: r.try_get("updated_at").map_err(&d)?,
    })
}

fn read_version(r: &Row) -> Result<SkillVersion, MemoryError> {
    let d = decode(VERSIONS);
    Ok(SkillVersion {
        skill_id: r.try_get("skill_id").map_err(&d)?,
        version: r.try_get("version").map_err(&d)?,
        description: r.try_get("description").map_err(&d)?,
        body: r.try_get("body").map_err(&d)?,
        change_note: r.try_get("change_note").map_err(&d)?,
        created_at: r.try_get("created_at").map_err(&d)?,
    })
}

/// The one row an UPDATE ... RETURNING of a named skill gave, or NotFound.
fn one(rows: &[Row], agent_handle: &str, name: &str) -> Result<Skill, MemoryError> {
    rows.first()
        .map(read)
        .unwrap_or_else(|| Err(skill_not_found(agent_handle, name)))
}

async fn live_count(
    client: &impl GenericClient,
    what: &str,
    agent_handle: &str,
) -> Result<usize, MemoryError> {
    let rows = query(client, what, LIVE_COUNT, &[&agent_handle]).await?;
    let n: i64 = match rows.first() {
        Some(r) => r.try_get(0).map_err(decode(TABLE))?,
        None => 0,
    };
    Ok(super::count(n))
}

#[async_trait]
impl Skills for PostgresSkills {
    async fn create(&self, skill: NewSkill, limits: SkillLimits) -> Result<Skill, MemoryError> {
        require_text("skill agent handle", &skill.agent_handle)?;
        require_text("skill name", &skill.name)?;
        skill_body(&skill.name, &skill.body, limits)?;
        let embedding = padded_opt("skill embedding", skill.embedding.as_deref(), self.dim)?;
        let (handle, name) = (skill.agent_handle.as_str(), skill.name.as_str());
        let what = format!("creating skill `{name}` of `{handle}`");
        let mut client = self.db.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(query_err(what.clone()))?;
        execute(&tx, &what, LOCK_AGENT, &[&handle]).await?;
        if query_opt(&tx, &what, EXISTS, &[&handle, &name])
            .await?
            .is_some()
        {
            return Err(skill_conflict(handle, name));
        }
        if live_count(&tx, &what, handle).await? >= limits.max_per_agent {
            return Err(skill_cap(handle, limits));
        }
        let rows = query(
            &tx,
            &what,
            INSERT,
            &[
                &Uuid::now_v7(),
                &handle,
                &name,
                &skill.description,
                &skill.body,
                &Json(&skill.tool_sequence),
                &embedding,
            ],
        )
        .await?;
        let created = one(&rows, handle, name)?;
        tx.commit().await.map_err(query_err(what))?;
        Ok(created)
    }

    async fn get(&self, agent_handle: &str, name: &str) -> Result<Option<Skill>, MemoryError> {
        let client = self.db.client().await?;
        query_opt(
            &client,
            &format!("reading skill `{name}` of `{agent_handle}`"),
            GET,
            &[&agent_handle, &name],
        )
        .await?
        .map(|r| read(&r))
        .transpose()
    }

    async fn list(
        &self,
        agent_handle: &str,
        states: &[SkillState],
    ) -> Result<Vec<Skill>, MemoryError> {
        let states: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
        let client = self.db.client().await?;
        let rows = query(
            &client,
            &format!("listing the skills of `{agent_handle}`"),
            LIST,
            &[&agent_handle, &states],
        )
        .await?;
        rows.iter().map(read).collect()
    }

    async fn update(
        &self,
        agent_handle: &str,
        name: &str,
        change: SkillChange,
        limits: SkillLimits,
    ) -> Result<Skill, MemoryError> {
        skill_body(name, &change.body, limits)?;
        let embedding = padded_opt("skill embedding", change.embedding.as_deref(), self.dim)?;
        let what = format!("updating skill `{name}` of `{agent_handle}`");
        let mut client = self.db.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(query_err(what.clone()))?;
        let current = query_opt(&tx, &what, GET_FOR_UPDATE, &[&agent_handle, &name])
            .await?
            .ok_or_else(|| skill_not_found(agent_handle, name))?;
        let current = read(&current)?;
        execute(
            &tx,
            &what,
            ARCHIVE,
            &[
                &current.id,
                &current.version,
                &current.description,
                &current.body,
                &change.change_note,
            ],
        )
        .await?;
        let rows = query(
            &tx,
            &what,
            APPLY,
            &[&current.id, &change.description, &change.body, &embedding],
        )
        .await?;
        let updated = one(&rows, agent_handle, name)?;
        execute(
            &tx,
            &what,
            PRUNE,
            &[&current.id, &sql_int(limits.max_versions)],
        )
        .await?;
        tx.commit().await.map_err(query_err(what))?;
        Ok(updated)
    }

    async fn versions(
        &self,
        agent_handle: &str,
        name: &str,
    ) -> Result<Vec<SkillVersion>, MemoryError> {
        let what = format!("reading the versions of skill `{name}` of `{agent_handle}`");
        let client = self.db.client().await?;
        if query_opt(&client, &what, EXISTS, &[&agent_handle, &name])
            .await?
            .is_none()
        {
            return Err(skill_not_found(agent_handle, name));
        }
        let rows = query(&client, &what, LIST_VERSIONS, &[&agent_handle, &name]).await?;
        rows.iter().map(read_version).collect()
    }

    async fn record_use(
        &self,
        agent_handle: &str,
        name: &str,
        at: DateTime<Utc>,
    ) -> Result<Skill, MemoryError> {
        let client = self.db.client().await?;
        let rows = query(
            &client,
            &format!("recording a use of skill `{name}` of `{agent_handle}`"),
            RECORD_USE,
            &[&agent_handle, &name, &at],
        )
        .await?;
        one(&rows, agent_handle, name)
    }

    async fn set_state(
        &self,
        agent_handle: &str,
        name: &str,
        state: SkillState,
    ) -> Result<Skill, MemoryError> {
        let client = self.db.client().await?;
        let rows = query(
            &client,
            &format!(
                "setting skill `{name}` of `{agent_handle}` {}",
                state.as_str()
            ),
            SET_STATE,
            &[&agent_handle, &name, &state.as_str()],
        )
        .await?;
        one(&rows, agent_handle, name)
    }

    async fn similar(
        &self,
        agent_handle: &str,
        query_vector: &[f32],
        limit: usize,
    ) -> Result<Vec<Scored<Skill>>, MemoryError> {
        let q = padded("skill query vector", query_vector, self.dim)?;
        let rows = nearest(
            &self.db,
            &format!("searching the skills of `{agent_handle}`"),
            &SIMILAR,
            &[&agent_handle, &q, &sql_int(limit)],
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
}
