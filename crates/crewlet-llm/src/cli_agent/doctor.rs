//! `crewlet llm doctor`: is this provider ready for a turn?

use std::fmt::Write as _;
use std::path::Path;

use serde_json::json;

use super::{CliAgentProvider, with_seat};
use crate::{CompletionRequest, LlmProvider, Message, SystemBlock, ToolChoice, ToolSpec};

/// The seat the doctor's calls run as.
pub const DOCTOR_SEAT: &str = "_doctor";
/// The tool the smoke test asks the model to call.
const SMOKE_TOOL: &str = "crewlet_doctor_check";

/// What the doctor found about one provider.
#[derive(Clone, Debug)]
pub struct DoctorReport {
    pub provider: String,
    pub agent: String,
    /// The executable found, or why not.
    pub binary: Result<String, String>,
    pub version: Option<String>,
    pub verified_against: String,
    pub state_dir: String,
    pub login: super::LoginState,
    /// Credential files of this CLI in the machine's own home, not adopted.
    pub host_login: Vec<String>,
    pub reports_usage: bool,
    /// `None`: skipped.
    pub smoke: Option<Result<String, String>>,
    pub problems: Vec<String>,
}

impl DoctorReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// The report as aligned `key : value` lines.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut line = |k: &str, v: &str| {
            let _ = writeln!(out, "{k:<13}: {v}");
        };
        line("provider", &self.provider);
        line("cli agent", &self.agent);
        match &self.binary {
            Ok(path) => line("binary", path),
            Err(why) => line("binary", &format!("MISSING ({why})")),
        }
        line("version", self.version.as_deref().unwrap_or("(unknown)"));
        line("written for", &self.verified_against);
        line("state dir", &self.state_dir);
        line(
            "login",
            &match (self.login.files.is_empty(), self.login.token) {
                (true, false) => "none".to_owned(),
                (files, token) => {
                    let mut parts = Vec::new();
                    if !files {
                        parts.push(self.login.files.join(", "));
                    }
                    if token {
                        parts.push("token set".into());
                    }
                    parts.join("; ")
                }
            },
        );
        if !self.host_login.is_empty() {
            line(
                "host login",
                &format!("{} (not adopted)", self.host_login.join(", ")),
            );
        }
        line(
            "token usage",
            if self.reports_usage {
                "reported by the CLI"
            } else {
                "estimated (4 characters a token)"
            },
        );
        match &self.smoke {
            None => line("round trip", "skipped"),
            Some(Ok(detail)) => line("round trip", &format!("ok ({detail})")),
            Some(Err(why)) => line("round trip", &format!("FAILED: {why}")),
        }
        if self.problems.is_empty() {
            line("problems", "none");
        } else {
            out.push_str("problems:\n");
            for p in &self.problems {
                let _ = writeln!(out, "  - {p}");
            }
        }
        out
    }
}

impl CliAgentProvider {
    /// Checks the binary, its version, the login and, with `smoke`, one
    /// real completion that must come back as a parsed tool call. `home` is
    /// where to look for a login of the machine's own to suggest adopting.
    pub async fn doctor(&self, home: Option<&Path>, smoke: bool) -> DoctorReport {
        let name = &self.settings().provider;
        let profile = self.profile();
        let mut report = DoctorReport {
            provider: name.clone(),
            agent: profile.name.clone(),
            verified_against: profile.verified_against.clone(),
            state_dir: self.workspace().state_dir().display().to_string(),
            login: self.login_state(),
            reports_usage: profile.reports_usage(),
            binary: Err(String::new()),
            version: None,
            host_login: Vec::new(),
            smoke: None,
            problems: Vec::new(),
        };
        match self.binary() {
            Ok(path) => report.binary = Ok(path.display().to_string()),
            Err(e) => {
                report.binary = Err(e.to_string());
                report.problems.push(e.to_string());
                return report;
            }
        }
        match self
            .run_plain(DOCTOR_SEAT, &profile.version_args, None)
            .await
        {
            Ok(done) if done.success() => {
                let text = if done.stdout.trim().is_empty() {
                    &done.stderr
                } else {
                    &done.stdout
                };
                report.version = text
                    .lines()
                    .map(str::trim)
                    .find(|l| !l.is_empty())
                    .map(str::to_owned);
            }
            Ok(done) => report.problems.push(format!(
                "`{} {}` exited with {}",
                profile.binary,
                profile.version_args.join(" "),
                done.status()
            )),
            Err(e) => report.problems.push(e.to_string()),
        }
        if !report.login.logged_in() {
            report.host_login = home
                .map(|h| {
                    self.host_login_files(h)
                        .into_iter()
                        .map(|(rel, _)| rel)
                        .collect()
                })
                .unwrap_or_default();
            report.problems.push(if report.host_login.is_empty() {
                format!("no login: run `crewlet llm login {name}`")
            } else {
                format!(
                    "no login of its own, but this machine has one ({}): adopt it with `crewlet llm login {name} --from-host`",
                    report.host_login.join(", ")
                )
            });
        }
        if smoke {
            let result = self.smoke().await;
            // without a login the failure is already said above
            if let Err(why) = &result
                && report.login.logged_in()
            {
                report.problems.push(format!("round trip failed: {why}"));
            }
            report.smoke = Some(result);
        }
        report
    }

    async fn smoke(&self) -> Result<String, String> {
        let request = CompletionRequest {
            system: vec![SystemBlock::volatile(
                "You are checking that an automation harness works. Follow the reply format exactly.",
            )],
            messages: vec![Message::user(format!(
                "Call {SMOKE_TOOL} with ok set to true."
            ))],
            tools: vec![ToolSpec {
                name: SMOKE_TOOL.into(),
                description: "Reports that the reply format works.".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {"ok": {"type": "boolean"}},
                    "required": ["ok"]
                }),
            }],
            tool_choice: ToolChoice::Required,
            ..CompletionRequest::default()
        };
        let completion = with_seat(DOCTOR_SEAT, self.complete(&request))
            .await
            .map_err(|e| e.to_string())?;
        let names: Vec<&str> = completion
            .tool_calls
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        if names.contains(&SMOKE_TOOL) {
            Ok(format!(
                "{} in / {} out tokens",
                completion.usage.input_tokens, completion.usage.output_tokens
            ))
        } else if names.is_empty() {
            Err(format!(
                "no tool call could be read from the answer: {}",
                super::error::excerpt(&completion.content, 200)
            ))
        } else {
            Err(format!(
                "the model called {names:?} instead of {SMOKE_TOOL}"
            ))
        }
    }
}
