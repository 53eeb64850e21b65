//! `GET /schedules`: the company's schedules, whom each fires for and when
//! it fires next (read from the active revision, so the standalone API
//! answers the same as the engine's).

use std::str::FromStr;

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, TimeZone, Utc};
use crewlet_config::Zone;
use croner::Cron;
use serde::Serialize;
use utoipa::ToSchema;

use super::agents::not_configured;
use crate::auth::ReadAccess;
use crate::error::HttpResult;
use crate::state::ApiState;

/// One schedule.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleView {
    /// `unit:{name}` or `role:{handle}`.
    pub scope: String,
    pub name: String,
    pub cron: String,
    /// The zone the cron is read in (the schedule's, else the company's default).
    pub timezone: String,
    pub enabled: bool,
    /// What the seat is asked to do; content, left out for a caller
    /// without `read:content`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// Handles of the agent seats it fires for.
    pub targets: Vec<String>,
    pub timeout_seconds: u64,
    /// The next fire time; `null` when disabled, without targets, or when
    /// the cron or zone cannot be read.
    pub next_run: Option<DateTime<Utc>>,
}

fn next_in<Z: TimeZone>(cron: &Cron, zone: &Z, after: DateTime<Utc>) -> Option<DateTime<Utc>>
where
    Z::Offset: Copy,
{
    cron.iter_after(after.with_timezone(zone))
        .next()
        .map(|t| t.with_timezone(&Utc))
}

/// The first fire of `cron` after `after`, read in `timezone`.
pub fn next_fire(cron: &str, timezone: &str, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let cron = Cron::from_str(cron).ok()?;
    match Zone::parse(timezone).ok()? {
        Zone::Named(tz) => next_in(&cron, &tz, after),
        Zone::Fixed(offset) => next_in(&cron, &offset, after),
    }
}

/// Every schedule of the active company, with its next fire time (its
/// task's text needs `read:content`).
#[utoipa::path(get, path = "/schedules", tag = "org",
    responses(
        (status = 200, body = Vec<ScheduleView>,
            headers(("x-crewlet-content" = String, description = "`hidden`: content fields were left out (the caller lacks `read:content`); `shown`: nothing was"))),
        (status = 401, body = crate::error::ErrorBody),
        (status = 503, description = "no company yet (Retry-After: 15)", body = crate::error::ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn schedules(
    ReadAccess(caller): ReadAccess,
    State(state): State<ApiState>,
) -> HttpResult<axum::response::Response> {
    let snapshot = state.snapshot().ok_or_else(not_configured)?;
    let now = Utc::now();
    let list = snapshot
        .org
        .schedule_targets(&snapshot.company)
        .into_iter()
        .map(|st| {
            let s = st.schedule;
            let timezone = snapshot.company.schedule_timezone(s).to_owned();
            let next_run = (s.enabled && !st.targets.is_empty())
                .then(|| next_fire(&s.cron, &timezone, now))
                .flatten();
            ScheduleView {
                scope: st.scope,
                name: s.name.clone(),
                cron: s.cron.clone(),
                timezone,
                enabled: s.enabled,
                task: caller.content.then(|| s.task.clone()),
                targets: st.targets,
                timeout_seconds: s.timeout_seconds,
                next_run,
            }
        })
        .collect::<Vec<_>>();
    Ok(axum::response::IntoResponse::into_response((
        crate::content::header(caller.content),
        Json(list),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_fire_is_read_in_the_schedules_zone() {
        let after = Utc
            .with_ymd_and_hms(2026, 12, 2, 7, 30, 0)
            .single()
            .unwrap_or_else(|| panic!("a valid time"));
        // 09:00 in Paris is 08:00 UTC in December.
        let next = next_fire("0 9 * * *", "Europe/Paris", after);
        assert_eq!(
            next.map(|t| t.to_rfc3339()),
            Some("2026-12-02T08:00:00+00:00".into())
        );
        assert_eq!(
            next_fire("0 9 * * *", "+02:00", after).map(|t| t.to_rfc3339()),
            Some("2026-12-03T07:00:00+00:00".into())
        );
        assert_eq!(next_fire("not a cron", "UTC", after), None);
        assert_eq!(next_fire("0 9 * * *", "Mars/Olympus", after), None);
    }
}
