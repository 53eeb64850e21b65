//! Subscription model backends: a coding CLI (`claude`, `codex`, `gemini`,
//! ...) driven as a text model, for `providers.llm` entries of
//! `type: cli-agent` (see `docs/cli-agent.md`).
//!
//! Each call spawns the CLI once: in the calling seat's own home
//! ([`with_seat`]), in an empty scratch directory removed afterwards, with
//! an environment built from an allowlist (never the engine's own), under a
//! per-entry concurrency limit and a deadline that kills the process group.
//! Tools ride a JSON envelope in the prompt and the answer; the CLI's own
//! tools are refused. Every CLI-specific fact is data ([`CliProfile`]), so
//! a vendor changing a flag is a `cli.overrides` edit.

use std::sync::Arc;

use crate::{LlmError, LlmProvider};

mod builtin;
mod doctor;
mod error;
mod login;
mod output;
mod process;
mod profile;
mod prompt;
mod provider;
mod scope;
mod settings;
mod workspace;

pub use builtin::{AGENTS, builtin_profile};
pub use doctor::{DOCTOR_SEAT, DoctorReport};
pub use error::CliAgentError;
pub use login::{LoginState, stored_token};
pub use output::{Decoded, decode, parse_envelope};
pub use profile::{
    AUTH_ERROR_PATTERNS, CliProfile, HOME_PLACEHOLDER, JsonlText, MODEL_PLACEHOLDER, OutputFormat,
    PROMPT_PLACEHOLDER, PromptVia, RATE_LIMIT_PATTERNS,
};
pub use prompt::render_prompt;
pub use provider::{CliAgentProvider, find_executable};
pub use scope::{ENGINE_SEAT, current_seat, sanitize as sanitize_seat, with_seat};
pub use settings::{
    AuthMode, CONFIG_DEFAULT_MODEL, CliAgentSettings, STATE_DIR_ENV, default_state_dir,
};
pub use workspace::{BASE_ENV, SeatLease, Workspace};

/// The provider of `providers.llm.<name>` of `type: cli-agent`, from its
/// `cli` block as JSON with `${VAR}`s expanded (what an engine's provider
/// builder calls). `api_keys` are the entry's expanded keys, `env` looks up
/// the engine's variables (the token fallback, `inherit-env`).
pub fn build(
    name: &str,
    model: &str,
    cli: &serde_json::Value,
    api_keys: &[String],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn LlmProvider>, LlmError> {
    let provider = CliAgentSettings::from_cli_block(name, model, cli, api_keys, env)
        .and_then(CliAgentProvider::new)
        .map_err(|source| LlmError::CliAgent {
            provider: name.to_owned(),
            source,
        })?;
    Ok(Arc::new(provider))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_block_is_an_error_naming_the_entry() {
        let env = |_: &str| Some("/home/x".to_owned());
        let bad = serde_json::json!({"agent": "claude-code", "overrides": {"binnary": "x"}});
        match build("sub", "sonnet", &bad, &[], &env) {
            Err(e @ LlmError::CliAgent { .. }) => {
                assert!(
                    e.to_string().starts_with("provider `sub`: cli.overrides"),
                    "{e}"
                );
            }
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("a typo in overrides was accepted"),
        }
        let ok = build("sub", "sonnet", &serde_json::json!({}), &[], &env);
        assert_eq!(
            ok.map(|p| p.model().to_owned()).ok().as_deref(),
            Some("sonnet")
        );
    }
}
