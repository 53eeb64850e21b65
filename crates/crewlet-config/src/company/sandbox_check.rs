//! What `crewlet validate` says about the code sandbox: a provider the
//! engine cannot start, a coding agent with no command line, mounts it
//! cannot read, and seats that enable a sandbox no provider serves.

use super::Company;
use super::later::{
    CodingAgent, CodingAgentChoice, Containment, ModelKey, ModelKeyChoice, SandboxKind,
    SandboxProvider,
};
use crate::check::Finding;
use crate::organization::{Organization, Seat};
use crate::yaml::YamlPath;

pub(crate) fn check(company: &Company, org: &Organization, out: &mut Vec<Finding>) {
    let at = YamlPath::root().key("providers").key("sandbox");
    let provider = company.providers.sandbox.as_ref();
    let wants: Vec<_> = org
        .agents()
        .filter(|s| s.role.sandbox.as_ref().is_some_and(|r| r.enabled))
        .collect();
    let Some(p) = provider.filter(|p| p.kind != SandboxKind::None) else {
        for seat in wants {
            let path = YamlPath::parse(&seat.yaml_path).unwrap_or_default();
            out.push(Finding::warning(
                path.key("sandbox").key("enabled"),
                format!(
                    "seat `{}` enables a code sandbox but `providers.sandbox` names no backend; it gets no run_sandbox",
                    seat.handle
                ),
            ));
        }
        return;
    };
    match p.kind {
        SandboxKind::Fake => out.push(Finding::warning(
            at.key("type"),
            "`type: fake` is the original's in-process test double; Crewlet gives no seat run_sandbox with it",
        )),
        SandboxKind::E2b if p.api_key.trim().is_empty() => out.push(Finding::new(
            at.key("api_key"),
            "`type: e2b` needs `api_key` (usually `${E2B_API_KEY}`)",
        )),
        SandboxKind::E2b => {}
        SandboxKind::Local => match &p.local {
            None => out.push(Finding::new(
                at.key("type"),
                "`type: local` needs a `local:` block (with `containment: bubblewrap`)",
            )),
            Some(local) => {
                if local.containment == Containment::Container {
                    out.push(Finding::warning(
                        at.key("local").key("containment"),
                        "`containment: container` needs a container engine Crewlet does not drive; use `bubblewrap` (no seat gets run_sandbox)",
                    ));
                }
                for (i, m) in local.mounts.iter().enumerate() {
                    if !valid_mount(m) {
                        out.push(Finding::new(
                            at.key("local").key("mounts").index(i),
                            format!("mount `{m}`: expected `host:box`, `host:box:ro` or `host:box:rw` with absolute paths"),
                        ));
                    }
                }
                if !(local.cpus.is_finite() && local.cpus > 0.0) {
                    out.push(Finding::new(
                        at.key("local").key("cpus"),
                        "cpus must be above 0",
                    ));
                }
                let root = std::path::Path::new(&local.cgroup_root);
                if !local.cgroup_root.is_empty()
                    && (!root.is_absolute()
                        || root
                            .components()
                            .any(|c| matches!(c, std::path::Component::ParentDir)))
                {
                    out.push(Finding::new(
                        at.key("local").key("cgroup_root"),
                        format!(
                            "cgroup_root `{}` must be an absolute path without `..` (a delegated cgroup v2 directory, e.g. under /sys/fs/cgroup)",
                            local.cgroup_root
                        ),
                    ));
                }
                if local.allow_rlimit_limits && local.rlimit_cpu_seconds == 0 {
                    out.push(Finding::new(
                        at.key("local").key("rlimit_cpu_seconds"),
                        "rlimit_cpu_seconds must be at least 1 (CPU seconds per process under rlimits)",
                    ));
                }
            }
        },
        SandboxKind::None => {}
    }
    let command_wanted = p.default_coding_agent == CodingAgent::Command
        || wants.iter().any(|s| {
            s.role
                .sandbox
                .as_ref()
                .is_some_and(|r| r.coding_agent == CodingAgentChoice::Command)
        });
    if command_wanted && p.command.is_empty() {
        out.push(Finding::new(
            at.key("command"),
            "the `command` coding agent needs `providers.sandbox.command` (its command line)",
        ));
    }
    model_key(p, &wants, &at, out);
    for seat in wants {
        let Some(role) = seat.role.sandbox.as_ref() else {
            continue;
        };
        let path = YamlPath::parse(&seat.yaml_path).unwrap_or_default();
        for (i, name) in role.mcp.servers.iter().enumerate() {
            if !company.mcp_servers.iter().any(|s| &s.name == name) {
                out.push(Finding::new(
                    path.key("sandbox").key("mcp").key("servers").index(i),
                    format!("MCP server `{name}` is not defined in mcp_servers"),
                ));
            }
        }
    }
}

