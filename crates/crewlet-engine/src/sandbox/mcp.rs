//! The seat's MCP servers rendered for its coding agent: the agent is an
//! MCP client itself and starts its own instances inside the box, with the
//! seat's credentials (`mcp_env`) as environment (stdio) or headers (HTTP).
//! Claude Code reads `--mcp-config` (with `--strict-mcp-config`, so only
//! these servers); OpenCode reads the `mcp` section of its global config;
//! a `command` agent finds the Claude-shaped file at `$CREWLET_MCP_CONFIG`.

use crewlet_config::later::CodingAgent;
use crewlet_integrations::mcp::{McpServerSpec, McpTransport};
use serde_json::{Map, Value, json};

/// The Claude-shaped file every agent but OpenCode reads.
pub(crate) const MCP_JSON: &str = "/home/user/.crewlet/mcp.json";
/// OpenCode's global config file.
pub(crate) const OPENCODE_JSON: &str = "/home/user/.config/opencode/opencode.json";

/// What goes into the box for the servers: the file, its contents, the
/// extra arguments of the agent's command line, and the variables to set.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rendered {
    /// The servers' names, for the brief.
    pub names: Vec<String>,
    pub path: &'static str,
    pub contents: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// The servers as `agent` reads them; `None` without servers.
pub(crate) fn render(agent: CodingAgent, servers: &[McpServerSpec]) -> Option<Rendered> {
    if servers.is_empty() {
        return None;
    }
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let names = servers.iter().map(|s| s.name.clone()).collect();
    Some(match agent {
        CodingAgent::Opencode => {
            let mcp: Map<String, Value> = servers
                .iter()
                .map(|s| (s.name.clone(), opencode_entry(s)))
                .collect();
            Rendered {
                names,
                path: OPENCODE_JSON,
                contents: pretty(&json!({
                    "$schema": "https://opencode.ai/config.json",
                    "mcp": mcp,
                })),
                args: Vec::new(),
                env: Vec::new(),
            }
        }
        CodingAgent::ClaudeCode | CodingAgent::Command => {
            let entries: Map<String, Value> = servers
                .iter()
                .map(|s| (s.name.clone(), claude_entry(s)))
                .collect();
            Rendered {
                names,
                path: MCP_JSON,
                contents: pretty(&json!({"mcpServers": entries})),
                args: if agent == CodingAgent::ClaudeCode {
                    vec![
                        "--mcp-config".into(),
                        MCP_JSON.into(),
                        "--strict-mcp-config".into(),
                    ]
                } else {
                    Vec::new()
                },
                env: vec![("CREWLET_MCP_CONFIG".into(), MCP_JSON.into())],
            }
        }
    })
}

fn claude_entry(s: &McpServerSpec) -> Value {
    match s.transport {
        McpTransport::Stdio => json!({
            "type": "stdio",
            "command": s.command.clone().unwrap_or_default(),
            "args": s.args,
            "env": s.env,
        }),
        McpTransport::Http => json!({
            "type": "http",
            "url": s.url.clone().unwrap_or_default(),
            "headers": s.headers,
        }),
    }
}

fn opencode_entry(s: &McpServerSpec) -> Value {
    match s.transport {
        McpTransport::Stdio => {
            let command: Vec<String> = s
                .command
                .iter()
                .cloned()
                .chain(s.args.iter().cloned())
                .collect();
            json!({"type": "local", "command": command, "environment": s.env, "enabled": true})
        }
        McpTransport::Http => json!({
            "type": "remote",
            "url": s.url.clone().unwrap_or_default(),
            "headers": s.headers,
            "enabled": true,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers() -> Vec<McpServerSpec> {
        vec![
            McpServerSpec::stdio("tracker", "tracker-mcp", ["--stdio"]).with_env("TOKEN", "t-1"),
            McpServerSpec::http("docs", "https://mcp.example.com/mcp")
                .with_header("Authorization", "Bearer b-2"),
        ]
    }

    fn parsed(r: &Rendered) -> Value {
        serde_json::from_str(&r.contents).unwrap_or_default()
    }

    #[test]
    fn claude_code_gets_a_strict_mcp_config_with_the_seats_credentials() {
        let r = render(CodingAgent::ClaudeCode, &servers()).unwrap_or_else(|| panic!("none"));
        assert_eq!(r.path, MCP_JSON);
        assert_eq!(r.names, ["tracker", "docs"]);
        assert_eq!(
            r.args,
            ["--mcp-config", MCP_JSON, "--strict-mcp-config"].map(String::from)
        );
        let v = parsed(&r);
        assert_eq!(v["mcpServers"]["tracker"]["command"], "tracker-mcp");
        assert_eq!(v["mcpServers"]["tracker"]["args"], json!(["--stdio"]));
        assert_eq!(v["mcpServers"]["tracker"]["env"]["TOKEN"], "t-1");
        assert_eq!(v["mcpServers"]["docs"]["type"], "http");
        assert_eq!(
            v["mcpServers"]["docs"]["headers"]["Authorization"],
            "Bearer b-2"
        );
    }

    #[test]
    fn opencode_gets_its_own_config_shape() {
        let r = render(CodingAgent::Opencode, &servers()).unwrap_or_else(|| panic!("none"));
        assert_eq!(r.path, OPENCODE_JSON);
        assert!(r.args.is_empty());
        let v = parsed(&r);
        assert_eq!(v["mcp"]["tracker"]["type"], "local");
        assert_eq!(
            v["mcp"]["tracker"]["command"],
            json!(["tracker-mcp", "--stdio"])
        );
        assert_eq!(v["mcp"]["tracker"]["environment"]["TOKEN"], "t-1");
        assert_eq!(v["mcp"]["docs"]["type"], "remote");
        assert_eq!(v["mcp"]["docs"]["url"], "https://mcp.example.com/mcp");
    }

    #[test]
    fn a_command_agent_finds_the_file_in_its_environment_and_no_servers_render_nothing() {
        let r = render(CodingAgent::Command, &servers()).unwrap_or_else(|| panic!("none"));
        assert!(r.args.is_empty());
        assert_eq!(
            r.env,
            vec![("CREWLET_MCP_CONFIG".to_owned(), MCP_JSON.to_owned())]
        );
        assert_eq!(render(CodingAgent::ClaudeCode, &[]), None);
    }
}
