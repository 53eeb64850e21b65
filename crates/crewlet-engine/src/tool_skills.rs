//! The company's tool skills, kept in the turn engine's
//! [`ToolSkills`] and read from a [`SkillSource`]: the Tool Skills space
//! of the company's Confluence, else the Tool Skills project of its Plane
//! (the same backend as the knowledge search), or a folder given to the
//! builder.
//!
//! - **Boot.** The first walk runs during boot for at most
//!   [`BOOT_WALK_LIMIT`]; one that fails or takes longer is retried in the
//!   background, 5 attempts from 5 s apart, doubling.
//! - **Afterwards** the container is walked again every
//!   [`SkillSyncOptions::resync_every`] (5 minutes by default): pages
//!   edited, added or removed take effect at the next walk, and a page that
//!   stopped being a valid skill is dropped rather than kept at its last
//!   good text.
//! - A walk that fails never empties the registry: a partial listing could
//!   otherwise delete skills that still exist.
//! - `skill_variables` values are expanded (`${ENV}`) once at boot; a skill
//!   referring to a variable that is not set is logged
//!   (`skill_variable_unresolved`).

use std::sync::Arc;
use std::time::Duration;

use crewlet_config::Company;
use crewlet_integrations::knowledge::{
    ConfluenceSkills, DirSkills, PlaneSkills, SkillSource, SkillWalk,
    import::DEFAULT_SKILLS_CONTAINER,
};
use crewlet_turn::{ToolSkill, ToolSkills};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::engine::EnvLookup;

/// Longest the boot waits for the first walk.
pub const BOOT_WALK_LIMIT: Duration = Duration::from_secs(5);
/// Background retries of a failed boot walk.
const BOOT_RETRIES: u32 = 5;

/// Where and how often skills are read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillSyncOptions {
    /// Read skills from this folder instead of the knowledge backend
    /// (`crewlet run --tool-skills DIR`).
    pub dir: Option<std::path::PathBuf>,
    /// The Tool Skills space (Confluence) or project identifier (Plane);
    /// empty turns the sync off. Default: `CREWLET_TOOL_SKILLS_SPACE` /
    /// `CREWLET_TOOL_SKILLS_PROJECT` from the process environment, else
    /// `TS`.
    pub container: Option<String>,
    /// How often the container is walked again.
    pub resync_every: Duration,
    /// The wait before the first background retry of a failed boot walk
    /// (it doubles each time).
    pub retry_after: Duration,
}

impl Default for SkillSyncOptions {
    fn default() -> Self {
        Self {
            dir: None,
            container: None,
            resync_every: Duration::from_secs(300),
            retry_after: Duration::from_secs(5),
        }
    }
}

fn container(options: &SkillSyncOptions, variable: &str) -> Option<String> {
    let name = match &options.container {
        Some(c) => c.clone(),
        None => std::env::var(variable).unwrap_or_else(|_| DEFAULT_SKILLS_CONTAINER.to_owned()),
    };
    let name = name.trim().to_owned();
    (!name.is_empty()).then_some(name)
}

/// The company's skill source: its Confluence, else its Plane.
pub(crate) fn from_company(
    company: &Company,
    env: &EnvLookup,
    options: &SkillSyncOptions,
) -> Option<Arc<dyn SkillSource>> {
    if let Some(dir) = &options.dir {
        return Some(from_dir(dir.clone()));
    }
    if company.integrations.confluence.is_some() {
        let space = container(options, "CREWLET_TOOL_SKILLS_SPACE")?;
        return ConfluenceSkills::from_company(company, |v| env(v), &space)
            .map(|s| Arc::new(s) as Arc<dyn SkillSource>);
    }
    let project = container(options, "CREWLET_TOOL_SKILLS_PROJECT")?;
    PlaneSkills::from_company(company, |v| env(v), &project)
        .map(|s| Arc::new(s) as Arc<dyn SkillSource>)
}

/// A folder of skill files (`crewlet run --tool-skills DIR`).
pub fn from_dir(dir: impl Into<std::path::PathBuf>) -> Arc<dyn SkillSource> {
    Arc::new(DirSkills::new(dir))
}

