//! The CLIs Crewlet ships knowledge of (`cli.agent`). Each is only data; any
//! field can be replaced under `cli.overrides`.

use indexmap::IndexMap;

use super::CliAgentError;
use super::profile::{CliProfile, JsonlText, MODEL_PLACEHOLDER, OutputFormat, PromptVia, strings};

/// Every `cli.agent` value, in the order the docs list them.
pub const AGENTS: &[&str] = &[
    "claude-code",
    "codex",
    "gemini-cli",
    "qwen-code",
    "opencode",
    "cursor-agent",
    "copilot",
    "grok",
    "custom",
];

/// The built-in profile named `agent`.
pub fn builtin_profile(agent: &str) -> Result<CliProfile, CliAgentError> {
    let profile = match agent {
        "claude-code" => claude_code(),
        "codex" => codex(),
        "gemini-cli" => gemini_like("gemini-cli", "gemini", ".gemini", "GEMINI_API_KEY"),
        "qwen-code" => gemini_like("qwen-code", "qwen", ".qwen", "OPENAI_API_KEY"),
        "opencode" => opencode(),
        "cursor-agent" => cursor_agent(),
        "copilot" => copilot(),
        "grok" => grok(),
        "custom" => CliProfile {
            name: "custom".into(),
            verified_against: "operator-defined".into(),
            output_format: OutputFormat::Text,
            ..CliProfile::default()
        },
        other => {
            return Err(CliAgentError::Config {
                message: format!(
                    "unknown cli.agent `{other}` (expected one of: {})",
                    AGENTS.join(", ")
                ),
            });
        }
    };
    Ok(profile)
}

fn paths(items: &[&[&str]]) -> Vec<Vec<String>> {
    items.iter().map(|p| strings(p)).collect()
}

fn map(items: &[(&str, &str)]) -> IndexMap<String, String> {
    items
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn model_flag() -> Vec<String> {
    strings(&["--model", MODEL_PLACEHOLDER])
}

/// Claude Code's settings in a seat: its own tools refused (Crewlet's tools
/// ride the JSON envelope instead), and transcripts kept as briefly as it
/// allows.
const CLAUDE_SETTINGS: &str = r#"{
  "permissions": {
    "deny": ["Bash", "Edit", "MultiEdit", "NotebookEdit", "Read", "Task", "WebFetch", "WebSearch", "Write"]
  },
  "includeCoAuthoredBy": false,
  "cleanupPeriodDays": 1
}
"#;

