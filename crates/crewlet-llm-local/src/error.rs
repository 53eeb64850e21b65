//! What can go wrong loading or running a local model.

use std::path::PathBuf;

/// A local model that cannot be loaded or run. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum LocalModelError {
    #[error("{}: cannot read the model file: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a GGUF model file ({detail})", path.display())]
    NotGguf { path: PathBuf, detail: String },
    #[error("{}: the file is truncated: {detail}", path.display())]
    Truncated { path: PathBuf, detail: String },
    #[error(
        "{}: architecture `{found}` is not supported (the local provider runs llama-family models: {supported})",
        path.display()
    )]
    UnsupportedArchitecture {
        path: PathBuf,
        found: String,
        supported: &'static str,
    },
    #[error("{}: {detail}", path.display())]
    Unsupported { path: PathBuf, detail: String },
    #[error("{}: metadata `{key}` is missing or malformed", path.display())]
    Metadata { path: PathBuf, key: String },
    #[error("{}: the tokenizer cannot be built: {detail}", path.display())]
    Tokenizer { path: PathBuf, detail: String },
    #[error("{}: the chat template cannot be used: {detail}", path.display())]
    Template { path: PathBuf, detail: String },
    #[error("the model failed while running: {0}")]
    Runtime(String),
}

impl LocalModelError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        LocalModelError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

impl From<candle_core::Error> for LocalModelError {
    fn from(e: candle_core::Error) -> Self {
        LocalModelError::Runtime(e.to_string())
    }
}
