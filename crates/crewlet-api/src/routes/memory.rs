//! `GET /agents/{id}/memory`: what one agent seat remembers (diary,
//! episodes, synthesized skills, counterparty profiles, onboarding), read
//! from the memory stores the process was given (`ApiBuilder::memory`).
//! Never shows an embedding.

use std::future::Future;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use crewlet_core::AgentId;
use crewlet_memory::{
    CounterpartyProfile, DiaryEntry, Episode, EpisodeFilter, MemoryError, MemoryStores,
    OnboardingMarker, Page, Skill,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::auth::ReadAccess;
use crate::error::{ErrorBody, HttpError, HttpResult};
use crate::routes::agents::agent_not_found;
use crate::routes::query_error;
use crate::state::{ApiState, NO_MEMORY};

/// Page size of `diary`, `episodes` and `profiles` unless `limit` says.
const DEFAULT_LIMIT: u32 = 20;
/// The largest `limit`.
const MAX_LIMIT: u32 = 100;
/// The largest `offset`.
const MAX_OFFSET: u32 = 1_000_000;

/// One part of an agent's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemorySection {
    Diary,
    Episodes,
    Skills,
    Profiles,
    Onboarding,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MemoryParams {
    /// Page size of `diary`, `episodes` and `profiles`: default 20, 1 to 100.
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// How many rows of each of `diary`, `episodes` and `profiles` to skip
    /// (newest first): default 0, at most 1000000.
    #[param(minimum = 0, maximum = 1000000)]
    pub offset: Option<u32>,
    /// Only this section (default: all of them).
    #[param(inline)]
    pub section: Option<MemorySection>,
}

/// `GET /agents/{id}/memory`. With `section`, only that section is present.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentMemory {
    pub agent_id: String,
    pub handle: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diary: Option<DiaryPage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub episodes: Option<EpisodePage>,
    /// Every synthesized skill of the seat (active, stale, archived), by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<SkillItem>>,
    /// What the seat knows of the people it works with, most recently seen
    /// first (paged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profiles: Option<Vec<ProfileItem>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub onboarding: Option<Onboarding>,
}

/// Live diary rows (no TTL, or one still ahead), newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct DiaryPage {
    pub items: Vec<DiaryItem>,
    /// Live rows in all.
    pub total: usize,
}

/// One diary row.
#[derive(Debug, Serialize, ToSchema)]
pub struct DiaryItem {
    pub id: Uuid,
    /// `diary_long` (a durable fact) or `diary_short` (expires at `ttl_until`).
    pub kind: String,
    /// Verbatim; content (left out without `read:content`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    pub ttl_until: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// Episodes (one per turn, or a compacted summary of many), newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct EpisodePage {
    pub items: Vec<EpisodeItem>,
    /// Raw episodes in all.
    pub raw: usize,
    /// Compacted episodes in all.
    pub compacted: usize,
}

/// One episode.
#[derive(Debug, Serialize, ToSchema)]
pub struct EpisodeItem {
    pub id: Uuid,
    pub task_id: Option<String>,
    /// Content (left out without `read:content`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_summary: Option<String>,
    /// Content (left out without `read:content`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_summary: Option<String>,
    /// Tool names in call order.
    pub tool_sequence: Vec<String>,
    /// Synthesized skills the turn loaded.
    pub skills_used: Vec<String>,
    /// `done`, `failed`, `direct` or `skip`.
    pub review_outcome: Option<String>,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
    pub duration_ms: i64,
    /// `raw` or `compacted`.
    pub kind: String,
}

