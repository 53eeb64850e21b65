//! [`Learning`]: the memory stores, the embedder, the auxiliary model and
//! the event sink the loop's parts share, and the steps they have in
//! common (embed, write a diary row, emit a learning event).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Duration as Days, Utc};
use crewlet_core::TraceContext;
use crewlet_core::payload::{DiaryWritten, EventPayload};
use crewlet_llm::Embedder;
use crewlet_memory::{DiaryKind, DiaryWrite, MemoryError, MemoryStores, NewDiaryEntry};
use crewlet_turn::{AuxCall, Auxiliary, EventSink, SeatProfile, TurnError};
use parking_lot::RwLock;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::memo::{RecentTurns, TurnMemos};
use crate::settings::LearningSettings;
use crate::text::clip;

/// Characters of text handed to the embedder (the row keeps all of it).
const MAX_EMBED_CHARS: usize = 8000;

/// The seat's auxiliary model, as the learning workers call it.
#[async_trait]
pub trait AuxModel: Send + Sync {
    /// One tool-less completion, charged to the seat and reported as
    /// auxiliary usage of `call.worker`.
    async fn complete(&self, call: AuxCall<'_>) -> Result<String, TurnError>;
}

#[async_trait]
impl AuxModel for Auxiliary {
    async fn complete(&self, call: AuxCall<'_>) -> Result<String, TurnError> {
        Auxiliary::complete(self, call).await
    }
}

/// What [`Learning::new`] is built from.
pub struct LearningParts {
    pub stores: MemoryStores,
    pub embedder: Arc<dyn Embedder>,
    pub aux: Arc<dyn AuxModel>,
    pub sink: Arc<dyn EventSink>,
    pub settings: LearningSettings,
    /// The company's name (part of the onboarding chain hash).
    pub company: String,
    /// The `source` of learning events.
    pub source: String,
}

/// The learning loop of one company: implements [`crewlet_turn::Recall`]
/// (the Plan prefetch), provides the memory tools ([`Learning::tools`]),
/// reflects on finished turns ([`Learning::reflect`]) and keeps the
/// memory tables in shape ([`Learning::maintain`]).
pub struct Learning {
    pub(crate) stores: MemoryStores,
    pub(crate) embedder: Arc<dyn Embedder>,
    pub(crate) aux: Arc<dyn AuxModel>,
    pub(crate) sink: Arc<dyn EventSink>,
    pub(crate) settings: LearningSettings,
    pub(crate) memos: TurnMemos,
    pub(crate) reflected: RecentTurns,
    company: String,
    source: String,
    /// Seats by handle (for work outside a turn, e.g. compaction), and
    /// whether each learns (`false`: its role says `learning_enabled: false`).
    seats: RwLock<HashMap<String, (SeatProfile, bool)>>,
}

impl std::fmt::Debug for Learning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Learning")
            .field("company", &self.company)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Learning {
    pub fn new(parts: LearningParts) -> Self {
        let remembered = parts.settings.remembered_turns;
        Self {
            stores: parts.stores,
            embedder: parts.embedder,
            aux: parts.aux,
            sink: parts.sink,
            settings: parts.settings,
            memos: TurnMemos::default(),
            reflected: RecentTurns::new(remembered),
            company: parts.company,
            source: parts.source,
            seats: RwLock::new(HashMap::new()),
        }
    }

    pub fn stores(&self) -> &MemoryStores {
        &self.stores
    }

    pub fn settings(&self) -> &LearningSettings {
        &self.settings
    }

    /// Registers a seat (or re-registers it after a config change) and
    /// whether its role lets it learn.
    pub fn register_seat(&self, seat: &SeatProfile, learning_enabled: bool) {
        self.seats
            .write()
            .insert(seat.handle.clone(), (seat.clone(), learning_enabled));
    }

    /// Whether the seat learns (not opted out by its role).
    pub fn is_enabled(&self, handle: &str) -> bool {
        self.seats
            .read()
            .get(handle)
            .is_none_or(|(_, learns)| *learns)
    }

    pub(crate) fn seat(&self, handle: &str) -> Option<SeatProfile> {
        self.seats.read().get(handle).map(|(seat, _)| seat.clone())
    }

    /// The vector of `text`, or `None` (logged) when the embedder fails.
    pub(crate) async fn embed(&self, text: &str) -> Option<Vec<f32>> {
        let input = clip(text, MAX_EMBED_CHARS);
        if input.is_empty() {
            return None;
        }
        match self.embedder.embed(&[input]).await {
            Ok(mut v) if v.len() == 1 => v.pop(),
            Ok(v) => {
                tracing::warn!(
                    got = v.len(),
                    "the embedder answered with the wrong number of vectors"
                );
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "embedding failed; the row is kept without a vector");
                None
            }
        }
    }

