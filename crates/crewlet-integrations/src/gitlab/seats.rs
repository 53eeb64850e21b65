//! What the company file says for GitLab provisioning: the instance, the
//! group and its access levels, the projects, the hook mode, and per agent
//! seat its username and where its token lives.

use crewlet_config::{Company, GitlabIntegration, Unit};
use crewlet_config::{has_references, interpolate};

pub use crate::provision::vars::EnvLookup;
use crate::provision::vars::whole_var;

/// GitLab's access levels by name.
const LEVELS: [(&str, u32); 6] = [
    ("guest", 10),
    ("planner", 15),
    ("reporter", 20),
    ("developer", 30),
    ("maintainer", 40),
    ("owner", 50),
];

/// `developer`, `Maintainer`, `30`: the number GitLab uses.
pub fn access_level(name: &str) -> Result<u32, String> {
    let name = name.trim();
    if let Ok(n) = name.parse::<u32>()
        && LEVELS.iter().any(|(_, l)| *l == n)
    {
        return Ok(n);
    }
    LEVELS
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, l)| *l)
        .ok_or_else(|| {
            format!(
                "`{name}` is not an access level (guest, planner, reporter, developer, maintainer, owner)"
            )
        })
}

/// The name of an access level number (the number itself when unknown).
pub fn level_name(level: u32) -> String {
    LEVELS
        .iter()
        .find(|(_, l)| *l == level)
        .map_or_else(|| level.to_string(), |(k, _)| (*k).to_owned())
}

/// Where a seat's `token` comes from.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum TokenRef {
    /// A whole `${VAR}`: provisioning fills the variable.
    Var(String),
    /// A literal token written in the file: managed by hand.
    Literal,
    /// Text around a `${VAR}`: usable at run time, not fillable.
    Mixed,
    /// No token.
    Empty,
}

impl std::fmt::Debug for TokenRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenRef::Var(v) => write!(f, "Var({v})"),
            TokenRef::Literal => f.write_str("Literal"),
            TokenRef::Mixed => f.write_str("Mixed"),
            TokenRef::Empty => f.write_str("Empty"),
        }
    }
}

impl TokenRef {
    pub(crate) fn read(raw: Option<&str>) -> TokenRef {
        let raw = raw.unwrap_or_default().trim();
        if raw.is_empty() {
            return TokenRef::Empty;
        }
        if !has_references(raw) {
            return TokenRef::Literal;
        }
        match whole_var(raw) {
            Some(var) => TokenRef::Var(var),
            None => TokenRef::Mixed,
        }
    }
}

/// How the webhook is set up (`provisioning.group_webhook`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookMode {
    /// A group hook; per-project hooks when the instance has no group hooks.
    Auto,
    /// A group hook only.
    Group,
    /// Per-project hooks only.
    Projects,
}

impl HookMode {
    fn read(raw: &str) -> Result<HookMode, String> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(HookMode::Auto),
            "true" | "yes" | "on" | "group" => Ok(HookMode::Group),
            "false" | "no" | "off" | "project" | "projects" => Ok(HookMode::Projects),
            other => Err(format!(
                "provisioning.group_webhook `{other}` is not auto, true or false"
            )),
        }
    }
}

/// The company-wide settings of a run, `${VAR}`s expanded (no `Debug`: it
/// holds the webhook token).
#[derive(Clone)]
pub(crate) struct Settings {
    pub url: String,
    pub group: String,
    pub projects: Vec<String>,
    /// Every unit's `gitlab_projects` (per-project hooks go there too).
    pub unit_projects: Vec<String>,
    pub hook_mode: HookMode,
    pub scopes: Vec<String>,
    /// `Err` says why there is none.
    pub webhook_token: Result<String, String>,
}

/// One agent seat with an `integrations.gitlab` account.
#[derive(Debug, Clone)]
pub(crate) struct SeatSpec {
    pub handle: String,
    /// The role's name: the account's display name.
    pub name: String,
    /// The explicit `user`, or `{username_prefix}{handle}`.
    pub username: Result<String, String>,
    /// The group access level (`access_levels[handle]` or `access_level`).
    pub level: Result<u32, String>,
    pub token: TokenRef,
    pub notes: Vec<String>,
}

fn expand(raw: &str, what: &str, env: EnvLookup<'_>) -> Result<String, String> {
    interpolate(raw, |v| env(v))
        .map(|s| s.trim().to_owned())
        .map_err(|e| format!("{what}: {e}"))
}

/// The company's GitLab block, when it is enabled and has a
/// `provisioning` block.
pub(crate) fn enabled(company: &Company) -> Result<&GitlabIntegration, String> {
    let gitlab = company
        .integrations
        .gitlab
        .as_ref()
        .filter(|g| g.enabled)
        .ok_or_else(|| "integrations.gitlab is not enabled in this company".to_owned())?;
    if gitlab.provisioning.is_none() {
        return Err(
            "integrations.gitlab.provisioning is not set: name at least the `group` the seats join"
                .to_owned(),
        );
    }
    Ok(gitlab)
}

