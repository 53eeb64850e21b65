//! Crewlet's configuration: the Tier A bootstrap file (`config.yaml`, read at
//! start, `CREWLET_*` environment overrides through figment) and the Tier B
//! company YAML (the org chart, models, tools, integrations), their
//! validation, `${VAR}` interpolation, the resolved [`Organization`] and the
//! JSON Schemas and reference docs generated from the types.
//!
//! Validation reports every problem in a file at once, each with its YAML
//! path, line and column: the text is read into a located node tree
//! (serde-saphyr's parser), walked against the JSON Schema generated from the
//! types (unknown keys, types, enum values, required keys), deserialized, and
//! then checked for meaning (handles, managers, leads, references, cron).
//!
//! This crate does no I/O beyond reading the files it is given, and never
//! expands `${VAR}` during validation: [`interpolate`] is called by whoever
//! builds a provider. Storing company revisions belongs to `crewlet-store`.

mod bootstrap;
mod check;
mod company;
mod docs;
mod env;
mod error;
mod figment_yaml;
mod inert;
mod interpolate;
mod numbers;
mod organization;
mod schema;
mod schema_check;
mod security;
mod suggest;
mod text;
mod yaml;
mod zone;

pub use bootstrap::{
    AnonymousAccess, AnonymousRead, ApiAuth, ApiConfig, ApiConnections, ApiToken, Bootstrap,
    BootstrapProviders, DatabaseConfig, ENV_PREFIX, ENV_SEPARATOR, LogFormat, NodeConfig, NodeRole,
    Observability, QueueConfig, QueueKind, check_bootstrap, is_loopback_host,
};
pub use company::validate::{CompanyReport, check_company, check_company_report};
pub use company::{
    BudgetPeriod, BudgetPolicy, MattermostIntegration, MattermostProvisioning, MattermostSeat,
    StatusPhrases, WorkingStatus,
};
pub use company::{
    Company, CompanyProviders, ConfluenceIntegration, Contact, EmbeddingsKind, EmbeddingsProvider,
    GithubIntegration, GitlabIntegration, Integrations, JiraIntegration, Learning, LlmChoice,
    LlmKind, LlmPhases, LlmProvider, LlmSpec, LocalRun, McpServer, McpTransport, Phase,
    PlaneIntegration, ProjectIdentity, Role, RoleIntegrations, Schedule, ScheduleTarget,
    Scheduling, SeatAccount, SeatKind, SlackIntegration, SlackSeat, SpaceIdentity, TrackerSeat,
    TurnEngine, Unit, UnitIntegrations, WikiSeat,
};
pub use company::{
    DEFAULT_EMBEDDING_DIMENSIONS, DEFAULT_PROVIDER, LOCAL_EMBEDDING_DIMENSIONS, cli_agent, later,
};
pub use docs::{configuration_markdown, tier_markdown};
pub use env::EnvOverrides;
pub use error::{ConfigError, Problem};
pub use figment_yaml::SaphyrYaml;
pub use interpolate::{has_references, interpolate, interpolate_all, process_env, references};
pub use organization::{
    ManagerChain, ManagerChainIter, OrgUnit, Organization, ScheduleTargets, Seat, derive_handle,
    is_valid_handle,
};
pub use schema::Tier;
pub use security::{
    CompanyEnv, DEFAULT_COMPANY_ENV_NAMES, DEFAULT_COMPANY_ENV_PREFIX, FORBIDDEN_MCP_ENV,
    FORBIDDEN_MCP_ENV_PREFIXES, Lookup, Scope, Security,
};
pub use text::decode_utf8;
pub use zone::Zone;

/// Validates a file of either tier (`tier: None` guesses it from the keys,
/// see [`Tier::detect`]). Reads no environment and touches no network.
pub fn check_file(source: &str, text: &str, tier: Option<Tier>) -> Checked {
    // Read once: the tier is guessed from the same tree that is checked.
    let parsed = yaml::parse(text);
    let guessed = || parsed.root.as_ref().and_then(Tier::detect_tree);
    let tier = match tier.or_else(guessed) {
        Some(t) => t,
        None => {
            let problems = yaml_problems_or(source, text, || {
                "cannot tell whether this is a company file (`name`, `units`, `roles`) or a bootstrap file (`providers.queue`, `api`, `debug`); pass --tier".into()
            });
            return Checked::Undetected(problems);
        }
    };
    match tier {
        Tier::Company => {
            let report = company::validate::check_company_parsed(source, parsed);
            Checked::Company(report.result, report.warnings)
        }
        Tier::Bootstrap => {
            let result = check_bootstrap(source, text);
            let warnings = match &result {
                Ok(b) => inert::warnings(source, Tier::Bootstrap, b, parsed.root.as_ref()),
                Err(_) => Vec::new(),
            };
            Checked::Bootstrap(result, warnings)
        }
    }
}

/// As [`check_file`] for a file's bytes: text that is not UTF-8 is one
/// problem giving the byte offset, line and column of the first bad byte.
pub fn check_bytes(source: &str, bytes: &[u8], tier: Option<Tier>) -> Checked {
    match decode_utf8(source, bytes) {
        Ok(text) => check_file(source, text, tier),
        Err(problem) => match tier {
            Some(Tier::Company) => Checked::Company(Err(vec![problem]), Vec::new()),
            Some(Tier::Bootstrap) => Checked::Bootstrap(Err(vec![problem]), Vec::new()),
            None => Checked::Undetected(vec![problem]),
        },
    }
}

/// The outcome of [`check_file`]. Made once per checked file, so the size
/// difference between the variants does not matter.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Checked {
    /// A company file, and its warnings (see [`CompanyReport`]).
    Company(Result<(Company, Organization), Vec<Problem>>, Vec<Problem>),
    /// A bootstrap file, and its warnings.
    Bootstrap(Result<Bootstrap, Vec<Problem>>, Vec<Problem>),
    /// The tier could not be guessed (or the text is not YAML).
    Undetected(Vec<Problem>),
}

impl Checked {
    pub fn problems(&self) -> &[Problem] {
        match self {
            Checked::Company(Err(p), _)
            | Checked::Bootstrap(Err(p), _)
            | Checked::Undetected(p) => p,
            _ => &[],
        }
    }

    /// Warnings: the file is accepted, but these keys have no effect yet or
    /// these references resolve to nothing.
    pub fn warnings(&self) -> &[Problem] {
        match self {
            Checked::Company(_, w) | Checked::Bootstrap(_, w) => w,
            Checked::Undetected(_) => &[],
        }
    }
}

/// YAML syntax problems if there are any, else one problem with `message`.
fn yaml_problems_or(source: &str, text: &str, message: impl FnOnce() -> String) -> Vec<Problem> {
    let parsed = yaml::parse(text);
    if !parsed.problems.is_empty() {
        return parsed
            .problems
            .into_iter()
            .map(|p| Problem::new(source, &p.path, Some(p.loc), p.message))
            .collect();
    }
    vec![Problem::new(
        source,
        &yaml::YamlPath::root(),
        None,
        message(),
    )]
}