    /// Writes one diary row for the seat (embedded; an exact duplicate of a
    /// live row is not written again) and reports `diary_written` when it
    /// is new.
    pub(crate) async fn write_diary(
        &self,
        seat: &SeatProfile,
        note: DiaryNote<'_>,
    ) -> Result<DiaryWrite, MemoryError> {
        let content = note.content.trim();
        let now = Utc::now();
        let ttl_until = match note.kind {
            DiaryKind::Long => None,
            DiaryKind::Short => {
                let days = note
                    .ttl_days
                    .unwrap_or(self.settings.short_ttl_days)
                    .clamp(1, self.settings.max_short_ttl_days.max(1));
                Some(now + Days::days(i64::from(days)))
            }
        };
        let embedding = self.embed(content).await;
        let written = self
            .stores
            .diary
            .write(
                NewDiaryEntry {
                    agent_id: seat.agent_id,
                    kind: note.kind,
                    content: content.to_owned(),
                    ttl_until,
                    embedding,
                },
                now,
            )
            .await?;
        if let DiaryWrite::Written(entry) = &written {
            let payload = DiaryWritten {
                entry_id: entry.id,
                kind: entry.kind.as_str().to_owned(),
                writer: note.writer.to_owned(),
                preview: clip(&entry.content, 120),
                chars: entry.content.chars().count(),
                ttl_until: entry.ttl_until.map(|t| t.to_rfc3339()),
                turn_id: note.turn_id,
            };
            let summary = format!("{} remembered: {}", seat.handle, payload.preview);
            self.emit(seat, note.context, summary, &payload).await;
        }
        Ok(written)
    }

    /// Emits a learning event about `seat`.
    pub(crate) async fn emit<P: EventPayload>(
        &self,
        seat: &SeatProfile,
        context: EventContext<'_>,
        summary: String,
        payload: &P,
    ) {
        let trace = context
            .trace
            .map_or_else(TraceContext::new_root, |t| t.child());
        let mut event = payload
            .to_event(self.source.as_str())
            .with_summary(summary)
            .with_agent(seat.agent_id, seat.role_name.as_str())
            .with_agent_handle(seat.handle.as_str())
            .with_trace(trace);
        if let Some(task) = context.task_id {
            event = event.with_task(task);
        }
        self.sink.emit(event).await;
    }

    /// The hash of the seat's place in the org (company, units, role): a
    /// change opens onboarding again.
    pub fn chain_hash(&self, seat: &SeatProfile) -> String {
        let mut h = Sha256::new();
        h.update(self.company.as_bytes());
        for unit in &seat.unit_path {
            h.update(b"\n");
            h.update(unit.as_bytes());
        }
        h.update(b"\n");
        h.update(seat.role_name.as_bytes());
        hex::encode(h.finalize())
    }

    /// One auxiliary completion for `seat`; `None` (logged) when it failed.
    pub(crate) async fn ask(&self, call: AuxCall<'_>) -> Result<String, TurnError> {
        let worker = call.worker;
        let handle = call.seat.handle.clone();
        let answer = self.aux.complete(call).await;
        if let Err(e) = &answer {
            tracing::info!(agent = %handle, worker, error = %e, "auxiliary learning call failed; the step is skipped");
        }
        answer
    }
}

/// Where a learning event belongs: the task and span it continues.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct EventContext<'a> {
    pub task_id: Option<&'a str>,
    pub trace: Option<TraceContext>,
}

/// One diary write.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DiaryNote<'a> {
    pub content: &'a str,
    pub kind: DiaryKind,
    pub ttl_days: Option<u32>,
    /// `reflect_and_persist` or `persist_decider`.
    pub writer: &'static str,
    pub turn_id: Option<Uuid>,
    pub context: EventContext<'a>,
}

/// A timestamp as a date for prompts.
pub(crate) fn day(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d").to_string()
}
