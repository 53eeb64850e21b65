//! Getting a login into Crewlet's own directory, and out again.
//!
//! Vendor logins are browser OAuth: nothing here types a password. The
//! login is either adopted from this machine (`--from-host`: the CLI's
//! credential files copied out of the operator's home), made by the
//! vendor's own login command run with `HOME` pointed at the provider's
//! `credentials/` directory, or a headless token the CLI mints
//! (`--capture-token`). These are operator commands (`crewlet llm ...`),
//! blocking and attached to the terminal.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use regex::Regex;

use super::workspace::{copy_private, make_dir, remove, safe_join, write_private};
use super::{CliAgentError, CliAgentProvider};

/// The file under `credentials/` holding a captured headless token.
const TOKEN_FILE: &str = "crewlet-token";

/// A token captured by `crewlet llm login --capture-token`, if any.
pub fn stored_token(state_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(state_dir.join("credentials").join(TOKEN_FILE)).ok()?;
    let token = text.trim();
    (!token.is_empty()).then(|| token.to_owned())
}

/// What login a provider has.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoginState {
    /// The profile's credential files present in `credentials/`.
    pub files: Vec<String>,
    /// A token (configured, in the engine's environment, or captured)
    /// reaches the CLI.
    pub token: bool,
}

impl LoginState {
    pub fn logged_in(&self) -> bool {
        self.token || !self.files.is_empty()
    }

    /// One word for tables: `credentials`, `token`, `token+credentials`, `none`.
    pub fn label(&self) -> &'static str {
        match (self.token, self.files.is_empty()) {
            (true, false) => "token+credentials",
            (true, true) => "token",
            (false, false) => "credentials",
            (false, true) => "none",
        }
    }
}

impl CliAgentProvider {
    /// The login this provider has on disk or in its environment.
    pub fn login_state(&self) -> LoginState {
        LoginState {
            files: self.workspace().credential_files(),
            token: self.settings().has_token(),
        }
    }

    /// The profile's credential files present under `home` (the machine's
    /// own login of this CLI).
    pub fn host_login_files(&self, home: &Path) -> Vec<(String, PathBuf)> {
        self.profile()
            .credential_paths
            .iter()
            .filter_map(|rel| safe_join(home, rel).map(|p| (rel.clone(), p)))
            .filter(|(_, p)| p.is_file())
            .collect()
    }

    /// Copies the machine's login of this CLI (under `home`) into
    /// `credentials/`. A copy, not a link: seats never write into the
    /// operator's own files. Returns the files copied.
    pub fn adopt_host_login(&self, home: &Path) -> Result<Vec<String>, CliAgentError> {
        let found = self.host_login_files(home);
        if found.is_empty() {
            return Err(CliAgentError::Config {
                message: format!(
                    "no `{}` login under {} (looked for {}); log the CLI in there first, or run `crewlet llm login {}` without --from-host",
                    self.profile().name,
                    home.display(),
                    if self.profile().credential_paths.is_empty() {
                        "nothing: the profile names no credential_paths".to_owned()
                    } else {
                        self.profile().credential_paths.join(", ")
                    },
                    self.settings().provider
                ),
            });
        }
        let dir = self.workspace().credential_dir();
        make_dir(&dir)?;
        let mut copied = Vec::new();
        for (rel, src) in found {
            let Some(dst) = safe_join(&dir, &rel) else {
                continue;
            };
            copy_private(&src, &dst)
                .map_err(|source| CliAgentError::Workspace { path: dst, source })?;
            copied.push(rel);
        }
        Ok(copied)
    }

    /// Removes Crewlet's copies of the login: `credentials/` (files and a
    /// captured token) and every seat's seeded copy. The vendor session
    /// itself is not revoked. Returns the files removed.
    pub fn logout(&self) -> Result<Vec<String>, CliAgentError> {
        let dir = self.workspace().credential_dir();
        let mut removed = Vec::new();
        let mut targets: Vec<(String, PathBuf)> = self
            .profile()
            .credential_paths
            .iter()
            .filter_map(|rel| safe_join(&dir, rel).map(|p| (rel.clone(), p)))
            .collect();
        targets.push((TOKEN_FILE.to_owned(), dir.join(TOKEN_FILE)));
        for (rel, path) in targets {
            if path.is_file() {
                std::fs::remove_file(&path)
                    .map_err(|source| CliAgentError::Workspace { path, source })?;
                removed.push(rel);
            }
        }
        let seats = self.workspace().state_dir().join("seats");
        if let Ok(entries) = std::fs::read_dir(&seats) {
            for seat in entries.flatten() {
                let home = seat.path().join("home");
                for rel in &self.profile().credential_paths {
                    if let Some(p) = safe_join(&home, rel) {
                        remove(&p);
                    }
                }
            }
        }
        Ok(removed)
    }

    /// What the CLI's own status command says (`None`: it has none), run
    /// in a scratch seat like a completion.
    pub async fn cli_status(&self) -> Result<Option<String>, CliAgentError> {
        if self.profile().status_args.is_empty() {
            return Ok(None);
        }
        let args = self.profile().status_args.clone();
        let done = self.run_plain(super::DOCTOR_SEAT, &args, None).await?;
        let text = format!("{}\n{}", done.stdout.trim(), done.stderr.trim());
        Ok(Some(text.trim().to_owned()))
    }

