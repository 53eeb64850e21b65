//! What a fleet of engine nodes shares (`0015_fleet.sql`): the leases
//! (node presence, seat ownership, company-wide duties), the completion
//! ledger of turns, and the effect journal of running turns.
//!
//! Each is a trait with an in-memory implementation (one process: it
//! holds every lease) and a PostgreSQL one (any number of processes),
//! passing the same conformance suite.

pub mod completions;
pub mod journal;
pub mod leases;