/// The `skill_variables` of `company`, `${ENV}` expanded; a value that
/// cannot be expanded or is empty is left out (and logged).
pub(crate) fn variables(company: &Company, env: &EnvLookup) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, raw) in company.skill_variables.iter().flatten() {
        match crewlet_config::interpolate(raw, |v| env(v)) {
            Ok(value) if !value.is_empty() => out.push((name.clone(), value)),
            Ok(_) => warn!(variable = %name, "skill variable is empty: left out"),
            Err(e) => {
                warn!(variable = %name, error = %e, "skill variable cannot be expanded: left out")
            }
        }
    }
    out
}

/// The skills of a walk; invalid pages are logged and left out, and of
/// two pages with one key the later wins.
pub fn skills_of(walk: SkillWalk) -> Vec<ToolSkill> {
    for (source, why) in &walk.rejected {
        warn!(%source, reason = %why, "tool_skill_sync_decode_failed");
    }
    let mut out: Vec<ToolSkill> = Vec::new();
    for page in walk.pages {
        match ToolSkill::from_parts(page.frontmatter, &page.body, page.source.clone()) {
            Ok(skill) => {
                if let Some(i) = out.iter().position(|s| s.key == skill.key) {
                    warn!(key = %skill.key, first = %out[i].source, second = %skill.source, "two tool skills have one key: the second wins");
                    out.remove(i);
                }
                out.push(skill);
            }
            Err(why) => {
                warn!(source = %page.source, reason = %why, "tool_skill_sync_invalid_skill")
            }
        }
    }
    out
}

/// Walks `source` once into `skills`: the number of skills, or why the
/// walk failed (the registry is then left as it was).
pub async fn sync_once(source: &dyn SkillSource, skills: &ToolSkills) -> Result<usize, String> {
    let walk = source.walk().await?;
    let found = skills_of(walk);
    let n = found.len();
    skills.replace_all(found);
    for u in skills.unresolved_variables() {
        warn!(skill = %u.skill, variable = %u.variable, field = u.field, "skill_variable_unresolved");
    }
    Ok(n)
}

/// The boot walk (bounded by [`BOOT_WALK_LIMIT`]); whether it loaded.
pub(crate) async fn boot(source: &dyn SkillSource, skills: &ToolSkills) -> bool {
    match tokio::time::timeout(BOOT_WALK_LIMIT, sync_once(source, skills)).await {
        Ok(Ok(n)) => {
            info!(source = %source.describe(), skills = n, "tool skills loaded");
            true
        }
        Ok(Err(e)) => {
            warn!(source = %source.describe(), error = %e, "tool skills not loaded at boot; retrying in the background");
            false
        }
        Err(_) => {
            warn!(source = %source.describe(), "tool skills still loading after {BOOT_WALK_LIMIT:?}; retrying in the background");
            false
        }
    }
}

/// The background task: retries of a failed boot walk, then a walk every
/// `resync_every`.
pub(crate) fn spawn(
    source: Arc<dyn SkillSource>,
    skills: Arc<ToolSkills>,
    options: SkillSyncOptions,
    loaded: bool,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        if !loaded {
            let mut wait = options.retry_after;
            let mut done = false;
            for attempt in 1..=BOOT_RETRIES {
                tokio::time::sleep(wait).await;
                match sync_once(source.as_ref(), &skills).await {
                    Ok(n) => {
                        info!(source = %source.describe(), skills = n, attempt, "tool skills loaded");
                        done = true;
                        break;
                    }
                    Err(e) => {
                        warn!(source = %source.describe(), error = %e, attempt, "tool skills walk failed")
                    }
                }
                wait = wait.saturating_mul(2);
            }
            if !done {
                tracing::error!(source = %source.describe(), "tool_skill_resync_exhausted: the next periodic walk tries again");
            }
        }
        let mut every = tokio::time::interval(options.resync_every.max(Duration::from_secs(1)));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every.tick().await;
        loop {
            every.tick().await;
            if let Err(e) = sync_once(source.as_ref(), &skills).await {
                warn!(source = %source.describe(), error = %e, "tool skills re-walk failed: the skills stay as they were");
            }
        }
    })
}
