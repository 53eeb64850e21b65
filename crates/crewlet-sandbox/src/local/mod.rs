//! The local backend: boxes on this Linux host, isolated with bubblewrap
//! (namespaces, no Docker) and limited with cgroups.
//!
//! Every command of a box is its own `bwrap` invocation over the box's home
//! directory, started by a small launcher shell that first enters the
//! command's cgroup and leads a process group of its own. Foreground
//! commands are waited for; detached ones are not, and live on after the
//! engine stops: their output and exit code land in the box's
//! `~/.crewlet/runs/<run>/`, and the host keeps the launcher's process group
//! to tell a running command from a lost one.

mod bwrap;
mod cgroup;
mod layout;
mod limits;
mod options;
mod process;
mod rlimit;
mod rootfs;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::io::AsyncReadExt;

use self::cgroup::BoxCgroup;
use self::layout::{BoxDir, BoxMeta, RunMeta};
use self::limits::Limiter;
pub use self::limits::{Enforcement, LimitPolicy};
pub use self::options::{LocalOptions, Mount};
use self::rootfs::{HomeFs, Take, is_missing};
use crate::{
    BoxId, BoxSpec, Exec, ExecOutput, HOME, Network, Result, RunId, RunOutput, RunState, Sandbox,
    SandboxError, WORKSPACE, capped,
};

/// Boxes on this host.
pub struct LocalSandbox {
    opts: LocalOptions,
    limiter: Limiter,
    /// Box environments (credentials): memory only, never disk.
    envs: Mutex<HashMap<BoxId, BTreeMap<String, String>>>,
    /// Launchers (process group leaders) of the foreground commands running
    /// now, per box: without a cgroup, how a pause finds them.
    foreground: Mutex<HashMap<BoxId, Vec<i32>>>,
}

