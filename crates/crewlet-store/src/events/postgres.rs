use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use crewlet_core::{Category, Event, EventType, SpanId, TraceId};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::breakdown::{BreakdownQuery, PhaseGrain, PhaseTokens, TokenTotals, rollup_parts};
use super::query::{EventPage, EventQuery, MAX_TRACE_EVENTS};
use super::{EventStore, TokenBreakdown, check_breakdown, storable};
use crate::db::Database;
use crate::error::{StoreError, describe, query_err};
use crate::sql::from_i64;

/// The durable event store: `crewlet_events` in PostgreSQL.
#[derive(Clone, Debug)]
pub struct PostgresEventStore {
    db: Database,
}

/// The columns an insert writes, in order (also the binary COPY layout).
pub const INSERT_COLUMNS: &str = "event_time, event_id, event_type, source, category, summary,
     agent_id, agent_role, task_id, channel_id, sender, trace_id, span_id, parent_span_id,
     delegation_depth, tags, payload, phase, model, provider, auxiliary, turn_id,
     input_tokens, output_tokens, llm_calls";

const SELECT_COLUMNS: &str = "event_time, event_id, event_type, source, category, summary,
     agent_id, agent_role, task_id, channel_id, sender, trace_id, span_id, parent_span_id,
     delegation_depth, tags, payload";