    /// The environment and directory the login helpers run in: `HOME` is
    /// `credentials/`, so what the CLI writes there is the shared login.
    fn login_env(&self) -> Result<(PathBuf, Vec<(String, String)>), CliAgentError> {
        let home = self.workspace().credential_dir();
        let work = self.workspace().state_dir().join("login-work");
        make_dir(&home)?;
        make_dir(&work.join(".tmp"))?;
        let env = self.workspace().env_for(&home, &work);
        Ok((work, env))
    }

    fn login_command(&self, args: &[String]) -> Result<Command, CliAgentError> {
        let binary = self.binary()?;
        let (work, env) = self.login_env()?;
        let home = self.workspace().credential_dir().display().to_string();
        let mut cmd = Command::new(binary);
        cmd.args(
            args.iter()
                .map(|a| a.replace(super::profile::HOME_PLACEHOLDER, &home)),
        )
        .env_clear()
        .envs(env)
        .current_dir(work);
        Ok(cmd)
    }

    /// Runs the vendor's own login on this terminal (no login arguments:
    /// the bare CLI, whose first run asks how to log in). Returns its exit
    /// code.
    pub fn interactive_login(&self) -> Result<i32, CliAgentError> {
        let mut cmd = self.login_command(&self.profile().login_args)?;
        let status = cmd.status().map_err(|source| CliAgentError::Spawn {
            binary: PathBuf::from(&self.profile().binary),
            source,
        })?;
        self.workspace().prune(&self.workspace().credential_dir());
        Ok(status.code().unwrap_or(1))
    }

    /// Runs the CLI's token-minting command on this terminal (its output is
    /// shown with the token masked), and keeps the token in `credentials/`.
    pub fn capture_token(&self) -> Result<(), CliAgentError> {
        let p = self.profile();
        if p.token_capture_args.is_empty() || p.token_env.is_empty() {
            return Err(CliAgentError::Config {
                message: format!(
                    "the `{}` CLI mints no headless token; use `crewlet llm login {}` or --from-host",
                    p.name,
                    self.settings().provider
                ),
            });
        }
        let pattern = if p.token_capture_pattern.is_empty() {
            None
        } else {
            Some(
                Regex::new(&p.token_capture_pattern).map_err(|e| CliAgentError::Config {
                    message: format!("token_capture_pattern: {e}"),
                })?,
            )
        };
        let mut cmd = self.login_command(&p.token_capture_args)?;
        cmd.stdout(Stdio::piped());
        let spawn_err = |source| CliAgentError::Spawn {
            binary: PathBuf::from(&p.binary),
            source,
        };
        let mut child = cmd.spawn().map_err(spawn_err)?;
        let mut captured = Vec::new();
        if let Some(mut out) = child.stdout.take() {
            let mut chunk = [0u8; 4096];
            let mut terminal = std::io::stderr();
            while let Ok(n) = out.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                captured.extend_from_slice(&chunk[..n]);
                let shown = String::from_utf8_lossy(&chunk[..n]).into_owned();
                let shown = match &pattern {
                    Some(re) => re.replace_all(&shown, "[token]").into_owned(),
                    None => shown,
                };
                let _ = terminal.write_all(shown.as_bytes());
                let _ = terminal.flush();
            }
        }
        let status = child.wait().map_err(spawn_err)?;
        self.workspace().prune(&self.workspace().credential_dir());
        if !status.success() {
            return Err(CliAgentError::Failed {
                binary: p.binary.clone(),
                status: status
                    .code()
                    .map_or("a signal".into(), |c| format!("status {c}")),
                excerpt: "the token command failed (its output is above)".into(),
            });
        }
        let text = String::from_utf8_lossy(&captured);
        let token =
            extract_token(&text, pattern.as_ref()).ok_or_else(|| CliAgentError::BadOutput {
                binary: p.binary.clone(),
                reason: "no token in the token command's output".into(),
            })?;
        let path = self.workspace().credential_dir().join(TOKEN_FILE);
        write_private(&path, format!("{token}\n").as_bytes())
            .map_err(|source| CliAgentError::Workspace { path, source })
    }
}

/// The token in `output`: the pattern's first group (or whole match), else
/// the last non-empty line.
fn extract_token(output: &str, pattern: Option<&Regex>) -> Option<String> {
    let token = match pattern {
        Some(re) => {
            let caps = re.captures(output)?;
            caps.get(1)
                .or_else(|| caps.get(0))?
                .as_str()
                .trim()
                .to_owned()
        }
        None => output
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())?
            .to_owned(),
    };
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_found_by_pattern_or_last_line() -> Result<(), regex::Error> {
        let re = Regex::new(r"(sk-ant-oat[0-9]{2}-[A-Za-z0-9_-]{20,})")?;
        let out = "Visit https://x\nYour token:\nsk-ant-oat01-abcdefghijklmnopqrstuvwxyz\nStore it safely.";
        assert_eq!(
            extract_token(out, Some(&re)).as_deref(),
            Some("sk-ant-oat01-abcdefghijklmnopqrstuvwxyz")
        );
        assert_eq!(
            extract_token(out, None).as_deref(),
            Some("Store it safely.")
        );
        assert_eq!(extract_token("nothing", Some(&re)), None);
        Ok(())
    }
}
