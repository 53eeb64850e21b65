//! Settings of the code sandbox, fleet placement and the knowledge system,
//! in the original's shapes. Keys Crewlet does not act on yet carry
//! `x-crewlet-inert`: they are accepted and type-checked so the original's
//! companies load unchanged, and `crewlet validate` and the engine's start
//! log name each one that is set and say it has no effect.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A seat's code sandbox.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleSandbox {
    /// Offer the seat a code sandbox.
    #[serde(default)]
    pub enabled: bool,
    /// `claude-code`, `opencode`, or empty for the provider's default.
    #[serde(default)]
    pub coding_agent: CodingAgentChoice,
    /// Seconds a box paused while its run waits for a person's answer is
    /// kept; negative: the provider's default; zero: removed at once (the
    /// answer then starts a fresh box from the pushed branch).
    #[serde(default = "minus_one")]
    pub pause_ttl_seconds: f64,
    /// Which of the company's MCP servers the seat's coding agent gets in
    /// its box, with the seat's `mcp_env` credentials.
    #[serde(default)]
    pub mcp: SandboxMcp,
    /// Environment of the sandbox. Crewlet: set as given (`${VAR}`
    /// resolved) in every box of the seat; a model key or base URL put here
    /// is the seat's own and wins over `model_key` for its vendor.
    #[serde(default)]
    pub env: IndexMap<String, String>,
    /// Crewlet: how the seat's coding agent reaches its model: `proxy`
    /// (through the engine's model proxy with a per-run token; the real key
    /// stays outside the box), `raw` (the seat's real model key and base
    /// URL are put in the box, where anything the agent runs can read
    /// them), `none` (no model variables); empty: the provider's
    /// `model_key`.
    #[serde(default)]
    pub model_key: ModelKeyChoice,
    /// Steps run when the seat's sandbox starts.
    #[serde(default)]
    pub setup: Vec<SetupStep>,
}

fn minus_one() -> f64 {
    -1.0
}

/// A seat's coding agent, or the provider's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CodingAgentChoice {
    #[default]
    #[serde(rename = "")]
    Default,
    #[serde(rename = "claude-code")]
    ClaudeCode,
    #[serde(rename = "opencode")]
    Opencode,
    /// Crewlet: the provider's `command`.
    #[serde(rename = "command")]
    Command,
}

/// A seat's model access, or the provider's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ModelKeyChoice {
    #[default]
    #[serde(rename = "")]
    Default,
    /// Through the engine's model proxy, with a per-run token.
    #[serde(rename = "proxy")]
    Proxy,
    /// The seat's real key and base URL enter the box.
    #[serde(rename = "raw")]
    Raw,
    /// No model variables enter the box.
    #[serde(rename = "none")]
    None,
}

/// How coding agents reach their model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelKey {
    /// Through the engine's model proxy with a per-run token, where the box
    /// can reach it (a local box on the host network); elsewhere no model
    /// variables enter the box.
    #[default]
    Proxy,
    /// The seat's real key and base URL enter the box (an explicit opt-in:
    /// anything the coding agent runs can read and send them).
    Raw,
    /// No model variables enter the box.
    None,
}

/// Crewlet: the engine's model proxy, the coding agents' way to their
/// model without the real key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelProxy {
    /// Loopback address the proxy listens on.
    #[serde(default = "default_proxy_bind")]
    pub bind: String,
    /// Port the proxy listens on; 0: a free one chosen at start.
    #[serde(default)]
    pub port: u16,
}

impl Default for ModelProxy {
    fn default() -> Self {
        Self {
            bind: default_proxy_bind(),
            port: 0,
        }
    }
}

fn default_proxy_bind() -> String {
    "127.0.0.1".into()
}

/// Which of the seat's MCP servers the sandbox gets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxMcp {
    /// Names of the seat's MCP servers the sandbox gets.
    #[serde(default)]
    pub servers: Vec<String>,
}

