//! What can go wrong loading or running the local model.

use std::path::PathBuf;

use crewlet_llm::LlmError;

/// The provider name in [`LlmError`]s from this crate.
pub const PROVIDER_NAME: &str = "local";

/// How to get the model folder, in every "missing" message.
pub const FETCH_HINT: &str =
    "run `crewlet models pull all-minilm-l6-v2` (or `cargo xtask services up`) to fetch it";

/// A failure of the local embedder; it becomes an [`LlmError`] at the trait.
#[derive(Debug, thiserror::Error)]
pub enum LocalEmbedError {
    #[error("local embedding model folder {} does not exist; {FETCH_HINT}", dir.display())]
    MissingDir { dir: PathBuf },
    #[error("local embedding model folder {} has no {file}; {FETCH_HINT}", dir.display())]
    MissingFile { dir: PathBuf, file: &'static str },
    #[error("cannot read {}: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error("{} is not a BERT model this embedder runs: {message}", path.display())]
    Model { path: PathBuf, message: String },
    #[error("tokenizing failed: {0}")]
    Tokenize(String),
    #[error("inference failed: {0}")]
    Inference(#[from] candle_core::Error),
    #[error("the inference task stopped: {0}")]
    Task(String),
    #[error("invalid option: {0}")]
    Options(String),
}

impl From<LocalEmbedError> for LlmError {
    fn from(e: LocalEmbedError) -> Self {
        let provider = PROVIDER_NAME.to_owned();
        let message = e.to_string();
        match e {
            LocalEmbedError::Tokenize(_)
            | LocalEmbedError::Inference(_)
            | LocalEmbedError::Task(_) => LlmError::Decode { provider, message },
            LocalEmbedError::MissingDir { .. }
            | LocalEmbedError::MissingFile { .. }
            | LocalEmbedError::Read { .. }
            | LocalEmbedError::Model { .. }
            | LocalEmbedError::Options(_) => LlmError::Config { provider, message },
        }
    }
}
