//! The code sandbox in the engine: `run_sandbox` starts a coding agent in an
//! isolated box for a seat, detached; the seat's turn stops there (the seat
//! is `awaiting_sandbox` and its inbox keeps its mail), the run is polled to
//! its end, and the same turn runs again from its journal, where the
//! `run_sandbox` call now answers with the run's report.
//!
//! A run is a [`SandboxRun`] row, so an engine that restarts mid-run finds
//! it again: the task comes back from the inbox, its turn walks its journal
//! to the same call, and the call, seeing its run still going, suspends the
//! turn again.
//!
//! Boxes live for the turn: a second `run_sandbox` call of the same turn
//! (after a question was answered, for a follow-up fix) reuses the box and
//! its checkout; the boxes of a turn are removed when the turn ends.
//!
//! A question for a person parks the run instead ([`park`]): the question
//! is posted in the task's conversation, the box is paused (within the
//! pause TTL), the seat goes free, and the next message in that
//! conversation resumes the same turn with the answer.

mod agent;
mod ask;
mod backend;
mod boxes;
mod budget;
mod collect;
mod escape;
mod llm_env;
mod mcp;
mod model_proxy;
mod park;
mod tool;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crewlet_config::later::{
    CodingAgent, CodingAgentChoice, RoleSandbox, SandboxKind, SandboxProvider,
};
use crewlet_config::{Company, Organization};
use crewlet_core::{Event, EventType};
use crewlet_queue::EventQueue;
use crewlet_sandbox::{BoxId, BoxSpec, Exec, Sandbox};
use crewlet_store::{SandboxRun, SandboxRunPatch, SandboxRunStatus, SandboxRuns};
use parking_lot::Mutex;
use serde_json::json;
use tracing::{info, warn};
use uuid::Uuid;

use crate::engine::EnvLookup;

pub(crate) use ask::ChatSurfaces;
pub(crate) use park::Waited;
pub(crate) use tool::RunSandboxTool;

/// How long a box outlives an engine that stopped looking at it.
const KEEPALIVE_MIN: Duration = Duration::from_secs(60);

/// A seat's sandbox settings, resolved.
struct SeatSandbox {
    agent: CodingAgent,
    role: RoleSandbox,
    manager: Option<String>,
    name: String,
    /// How long a box paused for a person's answer is kept (zero: not kept).
    pause_ttl: Duration,
    /// The seat's MCP servers as its coding agent reads them.
    mcp: Option<mcp::Rendered>,
    /// Whose budgets the coding agent's reported tokens are charged to.
    payer: budget::Payer,
    /// How the coding agent reaches its model, or why it cannot run.
    llm: Result<llm_env::ModelAccess, String>,
}

/// The engine's sandbox: the backend, the runs, each seat's settings.
pub(crate) struct SandboxService {
    backend: Arc<dyn Sandbox>,
    runs: Arc<dyn SandboxRuns>,
    queue: Arc<dyn EventQueue>,
    ledger: Arc<dyn crewlet_store::TokenLedger>,
    provider: SandboxProvider,
    seats: HashMap<String, SeatSandbox>,
    env: EnvLookup,
    /// The inbox event each seat's running turn came from.
    triggers: Mutex<HashMap<String, Event>>,
    /// Where questions for people are posted.
    surfaces: ChatSurfaces,
    /// The agent seats (a question for one of them goes back to the turn,
    /// which asks it with `a2a_ask`).
    agents: std::collections::HashSet<String>,
    /// The model proxy, started by the first run that needs it.
    proxy: tokio::sync::OnceCell<model_proxy::ModelProxy>,
}

