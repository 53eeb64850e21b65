//! Counterparty profiles over `counterparty_profiles`.

use async_trait::async_trait;
use crewlet_store::Database;
use tokio_postgres::Row;

use super::{decode, padded_opt, query, query_opt, sql_int};
use crate::error::MemoryError;
use crate::repos::CounterpartyProfiles;
use crate::rules::{profile_key, split_traits};
use crate::types::{CounterpartyProfile, Page, ProfileObservation};

const TABLE: &str = "counterparty_profiles";

const GET: &str = "SELECT observer, subject, platform, display_name, summary, traits,
            interaction_count, last_seen_at, created_at, updated_at
        FROM counterparty_profiles
        WHERE observer = $1 AND subject = $2 AND platform = $3";

/// One statement, so concurrent observations of one person each count.
/// `$6` holds the observed traits without nulls (merged over the stored
/// ones), `$7` the keys observed as null (removed).
const OBSERVE: &str = "INSERT INTO counterparty_profiles AS p
            (observer, subject, platform, display_name, summary, traits, embedding,
             interaction_count, last_seen_at)
        VALUES ($1, $2, $3, $4, COALESCE($5, ''), $6, $8, 1, $9)
        ON CONFLICT (observer, subject, platform) DO UPDATE SET
            display_name = COALESCE($4, p.display_name),
            summary = COALESCE($5, p.summary),
            traits = (CASE WHEN jsonb_typeof(p.traits) = 'object' THEN p.traits ELSE '{}'::jsonb END
                      || $6) - $7::text[],
            embedding = COALESCE($8, p.embedding),
            interaction_count = p.interaction_count + 1,
            last_seen_at = GREATEST(p.last_seen_at, $9),
            updated_at = now()
        RETURNING observer, subject, platform, display_name, summary, traits,
            interaction_count, last_seen_at, created_at, updated_at";

const ABOUT: &str = "SELECT observer, subject, platform, display_name, summary, traits,
            interaction_count, last_seen_at, created_at, updated_at
        FROM counterparty_profiles
        WHERE observer = $1 AND subject = $2
        ORDER BY platform COLLATE \"C\"";

const LIST: &str = "SELECT observer, subject, platform, display_name, summary, traits,
            interaction_count, last_seen_at, created_at, updated_at
        FROM counterparty_profiles
        WHERE observer = $1
        ORDER BY last_seen_at DESC NULLS LAST, subject COLLATE \"C\", platform COLLATE \"C\"
        OFFSET $2 LIMIT $3";

/// [`CounterpartyProfiles`] over PostgreSQL.
#[derive(Clone, Debug)]
pub struct PostgresCounterpartyProfiles {
    db: Database,
    dim: usize,
}

impl PostgresCounterpartyProfiles {
    /// `dim`: the embedding column's width.
    pub fn new(db: Database, dim: usize) -> Self {
        Self { db, dim }
    }
}

fn read(r: &Row) -> Result<CounterpartyProfile, MemoryError> {
    let d = decode(TABLE);
    Ok(CounterpartyProfile {
        observer: r.try_get("observer").map_err(&d)?,
        subject: r.try_get("subject").map_err(&d)?,
        platform: r.try_get("platform").map_err(&d)?,
        display_name: r.try_get("display_name").map_err(&d)?,
        summary: r.try_get("summary").map_err(&d)?,
        traits: r.try_get("traits").map_err(&d)?,
        interaction_count: r.try_get("interaction_count").map_err(&d)?,
        last_seen_at: r.try_get("last_seen_at").map_err(&d)?,
        created_at: r.try_get("created_at").map_err(&d)?,
        updated_at: r.try_get("updated_at").map_err(&d)?,
    })
}

#[async_trait]
impl CounterpartyProfiles for PostgresCounterpartyProfiles {
    async fn get(
        &self,
        observer: &str,
        subject: &str,
        platform: &str,
    ) -> Result<Option<CounterpartyProfile>, MemoryError> {
        let client = self.db.client().await?;
        query_opt(
            &client,
            &format!("reading the profile of `{subject}` on {platform} by `{observer}`"),
            GET,
            &[&observer, &subject, &platform],
        )
        .await?
        .map(|r| read(&r))
        .transpose()
    }

    async fn observe(&self, o: ProfileObservation) -> Result<CounterpartyProfile, MemoryError> {
        profile_key(&o.observer, &o.subject, &o.platform)?;
        let embedding = padded_opt("profile embedding", o.embedding.as_deref(), self.dim)?;
        let (set, removed) = split_traits(&o.traits);
        let client = self.db.client().await?;
        let rows = query(
            &client,
            &format!(
                "recording an observation of `{}` on {} by `{}`",
                o.subject, o.platform, o.observer
            ),
            OBSERVE,
            &[
                &o.observer,
                &o.subject,
                &o.platform,
                &o.display_name,
                &o.summary,
                &set,
                &removed,
                &embedding,
                &o.seen_at,
            ],
        )
        .await?;
        match rows.first() {
            Some(r) => read(r),
            None => {
                Err(crewlet_store::StoreError::decode(TABLE, "the upsert returned no row").into())
            }
        }
    }

    async fn about(
        &self,
        observer: &str,
        subject: &str,
    ) -> Result<Vec<CounterpartyProfile>, MemoryError> {
        let client = self.db.client().await?;
        let rows = query(
            &client,
            &format!("reading the profiles of `{subject}` by `{observer}`"),
            ABOUT,
            &[&observer, &subject],
        )
        .await?;
        rows.iter().map(read).collect()
    }

    async fn list(
        &self,
        observer: &str,
        page: Page,
    ) -> Result<Vec<CounterpartyProfile>, MemoryError> {
        let client = self.db.client().await?;
        let rows = query(
            &client,
            &format!("listing the profiles kept by `{observer}`"),
            LIST,
            &[&observer, &sql_int(page.offset), &sql_int(page.limit)],
        )
        .await?;
        rows.iter().map(read).collect()
    }
}
