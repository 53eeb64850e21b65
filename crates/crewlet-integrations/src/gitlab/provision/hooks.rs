//! The webhook plan: one hook on the group (or one per project when the
//! instance has no group hooks, or `group_webhook: false`), found by its
//! URL, created when missing, updated when it lacks an event Crewlet routes.

use super::super::client::{GitlabClient, Hook, Space};
use super::super::seats::{HookMode, Settings};
use super::{HookAction, HookPlan, Plan};

/// The webhook(s): one on the group, or one per project.
pub(super) async fn plan_hooks(
    admin: &GitlabClient,
    settings: &Settings,
    plan: &mut Plan,
    rewrite: bool,
) -> Vec<HookPlan> {
    let token = settings.webhook_token.clone();
    let url = plan.hook_url.clone();
    if matches!(settings.hook_mode, HookMode::Auto | HookMode::Group) {
        let (group, id) = (plan.group.clone(), plan.group_id);
        match admin.hooks(Space::Group, id).await {
            Ok(hooks) => {
                let action = hook_action(&hooks, &url, &token, rewrite, &mut plan.notes);
                return vec![HookPlan {
                    space: Space::Group,
                    path: group,
                    action,
                    id,
                }];
            }
            Err(e)
                if settings.hook_mode == HookMode::Auto
                    && matches!(e.status(), Some(403 | 404)) =>
            {
                plan.notes.push(format!(
                    "group hooks are not available here ({e}; a GitLab Premium feature): \
                     one hook per project instead"
                ));
            }
            Err(e) => {
                return vec![HookPlan {
                    space: Space::Group,
                    path: group,
                    action: HookAction::Fail(format!("cannot read the group's hooks: {e}")),
                    id,
                }];
            }
        }
    }
    let mut paths: Vec<String> = settings.projects.clone();
    for p in &settings.unit_projects {
        if !paths.iter().any(|q| q.eq_ignore_ascii_case(p)) {
            paths.push(p.clone());
        }
    }
    if paths.is_empty() {
        plan.notes.push(
            "no project to put a hook on: list them in provisioning.projects or a unit's \
             gitlab_projects"
                .into(),
        );
    }
    let mut out = Vec::new();
    for path in paths {
        let known = plan
            .projects
            .iter()
            .find(|(p, _)| *p == path)
            .map(|(_, id)| *id);
        let id = match known {
            Some(id) => Ok(id),
            None => admin
                .namespace(Space::Project, &path)
                .await
                .map(|p| p.id)
                .map_err(|e| format!("cannot look up project {path}: {e}")),
        };
        let (id, action) = match id {
            Err(why) => (0, HookAction::Fail(why)),
            Ok(id) => match admin.hooks(Space::Project, id).await {
                Ok(hooks) => (
                    id,
                    hook_action(&hooks, &url, &token, rewrite, &mut plan.notes),
                ),
                Err(e) => (id, HookAction::Fail(format!("cannot read its hooks: {e}"))),
            },
        };
        out.push(HookPlan {
            space: Space::Project,
            path,
            action,
            id,
        });
    }
    out
}

fn hook_action(
    hooks: &[Hook],
    url: &str,
    token: &Result<String, String>,
    rewrite: bool,
    notes: &mut Vec<String>,
) -> HookAction {
    if let Err(why) = token {
        return HookAction::Fail(why.clone());
    }
    let same = |h: &&Hook| h.url.trim().trim_end_matches('/') == url;
    let matching: Vec<&Hook> = hooks.iter().filter(same).collect();
    if matching.len() > 1 {
        notes.push(format!(
            "{} hooks post to {url}: each event arrives once per hook; delete the extra ones",
            matching.len()
        ));
    }
    let Some(hook) = matching.first() else {
        return HookAction::Create;
    };
    let missing = hook.missing_events();
    if !missing.is_empty() {
        HookAction::Update {
            hook_id: hook.id,
            why: format!("it does not send {}", missing.join(", ")),
        }
    } else if rewrite {
        HookAction::Update {
            hook_id: hook.id,
            why: "rewrite its token".into(),
        }
    } else {
        HookAction::Keep
    }
}
