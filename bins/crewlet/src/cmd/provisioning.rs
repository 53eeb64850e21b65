//! The plumbing the `provision` and `import` commands share: a credential
//! flag that prints as `***`, the company and a `${VAR}` lookup (the env
//! file first, then the process environment), the operator's token, the
//! plan / dry run / report printing and the exit codes (0 all good, 1
//! something failed, 2 anything else: the error `run` returns).

use std::fmt::Display;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use crewlet_config::Company;
use crewlet_integrations::provision::MintedToken;
use crewlet_integrations::provision::envfile::EnvFile;

/// A credential that prints as `***`.
#[derive(Clone)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
}

/// The runtime a command's async body runs on.
pub(super) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The company and a `${VAR}` lookup: the env file, then the environment.
pub(super) fn load(
    company: &Path,
    env_file: &Path,
) -> Result<(Company, EnvFile, impl Fn(&str) -> Option<String> + Clone)> {
    let company = Company::load(company)?;
    let file =
        EnvFile::load(env_file).with_context(|| format!("cannot read {}", env_file.display()))?;
    let values = file.values();
    let lookup = move |var: &str| values.get(var).cloned().or_else(|| std::env::var(var).ok());
    Ok((company, file, lookup))
}

/// The admin token: the flag (or its environment variable), else `var`
/// in the env file, else empty (refused later with a hint).
pub(super) fn admin_token(flag: Option<Secret>, file: &EnvFile, var: &str) -> String {
    flag.map(|s| s.0)
        .or_else(|| file.get(var))
        .unwrap_or_default()
}

/// 1 when something failed, else 0.
pub(super) fn exit_code(failed: bool) -> ExitCode {
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Where a run's progress goes: stdout, or stderr when `--print` keeps
/// stdout for the export lines alone.
#[derive(Clone, Copy)]
pub(super) struct Out {
    to_stderr: bool,
}

impl Out {
    pub(super) fn new(to_stderr: bool) -> Out {
        Out { to_stderr }
    }

    pub(super) fn say(&self, text: &str) {
        if self.to_stderr {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }

    pub(super) fn plan(&self, plan: &dyn Display) {
        self.say(&format!("plan:\n{plan}"));
    }

    /// The end of a dry run: 1 when the plan has a failure in it.
    pub(super) fn dry_run(&self, fails: bool) -> ExitCode {
        self.say("dry run: nothing was changed");
        exit_code(fails)
    }

    /// One change as it is made.
    pub(super) fn step(&self, who: &str, what: &str) {
        self.say(&format!("  {who}: {what}"));
    }

    /// The report, where the minted tokens went (and with `print` their
    /// `export` lines on stdout), and the exit code.
    pub(super) fn finish(
        &self,
        report: &dyn Display,
        failed: bool,
        minted: &[MintedToken],
        file: &EnvFile,
        print: bool,
    ) -> ExitCode {
        self.say(&format!("\nreport:\n{report}"));
        if !minted.is_empty() {
            self.say(&format!(
                "tokens written to {}; restart `crewlet run` so the engine reads them",
                file.path().display()
            ));
        }
        if print {
            for minted in minted {
                println!("export {}={}", minted.var, minted.value());
            }
        }
        exit_code(failed)
    }
}
