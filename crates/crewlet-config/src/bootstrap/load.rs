//! Reading a bootstrap file: layering it with `CREWLET_*` overrides,
//! validating it (structure, then meaning) and reporting where problems are.

use std::path::Path;

use figment::Figment;
use figment::providers::Format;

use super::{Bootstrap, ENV_PREFIX, ENV_SEPARATOR, QueueKind};
use crate::check::{self, Finding};
use crate::env::{ENV_SOURCE, EnvOverrides};
use crate::error::{ConfigError, Problem};
use crate::figment_yaml::SaphyrYaml;
use crate::interpolate::{interpolate_all, process_env};
use crate::schema::Tier;
use crate::yaml::YamlPath;

impl Bootstrap {
    /// Parses and validates a bootstrap file's text alone: no environment is
    /// read. `source` names the input in errors.
    pub fn from_yaml(source: &str, text: &str) -> Result<Bootstrap, ConfigError> {
        check_bootstrap(source, text).map_err(|problems| ConfigError::Invalid {
            file: source.to_owned(),
            problems,
        })
    }

    /// Reads `path` (or only defaults when `None`), applies `CREWLET_*`
    /// environment overrides, validates, and expands `${VAR}` references from
    /// the process environment. This is what a starting process calls.
    pub fn load(path: Option<&Path>) -> Result<Bootstrap, ConfigError> {
        Self::load_from(path, Self::figment(path), process_env)
    }

    /// Like [`Bootstrap::load`], with a caller-built figment (for instance
    /// [`Bootstrap::figment`] plus command-line overrides) and variable
    /// lookup. The file is first validated alone so its problems carry lines.
    pub fn load_from(
        path: Option<&Path>,
        figment: Figment,
        vars: impl Fn(&str) -> Option<String>,
    ) -> Result<Bootstrap, ConfigError> {
        let mut tree = None;
        let mut source = String::from("defaults");
        if let Some(path) = path {
            source = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
                path: path.to_owned(),
                source: e,
            })?;
            let parsed = check::structural::<Bootstrap>(&source, &text, Tier::Bootstrap);
            if !parsed.problems.is_empty() {
                return Err(ConfigError::Invalid {
                    file: source,
                    problems: parsed.problems,
                });
            }
            tree = parsed.tree;
        }
        let bootstrap: Bootstrap = figment
            .extract()
            .map_err(|e| figment_problems(&source, e))?;
        let problems = check::locate(&source, tree.as_ref(), bootstrap.findings());
        if !problems.is_empty() {
            return Err(ConfigError::Invalid {
                file: source,
                problems,
            });
        }
        interpolate_all(&bootstrap, vars)
    }

    /// The layered sources: defaults, the file (if any, read with
    /// serde-saphyr), then `CREWLET_*` variables (`__` nests:
    /// `CREWLET_PROVIDERS__DATABASE__DSN`).
    pub fn figment(path: Option<&Path>) -> Figment {
        let mut figment = Figment::new();
        if let Some(path) = path {
            figment = figment.merge(SaphyrYaml::file_exact(path));
        }
        figment.merge(EnvOverrides::from_process())
    }

    /// Problems of meaning (the types already hold the structure).
    pub(crate) fn findings(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        if let Some(q) = &self.providers.queue {
            let at = YamlPath::root().key("providers").key("queue");
            match (q.kind, q.url.as_deref()) {
                (QueueKind::Pulsar, None) => out.push(Finding::new(
                    at.key("url"),
                    "a pulsar queue needs `url` (pulsar://HOST:6650 or pulsar+ssl://HOST:6651)",
                )),
                (QueueKind::Pulsar, Some(url))
                    if !url.contains("${")
                        && !url.starts_with("pulsar://")
                        && !url.starts_with("pulsar+ssl://") =>
                {
                    out.push(Finding::new(
                        at.key("url"),
                        format!("queue url `{url}` must start with pulsar:// or pulsar+ssl://"),
                    ))
                }
                _ => {}
            }
        }
        if let Some(node) = &self.node {
            let at = YamlPath::root().key("node");
            let (ttl, beat) = (node.lease_ttl_seconds, node.heartbeat_seconds);
            if ttl < 2 {
                out.push(Finding::new(
                    at.key("lease_ttl_seconds"),
                    format!("lease_ttl_seconds must be at least 2, not {ttl}"),
                ));
            } else if beat == 0 || beat.saturating_mul(2) > ttl {
                out.push(Finding::new(
                    at.key("heartbeat_seconds"),
                    format!(
                        "heartbeat_seconds must be above 0 and at most half of lease_ttl_seconds ({ttl}), not {beat}"
                    ),
                ));
            }
        }
        let mut ids: Vec<&str> = Vec::new();
        for (i, t) in self.api.auth.tokens.iter().enumerate() {
            if ids.contains(&t.id.as_str()) {
                let at = YamlPath::root()
                    .key("api")
                    .key("auth")
                    .key("tokens")
                    .index(i)
                    .key("id");
                out.push(Finding::new(
                    at,
                    format!("token id `{}` is used twice", t.id),
                ));
            }
            ids.push(&t.id);
            if t.scopes.as_ref().is_some_and(Vec::is_empty) {
                let at = YamlPath::root()
                    .key("api")
                    .key("auth")
                    .key("tokens")
                    .index(i)
                    .key("scopes");
                out.push(Finding::new(
                    at,
                    format!(
                        "token `{}` has no scopes and could do nothing: list read, read:content, operate and/or admin",
                        t.id
                    ),
                ));
            }
        }
        if let Err(reason) = self.api.auth.anonymous_access(&self.api.host) {
            let at = YamlPath::root()
                .key("api")
                .key("auth")
                .key("allow_anonymous_read");
            out.push(Finding::new(at, reason));
        }
        out.extend(
            self.security
                .findings_of_block(&YamlPath::root().key("security")),
        );
        out
    }
}

