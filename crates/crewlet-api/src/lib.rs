//! Crewlet's HTTP API (`docs/api.md`): probes, the org and its agents, the event
//! store (events, traces, token breakdown), budgets, the company
//! configuration (read, replace, revisions, revert) and the webhook
//! receivers, which verify each source's signature, dedupe deliveries and
//! publish a `raw_webhook` event on `crewlet.notifications.inbound`.
//!
//! Build with [`ApiBuilder`] (the Tier A `api` section, an `EventQueue`, the
//! stores, optionally an [`EngineView`] and the memory stores
//! `GET /agents/{id}/memory` reads, [`ApiBuilder::memory`]) and serve with
//! [`Api::serve`]. The engine embeds it with its own [`EngineView`];
//! [`standalone`] runs it as its own process (`crewlet run api`,
//! `crewlet-api`).
//!
//! This crate never imports the engine: live state comes through
//! [`EngineView`]. It does not route notifications to seats (the engine's
//! router does), verify signatures or know any source's secrets, headers or
//! answers itself (each `crewlet_integrations::WebhookSource` does: the
//! webhook route asks it), define the `raw_webhook` payload (that is
//! `crewlet_integrations::RawWebhook`), or write events to the store on its
//! own: `crewlet_backends::archive` holds the one way every process stores
//! what it publishes, inline with a durable outbox and from the broker,
//! which the engine and [`standalone`] both install through
//! `crewlet_backends::Backends`.
//! The OpenAPI document is generated from the routes ([`openapi`]).

mod auth;
mod company;
pub mod content;
mod engine_view;
mod error;
mod gzip;
mod listener;
pub mod live;
mod local_token;
pub mod openapi;
mod routes;
mod serve;
pub mod standalone;
mod state;

pub use auth::{AdminAccess, Caller, OperateAccess, ReadAccess, TokenAccess};
pub use company::EnvLookup;
pub use engine_view::{
    AgentState, AgentView, CurrentTask, EngineView, RunningCompany, StaticEngineView,
    ToolAnnotations, ToolView,
};
pub use error::{ApiError, ErrorBody, HttpError};
pub use listener::prepare_listener;
pub use local_token::{
    LOCAL_TOKEN_ID, install_local_token, local_token_path, read_local_token, wants_local_token,
};
pub use routes::dashboard::page_weight as dashboard_page_weight;
pub use routes::fleet::drain_event as fleet_drain_event;
pub use serve::{Api, Background, bind, local_addr};
pub use state::{ApiBuilder, ApiLimits, ApiState, ApiStores};
