//! The scheduler: fires the company's cron schedules (units' and roles'
//! `schedules`) into seats' inboxes.
//!
//! Every engine process runs it. Each tick (`scheduling.tick_seconds`,
//! default 10 s) it computes the fire times of every enabled schedule that
//! fell in `(last tick, now]`, in the schedule's time zone, and claims each
//! `(scope, schedule, fire time, target seat)` in `scheduled_runs`; only the
//! process whose claim succeeds publishes the task, so two engines on one
//! database fire each time once. A unit schedule with `target: lead` goes to
//! the unit's (possibly inherited) lead, `target: each` to every agent seat
//! of the unit itself; a role schedule goes to the role. Human seats never
//! receive scheduled work.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use crewlet_config::{Company, Organization, Schedule, Seat};
use crewlet_core::{Event, EventType, TraceContext};
use crewlet_queue::EventQueue;
use crewlet_store::{Patience, ScheduledFire, ScheduledRuns, retry_transient};
use croner::Cron;
use serde_json::json;
use tracing::{debug, info, warn};

use crate::inbox::Inbox;
use crate::sink::publish_event;
use crate::task::{TaskRequest, derived_task_id};

/// Fires one schedule may produce in one tick (after a long pause the
/// scheduler catches up on at most this many per schedule).
const MAX_FIRES_PER_TICK: usize = 60;
/// How long claims are kept before they are pruned.
const CLAIM_RETENTION_DAYS: i64 = 7;
const EVENT_SOURCE: &str = "engine.scheduler";

/// A schedule's time zone: parsed by crewlet-config, so that validation
/// and the scheduler read a zone the same way.
pub use crewlet_config::Zone;

/// Fire times of `cron` in `(after, until]`, read in `zone`.
fn fires_in<Z: TimeZone>(
    cron: &Cron,
    zone: &Z,
    after: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Vec<DateTime<Utc>>
where
    Z::Offset: Copy,
{
    let start = after.with_timezone(zone);
    cron.iter_after(start)
        .map(|t| t.with_timezone(&Utc))
        .take_while(|t| *t <= until)
        .take(MAX_FIRES_PER_TICK)
        .collect()
}

/// One schedule with its recipients resolved.
#[derive(Debug, Clone)]
pub struct ScheduleEntry {
    /// `unit:{name}` or `role:{handle}`.
    pub scope: String,
    pub name: String,
    pub cron: Cron,
    pub zone: Zone,
    pub task: String,
    pub timeout_seconds: u64,
    /// Handles of the agent seats that receive it.
    pub targets: Vec<String>,
}

impl ScheduleEntry {
    /// Fire times in `(after, until]`.
    pub fn fires(&self, after: DateTime<Utc>, until: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        match &self.zone {
            Zone::Named(tz) => fires_in(&self.cron, tz, after, until),
            Zone::Fixed(offset) => fires_in(&self.cron, offset, after, until),
        }
    }
}

/// A task the scheduler published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiredTask {
    pub scope: String,
    pub schedule: String,
    pub fire_time: DateTime<Utc>,
    pub handle: String,
    pub task_id: String,
}

/// The company's schedules and where their fires are claimed.
pub struct Scheduler {
    entries: Vec<ScheduleEntry>,
    org: Arc<Organization>,
    queue: Arc<dyn EventQueue>,
    runs: Arc<dyn ScheduledRuns>,
    node: String,
}