/// One step run when a sandbox is set up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetupStep {
    /// Name of the step.
    pub name: String,
    /// Files to write, path to content.
    #[serde(default)]
    pub files: IndexMap<String, String>,
    /// Shell commands to run, in order.
    #[serde(default)]
    pub commands: Vec<String>,
    /// Environment of the commands.
    #[serde(default)]
    pub env: IndexMap<String, String>,
    /// What the step prepares, for the coding agent.
    #[serde(default)]
    pub brief: String,
    /// Time allowed for the step, in seconds.
    #[serde(default = "default_step_timeout")]
    #[schemars(range(min = 0.001))]
    pub timeout_seconds: f64,
}

fn default_step_timeout() -> f64 {
    600.0
}

/// Which nodes of a fleet may run a seat.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// Id of the node that runs the seat.
    #[serde(default)]
    pub node: String,
    /// Labels a node needs to run the seat.
    #[serde(default)]
    pub labels: IndexMap<String, String>,
}

/// The company's code-sandbox provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxProvider {
    /// Backend: `e2b`, `local`, `fake` or `none`.
    #[serde(rename = "type", default)]
    pub kind: SandboxKind,
    /// Settings of the `local` backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalSandbox>,
    /// API key of the hosted backend.
    #[serde(default)]
    pub api_key: String,
    /// Domain of a self-hosted backend.
    #[serde(default)]
    pub domain: String,
    /// Sandbox template (image) name.
    #[serde(default)]
    pub template: String,
    /// Coding agent of seats that name none.
    #[serde(default)]
    pub default_coding_agent: CodingAgent,
    /// How long a box outlives an engine that stopped looking at it, in
    /// seconds (a keepalive, never a cap on a run).
    #[serde(default = "default_sandbox_timeout")]
    #[schemars(range(min = 0.001))]
    pub default_timeout_seconds: f64,
    /// How long a box paused while its run waits for a person's answer is
    /// kept, in seconds (zero: removed at once).
    #[serde(default = "default_pause_ttl")]
    #[schemars(range(min = 0.0))]
    pub default_pause_ttl_seconds: f64,
    /// Steps run in every new sandbox.
    #[serde(default)]
    pub setup: Vec<SetupStep>,
    /// Crewlet: the command line of the `command` coding agent; the brief
    /// is added as its last argument (and is in `~/.crewlet/brief.md`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Crewlet: seconds between two looks at a running coding agent.
    #[serde(default = "default_poll")]
    #[schemars(range(min = 0.01))]
    pub poll_seconds: f64,
    /// Crewlet: how coding agents of seats that name none reach their
    /// model (see `role.sandbox.model_key`).
    #[serde(default)]
    pub model_key: ModelKey,
    /// Crewlet: where the engine's model proxy listens.
    #[serde(default)]
    pub model_proxy: ModelProxy,
}

fn default_poll() -> f64 {
    2.0
}

fn default_sandbox_timeout() -> f64 {
    900.0
}

fn default_pause_ttl() -> f64 {
    1800.0
}

/// Sandbox backends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxKind {
    #[default]
    E2b,
    Local,
    Fake,
    None,
}

/// Coding agents a sandbox can run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CodingAgent {
    #[default]
    ClaudeCode,
    Opencode,
    /// Crewlet: any program, named by `command`.
    Command,
}

