//! The catalogue's models (SmolLM2-135M-Instruct for the `local` LLM
//! provider and llama-server, all-MiniLM-L6-v2 for the `local` embedder),
//! pulled by `crewlet-models` into its cache (`CREWLET_MODELS_DIR`, else
//! `~/.cache/crewlet/models`): the same path, pins and checks as
//! `crewlet models pull`. Files only: nothing runs.

use std::time::Instant;

use anyhow::{Context as _, Result};
use crewlet_models::{ModelStore, Progress, PullOptions, catalogue, human_bytes};

use super::config::Layout;

/// What is on the machine right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Every file of every model is there with its pinned size.
    Installed,
    /// This model lacks (or has a wrong size of) this file.
    Missing {
        model: &'static str,
        file: &'static str,
    },
}

/// The state of the catalogue in `store`.
pub fn state_in(store: &ModelStore) -> Result<State> {
    for entry in catalogue() {
        if let Some(f) = store.missing_file(entry)? {
            return Ok(State::Missing {
                model: entry.name,
                file: f.name,
            });
        }
    }
    Ok(State::Installed)
}

/// Pulls every catalogue model that is not installed; prints where they are.
pub fn up(layout: &Layout) -> Result<()> {
    let store = ModelStore::from_env();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    for entry in catalogue() {
        if let Some(path) = store.installed(entry)? {
            println!("model: {} already installed", entry.name);
            println!("  path:     {}", path.display());
            continue;
        }
        let started = Instant::now();
        println!(
            "model: pulling {} ({}) into {}",
            entry.name,
            human_bytes(entry.size()),
            store.model_dir(entry).display()
        );
        let options = PullOptions {
            offline: crewlet_models::offline_from_env(),
            progress: progress(),
        };
        let path = runtime
            .block_on(store.pull(entry, &options))
            .with_context(|| format!("model: cannot pull {}", entry.name))?;
        println!(
            "model: {} installed in {:.1} s",
            entry.name,
            started.elapsed().as_secs_f64()
        );
        println!("  path:     {}", path.display());
    }
    let legacy = layout.model_install();
    if legacy.exists() {
        println!(
            "model: {} (the embedder's folder of earlier versions) is read only when the cache lacks the model or a company's `path:` names it",
            legacy.display()
        );
    }
    Ok(())
}

/// Prints one line per model.
pub fn status(layout: &Layout) {
    let store = ModelStore::from_env();
    for entry in catalogue() {
        match store.missing_file(entry) {
            Ok(None) => println!(
                "model: {} installed in {}",
                entry.name,
                store.path(entry).display()
            ),
            Ok(Some(f)) => println!(
                "model: {} not installed ({} has no complete {})",
                entry.name,
                store.model_dir(entry).display(),
                f.name
            ),
            Err(e) => println!("model: {}: {e}", entry.name),
        }
    }
    if layout.model_dir().is_dir() {
        println!(
            "model: the embedder's fallback folder {} exists",
            layout.model_dir().display()
        );
    }
}

/// A bar on a terminal; otherwise a line on stderr every few seconds
/// (xtask has no log subscriber, so `Progress::Log` would print nothing).
fn progress() -> Progress {
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        Progress::Bar
    } else {
        Progress::Stderr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_cache_misses_the_chat_model_first_and_a_wrong_size_is_no_install() {
        let root = std::env::temp_dir().join(format!("xtask-model-{}", std::process::id()));
        let store = ModelStore::new(&root);
        let missing = State::Missing {
            model: "smollm2-135m-instruct",
            file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        };
        assert_eq!(state_in(&store).ok(), Some(missing.clone()));
        let dir = root.join("smollm2-135m-instruct");
        std::fs::create_dir_all(&dir).expect("mkdir");
        // the right name with the wrong size is not an install
        std::fs::write(dir.join("SmolLM2-135M-Instruct.Q4_1.gguf"), b"x").expect("write");
        assert_eq!(state_in(&store).ok(), Some(missing));
        let _ = std::fs::remove_dir_all(&root);
    }
}
