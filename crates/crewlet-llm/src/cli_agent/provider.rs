//! [`CliAgentProvider`]: a coding CLI as an [`LlmProvider`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use regex::{Regex, RegexBuilder};
use tokio::sync::Semaphore;

use super::error::excerpt;
use super::output::{decode, parse_envelope};
use super::process::{self, Invocation, RunError};
use super::profile::{
    CliProfile, HOME_PLACEHOLDER, MODEL_PLACEHOLDER, PROMPT_PLACEHOLDER, PromptVia,
};
use super::prompt::{offered_tools, render_prompt};
use super::workspace::{SeatLease, Workspace};
use super::{CliAgentError, CliAgentSettings, current_seat};
use crate::{Completion, CompletionRequest, LlmError, LlmProvider, Usage};

/// Longest reply still read as a usage-limit notice when no tool call was
/// parsed: vendors' notices are a sentence or two, answers are longer.
const LIMIT_NOTICE_MAX_CHARS: usize = 500;
/// How much CLI output an error carries.
const EXCERPT_CHARS: usize = 600;

/// Drives one `type: cli-agent` entry. One value serves every seat; each
/// call runs in the calling seat's home (see [`super::with_seat`]).
pub struct CliAgentProvider {
    settings: CliAgentSettings,
    profile: Arc<CliProfile>,
    workspace: Workspace,
    slots: Arc<Semaphore>,
    rate_limit: Vec<Regex>,
    auth_error: Vec<Regex>,
    /// The model as reported: the configured one, else the CLI's name.
    model_label: String,
}

impl std::fmt::Debug for CliAgentProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CliAgentProvider")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn compile(patterns: &[String]) -> Vec<Regex> {
    patterns
        .iter()
        .filter_map(|p| RegexBuilder::new(p).case_insensitive(true).build().ok())
        .collect()
}

impl CliAgentProvider {
    pub fn new(settings: CliAgentSettings) -> Result<Self, CliAgentError> {
        settings.profile.check()?;
        let profile = Arc::new(settings.profile.clone());
        // Values are never logged: credentials and cli.env may hold secrets.
        let mut extra_env = settings.auth_env.clone();
        extra_env.extend(settings.env.clone());
        let workspace = Workspace::new(profile.clone(), settings.state_dir.clone(), extra_env);
        let model_label = if settings.model.is_empty() {
            profile.name.clone()
        } else {
            settings.model.clone()
        };
        Ok(Self {
            model_label,
            slots: Arc::new(Semaphore::new(settings.max_concurrent.max(1))),
            rate_limit: compile(&profile.rate_limit_patterns),
            auth_error: compile(&profile.auth_error_patterns),
            profile,
            workspace,
            settings,
        })
    }

    pub fn settings(&self) -> &CliAgentSettings {
        &self.settings
    }

    pub fn profile(&self) -> &CliProfile {
        &self.profile
    }

    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// The CLI's executable: `binary` as a path when it has a `/`, else
    /// found on the `PATH` the CLI itself gets.
    pub fn binary(&self) -> Result<PathBuf, CliAgentError> {
        let binary = self.profile.binary.trim();
        let path_var = self
            .settings
            .env
            .get("PATH")
            .cloned()
            .or_else(|| std::env::var("PATH").ok())
            .unwrap_or_default();
        find_executable(binary, &path_var)
    }

    /// Runs the CLI with `args` in a scratch directory of `seat`, with the
    /// same isolation as a completion (for `version`, `status`, `doctor`).
    pub(crate) async fn run_plain(
        &self,
        seat: &str,
        args: &[String],
        stdin: Option<&str>,
    ) -> Result<process::Finished, CliAgentError> {
        let binary = self.binary()?;
        let lease = self.workspace.acquire(seat)?;
        let args = self.fill(args, "", &lease);
        self.run(&binary, &args, stdin, &lease).await
    }

    async fn run(
        &self,
        binary: &Path,
        args: &[String],
        stdin: Option<&str>,
        lease: &SeatLease,
    ) -> Result<process::Finished, CliAgentError> {
        process::run(Invocation {
            program: binary,
            args,
            env: &lease.env,
            cwd: &lease.work,
            stdin,
            timeout: self.settings.timeout,
        })
        .await
        .map_err(|e| match e {
            RunError::Spawn(binary, source) => CliAgentError::Spawn { binary, source },
            RunError::TimedOut => CliAgentError::Timeout {
                binary: self.profile.binary.clone(),
                timeout: self.settings.timeout,
            },
        })
    }

    fn fill(&self, args: &[String], prompt: &str, lease: &SeatLease) -> Vec<String> {
        let home = lease.home.display().to_string();
        args.iter()
            .map(|a| {
                a.replace(MODEL_PLACEHOLDER, &self.settings.model)
                    .replace(HOME_PLACEHOLDER, &home)
                    .replace(PROMPT_PLACEHOLDER, prompt)
            })
            .collect()
    }

    fn completion_args(&self, prompt: &str, lease: &SeatLease) -> Vec<String> {
        let mut args = self.profile.complete_args.clone();
        if !self.settings.model.trim().is_empty() {
            args.extend(self.profile.model_args.iter().cloned());
        }
        let argv = self.profile.prompt_via == PromptVia::Argv;
        if argv && !args.iter().any(|a| a.contains(PROMPT_PLACEHOLDER)) {
            args.push(PROMPT_PLACEHOLDER.to_owned());
        }
        self.fill(&args, if argv { prompt } else { "" }, lease)
    }

    fn matches(patterns: &[Regex], text: &str) -> bool {
        patterns.iter().any(|p| p.is_match(text))
    }

