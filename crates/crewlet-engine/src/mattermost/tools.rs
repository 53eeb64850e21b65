//! The seats' Mattermost tools, each acting as the calling seat's own bot:
//! `mattermost_post` (a channel by name or id, or `@username` for a DM),
//! `mattermost_reply` (in the thread of a post) and `mattermost_react`.

use std::sync::Arc;

use async_trait::async_trait;
use crewlet_integrations::mattermost::MattermostError;
use crewlet_store::{ThreadFollows, ThreadRef};
use crewlet_turn::{Tool, ToolAnnotations, ToolContext, ToolError, ToolOutput, Visibility};
use serde_json::{Value, json};
use tracing::warn;

use super::inbox::BACKEND;
use super::{Mattermost, SeatBot};

/// The three tools, visible to the seats that have a bot.
pub(crate) fn tools(
    mm: &Arc<Mattermost>,
    follows: Arc<dyn ThreadFollows>,
) -> Vec<(Arc<dyn Tool>, Visibility)> {
    let seats = Visibility::roles(mm.bots.keys().cloned());
    let shared = Shared {
        mm: mm.clone(),
        follows,
    };
    vec![
        (
            Arc::new(Post(shared.clone())) as Arc<dyn Tool>,
            seats.clone(),
        ),
        (Arc::new(Reply(shared.clone())), seats.clone()),
        (Arc::new(React(shared)), seats),
    ]
}

#[derive(Clone)]
struct Shared {
    mm: Arc<Mattermost>,
    follows: Arc<dyn ThreadFollows>,
}

impl Shared {
    fn bot(&self, ctx: &ToolContext) -> Result<&Arc<SeatBot>, ToolError> {
        self.mm.bots.get(&ctx.agent_handle).ok_or_else(|| {
            ToolError::Failed(format!(
                "seat `{}` has no Mattermost bot (integrations.mattermost.bot_token)",
                ctx.agent_handle
            ))
        })
    }

    fn permalink(&self, post_id: &str) -> String {
        format!("{}/{}/pl/{post_id}", self.mm.base, self.mm.team)
    }

    /// The seat's reply in a thread: it follows the thread from now on.
    async fn follow(&self, handle: &str, channel_id: &str, root: &str) {
        let t = ThreadRef::new(BACKEND, channel_id, root);
        if let Err(e) = self.follows.follow(handle, &t).await {
            warn!(seat = handle, error = %e, "cannot record the thread follow");
        }
    }
}

fn failed(what: &str, e: MattermostError) -> ToolError {
    ToolError::Failed(format!("{what}: {e}"))
}

fn text_arg(args: &Value, name: &str) -> Result<String, ToolError> {
    match args.get(name) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        _ => Err(ToolError::InvalidArguments(format!(
            "`{name}` must be a non-empty string"
        ))),
    }
}

fn posted(shared: &Shared, p: &crewlet_integrations::mattermost::wire::Post) -> ToolOutput {
    ToolOutput::text(
        json!({"post_id": p.id, "channel_id": p.channel_id, "root_id": p.root_id,
               "url": shared.permalink(&p.id)})
        .to_string(),
    )
}

struct Post(Shared);

#[async_trait]
impl Tool for Post {
    fn name(&self) -> &str {
        "mattermost_post"
    }

    fn description(&self) -> &str {
        "Post a new message on Mattermost as yourself. `channel` is a channel name in the team \
         (`engineering` or `~engineering`), a channel id, or `@username` for a direct message."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "channel": {"type": "string", "description": "`engineering`, `~engineering`, a channel id, or `@username` for a DM."},
                "message": {"type": "string", "description": "Markdown text."}
            },
            "required": ["channel", "message"]
        })
    }

    async fn invoke(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let channel = text_arg(&args, "channel")?;
        let message = text_arg(&args, "message")?;
        let bot = self.0.bot(ctx)?;
        let client = &bot.client;
        let channel_id = if let Some(user) = channel.strip_prefix('@') {
            let me = bot.account().await.map_err(ToolError::Failed)?;
            let other = client
                .user_by_username(user)
                .await
                .map_err(|e| failed(&format!("no Mattermost user `@{user}`"), e))?;
            client
                .direct_channel(&me.user_id, &other.id)
                .await
                .map_err(|e| failed("cannot open the direct channel", e))?
                .id
        } else {
            let name = channel.trim_start_matches('~');
            let team = client
                .team_by_name(&self.0.mm.team)
                .await
                .map_err(|e| failed("cannot read the team", e))?;
            match client.channel_by_name(&team.id, name).await {
                Ok(c) => c.id,
                Err(e) if e.is_not_found() => name.to_owned(),
                Err(e) => return Err(failed(&format!("cannot find channel `{name}`"), e)),
            }
        };
        let p = client
            .create_post(&channel_id, &message, None)
            .await
            .map_err(|e| failed("cannot post", e))?;
        Ok(posted(&self.0, &p))
    }
}

struct Reply(Shared);

#[async_trait]
impl Tool for Reply {
    fn name(&self) -> &str {
        "mattermost_reply"
    }

    fn description(&self) -> &str {
        "Reply on Mattermost as yourself, in the thread of the post `post_id` (any post of the \
         thread). You follow the thread afterwards: its replies reach you without a mention."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "post_id": {"type": "string", "description": "The post you answer (from the notification)."},
                "message": {"type": "string", "description": "Markdown text."}
            },
            "required": ["post_id", "message"]
        })
    }

    async fn invoke(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let post_id = text_arg(&args, "post_id")?;
        let message = text_arg(&args, "message")?;
        let bot = self.0.bot(ctx)?;
        let original = bot
            .client
            .post(&post_id)
            .await
            .map_err(|e| failed(&format!("cannot read post {post_id}"), e))?;
        let root = original.thread_root().to_owned();
        let p = bot
            .client
            .create_post(&original.channel_id, &message, Some(&root))
            .await
            .map_err(|e| failed("cannot reply", e))?;
        self.0
            .follow(&ctx.agent_handle, &original.channel_id, &root)
            .await;
        Ok(posted(&self.0, &p))
    }
}

struct React(Shared);

#[async_trait]
impl Tool for React {
    fn name(&self) -> &str {
        "mattermost_react"
    }

    fn description(&self) -> &str {
        "Add an emoji reaction (e.g. `eyes`, `white_check_mark`) to a Mattermost post as yourself."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "post_id": {"type": "string"},
                "emoji": {"type": "string", "description": "An emoji name without colons."}
            },
            "required": ["post_id", "emoji"]
        })
    }

    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations {
            read_only: false,
            destructive: false,
            idempotent: true,
            open_world: true,
        }
    }

    async fn invoke(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let post_id = text_arg(&args, "post_id")?;
        let emoji = text_arg(&args, "emoji")?;
        let bot = self.0.bot(ctx)?;
        let me = bot.account().await.map_err(ToolError::Failed)?;
        bot.client
            .react(&me.user_id, &post_id, &emoji)
            .await
            .map_err(|e| failed("cannot react", e))?;
        Ok(ToolOutput::text(format!(
            "reacted :{}: to {post_id}",
            emoji.trim_matches(':')
        )))
    }
}