/// The model proxy's address, and seats whose boxes cannot reach it and
/// so get no model key.
fn model_key(
    p: &SandboxProvider,
    wants: &[&std::sync::Arc<Seat>],
    at: &YamlPath,
    out: &mut Vec<Finding>,
) {
    let bind = &p.model_proxy.bind;
    if !bind
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
    {
        out.push(Finding::new(
            at.key("model_proxy").key("bind"),
            format!("`{bind}` is not a loopback address (e.g. 127.0.0.1): the model proxy listens on loopback only"),
        ));
    }
    let unreachable = match p.kind {
        SandboxKind::E2b => {
            Some("E2B boxes run remotely and cannot reach the engine's model proxy")
        }
        SandboxKind::Local if p.local.as_ref().is_some_and(|l| l.network == "none") => {
            Some("boxes with `local.network: none` reach no network, the model proxy included")
        }
        _ => None,
    };
    let Some(why) = unreachable else {
        return;
    };
    for seat in wants {
        let Some(role) = seat.role.sandbox.as_ref() else {
            continue;
        };
        let mode = match role.model_key {
            ModelKeyChoice::Default => p.model_key,
            ModelKeyChoice::Proxy => ModelKey::Proxy,
            ModelKeyChoice::Raw => ModelKey::Raw,
            ModelKeyChoice::None => ModelKey::None,
        };
        let own = [
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "CLAUDE_CODE_OAUTH_TOKEN",
        ]
        .iter()
        .any(|k| role.env.contains_key(*k));
        if mode == ModelKey::Proxy && !own {
            let path = YamlPath::parse(&seat.yaml_path).unwrap_or_default();
            out.push(Finding::warning(
                path.key("sandbox"),
                format!(
                    "{why}: seat `{}`'s coding agent gets no model key; set `model_key: raw` to put the seat's real key in its boxes, or give credentials in `sandbox.env`",
                    seat.handle
                ),
            ));
        }
    }
}

fn valid_mount(m: &str) -> bool {
    let parts: Vec<&str> = m.split(':').collect();
    let (host, target, mode) = match parts.as_slice() {
        [h, t] => (*h, *t, "ro"),
        [h, t, mode] => (*h, *t, *mode),
        _ => return false,
    };
    host.starts_with('/') && target.starts_with('/') && target != "/" && matches!(mode, "ro" | "rw")
}

#[cfg(test)]
mod tests {

    /// Every problem and warning of a company file, as `path: message`.
    fn findings(yaml: &str) -> Vec<String> {
        let report = crate::check_company_report("t", yaml);
        let errors = report.result.err().unwrap_or_default();
        errors
            .iter()
            .chain(report.warnings.iter())
            .filter(|p| p.path.contains("sandbox"))
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect()
    }

    #[test]
    fn the_sandbox_settings_that_cannot_work_are_named_by_path() {
        let none =
            findings("name: C\nroles:\n  - {name: E, handle: e, sandbox: {enabled: true}}\n");
        assert!(
            none.iter()
                .any(|f| f.starts_with("roles[0].sandbox.enabled")),
            "{none:?}"
        );
        let bad = findings(
            "name: C\nproviders:\n  sandbox:\n    type: local\n    default_coding_agent: command\n    local:\n      containment: bubblewrap\n      mounts: [\"rel:/x\"]\nroles:\n  - {name: E, handle: e, sandbox: {enabled: true}}\n",
        );
        assert!(
            bad.iter()
                .any(|f| f.starts_with("providers.sandbox.command")),
            "{bad:?}"
        );
        let mcp = findings(
            "name: C\nproviders:\n  sandbox:\n    type: local\n    local: {containment: bubblewrap}\nroles:\n  - {name: E, handle: e, sandbox: {enabled: true, mcp: {servers: [nope]}}}\n",
        );
        assert!(
            mcp.iter()
                .any(|f| f.starts_with("roles[0].sandbox.mcp.servers[0]") && f.contains("`nope`")),
            "{mcp:?}"
        );
        assert!(
            bad.iter()
                .any(|f| f.starts_with("providers.sandbox.local.mounts[0]")),
            "{bad:?}"
        );
        let no_local = findings(
            "name: C\nproviders:\n  sandbox: {type: local}\nroles:\n  - {name: E, handle: e}\n",
        );
        assert!(
            no_local
                .iter()
                .any(|f| f.contains("needs a `local:` block")),
            "{no_local:?}"
        );
        let good = findings(
            "name: C\nproviders:\n  sandbox:\n    type: local\n    default_coding_agent: command\n    command: [/opt/a]\n    local: {containment: bubblewrap, mounts: [\"/opt/a:/opt/a\", \"/srv/r:/srv/r:rw\"]}\nroles:\n  - {name: E, handle: e, sandbox: {enabled: true}}\n",
        );
        assert!(good.is_empty(), "{good:?}");
    }