impl Scheduler {
    /// Reads every enabled schedule of `company`. A schedule whose cron or
    /// time zone cannot be read is left out (and named in the returned
    /// problems); validation normally catches both first.
    pub fn new(
        company: &Company,
        org: Arc<Organization>,
        queue: Arc<dyn EventQueue>,
        runs: Arc<dyn ScheduledRuns>,
        node: impl Into<String>,
    ) -> (Self, Vec<String>) {
        let mut entries = Vec::new();
        let mut problems = Vec::new();
        let mut add = |scope: String, s: &Schedule, targets: Vec<String>| {
            if !s.enabled {
                return;
            }
            let cron = match Cron::from_str(&s.cron) {
                Ok(c) => c,
                Err(e) => {
                    problems.push(format!(
                        "{scope} schedule `{}`: cron `{}`: {e}",
                        s.name, s.cron
                    ));
                    return;
                }
            };
            let zone = match Zone::parse(company.schedule_timezone(s)) {
                Ok(z) => z,
                Err(e) => {
                    problems.push(format!("{scope} schedule `{}`: {e}", s.name));
                    return;
                }
            };
            if targets.is_empty() {
                problems.push(format!(
                    "{scope} schedule `{}` has no agent seat to run it",
                    s.name
                ));
                return;
            }
            entries.push(ScheduleEntry {
                scope,
                name: s.name.clone(),
                cron,
                zone,
                task: s.task.clone(),
                timeout_seconds: s.timeout_seconds,
                targets,
            });
        };
        for st in org.schedule_targets(company) {
            add(st.scope, st.schedule, st.targets);
        }
        let scheduler = Self {
            entries,
            org,
            queue,
            runs,
            node: node.into(),
        };
        (scheduler, problems)
    }

    pub fn entries(&self) -> &[ScheduleEntry] {
        &self.entries
    }

    /// Fires every schedule due in `(after, until]`: claims each fire and
    /// publishes the claimed ones. Returns what this process published.
    pub async fn fire_due(&self, after: DateTime<Utc>, until: DateTime<Utc>) -> Vec<FiredTask> {
        let mut fired = Vec::new();
        for entry in &self.entries {
            for at in entry.fires(after, until) {
                let label = at.format("%Y-%m-%dT%H:%MZ").to_string();
                // One exported root span per fire: the tasks it publishes are
                // emitted in it, so each target's turn nests under it.
                let fire_span = tracing::info_span!(
                    "schedule_fire",
                    schedule = %entry.name,
                    fire = %label
                );
                let trace = crewlet_telemetry::trace_context_of(&fire_span)
                    .unwrap_or_else(TraceContext::new_root);
                for handle in &entry.targets {
                    let Some(seat) = self.org.seat(handle) else {
                        continue;
                    };
                    let fire = ScheduledFire {
                        scope: entry.scope.clone(),
                        schedule_name: entry.name.clone(),
                        fire_label: label.clone(),
                        target: handle.clone(),
                    };
                    // Held while the database is down: the fire is late, not
                    // lost (the tick loop's window starts where this one ended).
                    let never = || false;
                    let claimed = retry_transient(
                        "claiming a schedule fire",
                        Patience::UNTIL_BACK,
                        &never,
                        || self.runs.claim(&fire, &self.node),
                    )
                    .await;
                    match claimed {
                        Ok(true) => {}
                        Ok(false) => {
                            debug!(schedule = %entry.name, scope = %entry.scope, at = %label, agent = %handle, "fire already claimed by another engine");
                            continue;
                        }
                        Err(e) => {
                            warn!(schedule = %entry.name, scope = %entry.scope, at = %label, error = %e, "the store refuses this schedule fire's claim; skipping it (at most once)");
                            continue;
                        }
                    }
                    let task_id = derived_task_id(&format!(
                        "{}:{}:{}:{}",
                        entry.scope, entry.name, label, handle
                    ));
                    if self.publish(entry, seat, &label, &task_id, trace).await {
                        fired.push(FiredTask {
                            scope: entry.scope.clone(),
                            schedule: entry.name.clone(),
                            fire_time: at,
                            handle: handle.clone(),
                            task_id,
                        });
                    }
                }
            }
        }
        fired
    }

    async fn publish(
        &self,
        entry: &ScheduleEntry,
        seat: &Seat,
        label: &str,
        task_id: &str,
        trace: TraceContext,
    ) -> bool {
        let mut request = TaskRequest::new(&seat.handle, "schedule", entry.task.clone());
        request.reason = Some(format!(
            "schedule {} ({}) fired at {label}",
            entry.name, entry.scope
        ));
        request.timeout_seconds = Some(entry.timeout_seconds);
        let posted = Inbox::new(self.queue.as_ref())
            .post(seat, task_id, &request, EVENT_SOURCE, Some(trace))
            .await;
        if let Err(e) = posted {
            warn!(schedule = %entry.name, agent = %seat.handle, error = %e.source, "cannot publish a scheduled task; this fire is lost");
            return false;
        }
        let fired = Event::new(EventType::ScheduleFired, EVENT_SOURCE)
            .with_summary(format!(
                "schedule {} fired for {} at {label}",
                entry.name, seat.handle
            ))
            .with_agent(seat.agent_id, seat.name.as_str())
            .with_task(task_id)
            .with_trace(trace.child())
            .with_agent_handle(seat.handle.as_str())
            .with_payload(json!({
                "scope": entry.scope,
                "schedule": entry.name,
                "fire_time": label,
                "handle": seat.handle,
                "task_id": task_id,
                "node": self.node,
            }));
        publish_event(self.queue.as_ref(), fired).await;
        info!(schedule = %entry.name, scope = %entry.scope, agent = %seat.handle, at = label, "schedule fired");
        true
    }

