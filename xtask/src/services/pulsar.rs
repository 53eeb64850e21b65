//! Apache Pulsar standalone from Maven Central jars.
//!
//! The broker's runtime classpath is resolved once with Maven into
//! [`Layout::pulsar_jars`]; the JVM runs detached (its own session), logs to
//! [`Layout::pulsar_log`] and is tracked through [`Layout::pulsar_pid`].

use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::config::{
    HOST, Layout, PULSAR_ARTIFACT_ID, PULSAR_BOOT_TIMEOUT, PULSAR_BROKER_PORT, PULSAR_CLUSTER,
    PULSAR_DEFAULT_NAMESPACE, PULSAR_GROUP_ID, PULSAR_HEALTH_TIMEOUT, PULSAR_MAIN_CLASS,
    PULSAR_NAMESPACE_TIMEOUT, PULSAR_STOP_TIMEOUT, PULSAR_VERSION, PULSAR_WEB_PORT,
    pulsar_admin_addr, pulsar_admin_url, pulsar_jvm_options, pulsar_url,
};
use super::process::{
    cmdline_contains, is_alive, log_tail, port_open, read_pidfile, remove_if_exists, signal,
};
use crate::{cmd, http};

const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The health check writes and reads a message; the first one also creates
/// the heartbeat namespace.
const HEALTH_PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// What is on the machine right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    NotInstalled,
    Stopped,
    /// Our broker process lives and its admin API answers.
    Running {
        pid: u32,
    },
    /// Our broker process lives but does not answer (yet).
    Booting {
        pid: u32,
    },
    /// A Pulsar we did not start answers on the admin port.
    Unmanaged,
    /// Something that is not Pulsar holds one of our ports.
    PortBusy {
        port: u16,
    },
}

pub fn state(layout: &Layout) -> State {
    if let Some(pid) = managed_pid(layout) {
        return if admin_answers() {
            State::Running { pid }
        } else {
            State::Booting { pid }
        };
    }
    if admin_answers() {
        return State::Unmanaged;
    }
    for port in [PULSAR_WEB_PORT, PULSAR_BROKER_PORT] {
        if port_open(port) {
            return State::PortBusy { port };
        }
    }
    if jars_ready(layout) {
        State::Stopped
    } else {
        State::NotInstalled
    }
}

/// The pid from the pid file when that process is alive and is our broker.
fn managed_pid(layout: &Layout) -> Option<u32> {
    let pid = match read_pidfile(&layout.pulsar_pid()) {
        Ok(pid) => pid,
        Err(e) => {
            // A torn write after a crash: the live-broker probes decide.
            eprintln!("pulsar: ignoring {e:#}");
            None
        }
    };
    pid.filter(|&pid| is_alive(pid) && cmdline_contains(pid, PULSAR_MAIN_CLASS))
}

/// Whether `GET /admin/v2/clusters` answers 200 and lists our cluster.
fn admin_answers() -> bool {
    http::get(&pulsar_admin_addr(), "/admin/v2/clusters", PROBE_TIMEOUT)
        .is_ok_and(|r| r.is_success() && r.body.contains(PULSAR_CLUSTER))
}

/// Whether the default namespace exists.
fn namespace_ready() -> bool {
    let tenant = PULSAR_DEFAULT_NAMESPACE
        .split('/')
        .next()
        .unwrap_or(PULSAR_DEFAULT_NAMESPACE);
    http::get(
        &pulsar_admin_addr(),
        &format!("/admin/v2/namespaces/{tenant}"),
        PROBE_TIMEOUT,
    )
    .is_ok_and(|r| r.is_success() && r.body.contains(PULSAR_DEFAULT_NAMESPACE))
}

