//! Crewlet's outside world.
//!
//! - [`webhook`]: per source (Slack, GitHub, GitLab, Plane, Jira, Confluence)
//!   verification of inbound webhooks and their normalization into one
//!   [`Notification`] shape. Pure functions: no I/O, no clock (the caller
//!   passes `now`), no configuration lookups (the caller passes the secret).
//! - [`mcp`]: a Model Context Protocol client over stdio and streamable HTTP,
//!   and [`McpHub`], which starts the shared and per-role servers of a company.
//!
//! This crate does not own routing (which seat a notification wakes: the
//! engine's `NotificationRouter`), dedupe storage (`crewlet-store`), HTTP
//! status mapping beyond [`WebhookError::status_code`] (`crewlet-api`), or the
//! `Tool` trait that MCP tools are adapted to (`crewlet-turn`). It never
//! imports the turn engine or the engine, and takes its inputs as its own small
//! structs so the engine maps configuration onto them.

pub mod mcp;
pub mod webhook;

pub use mcp::{
    CallToolResult, ContentBlock, McpClient, McpError, McpHub, McpHubPlan, McpScope, McpServerSpec,
    McpStartFailure, McpTool, McpTransport, RoleMcpServers, ServerInfo, ToolAnnotations,
};
pub use webhook::{Headers, Inbound, Notification, Source, WebhookError};
