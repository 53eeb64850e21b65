//! Slack beyond webhooks: the Web API client ([`SlackClient`]) the engine
//! shows working statuses and posts with, and the provisioning of one
//! Slack app per agent seat (`crewlet slack provision`): the canonical
//! app [`manifest`], the [`ledger`] of created apps, the env file the
//! secrets land in ([`secrets`]) and the run itself ([`provision`]).
//!
//! Inbound Slack events are not here: `webhook::slack` verifies and
//! normalizes them like every other source.

pub mod api;
pub mod ledger;
pub mod manifest;
pub mod plan;
pub mod provision;
pub mod secrets;

pub use api::{AppCredentials, ConfigTokens, Identity, Install, SlackClient, SlackError};
pub use ledger::{AppRecord, Ledger, LedgerError};
pub use plan::{Planned, SeatPlan, install_code, plan};
pub use provision::{
    Action, InstallPrompt, Options, ProvisionError, Report, SeatReport, default_env_file,
    default_state_file, provision,
};
pub use secrets::{
    CONFIG_REFRESH_TOKEN_VAR, CONFIG_TOKEN_EXPIRES_VAR, CONFIG_TOKEN_VAR, EnvStore, ProcessEnv,
    TokenError, config_token,
};