/// Downloads (once), configures and starts the broker, then waits until it
/// serves `public/default` and passes its end-to-end health check; a no-op
/// when a healthy broker already runs. A broker that is not healthy is
/// restarted on fresh data (see [`prepare_data`] for why data is dropped).
pub fn up(layout: &Layout) -> Result<()> {
    let current = state(layout);
    match current {
        State::Running { pid } | State::Booting { pid } => {
            let started = Instant::now();
            if matches!(current, State::Booting { .. }) {
                println!("pulsar: pid {pid} is booting; waiting for it");
                wait_until_ready(layout, None)?;
            } else if !namespace_ready() {
                wait_for_namespace(layout, None)?;
            }
            match wait_healthy(layout, None) {
                Ok(()) => {
                    println!(
                        "pulsar: running (pid {pid}), healthy after {:.1} s",
                        started.elapsed().as_secs_f64()
                    );
                    print_endpoints(layout);
                    return Ok(());
                }
                Err(problem) => {
                    println!(
                        "pulsar: the running broker (pid {pid}) is not healthy: {problem:#}\n\
                         pulsar: restarting it on fresh data"
                    );
                    stop(layout, false)?;
                    wipe_data(layout)?;
                }
            }
        }
        State::Unmanaged => {
            println!(
                "pulsar: a broker not started by xtask answers at {} (no live pid in {}); using it",
                pulsar_admin_url(),
                layout.pulsar_pid().display()
            );
            print_endpoints(layout);
            return Ok(());
        }
        State::PortBusy { port } => {
            bail!("{HOST}:{port} is taken by a process that is not a Pulsar broker; free it first")
        }
        State::NotInstalled | State::Stopped => {}
    }
    cmd::which("java").context("`java` (17 or newer) is needed to run Pulsar")?;
    install(layout)?;
    prepare_data(layout)?;
    write_config(layout)?;
    let started = Instant::now();
    if let Err(problem) = start(layout) {
        // One more start on fresh data: kept data is the one thing a retry
        // can change (a bookie that cannot register or rebind its port).
        println!("pulsar: {problem:#}\npulsar: starting again on fresh data");
        stop(layout, false)?;
        wipe_data(layout)?;
        write_config(layout)?;
        start(layout).context("Pulsar did not start even on fresh data")?;
    }
    println!("pulsar: ready in {:.1} s", started.elapsed().as_secs_f64());
    print_endpoints(layout);
    Ok(())
}

/// Spawns the broker and waits until it answers, has its namespace and
/// passes the health check.
fn start(layout: &Layout) -> Result<()> {
    let mut child = spawn(layout)?;
    println!(
        "pulsar: started pid {}; waiting for {} (up to {} s)",
        child.id(),
        pulsar_admin_url(),
        PULSAR_BOOT_TIMEOUT.as_secs()
    );
    wait_until_ready(layout, Some(&mut child))?;
    wait_healthy(layout, Some(&mut child))
}

/// Keeps the data of a broker that `down` stopped cleanly and drops the data
/// of one that died (SIGKILL, OOM, a machine reset). After an unclean stop
/// the RocksDB metadata still holds the dead bookie's registration, and
/// Pulsar 4.0's standalone bookie can then fall into an endless
/// delete/re-create loop on that node when it registers again: topics stop
/// loading with "Not enough non-faulty bookies" and the log grows by
/// megabytes a second. This is a development and CI broker, so its data is
/// not worth that risk.
fn prepare_data(layout: &Layout) -> Result<()> {
    let data = layout.pulsar_data();
    let has_data = fs::read_dir(&data).is_ok_and(|mut entries| entries.next().is_some());
    let clean = layout.pulsar_clean_marker().exists();
    if has_data && !clean {
        println!(
            "pulsar: the previous broker did not stop cleanly; starting on fresh data \
             (a dead bookie's registration can wedge the new one)"
        );
        wipe_data(layout)?;
    }
    // The marker describes the last stop only; the broker now starts.
    remove_if_exists(&layout.pulsar_clean_marker())
}

fn wipe_data(layout: &Layout) -> Result<()> {
    remove_if_exists(&layout.pulsar_data())
}

