//! The local backend for tests: skipped on a laptop without bubblewrap or
//! cgroups, a failure under `CI=true`.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use crewlet_sandbox::local::LocalSandbox;

/// A fresh state directory for one test.
pub fn state_dir() -> PathBuf {
    std::env::temp_dir().join(format!("crewlet-sandbox-test-{}", uuid_like()))
}

fn uuid_like() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}-{nanos}", std::process::id())
}

/// The local backend on a fresh state directory, or `None` (skip).
pub async fn local() -> Option<Arc<LocalSandbox>> {
    crewlet_sandbox::testsuite::local_or_skip(state_dir())
        .await
        .map(Arc::new)
}
