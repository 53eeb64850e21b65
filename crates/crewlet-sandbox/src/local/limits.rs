//! What enforces a box's limits on this host, chosen once at start: cgroups
//! (v1 or a delegated v2 subtree), rlimits where the operator opted in and
//! no cgroup is writable, or nothing (then boxes with limits are refused).
//! The rest of the backend asks this module to make, pause, resume and kill
//! a box, and never cares which it is.

use std::fmt;
use std::path::PathBuf;

use super::cgroup::{BoxCgroup, CgroupHost};
use super::layout::BoxMeta;
use super::rlimit;
use crate::{Limits, Result, SandboxError};

/// How the local backend enforces limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LimitPolicy {
    /// Cgroups (v1 or v2), or no boxes with limits where none is writable.
    #[default]
    Cgroups,
    /// Cgroups where writable, else rlimits (weaker; the operator's opt-in).
    CgroupsElseRlimits,
    /// Rlimits even where cgroups are writable (to test the rlimit path).
    Rlimits,
}

/// What enforces the limits here, for the start log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enforcement {
    CgroupV1,
    /// A delegated cgroup v2 subtree at this directory.
    CgroupV2(PathBuf),
    /// Rlimits, with this many CPU seconds per process; the reason no
    /// cgroup is used.
    Rlimits {
        cpu_seconds: u64,
        why: String,
    },
    /// Nothing: boxes with limits are refused, for this reason.
    None(String),
}

impl fmt::Display for Enforcement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CgroupV1 => f.write_str("cgroup v1"),
            Self::CgroupV2(root) => write!(f, "cgroup v2 at {}", root.display()),
            Self::Rlimits { cpu_seconds, why } => write!(
                f,
                "rlimits (weaker: address space per process, processes per command and not for root, {cpu_seconds} CPU seconds per process, no OOM accounting), because {why}"
            ),
            Self::None(why) => write!(f, "none ({why})"),
        }
    }
}

/// The chosen enforcement.
pub(crate) struct Limiter {
    cgroups: Option<CgroupHost>,
    rlimits: bool,
    /// Why there are no cgroups, when there are none.
    why: Option<String>,
    cpu_seconds: u64,
}

impl Limiter {
    pub(crate) fn detect(
        policy: LimitPolicy,
        root: Option<&std::path::Path>,
        cpu_seconds: u64,
    ) -> Self {
        let found = match policy {
            LimitPolicy::Rlimits => {
                Err("cgroups are set aside (rlimits were asked for)".to_owned())
            }
            _ => CgroupHost::detect(root).map_err(|e| e.to_string()),
        };
        Self::choose(policy, found, cpu_seconds)
    }

    /// The enforcement for `policy` given what cgroup detection `found`.
    fn choose(
        policy: LimitPolicy,
        found: std::result::Result<CgroupHost, String>,
        cpu_seconds: u64,
    ) -> Self {
        let (cgroups, why) = match found {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(e)),
        };
        Self {
            rlimits: cgroups.is_none() && policy != LimitPolicy::Cgroups,
            cgroups,
            why,
            cpu_seconds: cpu_seconds.max(1),
        }
    }

    pub(crate) fn enforces(&self) -> bool {
        self.cgroups.is_some() || self.rlimits
    }

    pub(crate) fn enforcement(&self) -> Enforcement {
        let why = self.why.clone().unwrap_or_default();
        match (&self.cgroups, self.rlimits) {
            (Some(c), _) => match c.describe() {
                None => Enforcement::CgroupV1,
                Some(root) => Enforcement::CgroupV2(root),
            },
            (None, true) => Enforcement::Rlimits {
                cpu_seconds: self.cpu_seconds,
                why,
            },
            (None, false) => Enforcement::None(why),
        }
    }

    /// The box's cgroup, when this host has cgroups: it carries the limits,
    /// and even without limits it is how a box is killed and paused. Under
    /// rlimits, none: the limits are set when each command starts.
    pub(crate) fn make_box(&self, id: &str, limits: &Limits) -> Result<Option<BoxCgroup>> {
        match &self.cgroups {
            Some(host) => host.make_box(id, limits).map(Some),
            None if !limits.any() || self.rlimits => Ok(None),
            None => Err(SandboxError::Unavailable(
                self.why
                    .clone()
                    .unwrap_or_else(|| "resource limits: no cgroups".into()),
            )),
        }
    }

    /// The command line to run in the box: under rlimits (a box with limits
    /// and no cgroup), wrapped to set them first.
    pub(crate) fn argv(&self, meta: &BoxMeta, argv: &[String]) -> Vec<String> {
        if meta.cgroup.is_none() && meta.limits.any() {
            rlimit::wrap(&meta.limits, self.cpu_seconds, argv)
        } else {
            argv.to_vec()
        }
    }

    /// Pauses the box: its cgroup's freezer, else SIGSTOP to every process
    /// descended from its launchers (`roots`).
    pub(crate) async fn pause(&self, meta: &BoxMeta, roots: &[i32]) -> Result<()> {
        match &meta.cgroup {
            Some(cg) => cg.freeze(true).await,
            None => rlimit::stop(roots).await,
        }
    }

    pub(crate) async fn resume(&self, meta: &BoxMeta, roots: &[i32]) -> Result<()> {
        match &meta.cgroup {
            Some(cg) => cg.freeze(false).await,
            None => {
                rlimit::cont(roots);
                Ok(())
            }
        }
    }

    /// Kills every process of the box and removes its cgroup.
    pub(crate) async fn kill(&self, meta: &BoxMeta, roots: &[i32]) {
        rlimit::kill(roots);
        if let Some(cg) = &meta.cgroup {
            cg.kill(None).await;
            cg.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(limits: Limits) -> BoxMeta {
        BoxMeta {
            id: "sbx-1".into(),
            created_at: chrono::Utc::now(),
            network: crate::Network::None,
            limits,
            labels: Default::default(),
            cgroup: None,
        }
    }

    #[test]
    fn without_cgroups_limits_are_refused_unless_rlimits_were_accepted() {
        let small = Limits {
            memory_mb: Some(64),
            pids: Some(16),
            cpus: Some(1.0),
        };
        let none = Limiter::choose(
            LimitPolicy::Cgroups,
            Err("no cgroup v2 delegation".into()),
            60,
        );
        assert!(!none.enforces());
        assert_eq!(
            none.enforcement(),
            Enforcement::None("no cgroup v2 delegation".into())
        );
        let refused = none.make_box("sbx-1", &small).err().map(|e| e.to_string());
        assert!(
            refused
                .as_deref()
                .is_some_and(|e| e.contains("no cgroup v2 delegation")),
            "{refused:?}"
        );
        // A box without limits is still made, with nothing wrapped around it.
        assert!(matches!(none.make_box("sbx-2", &Limits::none()), Ok(None)));
        let argv = vec!["true".to_owned()];
        assert_eq!(none.argv(&meta(Limits::none()), &argv), argv);

        let opted = Limiter::choose(
            LimitPolicy::CgroupsElseRlimits,
            Err("no cgroup v2 delegation".into()),
            60,
        );
        assert!(opted.enforces());
        let shown = opted.enforcement().to_string();
        assert!(shown.starts_with("rlimits (weaker"), "{shown}");
        assert!(shown.contains("60 CPU seconds") && shown.contains("no cgroup v2 delegation"));
        assert!(matches!(opted.make_box("sbx-1", &small), Ok(None)));
        let wrapped = opted.argv(&meta(small), &argv);
        assert_eq!(
            &wrapped[3..],
            ["crewlet-limits", "65536", "16", "60", "true"]
        );
    }
}
