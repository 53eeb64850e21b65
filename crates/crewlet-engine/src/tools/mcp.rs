//! MCP servers of the company, started through crewlet-integrations'
//! [`McpHub`], and their tools adapted to crewlet-turn's [`Tool`].
//!
//! - Shared servers (`shared: true`, the default) start once; every agent
//!   seat sees their tools.
//! - A `shared: false` server starts once per agent seat with an
//!   `mcp_env.<server>` entry (its own or its unit's; or that lists it in
//!   Crewlet's role `mcp_servers`), with those values as environment (stdio)
//!   or headers (HTTP): each seat acts with its own credentials.
//! - A tool is registered as `{server}__{tool}` (one registry entry for
//!   every seat running that server; a call goes to the calling seat's own
//!   instance), visible only to the seats that run it.
//! - A server that fails to start (or whose `${VAR}` cannot be expanded) is
//!   skipped with an `mcp_server_failed` event; the rest keep working.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use crewlet_config::{
    Company, McpServer, McpTransport as ConfigTransport, Organization, interpolate,
};
use crewlet_core::{Event, EventType};
use crewlet_integrations::{
    ContentBlock, McpClient, McpError, McpHub, McpHubPlan, McpScope, McpServerSpec,
    McpStartFailure, McpTool, RoleMcpServers,
};
use crewlet_turn::{
    Tool, ToolAnnotations, ToolContext, ToolError, ToolOutput, ToolRegistry, Visibility,
};
use serde_json::{Value, json};
use tracing::{info, warn};

/// Separator between a server's name and its tool's name.
pub const TOOL_NAME_SEPARATOR: &str = "__";
/// Longest tool name model APIs accept.
const MAX_TOOL_NAME: usize = 64;

type Env<'a> = &'a (dyn Fn(&str) -> Option<String> + Send + Sync);

/// What starting the company's MCP servers gave.
pub(crate) struct McpStarted {
    pub hub: McpHub,
    /// `mcp_server_failed` events to publish.
    pub failures: Vec<Event>,
    /// Registered tool name -> server name.
    pub tools: BTreeMap<String, String>,
}

/// The name a tool is registered under: `{server}__{tool}`, limited to the
/// characters and length model APIs accept.
pub fn tool_name(server: &str, tool: &str) -> String {
    let raw = format!("{server}{TOOL_NAME_SEPARATOR}{tool}");
    let mut name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    name.truncate(MAX_TOOL_NAME);
    name
}

fn spec(name: &str, server: &McpServer, env: Env<'_>) -> Result<McpServerSpec, String> {
    let expand =
        |what: String, raw: &str| interpolate(raw, |v| env(v)).map_err(|e| format!("{what}: {e}"));
    let mut out = match server.transport {
        ConfigTransport::Stdio => McpServerSpec::stdio(
            name,
            expand(
                "command".into(),
                server.command.as_deref().unwrap_or_default(),
            )?,
            server
                .args
                .iter()
                .map(|a| expand("args".into(), a))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        ConfigTransport::Http => McpServerSpec::http(
            name,
            expand("url".into(), server.url.as_deref().unwrap_or_default())?,
        ),
    };
    for (k, v) in &server.env {
        let value = expand(format!("env.{k}"), v)?;
        if looks_secret(k, v) {
            crewlet_telemetry::register_secret(value.clone());
        }
        out = out.with_env(k.clone(), value);
    }
    for (k, v) in &server.headers {
        let value = expand(format!("headers.{k}"), v)?;
        if looks_secret(k, v) {
            crewlet_telemetry::register_secret(value.clone());
        }
        out = out.with_header(k.clone(), value);
    }
    let seconds = |s: f64| Duration::from_secs_f64(s.clamp(0.001, 86_400.0));
    Ok(out.with_timeouts(
        seconds(server.startup_timeout_seconds),
        seconds(server.request_timeout_seconds),
    ))
}

/// The seat's own credentials for server `name` (`mcp_env.<name>`),
/// expanded; each value is registered as a secret.
fn seat_mcp_env(
    seat: &crewlet_config::Seat,
    name: &str,
    env: Env<'_>,
) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (k, v) in seat.mcp_env.get(name).into_iter().flatten() {
        let value =
            interpolate(v, |var| env(var)).map_err(|e| format!("mcp_env.{name}.{k}: {e}"))?;
        crewlet_telemetry::register_secret(value.clone());
        out.insert(k.clone(), value);
    }
    Ok(out)
}

/// Server `name` of the company as `seat` runs it: the server's own
/// settings with the seat's `mcp_env` over them (for a coding agent's
/// sandbox, which starts its own instances).
pub(crate) fn seat_server(
    company: &Company,
    seat: &crewlet_config::Seat,
    name: &str,
    env: Env<'_>,
) -> Result<McpServerSpec, String> {
    let server = company
        .mcp_servers
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| format!("no MCP server `{name}` in mcp_servers"))?;
    let own = seat_mcp_env(seat, name, env)?;
    Ok(spec(name, server, env)?.for_role(&own))
}