/// One statement per batch: parallel arrays unnested into rows. Conflicts
/// (an id already stored, or repeated in the batch) are skipped.
const INSERT_SQL: &str = "INSERT INTO crewlet_events (
     event_time, event_id, event_type, source, category, summary,
     agent_id, agent_role, task_id, channel_id, sender, trace_id, span_id, parent_span_id,
     delegation_depth, tags, payload, phase, model, provider, auxiliary, turn_id,
     input_tokens, output_tokens, llm_calls)
 SELECT * FROM unnest(
     $1::timestamptz[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[],
     $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[],
     $14::text[], $15::int4[], $16::jsonb[], $17::jsonb[], $18::text[], $19::text[],
     $20::text[], $21::text[], $22::text[], $23::int8[], $24::int8[], $25::int4[])
 ON CONFLICT DO NOTHING";

/// An event flattened into its column values.
pub struct EventRow {
    pub event_time: DateTime<Utc>,
    pub event_id: Uuid,
    pub event_type: String,
    pub source: String,
    pub category: String,
    pub summary: String,
    pub agent_id: Option<String>,
    pub agent_role: Option<String>,
    pub task_id: Option<String>,
    pub channel_id: Option<String>,
    pub sender: Option<String>,
    pub trace_id: Option<String>,
    pub span_id: Option<String>,
    pub parent_span_id: Option<String>,
    pub delegation_depth: i32,
    pub tags: serde_json::Value,
    pub payload: Option<serde_json::Value>,
    pub tokens: PhaseTokens,
    pub is_phase: bool,
}

impl EventRow {
    pub fn from_event(e: &Event) -> Self {
        let tokens = PhaseTokens::from_event(e);
        Self {
            event_time: e.timestamp,
            event_id: e.id,
            event_type: e.event_type.as_str().to_owned(),
            source: e.source.clone(),
            category: e.category.as_str().to_owned(),
            summary: e.summary.clone(),
            agent_id: e.agent_id.clone(),
            agent_role: e.agent_role.clone(),
            task_id: e.task_id.clone(),
            channel_id: e.channel_id.clone(),
            sender: e.sender.clone(),
            trace_id: e.trace_id.map(|t| t.to_string()),
            span_id: e.span_id.map(|s| s.to_string()),
            parent_span_id: e.parent_span_id.map(|s| s.to_string()),
            delegation_depth: i32::try_from(e.delegation_depth).unwrap_or(i32::MAX),
            tags: serde_json::Value::Object(
                e.tags
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect(),
            ),
            payload: (!e.payload.is_null()).then(|| e.payload.clone()),
            is_phase: tokens.is_some(),
            tokens: tokens.unwrap_or_default(),
        }
    }

    /// The token columns: NULL for every event but `agent_phase_completed`.
    pub fn token_counts(&self) -> (Option<i64>, Option<i64>) {
        if !self.is_phase {
            return (None, None);
        }
        // PhaseTokens caps counts at i64::MAX, so these conversions hold.
        (
            i64::try_from(self.tokens.input_tokens).ok(),
            i64::try_from(self.tokens.output_tokens).ok(),
        )
    }

    /// The `llm_calls` column: the payload's `calls` of an
    /// `agent_phase_completed` event, NULL when it has none (the breakdown
    /// counts NULL as one call) and for every other type.
    pub fn llm_calls(&self) -> Option<i32> {
        if !self.is_phase {
            return None;
        }
        // PhaseTokens caps calls at i32::MAX.
        self.tokens.calls.and_then(|n| i32::try_from(n).ok())
    }
}

impl PostgresEventStore {
    pub fn new(db: Database) -> Self {
        Self { db }
    }

    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Bulk load through binary `COPY` straight into `crewlet_events`: the
    /// fastest path, for imports and benchmarks. Unlike [`EventStore::append`]
    /// there is no dedupe: an id already stored (same timestamp) fails the
    /// whole copy. Stream-only events are skipped. Returns rows written.
    pub async fn copy_in(&self, events: &[Event]) -> Result<u64, StoreError> {
        use tokio_postgres::binary_copy::BinaryCopyInWriter;
        use tokio_postgres::types::Type;

        let events = storable(events);
        let client = self.db.client().await?;
        let sink = client
            .copy_in(&format!(
                "COPY crewlet_events ({INSERT_COLUMNS}) FROM STDIN BINARY"
            ))
            .await
            .map_err(query_err("starting the event copy"))?;
        let text = Type::TEXT;
        let types = [
            Type::TIMESTAMPTZ,
            Type::UUID,
            text.clone(),
            text.clone(),
            text.clone(),
            text.clone(),
            text.clone(),
            text.clone(),
            text.clone(),
            text.clone(),
            text.clone(),
            text.clone(),
            text.clone(),
            text.clone(),
            Type::INT4,
            Type::JSONB,
            Type::JSONB,
            text.clone(),
            text.clone(),
            text.clone(),
            text.clone(),
            text,
            Type::INT8,
            Type::INT8,
            Type::INT4,
        ];
        let writer = BinaryCopyInWriter::new(sink, &types);
        futures::pin_mut!(writer);
        let copy_err = query_err("copying events");
        for e in &events {
            let r = EventRow::from_event(e);
            let (input, output) = r.token_counts();
            let calls = r.llm_calls();
            let row: [&(dyn ToSql + Sync); 25] = [
                &r.event_time,
                &r.event_id,
                &r.event_type,
                &r.source,
                &r.category,
                &r.summary,
                &r.agent_id,
                &r.agent_role,
                &r.task_id,
                &r.channel_id,
                &r.sender,
                &r.trace_id,
                &r.span_id,
                &r.parent_span_id,
                &r.delegation_depth,
                &r.tags,
                &r.payload,
                &r.tokens.phase,
                &r.tokens.model,
                &r.tokens.provider,
                &r.tokens.auxiliary,
                &r.tokens.turn_id,
                &input,
                &output,
                &calls,
            ];
            if let Err(e) = writer.as_mut().write(&row).await {
                return Err(copy_err(e));
            }
        }
        writer
            .finish()
            .await
            .map_err(query_err("finishing the event copy"))
    }
}

fn decode_err(e: tokio_postgres::Error) -> StoreError {
    StoreError::decode("crewlet_events", describe(&e))
}

fn parse_opt<T: std::str::FromStr>(
    column: &str,
    value: Option<String>,
) -> Result<Option<T>, StoreError>
where
    T::Err: std::fmt::Display,
{
    value
        .map(|v| {
            v.parse::<T>()
                .map_err(|e| StoreError::decode(format!("crewlet_events.{column}"), e))
        })
        .transpose()
}

/// Rebuilds the full envelope from a `SELECT_COLUMNS` row.
fn read_event(r: &Row) -> Result<Event, StoreError> {
    let tags: serde_json::Value = r.try_get(15).map_err(decode_err)?;
    let tags: BTreeMap<String, String> = match tags {
        serde_json::Value::Object(map) => map
            .into_iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => (k, s),
                other => (k, other.to_string()),
            })
            .collect(),
        _ => BTreeMap::new(),
    };
    let payload: Option<serde_json::Value> = r.try_get(16).map_err(decode_err)?;
    let depth: i32 = r.try_get(14).map_err(decode_err)?;
    Ok(Event {
        timestamp: r.try_get(0).map_err(decode_err)?,
        id: r.try_get(1).map_err(decode_err)?,
        event_type: EventType::parse(r.try_get(2).map_err(decode_err)?),
        source: r.try_get(3).map_err(decode_err)?,
        category: Category::parse(r.try_get(4).map_err(decode_err)?),
        summary: r.try_get(5).map_err(decode_err)?,
        agent_id: r.try_get(6).map_err(decode_err)?,
        agent_role: r.try_get(7).map_err(decode_err)?,
        task_id: r.try_get(8).map_err(decode_err)?,
        channel_id: r.try_get(9).map_err(decode_err)?,
        sender: r.try_get(10).map_err(decode_err)?,
        trace_id: parse_opt::<TraceId>("trace_id", r.try_get(11).map_err(decode_err)?)?,
        span_id: parse_opt::<SpanId>("span_id", r.try_get(12).map_err(decode_err)?)?,
        parent_span_id: parse_opt::<SpanId>("parent_span_id", r.try_get(13).map_err(decode_err)?)?,
        delegation_depth: u32::try_from(depth).unwrap_or(0),
        tags,
        payload: payload.unwrap_or(serde_json::Value::Null),
    })
}

