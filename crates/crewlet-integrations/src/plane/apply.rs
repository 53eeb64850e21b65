//! Carrying out a provisioning [`Plan`]: projects first, then memberships,
//! then the webhook. Each change stands alone: one failing is reported and
//! the rest go on.

use std::collections::HashMap;
use std::fmt;

use super::client::PlaneClient;
use super::provision::{MemberState, Plan, ProjectState, WebhookPlan, role_number};
use crate::provision::envfile::TokenSink;

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Changes made, one line each.
    pub done: Vec<String>,
    /// Changes that failed (or could not be tried), one line each.
    pub failed: Vec<String>,
    pub notes: Vec<String>,
    /// The variable the webhook's secret was written to.
    pub secret_recorded: Option<String>,
}

impl Report {
    pub fn failed(&self) -> bool {
        !self.failed.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.done {
            writeln!(f, "  done: {d}")?;
        }
        for d in &self.failed {
            writeln!(f, "  FAILED: {d}")?;
        }
        for n in &self.notes {
            writeln!(f, "  note: {n}")?;
        }
        write!(
            f,
            "{} changed, {} failed",
            self.done.len(),
            self.failed.len()
        )
    }
}

/// Makes the changes of `plan` as the operator `client`; `sink` receives
/// a webhook secret Plane generated; `progress` hears of each change.
pub async fn apply(
    plan: &Plan,
    client: &PlaneClient,
    sink: &mut dyn TokenSink,
    progress: &mut dyn FnMut(&str),
) -> Report {
    let mut report = Report::default();
    let mut say = |report: &mut Report, ok: bool, line: String| {
        progress(&line);
        if ok {
            report.done.push(line);
        } else {
            report.failed.push(line);
        }
    };
    // Project identifier -> (id, member user ids when it was just created).
    let mut ids: HashMap<String, (String, Vec<String>)> = HashMap::new();
    for p in &plan.projects {
        match &p.state {
            ProjectState::Exists { id } => {
                ids.insert(p.identifier.clone(), (id.clone(), Vec::new()));
            }
            ProjectState::Create => match client.create_project(&p.identifier, &p.identifier).await
            {
                Ok(created) => {
                    // The creator is a member already; so may others be.
                    let members = client
                        .project_members(&created.id)
                        .await
                        .unwrap_or_default();
                    ids.insert(p.identifier.clone(), (created.id, members));
                    say(
                        &mut report,
                        true,
                        format!("project {} created", p.identifier),
                    );
                }
                Err(e) => say(&mut report, false, format!("project {}: {e}", p.identifier)),
            },
        }
    }
    for m in &plan.members {
        match &m.state {
            MemberState::Exists => {}
            MemberState::Fail(why) => {
                say(
                    &mut report,
                    false,
                    format!("{} in {}: {why}", m.handle, m.project),
                );
            }
            MemberState::Add => {
                let Some((id, already)) = ids.get(&m.project) else {
                    say(
                        &mut report,
                        false,
                        format!("{} in {}: the project does not exist", m.handle, m.project),
                    );
                    continue;
                };
                if already.iter().any(|u| u.eq_ignore_ascii_case(&m.user_id)) {
                    continue;
                }
                let role = role_number(&m.role).unwrap_or(15);
                match client.add_project_member(id, &m.user_id, role).await {
                    Ok(()) => say(
                        &mut report,
                        true,
                        format!("{} added to {} as {}", m.handle, m.project, m.role),
                    ),
                    Err(e) => say(
                        &mut report,
                        false,
                        format!("{} in {}: {e}", m.handle, m.project),
                    ),
                }
            }
        }
    }
    match &plan.webhook {
        WebhookPlan::NotManaged(_) | WebhookPlan::Ok { .. } => {}
        WebhookPlan::Blocked(why) => say(&mut report, false, format!("webhook: {why}")),
        WebhookPlan::Update { id, to, .. } => match client.update_webhook(id, to).await {
            Ok(_) => say(
                &mut report,
                true,
                format!("webhook pointed at {to} and active"),
            ),
            Err(e) => say(&mut report, false, format!("webhook {to}: {e}")),
        },
        WebhookPlan::Create { url, secret } => {
            let offered = secret.as_ref().map(|s| s.0.as_str());
            match client.create_webhook(url, offered).await {
                Err(e) => say(&mut report, false, format!("webhook {url}: {e}")),
                Ok(hook) => {
                    say(&mut report, true, format!("webhook {url} created"));
                    match (hook.secret_key.as_deref(), offered) {
                        (Some(got), Some(ours)) if got == ours => {}
                        (Some(got), _) => match plan.secret_var.as_deref() {
                            Some(var) => match sink.record(var, got) {
                                Ok(()) => {
                                    report.secret_recorded = Some(var.to_owned());
                                    say(&mut report, true, format!("webhook secret Plane generated written to {var}"));
                                }
                                Err(e) => say(&mut report, false, format!("webhook secret: {e}")),
                            },
                            None => report.notes.push(
                                "Plane generated the webhook's secret itself and webhook_secret is not one ${VAR}: it cannot be recorded; delete the hook in Plane, make webhook_secret a ${VAR} and run again".into(),
                            ),
                        },
                        (None, Some(_)) => {}
                        (None, None) => report.notes.push(
                            "Plane did not return the webhook's secret: copy it from Plane's webhook settings into webhook_secret".into(),
                        ),
                    }
                }
            }
        }
    }
    report.notes.extend(plan.notes.iter().cloned());
    report
}