    /// Runs the tick loop until the task is aborted.
    /// In a fleet (`duties`), a tick fires only on the node holding the
    /// `scheduler` duty (the claims keep fires at most once either way).
    pub fn spawn(
        self: Arc<Self>,
        tick: Duration,
        duties: Option<crate::fleet::Duties>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let tick = tick.max(Duration::from_secs(1));
            let step = chrono::Duration::from_std(tick).unwrap_or(chrono::Duration::seconds(10));
            // A fire during the last tick before boot is still caught (claims dedupe).
            let mut last = Utc::now() - step;
            let mut interval = tokio::time::interval(tick);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut ticks: u64 = 0;
            loop {
                interval.tick().await;
                let now = Utc::now();
                if let Some(d) = &duties
                    && !d.hold(crate::fleet::duties::SCHEDULER).await
                {
                    continue;
                }
                if now > last {
                    self.fire_due(last, now).await;
                    last = now;
                }
                ticks += 1;
                if ticks % 360 == 1 {
                    let before = now - chrono::Duration::days(CLAIM_RETENTION_DAYS);
                    if let Err(e) = self.runs.prune(before).await {
                        debug!(error = %e, "cannot prune old schedule claims");
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use crewlet_queue::MemoryQueue;
    use crewlet_store::MemoryScheduledRuns;

    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .map(|d| d.with_timezone(&Utc))
            .unwrap_or_default()
    }

    #[test]
    fn zones_parse() {
        assert!(matches!(Zone::parse("UTC"), Ok(Zone::Named(_))));
        assert!(matches!(Zone::parse("Europe/Paris"), Ok(Zone::Named(_))));
        assert!(matches!(Zone::parse("+02:00"), Ok(Zone::Fixed(_))));
        assert!(Zone::parse("Mars/Olympus").is_err());
    }

    #[test]
    fn fire_times_follow_the_time_zone() {
        let cron = Cron::from_str("0 9 * * 1-5").unwrap_or_else(|e| panic!("{e}"));
        let entry = |zone| ScheduleEntry {
            scope: "unit:x".into(),
            name: "s".into(),
            cron: cron.clone(),
            zone,
            task: "t".into(),
            timeout_seconds: 1,
            targets: vec![],
        };
        // Thursday 2026-03-12: 09:00 in Paris is 08:00 UTC.
        let paris = entry(Zone::parse("Europe/Paris").unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(
            paris.fires(at("2026-03-12T07:00:00Z"), at("2026-03-12T09:00:00Z")),
            vec![at("2026-03-12T08:00:00Z")]
        );
        let utc = entry(Zone::parse("UTC").unwrap_or_else(|e| panic!("{e}")));
        // (after, until]: the end is included, the start is not.
        assert_eq!(
            utc.fires(at("2026-03-12T08:00:00Z"), at("2026-03-12T09:00:00Z")),
            vec![at("2026-03-12T09:00:00Z")]
        );
        assert!(
            utc.fires(at("2026-03-12T09:00:00Z"), at("2026-03-12T10:00:00Z"))
                .is_empty()
        );
        // Saturday: nothing
        assert!(
            utc.fires(at("2026-03-14T00:00:00Z"), at("2026-03-14T23:59:00Z"))
                .is_empty()
        );
    }

    const COMPANY: &str = r#"
name: Sched Co
roles:
  - name: CEO
    handle: ceo
    schedules:
      - {name: weekly, cron: "0 8 * * 1", task: plan the week}
units:
  - name: Eng
    lead: cto
    roles:
      - {name: CTO, handle: cto}
      - {name: Eng, handle: eng}
      - {name: Boss, handle: boss, kind: human, contact: {email: b@x.io}}
    schedules:
      - {name: standup, cron: "*/30 * * * *", task: post a standup, target: lead}
      - {name: tidy, cron: "0 * * * *", task: tidy up, target: each}
      - {name: off, cron: "0 * * * *", task: nothing, enabled: false}
"#;

    /// Claims that fail (database unavailable) a few times first.
    struct Flaky {
        inner: MemoryScheduledRuns,
        failures: std::sync::atomic::AtomicU32,
    }

    #[async_trait::async_trait]
    impl ScheduledRuns for Flaky {
        async fn claim(
            &self,
            fire: &ScheduledFire,
            by: &str,
        ) -> Result<bool, crewlet_store::StoreError> {
            use std::sync::atomic::Ordering;
            if self
                .failures
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(crewlet_store::StoreError::Unavailable {
                    what: "claim".into(),
                    reason: "restarting".into(),
                });
            }
            self.inner.claim(fire, by).await
        }
        async fn prune(
            &self,
            before: chrono::DateTime<Utc>,
        ) -> Result<u64, crewlet_store::StoreError> {
            self.inner.prune(before).await
        }
    }

    #[tokio::test]
    async fn a_fire_during_a_database_blip_is_late_not_lost() {
        let company = Company::from_yaml("t", &format!("{COMPANY}{}", crate::TEST_LLM))
            .unwrap_or_else(|e| panic!("{e}"));
        let runs = Arc::new(Flaky {
            inner: MemoryScheduledRuns::new(),
            failures: std::sync::atomic::AtomicU32::new(3),
        });
        let (s, _) = Scheduler::new(
            &company,
            Arc::new(company.organization()),
            Arc::new(MemoryQueue::standalone()),
            runs.clone(),
            "a",
        );
        let fired = s
            .fire_due(at("2026-03-12T09:59:00Z"), at("2026-03-12T10:00:00Z"))
            .await;
        let mut got: Vec<(String, String)> = fired
            .iter()
            .map(|f| (f.schedule.clone(), f.handle.clone()))
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                ("standup".to_owned(), "cto".to_owned()),
                ("tidy".to_owned(), "cto".to_owned()),
                ("tidy".to_owned(), "eng".to_owned()),
            ]
        );
    }

    #[tokio::test]
    async fn targets_and_at_most_once_claims() {
        let company = Company::from_yaml("t", &format!("{COMPANY}{}", crate::TEST_LLM))
            .unwrap_or_else(|e| panic!("{e}"));
        let org = Arc::new(company.organization());
        let runs: Arc<dyn ScheduledRuns> = Arc::new(MemoryScheduledRuns::new());
        let queue: Arc<dyn EventQueue> = Arc::new(MemoryQueue::standalone());
        let (a, problems) = Scheduler::new(&company, org.clone(), queue.clone(), runs.clone(), "a");
        assert!(problems.is_empty(), "{problems:?}");
        let (b, _) = Scheduler::new(&company, org, queue, runs, "b");
        let names: Vec<(&str, Vec<String>)> = a
            .entries()
            .iter()
            .map(|e| (e.name.as_str(), e.targets.clone()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("standup", vec!["cto".to_owned()]),
                ("tidy", vec!["cto".to_owned(), "eng".to_owned()]),
                ("weekly", vec!["ceo".to_owned()]),
            ]
        );
        let (from, to) = (at("2026-03-12T09:59:00Z"), at("2026-03-12T10:00:00Z"));
        let (fa, fb) = tokio::join!(a.fire_due(from, to), b.fire_due(from, to));
        let mut all: Vec<(String, String)> = fa
            .iter()
            .chain(fb.iter())
            .map(|f| (f.schedule.clone(), f.handle.clone()))
            .collect();
        all.sort();
        assert_eq!(
            all,
            vec![
                ("standup".to_owned(), "cto".to_owned()),
                ("tidy".to_owned(), "cto".to_owned()),
                ("tidy".to_owned(), "eng".to_owned()),
            ]
        );
    }
}
