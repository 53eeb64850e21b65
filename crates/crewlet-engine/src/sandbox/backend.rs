//! The sandbox backends a company can name: `local` (bubblewrap on this
//! host) and `e2b`.

use std::sync::Arc;

use crewlet_config::later::{CodingAgent, Containment, LocalSandbox, SandboxProvider};
use crewlet_sandbox::Sandbox;
use crewlet_sandbox::local::{Enforcement, LimitPolicy};
use tracing::{info, warn};

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
    let root = if local.cgroup_root.is_empty() {
        env("CREWLET_SANDBOX_CGROUP_ROOT").filter(|r| !r.is_empty())
    } else {
        Some(local.cgroup_root.clone())
    };
    opts.cgroup_root = root.map(std::path::PathBuf::from);
    opts.limits = limit_policy(&local);
    opts.rlimit_cpu_seconds = local.rlimit_cpu_seconds.max(1);
    let sandbox = crewlet_sandbox::local::LocalSandbox::new(opts)
        .await
        .map_err(|e| e.to_string())?;
    let enforcement = sandbox.enforcement();
    // Boxes without their memory, process and CPU limits are not offered.
    if !sandbox.enforces_limits() {
        return Err(format!(
            "this host cannot enforce the sandbox's limits: {enforcement}; delegate a cgroup (docs/sandbox.md), or set `providers.sandbox.local.allow_rlimit_limits: true` to accept weaker rlimit-based limits"
        ));
    }
    if matches!(enforcement, Enforcement::Rlimits { .. }) {
        warn!(limits = %enforcement, "providers.sandbox.local: boxes are limited by rlimits only (allow_rlimit_limits)");
    } else {
        info!(limits = %enforcement, "providers.sandbox.local: box limits enforced");
    }
    Ok(Arc::new(sandbox))
}

/// Cgroups only, unless the operator accepted rlimits where no cgroup is
/// writable.
fn limit_policy(local: &LocalSandbox) -> LimitPolicy {
    if local.allow_rlimit_limits {
        LimitPolicy::CgroupsElseRlimits
    } else {
        LimitPolicy::Cgroups
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rlimits_are_used_only_with_the_opt_in() {
        let mut local = LocalSandbox::default();
        assert_eq!(limit_policy(&local), LimitPolicy::Cgroups);
        local.allow_rlimit_limits = true;
        assert_eq!(limit_policy(&local), LimitPolicy::CgroupsElseRlimits);
    }
}
