//! Making a seat's box: its environment (model access, identity, the
//! role's own variables), the `crewlet-ask` shim and the setup steps.

use std::collections::BTreeMap;
use std::time::Duration;

use crewlet_sandbox::setup::{SetupStep, provision, resolve_env};
use crewlet_sandbox::{BoxId, BoxSpec, Exec, Limits, Network};
use tracing::warn;

use super::{SandboxService, SeatSandbox, agent, llm_env};

impl SandboxService {
    /// The run environment of a seat's boxes: identity, then the role's own
    /// (`${VAR}`-resolved). Names of empty references are logged, never values.
    pub(super) fn box_env(&self, handle: &str, seat: &SeatSandbox) -> BTreeMap<String, String> {
        let raw: BTreeMap<String, String> = seat
            .role
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let (resolved, empty) = resolve_env(&raw, |n| (self.env)(n));
        if !empty.is_empty() {
            warn!(agent = handle, keys = ?empty, "sandbox_env_unresolved: these sandbox variables resolved empty");
        }
        // Later wins: the model credentials (only with `model_key: raw`;
        // a proxied run gets its own at its start), identity, then the
        // role's own.
        let mut env = match &seat.llm {
            Ok(llm_env::ModelAccess::Raw(vars)) => vars.clone(),
            _ => BTreeMap::new(),
        };
        env.insert("PATH".to_owned(), agent::PATH.to_owned());
        env.insert("CREWLET_AGENT_HANDLE".to_owned(), handle.to_owned());
        env.insert("CREWLET_AGENT_NAME".to_owned(), seat.name.clone());
        env.insert(
            "CREWLET_AGENT_EMAIL".to_owned(),
            format!("{handle}@agents.crewlet.local"),
        );
        env.insert("GIT_TERMINAL_PROMPT".to_owned(), "0".to_owned());
        if let Some(m) = &seat.mcp {
            env.extend(m.env.iter().cloned());
        }
        env.extend(resolved);
        env
    }

    fn setup_steps(&self, seat: &SeatSandbox) -> Vec<SetupStep> {
        self.provider
            .setup
            .iter()
            .chain(seat.role.setup.iter())
            .map(|s| {
                let raw: BTreeMap<String, String> =
                    s.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                let (env, _) = resolve_env(&raw, |n| (self.env)(n));
                SetupStep {
                    name: s.name.clone(),
                    files: s
                        .files
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                    commands: s.commands.clone(),
                    env,
                    brief: Some(s.brief.clone()).filter(|b| !b.trim().is_empty()),
                    timeout: Duration::from_secs_f64(s.timeout_seconds.max(0.001)),
                }
            })
            .collect()
    }

    /// Makes and provisions a box for `handle`; returns it and the setup briefs.
    pub(super) async fn new_box(
        &self,
        handle: &str,
        seat: &SeatSandbox,
    ) -> Result<(BoxId, Vec<String>), String> {
        let local = self.provider.local.clone().unwrap_or_default();
        let spec = BoxSpec {
            env: self.box_env(handle, seat),
            network: if local.network == "none" {
                Network::None
            } else {
                Network::Host
            },
            limits: Limits {
                memory_mb: Some(local.memory_mb.max(8)),
                pids: Some(local.pids.max(1)),
                cpus: Some(local.cpus),
            },
            labels: [("seat".to_owned(), handle.to_owned())]
                .into_iter()
                .collect(),
        };
        let id = self
            .backend
            .create(&spec)
            .await
            .map_err(|e| e.to_string())?;
        let shim = self
            .backend
            .write_file(&id, agent::ASK_SHIM, agent::ASK_SCRIPT.as_bytes())
            .await;
        let chmod = match shim {
            Ok(()) => self
                .backend
                .exec(&id, &Exec::new(["chmod", "+x", agent::ASK_SHIM]))
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = chmod {
            let _ = self.backend.kill(&id).await;
            return Err(format!("cannot install crewlet-ask in the box: {e}"));
        }
        match provision(
            self.backend.as_ref(),
            &id,
            &self.setup_steps(seat),
            &spec.env,
        )
        .await
        {
            Ok(done) => Ok((id, done.briefs)),
            Err(e) => {
                warn!(agent = handle, error = %e, "sandbox_setup_failed");
                let _ = self.backend.kill(&id).await;
                Err(e.to_string())
            }
        }
    }
}
