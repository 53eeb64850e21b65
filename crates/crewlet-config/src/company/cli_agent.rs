//! The `cli` block of a `type: cli-agent` model provider: a coding CLI
//! (Claude Code, Codex, Gemini CLI, ...) driven on the operator's
//! subscription instead of an API key (`docs/cli-agent.md`).

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A model backend driven through a coding CLI on a subscription.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CliAgent {
    /// Which coding CLI to drive.
    #[serde(default)]
    pub agent: CliAgentKind,
    /// Directory for the login (`credentials/`) and the seats' homes
    /// (`seats/`); empty: `$CREWLET_LLM_CLI_HOME/<provider>`, else
    /// `~/.crewlet/llm-cli/<provider>`. Entries naming the same directory
    /// share one login and must drive the same CLI.
    #[serde(default)]
    pub state_dir: String,
    /// Time allowed for one CLI run, in seconds; on expiry its whole
    /// process group is killed and the call fails as a timeout.
    #[serde(default = "default_cli_timeout")]
    pub timeout_seconds: f64,
    /// CLI processes of this provider running at once (at least 1).
    #[serde(default = "default_cli_concurrency")]
    pub max_concurrent: u32,
    /// Extra environment for the CLI process, applied last. The CLI gets
    /// no other variable of the engine's beyond `PATH`, locale, TLS and
    /// proxy settings.
    #[serde(default)]
    pub env: IndexMap<String, String>,
    /// How the CLI authenticates.
    #[serde(default)]
    pub auth: CliAgentAuth,
    /// Fields of the CLI's built-in profile to replace (`binary`,
    /// `complete_args`, `text_paths`, ...; see docs/cli-agent.md); an unknown
    /// field is an error.
    #[serde(default)]
    pub overrides: serde_json::Map<String, serde_json::Value>,
}

/// The fields of a CLI profile `cli.overrides` may replace (crewlet-llm's
/// `CliProfile`; its tests keep the two lists equal).
pub const PROFILE_FIELDS: &[&str] = &[
    "name",
    "binary",
    "verified_against",
    "version_args",
    "complete_args",
    "model_args",
    "prompt_via",
    "output_format",
    "jsonl_text",
    "text_paths",
    "input_token_paths",
    "output_token_paths",
    "cache_read_token_paths",
    "error_paths",
    "home_env",
    "xdg",
    "dir_env",
    "credential_paths",
    "volatile_paths",
    "seed_files",
    "env",
    "passthrough_env",
    "token_env",
    "api_key_env",
    "login_args",
    "status_args",
    "token_capture_args",
    "token_capture_pattern",
    "rate_limit_patterns",
    "auth_error_patterns",
];

fn default_cli_timeout() -> f64 {
    300.0
}

fn default_cli_concurrency() -> u32 {
    4
}

/// The coding CLIs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CliAgentKind {
    #[default]
    ClaudeCode,
    Codex,
    GeminiCli,
    QwenCode,
    Opencode,
    CursorAgent,
    Copilot,
    Grok,
    Custom,
}

impl CliAgentKind {
    /// The name as the company file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            CliAgentKind::ClaudeCode => "claude-code",
            CliAgentKind::Codex => "codex",
            CliAgentKind::GeminiCli => "gemini-cli",
            CliAgentKind::QwenCode => "qwen-code",
            CliAgentKind::Opencode => "opencode",
            CliAgentKind::CursorAgent => "cursor-agent",
            CliAgentKind::Copilot => "copilot",
            CliAgentKind::Grok => "grok",
            CliAgentKind::Custom => "custom",
        }
    }
}

/// How a coding CLI authenticates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CliAgentAuth {
    /// `subscription`: the CLI's own login (or its headless token), never an
    /// API key; `api-key`: the provider's first `api_keys` entry in the
    /// CLI's key variable; `inherit-env`: the engine's own token and key
    /// variables of this CLI, passed through.
    #[serde(default)]
    pub mode: CliAuthMode,
    /// Headless subscription token for `subscription` mode (e.g. a
    /// `CLAUDE_CODE_OAUTH_TOKEN` from `claude setup-token`), usually a
    /// `${VAR}` reference; empty: the CLI's token variable, else one saved by
    /// `crewlet llm login --capture-token`.
    #[serde(default)]
    pub token: String,
    /// An exported login restored at start.
    #[serde(default)]
    #[schemars(extend("x-crewlet-inert" = "credential bundles are not built: use `crewlet llm login --from-host` on each host"))]
    pub credential_bundle: String,
}

/// CLI authentication modes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CliAuthMode {
    #[default]
    Subscription,
    ApiKey,
    InheritEnv,
}
