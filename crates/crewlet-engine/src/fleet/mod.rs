//! A fleet of engine nodes on one Pulsar and one PostgreSQL (`docs/fleet.md`).
//!
//! - [`identity`]: who this process is (stable node id, incarnation, roles,
//!   labels, lease timing).
//! - [`placement`]: which seats a node claims or gives back (pure).
//! - [`host`]: the [`SeatHost`], holding seats by lease and attaching them
//!   to the running engine; `lapse` says which seats a renewal lost.
//! - [`duties`]: company-wide duties on one node at a time.
//!
//! One process is the degenerate case of the same code: with memory stores
//! the leases live in the process, which then holds every seat.

pub mod admin;
pub mod duties;
pub mod host;
pub mod identity;
mod lapse;
pub mod placement;
pub(crate) mod work;

pub use duties::Duties;
pub use host::{HostStatus, SeatHost, SeatTarget};
pub use identity::{LEASE_PROTOCOL, NodeIdentity, parse_roles};
