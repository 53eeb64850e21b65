//! Which agent seats each schedule of the company fires for: a unit's
//! schedule goes to every agent seat of the unit itself (`target: each`)
//! or to its effective lead (`target: lead`); a role's to that seat. The
//! engine's scheduler fires these; the API lists them.

use super::Organization;
use crate::{Company, Schedule, ScheduleTarget, SeatKind, Unit};

/// One schedule with the agent seats it fires for.
#[derive(Debug, Clone)]
pub struct ScheduleTargets<'a> {
    /// `unit:{name}` or `role:{handle}`.
    pub scope: String,
    pub schedule: &'a Schedule,
    /// Handles of the agent seats that receive it (empty: nobody would).
    pub targets: Vec<String>,
}

fn units_preorder<'a>(list: &'a [Unit], out: &mut Vec<&'a Unit>) {
    for u in list {
        out.push(u);
        units_preorder(&u.children, out);
    }
}

impl Organization {
    /// Every schedule of `company` (enabled or not), units first in tree
    /// order, then roles, with their targets resolved in this organization
    /// (which must be `company`'s).
    pub fn schedule_targets<'a>(&'a self, company: &'a Company) -> Vec<ScheduleTargets<'a>> {
        let agent = |h: &str| {
            self.seat(h)
                .filter(|s| s.kind == SeatKind::Agent)
                .map(|s| s.handle.clone())
        };
        let mut out = Vec::new();
        let mut configs = Vec::new();
        units_preorder(&company.units, &mut configs);
        for (unit, config) in self.units().iter().zip(configs) {
            for s in &config.schedules {
                let targets = match s.target {
                    ScheduleTarget::Lead => {
                        unit.lead.as_deref().and_then(agent).into_iter().collect()
                    }
                    ScheduleTarget::Each => unit.seats.iter().filter_map(|h| agent(h)).collect(),
                };
                out.push(ScheduleTargets {
                    scope: format!("unit:{}", unit.name),
                    schedule: s,
                    targets,
                });
            }
        }
        for seat in self.seats() {
            for s in &seat.role.schedules {
                out.push(ScheduleTargets {
                    scope: format!("role:{}", seat.handle),
                    schedule: s,
                    targets: agent(&seat.handle).into_iter().collect(),
                });
            }
        }
        out
    }
}
