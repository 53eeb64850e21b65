//! The memory tools a learning seat gets. Each description's first
//! sentence says when to use it (Plan's slim catalogue shows only that).

use std::sync::Arc;

use async_trait::async_trait;
use chrono::Utc;
use crewlet_memory::{DiaryKind, EpisodeFilter, MemoryError, SkillChange};
use crewlet_turn::{SeatProfile, Tool, ToolAnnotations, ToolContext, ToolError, ToolOutput};
use serde_json::{Value, json};

use crate::learning::{DiaryNote, EventContext, Learning};
use crate::prefetch::{diary_candidates, filter_candidates, render_selected};
use crate::text::clip;

pub const REFLECT_AND_PERSIST: &str = "reflect_and_persist";
pub const REFRESH_MEMORY: &str = "refresh_memory";
pub const QUERY_EPISODES: &str = "query_episodes";
pub const USE_SKILL: &str = "use_skill";
pub const REFINE_SKILL: &str = "refine_skill";
pub const MARK_ONBOARDED: &str = "mark_onboarded";

impl Learning {
    /// The memory tools, to register for every seat that learns.
    pub fn tools(self: &Arc<Self>) -> Vec<Arc<dyn Tool>> {
        vec![
            Arc::new(ReflectAndPersist(self.clone())),
            Arc::new(RefreshMemory(self.clone())),
            Arc::new(QueryEpisodes(self.clone())),
            Arc::new(UseSkill(self.clone())),
            Arc::new(RefineSkill(self.clone())),
            Arc::new(MarkOnboarded(self.clone())),
        ]
    }

    fn seat_for(&self, ctx: &ToolContext) -> Result<SeatProfile, ToolError> {
        self.seat(&ctx.agent_handle)
            .filter(|_| self.is_enabled(&ctx.agent_handle))
            .ok_or_else(|| ToolError::Failed("memory is not enabled for this seat".into()))
    }
}

fn failed(e: MemoryError) -> ToolError {
    ToolError::Failed(format!("memory is unavailable right now: {e}"))
}

fn text_arg(args: &Value, key: &str) -> Result<String, ToolError> {
    match args.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        Some(Value::String(_)) | None | Some(Value::Null) => Err(ToolError::InvalidArguments(
            format!("`{key}` is required and must not be empty"),
        )),
        Some(other) => Err(ToolError::InvalidArguments(format!(
            "`{key}` must be a string, not {other}"
        ))),
    }
}

fn context(ctx: &ToolContext) -> EventContext<'_> {
    EventContext {
        task_id: Some(ctx.task_id.as_str()),
        trace: Some(ctx.trace),
    }
}

/// `reflect_and_persist {content, kind?, ttl_days?}`.
pub struct ReflectAndPersist(Arc<Learning>);

#[async_trait]
impl Tool for ReflectAndPersist {
    fn name(&self) -> &str {
        REFLECT_AND_PERSIST
    }

    fn description(&self) -> &str {
        "Use when you learn a fact worth remembering in later, different tasks (a preference, a convention, a schedule, a lasting state). \
         Saves it to your private memory. Write a short declarative fact, not an instruction to yourself. \
         `kind`: `long` (lasting, the default) or `short` (expires after `ttl_days`, default 30)."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "content": {"type": "string", "description": "The fact, e.g. `The deploy window is Tuesday`."},
                "kind": {"type": "string", "enum": ["long", "short"]},
                "ttl_days": {"type": "integer", "minimum": 1, "maximum": 180}
            },
            "required": ["content"]
        })
    }

    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::own_records()
    }

    async fn invoke(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let seat = self.0.seat_for(ctx)?;
        let content = text_arg(&args, "content")?;
        let kind = match args.get("kind").and_then(Value::as_str).unwrap_or("long") {
            "long" | "LONG" => DiaryKind::Long,
            "short" | "SHORT" => DiaryKind::Short,
            other => {
                return Err(ToolError::InvalidArguments(format!(
                    "`kind` must be `long` or `short`, not `{other}`"
                )));
            }
        };
        let ttl_days = args
            .get("ttl_days")
            .and_then(Value::as_u64)
            .and_then(|d| u32::try_from(d).ok());
        let note = DiaryNote {
            content: &content,
            kind,
            ttl_days,
            writer: REFLECT_AND_PERSIST,
            turn_id: Some(ctx.turn_id),
            context: context(ctx),
        };
        let written = self.0.write_diary(&seat, note).await.map_err(failed)?;
        self.0.memos.with(ctx.turn_id, |m| m.persisted = true);
        Ok(ToolOutput::text(if written.is_new() {
            "Saved to your memory."
        } else {
            "You already remember exactly this; nothing new was saved."
        }))
    }
}

/// `refresh_memory {context_hint}`.
pub struct RefreshMemory(Arc<Learning>);