impl LocalSandbox {
    /// Checks the host (bubblewrap runs, cgroups are writable) and makes the
    /// state directory. Without writable cgroups (and without the rlimit
    /// opt-in) the backend still works for boxes that ask for no limits, and
    /// says why for those that do.
    pub async fn new(opts: LocalOptions) -> Result<Self> {
        let probe = tokio::process::Command::new(&opts.bwrap)
            .arg("--version")
            .env_clear()
            .stdin(Stdio::null())
            .output()
            .await;
        match probe {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                return Err(SandboxError::Unavailable(format!(
                    "`{} --version` failed: {}",
                    opts.bwrap.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            Err(e) => {
                return Err(SandboxError::Unavailable(format!(
                    "bubblewrap (`{}`) cannot run: {e}; install it (Debian: apt-get install bubblewrap)",
                    opts.bwrap.display()
                )));
            }
        }
        std::fs::create_dir_all(&opts.state_dir)
            .map_err(|e| SandboxError::io(&opts.state_dir, e))?;
        let limiter = Limiter::detect(
            opts.limits,
            opts.cgroup_root.as_deref(),
            opts.rlimit_cpu_seconds,
        );
        Ok(Self {
            opts,
            limiter,
            envs: Mutex::new(HashMap::new()),
            foreground: Mutex::new(HashMap::new()),
        })
    }

    /// True when this host can enforce limits (cgroups, or rlimits where
    /// the options allow them).
    pub fn enforces_limits(&self) -> bool {
        self.limiter.enforces()
    }

    /// What enforces the limits here (for the start log).
    pub fn enforcement(&self) -> Enforcement {
        self.limiter.enforcement()
    }

    /// The launchers of a box's commands still running: its detached runs'
    /// (a recorded pid is taken only while its command line still names
    /// this box, since an ended run's pid may be reused) and its foreground
    /// commands'.
    fn launchers(&self, id: &BoxId, dir: &BoxDir) -> Vec<i32> {
        let mut roots: Vec<i32> = dir
            .run_ids()
            .iter()
            .filter_map(|r| dir.load_run(r).ok().flatten())
            .filter(|r| r.pgid > 1 && is_launcher(r, dir))
            .map(|r| r.pgid)
            .collect();
        if let Some(fg) = self.foreground.lock().get(id) {
            roots.extend(fg.iter().copied());
        }
        roots
    }

    fn dir(&self, id: &BoxId) -> Result<BoxDir> {
        if id.0.is_empty() || id.0.contains(['/', '.']) {
            return Err(SandboxError::NoSuchBox(id.0.clone()));
        }
        let dir = BoxDir::new(&self.opts.state_dir, &id.0);
        if !dir.exists() {
            return Err(SandboxError::NoSuchBox(id.0.clone()));
        }
        Ok(dir)
    }

    /// The environment every command of the box gets: a minimal base, the
    /// box's own (credentials) and the command's, later winning.
    fn env_for(&self, id: &BoxId, meta: &BoxMeta, cmd: &Exec) -> BTreeMap<String, String> {
        let mut env = base_env(meta.network);
        if let Some(own) = self.envs.lock().get(id) {
            env.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        env.extend(cmd.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        env
    }

    /// The launcher: enters the command's cgroups, then runs bwrap as its
    /// child (so bwrap's `--die-with-parent` ties the box to the launcher,
    /// not to the engine).
    fn launcher(
        &self,
        dir: &BoxDir,
        meta: &BoxMeta,
        child: &str,
        cmd: &Exec,
        argv: &[String],
        env: BTreeMap<String, String>,
    ) -> Result<tokio::process::Command> {
        if cmd.argv.is_empty() {
            return Err(SandboxError::Invalid("empty command line".into()));
        }
        let procs = match &meta.cgroup {
            Some(cg) => cg.make_child(child)?,
            None => Vec::new(),
        };
        let cwd = cmd.cwd.clone().unwrap_or_else(|| WORKSPACE.to_owned());
        let argv = self.limiter.argv(meta, argv);
        let mut c = tokio::process::Command::new("/bin/sh");
        c.arg("-c")
            .arg(LAUNCHER)
            .arg("crewlet-launch")
            .args(procs.iter().map(|p| p.as_os_str()))
            .arg("--")
            .arg(&self.opts.bwrap)
            .args(bwrap::args(
                &dir.root,
                meta.network,
                &self.opts.mounts,
                &cwd,
                &argv,
            ))
            .env_clear()
            .envs(env)
            .process_group(0)
            .stdin(Stdio::null());
        Ok(c)
    }
}

/// A foreground command's launcher, listed with its box while it runs.
struct Foreground<'a> {
    map: &'a Mutex<HashMap<BoxId, Vec<i32>>>,
    id: BoxId,
    pgid: i32,
}

impl<'a> Foreground<'a> {
    fn track(map: &'a Mutex<HashMap<BoxId, Vec<i32>>>, id: &BoxId, pgid: i32) -> Self {
        map.lock().entry(id.clone()).or_default().push(pgid);
        Self {
            map,
            id: id.clone(),
            pgid,
        }
    }
}

impl Drop for Foreground<'_> {
    fn drop(&mut self) {
        let mut map = self.map.lock();
        if let Some(list) = map.get_mut(&self.id) {
            list.retain(|p| *p != self.pgid);
            if list.is_empty() {
                map.remove(&self.id);
            }
        }
    }
}

/// Writes its pid into each `cgroup.procs` given before `--`, then runs the
/// rest as a child and exits with its status. Not `exec`: the launcher stays
/// bwrap's parent.
const LAUNCHER: &str = r#"while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do echo $$ > "$1" || exit 125; shift; done; shift; "$@"; exit $?"#;

/// True while the run's launcher lives. Its start time names it; a run
/// recorded without one is named by its command line, which holds the box's
/// directory. (The command line cannot be the only test: right after the
/// spawn returns, the launcher may still be inside `execve` with an empty
/// one.)
fn is_launcher(run: &RunMeta, dir: &BoxDir) -> bool {
    match run.start_ticks {
        Some(ticks) => process::stat(run.pgid).is_some_and(|s| s.start_ticks == ticks),
        None => process::cmdline_mentions(run.pgid, &dir.root),
    }
}

/// The in-box wrapper of a detached run: the command's output and exit code
/// into the run's directory (the exit code written last, atomically).
const RUN_WRAPPER: &str = r#"d=$1; shift; mkdir -p "$d"; "$@" > "$d/stdout" 2> "$d/stderr" < /dev/null; echo $? > "$d/exit.tmp"; mv "$d/exit.tmp" "$d/exit""#;

/// The environment a box starts from.
fn base_env(network: Network) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = [
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ),
        ("HOME", HOME),
        ("USER", "user"),
        ("LOGNAME", "user"),
        ("LANG", "C.UTF-8"),
        ("TERM", "dumb"),
        ("TMPDIR", "/tmp"),
        ("XDG_CONFIG_HOME", "/home/user/.config"),
        ("XDG_CACHE_HOME", "/home/user/.cache"),
        ("XDG_DATA_HOME", "/home/user/.local/share"),
        ("XDG_STATE_HOME", "/home/user/.local/state"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    if network == Network::Host {
        // A box on the host's network goes through the host's proxy.
        for key in [
            "http_proxy",
            "https_proxy",
            "no_proxy",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "NO_PROXY",
        ] {
            if let Ok(v) = std::env::var(key) {
                env.insert(key.to_owned(), v);
            }
        }
    }
    env
}

fn new_id(prefix: &str) -> String {
    let uuid = uuid::Uuid::now_v7().simple().to_string();
    format!("{prefix}-{}", &uuid[uuid.len() - 16..])
}

/// The most the engine reads of a file copied out of a box.
pub const READ_CAP: u64 = 64 * 1024 * 1024;

/// The exit code a detached run's wrapper wrote, once it has. A link or a
/// FIFO in its place is refused ([`SandboxError::Escape`]); anything else
/// unreadable is no exit code yet.
fn exit_code(fs: &HomeFs, run: &str) -> Result<Option<i32>> {
    match fs.read(&BoxDir::run_home_rel(run).join("exit"), Take::All(64)) {
        Ok(b) => Ok(String::from_utf8_lossy(&b).trim().parse().ok()),
        Err(e @ SandboxError::Escape { .. }) => Err(e),
        Err(_) => Ok(None),
    }
}

/// The tail of one of a run's output files ([`OUTPUT_CAP`](crate::OUTPUT_CAP)
/// bytes at most); empty while it is not there.
fn read_output(fs: &HomeFs, rel: &Path) -> Result<String> {
    match fs.read(rel, Take::Tail(crate::OUTPUT_CAP as u64)) {
        Ok(b) => Ok(capped(&b)),
        Err(e) if is_missing(&e) => Ok(String::new()),
        Err(e) => Err(e),
    }
}

/// Runs blocking file work off the async threads.
async fn off_thread<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| SandboxError::io("box file", std::io::Error::other(e.to_string())))?
}

#[async_trait]
impl Sandbox for LocalSandbox {
    fn backend(&self) -> &'static str {
        "local"
    }

