//! The E2B backend: boxes are E2B sandboxes (Firecracker microVMs), made and
//! managed through E2B's control plane and driven through envd, the daemon
//! in each sandbox.
//!
//! Limits and network policy are not enforced per box: E2B sizes a sandbox
//! by its template (CPU, memory, disk are chosen when the template is
//! built), so [`BoxSpec::limits`] and [`BoxSpec::network`] are ignored here.
//! Pick a template sized for the work. Reaping is E2B's: a sandbox whose
//! timeout (our keepalive) runs out is removed by E2B, so [`Sandbox::reap`]
//! has nothing to do. See `docs/sandbox-e2b.md`.

mod api;
mod connect;
mod envd;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;

use self::api::Api;
use self::envd::{ENVD_PORT, Envd, Outcome};
use crate::{
    BoxId, BoxSpec, Exec, ExecOutput, HOME, Result, RunId, RunOutput, RunState, Sandbox,
    SandboxError, WORKSPACE, capped,
};

pub use self::api::{LABEL_KEY, LABEL_VALUE};

/// Options of the E2B backend.
#[derive(Clone)]
pub struct E2bOptions {
    /// The team's API key (`e2b_...`), sent as `X-API-Key`.
    pub api_key: String,
    /// E2B's domain (`e2b.app`); the control plane is `api.<domain>`, a
    /// sandbox's envd `49983-<id>.<domain>`.
    pub domain: String,
    /// The template boxes are made from (`base`, or a custom one with the
    /// tools an agent needs).
    pub template: String,
    /// A different control-plane URL (`http://127.0.0.1:port` for tests).
    pub api_url_override: Option<String>,
    /// One envd URL for every sandbox, which is then named in the
    /// `E2b-Sandbox-Id` header (tests, or a header-routing proxy).
    pub envd_url_override: Option<String>,
}

impl std::fmt::Debug for E2bOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bOptions")
            .field("domain", &self.domain)
            .field("template", &self.template)
            .field("api_url_override", &self.api_url_override)
            .field("envd_url_override", &self.envd_url_override)
            .finish_non_exhaustive()
    }
}

impl E2bOptions {
    /// The default domain and the `base` template.
    pub fn new(api_key: impl Into<String>) -> Self {
        Self {
            api_key: api_key.into(),
            domain: "e2b.app".into(),
            template: "base".into(),
            api_url_override: None,
            envd_url_override: None,
        }
    }
}

/// How long a box lives before its first keepalive (E2B's `timeout`).
const FIRST_TTL: Duration = Duration::from_secs(15 * 60);
/// Time allowed to the short commands this backend runs for itself.
const SHORT: Duration = Duration::from_secs(60);

/// What we keep of a box: the envd token and the environment (both
/// credentials, so memory only) and its last timeout.
#[derive(Clone)]
struct Known {
    /// The sandbox's own domain, when E2B names one.
    domain: Option<String>,
    token: Option<String>,
    env: BTreeMap<String, String>,
    ttl: Duration,
}

/// Boxes on E2B.
pub struct E2bSandbox {
    opts: E2bOptions,
    http: reqwest::Client,
    api: Api,
    boxes: Mutex<HashMap<BoxId, Known>>,
}

/// Starts the run wrapper in the background and returns at once. Arguments:
/// the wrapper script, the run directory, then the command line.
const LAUNCH: &str = r#"w=$1; shift; mkdir -p "$1" || exit 1; nohup /bin/sh -c "$w" crewlet-run "$@" > /dev/null 2>&1 < /dev/null & echo $! > "$1/pid""#;

/// The in-box wrapper of a detached run, the local backend's: output and
/// exit code into the run's directory, the exit code written last.
const RUN_WRAPPER: &str = r#"d=$1; shift; mkdir -p "$d"; "$@" > "$d/stdout" 2> "$d/stderr" < /dev/null; echo $? > "$d/exit.tmp"; mv "$d/exit.tmp" "$d/exit""#;

/// SIGKILL to the process group led by `$1`, if there is one.
const GROUP_KILL: &str = r#"kill -KILL -- "-$1" 2> /dev/null; true"#;

/// Where a run stands, told by the box: `exit <code>`, `running`, `lost`
/// or `none` (no such run).
const PROBE: &str = r#"d=$1; if [ -f "$d/exit" ]; then echo "exit $(cat "$d/exit")"; elif [ ! -f "$d/pid" ]; then echo none; elif kill -0 "$(cat "$d/pid")" 2> /dev/null; then echo running; elif [ -f "$d/exit" ]; then echo "exit $(cat "$d/exit")"; else echo lost; fi"#;

