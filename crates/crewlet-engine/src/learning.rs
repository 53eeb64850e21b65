//! Wiring the learning loop into the engine: the memory stores beside the
//! engine's stores, the embedder `providers.embeddings` names, the
//! company's `learning` section as [`LearningSettings`], and the memory
//! tools for the seats that learn.
//!
//! Learning needs an embedder. Without `providers.embeddings` (or when it
//! cannot be built) the engine runs as before and says once that learning
//! is off; a seat whose role says `learning_enabled: false` never learns.

use std::collections::HashMap;
use std::sync::Arc;

use crewlet_config::Company;
use crewlet_learning::{Learning, LearningParts, LearningSettings};
use crewlet_llm::Embedder;
use crewlet_memory::{MemoryStores, SkillLimits};
use crewlet_store::Stores;
use crewlet_turn::{EventSink, TurnEngine, Visibility};
use tracing::{info, warn};

use crate::seat::SeatRuntime;
use crate::tools::ToolCatalog;

/// The memory stores of this process: PostgreSQL when the engine has a
/// database, the in-memory twins otherwise.
pub(crate) async fn memory_stores(stores: &Stores) -> Option<MemoryStores> {
    match &stores.database {
        None => Some(MemoryStores::in_memory()),
        Some(db) => match MemoryStores::postgres(db.clone()).await {
            Ok(m) => Some(m),
            Err(e) => {
                warn!(error = %e, "cannot open the memory tables; learning is off");
                None
            }
        },
    }
}

/// The embedder of `providers.embeddings`, or why there is none.
pub(crate) fn company_embedder(
    company: &Company,
    env: &(dyn Fn(&str) -> Option<String> + Send + Sync),
) -> Result<Arc<dyn Embedder>, String> {
    let Some(config) = &company.providers.embeddings else {
        return Err("no `providers.embeddings` is configured".into());
    };
    let client = crewlet_llm::http_client().map_err(|e| e.to_string())?;
    crewlet_embed_local::build_embedder_with_env(config, client, &|name| env(name))
        .map_err(|e| e.to_string())
}

/// The company's `learning` section as the loop's knobs.
pub(crate) fn learning_settings(company: &Company) -> LearningSettings {
    let l = &company.learning;
    let d = LearningSettings::default();
    let reflect = l.reflect.clone().unwrap_or_default();
    let synth = l.skill_synthesis.clone().unwrap_or_default();
    let refine = l.skill_refinement.clone().unwrap_or_default();
    let counterparty = l.counterparty.clone().unwrap_or_default();
    let lifecycle = l.episode_lifecycle.clone().unwrap_or_default();
    let personal = l.personal_memory.clone().unwrap_or_default();
    let episodic = l.episodic.clone().unwrap_or_default();
    let n = |v: u32| usize::try_from(v).unwrap_or(usize::MAX);
    LearningSettings {
        max_selected: l.diary_prefetch_entries.map_or(d.max_selected, n),
        digest_chars: l.diary_digest_chars.map_or(d.digest_chars, n),
        short_ttl_days: l.diary_short_ttl_days.unwrap_or(d.short_ttl_days),
        episode_query_default: n(episodic.retrieval_limit).clamp(1, d.episode_query_max),
        summarize_episodes: reflect.summarize_episodes,
        summarize_max_tokens: reflect.summarize_max_tokens,
        reflect: reflect.enabled,
        persist_decider: reflect.persist_decider,
        skill_synthesis: synth.enabled,
        min_tool_calls: n(synth.min_tool_calls),
        duplicate_jaccard: synth.duplicate_jaccard_threshold,
        skill_limits: SkillLimits {
            max_per_agent: n(synth.max_skills_per_agent),
            max_versions: n(refine.max_versions_kept),
            max_body_chars: n(refine.max_body_chars),
        },
        skill_refinement: refine.enabled,
        counterparty: counterparty.enabled,
        compaction_threshold: n(lifecycle.max_raw_episodes_per_agent).max(1),
        refresh_max_hints: n(personal.max_refreshes_per_turn),
        ..d
    }
}

/// What learning runs on: the embedder and the memory stores.
pub(crate) struct LearningBase {
    pub embedder: Arc<dyn Embedder>,
    pub memory: MemoryStores,
}

/// Whether the company learns, and on what; `None` (said once in the log)
/// when learning is off: switched off, no embedder, or the memory tables
/// cannot be opened. `embedder` and `memory` are the caller's when given.
pub(crate) async fn learning_base(
    company: &Company,
    stores: &Stores,
    embedder: Option<Arc<dyn Embedder>>,
    memory: Option<MemoryStores>,
    env: &(dyn Fn(&str) -> Option<String> + Send + Sync),
) -> Option<LearningBase> {
    if !company.learning.is_enabled() {
        info!("learning is off: `learning.enabled` is false");
        return None;
    }
    let embedder = match embedder {
        Some(e) => e,
        None => match company_embedder(company, env) {
            Ok(e) => e,
            Err(why) => {
                info!(reason = %why, "learning is off: agents start every turn without memory");
                return None;
            }
        },
    };
    let memory = match memory {
        Some(m) => m,
        None => memory_stores(stores).await?,
    };
    Some(LearningBase { embedder, memory })
}

/// The learning loop of the company on `base`, with its tools registered
/// for the seats that learn.
pub(crate) fn start_learning(
    company: &Company,
    base: &LearningBase,
    seats: &HashMap<String, Arc<SeatRuntime>>,
    catalog: &ToolCatalog,
    sink: Arc<dyn EventSink>,
    turns: &TurnEngine,
) -> Arc<Learning> {
    let learning = Arc::new(Learning::new(LearningParts {
        stores: base.memory.clone(),
        embedder: base.embedder.clone(),
        aux: Arc::new(turns.auxiliary()),
        sink,
        settings: learning_settings(company),
        company: company.name.clone(),
        source: "engine.learning".into(),
    }));
    let default = company.learning.is_enabled();
    let mut learners = Vec::new();
    for runtime in seats.values() {
        let learns = runtime.seat.role.learns(default);
        learning.register_seat(&runtime.profile, learns);
        if learns {
            learners.push(runtime.seat.handle.clone());
        }
    }
    for tool in learning.tools() {
        catalog.add_builtin(tool, Visibility::roles(learners.iter().cloned()));
    }
    info!(
        seats = learners.len(),
        opted_out = seats.len() - learners.len(),
        "learning is on: diary, episodes, skills and profiles"
    );
    learning
}