fn claude_code() -> CliProfile {
    CliProfile {
        name: "claude-code".into(),
        binary: "claude".into(),
        verified_against: "Claude Code 2.x (`claude --version`)".into(),
        complete_args: strings(&[
            "-p",
            "--output-format",
            "json",
            // no MCP servers of its own: it is a text model here
            "--strict-mcp-config",
            "--mcp-config",
            r#"{"mcpServers":{}}"#,
        ]),
        model_args: model_flag(),
        text_paths: paths(&[&["result"], &["content"]]),
        input_token_paths: paths(&[&["usage", "input_tokens"]]),
        output_token_paths: paths(&[&["usage", "output_tokens"]]),
        cache_read_token_paths: paths(&[&["usage", "cache_read_input_tokens"]]),
        error_paths: paths(&[&["is_error"], &["error"]]),
        dir_env: map(&[("CLAUDE_CONFIG_DIR", ".claude")]),
        credential_paths: strings(&[".claude/.credentials.json"]),
        volatile_paths: strings(&[
            ".claude/projects",
            ".claude/todos",
            ".claude/shell-snapshots",
            ".claude/statsig",
            ".claude/history.jsonl",
            ".claude.json",
            ".claude/.claude.json",
        ]),
        seed_files: map(&[(".claude/settings.json", CLAUDE_SETTINGS)]),
        env: map(&[
            ("DISABLE_AUTOUPDATER", "1"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ]),
        token_env: "CLAUDE_CODE_OAUTH_TOKEN".into(),
        api_key_env: "ANTHROPIC_API_KEY".into(),
        login_args: strings(&["/login"]),
        token_capture_args: strings(&["setup-token"]),
        token_capture_pattern: r"(sk-ant-oat[0-9]{2}-[A-Za-z0-9_-]{20,})".into(),
        ..CliProfile::default()
    }
}

fn codex() -> CliProfile {
    CliProfile {
        name: "codex".into(),
        binary: "codex".into(),
        verified_against: "OpenAI Codex CLI 0.x (`codex --version`)".into(),
        complete_args: strings(&[
            "exec",
            "--json",
            // the per-call directory is scratch, not a checkout
            "--skip-git-repo-check",
            "--sandbox",
            "read-only",
            "-",
        ]),
        model_args: model_flag(),
        output_format: OutputFormat::Jsonl,
        text_paths: paths(&[
            &["item", "text"],
            &["msg", "message"],
            &["msg", "last_agent_message"],
            &["last_agent_message"],
        ]),
        input_token_paths: paths(&[
            &["usage", "input_tokens"],
            &["item", "usage", "input_tokens"],
            &["msg", "info", "total_token_usage", "input_tokens"],
        ]),
        output_token_paths: paths(&[
            &["usage", "output_tokens"],
            &["item", "usage", "output_tokens"],
            &["msg", "info", "total_token_usage", "output_tokens"],
        ]),
        cache_read_token_paths: paths(&[
            &["usage", "cached_input_tokens"],
            &["msg", "info", "total_token_usage", "cached_input_tokens"],
        ]),
        dir_env: map(&[("CODEX_HOME", ".codex")]),
        credential_paths: strings(&[".codex/auth.json"]),
        volatile_paths: strings(&[
            ".codex/sessions",
            ".codex/archived_sessions",
            ".codex/history.jsonl",
            ".codex/log",
        ]),
        api_key_env: "OPENAI_API_KEY".into(),
        login_args: strings(&["login"]),
        status_args: strings(&["login", "status"]),
        ..CliProfile::default()
    }
}

/// Gemini CLI and its fork Qwen Code share one output shape.
fn gemini_like(name: &str, binary: &str, dir: &str, key_env: &str) -> CliProfile {
    let under = |p: &str| format!("{dir}/{p}");
    let mut profile = CliProfile {
        name: name.into(),
        binary: binary.into(),
        verified_against: format!("{binary} 0.x (`{binary} --version`)"),
        complete_args: strings(&["--output-format", "json"]),
        model_args: model_flag(),
        text_paths: paths(&[&["response"], &["result"]]),
        input_token_paths: paths(&[&["stats", "metrics", "tokens", "prompt"]]),
        output_token_paths: paths(&[&["stats", "metrics", "tokens", "candidates"]]),
        cache_read_token_paths: paths(&[&["stats", "metrics", "tokens", "cached"]]),
        error_paths: paths(&[&["error", "message"]]),
        credential_paths: vec![under("oauth_creds.json")],
        volatile_paths: vec![under("tmp"), under("history"), under("sessions")],
        api_key_env: key_env.into(),
        ..CliProfile::default()
    };
    if name == "gemini-cli" {
        profile.credential_paths.push(under("google_accounts.json"));
        profile.seed_files = map(&[(
            ".gemini/settings.json",
            r#"{"telemetry": {"enabled": false}, "usageStatisticsEnabled": false, "checkpointing": {"enabled": false}}"#,
        )]);
        profile.passthrough_env = strings(&["GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION"]);
    }
    profile
}

fn opencode() -> CliProfile {
    CliProfile {
        name: "opencode".into(),
        binary: "opencode".into(),
        verified_against: "OpenCode 0.x (`opencode --version`)".into(),
        complete_args: strings(&["run", "--format", "json"]),
        model_args: model_flag(),
        output_format: OutputFormat::Jsonl,
        // streams text deltas: the answer is all of them
        jsonl_text: JsonlText::Concat,
        text_paths: paths(&[&["part", "text"]]),
        input_token_paths: paths(&[&["tokens", "input"]]),
        output_token_paths: paths(&[&["tokens", "output"]]),
        cache_read_token_paths: paths(&[&["tokens", "cache", "read"]]),
        credential_paths: strings(&[".local/share/opencode/auth.json"]),
        volatile_paths: strings(&[
            ".local/share/opencode/storage",
            ".local/share/opencode/log",
            ".local/state/opencode",
        ]),
        api_key_env: "ANTHROPIC_API_KEY".into(),
        login_args: strings(&["auth", "login"]),
        status_args: strings(&["auth", "list"]),
        ..CliProfile::default()
    }
}

fn cursor_agent() -> CliProfile {
    CliProfile {
        name: "cursor-agent".into(),
        binary: "cursor-agent".into(),
        verified_against: "Cursor CLI 2026.x (`cursor-agent --version`)".into(),
        complete_args: strings(&["--print", "--output-format", "json"]),
        model_args: model_flag(),
        text_paths: paths(&[&["result"], &["response"]]),
        input_token_paths: paths(&[&["usage", "input_tokens"]]),
        output_token_paths: paths(&[&["usage", "output_tokens"]]),
        credential_paths: strings(&[
            ".local/share/cursor-agent/credentials.json",
            ".cursor/cli.json",
        ]),
        volatile_paths: strings(&[
            ".local/share/cursor-agent/chats",
            ".local/share/cursor-agent/logs",
        ]),
        login_args: strings(&["login"]),
        status_args: strings(&["status"]),
        ..CliProfile::default()
    }
}

fn copilot() -> CliProfile {
    CliProfile {
        name: "copilot".into(),
        binary: "copilot".into(),
        verified_against: "GitHub Copilot CLI 0.x (`copilot --version`)".into(),
        // the prompt is a flag value: long transcripts meet ARG_MAX
        complete_args: strings(&["--prompt", super::profile::PROMPT_PLACEHOLDER, "--no-color"]),
        prompt_via: PromptVia::Argv,
        model_args: model_flag(),
        output_format: OutputFormat::Text,
        dir_env: map(&[("COPILOT_CONFIG_DIR", ".copilot")]),
        credential_paths: strings(&[".copilot/config.json"]),
        volatile_paths: strings(&[".copilot/history-session-state", ".copilot/logs"]),
        // its key is a GitHub token: never forwarded unless auth.mode says so
        api_key_env: "GITHUB_TOKEN".into(),
        login_args: strings(&["/login"]),
        ..CliProfile::default()
    }
}

fn grok() -> CliProfile {
    CliProfile {
        name: "grok".into(),
        binary: "grok".into(),
        verified_against: "xAI Grok CLI 0.x (`grok --version`)".into(),
        complete_args: strings(&["--output-format", "json"]),
        model_args: model_flag(),
        text_paths: paths(&[&["response"], &["result"], &["text"]]),
        input_token_paths: paths(&[&["usage", "prompt_tokens"], &["usage", "input_tokens"]]),
        output_token_paths: paths(&[&["usage", "completion_tokens"], &["usage", "output_tokens"]]),
        credential_paths: strings(&[".grok/auth.json", ".grok/user-settings.json"]),
        volatile_paths: strings(&[".grok/sessions", ".grok/history"]),
        api_key_env: "GROK_API_KEY".into(),
        login_args: strings(&["login"]),
        status_args: strings(&["status"]),
        ..CliProfile::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_but_custom_is_runnable() -> Result<(), CliAgentError> {
        for agent in AGENTS {
            let profile = builtin_profile(agent)?;
            assert_eq!(profile.name, *agent);
            if *agent == "custom" {
                assert!(profile.check().is_err());
            } else {
                profile.check()?;
            }
        }
        assert!(builtin_profile("vim").is_err());
        Ok(())
    }

    #[test]
    fn no_builtin_prunes_its_own_login() -> Result<(), CliAgentError> {
        for agent in AGENTS {
            let p = builtin_profile(agent)?;
            for cred in &p.credential_paths {
                for vol in &p.volatile_paths {
                    assert!(
                        !cred.starts_with(vol.as_str()),
                        "{agent}: {cred} is under volatile {vol}"
                    );
                }
            }
        }
        Ok(())
    }
}
