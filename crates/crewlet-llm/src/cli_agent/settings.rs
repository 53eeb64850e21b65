//! One `type: cli-agent` entry as this crate sees it: the `cli` block of the
//! company file (already `${VAR}`-expanded by the caller) plus the entry's
//! name, model and keys.

use std::path::PathBuf;
use std::time::Duration;

use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::Value;

use super::profile::CliProfile;
use super::{CliAgentError, builtin_profile};

/// The company file's default `model`. It is an OpenAI model no CLI takes,
/// so on a cli-agent entry it means "the CLI's own default" (no `--model`).
pub const CONFIG_DEFAULT_MODEL: &str = "gpt-4o";

/// Names the root of every provider's state, instead of `~/.crewlet/llm-cli`.
pub const STATE_DIR_ENV: &str = "CREWLET_LLM_CLI_HOME";

/// How the CLI is given a credential.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuthMode {
    /// The CLI's own login (credential files), or the profile's headless
    /// token when one is configured. Never an API key.
    #[default]
    Subscription,
    /// The entry's first API key, in the profile's `api_key_env`.
    ApiKey,
    /// The engine's own `token_env` / `api_key_env` values, passed through.
    InheritEnv,
}

/// The `cli` block as the company file spells it.
#[derive(Clone, Debug, Deserialize)]
struct CliBlock {
    #[serde(default = "default_agent")]
    agent: String,
    #[serde(default)]
    state_dir: String,
    #[serde(default = "default_timeout")]
    timeout_seconds: f64,
    #[serde(default = "default_concurrency")]
    max_concurrent: u32,
    #[serde(default)]
    env: IndexMap<String, String>,
    #[serde(default)]
    auth: AuthBlock,
    #[serde(default)]
    overrides: serde_json::Map<String, Value>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct AuthBlock {
    #[serde(default)]
    mode: AuthMode,
    #[serde(default)]
    token: String,
    // Accepted, not used: credential bundles are not built (see docs/cli-agent.md).
    #[serde(default, rename = "credential_bundle")]
    _credential_bundle: String,
}

fn default_agent() -> String {
    "claude-code".into()
}

fn default_timeout() -> f64 {
    300.0
}

fn default_concurrency() -> u32 {
    4
}

/// Everything needed to run one cli-agent provider entry.
#[derive(Clone)]
pub struct CliAgentSettings {
    /// The entry's name in `providers.llm`.
    pub provider: String,
    /// Passed to the CLI as `{model}`; empty: the CLI's own default.
    pub model: String,
    /// The profile, overrides applied.
    pub profile: CliProfile,
    /// `<state_dir>`: `credentials/` and `seats/` live here.
    pub state_dir: PathBuf,
    /// One CLI run, wall clock.
    pub timeout: Duration,
    /// CLI processes of this entry running at once.
    pub max_concurrent: usize,
    /// Extra child environment (the operator's `cli.env`), applied last.
    pub env: IndexMap<String, String>,
    /// Credential variables for the child, decided by `auth.mode`.
    pub auth_env: IndexMap<String, String>,
    pub auth_mode: AuthMode,
}

impl std::fmt::Debug for CliAgentSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `auth_env` and `env` may hold tokens: names only.
        f.debug_struct("CliAgentSettings")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("agent", &self.profile.name)
            .field("state_dir", &self.state_dir)
            .field("timeout", &self.timeout)
            .field("max_concurrent", &self.max_concurrent)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("auth_env", &self.auth_env.keys().collect::<Vec<_>>())
            .field("auth_mode", &self.auth_mode)
            .finish()
    }
}