/// A sandbox on this machine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalSandbox {
    /// `direct` (a process) or `container`.
    #[serde(default)]
    pub containment: Containment,
    /// Container image.
    #[schemars(extend("x-crewlet-inert" = "container containment is not built; use `containment: bubblewrap`"))]
    #[serde(default)]
    pub image: String,
    /// Container runtime: `auto`, `docker` or `podman`.
    #[schemars(extend("x-crewlet-inert" = "container containment is not built; use `containment: bubblewrap`"))]
    #[serde(default)]
    pub runtime: ContainerRuntime,
    /// Directory for sandbox state.
    #[serde(default)]
    pub state_dir: String,
    /// Container network.
    #[serde(default)]
    pub network: String,
    /// Extra arguments for the container run.
    #[schemars(extend("x-crewlet-inert" = "container containment is not built; use `containment: bubblewrap`"))]
    #[serde(default)]
    pub run_args: Vec<String>,
    /// Crewlet (`bubblewrap`): memory of one box, in MiB.
    #[serde(default = "default_memory_mb")]
    #[schemars(range(min = 8))]
    pub memory_mb: u64,
    /// Crewlet (`bubblewrap`): processes one box may run at once.
    #[serde(default = "default_pids")]
    #[schemars(range(min = 1))]
    pub pids: u32,
    /// Crewlet (`bubblewrap`): CPU share of one box (1.0 is one core).
    #[serde(default = "default_cpus")]
    #[schemars(range(min = 0.01))]
    pub cpus: f64,
    /// Crewlet (`bubblewrap`): host paths mounted into every box,
    /// `host:box` (read-only) or `host:box:rw`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<String>,
    /// Crewlet (`bubblewrap`): on a cgroup v2 host, the delegated cgroup
    /// directory boxes are made under (absolute, for example
    /// `/sys/fs/cgroup/system.slice/crewlet.service`). Empty: the
    /// `CREWLET_SANDBOX_CGROUP_ROOT` environment variable, else the engine's
    /// own cgroup from `/proc/self/cgroup`. Ignored on a cgroup v1 host.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cgroup_root: String,
    /// Crewlet (`bubblewrap`): where no writable cgroup exists, enforce the
    /// limits with rlimits instead (address space from `memory_mb`,
    /// processes from `pids`, a CPU-time cap of `rlimit_cpu_seconds`) and
    /// pause boxes with signals. These limits are weaker (docs/sandbox.md
    /// says how), so this is off by default: without it such a host gives no
    /// seat `run_sandbox`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_rlimit_limits: bool,
    /// Crewlet (`bubblewrap`, with `allow_rlimit_limits` on a host without
    /// writable cgroups): CPU seconds each process of a box may use in all
    /// (an rlimit is a total per process, not a share of the CPU).
    #[serde(
        default = "default_rlimit_cpu_seconds",
        skip_serializing_if = "is_default_rlimit_cpu_seconds"
    )]
    #[schemars(range(min = 1))]
    pub rlimit_cpu_seconds: u64,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn default_rlimit_cpu_seconds() -> u64 {
    3600
}

fn is_default_rlimit_cpu_seconds(n: &u64) -> bool {
    *n == default_rlimit_cpu_seconds()
}

fn default_memory_mb() -> u64 {
    2048
}

fn default_pids() -> u32 {
    256
}

fn default_cpus() -> f64 {
    1.0
}

/// How a local sandbox is contained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Containment {
    #[default]
    Direct,
    Container,
    /// Crewlet: bubblewrap namespaces and cgroup limits on this host.
    Bubblewrap,
}

/// Container runtimes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContainerRuntime {
    #[default]
    Auto,
    Docker,
    Podman,
}

/// The knowledge system's read scope.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Knowledge {
    /// Confluence spaces the knowledge search may read; empty: every space the account can read.
    #[serde(default)]
    pub confluence_spaces: Vec<String>,
    /// Plane projects the knowledge search may read; empty: every project the account can read.
    #[serde(default)]
    pub plane_projects: Vec<String>,
}

/// How long a model key rests after it is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Cooldowns {
    /// Rest after a rate-limit refusal, in seconds.
    #[serde(default = "default_rate_limit_rest")]
    pub rate_limit_seconds: u32,
    /// Rest after an authentication refusal, in seconds.
    #[serde(default = "default_auth_rest")]
    pub auth_seconds: u32,
}

fn default_rate_limit_rest() -> u32 {
    3600
}

fn default_auth_rest() -> u32 {
    300
}
