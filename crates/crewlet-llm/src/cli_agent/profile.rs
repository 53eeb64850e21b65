//! What Crewlet knows about one coding CLI, as data.
//!
//! Every fact that differs between CLIs (argv, where the prompt goes, where
//! the answer and the usage sit in its output, which files are its login and
//! which are its conversation memory) is a field here, so a vendor renaming a
//! flag is a `cli.overrides` edit in the company file, not a release.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::CliAgentError;

/// Replaced by the provider entry's `model` in argv.
pub const MODEL_PLACEHOLDER: &str = "{model}";
/// Replaced by the rendered prompt in argv (`prompt_via: argv`).
pub const PROMPT_PLACEHOLDER: &str = "{prompt}";
/// Replaced by the seat's home directory in argv and `env`.
pub const HOME_PLACEHOLDER: &str = "{home}";

/// Where the prompt is handed to the CLI.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptVia {
    /// On standard input: no `ARG_MAX` ceiling, not visible in `ps`.
    #[default]
    Stdin,
    /// As an argument (`{prompt}` in `complete_args`, else appended).
    Argv,
}

/// How the CLI prints its answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputFormat {
    /// One JSON document.
    #[default]
    Json,
    /// One JSON event per line; other lines are ignored.
    Jsonl,
    /// Standard output is the answer.
    Text,
}

/// Which text of a JSONL stream is the answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JsonlText {
    /// The last event carrying text (one event per message).
    #[default]
    Last,
    /// Every event's text joined (delta streams).
    Concat,
}

/// One coding CLI. Fields absent from an override keep the built-in value;
/// lists are replaced whole (argv order matters).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CliProfile {
    /// The `cli.agent` value this profile answers to.
    pub name: String,
    /// Executable: a name looked up on `PATH`, or a path.
    pub binary: String,
    /// The CLI release the arguments were written against (shown by `doctor`).
    pub verified_against: String,
    /// Arguments of the cheap version probe.
    pub version_args: Vec<String>,
    /// Arguments of one headless completion (`{model}`, `{prompt}`, `{home}`).
    pub complete_args: Vec<String>,
    /// Appended to `complete_args` when the entry names a model.
    pub model_args: Vec<String>,
    pub prompt_via: PromptVia,
    pub output_format: OutputFormat,
    pub jsonl_text: JsonlText,
    /// Candidate JSON paths of the answer text, first match wins.
    pub text_paths: Vec<Vec<String>>,
    pub input_token_paths: Vec<Vec<String>>,
    pub output_token_paths: Vec<Vec<String>>,
    pub cache_read_token_paths: Vec<Vec<String>>,
    /// Paths that, holding a non-empty string or `true`, mark a failed run.
    pub error_paths: Vec<Vec<String>>,
    /// Variables pointed at the seat's home.
    pub home_env: Vec<String>,
    /// Also point `XDG_{CONFIG,DATA,STATE,CACHE}_HOME` into the seat.
    pub xdg: bool,
    /// The vendor's own relocation variables: name to a path under the home.
    pub dir_env: IndexMap<String, String>,
    /// Files under the home that hold the login (copied in from the
    /// provider's `credentials/` before a generation, refreshed copies
    /// written back after it).
    pub credential_paths: Vec<String>,
    /// Paths under the home holding conversation memory (sessions,
    /// history, todos): removed before and after every generation.
    pub volatile_paths: Vec<String>,
    /// Files written into the home before every generation (settings that
    /// switch off the CLI's own tools, telemetry, auto-update).
    pub seed_files: IndexMap<String, String>,
    /// Fixed environment of every run (`{home}` substituted).
    pub env: IndexMap<String, String>,
    /// Non-secret host variables this CLI needs beyond the shared allowlist.
    pub passthrough_env: Vec<String>,
    /// Variable carrying a headless subscription token, when the CLI has one.
    pub token_env: String,
    /// Variable carrying a metered API key (`auth.mode: api-key`).
    pub api_key_env: String,
    /// Arguments of the vendor's interactive login.
    pub login_args: Vec<String>,
    /// Arguments of a "who am I" command; empty: none.
    pub status_args: Vec<String>,
    /// Arguments of a command that prints a reusable token.
    pub token_capture_args: Vec<String>,
    /// Regex whose first group is the token; empty: the last non-empty line.
    pub token_capture_pattern: String,
    /// Case-insensitive regexes meaning "the subscription window is spent".
    pub rate_limit_patterns: Vec<String>,
    /// Case-insensitive regexes meaning "not logged in / login expired".
    pub auth_error_patterns: Vec<String>,
}

impl Default for CliProfile {
    fn default() -> Self {
        Self {
            name: String::new(),
            binary: String::new(),
            verified_against: String::new(),
            version_args: strings(&["--version"]),
            complete_args: Vec::new(),
            model_args: Vec::new(),
            prompt_via: PromptVia::Stdin,
            output_format: OutputFormat::Json,
            jsonl_text: JsonlText::Last,
            text_paths: Vec::new(),
            input_token_paths: Vec::new(),
            output_token_paths: Vec::new(),
            cache_read_token_paths: Vec::new(),
            error_paths: Vec::new(),
            home_env: strings(&["HOME"]),
            xdg: true,
            dir_env: IndexMap::new(),
            credential_paths: Vec::new(),
            volatile_paths: Vec::new(),
            seed_files: IndexMap::new(),
            env: IndexMap::new(),
            passthrough_env: Vec::new(),
            token_env: String::new(),
            api_key_env: String::new(),
            login_args: Vec::new(),
            status_args: Vec::new(),
            token_capture_args: Vec::new(),
            token_capture_pattern: String::new(),
            rate_limit_patterns: strings(RATE_LIMIT_PATTERNS),
            auth_error_patterns: strings(AUTH_ERROR_PATTERNS),
        }
    }
}