impl E2bSandbox {
    /// A client; nothing is contacted until the first call.
    pub fn new(opts: E2bOptions) -> Result<Self> {
        if opts.api_key.trim().is_empty() {
            return Err(SandboxError::Invalid(
                "the E2B backend needs an API key (E2B_API_KEY)".into(),
            ));
        }
        let http = crewlet_http::client_builder()
            .connect_timeout(Duration::from_secs(20))
            .build()
            .map_err(|e| SandboxError::Unavailable(format!("http client: {e}")))?;
        let base = opts
            .api_url_override
            .clone()
            .unwrap_or_else(|| format!("https://api.{}", opts.domain));
        let api = Api::new(
            http.clone(),
            base.trim_end_matches('/').to_owned(),
            opts.api_key.clone(),
        );
        Ok(Self {
            opts,
            http,
            api,
            boxes: Mutex::new(HashMap::new()),
        })
    }

    fn envd(&self, id: &BoxId, known: &Known) -> Envd {
        let base = match &self.opts.envd_url_override {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => {
                let domain = known.domain.as_deref().unwrap_or(&self.opts.domain);
                format!("https://{ENVD_PORT}-{}.{domain}", id.0)
            }
        };
        Envd {
            http: self.http.clone(),
            base,
            sandbox: id.0.clone(),
            token: known.token.clone(),
        }
    }

    /// What we know of a box, asking the control plane when this process
    /// has not seen it (made before a restart): `NoSuchBox` when gone.
    async fn known(&self, id: &BoxId) -> Result<Known> {
        check_id(id)?;
        if let Some(k) = self.boxes.lock().get(id).cloned() {
            return Ok(k);
        }
        let info = self.api.get(&id.0).await?;
        let k = Known {
            domain: sandbox_domain(&info),
            token: info.envd_access_token,
            env: BTreeMap::new(),
            ttl: FIRST_TTL,
        };
        self.boxes.lock().insert(id.clone(), k.clone());
        Ok(k)
    }

    async fn box_envd(&self, id: &BoxId) -> Result<(Envd, Known)> {
        let k = self.known(id).await?;
        Ok((self.envd(id, &k), k))
    }

    /// Runs a short command of our own; its stdout, or an error when it
    /// fails.
    async fn short(&self, envd: &Envd, script: &str, args: &[&str]) -> Result<String> {
        let mut argv = vec!["/bin/sh".to_owned(), "-c".to_owned(), script.to_owned()];
        argv.push("crewlet".to_owned());
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        match envd.run(&argv, &BTreeMap::new(), HOME, SHORT).await? {
            Outcome::Done(done) if done.exit_code == Some(0) => {
                Ok(String::from_utf8_lossy(&done.stdout).into_owned())
            }
            Outcome::Done(done) => Err(SandboxError::Api(format!(
                "a short command of the backend failed ({:?}): {}",
                done.exit_code,
                capped(&done.stderr)
                    .chars()
                    .take(200)
                    .collect::<String>()
                    .trim()
            ))),
            Outcome::TimedOut { .. } => Err(SandboxError::Api(
                "a short command of the backend timed out".into(),
            )),
        }
    }
}

/// The domain E2B says a sandbox is on, when it is a plain host name.
fn sandbox_domain(info: &api::SandboxInfo) -> Option<String> {
    info.domain.clone().filter(|d| {
        !d.is_empty()
            && d.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    })
}

/// Ids are E2B's: letters, digits, `-` and `_`. Anything else is not ours.
fn check_id(id: &BoxId) -> Result<()> {
    let ok = !id.0.is_empty()
        && id.0.len() <= 128
        && id
            .0
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(SandboxError::NoSuchBox(id.0.clone()))
    }
}

/// The in-box path of `path`: absolute under [`HOME`] or relative to
/// [`WORKSPACE`], with no `..`; anything else is [`SandboxError::PathOutside`].
/// Links cannot be checked from here; in a VM they only reach the box's own
/// disk.
pub fn box_path(path: &str) -> Result<String> {
    let outside = || SandboxError::PathOutside(path.to_owned());
    let full = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{WORKSPACE}/{path}")
    };
    let mut parts = Vec::new();
    for part in full.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(outside()),
            p if p.contains('\0') => return Err(outside()),
            p => parts.push(p),
        }
    }
    let clean = format!("/{}", parts.join("/"));
    match clean.strip_prefix(HOME) {
        Some(rest) if rest.len() > 1 && rest.starts_with('/') => Ok(clean),
        _ => Err(outside()),
    }
}

fn run_dir(run: &str) -> Result<String> {
    if run.is_empty() || !run.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err(SandboxError::Invalid(format!("run id `{run}`")));
    }
    Ok(format!("{HOME}/.crewlet/runs/{run}"))
}

fn new_run_id() -> String {
    let uuid = uuid::Uuid::now_v7().simple().to_string();
    format!("run-{}", &uuid[uuid.len() - 16..])
}

