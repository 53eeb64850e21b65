//! The conformance suite on the local bubblewrap backend.

mod common;

crewlet_sandbox::sandbox_conformance!(common::local());
