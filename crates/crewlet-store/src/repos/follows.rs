//! Chat threads an agent follows (`chat_thread_follows`): a reply in a
//! followed thread wakes the agent without a mention.

use parking_lot::Mutex;
use std::collections::BTreeSet;

use async_trait::async_trait;

use crate::db::Database;
use crate::error::{StoreError, describe, query_err};

/// One thread on one chat backend (`slack`, ...).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadRef {
    pub backend: String,
    pub channel_id: String,
    pub thread_id: String,
}

impl ThreadRef {
    pub fn new(
        backend: impl Into<String>,
        channel_id: impl Into<String>,
        thread_id: impl Into<String>,
    ) -> Self {
        Self {
            backend: backend.into(),
            channel_id: channel_id.into(),
            thread_id: thread_id.into(),
        }
    }
}

#[async_trait]
pub trait ThreadFollows: Send + Sync {
    /// `true` when the agent was not following the thread before.
    async fn follow(&self, agent_handle: &str, thread: &ThreadRef) -> Result<bool, StoreError>;
    /// `true` when the agent was following the thread.
    async fn unfollow(&self, agent_handle: &str, thread: &ThreadRef) -> Result<bool, StoreError>;
    async fn is_following(
        &self,
        agent_handle: &str,
        thread: &ThreadRef,
    ) -> Result<bool, StoreError>;
    /// Handles following the thread, sorted.
    async fn followers(&self, thread: &ThreadRef) -> Result<Vec<String>, StoreError>;
}

#[derive(Debug, Default)]
pub struct MemoryThreadFollows {
    follows: Mutex<BTreeSet<(ThreadRef, String)>>,
}

impl MemoryThreadFollows {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, BTreeSet<(ThreadRef, String)>> {
        self.follows.lock()
    }
}

#[async_trait]
impl ThreadFollows for MemoryThreadFollows {
    async fn follow(&self, agent_handle: &str, thread: &ThreadRef) -> Result<bool, StoreError> {
        Ok(self
            .lock()
            .insert((thread.clone(), agent_handle.to_owned())))
    }

    async fn unfollow(&self, agent_handle: &str, thread: &ThreadRef) -> Result<bool, StoreError> {
        Ok(self
            .lock()
            .remove(&(thread.clone(), agent_handle.to_owned())))
    }

    async fn is_following(
        &self,
        agent_handle: &str,
        thread: &ThreadRef,
    ) -> Result<bool, StoreError> {
        Ok(self
            .lock()
            .contains(&(thread.clone(), agent_handle.to_owned())))
    }

    async fn followers(&self, thread: &ThreadRef) -> Result<Vec<String>, StoreError> {
        Ok(self
            .lock()
            .iter()
            .filter(|(t, _)| t == thread)
            .map(|(_, h)| h.clone())
            .collect())
    }
}

#[derive(Clone, Debug)]
pub struct PostgresThreadFollows {
    db: Database,
}

impl PostgresThreadFollows {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

#[async_trait]
impl ThreadFollows for PostgresThreadFollows {
    async fn follow(&self, agent_handle: &str, thread: &ThreadRef) -> Result<bool, StoreError> {
        let client = self.db.client().await?;
        let n = client
            .execute(
                "INSERT INTO chat_thread_follows (backend, agent_handle, channel_id, thread_id)
                 VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                &[
                    &thread.backend,
                    &agent_handle,
                    &thread.channel_id,
                    &thread.thread_id,
                ],
            )
            .await
            .map_err(query_err(format!(
                "following a thread for `{agent_handle}`"
            )))?;
        Ok(n == 1)
    }

    async fn unfollow(&self, agent_handle: &str, thread: &ThreadRef) -> Result<bool, StoreError> {
        let client = self.db.client().await?;
        let n = client
            .execute(
                "DELETE FROM chat_thread_follows
                 WHERE backend = $1 AND agent_handle = $2 AND channel_id = $3 AND thread_id = $4",
                &[
                    &thread.backend,
                    &agent_handle,
                    &thread.channel_id,
                    &thread.thread_id,
                ],
            )
            .await
            .map_err(query_err(format!(
                "unfollowing a thread for `{agent_handle}`"
            )))?;
        Ok(n == 1)
    }

    async fn is_following(
        &self,
        agent_handle: &str,
        thread: &ThreadRef,
    ) -> Result<bool, StoreError> {
        let client = self.db.client().await?;
        let row = client
            .query_opt(
                "SELECT 1 FROM chat_thread_follows
                 WHERE backend = $1 AND agent_handle = $2 AND channel_id = $3 AND thread_id = $4",
                &[
                    &thread.backend,
                    &agent_handle,
                    &thread.channel_id,
                    &thread.thread_id,
                ],
            )
            .await
            .map_err(query_err("reading thread follows"))?;
        Ok(row.is_some())
    }

    async fn followers(&self, thread: &ThreadRef) -> Result<Vec<String>, StoreError> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                "SELECT agent_handle FROM chat_thread_follows
                 WHERE backend = $1 AND channel_id = $2 AND thread_id = $3
                 ORDER BY agent_handle",
                &[&thread.backend, &thread.channel_id, &thread.thread_id],
            )
            .await
            .map_err(query_err("reading thread followers"))?;
        rows.iter()
            .map(|r| {
                r.try_get(0)
                    .map_err(|e| StoreError::decode("chat_thread_follows", describe(&e)))
            })
            .collect()
    }
}