    async fn create(&self, spec: &BoxSpec) -> Result<BoxId> {
        let id = BoxId(new_id("sbx"));
        let cgroup: Option<BoxCgroup> = self.limiter.make_box(&id.0, &spec.limits)?;
        let meta = BoxMeta {
            id: id.0.clone(),
            created_at: chrono::Utc::now(),
            network: spec.network,
            limits: spec.limits.clone(),
            labels: spec.labels.clone(),
            cgroup,
        };
        let dir = BoxDir::new(&self.opts.state_dir, &id.0);
        if let Err(e) = dir.make(&meta) {
            if let Some(cg) = &meta.cgroup {
                cg.remove();
            }
            let _ = std::fs::remove_dir_all(&dir.root);
            return Err(e);
        }
        self.envs.lock().insert(id.clone(), spec.env.clone());
        tracing::debug!(sandbox = %id, network = ?spec.network, "sandbox created");
        Ok(id)
    }

    async fn reconnect(&self, id: &BoxId, spec: &BoxSpec) -> Result<()> {
        self.dir(id)?;
        self.envs.lock().insert(id.clone(), spec.env.clone());
        Ok(())
    }

    async fn exec(&self, id: &BoxId, cmd: &Exec) -> Result<ExecOutput> {
        let dir = self.dir(id)?;
        let meta = dir.load_meta()?;
        let child_name = new_id("exec");
        let env = self.env_for(id, &meta, cmd);
        let oom_before = meta.cgroup.as_ref().map(BoxCgroup::oom_kills).unwrap_or(0);
        let mut c = self.launcher(&dir, &meta, &child_name, cmd, &cmd.argv, env)?;
        c.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = c.spawn().map_err(|e| SandboxError::io("/bin/sh", e))?;
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        let _running = Foreground::track(&self.foreground, id, pgid);
        let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
        let read_out = async move {
            let mut buf = Vec::new();
            if let Some(o) = out.as_mut() {
                let _ = o.read_to_end(&mut buf).await;
            }
            buf
        };
        let read_err = async move {
            let mut buf = Vec::new();
            if let Some(e) = err.as_mut() {
                let _ = e.read_to_end(&mut buf).await;
            }
            buf
        };
        let run = async { tokio::join!(child.wait(), read_out, read_err) };
        let (status, stdout, stderr, timed_out) = match tokio::time::timeout(cmd.timeout, run).await
        {
            Ok((status, stdout, stderr)) => (status.ok(), stdout, stderr, false),
            Err(_) => {
                process::signal(-pgid, libc::SIGKILL);
                if let Some(cg) = &meta.cgroup {
                    cg.kill(Some(&child_name)).await;
                }
                let _ = child.wait().await;
                (None, Vec::new(), Vec::new(), true)
            }
        };
        let mut oom_killed = false;
        if let Some(cg) = &meta.cgroup {
            // What the command left behind (daemons, a fork bomb) goes with it.
            cg.kill(Some(&child_name)).await;
            oom_killed = cg.oom_kills() > oom_before;
            cg.remove_child(&child_name);
        }
        let exit_code = status.and_then(|s| s.code());
        Ok(ExecOutput {
            exit_code,
            stdout: capped(&stdout),
            stderr: capped(&stderr),
            timed_out,
            oom_killed,
        })
    }

