//! The skills' in-memory twin.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use uuid::Uuid;

use crate::error::MemoryError;
use crate::repos::Skills;
use crate::rules::{
    check, check_opt, cosine, micros, require_text, skill_body, skill_cap, skill_conflict,
    skill_not_found,
};
use crate::types::{NewSkill, Scored, Skill, SkillChange, SkillLimits, SkillState, SkillVersion};

struct Row {
    skill: Skill,
    embedding: Option<Vec<f32>>,
    /// Archived versions, oldest first.
    versions: Vec<SkillVersion>,
}

/// [`Skills`] in process memory. One lock over everything, as the SQL
/// writes run in one transaction each.
pub struct MemorySkills {
    dim: usize,
    rows: Mutex<HashMap<(String, String), Row>>,
}

impl Default for MemorySkills {
    fn default() -> Self {
        Self::new()
    }
}

impl MemorySkills {
    pub fn new() -> Self {
        Self::with_embedding_dim(super::default_dim())
    }

    /// A twin whose pretend embedding column is `dim` wide.
    pub fn with_embedding_dim(dim: usize) -> Self {
        Self {
            dim,
            rows: Mutex::new(HashMap::new()),
        }
    }
}

fn key(agent_handle: &str, name: &str) -> (String, String) {
    (agent_handle.to_owned(), name.to_owned())
}

fn now() -> DateTime<Utc> {
    micros(Utc::now())
}

#[async_trait]
impl Skills for MemorySkills {
    async fn create(&self, skill: NewSkill, limits: SkillLimits) -> Result<Skill, MemoryError> {
        require_text("skill agent handle", &skill.agent_handle)?;
        require_text("skill name", &skill.name)?;
        skill_body(&skill.name, &skill.body, limits)?;
        check_opt("skill embedding", skill.embedding.as_deref(), self.dim)?;
        let mut rows = self.rows.lock();
        if rows.contains_key(&key(&skill.agent_handle, &skill.name)) {
            return Err(skill_conflict(&skill.agent_handle, &skill.name));
        }
        let live = rows
            .values()
            .filter(|r| {
                r.skill.agent_handle == skill.agent_handle && r.skill.state != SkillState::Archived
            })
            .count();
        if live >= limits.max_per_agent {
            return Err(skill_cap(&skill.agent_handle, limits));
        }
        let at = now();
        let created = Skill {
            id: Uuid::now_v7(),
            agent_handle: skill.agent_handle,
            name: skill.name,
            description: skill.description,
            body: skill.body,
            tool_sequence: skill.tool_sequence,
            state: SkillState::Active,
            version: 1,
            use_count: 0,
            last_used_at: None,
            created_at: at,
            updated_at: at,
        };
        rows.insert(
            key(&created.agent_handle, &created.name),
            Row {
                skill: created.clone(),
                embedding: skill.embedding,
                versions: Vec::new(),
            },
        );
        Ok(created)
    }

    async fn get(&self, agent_handle: &str, name: &str) -> Result<Option<Skill>, MemoryError> {
        Ok(self
            .rows
            .lock()
            .get(&key(agent_handle, name))
            .map(|r| r.skill.clone()))
    }

    async fn list(
        &self,
        agent_handle: &str,
        states: &[SkillState],
    ) -> Result<Vec<Skill>, MemoryError> {
        let mut found: Vec<Skill> = self
            .rows
            .lock()
            .values()
            .filter(|r| {
                r.skill.agent_handle == agent_handle
                    && (states.is_empty() || states.contains(&r.skill.state))
            })
            .map(|r| r.skill.clone())
            .collect();
        found.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(found)
    }

    async fn update(
        &self,
        agent_handle: &str,
        name: &str,
        change: SkillChange,
        limits: SkillLimits,
    ) -> Result<Skill, MemoryError> {
        skill_body(name, &change.body, limits)?;
        check_opt("skill embedding", change.embedding.as_deref(), self.dim)?;
        let mut rows = self.rows.lock();
        let row = rows
            .get_mut(&key(agent_handle, name))
            .ok_or_else(|| skill_not_found(agent_handle, name))?;
        let at = now();
        row.versions.push(SkillVersion {
            skill_id: row.skill.id,
            version: row.skill.version,
            description: row.skill.description.clone(),
            body: row.skill.body.clone(),
            change_note: change.change_note,
            created_at: at,
        });
        let excess = row.versions.len().saturating_sub(limits.max_versions);
        row.versions.drain(..excess);
        if let Some(description) = change.description {
            row.skill.description = description;
        }
        row.skill.body = change.body;
        if change.embedding.is_some() {
            row.embedding = change.embedding;
        }
        row.skill.version += 1;
        row.skill.updated_at = at;
        Ok(row.skill.clone())
    }

    async fn versions(
        &self,
        agent_handle: &str,
        name: &str,
    ) -> Result<Vec<SkillVersion>, MemoryError> {
        let rows = self.rows.lock();
        let row = rows
            .get(&key(agent_handle, name))
            .ok_or_else(|| skill_not_found(agent_handle, name))?;
        Ok(row.versions.iter().rev().cloned().collect())
    }

    async fn record_use(
        &self,
        agent_handle: &str,
        name: &str,
        at: DateTime<Utc>,
    ) -> Result<Skill, MemoryError> {
        let mut rows = self.rows.lock();
        let row = rows
            .get_mut(&key(agent_handle, name))
            .ok_or_else(|| skill_not_found(agent_handle, name))?;
        row.skill.use_count += 1;
        let at = micros(at);
        row.skill.last_used_at = Some(row.skill.last_used_at.map_or(at, |t| t.max(at)));
        Ok(row.skill.clone())
    }

    async fn set_state(
        &self,
        agent_handle: &str,
        name: &str,
        state: SkillState,
    ) -> Result<Skill, MemoryError> {
        let mut rows = self.rows.lock();
        let row = rows
            .get_mut(&key(agent_handle, name))
            .ok_or_else(|| skill_not_found(agent_handle, name))?;
        row.skill.state = state;
        row.skill.updated_at = now();
        Ok(row.skill.clone())
    }

    async fn similar(
        &self,
        agent_handle: &str,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<Scored<Skill>>, MemoryError> {
        check("skill query vector", query, self.dim)?;
        let mut scored: Vec<Scored<Skill>> = self
            .rows
            .lock()
            .values()
            .filter(|r| r.skill.agent_handle == agent_handle && r.skill.state == SkillState::Active)
            .filter_map(|r| {
                r.embedding.as_ref().map(|e| Scored {
                    score: cosine(query, e),
                    item: r.skill.clone(),
                })
            })
            .collect();
        scored.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.item.name.cmp(&b.item.name))
        });
        scored.truncate(limit);
        Ok(scored)
    }
}