impl CliAgentSettings {
    /// Settings of entry `provider` from its `cli` block as JSON (the
    /// company file's `providers.llm.<provider>.cli`, `${VAR}`s expanded).
    /// `api_keys` are the entry's keys (used by `auth.mode: api-key`);
    /// `env` looks up the engine's variables (the token fallback and
    /// `inherit-env`), `home` is the engine user's home directory.
    pub fn from_cli_block(
        provider: &str,
        model: &str,
        cli: &Value,
        api_keys: &[String],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, CliAgentError> {
        let block: CliBlock =
            serde_json::from_value(cli.clone()).map_err(|e| CliAgentError::Config {
                message: format!("providers.llm.{provider}.cli: {e}"),
            })?;
        let profile = builtin_profile(&block.agent)?.merged(&block.overrides)?;
        if !(block.timeout_seconds.is_finite() && block.timeout_seconds > 0.0) {
            return Err(CliAgentError::Config {
                message: format!("providers.llm.{provider}.cli.timeout_seconds must be above 0"),
            });
        }
        let state_dir = if block.state_dir.trim().is_empty() {
            default_state_dir(provider, env)?
        } else {
            expand_home(block.state_dir.trim(), env)
        };
        let model = model.trim();
        let mut settings = Self {
            provider: provider.to_owned(),
            model: if model == CONFIG_DEFAULT_MODEL {
                String::new()
            } else {
                model.to_owned()
            },
            profile,
            state_dir,
            timeout: Duration::from_secs_f64(block.timeout_seconds.min(86_400.0)),
            max_concurrent: usize::try_from(block.max_concurrent.max(1)).unwrap_or(1),
            env: block.env,
            auth_env: IndexMap::new(),
            auth_mode: block.auth.mode,
        };
        settings.auth_env = settings.credential_env(&block.auth.token, api_keys, env)?;
        Ok(settings)
    }

    /// The child's credential variables. `subscription` never forwards an
    /// API key: a stray `ANTHROPIC_API_KEY` would bill the metered account.
    fn credential_env(
        &self,
        token: &str,
        api_keys: &[String],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<IndexMap<String, String>, CliAgentError> {
        let p = &self.profile;
        let mut out = IndexMap::new();
        let nonempty = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
        match self.auth_mode {
            AuthMode::Subscription => {
                if !p.token_env.is_empty() {
                    let token = nonempty(Some(token.to_owned()))
                        .or_else(|| nonempty(env(&p.token_env)))
                        .or_else(|| super::login::stored_token(&self.state_dir));
                    if let Some(token) = token {
                        out.insert(p.token_env.clone(), token);
                    }
                }
            }
            AuthMode::ApiKey => {
                if p.api_key_env.is_empty() {
                    return Err(CliAgentError::Config {
                        message: format!(
                            "auth.mode is api-key but the `{}` profile has no api_key_env; set cli.overrides.api_key_env or use auth.mode: subscription",
                            p.name
                        ),
                    });
                }
                let key = api_keys
                    .iter()
                    .find(|k| !k.trim().is_empty())
                    .cloned()
                    .or_else(|| nonempty(env(&p.api_key_env)))
                    .ok_or_else(|| CliAgentError::Config {
                        message: format!(
                            "auth.mode is api-key but no key is set: add providers.llm.{}.api_keys or set {}",
                            self.provider, p.api_key_env
                        ),
                    })?;
                out.insert(p.api_key_env.clone(), key);
            }
            AuthMode::InheritEnv => {
                for name in [&p.token_env, &p.api_key_env] {
                    if !name.is_empty()
                        && let Some(value) = nonempty(env(name))
                    {
                        out.insert(name.clone(), value);
                    }
                }
            }
        }
        Ok(out)
    }

    /// The shared login every seat is seeded from.
    pub fn credential_dir(&self) -> PathBuf {
        self.state_dir.join("credentials")
    }

    /// Whether a credential reaches the CLI other than its login files.
    pub fn has_token(&self) -> bool {
        !self.auth_env.is_empty()
    }
}

/// `$CREWLET_LLM_CLI_HOME/<provider>`, else `~/.crewlet/llm-cli/<provider>`.
pub fn default_state_dir(
    provider: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<PathBuf, CliAgentError> {
    let slug = super::scope::sanitize(provider);
    if let Some(root) = env(STATE_DIR_ENV).filter(|v| !v.trim().is_empty()) {
        return Ok(expand_home(root.trim(), env).join(slug));
    }
    let home = env("HOME")
        .filter(|h| !h.trim().is_empty())
        .ok_or_else(|| CliAgentError::Config {
            message: format!(
                "no cli.state_dir for provider `{provider}` and neither {STATE_DIR_ENV} nor HOME is set"
            ),
        })?;
    Ok(PathBuf::from(home)
        .join(".crewlet")
        .join("llm-cli")
        .join(slug))
}

fn expand_home(path: &str, env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    match (path.strip_prefix("~/"), env("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn subscription_mode_never_forwards_an_api_key() -> Result<(), CliAgentError> {
        let env = env_of(&[("ANTHROPIC_API_KEY", "sk-metered"), ("HOME", "/h")]);
        let s = CliAgentSettings::from_cli_block(
            "sub",
            "sonnet",
            &serde_json::json!({"agent": "claude-code"}),
            &["sk-entry".into()],
            &env,
        )?;
        assert!(s.auth_env.is_empty(), "{s:?}");
        assert_eq!(s.model, "sonnet");
        let unset =
            CliAgentSettings::from_cli_block("sub", "gpt-4o", &serde_json::json!({}), &[], &env)?;
        assert_eq!(unset.model, "", "the config default means the CLI's own");
        assert_eq!(s.state_dir, PathBuf::from("/h/.crewlet/llm-cli/sub"));
        assert_eq!(s.max_concurrent, 4);
        Ok(())
    }

    #[test]
    fn modes_pick_their_credential() -> Result<(), CliAgentError> {
        let env = env_of(&[
            ("CLAUDE_CODE_OAUTH_TOKEN", "oat-host"),
            ("ANTHROPIC_API_KEY", "sk-host"),
            ("CREWLET_LLM_CLI_HOME", "/state"),
        ]);
        let block = |mode: &str| serde_json::json!({"auth": {"mode": mode}});
        let sub = CliAgentSettings::from_cli_block("a", "", &block("subscription"), &[], &env)?;
        assert_eq!(
            sub.auth_env
                .get("CLAUDE_CODE_OAUTH_TOKEN")
                .map(String::as_str),
            Some("oat-host")
        );
        assert_eq!(sub.state_dir, PathBuf::from("/state/a"));
        let key =
            CliAgentSettings::from_cli_block("a", "", &block("api-key"), &["sk-1".into()], &env)?;
        assert_eq!(
            key.auth_env.get("ANTHROPIC_API_KEY").map(String::as_str),
            Some("sk-1")
        );
        assert!(!key.auth_env.contains_key("CLAUDE_CODE_OAUTH_TOKEN"));
        let inherit = CliAgentSettings::from_cli_block("a", "", &block("inherit-env"), &[], &env)?;
        assert_eq!(inherit.auth_env.len(), 2);
        let debug = format!("{inherit:?}");
        assert!(
            !debug.contains("sk-host") && !debug.contains("oat-host"),
            "{debug}"
        );
        Ok(())
    }

    #[test]
    fn a_bad_block_names_the_provider() {
        let env = env_of(&[("HOME", "/h")]);
        let err = CliAgentSettings::from_cli_block(
            "sub",
            "",
            &serde_json::json!({"agent": "vim"}),
            &[],
            &env,
        )
        .map(|_| ())
        .unwrap_err();
        assert!(err.to_string().contains("vim"), "{err}");
    }
}
