//! Setup steps: what makes a fresh box ready for work (a toolchain switch, a
//! git credential helper, a clone with the seat's own token), applied in
//! order before any brief runs. A step writes files, runs commands, adds
//! environment for what follows, and tells the coding agent what it made
//! true. Any failure fails the whole setup: a half-provisioned box never
//! gets a brief that promises an environment it does not have.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::{BoxId, Exec, Result, Sandbox, SandboxError};

/// One setup step, with its `${VAR}` references already resolved.
#[derive(Clone, Default)]
pub struct SetupStep {
    /// Name used in errors and events.
    pub name: String,
    /// Files to write first: in-box path to content.
    pub files: BTreeMap<String, String>,
    /// Shell commands run in order after the files, each with the run
    /// environment.
    pub commands: Vec<String>,
    /// Environment added for later steps and for the run itself.
    pub env: BTreeMap<String, String>,
    /// What the step made true, for the coding agent's brief.
    pub brief: Option<String>,
    /// Time one command of the step may take.
    pub timeout: Duration,
}

impl std::fmt::Debug for SetupStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetupStep")
            .field("name", &self.name)
            .field("files", &self.files.keys().collect::<Vec<_>>())
            .field("commands", &self.commands.len())
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// What setup leaves for the run.
#[derive(Debug, Clone, Default)]
pub struct Provisioned {
    /// The run environment: the one given, plus every step's `env`.
    pub env: BTreeMap<String, String>,
    /// The steps' briefs, in order.
    pub briefs: Vec<String>,
}

/// Applies `steps` to the box in order, each command with `env` plus the
/// environment of the steps so far.
pub async fn provision(
    sandbox: &dyn Sandbox,
    id: &BoxId,
    steps: &[SetupStep],
    env: &BTreeMap<String, String>,
) -> Result<Provisioned> {
    let mut out = Provisioned {
        env: env.clone(),
        briefs: Vec::new(),
    };
    for step in steps {
        out.env
            .extend(step.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        for (path, content) in &step.files {
            sandbox
                .write_file(id, path, content.as_bytes())
                .await
                .map_err(|e| SandboxError::Setup {
                    step: step.name.clone(),
                    index: 0,
                    reason: e.to_string(),
                })?;
        }
        for (i, command) in step.commands.iter().enumerate() {
            let mut exec = Exec::shell(command.clone()).timeout(step.timeout);
            exec.env = out.env.clone();
            let fail = |reason: String| SandboxError::Setup {
                step: step.name.clone(),
                index: i + 1,
                reason,
            };
            let res = sandbox
                .exec(id, &exec)
                .await
                .map_err(|e| fail(e.to_string()))?;
            if res.timed_out {
                return Err(fail(format!(
                    "timed out after {} s",
                    step.timeout.as_secs()
                )));
            }
            if !res.success() {
                // The exit code only: output may echo a credential.
                let code = res
                    .exit_code
                    .map_or("a signal".to_owned(), |c| format!("exit code {c}"));
                return Err(fail(format!("ended with {code}")));
            }
        }
        if let Some(brief) = &step.brief {
            out.briefs.push(brief.clone());
        }
    }
    Ok(out)
}

/// Resolves `${VAR}` references (whole or embedded) in values with `lookup`.
/// Returns the resolved map and the keys where a reference came out empty,
/// so the caller can warn by name (never by value).
pub fn resolve_env(
    raw: &BTreeMap<String, String>,
    lookup: impl Fn(&str) -> Option<String>,
) -> (BTreeMap<String, String>, Vec<String>) {
    let mut out = BTreeMap::new();
    let mut unresolved = Vec::new();
    for (key, value) in raw {
        let mut text = String::with_capacity(value.len());
        let mut rest = value.as_str();
        let mut empty = false;
        while let Some(start) = rest.find("${") {
            let Some(len) = rest[start + 2..].find('}') else {
                break;
            };
            text.push_str(&rest[..start]);
            let name = &rest[start + 2..start + 2 + len];
            let v = lookup(name).unwrap_or_default();
            empty |= v.is_empty();
            text.push_str(&v);
            rest = &rest[start + 3 + len..];
        }
        text.push_str(rest);
        if empty {
            unresolved.push(key.clone());
        }
        out.insert(key.clone(), text);
    }
    (out, unresolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_resolve_whole_and_embedded_and_empty_ones_are_named() {
        let raw: BTreeMap<String, String> = [
            ("A", "${TOKEN}"),
            ("B", "Bearer ${TOKEN}!"),
            ("C", "${MISSING}"),
            ("D", "plain"),
            ("E", "x ${UNCLOSED"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let (env, unresolved) = resolve_env(&raw, |n| (n == "TOKEN").then(|| "s3cret".to_owned()));
        assert_eq!(env["A"], "s3cret");
        assert_eq!(env["B"], "Bearer s3cret!");
        assert_eq!(env["C"], "");
        assert_eq!(env["D"], "plain");
        assert_eq!(env["E"], "x ${UNCLOSED");
        assert_eq!(unresolved, vec!["C".to_owned()]);
    }
}
