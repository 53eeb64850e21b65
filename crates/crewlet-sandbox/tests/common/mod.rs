//! The local backend for tests: skipped on a laptop without bubblewrap or
//! cgroups, a failure under `CI=true`.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use crewlet_sandbox::local::{LocalOptions, LocalSandbox};

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

/// The local backend, or `None` (skip) when this host cannot run it and CI
/// is not set.
pub async fn local() -> Option<Arc<LocalSandbox>> {
    match LocalSandbox::new(LocalOptions::new(state_dir())).await {
        Ok(sb) if sb.enforces_limits() => Some(Arc::new(sb)),
        Ok(_) => {
            skip("this host cannot enforce sandbox limits (no writable cgroup v1 controllers)")
        }
        Err(e) => skip(&e.to_string()),
    }
}

fn skip<T>(why: &str) -> Option<T> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true but the local sandbox is unavailable: {why}");
    }
    eprintln!("skipping: {why}");
    None
}
