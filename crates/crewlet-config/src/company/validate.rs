//! Checks of meaning on a typed [`Company`]: references between sections,
//! human seats, schedules, providers and MCP servers. The org chart's own
//! rules live in `organization.rs`.

use std::collections::HashMap;
use std::path::Path;

use super::schedule::{check_cron, check_timezone};
use super::{
    Company, EmbeddingsKind, LlmChoice, LlmKind, LlmSpec, McpScope, McpTransport, Role, Schedule,
    ScheduleTarget, SeatKind, Unit,
};
use crate::check::{self, Finding};
use crate::error::{ConfigError, Problem};
use crate::organization::{Organization, resolve};
use crate::schema::Tier;
use crate::text::decode_utf8;
use crate::yaml::YamlPath;

/// Validates a company file's text and resolves its org chart. Every problem
/// in the file is returned, each with its YAML path, line and column.
pub fn check_company(source: &str, text: &str) -> Result<(Company, Organization), Vec<Problem>> {
    let parsed = check::structural::<Company>(source, text, Tier::Company);
    let mut problems = parsed.problems;
    let Some(company) = parsed.value else {
        return Err(problems);
    };
    let (org, findings) = company_findings(&company);
    problems.extend(check::locate(source, parsed.tree.as_ref(), findings));
    check::sort(&mut problems);
    if problems.is_empty() {
        Ok((company, org))
    } else {
        Err(problems)
    }
}

fn company_findings(company: &Company) -> (Organization, Vec<Finding>) {
    let (org, mut findings) = resolve(company);
    findings.extend(meaning(company, &org));
    (org, findings)
}

impl Company {
    /// Parses and fully validates a company document (YAML, or JSON, which
    /// is YAML too). `source` names the input in errors. Reads no environment:
    /// `${VAR}` references stay as written.
    pub fn from_yaml(source: &str, text: &str) -> Result<Company, ConfigError> {
        check_company(source, text)
            .map(|(company, _)| company)
            .map_err(|problems| ConfigError::Invalid {
                file: source.to_owned(),
                problems,
            })
    }

    /// Reads and validates a company file (text that is not UTF-8 is a
    /// located problem, see [`decode_utf8`](crate::decode_utf8)).
    pub fn load(path: &Path) -> Result<Company, ConfigError> {
        let bytes = std::fs::read(path).map_err(|e| ConfigError::Read {
            path: path.to_owned(),
            source: e,
        })?;
        let source = path.display().to_string();
        let text = decode_utf8(&source, &bytes).map_err(|problem| ConfigError::Invalid {
            file: source.clone(),
            problems: vec![problem],
        })?;
        Self::from_yaml(&source, text)
    }

    /// Validates a company built in code or read from JSON (problems carry
    /// paths but no lines).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (_, findings) = company_findings(self);
        let problems = check::locate("company", None, findings);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid {
                file: "company".into(),
                problems,
            })
        }
    }

    /// The resolved org chart.
    pub fn organization(&self) -> Organization {
        Organization::new(self)
    }
}

fn meaning(company: &Company, org: &Organization) -> Vec<Finding> {
    let mut out = Vec::new();
    providers(company, org, &mut out);
    mcp_servers(company, &mut out);
    // Once, not once per seat: a big company with many providers stays linear.
    let defined = Names {
        llm: company.providers.llm.keys().map(String::as_str).collect(),
        mcp: company.mcp_servers.keys().map(String::as_str).collect(),
    };
    for seat in org.seats() {
        let at = YamlPath::parse(&seat.yaml_path).unwrap_or_default();
        role(company, &defined, &seat.role, &at, &mut out);
    }
    let configs = units_preorder(&company.units);
    for (unit, config) in org.units().iter().zip(configs) {
        let at = YamlPath::parse(&unit.yaml_path).unwrap_or_default();
        let lead = unit.lead.as_deref().and_then(|h| org.seat(h));
        let has_agents = unit
            .seats
            .iter()
            .filter_map(|h| org.seat(h))
            .any(|s| s.is_agent());
        schedules(&config.schedules, &at, &mut out, |s, sat, out| {
            match s.target {
            ScheduleTarget::Lead => match lead {
                // A `lead` that names nobody is reported on its own.
                None if config.lead.is_some() => {}
                None => out.push(Finding::new(
                    sat.key("target"),
                    format!(
                        "schedule `{}` targets the lead, but unit `{}` has no lead (set `lead` here or on a parent unit)",
                        s.name, unit.name
                    ),
                )),
                Some(l) if !l.is_agent() => out.push(Finding::new(
                    sat.key("target"),
                    format!(
                        "schedule `{}` targets the lead of unit `{}`, human seat `{}`, who never runs; use `target: each` or an agent lead",
                        s.name, unit.name, l.handle
                    ),
                )),
                Some(_) => {}
            },
            ScheduleTarget::Each if !has_agents => out.push(Finding::new(
                sat.key("target"),
                format!(
                    "schedule `{}` targets each agent seat of unit `{}`, which has none",
                    s.name, unit.name
                ),
            )),
            ScheduleTarget::Each => {}
        }
        });
    }
    out
}

