//! Who a seat is on each source, and what a unit or an org-wide seat owns:
//! the identities and ownership the [`NotificationRouter`](super::NotificationRouter)
//! matches notifications against.

use crewlet_config::{Seat, Unit, UnitIntegrations};
use crewlet_integrations::Source;

/// What a unit owns, for routing: its `integrations` and `slack_channel`.
#[derive(Debug, Clone, Default)]
pub(super) struct UnitOwns {
    pub(super) integrations: UnitIntegrations,
    pub(super) slack_channel: Option<String>,
}

pub(super) fn units_preorder(list: &[Unit], out: &mut Vec<UnitOwns>) {
    for u in list {
        out.push(UnitOwns {
            integrations: u.integrations.clone(),
            slack_channel: u.slack_channel.clone(),
        });
        units_preorder(&u.children, out);
    }
}

pub(super) fn same(a: &str, b: &str) -> bool {
    a.trim_start_matches('@')
        .eq_ignore_ascii_case(b.trim_start_matches('@'))
}

/// The identities a seat is known by on `source`.
pub(super) fn identities(seat: &Seat, source: Source) -> Vec<&str> {
    let r = &seat.role;
    let i = &r.integrations;
    let c = r.contact.as_ref();
    let mut out: Vec<Option<&str>> = Vec::new();
    match source {
        Source::Slack => {
            out.push(i.slack.as_ref().and_then(|s| s.bot_user_id.as_deref()));
            out.push(c.and_then(|c| c.slack_user_id.as_deref()));
        }
        Source::Github => {
            out.push(i.github.as_ref().and_then(|a| a.user.as_deref()));
            out.push(c.and_then(|c| c.github_login.as_deref()));
        }
        Source::Gitlab => {
            out.push(i.gitlab.as_ref().and_then(|a| a.user.as_deref()));
            out.push(c.and_then(|c| c.gitlab_username.as_deref()));
        }
        Source::Plane => {
            out.push(i.plane.as_ref().and_then(|a| a.user.as_deref()));
            out.push(c.and_then(|c| c.plane_user_id.as_deref()));
        }
        Source::Jira => {
            out.push(i.jira.as_ref().and_then(|a| a.user.as_deref()));
            out.push(c.and_then(|c| c.atlassian_account_id.as_deref()));
        }
        Source::Confluence => {
            out.push(i.confluence.as_ref().and_then(|a| a.user.as_deref()));
            out.push(c.and_then(|c| c.atlassian_account_id.as_deref()));
        }
    }
    out.push(c.and_then(|c| c.email.as_deref()));
    out.push(r.email.as_deref());
    if source != Source::Slack {
        // `@eng` in a comment names the seat by its handle.
        out.push(Some(seat.handle.as_str()));
    }
    out.into_iter()
        .flatten()
        // A `${VAR}` identity is not expanded here: it matches nobody.
        .filter(|s| !s.trim().is_empty() && !s.contains("${"))
        .collect()
}

/// The project, space or channel an org-wide seat owns on `source`.
pub(super) fn seat_owns(seat: &Seat, source: Source, project: &str) -> bool {
    let i = &seat.role.integrations;
    let owned = match source {
        Source::Jira => i.jira.as_ref().and_then(|j| j.project.as_deref()),
        Source::Plane => i.plane.as_ref().and_then(|p| p.project.as_deref()),
        Source::Confluence => i.confluence.as_ref().and_then(|c| c.space.as_deref()),
        _ => None,
    };
    owned.is_some_and(|p| !p.trim().is_empty() && p.eq_ignore_ascii_case(project))
}

pub(super) fn unit_owns(owns: &UnitOwns, source: Source, project: &str) -> bool {
    let u = &owns.integrations;
    let single = match source {
        Source::Slack => owns.slack_channel.as_deref(),
        Source::Jira => u.jira.as_ref().map(|j| j.project.as_str()),
        Source::Confluence => u.confluence.as_ref().map(|c| c.space.as_str()),
        Source::Plane => u.plane.as_ref().map(|p| p.project.as_str()),
        Source::Github | Source::Gitlab => None,
    };
    if single.is_some_and(|p| !p.trim().is_empty() && p.eq_ignore_ascii_case(project)) {
        return true;
    }
    let list = match source {
        Source::Slack => &u.slack_channels,
        Source::Github => &u.github_repositories,
        Source::Gitlab => &u.gitlab_projects,
        Source::Plane => &u.plane_projects,
        Source::Jira => &u.jira_projects,
        Source::Confluence => &u.confluence_spaces,
    };
    list.iter().any(|p| p.eq_ignore_ascii_case(project))
}
