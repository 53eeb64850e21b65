//! `providers.embeddings` to an [`Embedder`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crewlet_config::{EmbeddingsKind, EmbeddingsProvider, interpolate, process_env};
use crewlet_llm::{Embedder, LlmError, OpenAiEmbedder, ProviderConfig, ProviderKind};

use crate::{DIMENSIONS, LocalEmbedder, LocalEmbedderOptions};

/// The provider name of the HTTP embedders in errors and spans.
const HTTP_PROVIDER_NAME: &str = "embeddings";
/// The variable an `openai` embeddings entry without keys reads.
const CONVENTIONAL_KEY_VAR: &str = "OPENAI_API_KEY";

/// [`build_embedder_with_env`] with the process environment.
pub fn build_embedder(
    config: &EmbeddingsProvider,
    client: reqwest::Client,
) -> Result<Arc<dyn Embedder>, LlmError> {
    build_embedder_with_env(config, client, &process_env)
}

/// The embedder `config` names: [`LocalEmbedder`] for `type: local` (it
/// loads the model now, blocking for a fraction of a second, from `path` or
/// else [`default_model_dir`](crate::default_model_dir)), otherwise an
/// [`OpenAiEmbedder`] on `client`. `${VAR}` references in `path`,
/// `base_url` and the keys are expanded with `env`, which is also asked for
/// `OPENAI_API_KEY` when no key is configured (pass the company's filtered
/// environment to honour `security.company_env`).
pub fn build_embedder_with_env(
    config: &EmbeddingsProvider,
    client: reqwest::Client,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn Embedder>, LlmError> {
    let dimensions = usize::try_from(config.dimensions()).map_err(|_| LlmError::Config {
        provider: HTTP_PROVIDER_NAME.into(),
        message: "dimensions does not fit this machine".into(),
    })?;
    let provider = match config.kind {
        EmbeddingsKind::Local => crate::PROVIDER_NAME,
        EmbeddingsKind::Openai | EmbeddingsKind::OpenaiCompatible => HTTP_PROVIDER_NAME,
    };
    let expand = |what: &str, raw: &str| {
        interpolate(raw, env).map_err(|e| LlmError::Config {
            provider: provider.into(),
            message: format!("{what}: {e}"),
        })
    };
    let kind = match config.kind {
        EmbeddingsKind::Local => {
            if dimensions != DIMENSIONS {
                return Err(LlmError::Config {
                    provider: provider.into(),
                    message: format!(
                        "`type: local` returns {DIMENSIONS} dimensions, not {dimensions}"
                    ),
                });
            }
            let dir = match config.path.as_deref() {
                Some(raw) => PathBuf::from(expand("path", raw)?),
                // the model cache's install (`crewlet models pull`), else
                // the services folder of earlier versions
                None => crate::default_model_dir(),
            };
            let embedder = LocalEmbedder::load(&dir, LocalEmbedderOptions::default())?;
            return Ok(Arc::new(embedder));
        }
        EmbeddingsKind::Openai => ProviderKind::OpenAi,
        EmbeddingsKind::OpenaiCompatible => ProviderKind::OpenAiCompatible,
    };
    let mut keys = Vec::new();
    for (i, raw) in config.keys().into_iter().enumerate() {
        let key = expand(&format!("api key {i}"), raw)?;
        if !key.trim().is_empty() {
            keys.push(key);
        }
    }
    if config.keys().is_empty()
        && let Some(key) = env(CONVENTIONAL_KEY_VAR).filter(|k| !k.trim().is_empty())
    {
        keys.push(key);
    }
    if keys.is_empty() && kind == ProviderKind::OpenAi {
        return Err(LlmError::Config {
            provider: provider.into(),
            message: format!(
                "no api key: `api_key`/`api_keys` are empty and `{CONVENTIONAL_KEY_VAR}` is not set"
            ),
        });
    }
    let mut provider_config = ProviderConfig::new(provider, kind, config.model.clone())
        .with_keys(keys)
        .with_timeout(Duration::from_secs(config.timeout_seconds.max(1)));
    if let Some(url) = &config.base_url {
        provider_config = provider_config.with_base_url(expand("base_url", url)?);
    }
    let embedder = OpenAiEmbedder::new(&provider_config, client, dimensions)?;
    Ok(Arc::new(embedder))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(yaml_kind: EmbeddingsKind) -> EmbeddingsProvider {
        EmbeddingsProvider {
            kind: yaml_kind,
            model: "text-embedding-3-small".into(),
            api_key: None,
            api_keys: Vec::new(),
            base_url: None,
            dimensions: None,
            path: None,
            timeout_seconds: 60,
        }
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn openai_needs_a_key_and_takes_the_conventional_variable() {
        let config = provider(EmbeddingsKind::Openai);
        let err = build_embedder_with_env(&config, reqwest::Client::new(), &no_env)
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("OPENAI_API_KEY")));
        let env = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-test".to_owned());
        let embedder = build_embedder_with_env(&config, reqwest::Client::new(), &env);
        assert_eq!(embedder.map(|e| e.dimensions()).ok(), Some(1536));
    }

    #[test]
    fn openai_compatible_takes_its_width_and_expanded_url() {
        let mut config = provider(EmbeddingsKind::OpenaiCompatible);
        config.base_url = Some("${EMBED_URL}".into());
        config.dimensions = Some(768);
        let env = |name: &str| (name == "EMBED_URL").then(|| "http://127.0.0.1:9/v1".to_owned());
        let embedder = build_embedder_with_env(&config, reqwest::Client::new(), &env);
        assert_eq!(embedder.map(|e| e.dimensions()).ok(), Some(768));
        let err = build_embedder_with_env(&config, reqwest::Client::new(), &no_env)
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("EMBED_URL")));
    }

    #[test]
    fn local_refuses_other_widths_and_missing_folders() {
        let mut config = provider(EmbeddingsKind::Local);
        let err = |c: &EmbeddingsProvider| {
            build_embedder_with_env(c, reqwest::Client::new(), &no_env)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        config.path = Some("/nonexistent/crewlet-model".into());
        config.dimensions = Some(1536);
        assert!(err(&config).contains("384"), "{}", err(&config));
        config.dimensions = None;
        let message = err(&config);
        assert!(message.contains("/nonexistent/crewlet-model"), "{message}");
        assert!(message.contains("cargo xtask services up"), "{message}");
    }
}