/// Units parents first, in file order: the order of [`Organization::units`].
fn units_preorder(list: &[Unit]) -> Vec<&Unit> {
    let mut out = Vec::new();
    for unit in list {
        out.push(unit);
        out.extend(units_preorder(&unit.children));
    }
    out
}

fn providers(company: &Company, org: &Organization, out: &mut Vec<Finding>) {
    let llm_at = YamlPath::root().key("providers").key("llm");
    if company.providers.llm.is_empty() {
        let agents = org.agents().count();
        if agents > 0 {
            out.push(Finding::new(
                llm_at.clone(),
                format!(
                    "no LLM provider is configured but {agents} agent seat{} need{} one; add an entry under providers.llm",
                    if agents == 1 { "" } else { "s" },
                    if agents == 1 { "s" } else { "" }
                ),
            ));
        }
    }
    for (name, p) in &company.providers.llm {
        let at = llm_at.key(name);
        if p.kind == LlmKind::OpenaiCompatible && p.base_url.is_none() {
            out.push(Finding::new(
                at.key("type"),
                format!("provider `{name}` is openai-compatible and needs `base_url`"),
            ));
        }
        if p.kind != LlmKind::OpenaiCompatible && p.base_url.is_none() && p.api_keys.is_empty() {
            out.push(Finding::new(
                at.key("type"),
                format!(
                    "provider `{name}` ({}) needs at least one entry in `api_keys`, e.g. `${{{}_API_KEY}}`",
                    p.kind,
                    p.kind.to_string().to_uppercase()
                ),
            ));
        }
        check_url(p.base_url.as_deref(), &at.key("base_url"), out);
        for (i, key) in p.api_keys.iter().enumerate() {
            if key.trim().is_empty() {
                out.push(Finding::new(
                    at.key("api_keys").index(i),
                    "an API key must not be empty",
                ));
            }
        }
    }
    if let Some(e) = &company.providers.embeddings {
        let at = YamlPath::root().key("providers").key("embeddings");
        if e.kind == EmbeddingsKind::OpenaiCompatible && e.base_url.is_none() {
            out.push(Finding::new(
                at.key("type"),
                "openai-compatible embeddings need `base_url`",
            ));
        }
        check_url(e.base_url.as_deref(), &at.key("base_url"), out);
    }
}

fn check_url(url: Option<&str>, at: &YamlPath, out: &mut Vec<Finding>) {
    if let Some(url) = url
        && !url.contains("${")
        && !url.starts_with("http://")
        && !url.starts_with("https://")
    {
        out.push(Finding::new(
            at.clone(),
            format!("`{url}` must start with http:// or https://"),
        ));
    }
}

fn mcp_servers(company: &Company, out: &mut Vec<Finding>) {
    let root = YamlPath::root().key("mcp_servers");
    for (name, s) in &company.mcp_servers {
        let at = root.key(name);
        match s.transport {
            McpTransport::Stdio => {
                if s.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
                    out.push(Finding::new(
                        at.clone(),
                        format!("stdio MCP server `{name}` needs `command`"),
                    ));
                }
                if s.url.is_some() {
                    out.push(Finding::new(
                        at.key("url"),
                        format!("`url` is for http servers; `{name}` uses stdio (set `transport: http`?)"),
                    ));
                }
            }
            McpTransport::Http => {
                match s.url.as_deref() {
                    None => out.push(Finding::new(
                        at.clone(),
                        format!("http MCP server `{name}` needs `url`"),
                    )),
                    url => check_url(url, &at.key("url"), out),
                }
                if s.command.is_some() {
                    out.push(Finding::new(
                        at.key("command"),
                        format!("`command` is for stdio servers; `{name}` uses http"),
                    ));
                }
            }
        }
    }
}

/// The names sections define, for messages that list them.
struct Names<'c> {
    llm: Vec<&'c str>,
    mcp: Vec<&'c str>,
}

