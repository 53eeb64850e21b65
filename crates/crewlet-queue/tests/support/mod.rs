//! A throwaway Apache Pulsar standalone that a test owns, so it can kill and
//! restart it without disturbing the shared broker other tests use. It runs
//! from the jars `cargo xtask services up` cached, on its own ports and data
//! directory.

#![allow(dead_code)]

use std::fs;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct ThrowawayPulsar {
    pub dir: PathBuf,
    pub broker_port: u16,
    pub web_port: u16,
    child: Option<Child>,
    /// Length of `pulsar.log` when the current process started.
    log_start: u64,
    /// Sent as `Authorization: Bearer` by the readiness probe (token-auth brokers).
    admin_token: Option<String>,
}

/// `$CREWLET_SERVICES_DIR/pulsar/jars` (default `/opt/crewlet-services`), when complete.
pub fn cached_jars() -> Option<PathBuf> {
    let root = std::env::var_os("CREWLET_SERVICES_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/crewlet-services"));
    let jars = root.join("pulsar").join("jars");
    jars.join(".complete").exists().then_some(jars)
}

/// The jars, or `None` (skip) outside CI; a panic under `CI=true`.
pub fn require_jars() -> Option<PathBuf> {
    match cached_jars() {
        Some(j) => Some(j),
        None if crewlet_test_support::services::in_ci() => {
            panic!("CI=true and Pulsar's jars are not cached; run `cargo xtask services up`")
        }
        None => {
            crewlet_test_support::services::skip(
                "Pulsar's jars are not cached; run `cargo xtask services up`",
            );
            None
        }
    }
}

impl ThrowawayPulsar {
    /// Starts a fresh broker (wiped data) on `broker_port`/`web_port`.
    pub fn start(jars: PathBuf, broker_port: u16, web_port: u16) -> std::io::Result<Self> {
        Self::start_with(jars, broker_port, web_port, |_| Ok((String::new(), None)))
    }

