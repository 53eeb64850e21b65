//! The counterparty profiles' in-memory twin.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::Utc;
use parking_lot::Mutex;

use crate::error::MemoryError;
use crate::repos::CounterpartyProfiles;
use crate::rules::{check_opt, merge_traits, micros, paged, profile_key};
use crate::types::{CounterpartyProfile, Page, ProfileObservation};

type Key = (String, String, String);

struct Row {
    profile: CounterpartyProfile,
    #[allow(dead_code)] // Kept like the column: no read compares profiles yet.
    embedding: Option<Vec<f32>>,
}

/// [`CounterpartyProfiles`] in process memory.
pub struct MemoryCounterpartyProfiles {
    dim: usize,
    rows: Mutex<BTreeMap<Key, Row>>,
}

impl Default for MemoryCounterpartyProfiles {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryCounterpartyProfiles {
    pub fn new() -> Self {
        Self::with_embedding_dim(super::default_dim())
    }

    /// A twin whose pretend embedding column is `dim` wide.
    pub fn with_embedding_dim(dim: usize) -> Self {
        Self {
            dim,
            rows: Mutex::new(BTreeMap::new()),
        }
    }
}

fn key(observer: &str, subject: &str, platform: &str) -> Key {
    (observer.to_owned(), subject.to_owned(), platform.to_owned())
}

#[async_trait]
impl CounterpartyProfiles for MemoryCounterpartyProfiles {
    async fn get(
        &self,
        observer: &str,
        subject: &str,
        platform: &str,
    ) -> Result<Option<CounterpartyProfile>, MemoryError> {
        Ok(self
            .rows
            .lock()
            .get(&key(observer, subject, platform))
            .map(|r| r.profile.clone()))
    }

    async fn observe(&self, o: ProfileObservation) -> Result<CounterpartyProfile, MemoryError> {
        profile_key(&o.observer, &o.subject, &o.platform)?;
        check_opt("profile embedding", o.embedding.as_deref(), self.dim)?;
        let at = micros(Utc::now());
        let seen = micros(o.seen_at);
        let mut rows = self.rows.lock();
        let row = rows
            .entry(key(&o.observer, &o.subject, &o.platform))
            .or_insert_with(|| Row {
                profile: CounterpartyProfile {
                    observer: o.observer.clone(),
                    subject: o.subject.clone(),
                    platform: o.platform.clone(),
                    display_name: None,
                    summary: String::new(),
                    traits: serde_json::Value::Object(serde_json::Map::new()),
                    interaction_count: 0,
                    last_seen_at: None,
                    created_at: at,
                    updated_at: at,
                },
                embedding: None,
            });
        let p = &mut row.profile;
        if o.display_name.is_some() {
            p.display_name = o.display_name;
        }
        if let Some(summary) = o.summary {
            p.summary = summary;
        }
        merge_traits(&mut p.traits, o.traits);
        p.interaction_count += 1;
        p.last_seen_at = Some(p.last_seen_at.map_or(seen, |t| t.max(seen)));
        p.updated_at = at;
        if o.embedding.is_some() {
            row.embedding = o.embedding;
        }
        Ok(row.profile.clone())
    }

    async fn about(
        &self,
        observer: &str,
        subject: &str,
    ) -> Result<Vec<CounterpartyProfile>, MemoryError> {
        // The map is ordered by (observer, subject, platform): by platform here.
        Ok(self
            .rows
            .lock()
            .values()
            .filter(|r| r.profile.observer == observer && r.profile.subject == subject)
            .map(|r| r.profile.clone())
            .collect())
    }

    async fn list(
        &self,
        observer: &str,
        page: Page,
    ) -> Result<Vec<CounterpartyProfile>, MemoryError> {
        let mut found: Vec<CounterpartyProfile> = self
            .rows
            .lock()
            .values()
            .filter(|r| r.profile.observer == observer)
            .map(|r| r.profile.clone())
            .collect();
        // Most recently seen first (never-seen last), then subject, platform;
        // the sort is stable over the map's (subject, platform) order.
        found.sort_by(|a, b| match (a.last_seen_at, b.last_seen_at) {
            (Some(x), Some(y)) => y.cmp(&x),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        });
        Ok(paged(found, page))
    }
}
