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