    /// Like [`ThrowawayPulsar::start`], with extra `standalone.conf` lines made
    /// by `extra(dir)` (which may write key files into the broker's directory)
    /// and the admin token the readiness probe must send.
    pub fn start_with(
        jars: PathBuf,
        broker_port: u16,
        web_port: u16,
        extra: impl FnOnce(&std::path::Path) -> std::io::Result<(String, Option<String>)>,
    ) -> std::io::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "crewlet-queue-pulsar-{broker_port}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        let (extra_conf, admin_token) = extra(&dir)?;
        // The bookie measures the whole filesystem: on a large disk shared
        // with build caches, 95% used can still leave gigabytes free, and a
        // read-only bookie never lets the broker pass its health check. The
        // thresholds of `cargo xtask services`' own broker.
        fs::write(
            dir.join("standalone.conf"),
            format!(
                "clusterName=standalone\nbindAddress=127.0.0.1\nadvertisedAddress=127.0.0.1\n\
                 brokerServicePort={broker_port}\nwebServicePort={web_port}\n\
                 managedLedgerDefaultEnsembleSize=1\nmanagedLedgerDefaultWriteQuorum=1\n\
                 managedLedgerDefaultAckQuorum=1\nlisteningInterface=lo\nallowLoopback=true\n\
                 journalSyncData=false\nallowAutoTopicCreation=true\n\
                 allowAutoTopicCreationType=non-partitioned\nbrokerDeleteInactiveTopicsEnabled=false\n\
                 functionsWorkerEnabled=false\nwebSocketServiceEnabled=false\n\
                 brokerShutdownTimeoutMs=3000\n\
                 diskUsageThreshold=0.995\ndiskUsageWarnThreshold=0.99\n\
                 diskUsageLwmThreshold=0.99\n{extra_conf}"
            ),
        )?;
        fs::write(jars_file(&dir), jars.display().to_string())?;
        let mut me = Self {
            dir,
            broker_port,
            web_port,
            child: None,
            log_start: 0,
            admin_token,
        };
        me.spawn(true)?;
        Ok(me)
    }

    pub fn url(&self) -> String {
        format!("pulsar://127.0.0.1:{}", self.broker_port)
    }

    fn spawn(&mut self, wipe: bool) -> std::io::Result<()> {
        let jars = fs::read_to_string(jars_file(&self.dir))?;
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("pulsar.log"))?;
        self.log_start = log.metadata()?.len();
        // Native libraries unpack here, not in /tmp, and go with the broker's dir.
        let jvm_tmp = self.dir.join("tmp");
        fs::create_dir_all(&jvm_tmp)?;
        let mut java = Command::new("java");
        java.arg(format!("-Djava.io.tmpdir={}", jvm_tmp.display()));
        java.args([
            "--add-opens",
            "java.base/java.nio=ALL-UNNAMED",
            "--add-opens",
            "java.base/jdk.internal.misc=ALL-UNNAMED",
            "-Xms256m",
            "-Xmx768m",
            "-XX:MaxDirectMemorySize=512m",
            "-cp",
            &format!("{jars}/*"),
            "org.apache.pulsar.PulsarStandaloneStarter",
            "--config",
        ])
        .arg(self.dir.join("standalone.conf"))
        .arg("--metadata-dir")
        .arg(self.dir.join("metadata"))
        .arg("--bookkeeper-dir")
        .arg(self.dir.join("bookkeeper"))
        .args(["-nfw", "-nss", "-a", "127.0.0.1"])
        .current_dir(&self.dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
        if wipe {
            java.arg("--wipe-data");
        }
        self.child = Some(java.spawn()?);
        Ok(())
    }

    /// SIGKILL: no clean shutdown, like a crashed broker.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the broker again on the same data.
    pub fn restart(&mut self) -> std::io::Result<()> {
        self.kill();
        self.spawn(false)
    }

    /// Waits until the broker is ready the way `cargo xtask services up`
    /// means it: the admin API lists `public/default` and
    /// `/admin/v2/brokers/health` answers `ok` (a message went through the
    /// bookie and back). An open port or an answering admin API alone is not
    /// ready: topics then still fail to load.
    ///
    /// After a SIGKILL the metadata still holds the dead bookie's
    /// registration, and Pulsar 4.0's standalone bookie sometimes loops
    /// forever deleting and re-creating that node when it registers again
    /// (topics then fail with "Not enough non-faulty bookies"). The race is
    /// timing-dependent, so a broker caught in it is killed and started again
    /// on the same data, a few times at most.
    pub fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let start = Instant::now();
        let mut restarts_left = 3;
        while start.elapsed() < limit {
            if self.registration_loops() {
                if restarts_left == 0 {
                    return Err(format!(
                        "the bookie keeps re-registering after several restarts; log:\n{}",
                        self.log_tail()
                    ));
                }
                restarts_left -= 1;
                eprintln!("throwaway broker: bookie registration loop; starting it again");
                self.kill();
                self.spawn(false).map_err(|e| format!("restart: {e}"))?;
                continue;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!(
                    "broker exited with {status}; log:\n{}",
                    self.log_tail()
                ));
            }
            if self.healthy() && !self.registration_loops() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let log = self.log_tail();
        // BookKeeper turns its bookie read-only when the disk is over its
        // threshold (99.5% here); the broker then never passes its health
        // check.
        let hint = if log.contains("Not enough non-faulty bookies") {
            " (the bookie is not writable: BookKeeper stops writing when its disk is over 99.5% full; check `df`)"
        } else {
            ""
        };
        Err(format!(
            "broker not ready after {limit:?}{hint}; log:\n{log}"
        ))
    }

    /// Ready right now (see [`ThrowawayPulsar::wait_ready`]).
    pub fn healthy(&self) -> bool {
        let token = self.admin_token.as_deref();
        let listed = http_get(
            self.web_port,
            "/admin/v2/namespaces/public",
            token,
            PROBE_TIMEOUT,
        );
        listed.is_some_and(|b| b.contains("public/default"))
            && http_get(
                self.web_port,
                "/admin/v2/brokers/health",
                token,
                HEALTH_TIMEOUT,
            )
            .is_some_and(|b| b.trim() == "ok")
    }

    /// Whether the current process's log shows the registration loop (many
    /// invalidations of the lock on `/ledgers/available/...`; one ordinary
    /// re-registration shows at most a couple).
    fn registration_loops(&self) -> bool {
        let Ok(mut file) = fs::File::open(self.dir.join("pulsar.log")) else {
            return false;
        };
        let mut text = String::new();
        if std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(self.log_start)).is_err()
            || file.take(64 << 20).read_to_string(&mut text).is_err()
        {
            return false;
        }
        text.lines()
            .filter(|l| l.contains("/ledgers/available/") && l.contains("was invalidated"))
            .nth(20)
            .is_some()
    }

    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.dir.join("pulsar.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

fn jars_file(dir: &std::path::Path) -> PathBuf {
    dir.join("jars.path")
}

impl Drop for ThrowawayPulsar {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Time limit of an admin API read.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The health check writes and reads a message (the first one also creates
/// the heartbeat namespace), which takes a while on a loaded machine.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(30);

/// A minimal HTTP/1.0 GET on loopback; the body when the status is 200.
fn http_get(port: u16, path: &str, bearer: Option<&str>, timeout: Duration) -> Option<String> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(1),
    )
    .ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    let auth = bearer
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{auth}\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

/// `N` distinct loopback ports that were free a moment ago (so parallel test
/// runs on one machine do not fight over fixed ports). All `N` listeners are
/// held until every number is chosen, so no two of them are the same.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<std::net::TcpListener> = (0..N)
        .map(|_| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap_or_else(|e| panic!("cannot bind a loopback port: {e}"))
        })
        .collect();
    std::array::from_fn(|i| {
        listeners[i]
            .local_addr()
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("local_addr: {e}"))
    })
}
