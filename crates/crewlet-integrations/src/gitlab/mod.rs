//! GitLab: one user account per agent seat, provisioned from the company
//! file (inbound GitLab webhooks are [`crate::webhook::gitlab`]).
//!
//! - [`GitlabClient`]: the REST API v4 calls provisioning makes
//!   (`PRIVATE-TOKEN`, `page`/`per_page` pagination).
//! - [`provision`]: `crewlet gitlab provision`: preflight, a printed plan,
//!   then users, group and project memberships, tokens minted into the env
//!   file, and the webhook to Crewlet's API.

mod client;
pub mod provision;
mod seats;

pub use client::{
    GitlabClient, GitlabError, Hook, Member, Namespace, NewToken, Space, User, encode_segment,
    normalize_url,
};
pub use seats::{EnvLookup, HookMode, access_level, level_name};
