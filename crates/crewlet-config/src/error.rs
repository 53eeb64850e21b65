//! The crate's one error type and the located [`Problem`] every check reports.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use crate::yaml::{Loc, YamlPath};

/// One thing wrong with a configuration file, located as precisely as the
/// input allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The file (or other source, e.g. `environment`) the problem is in.
    pub file: String,
    /// The YAML path of the offending node, e.g. `units[0].roles[2].handle`;
    /// empty for the document itself.
    pub path: String,
    /// 1-based line, when the node exists in the file.
    pub line: Option<u32>,
    /// 1-based column, when the node exists in the file.
    pub column: Option<u32>,
    /// What is wrong, in lower case, naming the input.
    pub message: String,
}

impl Problem {
    pub(crate) fn new(file: &str, path: &YamlPath, loc: Option<Loc>, message: String) -> Self {
        Self {
            file: file.to_owned(),
            path: path.to_string(),
            line: loc.map(|l| l.line),
            column: loc.map(|l| l.column),
            message,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        f.write_str(": ")?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

/// Everything that can go wrong reading, validating or expanding configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read at all.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The file was read but is not valid; every problem found is listed.
    #[error("{file} is not valid ({} problem{}):\n{}", problems.len(), plural(problems.len()), list(problems))]
    Invalid {
        file: String,
        problems: Vec<Problem>,
    },

    /// A `${NAME}` reference names an environment variable that is not set.
    #[error("environment variable `{name}` is not set{}", at_path(at))]
    UndefinedVariable { name: String, at: String },

    /// A configuration value could not be converted for interpolation.
    #[error("cannot expand variables in {what}: {message}")]
    Expand { what: String, message: String },
}

impl ConfigError {
    /// The located problems, when this is [`ConfigError::Invalid`].
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Invalid { problems, .. } => problems,
            _ => &[],
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn at_path(at: &str) -> String {
    if at.is_empty() {
        String::new()
    } else {
        format!(" (referenced at {at})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_displays_like_a_compiler_diagnostic() {
        let p = Problem {
            file: "company.yaml".into(),
            path: "units[0].lead".into(),
            line: Some(7),
            column: Some(11),
            message: "lead `x` is not a role in unit `eng`".into(),
        };
        assert_eq!(
            p.to_string(),
            "company.yaml:7:11: units[0].lead: lead `x` is not a role in unit `eng`"
        );
    }

    #[test]
    fn invalid_lists_every_problem() {
        let p = Problem {
            file: "f".into(),
            path: String::new(),
            line: None,
            column: None,
            message: "the file is empty".into(),
        };
        let e = ConfigError::Invalid {
            file: "f".into(),
            problems: vec![p.clone(), p],
        };
        let text = e.to_string();
        assert!(text.starts_with("f is not valid (2 problems):"), "{text}");
        assert_eq!(text.matches("the file is empty").count(), 2);
    }
}
