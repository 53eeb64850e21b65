//! The synchronous half: reading the model folder and one forward pass with
//! mean pooling over the attention mask, then L2 normalisation.

use std::path::{Path, PathBuf};

use candle_core::{D, DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config, DTYPE};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::error::LocalEmbedError;

/// The files [`Model::load`] reads from the model folder.
pub const CONFIG_FILE: &str = "config.json";
pub const TOKENIZER_FILE: &str = "tokenizer.json";
pub const WEIGHTS_FILE: &str = "model.safetensors";

/// A loaded BERT encoder and its tokenizer. `Send + Sync`: the forward pass
/// only reads the weights, so any number of threads may call [`Model::embed`].
pub(crate) struct Model {
    bert: BertModel,
    tokenizer: Tokenizer,
    device: Device,
    hidden_size: usize,
}

impl Model {
    /// Reads `config.json`, `tokenizer.json` and `model.safetensors` from
    /// `dir`; inputs are cut at `max_tokens` tokens (`[CLS]` and `[SEP]`
    /// included) and a batch is padded to its longest text only.
    pub(crate) fn load(dir: &Path, max_tokens: usize) -> Result<Self, LocalEmbedError> {
        if !dir.is_dir() {
            return Err(LocalEmbedError::MissingDir {
                dir: dir.to_path_buf(),
            });
        }
        let file = |name: &'static str| -> Result<PathBuf, LocalEmbedError> {
            let path = dir.join(name);
            if path.is_file() {
                Ok(path)
            } else {
                Err(LocalEmbedError::MissingFile {
                    dir: dir.to_path_buf(),
                    file: name,
                })
            }
        };
        let (config_path, tokenizer_path, weights_path) = (
            file(CONFIG_FILE)?,
            file(TOKENIZER_FILE)?,
            file(WEIGHTS_FILE)?,
        );

        let config_text = read_to_string(&config_path)?;
        let config: Config =
            serde_json::from_str(&config_text).map_err(|e| LocalEmbedError::Model {
                path: config_path.clone(),
                message: e.to_string(),
            })?;
        if max_tokens < 2 || max_tokens > config.max_position_embeddings {
            return Err(LocalEmbedError::Options(format!(
                "max_tokens must be within 2..={} (the model's positions), not {max_tokens}",
                config.max_position_embeddings
            )));
        }

        let mut tokenizer =
            Tokenizer::from_file(&tokenizer_path).map_err(|e| LocalEmbedError::Model {
                path: tokenizer_path.clone(),
                message: e.to_string(),
            })?;
        // The shipped tokenizer pads every input to 128 tokens; padding a
        // batch to its longest text gives the same vectors (the pooling
        // reads the attention mask) for a fraction of the work.
        let padding = match tokenizer.get_padding() {
            Some(p) => PaddingParams {
                strategy: PaddingStrategy::BatchLongest,
                ..p.clone()
            },
            None => PaddingParams::default(),
        };
        tokenizer.with_padding(Some(padding));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..TruncationParams::default()
            }))
            .map_err(|e| LocalEmbedError::Model {
                path: tokenizer_path.clone(),
                message: e.to_string(),
            })?;

        let device = Device::Cpu;
        let weights = std::fs::read(&weights_path).map_err(|e| LocalEmbedError::Read {
            path: weights_path.clone(),
            message: e.to_string(),
        })?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DTYPE, &device).map_err(|e| {
            LocalEmbedError::Model {
                path: weights_path.clone(),
                message: e.to_string(),
            }
        })?;
        let bert = BertModel::load(vb, &config).map_err(|e| LocalEmbedError::Model {
            path: weights_path.clone(),
            message: e.to_string(),
        })?;
        Ok(Self {
            bert,
            tokenizer,
            device,
            hidden_size: config.hidden_size,
        })
    }

    /// The width of every vector.
    pub(crate) fn hidden_size(&self) -> usize {
        self.hidden_size
    }

    /// One normalised vector per text, in order: one forward pass.
    pub(crate) fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, LocalEmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| LocalEmbedError::Tokenize(e.to_string()))?;
        let rows = encodings.len();
        let len = encodings.first().map_or(0, |e| e.get_ids().len());
        let mut ids = Vec::with_capacity(rows * len);
        let mut types = Vec::with_capacity(rows * len);
        let mut mask = Vec::with_capacity(rows * len);
        for e in &encodings {
            if e.get_ids().len() != len {
                return Err(LocalEmbedError::Tokenize(
                    "the tokenizer returned rows of different lengths".into(),
                ));
            }
            ids.extend_from_slice(e.get_ids());
            types.extend_from_slice(e.get_type_ids());
            mask.extend_from_slice(e.get_attention_mask());
        }
        let ids = Tensor::from_vec(ids, (rows, len), &self.device)?;
        let types = Tensor::from_vec(types, (rows, len), &self.device)?;
        let mask = Tensor::from_vec(mask, (rows, len), &self.device)?;

        let hidden = self.bert.forward(&ids, &types, Some(&mask))?; // (rows, len, hidden)
        // Mean over the real tokens only: padded positions weigh zero.
        let weights = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // (rows, len, 1)
        let summed = hidden.broadcast_mul(&weights)?.sum(1)?; // (rows, hidden)
        let counts = weights.sum(1)?.clamp(1e-9f32, f32::MAX)?; // (rows, 1)
        let mean = summed.broadcast_div(&counts)?;
        let norms = mean
            .sqr()?
            .sum_keepdim(D::Minus1)?
            .sqrt()?
            .clamp(1e-12f32, f32::MAX)?;
        Ok(mean.broadcast_div(&norms)?.to_vec2::<f32>()?)
    }
}

fn read_to_string(path: &Path) -> Result<String, LocalEmbedError> {
    std::fs::read_to_string(path).map_err(|e| LocalEmbedError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}