    /// The typed error of a run that failed.
    fn failure(&self, status: String, text: &str, stderr: &str) -> CliAgentError {
        let said = if stderr.trim().is_empty() {
            text
        } else {
            stderr
        };
        let combined = format!("{text}\n{stderr}");
        let binary = self.profile.binary.clone();
        if Self::matches(&self.rate_limit, &combined) {
            CliAgentError::UsageLimit {
                binary,
                excerpt: excerpt(said, EXCERPT_CHARS),
            }
        } else if Self::matches(&self.auth_error, &combined) {
            CliAgentError::LoggedOut {
                agent: self.profile.name.clone(),
                provider: self.settings.provider.clone(),
                excerpt: excerpt(said, EXCERPT_CHARS),
            }
        } else {
            CliAgentError::Failed {
                binary,
                status,
                excerpt: excerpt(said, EXCERPT_CHARS),
            }
        }
    }

    async fn complete_inner(
        &self,
        request: &CompletionRequest,
    ) -> Result<Completion, CliAgentError> {
        let prompt = render_prompt(request);
        let binary = self.binary()?;
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| CliAgentError::Config {
                message: "the provider is shut down".into(),
            })?;
        let lease = self.workspace.acquire(&current_seat())?;
        let args = self.completion_args(&prompt, &lease);
        let stdin = (self.profile.prompt_via == PromptVia::Stdin).then_some(prompt.as_str());
        tracing::debug!(
            provider = %self.settings.provider,
            agent = %self.profile.name,
            seat = %lease.seat,
            prompt_chars = prompt.len(),
            tools = request.tools.len(),
            "cli-agent call"
        );
        let finished = self.run(&binary, &args, stdin, &lease).await?;
        drop(lease);

        let decoded = decode(&self.profile, &finished.stdout);
        if !finished.success() || decoded.failed {
            return Err(self.failure(finished.status(), &decoded.text, &finished.stderr));
        }
        if decoded.text.trim().is_empty() {
            return Err(if finished.stderr.trim().is_empty() {
                CliAgentError::BadOutput {
                    binary: self.profile.binary.clone(),
                    reason: if finished.stdout.trim().is_empty() {
                        "it printed nothing".into()
                    } else {
                        format!(
                            "none of text_paths holds text in: {}",
                            excerpt(&finished.stdout, 200)
                        )
                    },
                }
            } else {
                self.failure(finished.status(), "", &finished.stderr)
            });
        }
        let (content, tool_calls) = if offered_tools(request).is_empty() {
            (decoded.text.clone(), Vec::new())
        } else {
            parse_envelope(&decoded.text)
        };
        // A spent window is reported as prose on a clean exit. Only a short
        // reply outside the reply format counts: an answer that merely
        // discusses rate limits is longer, and a model that wrote the
        // envelope was plainly not refused.
        let enveloped = !tool_calls.is_empty() || content.trim() != decoded.text.trim();
        if !enveloped
            && decoded.text.trim().chars().count() <= LIMIT_NOTICE_MAX_CHARS
            && Self::matches(&self.rate_limit, &decoded.text)
        {
            return Err(CliAgentError::UsageLimit {
                binary: self.profile.binary.clone(),
                excerpt: excerpt(&decoded.text, EXCERPT_CHARS),
            });
        }
        let estimate = |text: &str| u64::try_from(text.len().div_ceil(4)).unwrap_or(u64::MAX);
        let usage = Usage {
            input_tokens: decoded.input_tokens.unwrap_or_else(|| estimate(&prompt)),
            output_tokens: decoded
                .output_tokens
                .unwrap_or_else(|| estimate(&decoded.text)),
            cache_read_tokens: decoded.cache_read_tokens.unwrap_or(0),
        };
        Ok(Completion {
            content,
            tool_calls,
            usage,
            model: self.model_label.clone(),
            provider: self.settings.provider.clone(),
        })
    }
}

#[async_trait]
impl LlmProvider for CliAgentProvider {
    fn name(&self) -> &str {
        &self.settings.provider
    }

    fn model(&self) -> &str {
        &self.model_label
    }

    /// One CLI run. `temperature` and `max_tokens` are not sent: the CLIs
    /// take neither.
    async fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError> {
        self.complete_inner(request)
            .await
            .map_err(|source| LlmError::CliAgent {
                provider: self.settings.provider.clone(),
                source,
            })
    }
}

/// `binary` as an executable file: a path when it holds a `/`, else the
/// first match on `path_var`.
pub fn find_executable(binary: &str, path_var: &str) -> Result<PathBuf, CliAgentError> {
    if binary.contains('/') {
        let path = PathBuf::from(binary);
        if !path.exists() {
            return Err(CliAgentError::NotInstalled {
                binary: binary.to_owned(),
            });
        }
        return check_executable(&path).map(|()| path);
    }
    std::env::split_paths(path_var)
        .map(|dir| dir.join(binary))
        .find(|candidate| check_executable(candidate).is_ok())
        .ok_or_else(|| CliAgentError::NotInstalled {
            binary: binary.to_owned(),
        })
}

fn check_executable(path: &Path) -> Result<(), CliAgentError> {
    let not = |reason: &str| CliAgentError::NotExecutable {
        path: path.to_path_buf(),
        reason: reason.to_owned(),
    };
    let meta = std::fs::metadata(path).map_err(|e| not(&e.to_string()))?;
    if !meta.is_file() {
        return Err(not("not a file"));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o111 == 0 {
            return Err(not("no execute permission"));
        }
    }
    Ok(())
}
