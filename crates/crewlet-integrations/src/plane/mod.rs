//! Plane: the REST client ([`PlaneClient`]) the knowledge search, the
//! importer and provisioning share, and `crewlet plane provision`
//! ([`provision`]): the company's projects, the seats' memberships and the
//! workspace webhook made to match the company file.

mod apply;
mod client;
pub mod provision;

pub use client::{
    MAX_LIST_PAGES, Member, Page, PlaneClient, PlaneError, Project, SearchRow, Webhook, http_client,
};
