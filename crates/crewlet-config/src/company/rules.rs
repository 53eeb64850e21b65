//! Company-wide rules of the original engine that the schema cannot say:
//! identifiers in `skill_variables`, the single knowledge backend, what an
//! `enabled` integration needs and the scheduler's default time zone.

use super::Company;
use super::schedule::check_timezone;
use crate::check::Finding;
use crate::yaml::YamlPath;

pub(super) fn company_rules(company: &Company, out: &mut Vec<Finding>) {
    let root = YamlPath::root();
    if let Some(vars) = &company.skill_variables {
        for key in vars.keys() {
            if !is_identifier(key) {
                out.push(Finding::new(
                    root.key("skill_variables").key(key),
                    format!(
                        "skill variable `{key}` must be an identifier ([A-Za-z_][A-Za-z0-9_]*)"
                    ),
                ));
            }
        }
    }

    let i = &company.integrations;
    let at = root.key("integrations");
    let plane_on = i.plane.as_ref().is_some_and(|p| p.enabled);
    let knowledge = company.knowledge.as_ref();
    let spaces = knowledge.is_some_and(|k| !k.confluence_spaces.is_empty());
    let projects = knowledge.is_some_and(|k| !k.plane_projects.is_empty());
    if plane_on && i.confluence.is_some() {
        out.push(Finding::new(
            at.key("plane").key("enabled"),
            "integrations.confluence and an enabled integrations.plane cannot both be set: the knowledge backend is one or the other",
        ));
    }
    if plane_on && spaces {
        out.push(Finding::new(
            root.key("knowledge").key("confluence_spaces"),
            "knowledge.confluence_spaces scopes the Confluence backend; with integrations.plane enabled use knowledge.plane_projects",
        ));
    }
    if projects && i.confluence.is_some() {
        out.push(Finding::new(
            root.key("knowledge").key("plane_projects"),
            "knowledge.plane_projects scopes the Plane backend; with integrations.confluence use knowledge.confluence_spaces",
        ));
    } else if projects && !plane_on {
        out.push(Finding::new(
            root.key("knowledge").key("plane_projects"),
            "knowledge.plane_projects needs integrations.plane with `enabled: true`",
        ));
    }

    let blank = |v: &Option<String>| v.as_deref().is_none_or(|v| v.trim().is_empty());
    if let Some(g) = &i.github
        && g.enabled
        && blank(&g.webhook_secret)
    {
        out.push(Finding::new(
            at.key("github"),
            "github is enabled and needs `webhook_secret`",
        ));
    }
    if let Some(g) = &i.gitlab
        && g.enabled
        && blank(&g.signing_secret)
        && blank(&g.webhook_token)
    {
        out.push(Finding::new(
            at.key("gitlab"),
            "gitlab is enabled and needs `signing_secret` (or Crewlet's `webhook_token`)",
        ));
    }
    if let Some(p) = &i.plane
        && p.enabled
    {
        for (key, missing) in [
            ("workspace", blank(&p.workspace)),
            ("webhook_secret", blank(&p.webhook_secret)),
        ] {
            if missing {
                out.push(Finding::new(
                    at.key("plane"),
                    format!("plane is enabled and needs `{key}`"),
                ));
            }
        }
    }

    let tz = &company.scheduling.default_timezone;
    if let Err(e) = check_timezone(tz) {
        out.push(Finding::new(
            root.key("scheduling").key("default_timezone"),
            e,
        ));
    }
}

fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
