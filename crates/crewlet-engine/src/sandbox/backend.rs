//! The sandbox backends a company can name: `local` (bubblewrap on this
//! host) and `e2b`.

use std::sync::Arc;

use crewlet_config::later::{CodingAgent, Containment, SandboxProvider};
use crewlet_sandbox::Sandbox;

use crate::engine::EnvLookup;

pub(super) async fn local(
    provider: &SandboxProvider,
    env: &EnvLookup,
) -> Result<Arc<dyn Sandbox>, String> {
    let local = provider
        .local
        .clone()
        .ok_or("`type: local` needs a `local:` block")?;
    if local.containment == Containment::Container {
        return Err(
            "`containment: container` needs a container engine; use `containment: bubblewrap`"
                .into(),
        );
    }
    let state_dir = if local.state_dir.is_empty() {
        env("CREWLET_SANDBOX_LOCAL_HOME")
            .or_else(|| env("HOME").map(|h| format!("{h}/.crewlet/sandboxes")))
            .ok_or("no `local.state_dir`, CREWLET_SANDBOX_LOCAL_HOME or HOME")?
    } else {
        local.state_dir.clone()
    };
    let mut opts = crewlet_sandbox::local::LocalOptions::new(state_dir);
    for m in &local.mounts {
        opts.mounts.push(
            m.parse()
                .map_err(|e: crewlet_sandbox::SandboxError| e.to_string())?,
        );
    }
    let sandbox = crewlet_sandbox::local::LocalSandbox::new(opts)
        .await
        .map_err(|e| e.to_string())?;
    // Boxes without their memory, process and CPU limits are not offered.
    if !sandbox.enforces_limits() {
        return Err(
            "this host cannot enforce the sandbox's limits (it needs writable cgroup v1 memory, pids and cpu controllers; cgroup v2 is not supported yet)"
                .into(),
        );
    }
    Ok(Arc::new(sandbox))
}

/// E2B (`type: e2b`): the hosted service, or a self-hosted one at `domain`.
/// Without a `template`, the coding agent's prebuilt one (`claude`,
/// `opencode`), else `base`.
pub(super) fn e2b(provider: &SandboxProvider, env: &EnvLookup) -> Result<Arc<dyn Sandbox>, String> {
    let key = crewlet_config::interpolate(&provider.api_key, |n| env(n))
        .map_err(|e| format!("`api_key`: {e}"))?;
    if key.trim().is_empty() {
        return Err("`api_key` is empty (set it, usually to `${E2B_API_KEY}`)".into());
    }
    crewlet_telemetry::register_secret(key.clone());
    let mut opts = crewlet_sandbox::e2b::E2bOptions::new(key);
    if !provider.domain.is_empty() {
        opts.domain = provider.domain.clone();
    }
    opts.template = if provider.template.is_empty() {
        match provider.default_coding_agent {
            CodingAgent::ClaudeCode => "claude".into(),
            CodingAgent::Opencode => "opencode".into(),
            CodingAgent::Command => opts.template,
        }
    } else {
        provider.template.clone()
    };
    let sandbox = crewlet_sandbox::e2b::E2bSandbox::new(opts).map_err(|e| e.to_string())?;
    Ok(Arc::new(sandbox))
}
