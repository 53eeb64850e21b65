//! Turning text into vectors for the diary and episode stores.

use std::hash::{Hash, Hasher};

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::http::{AuthStyle, Endpoint};
use crate::{LlmError, ProviderConfig, ProviderKind};

/// The default embedding model and its width.
pub const DEFAULT_EMBEDDING_MODEL: &str = "text-embedding-3-small";
pub const DEFAULT_EMBEDDING_DIMENSIONS: usize = 1536;

/// Embeds texts; every vector has [`dimensions`](Embedder::dimensions) entries.
#[async_trait]
pub trait Embedder: Send + Sync {
    fn dimensions(&self) -> usize;

    /// One vector per text, in order.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError>;
}

/// `POST {base_url}/embeddings` on OpenAI or any compatible server.
#[derive(Debug)]
pub struct OpenAiEmbedder {
    endpoint: Endpoint,
    model: String,
    dimensions: usize,
}

impl OpenAiEmbedder {
    /// `config.model` empty means `text-embedding-3-small`. `dimensions` is
    /// sent only when it differs from the model's native 1536, since some
    /// compatible servers refuse the field.
    pub fn new(
        config: &ProviderConfig,
        client: reqwest::Client,
        dimensions: usize,
    ) -> Result<Self, LlmError> {
        let base = match (&config.base_url, config.kind) {
            (Some(url), _) => url.clone(),
            (None, ProviderKind::OpenAi) => crate::openai::OPENAI_BASE_URL.to_owned(),
            (None, _) => {
                return Err(LlmError::Config {
                    provider: config.name.clone(),
                    message: "an embeddings provider needs a `base_url` unless its type is openai"
                        .into(),
                });
            }
        };
        if dimensions == 0 {
            return Err(LlmError::Config {
                provider: config.name.clone(),
                message: "embedding dimensions must be at least 1".into(),
            });
        }
        let model = if config.model.trim().is_empty() {
            DEFAULT_EMBEDDING_MODEL.to_owned()
        } else {
            config.model.clone()
        };
        let url = format!("{}/embeddings", base.trim_end_matches('/'));
        Ok(Self {
            endpoint: Endpoint::new(config, client, url, AuthStyle::Bearer),
            model,
            dimensions,
        })
    }
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn dimensions(&self) -> usize {
        self.dimensions
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let mut body = json!({"model": self.model, "input": texts, "encoding_format": "float"});
        if self.dimensions != DEFAULT_EMBEDDING_DIMENSIONS {
            body["dimensions"] = json!(self.dimensions);
        }
        let answer = self.endpoint.send_json(&body).await?;
        let data = answer
            .get("data")
            .and_then(Value::as_array)
            .ok_or_else(|| self.endpoint.decode("answer has no data array"))?;
        let mut out: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for (pos, item) in data.iter().enumerate() {
            let index = item
                .get("index")
                .and_then(Value::as_u64)
                .and_then(|i| usize::try_from(i).ok())
                .unwrap_or(pos);
            let vector: Vec<f32> = item
                .get("embedding")
                .and_then(Value::as_array)
                .ok_or_else(|| {
                    self.endpoint
                        .decode(format!("data[{pos}] has no embedding"))
                })?
                .iter()
                .map(|x| x.as_f64().map(|f| f as f32))
                .collect::<Option<_>>()
                .ok_or_else(|| self.endpoint.decode(format!("data[{pos}] is not numbers")))?;
            if vector.len() != self.dimensions {
                return Err(self.endpoint.decode(format!(
                    "embedding has {} dimensions, expected {}",
                    vector.len(),
                    self.dimensions
                )));
            }
            match out.get_mut(index) {
                Some(slot) => *slot = Some(vector),
                None => {
                    return Err(self
                        .endpoint
                        .decode(format!("data[{pos}] has index {index} out of range")));
                }
            }
        }
        out.into_iter()
            .enumerate()
            .map(|(i, v)| {
                v.ok_or_else(|| self.endpoint.decode(format!("no embedding for input {i}")))
            })
            .collect()
    }
}

/// A deterministic in-memory embedder: hashed word features, L2-normalised,
/// so texts sharing words are close. Same text, same vector, every process.
#[derive(Debug, Clone)]
pub struct MemoryEmbedder {
    dimensions: usize,
}

impl MemoryEmbedder {
    pub fn new(dimensions: usize) -> Self {
        Self {
            dimensions: dimensions.max(1),
        }
    }

    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dimensions];
        for word in text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            let word = word.to_lowercase();
            // FNV-1a: stable across processes and Rust versions, unlike SipHash keys.
            let mut h = Fnv(0xcbf2_9ce4_8422_2325);
            word.hash(&mut h);
            let bits = h.finish();
            let slot = (bits % self.dimensions as u64) as usize;
            let sign = if bits & (1 << 63) == 0 { 1.0 } else { -1.0 };
            v[slot] += sign;
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }
}

impl Default for MemoryEmbedder {
    fn default() -> Self {
        Self::new(DEFAULT_EMBEDDING_DIMENSIONS)
    }
}

struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[async_trait]
impl Embedder for MemoryEmbedder {
    fn dimensions(&self) -> usize {
        self.dimensions
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LlmError> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[tokio::test]
    async fn memory_embedder_is_deterministic_and_similarity_aware() -> Result<(), LlmError> {
        let e = MemoryEmbedder::default();
        let texts = vec![
            "deploy the billing service".to_owned(),
            "Deploy the billing service!".to_owned(),
            "quarterly marketing newsletter".to_owned(),
        ];
        let v = e.embed(&texts).await?;
        assert_eq!(v[0].len(), 1536);
        assert_eq!(v[0], v[1]);
        assert!(cosine(&v[0], &v[1]) > 0.99);
        assert!(cosine(&v[0], &v[2]) < 0.5);
        assert_eq!(
            e.embed_one("deploy"),
            MemoryEmbedder::new(1536).embed_one("deploy")
        );
        Ok(())
    }
}