type Param = Box<dyn ToSql + Sync + Send>;

fn push(params: &mut Vec<Param>, p: impl ToSql + Sync + Send + 'static) -> String {
    params.push(Box::new(p));
    format!("${}", params.len())
}

fn totals(r: &Row) -> Result<TokenTotals, StoreError> {
    let n = r.len();
    let get = |i: usize| -> Result<u64, StoreError> {
        let v: i64 = r.try_get(i).map_err(decode_err)?;
        from_i64("token total", v)
    };
    Ok(TokenTotals {
        input_tokens: get(n - 4)?,
        output_tokens: get(n - 3)?,
        total_tokens: get(n - 2)?,
        calls: get(n - 1)?,
    })
}

/// Sums as BIGINT (numeric sums are cut at i64::MAX, never wrap). Calls are
/// the events' `llm_calls`, one for an event that did not say.
const SUMS: &str = "least(coalesce(sum(input_tokens), 0), 9223372036854775807)::int8,
     least(coalesce(sum(output_tokens), 0), 9223372036854775807)::int8,
     least(coalesce(sum(input_tokens), 0) + coalesce(sum(output_tokens), 0), 9223372036854775807)::int8,
     coalesce(sum(coalesce(llm_calls, 1)), 0)::int8";

#[async_trait]
impl EventStore for PostgresEventStore {
    async fn append(&self, events: &[Event]) -> Result<(), StoreError> {
        let events = storable(events);
        if events.is_empty() {
            return Ok(());
        }
        let rows: Vec<EventRow> = events.iter().map(EventRow::from_event).collect();
        let col = |f: fn(&EventRow) -> Option<String>| -> Vec<Option<String>> {
            rows.iter().map(f).collect()
        };
        let times: Vec<DateTime<Utc>> = rows.iter().map(|r| r.event_time).collect();
        let ids: Vec<Uuid> = rows.iter().map(|r| r.event_id).collect();
        let types: Vec<&str> = rows.iter().map(|r| r.event_type.as_str()).collect();
        let sources: Vec<&str> = rows.iter().map(|r| r.source.as_str()).collect();
        let categories: Vec<&str> = rows.iter().map(|r| r.category.as_str()).collect();
        let summaries: Vec<&str> = rows.iter().map(|r| r.summary.as_str()).collect();
        let agent_ids = col(|r| r.agent_id.clone());
        let agent_roles = col(|r| r.agent_role.clone());
        let task_ids = col(|r| r.task_id.clone());
        let channel_ids = col(|r| r.channel_id.clone());
        let senders = col(|r| r.sender.clone());
        let trace_ids = col(|r| r.trace_id.clone());
        let span_ids = col(|r| r.span_id.clone());
        let parent_span_ids = col(|r| r.parent_span_id.clone());
        let depths: Vec<i32> = rows.iter().map(|r| r.delegation_depth).collect();
        let tags: Vec<&serde_json::Value> = rows.iter().map(|r| &r.tags).collect();
        let payloads: Vec<Option<&serde_json::Value>> =
            rows.iter().map(|r| r.payload.as_ref()).collect();
        let phases = col(|r| r.tokens.phase.clone());
        let models = col(|r| r.tokens.model.clone());
        let providers = col(|r| r.tokens.provider.clone());
        let auxiliaries = col(|r| r.tokens.auxiliary.clone());
        let turn_ids = col(|r| r.tokens.turn_id.clone());
        let (inputs, outputs): (Vec<Option<i64>>, Vec<Option<i64>>) =
            rows.iter().map(EventRow::token_counts).unzip();
        let calls: Vec<Option<i32>> = rows.iter().map(EventRow::llm_calls).collect();

        let client = self.db.client().await?;
        let stmt = client
            .prepare_cached(INSERT_SQL)
            .await
            .map_err(query_err("preparing the event insert"))?;
        client
            .execute(
                &stmt,
                &[
                    &times,
                    &ids,
                    &types,
                    &sources,
                    &categories,
                    &summaries,
                    &agent_ids,
                    &agent_roles,
                    &task_ids,
                    &channel_ids,
                    &senders,
                    &trace_ids,
                    &span_ids,
                    &parent_span_ids,
                    &depths,
                    &tags,
                    &payloads,
                    &phases,
                    &models,
                    &providers,
                    &auxiliaries,
                    &turn_ids,
                    &inputs,
                    &outputs,
                    &calls,
                ],
            )
            .await
            .map_err(query_err(format!("storing {} events", rows.len())))?;
        Ok(())
    }

