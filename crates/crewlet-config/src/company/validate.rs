//! Checks of meaning on a typed [`Company`]: references between sections,
//! human seats, schedules, providers and MCP servers. The org chart's own
//! rules live in `organization.rs`.

use std::collections::HashMap;
use std::path::Path;

use super::cli_agent::{CliAgent, CliAgentKind, PROFILE_FIELDS};
use super::llm::LOCAL_EMBEDDING_DIMENSIONS;
use super::schedule::{check_cron, check_timezone};
use super::{
    Company, EmbeddingsKind, EmbeddingsProvider, LlmChoice, LlmKind, LlmSpec, McpTransport, Role,
    Schedule, ScheduleTarget, SeatKind, Unit,
};
use crate::check::{self, Finding};
use crate::error::{ConfigError, Problem};
use crate::inert;
use crate::interpolate::is_whole_reference;
use crate::organization::{Organization, resolve};
use crate::schema::Tier;
use crate::text::decode_utf8;
use crate::yaml::YamlPath;

/// Validates a company file's text and resolves its org chart. Every problem
/// in the file is returned, each with its YAML path, line and column.
pub fn check_company(source: &str, text: &str) -> Result<(Company, Organization), Vec<Problem>> {
    check_company_report(source, text).result
}

/// The outcome of checking a company file, with its warnings: keys that
/// have no effect yet and references that resolve to nothing. Warnings
/// never make a file invalid.
#[derive(Debug)]
pub struct CompanyReport {
    pub result: Result<(Company, Organization), Vec<Problem>>,
    pub warnings: Vec<Problem>,
}

/// As [`check_company`], with the warnings located in the file.
pub fn check_company_report(source: &str, text: &str) -> CompanyReport {
    check_company_parsed(source, crate::yaml::parse(text))
}

/// As [`check_company_report`] for text already read into a located tree.
pub(crate) fn check_company_parsed(source: &str, tree: crate::yaml::Parsed) -> CompanyReport {
    let parsed = check::structural_parsed::<Company>(source, tree, Tier::Company);
    let mut problems = parsed.problems;
    let Some(company) = parsed.value else {
        return CompanyReport {
            result: Err(problems),
            warnings: Vec::new(),
        };
    };
    let (org, findings) = company_findings(&company);
    let (warned, findings): (Vec<Finding>, Vec<Finding>) =
        findings.into_iter().partition(|f| f.warning);
    problems.extend(check::locate(source, parsed.tree.as_ref(), findings));
    check::sort(&mut problems);
    let mut warnings = check::locate(source, parsed.tree.as_ref(), warned);
    warnings.extend(inert::warnings(
        source,
        Tier::Company,
        &company,
        parsed.tree.as_ref(),
    ));
    check::sort(&mut warnings);
    let result = if problems.is_empty() {
        Ok((company, org))
    } else {
        Err(problems)
    };
    CompanyReport { result, warnings }
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
        let findings: Vec<Finding> = findings.into_iter().filter(|f| !f.warning).collect();
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

    /// The warnings of a valid company (keys with no effect yet, references
    /// that resolve to nothing), by YAML path, without lines: what the engine
    /// logs when it starts a company.
    pub fn warnings(&self) -> Vec<Problem> {
        let (_, findings) = company_findings(self);
        let mut out = check::locate(
            "company",
            None,
            findings.into_iter().filter(|f| f.warning).collect(),
        );
        out.extend(inert::warnings("company", Tier::Company, self, None));
        out
    }

    /// The resolved org chart.
    pub fn organization(&self) -> Organization {
        Organization::new(self)
    }
}