impl SandboxService {
    /// The sandbox of `company`: `None` when it has no provider, no seat
    /// enables it, or the backend cannot work here (said in the log).
    pub async fn from_company(
        company: &Company,
        org: &Organization,
        env: &EnvLookup,
        runs: Arc<dyn SandboxRuns>,
        queue: Arc<dyn EventQueue>,
        ledger: Arc<dyn crewlet_store::TokenLedger>,
        surfaces: ChatSurfaces,
    ) -> Option<Arc<Self>> {
        let provider = company.providers.sandbox.clone()?;
        let company_profile = crate::engine::company_profile(company);
        // Only a local box on the host's network reaches the engine's loopback.
        let reachable = provider.kind == SandboxKind::Local
            && provider.local.as_ref().is_some_and(|l| l.network != "none");
        let seats: HashMap<String, SeatSandbox> = org
            .agents()
            .filter_map(|s| {
                let role = s.role.sandbox.as_deref().filter(|r| r.enabled)?.clone();
                let agent = match role.coding_agent {
                    CodingAgentChoice::Default => provider.default_coding_agent,
                    CodingAgentChoice::ClaudeCode => CodingAgent::ClaudeCode,
                    CodingAgentChoice::Opencode => CodingAgent::Opencode,
                    CodingAgentChoice::Command => CodingAgent::Command,
                };
                let declared: BTreeMap<String, String> = role
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let llm = llm_env::derive(
                    company,
                    &s.role,
                    agent,
                    llm_env::mode(&role, provider.model_key),
                    reachable,
                    &declared,
                    env,
                );
                let servers: Vec<_> = role
                    .mcp
                    .servers
                    .iter()
                    .filter_map(|name| {
                        crate::tools::mcp::seat_server(company, s, name, env.as_ref())
                            .inspect_err(|e| warn!(agent = %s.handle, server = %name, error = %e, "role.sandbox.mcp: this server is left out of the seat's sandbox"))
                            .ok()
                    })
                    .collect();
                let ttl = if role.pause_ttl_seconds < 0.0 {
                    provider.default_pause_ttl_seconds
                } else {
                    role.pause_ttl_seconds
                };
                Some((
                    s.handle.clone(),
                    SeatSandbox {
                        agent,
                        role,
                        manager: s.manager.clone(),
                        name: s.name.clone(),
                        pause_ttl: Duration::from_secs_f64(ttl.max(0.0)),
                        mcp: mcp::render(agent, &servers),
                        payer: budget::Payer {
                            agent_id: s.agent_id,
                            limits: crewlet_turn::BudgetLimits::of(
                                &company_profile,
                                &crate::engine::seat_profile(company, org, s),
                            ),
                        },
                        llm,
                    },
                ))
            })
            .collect();
        if seats.is_empty() {
            return None;
        }
        let backend: Arc<dyn Sandbox> = match provider.kind {
            SandboxKind::None => return None,
            SandboxKind::Local => match backend::local(&provider, env).await {
                Ok(b) => b,
                Err(e) => {
                    warn!(error = %e, "providers.sandbox: the local sandbox cannot start; no seat gets run_sandbox");
                    return None;
                }
            },
            SandboxKind::E2b => match backend::e2b(&provider, env) {
                Ok(b) => b,
                Err(e) => {
                    warn!(error = %e, "providers.sandbox: the e2b sandbox cannot start; no seat gets run_sandbox");
                    return None;
                }
            },
            SandboxKind::Fake => {
                warn!(
                    "providers.sandbox: `type: fake` is the original's in-process test double; Crewlet's tests use real boxes, so no seat gets run_sandbox"
                );
                return None;
            }
        };
        info!(
            backend = backend.backend(),
            seats = seats.len(),
            "code sandbox ready"
        );
        Some(Arc::new(Self {
            backend,
            runs,
            queue,
            ledger,
            provider,
            seats,
            env: env.clone(),
            triggers: Mutex::new(HashMap::new()),
            surfaces,
            agents: org.agents().map(|s| s.handle.clone()).collect(),
            proxy: tokio::sync::OnceCell::new(),
        }))
    }

    /// The seats that get `run_sandbox`.
    pub fn handles(&self) -> Vec<String> {
        self.seats.keys().cloned().collect()
    }

    /// Notes the inbox event `handle`'s turn runs for (kept with its runs).
    pub fn set_trigger(&self, handle: &str, event: &Event) {
        self.triggers
            .lock()
            .insert(handle.to_owned(), event.clone());
    }

    fn poll_every(&self) -> Duration {
        Duration::from_secs_f64(self.provider.poll_seconds.max(0.01))
    }

