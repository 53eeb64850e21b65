//! Dev-only support for Crewlet's tests. Never a dependency of shipped code.
//!
//! [`services`] finds the real PostgreSQL and Pulsar started by
//! `cargo xtask services up`, and enforces the project rule: a test that needs
//! a service may skip on a laptop without it, but under `CI=true` a missing
//! service is a failure.
//!
//! [`fake_cli_agent`] finds the `crewlet-fake-cli-agent` binary, a fake
//! `claude -p --output-format json` for the cli-agent provider's tests.
//!
//! [`fake_llm`] (feature `fake-llm`) is a scripted OpenAI/Anthropic-compatible
//! HTTP server on 127.0.0.1 that records every request.
//!
//! [`otlp_receiver`] (feature `otlp`) is an OTLP/HTTP trace receiver on
//! 127.0.0.1 that records the spans exporters send it.
//!
//! [`e2e`] (feature `e2e`) holds what end-to-end tests share: signed Slack and
//! GitHub webhook requests, `free_port`, `temp_dir`, HTTP `get` and `post`.
//!
//! [`mattermost`] (feature `mattermost`) is a fake Mattermost server on
//! 127.0.0.1 (REST API v4 and websocket) with faults: dropped sockets,
//! refused upgrades, a stopped and restarted server.
//!
//! [`slack`] (feature `slack`) is a fake Slack Web API on 127.0.0.1 that
//! records working statuses, posts, manifest apps, installs and token
//! rotations, with refusals and rate limits on demand.
//!
//! [`confluence`] (feature `confluence`) is a fake Confluence REST API on
//! 127.0.0.1: users with tokens, spaces, pages with read restrictions and
//! parents, a CQL subset for search, content create and update.
//!
//! [`plane`] (feature `plane`) is a fake Plane API on 127.0.0.1: projects,
//! members, pages with page search, webhooks, and signed deliveries to the
//! registered webhooks.
//!
//! [`gitlab`] (feature `gitlab`) is a fake GitLab REST API on 127.0.0.1:
//! users, groups, projects, members, personal access tokens and hooks,
//! with a request log, and note-hook deliveries to the registered hooks.
//!
//! [`network`] (feature `network`) is a corporate network on loopback: a
//! private CA made per test, a TLS front for any local server, and a
//! `CONNECT` proxy that records its targets.

pub mod fake_cli_agent;
#[cfg(feature = "fake-llm")]
pub mod fake_llm;
pub mod services;

#[cfg(feature = "postgres")]
pub mod database;

#[cfg(feature = "postgres")]
pub mod outage;

#[cfg(feature = "otlp")]
pub mod otlp_receiver;

#[cfg(feature = "e2e")]
pub mod e2e;

#[cfg(feature = "mattermost")]
pub mod mattermost;

#[cfg(feature = "slack")]
pub mod slack;

#[cfg(feature = "confluence")]
pub mod confluence;

#[cfg(any(feature = "confluence", feature = "plane"))]
pub mod request_log;

#[cfg(feature = "plane")]
pub mod plane;

#[cfg(feature = "gitlab")]
pub mod gitlab;

#[cfg(feature = "network")]
pub mod network;