    async fn recent(&self, query: &EventQuery) -> Result<EventPage, StoreError> {
        let size = query.page_size();
        let mut params: Vec<Param> = Vec::new();
        let mut filters: Vec<String> = Vec::new();
        if let Some(t) = &query.event_type {
            let p = push(&mut params, t.as_str().to_owned());
            filters.push(format!("event_type = {p}"));
        }
        if let Some(c) = &query.category {
            let p = push(&mut params, c.as_str().to_owned());
            filters.push(format!("category = {p}"));
        }
        if let Some(a) = &query.agent_id {
            let p = push(&mut params, a.clone());
            filters.push(format!("agent_id = {p}"));
        }
        if let Some(t) = &query.task_id {
            let p = push(&mut params, t.clone());
            filters.push(format!("task_id = {p}"));
        }
        if let Some(s) = query.since {
            let p = push(&mut params, s);
            filters.push(format!("event_time >= {p}"));
        }
        if let Some(u) = query.until {
            let p = push(&mut params, u);
            filters.push(format!("event_time < {p}"));
        }
        if let Some(c) = query.after {
            let t = push(&mut params, c.timestamp);
            let i = push(&mut params, c.id);
            filters.push(format!("(event_time, event_id) < ({t}, {i})"));
        }
        let limit = push(&mut params, i64::try_from(size + 1).unwrap_or(501));
        let where_clause = if filters.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", filters.join(" AND "))
        };
        let sql = format!(
            "SELECT {SELECT_COLUMNS} FROM crewlet_events {where_clause}
             ORDER BY event_time DESC, event_id DESC LIMIT {limit}"
        );
        let refs: Vec<&(dyn ToSql + Sync)> = params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect();
        let client = self.db.client().await?;
        let rows = client
            .query(&sql, &refs)
            .await
            .map_err(query_err("reading recent events"))?;
        let events = rows.iter().map(read_event).collect::<Result<Vec<_>, _>>()?;
        Ok(EventPage::from_sorted_candidates(events, size, false))
    }

    async fn get(&self, id: Uuid) -> Result<Option<Event>, StoreError> {
        let client = self.db.client().await?;
        client
            .query_opt(
                &format!("SELECT {SELECT_COLUMNS} FROM crewlet_events WHERE event_id = $1 LIMIT 1"),
                &[&id],
            )
            .await
            .map_err(query_err(format!("reading event {id}")))?
            .map(|r| read_event(&r))
            .transpose()
    }

    async fn by_trace(&self, trace_id: &TraceId) -> Result<Vec<Event>, StoreError> {
        let client = self.db.client().await?;
        let limit = i64::try_from(MAX_TRACE_EVENTS).unwrap_or(500);
        let rows = client
            .query(
                &format!(
                    "SELECT {SELECT_COLUMNS} FROM crewlet_events WHERE trace_id = $1
                     ORDER BY event_time, event_id LIMIT $2"
                ),
                &[&trace_id.to_string(), &limit],
            )
            .await
            .map_err(query_err(format!("reading trace {trace_id}")))?;
        rows.iter().map(read_event).collect()
    }

    async fn token_breakdown(&self, query: &BreakdownQuery) -> Result<TokenBreakdown, StoreError> {
        let since_days = check_breakdown(query)?;
        let since = Utc::now() - Duration::days(i64::from(since_days));
        let client = self.db.client().await?;
        // Every grouping but `by_turn` is a union of these grains: one
        // index-only scan of the covering partial index, summed without
        // the turn, so the groups stay few however many turns ran.
        let sql = format!(
            "SELECT agent_role, agent_id, phase, model, min(provider), auxiliary, NULL::text,
                    min(event_time), max(event_time), {SUMS}
             FROM crewlet_events
             WHERE event_type = 'agent_phase_completed' AND event_time >= $1
               AND ($2::text IS NULL OR agent_role = $2)
             GROUP BY agent_role, agent_id, phase, model, auxiliary"
        );
        let rows = client
            .query(&sql, &[&since, &query.agent_role])
            .await
            .map_err(query_err("computing the token breakdown"))?;
        let grains = rows.iter().map(grain).collect::<Result<Vec<_>, _>>()?;
        // `by_turn`: the turns whose last phase event is newest are the
        // first distinct turn ids met walking the window newest first.
        let wanted = usize::try_from(query.recent_turns).unwrap_or(usize::MAX);
        let mut limit = i64::from(query.recent_turns).saturating_mul(8).max(64);
        let turn_ids = loop {
            let rows = client
                .query(
                    "SELECT turn_id FROM crewlet_events
                     WHERE event_type = 'agent_phase_completed' AND event_time >= $1
                       AND ($2::text IS NULL OR agent_role = $2) AND turn_id IS NOT NULL
                     ORDER BY event_time DESC LIMIT $3",
                    &[&since, &query.agent_role, &limit],
                )
                .await
                .map_err(query_err("finding the recent turns of the token breakdown"))?;
            let mut ids: Vec<String> = Vec::with_capacity(wanted);
            for row in &rows {
                let id: String = row.try_get(0).map_err(decode_err)?;
                if !ids.contains(&id) {
                    ids.push(id);
                    if ids.len() == wanted {
                        break;
                    }
                }
            }
            let exhausted = i64::try_from(rows.len()).unwrap_or(i64::MAX) < limit;
            if ids.len() == wanted || exhausted {
                break ids;
            }
            limit = limit.saturating_mul(4);
        };
        let turn_sql = format!(
            "SELECT agent_role, agent_id, phase, model, min(provider), auxiliary, turn_id,
                    min(event_time), max(event_time), {SUMS}
             FROM crewlet_events
             WHERE event_type = 'agent_phase_completed' AND event_time >= $1
               AND ($2::text IS NULL OR agent_role = $2) AND turn_id = ANY($3)
             GROUP BY agent_role, agent_id, phase, model, auxiliary, turn_id"
        );
        let rows = client
            .query(&turn_sql, &[&since, &query.agent_role, &turn_ids])
            .await
            .map_err(query_err("computing the token breakdown by turn"))?;
        let turn_grains = rows.iter().map(grain).collect::<Result<Vec<_>, _>>()?;
        Ok(rollup_parts(grains, turn_grains, query, since))
    }
}

/// One row of a breakdown query (the columns of `PhaseGrain`, then `SUMS`).
fn grain(r: &tokio_postgres::Row) -> Result<PhaseGrain, StoreError> {
    let text =
        |i: usize| -> Result<Option<String>, StoreError> { r.try_get(i).map_err(decode_err) };
    Ok(PhaseGrain {
        agent_role: text(0)?,
        agent_id: text(1)?,
        phase: text(2)?,
        model: text(3)?,
        provider: text(4)?,
        auxiliary: text(5)?,
        turn_id: text(6)?,
        first_at: r.try_get(7).map_err(decode_err)?,
        last_at: r.try_get(8).map_err(decode_err)?,
        tokens: totals(r)?,
    })
}