    fn keepalive(&self) -> Duration {
        Duration::from_secs_f64(self.provider.default_timeout_seconds.max(0.0)).max(KEEPALIVE_MIN)
    }

    /// Starts the coding agent on `task` for the `run_sandbox` call
    /// `call_id` of `ctx`'s turn; reuses the turn's box if it has one.
    async fn launch(
        &self,
        ctx: &crewlet_turn::ToolContext,
        call_id: &str,
        task: &str,
    ) -> Result<SandboxRun, String> {
        let handle = ctx.agent_handle.as_str();
        let seat = self
            .seats
            .get(handle)
            .ok_or("this seat has no code sandbox")?;
        if let Err(why) = &seat.llm {
            return Err(why.clone());
        }
        let earlier = self
            .runs
            .for_turn(handle, ctx.turn_id)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .rev()
            .find(|r| park::box_reusable(r.status) && !r.box_id.is_empty());
        let (box_id, briefs) = match earlier {
            Some(r) => {
                let id = BoxId(r.box_id.clone());
                let spec = BoxSpec {
                    env: self.box_env(handle, seat),
                    ..BoxSpec::default()
                };
                match self.backend.reconnect(&id, &spec).await {
                    Ok(()) => {
                        // Paused while its question waited: it runs again.
                        let _ = self.backend.resume(&id).await;
                        // A fresh start: the last run's question and report go.
                        let _ = self
                            .backend
                            .exec(
                                &id,
                                &Exec::shell(format!(
                                    "rm -rf {} {}",
                                    agent::ASK_DIR,
                                    agent::FINDINGS
                                )),
                            )
                            .await;
                        (id, Vec::new())
                    }
                    Err(_) => self.new_box(handle, seat).await?,
                }
            }
            None => self.new_box(handle, seat).await?,
        };
        let mut environment = briefs;
        if let Some(m) = &seat.mcp {
            environment.push(format!(
                "MCP servers you can use, as this seat: {}.",
                m.names.join(", ")
            ));
        }
        let brief = agent::brief(task, &environment, handle);
        let id = Uuid::now_v7();
        let model_env = match self.model_env(id, handle, &ctx.task_id, seat).await {
            Ok(e) => e,
            Err(e) => {
                let _ = self.backend.kill(&box_id).await;
                return Err(e);
            }
        };
        let started = async {
            self.backend
                .write_file(&box_id, agent::BRIEF, brief.as_bytes())
                .await?;
            let mut argv = agent::command_line(seat.agent, &self.provider.command, &brief)
                .map_err(crewlet_sandbox::SandboxError::Invalid)?;
            if let Some(m) = &seat.mcp {
                self.backend
                    .write_file(&box_id, m.path, m.contents.as_bytes())
                    .await?;
                argv.extend(m.args.iter().cloned());
            }
            self.backend.keepalive(&box_id, self.keepalive()).await?;
            let mut exec = Exec::new(argv);
            exec.env = model_env;
            self.backend.start(&box_id, &exec).await
        }
        .await;
        let run_id = match started {
            Ok(r) => r,
            Err(e) => {
                self.escape_refused_at_start(ctx, &box_id, &e).await;
                if let Some(p) = self.proxy.get() {
                    p.revoke(id);
                }
                let _ = self.backend.kill(&box_id).await;
                return Err(format!("the coding agent did not start: {e}"));
            }
        };
        let trigger = self.triggers.lock().get(handle).cloned();
        let now = chrono::Utc::now();
        let run = SandboxRun {
            id,
            seat: handle.to_owned(),
            task_id: ctx.task_id.clone(),
            turn_id: ctx.turn_id,
            call_id: call_id.to_owned(),
            trigger_event: trigger
                .as_ref()
                .and_then(|e| serde_json::to_value(e).ok())
                .unwrap_or_default(),
            conversation: trigger.as_ref().and_then(crate::coalesce::conversation_key),
            backend: self.backend.backend().to_owned(),
            box_id: box_id.0.clone(),
            run_id: run_id.0.clone(),
            coding_agent: agent::agent_name(seat.agent).to_owned(),
            status: SandboxRunStatus::Running,
            question: None,
            answer: None,
            result: None,
            paused_at: None,
            created_at: now,
            updated_at: now,
        };
        let stored = match self.runs.insert(&run).await {
            Ok(s) => s,
            Err(e) => {
                self.revoke_model_token(&run);
                return Err(e.to_string());
            }
        };
        self.publish(
            EventType::SandboxRunStarted,
            &stored,
            format!("{handle} started {} in a sandbox", stored.coding_agent),
            json!({}),
            &ctx.trace,
        )
        .await;
        Ok(stored)
    }