    async fn start(&self, id: &BoxId, cmd: &Exec) -> Result<RunId> {
        let dir = self.dir(id)?;
        let meta = dir.load_meta()?;
        let run = new_id("run");
        let env = self.env_for(id, &meta, cmd);
        let mut argv = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            RUN_WRAPPER.to_owned(),
            "crewlet-run".to_owned(),
            BoxDir::run_box_dir(&run),
        ];
        argv.extend(cmd.argv.iter().cloned());
        let mut c = self.launcher(&dir, &meta, &run, cmd, &argv, env)?;
        c.stdout(Stdio::null()).stderr(Stdio::null());
        let mut child = c.spawn().map_err(|e| SandboxError::io("/bin/sh", e))?;
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        dir.save_run(
            &run,
            &RunMeta {
                pgid,
                start_ticks: process::stat(pgid).map(|s| s.start_ticks),
                started_at: chrono::Utc::now(),
            },
        )?;
        // Reap the launcher when it ends so it does not linger as a zombie;
        // after an engine restart, init does that.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        Ok(RunId(run))
    }

    async fn poll(&self, id: &BoxId, run: &RunId) -> Result<RunState> {
        let dir = self.dir(id)?;
        let Some(meta) = dir.load_run(&run.0)? else {
            return Err(SandboxError::NoSuchRun {
                sandbox: id.0.clone(),
                run: run.0.clone(),
            });
        };
        let fs = dir.home_fs()?;
        if let Some(code) = exit_code(&fs, &run.0)? {
            return Ok(RunState::Exited { code });
        }
        let box_meta = dir.load_meta()?;
        let in_cgroup = box_meta
            .cgroup
            .as_ref()
            .is_some_and(|cg| !cg.pids(Some(&run.0)).is_empty());
        if in_cgroup || process::group_alive(meta.pgid) {
            return Ok(RunState::Running);
        }
        // The exit code may have landed between the two reads.
        if let Some(code) = exit_code(&fs, &run.0)? {
            return Ok(RunState::Exited { code });
        }
        Ok(RunState::Lost)
    }

    async fn run_output(&self, id: &BoxId, run: &RunId) -> Result<RunOutput> {
        let dir = self.dir(id)?;
        if dir.load_run(&run.0)?.is_none() {
            return Err(SandboxError::NoSuchRun {
                sandbox: id.0.clone(),
                run: run.0.clone(),
            });
        }
        let d = BoxDir::run_home_rel(&run.0);
        off_thread(move || {
            let fs = dir.home_fs()?;
            Ok(RunOutput {
                stdout: read_output(&fs, &d.join("stdout"))?,
                stderr: read_output(&fs, &d.join("stderr"))?,
            })
        })
        .await
    }

    async fn write_file(&self, id: &BoxId, path: &str, bytes: &[u8]) -> Result<()> {
        let dir = self.dir(id)?;
        let rel = BoxDir::home_rel(path)?;
        let bytes = bytes.to_vec();
        off_thread(move || dir.home_fs()?.write(&rel, &bytes)).await
    }

    async fn read_file(&self, id: &BoxId, path: &str) -> Result<Vec<u8>> {
        let dir = self.dir(id)?;
        let rel = BoxDir::home_rel(path)?;
        off_thread(move || dir.home_fs()?.read(&rel, Take::All(READ_CAP))).await
    }

    async fn read_file_tail(&self, id: &BoxId, path: &str, max: usize) -> Result<Vec<u8>> {
        let dir = self.dir(id)?;
        let rel = BoxDir::home_rel(path)?;
        off_thread(move || dir.home_fs()?.read(&rel, Take::Tail(max as u64))).await
    }

    async fn pause(&self, id: &BoxId) -> Result<()> {
        let dir = self.dir(id)?;
        let meta = dir.load_meta()?;
        self.limiter.pause(&meta, &self.launchers(id, &dir)).await
    }

    async fn resume(&self, id: &BoxId) -> Result<()> {
        let dir = self.dir(id)?;
        let meta = dir.load_meta()?;
        self.limiter.resume(&meta, &self.launchers(id, &dir)).await
    }

    async fn keepalive(&self, id: &BoxId, ttl: Duration) -> Result<()> {
        let dir = self.dir(id)?;
        let until =
            chrono::Utc::now() + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX);
        let p = dir.alive_path();
        std::fs::write(&p, until.timestamp().to_string()).map_err(|e| SandboxError::io(p, e))
    }

    async fn kill(&self, id: &BoxId) -> Result<()> {
        let Ok(dir) = self.dir(id) else {
            self.envs.lock().remove(id);
            return Ok(());
        };
        let meta = dir.load_meta()?;
        self.limiter.kill(&meta, &self.launchers(id, &dir)).await;
        self.envs.lock().remove(id);
        tokio::fs::remove_dir_all(&dir.root)
            .await
            .map_err(|e| SandboxError::io(&dir.root, e))?;
        tracing::debug!(sandbox = %id, "sandbox removed");
        Ok(())
    }

    async fn list(&self) -> Result<Vec<BoxId>> {
        let mut out = Vec::new();
        let entries = std::fs::read_dir(&self.opts.state_dir)
            .map_err(|e| SandboxError::io(&self.opts.state_dir, e))?;
        for e in entries.flatten() {
            if let Some(name) = e.file_name().to_str()
                && BoxDir::new(&self.opts.state_dir, name).exists()
            {
                out.push(BoxId(name.to_owned()));
            }
        }
        out.sort();
        Ok(out)
    }

    async fn reap(&self) -> Result<Vec<BoxId>> {
        let now = chrono::Utc::now().timestamp();
        let mut reaped = Vec::new();
        for id in self.list().await? {
            let Ok(dir) = self.dir(&id) else { continue };
            let until = std::fs::read_to_string(dir.alive_path())
                .ok()
                .and_then(|t| t.trim().parse::<i64>().ok());
            // A box nobody ever kept alive is never reaped: it belongs to a
            // caller that did not ask for expiry.
            let Some(until) = until else { continue };
            if until > now {
                continue;
            }
            let meta = dir.load_meta()?;
            let busy = meta
                .cgroup
                .as_ref()
                .is_some_and(|cg| !cg.pids(None).is_empty())
                || dir.run_ids().iter().any(|r| {
                    dir.load_run(r)
                        .ok()
                        .flatten()
                        .is_some_and(|m| process::group_alive(m.pgid))
                });
            if !busy {
                self.kill(&id).await?;
                reaped.push(id);
            }
        }
        Ok(reaped)
    }
}