#[async_trait]
impl Tool for RefreshMemory {
    fn name(&self) -> &str {
        REFRESH_MEMORY
    }

    fn description(&self) -> &str {
        "Use after your research shows what the task is really about, to search your private memory again with that context. \
         Returns the memories relevant to the task plus your hint. At most 3 different hints per turn; repeating a hint returns the same answer."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "context_hint": {"type": "string", "description": "What you now know the task is about, e.g. `release of billing-service v2 to production`."}
            },
            "required": ["context_hint"]
        })
    }

    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }

    async fn invoke(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let seat = self.0.seat_for(ctx)?;
        let hint = clip(&text_arg(&args, "context_hint")?, 1000);
        let max = self.0.settings.refresh_max_hints;
        let (task, sender, cached, used) = self.0.memos.with(ctx.turn_id, |m| {
            let cached = m
                .hints
                .iter()
                .find(|(h, _)| h.eq_ignore_ascii_case(&hint))
                .map(|(_, a)| a.clone());
            (m.task.clone(), m.sender.clone(), cached, m.hints.len())
        });
        if let Some(answer) = cached {
            return Ok(ToolOutput::text(answer));
        }
        if used >= max {
            return Err(ToolError::Failed(format!(
                "you already refreshed your memory {max} times in this turn; work with what you have"
            )));
        }
        let query_text = format!("{task}\n{hint}");
        let query = self.0.embed(&query_text).await;
        let candidates = diary_candidates(&self.0, &seat, &query_text, query.as_deref()).await;
        let answer = if candidates.is_empty() {
            "Your memory is empty.".to_owned()
        } else {
            let turn = (
                Some(ctx.task_id.as_str()),
                Some(ctx.turn_id),
                Some(ctx.trace),
            );
            match filter_candidates(
                &self.0,
                &seat,
                &query_text,
                sender.as_deref(),
                &candidates,
                turn,
                "memory_filter",
            )
            .await
            {
                None => {
                    return Err(ToolError::Failed(
                        "the memory filter is unavailable right now; try again later".into(),
                    ));
                }
                Some(picked) if picked.is_empty() => {
                    "Nothing in your memory is relevant to that.".to_owned()
                }
                Some(picked) => render_selected(&candidates, &picked, self.0.settings.digest_chars),
            }
        };
        self.0
            .memos
            .with(ctx.turn_id, |m| m.hints.push((hint, answer.clone())));
        Ok(ToolOutput::text(answer))
    }
}

/// `query_episodes {query, limit?, outcome?}`.
pub struct QueryEpisodes(Arc<Learning>);

#[async_trait]
impl Tool for QueryEpisodes {
    fn name(&self) -> &str {
        QUERY_EPISODES
    }

    fn description(&self) -> &str {
        "Use when the task looks like something you may have done before, to find your own past turns by meaning. \
         Returns each match's task, plan, tools, outcome and date. `limit` 1-20 (default 5); `outcome` filters by `done`, `direct` or `failed`."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20},
                "outcome": {"type": "string", "enum": ["done", "direct", "failed"]}
            },
            "required": ["query"]
        })
    }

    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }

    async fn invoke(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let seat = self.0.seat_for(ctx)?;
        let query = text_arg(&args, "query")?;
        let s = &self.0.settings;
        let limit = match args.get("limit") {
            None | Some(Value::Null) => s.episode_query_default,
            Some(v) => {
                let n = v.as_u64().ok_or_else(|| {
                    ToolError::InvalidArguments(format!("`limit` must be an integer, not {v}"))
                })?;
                usize::try_from(n)
                    .unwrap_or(usize::MAX)
                    .clamp(1, s.episode_query_max)
            }
        };
        let outcome = args.get("outcome").and_then(Value::as_str);
        let Some(vector) = self.0.embed(&query).await else {
            return Err(ToolError::Failed(
                "the embedder is unavailable right now".into(),
            ));
        };
        let hits = self
            .0
            .stores
            .episodes
            .similar(
                &seat.handle,
                &vector,
                EpisodeFilter {
                    outcome,
                    kind: None,
                },
                limit,
            )
            .await
            .map_err(failed)?;
        let list: Vec<Value> = hits
            .iter()
            .map(|h| {
                let e = &h.item;
                json!({
                    "task": clip(&e.task_summary, 500),
                    "plan": clip(&e.plan_summary, 500),
                    "tools": e.tool_sequence,
                    "skills_used": e.skills_used,
                    "outcome": e.review_outcome,
                    "kind": e.kind.as_str(),
                    "ended_at": e.ended_at.to_rfc3339(),
                    "similarity": (h.score * 1000.0).round() / 1000.0,
                })
            })
            .collect();
        Ok(ToolOutput::text(json!({"episodes": list}).to_string()))
    }
}

