//! What `crewlet validate` says about the code sandbox: a provider the
//! engine cannot start, a coding agent with no command line, mounts it
//! cannot read, and seats that enable a sandbox no provider serves.

use super::Company;
use super::later::{CodingAgent, CodingAgentChoice, Containment, SandboxKind};
use crate::check::Finding;
use crate::organization::Organization;
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
}