impl Bootstrap {
    /// Keys set in this file that have no effect yet, by YAML path (no
    /// lines): what the engine logs when it starts.
    pub fn warnings(&self) -> Vec<Problem> {
        crate::inert::warnings("config.yaml", Tier::Bootstrap, self, None)
    }
}

/// Validates a bootstrap file's text alone (no environment) and returns every
/// problem found.
pub fn check_bootstrap(source: &str, text: &str) -> Result<Bootstrap, Vec<Problem>> {
    let parsed = check::structural::<Bootstrap>(source, text, Tier::Bootstrap);
    let mut problems = parsed.problems;
    match parsed.value {
        Some(b) if problems.is_empty() => {
            problems = check::locate(source, parsed.tree.as_ref(), b.findings());
            if problems.is_empty() {
                Ok(b)
            } else {
                Err(problems)
            }
        }
        Some(b) => {
            problems.extend(check::locate(source, parsed.tree.as_ref(), b.findings()));
            check::sort(&mut problems);
            Err(problems)
        }
        None => Err(problems),
    }
}

fn figment_problems(source: &str, error: figment::Error) -> ConfigError {
    let problems = error
        .into_iter()
        .map(|e| {
            let from_env = e.metadata.as_ref().is_some_and(|m| m.name == ENV_SOURCE);
            let path = e.path.join(".");
            let mut message = e.kind.to_string();
            if from_env {
                let var = format!(
                    "{ENV_PREFIX}{}",
                    e.path
                        .iter()
                        .map(|s| s.to_uppercase())
                        .collect::<Vec<_>>()
                        .join(ENV_SEPARATOR)
                );
                message = format!("{message} (set by environment variable {var})");
            }
            Problem {
                file: if from_env {
                    "environment".into()
                } else {
                    source.to_owned()
                },
                path,
                line: None,
                column: None,
                message: lower_first(&message),
            }
        })
        .collect();
    let file = source.to_owned();
    ConfigError::Invalid { file, problems }
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}
