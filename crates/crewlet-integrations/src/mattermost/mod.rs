//! Mattermost: one bot account per seat, read over one websocket per seat.
//!
//! - [`MattermostClient`]: the REST API v4 calls Crewlet makes (posts,
//!   reactions, typing, channels, and the bots, tokens and memberships
//!   provisioning manages).
//! - [`SeatSocket`]: a seat's websocket with reconnect, backoff and gap
//!   backfill, handing every post it sees to a [`SeatInbox`].
//! - [`classify`]: what a post is to a seat (a DM, a mention, a top-level
//!   post in one of its channels, a reply in a thread it may follow, its
//!   own post, or noise), and [`SeatPost::notification`], the
//!   [`Notification`](crate::Notification) it becomes.

mod client;
mod inbound;
mod socket;
pub mod wire;

pub use client::{MattermostClient, MattermostError, http_client, normalize_url};
pub use inbound::{Addressed, SeatAccount, SeatPost, Verdict, classify, names};
pub use socket::{SeatInbox, SeatSocket, SocketOptions, SocketStatus};

pub mod doctor;
/// The env file moved to [`crate::provision::envfile`]; its old path stays.
pub use crate::provision::envfile;
pub mod provision;
mod seats;

pub use seats::{EnvLookup, origin};
