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

/// What [`start_learning`] needs from the engine being assembled.
pub(crate) struct LearningSetup<'a> {
    pub company: &'a Company,
    pub seats: &'a HashMap<String, Arc<SeatRuntime>>,
    pub stores: &'a Stores,
    pub catalog: &'a ToolCatalog,
    pub sink: Arc<dyn EventSink>,
    pub embedder: Option<Arc<dyn Embedder>>,
    /// The process's memory stores, when it opened them already.
    pub memory: Option<MemoryStores>,
    pub env: &'a (dyn Fn(&str) -> Option<String> + Send + Sync),
}

/// The learning loop of the company, with its tools registered for the
/// seats that learn; `None` (said once in the log) when learning is off.
pub(crate) async fn start_learning(
    setup: LearningSetup<'_>,
    turns: &TurnEngine,
) -> Option<(Arc<Learning>, MemoryStores)> {
    let company = setup.company;
    if !company.learning.is_enabled() {
        info!("learning is off: `learning.enabled` is false");
        return None;
    }
    let embedder = match setup.embedder {
        Some(e) => e,
        None => match company_embedder(company, setup.env) {
            Ok(e) => e,
            Err(why) => {
                info!(reason = %why, "learning is off: agents start every turn without memory");
                return None;
            }
        },
    };
    let memory = match setup.memory {
        Some(m) => m,
        None => memory_stores(setup.stores).await?,
    };
    let learning = Arc::new(Learning::new(LearningParts {
        stores: memory.clone(),
        embedder,
        aux: Arc::new(turns.auxiliary()),
        sink: setup.sink,
        settings: learning_settings(company),
        company: company.name.clone(),
        source: "engine.learning".into(),
    }));
    let default = company.learning.is_enabled();
    let mut learners = Vec::new();
    for runtime in setup.seats.values() {
        let learns = runtime.seat.role.learns(default);
        learning.register_seat(&runtime.profile, learns);
        if learns {
            learners.push(runtime.seat.handle.clone());
        }
    }
    for tool in learning.tools() {
        setup
            .catalog
            .add_builtin(tool, Visibility::roles(learners.iter().cloned()));
    }
    info!(
        seats = learners.len(),
        opted_out = setup.seats.len() - learners.len(),
        "learning is on: diary, episodes, skills and profiles"
    );
    Some((learning, memory))
}