fn meaning(company: &Company, org: &Organization) -> Vec<Finding> {
    let mut out = Vec::new();
    providers(company, &mut out);
    mcp_servers(company, &mut out);
    super::sandbox_check::check(company, org, &mut out);
    if let Some(mm) = &company.integrations.mattermost {
        mm.check(&mut out);
    }
    if let Some(slack) = &company.integrations.slack {
        slack.check_phrases(&mut out);
    }
    super::rules::company_rules(company, &mut out);
    // Once, not once per seat: a big company with many providers stays linear.
    let llm_providers = company.llm_providers();
    let defined = Names {
        llm: llm_providers.keys().map(String::as_str).collect(),
        mcp: company
            .mcp_servers
            .iter()
            .map(|s| s.name.as_str())
            .collect(),
    };
    for seat in org.seats() {
        let at = YamlPath::parse(&seat.yaml_path).unwrap_or_default();
        role(company, &defined, &seat.role, &at, &mut out);
    }
    let configs = units_preorder(&company.units);
    for (unit, config) in org.units().iter().zip(configs) {
        let at = YamlPath::parse(&unit.yaml_path).unwrap_or_default();
        mcp_env_refs(company, &config.mcp_env, &at.key("mcp_env"), &mut out);
        let lead = unit.lead.as_deref().and_then(|h| org.seat(h));
        let has_agents = unit
            .seats
            .iter()
            .filter_map(|h| org.seat(h))
            .any(|s| s.is_agent());
        schedules(&config.schedules, &at, &mut out, |s, sat, out| {
            match s.target {
            ScheduleTarget::Lead if !s.enabled => {}
            ScheduleTarget::Lead => match lead {
                // A `lead` that names nobody is reported on its own.
                None if config.explicit_lead().is_some() => {}
                None => out.push(Finding::warning(
                    sat.key("target"),
                    format!(
                        "schedule `{}` targets the lead, but unit `{}` has no lead (set `lead` here or on a parent unit); it never fires",
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
                    "schedule `{}` targets each agent seat of unit `{}` (the default target), which has none of its own; set `target: lead` or move it",
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

/// The keys only a `type: local` entry takes, and the ones it cannot use.
fn local_provider(name: &str, p: &crate::LlmProvider, at: &YamlPath, out: &mut Vec<Finding>) {
    if p.kind != LlmKind::Local {
        for (key, set) in [("path", p.path.is_some()), ("local", p.local.is_some())] {
            if set {
                out.push(Finding::new(
                    at.key(key),
                    format!("provider `{name}`: `{key}` is only for `type: local`"),
                ));
            }
        }
        return;
    }
    if p.base_url.is_some() {
        out.push(Finding::new(
            at.key("base_url"),
            format!("provider `{name}` runs inside the engine (`type: local`): it has no `base_url`; for a model server use `type: openai-compatible`"),
        ));
    }
    if !p.api_keys.is_empty() {
        out.push(Finding::warning(
            at.key("api_keys"),
            format!("provider `{name}` runs inside the engine (`type: local`): its `api_keys` are never used"),
        ));
    }
    if let Some(path) = &p.path
        && path.trim().is_empty()
    {
        out.push(Finding::new(
            at.key("path"),
            format!("provider `{name}`: `path` is empty"),
        ));
    }
}

fn providers(company: &Company, out: &mut Vec<Finding>) {
    let llm_at = YamlPath::root().key("providers").key("llm");
    for (name, p) in &company.providers.llm {
        let at = llm_at.key(name);
        if p.kind == LlmKind::OpenaiCompatible && p.base_url.is_none() {
            out.push(Finding::warning(
                at.key("type"),
                format!("provider `{name}` is openai-compatible without `base_url`: it talks to api.openai.com"),
            ));
        }
        match (p.kind, &p.cli) {
            (LlmKind::CliAgent, None) => out.push(Finding::new(
                at.key("type"),
                format!("provider `{name}` is a cli-agent and needs a `cli` block naming the CLI, e.g. `cli: {{agent: claude-code}}`"),
            )),
            (LlmKind::CliAgent, Some(cli)) => cli_agent(name, cli, &at, out),
            (_, Some(_)) => out.push(Finding::new(
                at.key("cli"),
                format!("provider `{name}`: `cli` is only for `type: cli-agent`"),
            )),
            (_, None) => {}
        }
        local_provider(name, p, &at, out);
        if p.reasoning == Some(true)
            && matches!(
                p.kind,
                LlmKind::OpenaiCompatible | LlmKind::CliAgent | LlmKind::Local
            )
        {
            out.push(Finding::new(
                at.key("reasoning"),
                format!(
                    "provider `{name}`: reasoning is only for `openai` and `anthropic` providers"
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
    shared_cli_state(company, &llm_at, out);
    if let Some(e) = &company.providers.embeddings {
        let at = YamlPath::root().key("providers").key("embeddings");
        if e.kind == EmbeddingsKind::OpenaiCompatible && e.base_url.is_none() {
            out.push(Finding::warning(
                at.key("type"),
                "openai-compatible embeddings without `base_url` talk to api.openai.com",
            ));
        }
        check_url(e.base_url.as_deref(), &at.key("base_url"), out);
        if e.kind == EmbeddingsKind::Local {
            local_embeddings(e, &at, out);
        }
    }
}

/// A `cli` block the provider could not run.
fn cli_agent(name: &str, cli: &CliAgent, at: &YamlPath, out: &mut Vec<Finding>) {
    let at = at.key("cli");
    if !(cli.timeout_seconds.is_finite() && cli.timeout_seconds > 0.0) {
        out.push(Finding::new(
            at.key("timeout_seconds"),
            format!("provider `{name}`: `cli.timeout_seconds` must be above 0"),
        ));
    }
    for key in cli.overrides.keys() {
        if !PROFILE_FIELDS.contains(&key.as_str()) {
            out.push(Finding::new(
                at.key("overrides").key(key),
                format!(
                    "provider `{name}`: `{key}` is not a field of a CLI profile (fields: {})",
                    PROFILE_FIELDS.join(", ")
                ),
            ));
        }
    }
    if cli.agent == CliAgentKind::Custom && !cli.overrides.contains_key("binary") {
        out.push(Finding::new(
            at.key("overrides"),
            format!("provider `{name}`: `agent: custom` ships no profile; set `cli.overrides.binary` (and `complete_args`)"),
        ));
    }
}

/// Entries sharing a `cli.state_dir` share one login and one set of seat
/// homes, so they must drive the same CLI: two CLIs disagree about which
/// files are the login and which are conversation memory.
fn shared_cli_state(company: &Company, llm_at: &YamlPath, out: &mut Vec<Finding>) {
    let mut first: Vec<(&str, &str, CliAgentKind)> = Vec::new();
    for (name, p) in &company.providers.llm {
        let Some(cli) = p.cli.as_ref().filter(|_| p.kind == LlmKind::CliAgent) else {
            continue;
        };
        let dir = cli.state_dir.trim();
        if dir.is_empty() {
            continue;
        }
        match first.iter().find(|(d, _, _)| *d == dir) {
            Some((_, other, agent)) if *agent != cli.agent => out.push(Finding::new(
                llm_at.key(name).key("cli").key("state_dir"),
                format!(
                    "provider `{name}` ({}) shares cli.state_dir with `{other}` ({}): entries sharing a state_dir must drive the same CLI",
                    cli.agent.as_str(),
                    agent.as_str()
                ),
            )),
            Some(_) => {}
            None => first.push((dir, name.as_str(), cli.agent)),
        }
    }
}

/// `type: local` runs all-MiniLM-L6-v2 in-process: its width is fixed and
/// it needs the model folder.
fn local_embeddings(e: &EmbeddingsProvider, at: &YamlPath, out: &mut Vec<Finding>) {
    if let Some(d) = e.dimensions
        && d != LOCAL_EMBEDDING_DIMENSIONS
    {
        out.push(Finding::new(
            at.key("dimensions"),
            format!(
                "`type: local` (all-MiniLM-L6-v2) returns {LOCAL_EMBEDDING_DIMENSIONS} dimensions, not {d}; remove `dimensions` or set it to {LOCAL_EMBEDDING_DIMENSIONS}"
            ),
        ));
    }
    // No `path`: the catalogue's all-MiniLM-L6-v2 in the models cache
    // (`crewlet run` fetches it on first start; `crewlet models pull`).
    match e.path.as_deref() {
        None => {}
        Some(p) if p.trim().is_empty() => out.push(Finding::new(
            at.key("path"),
            "`path` must name the model folder",
        )),
        Some(_) => {}
    }
    for (key, set) in [
        ("base_url", e.base_url.is_some()),
        ("api_key", e.api_key.is_some()),
        ("api_keys", !e.api_keys.is_empty()),
    ] {
        if set {
            out.push(Finding::warning(
                at.key(key),
                format!("`{key}` is ignored by `type: local`, which calls no server"),
            ));
        }
    }
}

pub(crate) fn check_url(url: Option<&str>, at: &YamlPath, out: &mut Vec<Finding>) {
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
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, s) in company.mcp_servers.iter().enumerate() {
        let at = root.index(i);
        let name = s.name.as_str();
        if let Some(first) = seen.insert(name, i) {
            out.push(Finding::warning(
                at.key("name"),
                format!("MCP server `{name}` is already defined at mcp_servers[{first}]; only the first is used"),
            ));
            seen.insert(name, first);
        }
        match s.transport {
            McpTransport::Stdio => {
                if s.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
                    out.push(Finding::warning(
                        at.clone(),
                        format!(
                            "stdio MCP server `{name}` has no `command`; it will fail to start"
                        ),
                    ));
                }
            }
            McpTransport::Http => match s.url.as_deref() {
                None => out.push(Finding::warning(
                    at.clone(),
                    format!("http MCP server `{name}` has no `url`; it will fail to start"),
                )),
                url => check_url(url, &at.key("url"), out),
            },
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
    let check_choice = |choice: &LlmChoice, cat: YamlPath, out: &mut Vec<Finding>| match choice {
        LlmChoice::One(name) => llm_ref(name, llm_names, cat, out),
        LlmChoice::Chain(names) => {
            for (i, name) in names.iter().enumerate() {
                llm_ref(name, llm_names, cat.index(i), out);
            }
        }
    };
    match &role.llm {
        Some(LlmSpec::One(name)) => llm_ref(name, llm_names, at.key("llm"), out),
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
        let agent_only: Vec<&str> = [
            (
                "llm",
                role.llm
                    .as_ref()
                    .is_some_and(|l| l != &LlmSpec::One("default".into())),
            ),
            ("llm_plan", role.llm_plan.is_some()),
            ("llm_execute", role.llm_execute.is_some()),
            ("llm_review", role.llm_review.is_some()),
            ("llm_subagent", role.llm_subagent.is_some()),
            ("llm_auxiliary", role.llm_auxiliary.is_some()),
            ("llm_judge", role.llm_judge.is_some()),
            ("llm_sandbox", role.llm_sandbox.is_some()),
            ("sandbox", role.sandbox.is_some()),
            ("token_budget", role.token_budget != 0),
            ("learning_enabled", role.learning_enabled.is_some()),
            ("schedules", !role.schedules.is_empty()),
            ("integrations.slack", role.integrations.slack.is_some()),
            (
                "integrations.mattermost",
                role.integrations.mattermost.is_some(),
            ),
            ("integrations.jira", role.integrations.jira.is_some()),
            (
                "integrations.confluence",
                role.integrations.confluence.is_some(),
            ),
            ("integrations.plane", role.integrations.plane.is_some()),
            ("mcp_env", !role.mcp_env.is_empty()),
            ("mcp_servers", !role.mcp_servers.is_empty()),
            (
                "behavioral_guidelines",
                !role.behavioral_guidelines.is_empty(),
            ),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect();
        if !agent_only.is_empty() {
            out.push(Finding::new(
                at.clone(),
                format!(
                    "human seat `{}` never runs, so it cannot have {}",
                    role.name,
                    agent_only.join(", ")
                ),
            ));
        }
        if !role.contact.as_ref().is_some_and(|c| c.has_identity()) {
            let cat = if role.contact.is_some() {
                at.key("contact")
            } else {
                at.clone()
            };
            out.push(Finding::new(
                cat,
                format!(
                    "human seat `{}` needs a `contact` with at least one identity (slack_user_id, mattermost_user_id, atlassian_account_id, github_login, gitlab_username, plane_user_id or email)",
                    role.name
                ),
            ));
        }
    } else {
        for (key, set) in [
            ("contact", role.contact.is_some()),
            ("availability", role.availability.is_some()),
        ] {
            if set {
                out.push(Finding::new(
                    at.key(key),
                    format!(
                        "`{key}` is for human seats; `{}` is an agent seat (did you mean `kind: human`?)",
                        role.name
                    ),
                ));
            }
        }
    }
    if let Some(contact) = &role.contact {
        for (key, value) in contact.entries() {
            if value.contains("${") && !is_whole_reference(value) {
                out.push(Finding::new(
                    at.key("contact").key(key),
                    format!("`{value}` embeds a ${{VAR}} reference; a contact is a literal id or exactly one `${{VAR}}`"),
                ));
            }
        }
    }

    for (i, server) in role.mcp_servers.iter().enumerate() {
        let sat = at.key("mcp_servers").index(i);
        match company.mcp_server(server) {
            None => {
                out.push(Finding::new(
                    sat,
                    format!(
                        "MCP server `{server}` is not defined in mcp_servers{}",
                        defined_list(&defined.mcp)
                    ),
                ));
            }
            Some(s) if s.shared => out.push(Finding::new(
                sat,
                format!(
                    "MCP server `{server}` is shared: every agent seat already has it; list only `shared: false` servers here"
                ),
            )),
            Some(_) => {}
        }
    }
    mcp_env_refs(company, &role.mcp_env, &at.key("mcp_env"), out);

    schedules(&role.schedules, at, out, |_, _, _| {});
}

/// `mcp_env` entries name servers: an unknown or shared one is ignored.
fn mcp_env_refs(
    company: &Company,
    env: &indexmap::IndexMap<String, indexmap::IndexMap<String, String>>,
    at: &YamlPath,
    out: &mut Vec<Finding>,
) {
    for server in env.keys() {
        match company.mcp_server(server) {
            None => out.push(Finding::warning(
                at.key(server),
                format!("`{server}` names no server in mcp_servers; these credentials are not used"),
            )),
            Some(s) if s.shared => out.push(Finding::warning(
                at.key(server),
                format!("MCP server `{server}` is shared (one instance for every seat); per-seat credentials for it are not used (set `shared: false`)"),
            )),
            Some(_) => {}
        }
    }
}

fn llm_ref(name: &str, defined: &[&str], at: YamlPath, out: &mut Vec<Finding>) {
    if !defined.contains(&name) {
        let mut message = format!(
            "LLM provider `{name}` is not defined in providers.llm{}; the seat falls back to `default`, else the first provider",
            defined_list(defined)
        );
        if let Some(best) = crate::suggest::closest(name, defined) {
            message = format!("{message} (did you mean `{best}`?)");
        }
        out.push(Finding::warning(at, message));
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
        if !s.timezone.trim().is_empty()
            && let Err(e) = check_timezone(&s.timezone)
        {
            out.push(Finding::new(at.key("timezone"), e));
        }
        extra(s, &at, out);
    }
}