/// Whether an env var or header is a credential to keep out of logs: its
/// value comes from the environment (`${VAR}`) or its name says so.
fn looks_secret(name: &str, raw: &str) -> bool {
    let n = name.to_ascii_lowercase();
    crewlet_config::has_references(raw)
        || [
            "token",
            "secret",
            "key",
            "password",
            "auth",
            "cookie",
            "credential",
        ]
        .iter()
        .any(|w| n.contains(w))
}

fn config_failure(scope: McpScope, server: &str, reason: String) -> McpStartFailure {
    McpStartFailure {
        scope,
        server: server.to_owned(),
        error: McpError::Config {
            server: server.to_owned(),
            reason,
        },
    }
}

/// Starts the shared servers and every agent seat's per-role servers, lists
/// their tools and registers them in `registry`.
pub(crate) async fn start(
    company: &Company,
    org: &Organization,
    registry: &ToolRegistry,
    env: Env<'_>,
) -> McpStarted {
    let mut plan = McpHubPlan::default();
    let mut failures: Vec<McpStartFailure> = Vec::new();
    let mut seen = BTreeSet::new();
    for server in &company.mcp_servers {
        // A repeated name: the first definition is the one used.
        if !server.shared || !seen.insert(server.name.as_str()) {
            continue;
        }
        match spec(&server.name, server, env) {
            Ok(s) => plan.shared.push(s),
            Err(reason) => failures.push(config_failure(McpScope::Shared, &server.name, reason)),
        }
    }
    for seat in org.agents() {
        let scope = || McpScope::Role(seat.handle.clone());
        // The seat's own servers: those it has credentials for, then those
        // it lists, each once, in the company's order.
        let wanted = |server: &McpServer| {
            !server.shared
                && (seat.mcp_env.contains_key(&server.name)
                    || seat.role.mcp_servers.contains(&server.name))
        };
        let mut mine = BTreeSet::new();
        for server in company.mcp_servers.iter().filter(|s| wanted(s)) {
            if !mine.insert(server.name.as_str()) {
                continue;
            }
            let name = &server.name;
            let mcp_env = match seat_mcp_env(seat, name, env) {
                Ok(e) => e,
                Err(reason) => {
                    failures.push(config_failure(scope(), name, reason));
                    continue;
                }
            };
            match spec(name, server, env) {
                Ok(s) => plan.roles.push(RoleMcpServers {
                    role: seat.handle.clone(),
                    servers: vec![s],
                    mcp_env,
                }),
                Err(reason) => failures.push(config_failure(scope(), name, reason)),
            }
        }
    }
    let planned = plan.shared.len() + plan.roles.iter().map(|r| r.servers.len()).sum::<usize>();
    let (hub, started_failures) = if planned == 0 {
        (McpHub::default(), Vec::new())
    } else {
        McpHub::start(plan).await
    };
    failures.extend(started_failures);

    // One adapter per registered name, routing to each seat's own instance.
    let mut adapters: BTreeMap<String, McpToolAdapter> = BTreeMap::new();
    let mut list_failures = Vec::new();
    for (server, client) in hub.shared() {
        match client.list_tools().await {
            Ok(tools) => {
                for tool in tools {
                    adapters
                        .entry(tool_name(server, &tool.name))
                        .or_insert_with(|| McpToolAdapter::new(server, &tool))
                        .shared = Some(client.clone());
                }
            }
            Err(error) => list_failures.push(McpStartFailure {
                scope: McpScope::Shared,
                server: server.clone(),
                error,
            }),
        }
    }
    for seat in org.agents() {
        for (server, client) in hub.role_servers(&seat.handle) {
            match client.list_tools().await {
                Ok(tools) => {
                    for tool in tools {
                        adapters
                            .entry(tool_name(server, &tool.name))
                            .or_insert_with(|| McpToolAdapter::new(server, &tool))
                            .roles
                            .insert(seat.handle.clone(), client.clone());
                    }
                }
                Err(error) => list_failures.push(McpStartFailure {
                    scope: McpScope::Role(seat.handle.clone()),
                    server: server.to_owned(),
                    error,
                }),
            }
        }
    }
    failures.extend(list_failures);
    let mut tools = BTreeMap::new();
    for (name, adapter) in adapters {
        let visibility = if adapter.shared.is_some() {
            Visibility::All
        } else {
            Visibility::Roles(adapter.roles.keys().cloned().collect::<BTreeSet<_>>())
        };
        tools.insert(name.clone(), adapter.server.clone());
        registry.upsert(Arc::new(adapter), visibility);
    }
    if !hub.is_empty() {
        info!(
            servers = hub.len(),
            tools = tools.len(),
            failed = failures.len(),
            "mcp servers started"
        );
    }
    let failures = failures
        .iter()
        .map(|f| {
            warn!(mcp_server = %f.server, scope = %f.scope, error = %f.error, "mcp server skipped");
            let mut e = f.to_event();
            e.source = "engine.mcp".into();
            if let McpScope::Role(handle) = &f.scope
                && let Some(seat) = org.seat(handle)
            {
                e = e
                    .with_agent(seat.agent_id, seat.name.as_str())
                    .with_agent_handle(handle.as_str());
            }
            debug_assert_eq!(e.event_type, EventType::McpServerFailed);
            e
        })
        .collect();
    McpStarted {
        hub,
        failures,
        tools,
    }
}