/// `use_skill {name}`.
pub struct UseSkill(Arc<Learning>);

#[async_trait]
impl Tool for UseSkill {
    fn name(&self) -> &str {
        USE_SKILL
    }

    fn description(&self) -> &str {
        "Use before following one of your synthesized skills, to load its full procedure. \
         Returns the skill's Markdown body; the skill's use is counted and it may be refined after the turn."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"]
        })
    }

    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations {
            read_only: true,
            destructive: false,
            idempotent: false,
            open_world: false,
        }
    }

    async fn invoke(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let seat = self.0.seat_for(ctx)?;
        let name = text_arg(&args, "name")?;
        let skill = match self
            .0
            .stores
            .skills
            .record_use(&seat.handle, &name, Utc::now())
            .await
        {
            Ok(s) => s,
            Err(MemoryError::NotFound(_)) => {
                return Err(ToolError::Failed(format!(
                    "you have no skill named `{name}`; the Plan prompt lists yours"
                )));
            }
            Err(e) => return Err(failed(e)),
        };
        self.0.memos.with(ctx.turn_id, |m| {
            if !m.skills_used.contains(&skill.name) {
                m.skills_used.push(skill.name.clone());
            }
        });
        Ok(ToolOutput::text(format!(
            "# Skill: {} (v{})\n{}\n\n{}",
            skill.name, skill.version, skill.description, skill.body
        )))
    }
}

/// `refine_skill {name, action, content, note?}`.
pub struct RefineSkill(Arc<Learning>);

#[async_trait]
impl Tool for RefineSkill {
    fn name(&self) -> &str {
        REFINE_SKILL
    }

    fn description(&self) -> &str {
        "Use when one of your synthesized skills proves wrong or incomplete, to fix it at once. \
         `action`: `append` adds `content` as a bullet, `replace_body` rewrites the whole body. The old version is kept."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "action": {"type": "string", "enum": ["append", "replace_body"]},
                "content": {"type": "string"},
                "note": {"type": "string", "description": "Why, kept with the old version."}
            },
            "required": ["name", "action", "content"]
        })
    }

    async fn invoke(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let seat = self.0.seat_for(ctx)?;
        let name = text_arg(&args, "name")?;
        let content = text_arg(&args, "content")?;
        let action = text_arg(&args, "action")?;
        let Some(skill) = self
            .0
            .stores
            .skills
            .get(&seat.handle, &name)
            .await
            .map_err(failed)?
        else {
            return Err(ToolError::Failed(format!(
                "you have no skill named `{name}`"
            )));
        };
        let note = args
            .get("note")
            .and_then(Value::as_str)
            .map_or_else(|| clip(&content, 300), |n| clip(n, 300));
        let body = match action.as_str() {
            "append" => format!("{}\n- {}\n", skill.body.trim_end(), content),
            "replace_body" => content.clone(),
            other => {
                return Err(ToolError::InvalidArguments(format!(
                    "`action` must be `append` or `replace_body`, not `{other}`"
                )));
            }
        };
        let embedding = if action == "replace_body" {
            self.0
                .embed(&format!("{}: {}\n{}", skill.name, skill.description, body))
                .await
        } else {
            None
        };
        let change = SkillChange {
            description: None,
            body,
            change_note: note,
            embedding,
        };
        match self
            .0
            .change_skill(
                &seat,
                &name,
                change,
                &action,
                REFINE_SKILL,
                Some(ctx.turn_id),
                context(ctx),
            )
            .await
        {
            Ok(s) => Ok(ToolOutput::text(format!(
                "Skill `{}` is now at version {}.",
                s.name, s.version
            ))),
            Err(MemoryError::Limit(m)) => Err(ToolError::Failed(m)),
            Err(e) => Err(failed(e)),
        }
    }
}

/// `mark_onboarded {}`.
pub struct MarkOnboarded(Arc<Learning>);

#[async_trait]
impl Tool for MarkOnboarded {
    fn name(&self) -> &str {
        MARK_ONBOARDED
    }

    fn description(&self) -> &str {
        "Use once you have got your bearings in a new seat (the First-turn onboarding note asks for it). \
         Records that you are onboarded for your current place in the org, so the note stops appearing."
    }

    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }

    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::own_records()
    }

    async fn invoke(&self, ctx: &ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        let seat = self.0.seat_for(ctx)?;
        let hash = self.0.chain_hash(&seat);
        self.0
            .stores
            .onboarding
            .mark(&seat.agent_id, &hash)
            .await
            .map_err(failed)?;
        let payload = crewlet_core::payload::AgentOnboarded {
            chain_hash: hash.clone(),
        };
        self.0
            .emit(
                &seat,
                context(ctx),
                format!("{} is onboarded", seat.handle),
                &payload,
            )
            .await;
        Ok(ToolOutput::text("Noted: you are onboarded."))
    }
}