pub(crate) fn settings(company: &Company, env: EnvLookup<'_>) -> Result<Settings, String> {
    let gitlab = enabled(company)?;
    let p = gitlab.provisioning.clone().unwrap_or_default();
    let url = expand(&gitlab.url, "integrations.gitlab.url", env)?;
    let group = expand(&p.group, "integrations.gitlab.provisioning.group", env)?;
    if group.is_empty() {
        return Err(
            "integrations.gitlab.provisioning.group is empty: name the group the seats join".into(),
        );
    }
    let mut projects = Vec::new();
    for raw in &p.projects {
        let project = expand(raw, "integrations.gitlab.provisioning.projects", env)?;
        push_unique(&mut projects, project);
    }
    let mut unit_projects = Vec::new();
    walk_units(&company.units, &mut |u| {
        for project in &u.integrations.gitlab_projects {
            push_unique(&mut unit_projects, project.trim().to_owned());
        }
    });
    let scopes: Vec<String> = p
        .token_scopes
        .iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    let webhook_token = match gitlab.webhook_token.as_deref().map(str::trim) {
        None | Some("") => Err(
            "integrations.gitlab.webhook_token is not set: the hook needs the token the API checks"
                .to_owned(),
        ),
        Some(raw) => expand(raw, "integrations.gitlab.webhook_token", env).and_then(|t| {
            if t.is_empty() {
                Err("integrations.gitlab.webhook_token is empty".to_owned())
            } else {
                Ok(t)
            }
        }),
    };
    Ok(Settings {
        url,
        group,
        projects,
        unit_projects,
        hook_mode: HookMode::read(&p.group_webhook)?,
        scopes: if scopes.is_empty() {
            vec!["api".to_owned()]
        } else {
            scopes
        },
        webhook_token,
    })
}

fn push_unique(list: &mut Vec<String>, item: String) {
    if !item.is_empty() && !list.iter().any(|p| p.eq_ignore_ascii_case(&item)) {
        list.push(item);
    }
}

fn walk_units(units: &[Unit], f: &mut dyn FnMut(&Unit)) {
    for u in units {
        f(u);
        walk_units(&u.children, f);
    }
}

/// The agent seats that have an `integrations.gitlab` block, in seat order.
pub(crate) fn seat_specs(company: &Company, env: EnvLookup<'_>) -> Vec<SeatSpec> {
    let Ok(gitlab) = enabled(company) else {
        return Vec::new();
    };
    let p = gitlab.provisioning.clone().unwrap_or_default();
    let org = company.organization();
    org.agents()
        .filter_map(|seat| {
            let account = seat.role.integrations.gitlab.as_ref()?;
            let mut notes = Vec::new();
            let username = match account.user.as_deref().map(str::trim) {
                None | Some("") => {
                    let name = format!("{}{}", p.username_prefix.trim(), seat.handle);
                    notes.push(format!(
                        "integrations.gitlab.user is not set: set it to `{name}` so mentions of @{name} reach the seat"
                    ));
                    Ok(name)
                }
                Some(raw) => {
                    if has_references(raw) {
                        notes.push(
                            "integrations.gitlab.user is a ${VAR}: the router matches mentions \
                             only against a literal username"
                                .to_owned(),
                        );
                    }
                    expand(raw, "integrations.gitlab.user", env)
                        .map(|u| u.trim_start_matches('@').to_owned())
                }
            };
            let level = p
                .access_levels
                .get(&seat.handle)
                .unwrap_or(&p.access_level);
            Some(SeatSpec {
                handle: seat.handle.clone(),
                name: seat.name.clone(),
                username,
                level: access_level(level),
                token: TokenRef::read(account.token.as_deref()),
                notes,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_levels_read_names_and_numbers() {
        assert_eq!(access_level("developer"), Ok(30));
        assert_eq!(access_level(" Maintainer "), Ok(40));
        assert_eq!(access_level("20"), Ok(20));
        assert!(access_level("21").is_err());
        assert!(access_level("admin").is_err());
        assert_eq!(level_name(40), "maintainer");
        assert_eq!(level_name(7), "7");
    }

    #[test]
    fn a_token_is_a_variable_a_literal_or_a_mix() {
        assert_eq!(
            TokenRef::read(Some(" ${GL_ENG} ")),
            TokenRef::Var("GL_ENG".into())
        );
        assert_eq!(TokenRef::read(Some("glpat-x")), TokenRef::Literal);
        assert_eq!(TokenRef::read(Some("x${A}")), TokenRef::Mixed);
        assert_eq!(TokenRef::read(None), TokenRef::Empty);
    }

    #[test]
    fn hook_modes() {
        assert_eq!(HookMode::read("auto"), Ok(HookMode::Auto));
        assert_eq!(HookMode::read("true"), Ok(HookMode::Group));
        assert_eq!(HookMode::read("false"), Ok(HookMode::Projects));
        assert!(HookMode::read("sometimes").is_err());
    }
}