    #[test]
    fn the_cgroup_root_and_the_rlimit_opt_in_are_checked() {
        let bad = findings(
            "name: C\nproviders:\n  sandbox:\n    type: local\n    default_coding_agent: command\n    command: [/opt/a]\n    local:\n      containment: bubblewrap\n      cgroup_root: sys/fs/cgroup/crewlet\n      allow_rlimit_limits: true\n      rlimit_cpu_seconds: 0\nroles:\n  - {name: E, handle: e, sandbox: {enabled: true}}\n",
        );
        assert!(
            bad.iter()
                .any(|f| f.starts_with("providers.sandbox.local.cgroup_root")
                    && f.contains("absolute")),
            "{bad:?}"
        );
        assert!(
            bad.iter()
                .any(|f| f.starts_with("providers.sandbox.local.rlimit_cpu_seconds")),
            "{bad:?}"
        );
        let dotdot = findings(
            "name: C\nproviders:\n  sandbox:\n    type: local\n    default_coding_agent: command\n    command: [/opt/a]\n    local: {containment: bubblewrap, cgroup_root: /sys/fs/cgroup/../etc}\nroles:\n  - {name: E, handle: e, sandbox: {enabled: true}}\n",
        );
        assert!(
            dotdot
                .iter()
                .any(|f| f.starts_with("providers.sandbox.local.cgroup_root")),
            "{dotdot:?}"
        );
        let good = findings(
            "name: C\nproviders:\n  sandbox:\n    type: local\n    default_coding_agent: command\n    command: [/opt/a]\n    local:\n      containment: bubblewrap\n      cgroup_root: /sys/fs/cgroup/system.slice/crewlet.service\n      allow_rlimit_limits: true\n      rlimit_cpu_seconds: 600\nroles:\n  - {name: E, handle: e, sandbox: {enabled: true}}\n",
        );
        assert!(good.is_empty(), "{good:?}");
    }

    #[test]
    fn a_box_that_cannot_reach_the_model_proxy_and_a_public_proxy_address_are_named() {
        let e2b = findings(
            "name: C\nproviders:\n  sandbox: {type: e2b, api_key: k}\nroles:\n  - {name: E, handle: e, sandbox: {enabled: true}}\n  - {name: F, handle: f, sandbox: {enabled: true, model_key: raw}}\n  - {name: G, handle: g, sandbox: {enabled: true, env: {CLAUDE_CODE_OAUTH_TOKEN: t}}}\n",
        );
        assert_eq!(e2b.len(), 1, "{e2b:?}");
        assert!(
            e2b[0].starts_with("roles[0].sandbox: E2B") && e2b[0].contains("model_key: raw"),
            "{e2b:?}"
        );
        let offline = findings(
            "name: C\nproviders:\n  sandbox:\n    type: local\n    model_proxy: {bind: 0.0.0.0}\n    local: {containment: bubblewrap, network: none}\nroles:\n  - {name: E, handle: e, sandbox: {enabled: true}}\n",
        );
        assert!(
            offline
                .iter()
                .any(|f| f.starts_with("providers.sandbox.model_proxy.bind")
                    && f.contains("loopback")),
            "{offline:?}"
        );
        assert!(
            offline
                .iter()
                .any(|f| f.starts_with("roles[0].sandbox: boxes with `local.network: none`")),
            "{offline:?}"
        );
        let bad_value = crate::check_company_report(
            "t",
            "name: C\nproviders:\n  sandbox: {type: local, local: {containment: bubblewrap}}\nroles:\n  - {name: E, handle: e, sandbox: {enabled: true, model_key: yes}}\n",
        );
        let errors = bad_value.result.err().unwrap_or_default();
        assert!(
            errors.iter().any(|p| p.path.contains("model_key")),
            "{errors:?}"
        );
    }
}