fn role(company: &Company, defined: &Names, role: &Role, at: &YamlPath, out: &mut Vec<Finding>) {
    let llm_names = &defined.llm;
    let known = |name: &str| company.providers.llm.contains_key(name);
    let check_choice = |choice: &LlmChoice, cat: YamlPath, out: &mut Vec<Finding>| match choice {
        LlmChoice::One(name) if known(name) => {}
        LlmChoice::One(name) => llm_ref(name, llm_names, cat, out),
        LlmChoice::Chain(names) if names.is_empty() => out.push(Finding::new(
            cat,
            "a fallback chain needs at least one provider",
        )),
        LlmChoice::Chain(names) => {
            for (i, name) in names.iter().enumerate() {
                if !known(name) {
                    llm_ref(name, llm_names, cat.index(i), out);
                }
            }
        }
    };
    match &role.llm {
        Some(LlmSpec::One(name)) => check_choice(&LlmChoice::One(name.clone()), at.key("llm"), out),
        Some(LlmSpec::Chain(names)) => {
            check_choice(&LlmChoice::Chain(names.clone()), at.key("llm"), out)
        }
        Some(LlmSpec::Phases(phases)) => {
            for (key, choice) in phases.entries() {
                check_choice(choice, at.key("llm").key(key), out);
            }
        }
        None => {}
    }
    for (key, choice) in [
        ("llm_plan", &role.llm_plan),
        ("llm_execute", &role.llm_execute),
        ("llm_review", &role.llm_review),
        ("llm_auxiliary", &role.llm_auxiliary),
    ] {
        if let Some(choice) = choice {
            check_choice(choice, at.key(key), out);
        }
    }

    if role.kind == SeatKind::Human {
        if !role.contact.as_ref().is_some_and(|c| c.has_identity()) {
            let cat = if role.contact.is_some() {
                at.key("contact")
            } else {
                at.clone()
            };
            out.push(Finding::new(
                cat,
                format!(
                    "human seat `{}` needs a `contact` with at least one identity (email, slack_user_id, github, gitlab, plane or jira)",
                    role.name
                ),
            ));
        }
        if !role.schedules.is_empty() {
            out.push(Finding::new(
                at.key("schedules"),
                format!(
                    "human seat `{}` never runs, so it cannot have schedules",
                    role.name
                ),
            ));
        }
    }

    for (i, server) in role.mcp_servers.iter().enumerate() {
        let sat = at.key("mcp_servers").index(i);
        match company.mcp_servers.get(server) {
            None => {
                out.push(Finding::new(
                    sat,
                    format!(
                        "MCP server `{server}` is not defined in mcp_servers{}",
                        defined_list(&defined.mcp)
                    ),
                ));
            }
            Some(s) if s.scope == McpScope::Shared => out.push(Finding::new(
                sat,
                format!(
                    "MCP server `{server}` is shared: every agent seat already has it; list only `per_role` servers here"
                ),
            )),
            Some(_) => {}
        }
    }

    schedules(&role.schedules, at, out, |_, _, _| {});
}

fn llm_ref(name: &str, defined: &[&str], at: YamlPath, out: &mut Vec<Finding>) {
    if !defined.contains(&name) {
        let mut message = format!(
            "LLM provider `{name}` is not defined in providers.llm{}",
            defined_list(defined)
        );
        if let Some(best) = crate::suggest::closest(name, defined) {
            message = format!("{message}; did you mean `{best}`?");
        }
        out.push(Finding::new(at, message));
    }
}

fn defined_list(names: &[&str]) -> String {
    if names.is_empty() {
        " (none are)".into()
    } else {
        format!(" (defined: {})", names.join(", "))
    }
}

fn schedules(
    list: &[Schedule],
    owner: &YamlPath,
    out: &mut Vec<Finding>,
    mut extra: impl FnMut(&Schedule, &YamlPath, &mut Vec<Finding>),
) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, s) in list.iter().enumerate() {
        let at = owner.key("schedules").index(i);
        if let Some(first) = seen.insert(&s.name, i) {
            out.push(Finding::new(
                at.key("name"),
                format!(
                    "schedule name `{}` is already used by schedules[{first}] here; names must be unique per unit or role",
                    s.name
                ),
            ));
        }
        if let Err(e) = check_cron(&s.cron) {
            out.push(Finding::new(at.key("cron"), e));
        }
        if let Err(e) = check_timezone(&s.timezone) {
            out.push(Finding::new(at.key("timezone"), e));
        }
        extra(s, &at, out);
    }
}
