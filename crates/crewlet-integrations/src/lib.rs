//! Crewlet's outside world.
//!
//! - [`webhook`]: per source (Slack, GitHub, GitLab, Plane, Jira, Confluence)
//!   verification of inbound webhooks and their normalization into one
//!   [`Notification`] shape. Pure functions: no I/O, no clock (the caller
//!   passes `now`). Each source module also implements [`WebhookSource`]:
//!   where its secrets sit in the company YAML ([`WebhookSecrets`] expands
//!   them), which headers it keeps, which are credentials (401 when
//!   missing) and which carry secrets, its accepted status, and which seat
//!   and contact fields identify a person on it and what a unit or seat
//!   owns there (what the engine's router matches).
//! - [`RawWebhook`]: the payload of the `raw_webhook` event the API
//!   publishes and the router reads (an `EventPayload`), with its tags.
//! - [`webhook::dedupe`]: claim a delivery's keys, publish, release the
//!   claims if the publish fails: the one dedupe policy of the API and the
//!   router, over a small [`ClaimStore`](webhook::dedupe::ClaimStore)
//!   trait they adapt `crewlet-store`'s `WebhookDeliveries` to.
//! - [`mattermost`]: the Mattermost REST client and the per-seat websocket
//!   (reconnect, backoff, gap backfill) that turns posts into notifications.
//! - [`gitlab`]: the GitLab REST client and `crewlet gitlab provision`: one
//!   user per agent seat, its group membership, its token in the env file,
//!   and the webhook to the API.
//! - [`slack`]: the Slack Web API client (working statuses, posts) and
//!   `crewlet slack provision`: one Slack app per agent seat through the
//!   manifest API, its ledger and the env file its secrets land in.
//! - [`knowledge`]: the knowledge base searched live (Confluence CQL, Plane
//!   page search) behind one seam, and the Markdown importer.
//! - [`plane`]: the Plane REST client and `crewlet plane provision`.
//! - [`provision`]: what the provision commands share: the env file, seat
//!   outcomes and minted tokens, the `${VAR}` rules of a seat's token.
//! - [`mcp`]: a Model Context Protocol client over stdio and streamable HTTP,
//!   and [`McpHub`], which starts the shared and per-role servers of a company.
//!
//! This crate does not own routing (which seat a notification wakes: the
//! engine's `NotificationRouter`), dedupe storage (`crewlet-store`), HTTP
//! answers that are not per source (no company yet, queue down, body too
//! large: `crewlet-api`), or the `Tool` trait that MCP tools are adapted to
//! (`crewlet-turn`). It depends on `crewlet-core` and `crewlet-config` only
//! (the company types its sources read); it never imports the store, the
//! turn engine or the engine. `crewlet-telemetry` does not depend on it:
//! each source declares the company fields holding its credentials
//! ([`WebhookSource::secret_fields`]) and a test asserts telemetry's
//! redaction list covers them.

pub mod gitlab;
pub mod knowledge;
pub mod mattermost;
pub mod mcp;
pub mod plane;
pub mod provision;
pub mod slack;
pub mod webhook;

pub use mcp::{
    CallToolResult, ContentBlock, McpClient, McpError, McpHub, McpHubPlan, McpScope, McpServerSpec,
    McpStartFailure, McpTool, McpTransport, RoleMcpServers, ServerInfo, ToolAnnotations,
};
pub use webhook::{
    Headers, Inbound, Notification, RawWebhook, Secret, Source, WebhookError, WebhookRequest,
    WebhookSecrets, WebhookSource,
};
