use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use crewlet_core::{Category, Event, EventType};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

use crate::error::StoreError;

/// Page size when the query names none.
pub const DEFAULT_PAGE_SIZE: u32 = 50;
/// Largest page a query may ask for (larger asks are cut to this).
pub const MAX_PAGE_SIZE: u32 = 500;
/// Most events [`super::EventStore::by_trace`] returns.
pub const MAX_TRACE_EVENTS: usize = 500;

/// Where a page ended: the (timestamp, id) of its last (oldest) event. The
/// next page holds events strictly older in (timestamp, id) order. Shown as
/// `{unix micros}_{uuid}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    pub timestamp: DateTime<Utc>,
    pub id: Uuid,
}

impl Cursor {
    pub fn of(event: &Event) -> Self {
        Self {
            timestamp: event.timestamp,
            id: event.id,
        }
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}_{}",
            self.timestamp.timestamp_micros(),
            self.id.simple()
        )
    }
}

impl FromStr for Cursor {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| StoreError::invalid("cursor", format!("`{s}` {why}"));
        let (micros, id) = s
            .split_once('_')
            .ok_or_else(|| bad("is not `{micros}_{id}`"))?;
        let micros: i64 = micros.parse().map_err(|_| bad("has a bad timestamp"))?;
        let timestamp =
            DateTime::from_timestamp_micros(micros).ok_or_else(|| bad("is out of range"))?;
        let id = Uuid::parse_str(id).map_err(|_| bad("has a bad id"))?;
        Ok(Self { timestamp, id })
    }
}

impl Serialize for Cursor {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cursor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Filters for [`super::EventStore::recent`]; all optional, combined with AND.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventQuery {
    pub event_type: Option<EventType>,
    pub category: Option<Category>,
    pub agent_id: Option<String>,
    pub task_id: Option<String>,
    /// Inclusive lower bound on the timestamp.
    pub since: Option<DateTime<Utc>>,
    /// Exclusive upper bound on the timestamp.
    pub until: Option<DateTime<Utc>>,
    /// Page size: default 50, cut to 1..=500.
    pub limit: Option<u32>,
    /// Continue after this cursor (the `next` of the previous page).
    pub after: Option<Cursor>,
}

impl EventQuery {
    /// The page size actually used.
    pub fn page_size(&self) -> usize {
        let n = self
            .limit
            .unwrap_or(DEFAULT_PAGE_SIZE)
            .clamp(1, MAX_PAGE_SIZE);
        usize::try_from(n).unwrap_or(50)
    }

    /// Whether `event` passes every filter and lies after the cursor.
    pub fn matches(&self, event: &Event) -> bool {
        self.event_type
            .as_ref()
            .is_none_or(|t| *t == event.event_type)
            && self.category.as_ref().is_none_or(|c| *c == event.category)
            && self
                .agent_id
                .as_ref()
                .is_none_or(|a| event.agent_id.as_ref() == Some(a))
            && self
                .task_id
                .as_ref()
                .is_none_or(|t| event.task_id.as_ref() == Some(t))
            && self.since.is_none_or(|s| event.timestamp >= s)
            && self.until.is_none_or(|u| event.timestamp < u)
            && self.after.is_none_or(|c| Cursor::of(event) < c)
    }
}

/// One page of events, newest first; `next` is set when more may follow.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EventPage {
    pub events: Vec<Event>,
    pub next: Option<Cursor>,
}

impl EventPage {
    /// Sorts `candidates` newest first (they must already match the query,
    /// without duplicates) and cuts the page, setting `next` when more exist
    /// (`more` lets the caller say a source had more than it returned).
    pub fn from_sorted_candidates(mut candidates: Vec<Event>, size: usize, more: bool) -> Self {
        candidates.sort_by_key(|e| std::cmp::Reverse(Cursor::of(e)));
        let more = more || candidates.len() > size;
        candidates.truncate(size);
        let next = if more {
            candidates.last().map(Cursor::of)
        } else {
            None
        };
        Self {
            events: candidates,
            next,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_round_trips_through_text() -> Result<(), StoreError> {
        let c = Cursor {
            timestamp: DateTime::from_timestamp_micros(1_773_300_000_123_456).unwrap_or_default(),
            id: Uuid::now_v7(),
        };
        assert_eq!(c.to_string().parse::<Cursor>()?, c);
        assert!("nope".parse::<Cursor>().is_err());
        assert!("12_notauuid".parse::<Cursor>().is_err());
        Ok(())
    }

    #[test]
    fn page_size_defaults_and_is_capped() {
        let q = EventQuery::default();
        assert_eq!(q.page_size(), 50);
        let q = EventQuery {
            limit: Some(10_000),
            ..EventQuery::default()
        };
        assert_eq!(q.page_size(), 500);
        let q = EventQuery {
            limit: Some(0),
            ..EventQuery::default()
        };
        assert_eq!(q.page_size(), 1);
    }
}