    /// The model variables of run `id`'s agent: through the proxy, its
    /// URL and a new token (the proxy starts with the first such run).
    async fn model_env(
        &self,
        id: Uuid,
        handle: &str,
        task_id: &str,
        seat: &SeatSandbox,
    ) -> Result<BTreeMap<String, String>, String> {
        let Ok(llm_env::ModelAccess::Proxy(upstream)) = &seat.llm else {
            return Ok(BTreeMap::new());
        };
        let proxy = self
            .proxy
            .get_or_try_init(|| {
                model_proxy::ModelProxy::start(
                    &self.provider.model_proxy,
                    self.ledger.clone(),
                    self.queue.clone(),
                )
            })
            .await?;
        let token = proxy.issue(model_proxy::Grant::new(
            id,
            handle,
            task_id,
            upstream.clone(),
            seat.payer.clone(),
        ));
        Ok(proxy.run_env(upstream.vendor, token))
    }

    async fn publish(
        &self,
        kind: EventType,
        run: &SandboxRun,
        summary: String,
        extra: serde_json::Value,
        trace: &crewlet_core::TraceContext,
    ) {
        let mut payload = json!({
            "run_id": run.id,
            "turn_id": run.turn_id,
            "call_id": run.call_id,
            "backend": run.backend,
            "sandbox_id": run.box_id,
            "coding_agent": run.coding_agent,
            "status": run.status.as_str(),
        });
        if let (Some(p), Some(e)) = (payload.as_object_mut(), extra.as_object()) {
            p.extend(e.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let mut event = Event::new(kind, "engine")
            .with_summary(summary)
            .with_agent_handle(&run.seat)
            .with_payload(payload)
            .with_trace(trace.child());
        event.task_id = Some(run.task_id.clone());
        crate::sink::publish_event(self.queue.as_ref(), event).await;
    }

    /// What the `run_sandbox` call of a finished run answers.
    fn reply(&self, run: &SandboxRun) -> String {
        let hint = self.seats.get(&run.seat).map_or(String::new(), |s| {
            format!(
                "requester: whoever sent this task; manager: {}.",
                s.manager.as_deref().unwrap_or("(none)")
            )
        });
        agent::reply(
            run.result.as_ref().unwrap_or(&serde_json::Value::Null),
            &hint,
        )
    }

    /// Removes the boxes of `handle`'s turn `turn_id` (it ended) and
    /// closes its answered runs.
    pub async fn finish_turn(&self, handle: &str, turn_id: Uuid) {
        let runs = self
            .runs
            .for_turn(handle, turn_id)
            .await
            .unwrap_or_default();
        for run in runs
            .iter()
            .filter(|r| r.status == SandboxRunStatus::Answered)
        {
            let _ = self
                .runs
                .transition(
                    run.id,
                    &[SandboxRunStatus::Answered],
                    SandboxRunStatus::Completed,
                    &SandboxRunPatch::default(),
                )
                .await;
        }
        for run in &runs {
            self.revoke_model_token(run);
        }
        let mut seen = std::collections::BTreeSet::new();
        for run in runs
            .into_iter()
            .filter(|r| park::box_reusable(r.status) && !r.box_id.is_empty())
        {
            if seen.insert(run.box_id.clone())
                && let Err(e) = self.backend.kill(&BoxId(run.box_id.clone())).await
            {
                warn!(agent = handle, sandbox = %run.box_id, error = %e, "cannot remove the turn's sandbox");
            }
        }
    }
}