/// One MCP tool, registered once, served by each seat's own instance of its
/// server (or the shared one).
struct McpToolAdapter {
    name: String,
    server: String,
    tool: String,
    description: String,
    schema: Value,
    annotations: ToolAnnotations,
    shared: Option<McpClient>,
    roles: HashMap<String, McpClient>,
}

impl McpToolAdapter {
    fn new(server: &str, tool: &McpTool) -> Self {
        let a = &tool.annotations;
        let defaults = ToolAnnotations::default();
        let read_only = a.read_only_hint.unwrap_or(defaults.read_only);
        let mut description = tool
            .description
            .clone()
            .or_else(|| tool.title.clone())
            .unwrap_or_else(|| format!("The `{}` tool of MCP server `{server}`.", tool.name));
        description.push_str(&format!(" (MCP server `{server}`)"));
        let schema = if tool.input_schema.is_object() {
            tool.input_schema.clone()
        } else {
            json!({"type": "object"})
        };
        Self {
            name: tool_name(server, &tool.name),
            server: server.to_owned(),
            tool: tool.name.clone(),
            description,
            schema,
            annotations: ToolAnnotations {
                read_only,
                // MCP: destructive and idempotent are meaningful only when not read-only.
                destructive: !read_only && a.destructive_hint.unwrap_or(defaults.destructive),
                idempotent: read_only || a.idempotent_hint.unwrap_or(defaults.idempotent),
                open_world: a.open_world_hint.unwrap_or(defaults.open_world),
            },
            shared: None,
            roles: HashMap::new(),
        }
    }
}

fn result_text(content: &[ContentBlock], structured: Option<&Value>) -> String {
    let mut parts = Vec::new();
    for block in content {
        match block {
            ContentBlock::Text { text } => parts.push(text.clone()),
            ContentBlock::Resource {
                text: Some(text), ..
            } => parts.push(text.clone()),
            ContentBlock::Resource { uri, .. } | ContentBlock::ResourceLink { uri, .. } => {
                parts.push(format!("[resource {uri}]"));
            }
            ContentBlock::Image { mime_type, .. } => {
                parts.push(format!("[{mime_type} image omitted]"))
            }
            ContentBlock::Audio { mime_type, .. } => {
                parts.push(format!("[{mime_type} audio omitted]"))
            }
            ContentBlock::Other(v) => parts.push(v.to_string()),
        }
    }
    if parts.is_empty()
        && let Some(s) = structured
    {
        parts.push(s.to_string());
    }
    parts.join("\n")
}

#[async_trait]
impl Tool for McpToolAdapter {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn schema(&self) -> Value {
        self.schema.clone()
    }

    fn annotations(&self) -> ToolAnnotations {
        self.annotations
    }

    fn mcp_origin(&self) -> Option<(&str, &str)> {
        Some((&self.server, &self.tool))
    }

    async fn invoke(&self, ctx: &ToolContext, arguments: Value) -> Result<ToolOutput, ToolError> {
        // The calling seat's own instance first: its credentials, never another's.
        let client = self
            .roles
            .get(&ctx.agent_handle)
            .or(self.shared.as_ref())
            .ok_or_else(|| {
                ToolError::Failed(format!(
                    "MCP server `{}` is not running for {}",
                    self.server, ctx.agent_handle
                ))
            })?;
        match client.call_tool(&self.tool, arguments).await {
            Ok(result) => {
                let text = result_text(&result.content, result.structured_content.as_ref());
                if result.is_error {
                    Err(ToolError::Failed(if text.is_empty() {
                        format!("`{}` reported an error", self.name)
                    } else {
                        text
                    }))
                } else {
                    Ok(ToolOutput::text(text))
                }
            }
            Err(e) => Err(ToolError::Failed(format!(
                "MCP server `{}`: {e}",
                self.server
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_prefixed_and_safe() {
        assert_eq!(tool_name("chat", "post_message"), "chat__post_message");
        assert_eq!(tool_name("my.server", "a/b"), "my_server__a_b");
        assert_eq!(tool_name(&"s".repeat(80), "t").len(), 64);
    }
}