/// One synthesized skill, at its current version.
#[derive(Debug, Serialize, ToSchema)]
pub struct SkillItem {
    pub id: Uuid,
    pub name: String,
    /// Content (left out without `read:content`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Markdown, verbatim; content (left out without `read:content`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    pub tool_sequence: Vec<String>,
    /// `active`, `stale` or `archived`.
    pub state: String,
    pub version: i32,
    /// Earlier versions kept.
    pub versions: usize,
    pub use_count: i32,
    pub last_used_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What the seat knows of one person on one platform.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProfileItem {
    pub subject: String,
    pub platform: String,
    pub display_name: Option<String>,
    /// What the seat knows of them; content (left out without
    /// `read:content`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Observed traits (a JSON object); content (left out without
    /// `read:content`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub traits: Option<serde_json::Value>,
    pub interaction_count: i32,
    pub last_seen_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// First-turn onboarding: done for the manager chain whose hash is
/// `chain_hash` (`null`s when not onboarded).
#[derive(Debug, Serialize, ToSchema)]
pub struct Onboarding {
    pub onboarded: bool,
    pub chain_hash: Option<String>,
    pub onboarded_at: Option<DateTime<Utc>>,
}

impl AgentMemory {
    /// What a caller without `read:content` sees: counts, kinds, ids,
    /// dates, names, tool sequences; no memory text.
    fn without_content(mut self) -> Self {
        for d in self.diary.iter_mut().flat_map(|p| p.items.iter_mut()) {
            d.content = None;
        }
        for e in self.episodes.iter_mut().flat_map(|p| p.items.iter_mut()) {
            e.task_summary = None;
            e.plan_summary = None;
        }
        for s in self.skills.iter_mut().flatten() {
            s.description = None;
            s.body = None;
        }
        for p in self.profiles.iter_mut().flatten() {
            p.summary = None;
            p.traits = None;
        }
        self
    }
}

impl From<DiaryEntry> for DiaryItem {
    fn from(e: DiaryEntry) -> Self {
        Self {
            id: e.id,
            kind: e.kind.as_str().to_owned(),
            content: Some(e.content),
            ttl_until: e.ttl_until,
            created_at: e.created_at,
        }
    }
}

impl From<Episode> for EpisodeItem {
    fn from(e: Episode) -> Self {
        Self {
            id: e.id,
            task_id: e.task_id,
            task_summary: Some(e.task_summary),
            plan_summary: Some(e.plan_summary),
            tool_sequence: e.tool_sequence,
            skills_used: e.skills_used,
            review_outcome: e.review_outcome,
            started_at: e.started_at,
            ended_at: e.ended_at,
            duration_ms: e.duration_ms,
            kind: e.kind.as_str().to_owned(),
        }
    }
}

impl SkillItem {
    fn new(s: Skill, versions: usize) -> Self {
        Self {
            id: s.id,
            name: s.name,
            description: Some(s.description),
            body: Some(s.body),
            tool_sequence: s.tool_sequence,
            state: s.state.as_str().to_owned(),
            version: s.version,
            versions,
            use_count: s.use_count,
            last_used_at: s.last_used_at,
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

impl From<CounterpartyProfile> for ProfileItem {
    fn from(p: CounterpartyProfile) -> Self {
        Self {
            subject: p.subject,
            platform: p.platform,
            display_name: p.display_name,
            summary: Some(p.summary),
            traits: Some(p.traits),
            interaction_count: p.interaction_count,
            last_seen_at: p.last_seen_at,
            created_at: p.created_at,
            updated_at: p.updated_at,
        }
    }
}

impl From<Option<OnboardingMarker>> for Onboarding {
    fn from(m: Option<OnboardingMarker>) -> Self {
        Self {
            onboarded: m.is_some(),
            chain_hash: m.as_ref().map(|m| m.chain_hash.clone()),
            onboarded_at: m.map(|m| m.onboarded_at),
        }
    }
}

/// `limit` and `offset`, checked.
fn page(params: &MemoryParams) -> HttpResult<Page> {
    let limit = params.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(HttpError::bad_request(format!(
            "`limit` {limit} is not between 1 and {MAX_LIMIT}"
        )));
    }
    let offset = params.offset.unwrap_or(0);
    if offset > MAX_OFFSET {
        return Err(HttpError::bad_request(format!(
            "`offset` {offset} is over {MAX_OFFSET}"
        )));
    }
    let as_usize = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
    Ok(Page {
        offset: as_usize(offset),
        limit: as_usize(limit),
    })
}

/// The agent seat `{id}` names (agent id or handle), as `/agents/{id}`
/// resolves it: its agent id and handle.
fn seat(state: &ApiState, id: &str) -> HttpResult<(AgentId, String)> {
    let view = state.view().ok_or_else(|| agent_not_found(id))?;
    let agent = view
        .agent(id)
        .filter(|a| a.kind != "human")
        .ok_or_else(|| agent_not_found(id))?;
    let agent_id = view
        .organization()
        .and_then(|org| org.seat(&agent.handle).map(|s| s.agent_id))
        .or_else(|| agent.id.parse().ok())
        .ok_or_else(|| {
            HttpError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                format!(
                    "seat `{}` has an agent id that is not a uuid: `{}`",
                    agent.handle, agent.id
                ),
            )
        })?;
    Ok((agent_id, agent.handle))
}

fn memory(state: &ApiState) -> HttpResult<MemoryStores> {
    let inner = state.inner();
    inner.memory.clone().ok_or_else(|| {
        HttpError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "memory_not_configured",
            inner.memory_missing.as_deref().unwrap_or(NO_MEMORY),
        )
    })
}

fn memory_error(handle: &str, e: &MemoryError) -> HttpError {
    let error = HttpError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "memory_unavailable",
        format!("cannot read the memory of `{handle}`: {e}"),
    );
    if e.is_transient() {
        error.retry_after(5)
    } else {
        error
    }
}

/// Runs `read` when its section is wanted.
async fn wanted<T>(
    on: bool,
    read: impl Future<Output = Result<T, MemoryError>>,
) -> Result<Option<T>, MemoryError> {
    if on { read.await.map(Some) } else { Ok(None) }
}

async fn diary(
    m: &MemoryStores,
    agent: &AgentId,
    page: Page,
    now: DateTime<Utc>,
) -> Result<DiaryPage, MemoryError> {
    let (rows, total) =
        futures::try_join!(m.diary.recent(agent, page, now), m.diary.count(agent, now))?;
    Ok(DiaryPage {
        items: rows.into_iter().map(DiaryItem::from).collect(),
        total,
    })
}

async fn episodes(m: &MemoryStores, handle: &str, page: Page) -> Result<EpisodePage, MemoryError> {
    let (rows, counts) = futures::try_join!(
        m.episodes.recent(handle, EpisodeFilter::default(), page),
        m.episodes.counts(handle)
    )?;
    Ok(EpisodePage {
        items: rows.into_iter().map(EpisodeItem::from).collect(),
        raw: counts.raw,
        compacted: counts.compacted,
    })
}

async fn skills(m: &MemoryStores, handle: &str) -> Result<Vec<SkillItem>, MemoryError> {
    let list = m.skills.list(handle, &[]).await?;
    let versions = futures::future::try_join_all(
        list.iter()
            .map(|s| async { m.skills.versions(handle, &s.name).await.map(|v| v.len()) }),
    )
    .await?;
    Ok(list
        .into_iter()
        .zip(versions)
        .map(|(s, n)| SkillItem::new(s, n))
        .collect())
}

async fn profiles(
    m: &MemoryStores,
    handle: &str,
    page: Page,
) -> Result<Vec<ProfileItem>, MemoryError> {
    let rows = m.profiles.list(handle, page).await?;
    Ok(rows.into_iter().map(ProfileItem::from).collect())
}

/// What one agent seat remembers: its diary (live rows), episodes,
/// synthesized skills, counterparty profiles and onboarding marker. The
/// text of each (diary rows, task and plan summaries, skill descriptions
/// and bodies, profile summaries and traits) needs `read:content`.
/// `limit`/`offset` page the diary, the episodes and the profiles.
#[utoipa::path(get, path = "/agents/{id}/memory", tag = "memory",
    params(("id" = String, Path, description = "agent id (uuid) or handle"), MemoryParams),
    responses(
        (status = 200, body = AgentMemory,
            headers(("x-crewlet-content" = String, description = "`hidden`: memory text was left out (the caller lacks `read:content`); `shown`: nothing was"))),
        (status = 400, description = "a bad query string: `limit` not 1..=100, `offset` not 0..=1000000, an unknown `section`", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "`Agent not found` (also before a company is active, and for human seats)", body = ErrorBody),
        (status = 503, description = "`memory_not_configured`: this process has no memory stores (a standalone api without a database, or one whose memory stores failed to open); `memory_unavailable`: the memory store failed (Retry-After: 5 when it may pass)", body = ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn agent_memory(
    ReadAccess(caller): ReadAccess,
    State(state): State<ApiState>,
    Path(id): Path<String>,
    params: Result<Query<MemoryParams>, QueryRejection>,
) -> HttpResult<axum::response::Response> {
    let Query(params) = params.map_err(query_error)?;
    let page = page(&params)?;
    let (agent_id, handle) = seat(&state, &id)?;
    let m = memory(&state)?;
    let want = |s: MemorySection| params.section.is_none_or(|only| only == s);
    let now = Utc::now();
    let (diary, episodes, skills, profiles, onboarding) = futures::try_join!(
        wanted(want(MemorySection::Diary), diary(&m, &agent_id, page, now)),
        wanted(want(MemorySection::Episodes), episodes(&m, &handle, page)),
        wanted(want(MemorySection::Skills), skills(&m, &handle)),
        wanted(want(MemorySection::Profiles), profiles(&m, &handle, page)),
        wanted(want(MemorySection::Onboarding), m.onboarding.get(&agent_id)),
    )
    .map_err(|e| memory_error(&handle, &e))?;
    let memory = AgentMemory {
        agent_id: agent_id.to_string(),
        handle,
        diary,
        episodes,
        skills,
        profiles,
        onboarding: onboarding.map(Onboarding::from),
    };
    let memory = if caller.content {
        memory
    } else {
        memory.without_content()
    };
    Ok(axum::response::IntoResponse::into_response((
        crate::content::header(caller.content),
        Json(memory),
    )))
}
