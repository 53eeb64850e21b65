//! Crewlet's developer and CI automation, run as `cargo xtask <command>`.
//!
//! The binary (`src/main.rs`) only parses arguments; everything else lives in
//! this library so that the integration tests in `xtask/tests/` can reuse the
//! service constants and the tiny HTTP client.

pub mod bench;
pub mod ci;
pub mod cmd;
pub mod engine_process;
pub mod http;
pub mod schema;
pub mod schemathesis;
pub mod services;
pub mod test_report;

use std::path::{Path, PathBuf};

/// The workspace root (the directory holding the top-level `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    // `cargo run` sets the variable at run time too. Prefer it: with a target
    // directory shared between checkouts, the binary may have been compiled
    // in another checkout, whose path `env!` would have baked in.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map_or_else(|| manifest_dir.clone(), Path::to_path_buf)
}

/// Whether we run under CI (`CI=true` or `CI=1`), where a missing service is a
/// failure rather than a skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}
