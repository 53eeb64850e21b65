//! The running company. `crewlet-engine` composes everything below it: the
//! queue and the stores (`crewlet-queue`, `crewlet-store`, connected by
//! `crewlet-backends` and re-exported here as [`Backends`]), the model
//! providers (`crewlet-llm`), the turn engine and tools (`crewlet-turn`),
//! MCP servers and webhook notifications (`crewlet-integrations`) and the
//! org chart (`crewlet-config`) into:
//!
//! - [`Engine`] ([`EngineBuilder`]): one runtime per agent seat, subscribed
//!   to its durable inbox, one turn at a time per seat under a global cap,
//!   lifecycle events, hooks, token usage, graceful shutdown; it implements
//!   the API's [`EngineView`](crewlet_api::EngineView). Boot is a sequence
//!   of named steps (`engine/builder.rs`); each seat's [`SeatState`] lives
//!   here, and every task reaches a seat through one inbox post
//!   (`inbox.rs`), from the router, the scheduler and [`Engine::assign`].
//! - [`NotificationRouter`]: verified webhooks to exactly one seat's inbox.
//!   It reads `crewlet_integrations::RawWebhook`, asks each source's
//!   `WebhookSource` who a seat is there, and dedupes with the shared
//!   `crewlet_integrations::webhook::dedupe` policy; its records are the
//!   typed [`ExternalNotification`] and [`NotificationSkipped`] payloads.
//! - [`Scheduler`]: cron schedules fired at most once per fire time.
//! - Tools: `lookup_colleague` and the company's MCP tools.
//! - [`Maintenance`]: store upkeep while the engine runs (weekly partitions
//!   ahead, webhook claim GC), at boot and every 24 h.
//! - [`run`]: `crewlet run` (backends from the bootstrap, company import,
//!   embedded API, signals); [`admin`]: `crewlet config ...` and
//!   `crewlet budgets ...`.
//!
//! It owns no HTTP routes (`crewlet-api`), no storage schema
//! (`crewlet-store`) and no turn logic (`crewlet-turn`). See `docs/engine.md`.

pub mod admin;
mod coalesce;
mod colleagues;
mod company;
mod engine;
mod error;
pub mod fleet;
mod hooks;
mod inbox;
mod knowledge;
mod learning;
mod llm;
mod local_llm;
pub use local_llm::catalogue_models;
pub mod maintenance;
mod mattermost;
mod recent;
pub mod replay;
mod router;
pub mod run;
mod sandbox;
mod scheduler;
mod seat;
mod sink;
mod slack;
mod task;
mod tool_skills;
mod tools;
mod working;

pub use company::{
    SIBLING_COMPANY_FILE, active_company, company_of, import_company, local_author,
    sibling_company_file,
};
pub use crewlet_backends::{Backends, Process};
pub use engine::{Engine, EngineBuilder, EngineOptions, EnvLookup, ShutdownSummary, seat_profile};
pub use error::EngineError;
pub use hooks::{Hook, TASK_STATE_EVENTS};
pub use llm::{build_registry, guard_registry, role_llm};
pub use maintenance::{MAINTENANCE_INTERVAL, Maintenance, MaintenanceReport};
pub use router::{
    ExternalNotification, NotificationRouter, NotificationSkipped, ROUTER_CLAIM_SOURCE, RouteRule,
    Routing,
};
pub use run::{RunOptions, init_telemetry};
pub use scheduler::{FiredTask, ScheduleEntry, Scheduler, Zone};
pub use seat::SeatState;
pub use task::{TaskPriority, TaskRequest, derived_task_id};
pub use tool_skills::{SkillSyncOptions, skills_of, sync_once};
pub use tools::{TOOL_NAME_SEPARATOR, tool_name};

/// A `providers.llm` block for test companies (validation wants one when
/// there are agent seats); append it to a company YAML.
#[cfg(test)]
pub(crate) const TEST_LLM: &str = "\nproviders:\n  llm:\n    main: {type: openai-compatible, model: m, base_url: \"http://127.0.0.1:9/v1\"}\n";