/// Waits until `GET /admin/v2/brokers/health` answers `ok`: the broker then
/// wrote a message through its bookie and read it back. Fails early when the
/// log shows the bookie registration loop (see [`prepare_data`]).
fn wait_healthy(layout: &Layout, mut child: Option<&mut Child>) -> Result<()> {
    let deadline = Instant::now() + PULSAR_HEALTH_TIMEOUT;
    loop {
        if let Some(loops) = registration_loop(&layout.pulsar_log()) {
            bail!(
                "its bookie keeps re-registering ({loops} lock invalidations on \
                 /ledgers/available in {})",
                layout.pulsar_log().display()
            );
        }
        if let Some(c) = child.as_deref_mut()
            && let Some(exit) = c.try_wait().context("cannot poll the broker process")?
        {
            bail!(
                "Pulsar exited during its health check ({exit})\n{}",
                log_tail(&layout.pulsar_log(), 40)
            );
        }
        let last = match http::get(
            &pulsar_admin_addr(),
            "/admin/v2/brokers/health",
            HEALTH_PROBE_TIMEOUT,
        ) {
            Ok(r) if r.is_success() && r.body.trim() == "ok" => return Ok(()),
            Ok(r) => {
                format!(
                    "HTTP {}: {}",
                    r.status,
                    r.body.chars().take(300).collect::<String>()
                )
            }
            Err(e) => format!("{e:#}"),
        };
        if Instant::now() > deadline {
            bail!(
                "its health check did not pass within {} s (last answer: {last})",
                PULSAR_HEALTH_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Lock invalidations on the bookie's registration node beyond which the log
/// shows the loop rather than one ordinary re-registration.
const REGISTRATION_LOOP_THRESHOLD: usize = 20;

/// How many times the log says the bookie's registration lock was
/// invalidated, when that is more than [`REGISTRATION_LOOP_THRESHOLD`].
pub fn registration_loop(log: &Path) -> Option<usize> {
    let file = File::open(log).ok()?;
    let mut count = 0;
    for line in BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        if line.contains("Lock on resource /ledgers/available/") && line.contains("was invalidated")
        {
            count += 1;
            if count > REGISTRATION_LOOP_THRESHOLD {
                return Some(count);
            }
        }
    }
    None
}

/// Stops the broker: SIGTERM, then SIGKILL after [`PULSAR_STOP_TIMEOUT`].
/// A broker that exits on SIGTERM leaves the clean-shutdown marker, so the
/// next start keeps its data.
pub fn down(layout: &Layout) -> Result<()> {
    stop(layout, true)
}

fn stop(layout: &Layout, mark_clean: bool) -> Result<()> {
    let Some(pid) = managed_pid(layout) else {
        if admin_answers() {
            println!(
                "pulsar: a broker not started by xtask answers at {}; left alone",
                pulsar_admin_url()
            );
        } else {
            println!("pulsar: not running");
        }
        remove_pidfile(layout)?;
        return Ok(());
    };
    let started = Instant::now();
    signal(pid, "TERM")?;
    while is_alive(pid) && started.elapsed() < PULSAR_STOP_TIMEOUT {
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut clean = true;
    if is_alive(pid) {
        clean = false;
        println!(
            "pulsar: pid {pid} still alive after {} s; sending SIGKILL",
            PULSAR_STOP_TIMEOUT.as_secs()
        );
        signal(pid, "KILL")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while is_alive(pid) {
            if Instant::now() > deadline {
                bail!("pid {pid} survives SIGKILL");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    if clean && mark_clean && layout.pulsar_data().is_dir() {
        fs::write(
            layout.pulsar_clean_marker(),
            "stopped by `cargo xtask services down`\n",
        )
        .with_context(|| format!("cannot write {}", layout.pulsar_clean_marker().display()))?;
    }
    remove_pidfile(layout)?;
    println!(
        "pulsar: stopped (was pid {pid}) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Prints one line about the broker.
pub fn status(layout: &Layout) {
    match state(layout) {
        State::Running { pid } => println!(
            "pulsar: running (pid {pid}) at {}, admin {}",
            pulsar_url(),
            pulsar_admin_url()
        ),
        State::Booting { pid } => {
            println!("pulsar: pid {pid} is alive but the admin API does not answer")
        }
        State::Unmanaged => println!(
            "pulsar: a broker not started by xtask answers at {}",
            pulsar_admin_url()
        ),
        State::PortBusy { port } => {
            println!("pulsar: stopped, but {HOST}:{port} is taken by another process")
        }
        State::Stopped => println!(
            "pulsar: stopped (jars in {})",
            layout.pulsar_jars().display()
        ),
        State::NotInstalled => println!("pulsar: not installed"),
    }
}

fn print_endpoints(layout: &Layout) {
    println!("  broker:   {}", pulsar_url());
    println!("  admin:    {}", pulsar_admin_url());
    println!("  log:      {}", layout.pulsar_log().display());
}

fn remove_pidfile(layout: &Layout) -> Result<()> {
    remove_if_exists(&layout.pulsar_pid())
}

fn jars_ready(layout: &Layout) -> bool {
    std::fs::read_to_string(layout.pulsar_jars_marker()).is_ok_and(|v| v.trim() == PULSAR_VERSION)
}

/// Resolves the broker's runtime classpath with Maven unless already done.
fn install(layout: &Layout) -> Result<()> {
    if jars_ready(layout) {
        return Ok(());
    }
    let dir = layout.pulsar_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mvn = cmd::which("mvn").context("Maven (`mvn`) is needed to download Pulsar's jars")?;
    std::fs::write(layout.pulsar_pom(), pom_xml())
        .with_context(|| format!("cannot write {}", layout.pulsar_pom().display()))?;
    let jars = layout.pulsar_jars();
    let partial = dir.join("jars.partial");
    for stale in [&jars, &partial] {
        if stale.exists() {
            std::fs::remove_dir_all(stale)
                .with_context(|| format!("cannot remove {}", stale.display()))?;
        }
    }
    println!(
        "pulsar: downloading {PULSAR_GROUP_ID}:{PULSAR_ARTIFACT_ID}:{PULSAR_VERSION} and its \
         runtime dependencies (a few hundred MB, once)"
    );
    let started = Instant::now();
    let mut copy = Command::new(mvn);
    copy.current_dir(&dir)
        .args([
            "-q",
            "-B",
            "--no-transfer-progress",
            "-Dstyle.color=never",
            "-f",
        ])
        .arg(layout.pulsar_pom())
        .args(["dependency:copy-dependencies", "-DincludeScope=runtime"])
        .arg(format!("-DoutputDirectory={}", partial.display()));
    cmd::run(&mut copy).context("Maven could not fetch Pulsar's jars")?;
    let count = std::fs::read_dir(&partial)
        .with_context(|| format!("cannot list {}", partial.display()))?
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "jar"))
        })
        .count();
    if count == 0 {
        bail!("Maven copied no jar into {}", partial.display());
    }
    std::fs::rename(&partial, &jars)
        .with_context(|| format!("cannot rename {} to {}", partial.display(), jars.display()))?;
    std::fs::write(layout.pulsar_jars_marker(), format!("{PULSAR_VERSION}\n"))
        .with_context(|| format!("cannot write {}", layout.pulsar_jars_marker().display()))?;
    println!(
        "pulsar: {count} jars in {} ({:.0} s)",
        jars.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn pom_xml() -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by `cargo xtask services up`: only used to resolve the broker's classpath. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.crewlet</groupId>
  <artifactId>crewlet-pulsar-standalone</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>{PULSAR_GROUP_ID}</groupId>
      <artifactId>{PULSAR_ARTIFACT_ID}</artifactId>
      <version>{PULSAR_VERSION}</version>
    </dependency>
  </dependencies>
</project>
"#
    )
}

/// The broker configuration (also read by the embedded bookie).
pub fn standalone_conf() -> String {
    format!(
        "# Written by `cargo xtask services up`; edits are overwritten.\n\
         clusterName={PULSAR_CLUSTER}\n\
         bindAddress={HOST}\n\
         advertisedAddress={HOST}\n\
         brokerServicePort={PULSAR_BROKER_PORT}\n\
         webServicePort={PULSAR_WEB_PORT}\n\
         # one bookie: quorums of 1 (the defaults of 2 cannot be met)\n\
         managedLedgerDefaultEnsembleSize=1\n\
         managedLedgerDefaultWriteQuorum=1\n\
         managedLedgerDefaultAckQuorum=1\n\
         # metadata: RocksDB (standalone's default without ZooKeeper, see --metadata-dir)\n\
         # the embedded bookie listens on loopback only\n\
         listeningInterface=lo\n\
         allowLoopback=true\n\
         journalSyncData=false\n\
         # the only bookie must not turn read-only because a shared disk is\n\
         # mostly used by others (BookKeeper measures the whole filesystem)\n\
         diskUsageThreshold=0.995\n\
         diskUsageWarnThreshold=0.99\n\
         diskUsageLwmThreshold=0.99\n\
         # topics and subscriptions live until deleted explicitly\n\
         allowAutoTopicCreation=true\n\
         allowAutoTopicCreationType=non-partitioned\n\
         allowAutoSubscriptionCreation=true\n\
         brokerDeleteInactiveTopicsEnabled=false\n\
         subscriptionExpirationTimeMinutes=0\n\
         # tests drop their throwaway namespaces with ?force=true\n\
         forceDeleteNamespaceAllowed=true\n\
         # no auth, no TLS, no functions: loopback-only dev/CI broker\n\
         authenticationEnabled=false\n\
         authorizationEnabled=false\n\
         functionsWorkerEnabled=false\n\
         webSocketServiceEnabled=false\n\
         brokerShutdownTimeoutMs=15000\n"
    )
}

const LOG4J2_XML: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by `cargo xtask services up`. stdout goes to pulsar.log. -->
<Configuration status="warn">
  <Appenders>
    <Console name="stdout" target="SYSTEM_OUT">
      <PatternLayout pattern="%d{ISO8601} %-5level [%t] %c{1} - %msg%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Logger name="org.apache.pulsar.broker.web.RequestLog" level="warn"/>
    <Logger name="org.eclipse.jetty" level="warn"/>
    <Root level="info">
      <AppenderRef ref="stdout"/>
    </Root>
  </Loggers>
</Configuration>
"#;

fn write_config(layout: &Layout) -> Result<()> {
    for (path, text) in [
        (layout.pulsar_conf(), standalone_conf()),
        (layout.pulsar_log4j(), LOG4J2_XML.to_owned()),
    ] {
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    for dir in [layout.pulsar_metadata_dir(), layout.pulsar_bookkeeper_dir()] {
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    Ok(())
}

/// Starts the JVM in its own session (it outlives us), stdout/stderr to the log.
fn spawn(layout: &Layout) -> Result<Child> {
    let log_path = layout.pulsar_log();
    if log_path.exists() {
        let previous = log_path.with_extension("log.1");
        std::fs::rename(&log_path, &previous)
            .with_context(|| format!("cannot rotate {}", log_path.display()))?;
    }
    let log =
        File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
    let log_err = log
        .try_clone()
        .with_context(|| format!("cannot reopen {}", log_path.display()))?;
    let classpath = format!("{}/*", layout.pulsar_jars().display());
    // The JVM unpacks native libraries (RocksDB: 13 MB) into java.io.tmpdir
    // and leaves them behind when killed: keep them in our own folder,
    // emptied at every start, instead of /tmp.
    let jvm_tmp = layout.pulsar_dir().join("tmp");
    let _ = fs::remove_dir_all(&jvm_tmp);
    fs::create_dir_all(&jvm_tmp).with_context(|| format!("cannot create {}", jvm_tmp.display()))?;
    // `setsid` execs java in place (we are not a process-group leader), so the
    // pid we get is the JVM's.
    let mut java = Command::new("setsid");
    java.arg("java")
        .args(pulsar_jvm_options()?)
        .arg(format!("-Djava.io.tmpdir={}", jvm_tmp.display()))
        .arg(format!(
            "-Dlog4j.configurationFile={}",
            layout.pulsar_log4j().display()
        ))
        .args(["-cp", &classpath, PULSAR_MAIN_CLASS, "--config"])
        .arg(layout.pulsar_conf())
        .arg("--metadata-dir")
        .arg(layout.pulsar_metadata_dir())
        .arg("--bookkeeper-dir")
        .arg(layout.pulsar_bookkeeper_dir())
        .args(["-nfw", "-nss", "-a", HOST])
        .current_dir(layout.pulsar_dir())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    let child = java
        .spawn()
        .with_context(|| format!("cannot start `{}`", cmd::describe(&java)))?;
    std::fs::write(layout.pulsar_pid(), format!("{}\n", child.id()))
        .with_context(|| format!("cannot write {}", layout.pulsar_pid().display()))?;
    Ok(child)
}

/// Waits for the admin API, then for the default namespace. With `child`, a
/// broker that exits during boot fails fast with its log.
fn wait_until_ready(layout: &Layout, mut child: Option<&mut Child>) -> Result<()> {
    let deadline = Instant::now() + PULSAR_BOOT_TIMEOUT;
    let pid = child.as_ref().map(|c| c.id());
    loop {
        if let Some(c) = child.as_deref_mut() {
            if let Some(exit) = c.try_wait().context("cannot poll the broker process")? {
                bail!(
                    "Pulsar exited during boot ({exit})\n{}",
                    log_tail(&layout.pulsar_log(), 40)
                );
            }
        } else if managed_pid(layout).is_none() {
            bail!(
                "Pulsar exited during boot\n{}",
                log_tail(&layout.pulsar_log(), 40)
            );
        }
        if admin_answers() {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "Pulsar did not answer {} within {} s{}\n{}",
                pulsar_admin_url(),
                PULSAR_BOOT_TIMEOUT.as_secs(),
                pid.map(|p| format!(" (pid {p} left running)"))
                    .unwrap_or_default(),
                log_tail(&layout.pulsar_log(), 40)
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    wait_for_namespace(layout, child)
}

fn wait_for_namespace(layout: &Layout, mut child: Option<&mut Child>) -> Result<()> {
    let deadline = Instant::now() + PULSAR_NAMESPACE_TIMEOUT;
    while !namespace_ready() {
        if let Some(c) = child.as_deref_mut() {
            if let Some(exit) = c.try_wait().context("cannot poll the broker process")? {
                bail!(
                    "Pulsar exited during boot ({exit})\n{}",
                    log_tail(&layout.pulsar_log(), 40)
                );
            }
        }
        if Instant::now() > deadline {
            bail!(
                "Pulsar answers but namespace {PULSAR_DEFAULT_NAMESPACE} did not appear within {} s\n{}",
                PULSAR_NAMESPACE_TIMEOUT.as_secs(),
                log_tail(&layout.pulsar_log(), 40)
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conf_sets_loopback_and_single_bookie_quorums() {
        let conf = standalone_conf();
        for line in [
            "bindAddress=127.0.0.1",
            "advertisedAddress=127.0.0.1",
            "brokerServicePort=6650",
            "webServicePort=8080",
            "managedLedgerDefaultEnsembleSize=1",
            "managedLedgerDefaultWriteQuorum=1",
            "managedLedgerDefaultAckQuorum=1",
            "listeningInterface=lo",
            "diskUsageThreshold=0.995",
        ] {
            assert!(conf.lines().any(|l| l == line), "missing {line}");
        }
    }

    /// A scratch services root under the system temp dir, removed on drop.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("crewlet-xtask-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).expect("scratch dir");
            Self(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    const INVALIDATED: &str = "2026-11-30T06:40:21,777 INFO  [metadata-store-1-1] \
        ResourceLockImpl - Lock on resource /ledgers/available/127.0.0.1:42969 was invalidated. \
        state Valid";

    #[test]
    fn registration_loop_is_told_from_one_reregistration() {
        let scratch = Scratch::new("regloop");
        let log = scratch.0.join("pulsar.log");
        let healthy = format!("boot\n{INVALIDATED}\nready\n");
        fs::write(&log, &healthy).unwrap();
        assert_eq!(registration_loop(&log), None);
        let looping = (0..50).map(|_| INVALIDATED).collect::<Vec<_>>().join("\n");
        fs::write(&log, format!("boot\n{looping}\n")).unwrap();
        assert_eq!(
            registration_loop(&log),
            Some(REGISTRATION_LOOP_THRESHOLD + 1)
        );
        assert_eq!(registration_loop(&scratch.0.join("missing.log")), None);
    }

    #[test]
    fn data_survives_a_clean_stop_and_not_an_unclean_one() {
        let scratch = Scratch::new("prepare");
        let layout = Layout::new(&scratch.0);
        let ledger = layout.pulsar_bookkeeper_dir().join("current");
        fs::create_dir_all(&ledger).unwrap();
        fs::write(ledger.join("1.log"), "entries").unwrap();

        // `down` stopped it on SIGTERM: data kept, marker consumed.
        fs::write(layout.pulsar_clean_marker(), "clean").unwrap();
        prepare_data(&layout).unwrap();
        assert!(ledger.join("1.log").exists(), "clean stop keeps the data");
        assert!(!layout.pulsar_clean_marker().exists(), "marker is one-shot");

        // No marker: the broker died; its data goes.
        prepare_data(&layout).unwrap();
        assert!(
            !layout.pulsar_data().exists(),
            "unclean stop drops the data"
        );

        // A first start (no data at all) is not an error.
        prepare_data(&layout).unwrap();
    }

    #[test]
    fn pom_names_the_pinned_broker() {
        let pom = pom_xml();
        assert!(pom.contains("<artifactId>pulsar-broker</artifactId>"));
        assert!(pom.contains(&format!("<version>{PULSAR_VERSION}</version>")));
    }

    #[test]
    fn log_tail_of_missing_file_explains() {
        assert!(log_tail(Path::new("/nonexistent/pulsar.log"), 5).contains("cannot read"));
    }
}