#[async_trait]
impl Sandbox for E2bSandbox {
    fn backend(&self) -> &'static str {
        "e2b"
    }

    async fn create(&self, spec: &BoxSpec) -> Result<BoxId> {
        if spec.limits.any() || spec.network != crate::Network::None {
            tracing::debug!(
                template = %self.opts.template,
                "e2b: limits and network come from the template; the spec's are not applied"
            );
        }
        let info = self
            .api
            .create(&self.opts.template, FIRST_TTL, &spec.env, &spec.labels)
            .await?;
        let id = BoxId(info.sandbox_id.clone());
        check_id(&id)?;
        let known = Known {
            domain: sandbox_domain(&info),
            token: info.envd_access_token,
            env: spec.env.clone(),
            ttl: FIRST_TTL,
        };
        // The workspace commands start in.
        let envd = self.envd(&id, &known);
        self.boxes.lock().insert(id.clone(), known);
        if let Err(e) = self
            .short(
                &envd,
                r#"mkdir -p "$1" "$2""#,
                &[WORKSPACE, &format!("{HOME}/.crewlet/runs")],
            )
            .await
        {
            let _ = self.kill(&id).await;
            return Err(e);
        }
        tracing::debug!(sandbox = %id, template = %self.opts.template, "e2b sandbox created");
        Ok(id)
    }

    async fn reconnect(&self, id: &BoxId, spec: &BoxSpec) -> Result<()> {
        check_id(id)?;
        let info = self.api.get(&id.0).await?;
        let ttl = self
            .boxes
            .lock()
            .get(id)
            .map(|k| k.ttl)
            .unwrap_or(FIRST_TTL);
        self.boxes.lock().insert(
            id.clone(),
            Known {
                domain: sandbox_domain(&info),
                token: info.envd_access_token,
                env: spec.env.clone(),
                ttl,
            },
        );
        Ok(())
    }

    async fn exec(&self, id: &BoxId, cmd: &Exec) -> Result<ExecOutput> {
        let (envd, known) = self.box_envd(id).await?;
        let mut env = known.env.clone();
        env.extend(cmd.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let cwd = cmd.cwd.clone().unwrap_or_else(|| WORKSPACE.to_owned());
        match envd.run(&cmd.argv, &env, &cwd, cmd.timeout).await? {
            Outcome::Done(done) => Ok(ExecOutput {
                exit_code: done.exit_code,
                stdout: capped(&done.stdout),
                stderr: capped(&done.stderr),
                timed_out: false,
                oom_killed: false,
            }),
            Outcome::TimedOut { pid } => {
                // SendSignal reaches the process itself; what it started
                // goes with its group, when it leads one (best effort).
                if let Some(pid) = pid
                    && let Err(e) = self.short(&envd, GROUP_KILL, &[&pid.to_string()]).await
                {
                    tracing::debug!(sandbox = %id, error = %e, "killing a timed-out group failed");
                }
                Ok(ExecOutput {
                    timed_out: true,
                    ..ExecOutput::default()
                })
            }
        }
    }

    async fn start(&self, id: &BoxId, cmd: &Exec) -> Result<RunId> {
        if cmd.argv.is_empty() {
            return Err(SandboxError::Invalid("empty command line".into()));
        }
        let (envd, known) = self.box_envd(id).await?;
        let run = new_run_id();
        let mut argv = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            LAUNCH.to_owned(),
            "crewlet-launch".to_owned(),
            RUN_WRAPPER.to_owned(),
            run_dir(&run)?,
        ];
        argv.extend(cmd.argv.iter().cloned());
        let mut env = known.env.clone();
        env.extend(cmd.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let cwd = cmd.cwd.clone().unwrap_or_else(|| WORKSPACE.to_owned());
        let Outcome::Done(done) = envd.run(&argv, &env, &cwd, SHORT).await? else {
            return Err(SandboxError::Api("starting the run timed out".into()));
        };
        if done.exit_code != Some(0) {
            return Err(SandboxError::Api(format!(
                "starting the run failed ({:?}): {}",
                done.exit_code,
                capped(&done.stderr).trim()
            )));
        }
        Ok(RunId(run))
    }

    async fn poll(&self, id: &BoxId, run: &RunId) -> Result<RunState> {
        let (envd, _) = self.box_envd(id).await?;
        let dir = run_dir(&run.0).map_err(|_| no_run(id, run))?;
        if let Some(code) = envd.read(&format!("{dir}/exit")).await?
            && let Ok(code) = String::from_utf8_lossy(&code).trim().parse()
        {
            return Ok(RunState::Exited { code });
        }
        let said = self.short(&envd, PROBE, &[&dir]).await?;
        let said = said.trim();
        if let Some(code) = said.strip_prefix("exit ") {
            return match code.trim().parse() {
                Ok(code) => Ok(RunState::Exited { code }),
                Err(_) => Ok(RunState::Lost),
            };
        }
        match said {
            "running" => Ok(RunState::Running),
            "none" => Err(no_run(id, run)),
            _ => Ok(RunState::Lost),
        }
    }

    async fn run_output(&self, id: &BoxId, run: &RunId) -> Result<RunOutput> {
        let (envd, _) = self.box_envd(id).await?;
        let dir = run_dir(&run.0).map_err(|_| no_run(id, run))?;
        if envd.read(&format!("{dir}/pid")).await?.is_none() {
            return Err(no_run(id, run));
        }
        let stdout = envd
            .read(&format!("{dir}/stdout"))
            .await?
            .unwrap_or_default();
        let stderr = envd
            .read(&format!("{dir}/stderr"))
            .await?
            .unwrap_or_default();
        Ok(RunOutput {
            stdout: capped(&stdout),
            stderr: capped(&stderr),
        })
    }

    async fn write_file(&self, id: &BoxId, path: &str, bytes: &[u8]) -> Result<()> {
        let full = box_path(path)?;
        let (envd, _) = self.box_envd(id).await?;
        envd.write(&full, bytes).await
    }

    async fn read_file(&self, id: &BoxId, path: &str) -> Result<Vec<u8>> {
        let full = box_path(path)?;
        let (envd, _) = self.box_envd(id).await?;
        envd.read(&full).await?.ok_or_else(|| {
            SandboxError::io(
                path,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file in the sandbox"),
            )
        })
    }

    async fn pause(&self, id: &BoxId) -> Result<()> {
        self.known(id).await?;
        self.api.pause(&id.0).await
    }

    async fn resume(&self, id: &BoxId) -> Result<()> {
        let known = self.known(id).await?;
        let info = self.api.connect(&id.0, known.ttl).await?;
        if let Some(k) = self.boxes.lock().get_mut(id)
            && info.envd_access_token.is_some()
        {
            k.token = info.envd_access_token;
        }
        Ok(())
    }

    async fn keepalive(&self, id: &BoxId, ttl: Duration) -> Result<()> {
        self.known(id).await?;
        self.api.set_timeout(&id.0, ttl).await?;
        if let Some(k) = self.boxes.lock().get_mut(id) {
            k.ttl = ttl;
        }
        Ok(())
    }

    async fn kill(&self, id: &BoxId) -> Result<()> {
        self.boxes.lock().remove(id);
        if check_id(id).is_err() {
            return Ok(());
        }
        self.api.delete(&id.0).await?;
        tracing::debug!(sandbox = %id, "e2b sandbox removed");
        Ok(())
    }

    async fn list(&self) -> Result<Vec<BoxId>> {
        Ok(self.api.list().await?.into_iter().map(BoxId).collect())
    }

    /// E2B removes a sandbox when its timeout (the keepalive) runs out, so
    /// there is nothing left for us to reap.
    async fn reap(&self) -> Result<Vec<BoxId>> {
        Ok(Vec::new())
    }
}