/// Wording CLIs use for a spent subscription window.
pub const RATE_LIMIT_PATTERNS: &[&str] = &[
    r"usage limit reached",
    r"rate[ _-]?limit",
    r"too many requests",
    r"quota (?:exceeded|exhausted)",
    r"\b429\b",
    r"you(?:'ve| have) (?:hit|reached) your .{0,40}limit",
    r"resets? (?:at|in) ",
    r"insufficient[ _-]?quota",
    r"overloaded",
];

/// Wording CLIs use for a missing or expired login.
pub const AUTH_ERROR_PATTERNS: &[&str] = &[
    r"not (?:logged in|authenticated)",
    r"please (?:run )?`?/?[a-z-]+ ?login",
    r"authentication (?:failed|error|required)",
    r"invalid (?:api[ _-]?key|token|credentials?)",
    r"unauthori[sz]ed",
    r"\b401\b",
    r"\b403\b",
    r"credentials? (?:expired|not found)",
    r"session (?:expired|has expired)",
    r"oauth token (?:expired|revoked|has expired)",
];

pub(crate) fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

impl CliProfile {
    /// This profile with `overrides` laid over it field by field (`null`
    /// values ignored). An unknown field or a wrongly typed value is an
    /// error naming it.
    pub fn merged(
        &self,
        overrides: &serde_json::Map<String, Value>,
    ) -> Result<Self, CliAgentError> {
        let mut base = match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        for (key, value) in overrides {
            if !value.is_null() {
                base.insert(key.clone(), value.clone());
            }
        }
        let merged: CliProfile =
            serde_json::from_value(Value::Object(base)).map_err(|e| CliAgentError::Config {
                message: format!("cli.overrides: {e}"),
            })?;
        merged.check()?;
        Ok(merged)
    }

    /// The rules a profile must keep to be runnable and safe.
    pub fn check(&self) -> Result<(), CliAgentError> {
        let fail = |message: String| Err(CliAgentError::Config { message });
        if self.binary.trim().is_empty() {
            return fail(format!(
                "the `{}` profile names no binary: set cli.overrides.binary",
                self.name
            ));
        }
        if self.prompt_via == PromptVia::Argv && self.complete_args.is_empty() {
            return fail(format!(
                "prompt_via is argv but complete_args is empty: add `{PROMPT_PLACEHOLDER}` to cli.overrides.complete_args"
            ));
        }
        // Passthrough variables are copied from the engine's environment
        // whatever auth.mode says: a credential there would bill a metered
        // account on a flat-rate plan.
        for name in [&self.token_env, &self.api_key_env] {
            if !name.is_empty() && self.passthrough_env.contains(name) {
                return fail(format!(
                    "passthrough_env lists `{name}`, a credential of this CLI; credentials reach the CLI only through auth.mode"
                ));
            }
        }
        for pattern in self
            .rate_limit_patterns
            .iter()
            .chain(&self.auth_error_patterns)
            .chain(std::iter::once(&self.token_capture_pattern).filter(|p| !p.is_empty()))
        {
            if let Err(e) = regex::Regex::new(pattern) {
                return fail(format!("pattern `{pattern}` is not a valid regex: {e}"));
            }
        }
        Ok(())
    }

    /// Whether the CLI reports token usage (else usage is estimated).
    pub fn reports_usage(&self) -> bool {
        self.output_format != OutputFormat::Text
            && !(self.input_token_paths.is_empty() && self.output_token_paths.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli_agent::builtin_profile;

    #[test]
    fn overrides_replace_fields_and_reject_unknown_ones() -> Result<(), CliAgentError> {
        let claude = builtin_profile("claude-code")?;
        let mut o = serde_json::Map::new();
        o.insert("binary".into(), Value::from("/opt/claude"));
        o.insert("complete_args".into(), serde_json::json!(["-p"]));
        let merged = claude.merged(&o)?;
        assert_eq!(merged.binary, "/opt/claude");
        assert_eq!(merged.complete_args, ["-p"]);
        assert_eq!(merged.token_env, claude.token_env);

        o.insert("binnary".into(), Value::from("x"));
        let err = claude.merged(&o).map(|_| ()).unwrap_err().to_string();
        assert!(err.contains("binnary"), "{err}");
        Ok(())
    }

    #[test]
    fn a_credential_may_not_be_passed_through() -> Result<(), CliAgentError> {
        let mut o = serde_json::Map::new();
        o.insert(
            "passthrough_env".into(),
            serde_json::json!(["ANTHROPIC_API_KEY"]),
        );
        let err = builtin_profile("claude-code")?
            .merged(&o)
            .map(|_| ())
            .unwrap_err();
        assert!(err.to_string().contains("ANTHROPIC_API_KEY"), "{err}");
        Ok(())
    }

    #[test]
    fn custom_needs_a_binary() {
        let err = builtin_profile("custom").and_then(|p| p.merged(&serde_json::Map::new()));
        assert!(matches!(err, Err(CliAgentError::Config { .. })), "{err:?}");
    }
}
