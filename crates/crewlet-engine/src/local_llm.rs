//! `type: local` entries of `providers.llm`: the GGUF file each names (its
//! `path`, or the catalogue model fetched into the models cache), loaded
//! once per process however many entries share it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Weak};

use crewlet_config::{
    Company, EmbeddingsKind, LlmKind, LlmProvider as LlmEntry, LocalRun, interpolate,
};
use crewlet_llm::LlmProvider;
use crewlet_llm_local::{LocalModel, LocalProvider, LocalSettings};
use parking_lot::Mutex;
use tracing::{error, info, warn};

type ModelKey = (PathBuf, Option<usize>, usize);

/// Models loaded by this process, by file and run settings.
static LOADED: Mutex<Option<HashMap<ModelKey, Weak<LocalModel>>>> = Mutex::new(None);

/// The provider of a `type: local` entry, or why it cannot run.
pub(crate) fn local_provider(
    name: &str,
    entry: &LlmEntry,
    env: &(dyn Fn(&str) -> Option<String> + Send + Sync),
) -> Result<Arc<dyn LlmProvider>, String> {
    let path = model_path(name, entry, env)?;
    let run = entry.local.clone().unwrap_or_default();
    let model = load(&path, &run).map_err(|e| format!("provider `{name}`: {e}"))?;
    #[allow(clippy::cast_possible_truncation)]
    let settings = LocalSettings {
        name: name.to_owned(),
        model: entry.model.clone(),
        max_tokens: entry.max_tokens,
        temperature: entry.temperature.map(|t| t as f32),
        max_concurrent: run.max_concurrent.max(1) as usize,
        decide_at_once: run.decide_at_once,
    };
    Ok(Arc::new(LocalProvider::new(settings, model)))
}

/// The file an entry runs: its `path` (`${VAR}` and `~` expanded), or its
/// catalogue model in the models cache.
pub(crate) fn model_path(
    name: &str,
    entry: &LlmEntry,
    env: &(dyn Fn(&str) -> Option<String> + Send + Sync),
) -> Result<PathBuf, String> {
    if let Some(raw) = &entry.path {
        let expanded =
            interpolate(raw, |var| env(var)).map_err(|e| format!("provider `{name}` path: {e}"))?;
        return Ok(expand_home(&expanded));
    }
    match crewlet_models::installed(&entry.model) {
        Ok(Some(path)) => Ok(path),
        Ok(None) => Err(format!(
            "provider `{name}`: the local model `{m}` is not downloaded; run `crewlet models pull {m}` (crewlet run fetches it on start unless --offline)",
            m = entry.model
        )),
        Err(e) => Err(format!("provider `{name}`: {e}")),
    }
}

fn expand_home(path: &str) -> PathBuf {
    match path.strip_prefix("~/") {
        Some(rest) => std::env::var_os("HOME")
            .map(PathBuf::from)
            .map_or_else(|| PathBuf::from(path), |home| home.join(rest)),
        None => PathBuf::from(path),
    }
}

fn load(path: &std::path::Path, run: &LocalRun) -> Result<Arc<LocalModel>, String> {
    let context = run.context_tokens.map(|n| n as usize);
    let sessions = run.cached_conversations.max(1) as usize;
    let key = (path.to_path_buf(), context, sessions);
    let mut loaded = LOADED.lock();
    let map = loaded.get_or_insert_with(HashMap::new);
    map.retain(|_, m| m.strong_count() > 0);
    if let Some(model) = map.get(&key).and_then(Weak::upgrade) {
        return Ok(model);
    }
    let started = std::time::Instant::now();
    let model = Arc::new(LocalModel::load(path, context, sessions).map_err(|e| e.to_string())?);
    info!(
        path = %path.display(),
        context = model.context,
        load_ms = started.elapsed().as_millis() as u64,
        "local model loaded"
    );
    map.insert(key, Arc::downgrade(&model));
    Ok(model)
}

/// The catalogue models `company` runs in process and names without a
/// `path`: its `type: local` providers and its local embedder.
pub fn catalogue_models(company: &Company) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for entry in company.llm_providers().values() {
        if entry.kind == LlmKind::Local && entry.path.is_none() && !names.contains(&entry.model) {
            names.push(entry.model.clone());
        }
    }
    if let Some(e) = &company.providers.embeddings
        && e.kind == EmbeddingsKind::Local
        && e.path.is_none()
    {
        names.push(crewlet_models::ALL_MINILM_L6_V2.name.to_owned());
    }
    names
}

/// Fetches the catalogue models `company` needs and does not have, with
/// progress (a bar on a terminal, log lines otherwise). A model that cannot
/// be fetched is logged; its provider then says so on every call.
pub(crate) async fn pull_missing(company: &Company) {
    for name in catalogue_models(company) {
        match crewlet_models::installed(&name) {
            Ok(Some(_)) => continue,
            Ok(None) => {}
            // Not in the catalogue: the provider reports it.
            Err(_) => continue,
        }
        let size = crewlet_models::find(&name).map_or(0, |e| e.size());
        info!(model = %name, bytes = size, dir = %crewlet_models::models_dir().display(), "fetching a local model the company needs (once)");
        let options = crewlet_models::PullOptions::from_env();
        if let Err(e) = crewlet_models::pull(&name, &options).await {
            error!(model = %name, error = %e, "cannot fetch the local model; its provider is unavailable until it is there");
        }
    }
}

/// Says, once at start, which chains run on a local model because the
/// providers before it cannot be built (a key that is not set).
pub(crate) fn announce_fallbacks(
    company: &Company,
    org: &crewlet_config::Organization,
    problems: &std::collections::BTreeMap<String, String>,
) {
    let providers = company.llm_providers();
    let mut said: Vec<String> = Vec::new();
    for seat in org.seats() {
        if seat.kind != crewlet_config::SeatKind::Agent {
            continue;
        }
        let chain = company.llm_chain(&seat.role, crewlet_config::Phase::Execute);
        let Some(local) = chain.iter().find(|n| {
            providers
                .get(n.as_str())
                .is_some_and(|e| e.kind == LlmKind::Local)
        }) else {
            continue;
        };
        let before: Vec<&String> = chain.iter().take_while(|n| *n != local).collect();
        let down: Vec<String> = before
            .iter()
            .filter_map(|n| problems.get(n.as_str()).map(|r| format!("`{n}`: {r}")))
            .collect();
        if down.is_empty() || down.len() != before.len() || said.contains(local) {
            continue;
        }
        said.push(local.clone());
        let model = providers
            .get(local.as_str())
            .map_or("", |e| e.model.as_str());
        warn!(
            provider = %local,
            model = %model,
            "turns run on the small local model `{model}` because {}; it is tiny (a demo, not a worker): set the key (e.g. OPENAI_API_KEY) for a real model",
            down.join("; ")
        );
    }
}