fn no_run(id: &BoxId, run: &RunId) -> SandboxError {
    SandboxError::NoSuchRun {
        sandbox: id.0.clone(),
        run: run.0.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_in_the_home() {
        assert_eq!(
            box_path("a/b.txt").ok().as_deref(),
            Some("/home/user/workspace/a/b.txt")
        );
        assert_eq!(
            box_path("/home/user/x").ok().as_deref(),
            Some("/home/user/x")
        );
        assert_eq!(
            box_path("./a//b").ok().as_deref(),
            Some("/home/user/workspace/a/b")
        );
        for bad in [
            "/etc/passwd",
            "../x",
            "../../../etc/passwd",
            "/home/user/../../etc",
            "/home/user",
            "/home/user/",
            "/home/userx/a",
        ] {
            assert!(
                matches!(box_path(bad), Err(SandboxError::PathOutside(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_sandbox_domain_is_used_only_when_it_is_a_host_name() {
        let info = |d: &str| api::SandboxInfo {
            sandbox_id: "s1".into(),
            envd_access_token: None,
            domain: Some(d.into()),
        };
        assert_eq!(
            sandbox_domain(&info("eu.e2b.app")).as_deref(),
            Some("eu.e2b.app")
        );
        assert_eq!(sandbox_domain(&info("evil.com/x?")), None);
        assert_eq!(sandbox_domain(&info("")), None);
    }

    #[test]
    fn the_key_is_not_in_debug_output() {
        let text = format!("{:?}", E2bOptions::new("e2b_topsecret"));
        assert!(!text.contains("topsecret"), "{text}");
    }
}
