//! The `## Relevant knowledge` prefetch: once per turn, the seat's
//! auxiliary model turns the trigger into a short search query and the
//! company's [`KnowledgeSearcher`] runs it as the seat (so the backend's
//! page permissions hold). The block is frozen into every Plan prompt of
//! the turn. Skipped when the searcher says the seat can find nothing, or
//! when the trigger is too thin to search on; a thin trigger gets one
//! re-fetch after Plan, keyed on the plan, into the Execute prompt.
//! Best effort throughout: a failed query or search renders nothing.

use std::sync::Arc;

use async_trait::async_trait;
use crewlet_core::{Event, EventType};
use crewlet_integrations::knowledge::{AUTO_DRAFTED_PARENT, KnowledgeHit, KnowledgeSearcher};
use crewlet_turn::{
    AuxCall, Auxiliary, EventSink, MemorySection, Recall, RecallRequest, Tool, ToolAnnotations,
    ToolContext, ToolError, ToolOutput, Trigger,
};
use serde_json::{Value, json};
use tracing::debug;

/// The heading of the block.
pub(crate) const RELEVANT_KNOWLEDGE: &str = "## Relevant knowledge";
/// Pages the block lists at most.
const HITS: usize = 8;
/// A trigger whose message has fewer words than this is thin.
const THIN_WORDS: usize = 4;
/// Longest query kept from the auxiliary model, in characters.
const MAX_QUERY_CHARS: usize = 160;

const QUERY_SYSTEM: &str = "You write search queries for a team knowledge base (wiki pages: \
runbooks, conventions, designs, onboarding). Answer with one short plain-text keyword query \
(2 to 8 words) for the pages that would help with the work described, and nothing else: no \
quotes, no operators, no explanation.";

/// The company's knowledge base, when it has one (Confluence or an enabled
/// Plane; see `crewlet_integrations::knowledge`).
pub(crate) fn from_company(
    company: &crewlet_config::Company,
    env: &crate::engine::EnvLookup,
) -> Option<Arc<dyn KnowledgeSearcher>> {
    use crewlet_integrations::knowledge::{ConfluenceSearcher, PlaneSearcher};
    if let Some(s) = ConfluenceSearcher::from_company(company, |v| env(v)) {
        return Some(Arc::new(s));
    }
    PlaneSearcher::from_company(company, |v| env(v))
        .map(|s| Arc::new(s) as Arc<dyn KnowledgeSearcher>)
}

/// Prefetches relevant knowledge and adds it to another recall's sections.
pub(crate) struct KnowledgeRecall {
    searcher: Arc<dyn KnowledgeSearcher>,
    aux: Auxiliary,
    inner: Arc<dyn Recall>,
    sink: Arc<dyn EventSink>,
}

impl KnowledgeRecall {
    pub fn new(
        searcher: Arc<dyn KnowledgeSearcher>,
        aux: Auxiliary,
        inner: Arc<dyn Recall>,
        sink: Arc<dyn EventSink>,
    ) -> Self {
        Self {
            searcher,
            aux,
            inner,
            sink,
        }
    }

    /// The block for `text` (the trigger, or the plan on a re-fetch).
    async fn block(&self, r: RecallRequest<'_>, text: &str, worker: &str) -> Option<MemorySection> {
        let handle = r.seat.handle.as_str();
        if !self.searcher.can_search(handle) {
            return None;
        }
        let user = format!(
            "The work:\n{}\n\nKnowledge-base search query:",
            clip(text, 2000)
        );
        let answer = self
            .aux
            .complete(AuxCall {
                seat: r.seat,
                worker,
                system: QUERY_SYSTEM.to_owned(),
                user,
                max_tokens: 40,
                task_id: Some(&r.trigger.task_id),
                turn_id: Some(r.turn_id),
                trace: Some(r.trace),
            })
            .await;
        let query = match answer {
            Ok(a) => clean_query(&a),
            Err(e) => {
                debug!(agent = handle, error = %e, "no knowledge query (auxiliary model failed)");
                return None;
            }
        };
        if query.is_empty() {
            return None;
        }
        let hits = self
            .searcher
            .search(handle, &query, HITS, &[AUTO_DRAFTED_PARENT.to_owned()])
            .await;
        self.sink
            .emit(
                Event::new(EventType::KnowledgePrefetched, "engine.knowledge")
                    .with_summary(format!("{} page(s) for {handle}: {query}", hits.len()))
                    .with_agent_handle(handle)
                    .with_task(r.trigger.task_id.as_str())
                    .with_trace(r.trace.child())
                    .with_payload(json!({
                        "agent_handle": handle,
                        "backend": self.searcher.name(),
                        "query": query,
                        "hits": hits.len(),
                        "worker": worker,
                        "page_ids": hits.iter().map(|h| h.page_id.as_str()).collect::<Vec<_>>(),
                    })),
            )
            .await;
        Some(MemorySection::new(RELEVANT_KNOWLEDGE, render(&hits)))
    }
}

#[async_trait]
impl Recall for KnowledgeRecall {
    async fn prefetch(&self, r: RecallRequest<'_>) -> Vec<MemorySection> {
        let thin = is_thin(r.trigger);
        let (mut sections, knowledge) = tokio::join!(self.inner.prefetch(r), async {
            if thin {
                None
            } else {
                self.block(r, &r.trigger.content, "knowledge_query").await
            }
        });
        sections.extend(knowledge);
        sections
    }

    async fn after_plan(&self, r: RecallRequest<'_>, plan: &str) -> Vec<MemorySection> {
        let mut sections = self.inner.after_plan(r, plan).await;
        if is_thin(r.trigger) && !plan.trim().is_empty() {
            sections.extend(self.block(r, plan, "knowledge_refetch").await);
        }
        sections
    }
}

/// The message of the trigger without the headline, link and reply hint
/// lines our prompts add: what the person actually said.
fn said(trigger: &Trigger) -> String {
    trigger
        .content
        .lines()
        .skip(1)
        .filter(|l| {
            let l = l.trim_start();
            !(l.starts_with("Link:") || l.starts_with("Title:") || l.starts_with("To answer"))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Too little said to search on ("yes", "+1", "thanks").
fn is_thin(trigger: &Trigger) -> bool {
    let words = if trigger.content.lines().count() > 1 {
        said(trigger)
    } else {
        trigger.content.clone()
    };
    words.split_whitespace().count() < THIN_WORDS
}

fn clean_query(answer: &str) -> String {
    let line = answer
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    let line = line
        .trim_start_matches("Query:")
        .trim()
        .trim_matches(|c| c == '"' || c == '\'' || c == '`');
    line.chars()
        .take(MAX_QUERY_CHARS)
        .collect::<String>()
        .trim()
        .to_owned()
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        text.chars().take(max).collect()
    }
}

/// One bullet per page: title, where, snippet and link; or a line saying
/// nothing matched.
fn render(hits: &[KnowledgeHit]) -> String {
    if hits.is_empty() {
        return "No knowledge-base page matched this trigger. Once you know more, search the knowledge base with your tools."
            .into();
    }
    let mut out = String::from(
        "Pages from the team knowledge base that may help (titles and snippets; open a page with your knowledge-base tools for the whole text):",
    );
    for h in hits {
        out.push_str(&format!("\n- **{}**", h.title.trim()));
        if !h.container.is_empty() {
            out.push_str(&format!(" ({})", h.container));
        }
        if !h.snippet.trim().is_empty() {
            out.push_str(&format!(": {}", h.snippet.trim()));
        }
        if !h.url.is_empty() {
            out.push_str(&format!(" <{}>", h.url));
        }
    }
    out
}

/// Name of the built-in search tool.
pub(crate) const SEARCH_KNOWLEDGE: &str = "search_knowledge";
/// Most pages one `search_knowledge` call returns.
const MAX_TOOL_HITS: usize = 10;

/// `search_knowledge`: the knowledge base, searched as the calling seat
/// (its own credentials, so page permissions hold), mid-turn.
pub(crate) struct SearchKnowledge {
    searcher: Arc<dyn KnowledgeSearcher>,
}

impl SearchKnowledge {
    pub fn new(searcher: Arc<dyn KnowledgeSearcher>) -> Self {
        Self { searcher }
    }
}

#[async_trait]
impl Tool for SearchKnowledge {
    fn name(&self) -> &str {
        SEARCH_KNOWLEDGE
    }

    fn description(&self) -> &str {
        "Searches the team knowledge base (wiki pages) with your own access. Give a few \
         plain keywords; returns page titles, links and snippets."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "A few plain keywords."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_TOOL_HITS,
                          "description": "Most pages to return (default 5)."}
            },
            "required": ["query"],
            "additionalProperties": false
        })
    }

    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }

    async fn invoke(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let query = args
            .get("query")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|q| !q.is_empty())
            .ok_or_else(|| ToolError::InvalidArguments("`query` is required".into()))?;
        let limit = args
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(5, |n| usize::try_from(n).unwrap_or(MAX_TOOL_HITS))
            .clamp(1, MAX_TOOL_HITS);
        if !self.searcher.can_search(&ctx.agent_handle) {
            return Err(ToolError::Failed(
                "you have no knowledge-base access: no own credentials and no search scope".into(),
            ));
        }
        let hits = self
            .searcher
            .search(
                &ctx.agent_handle,
                query,
                limit,
                &[AUTO_DRAFTED_PARENT.to_owned()],
            )
            .await;
        if hits.is_empty() {
            return Ok(ToolOutput::text(format!("No page matched `{query}`.")));
        }
        Ok(ToolOutput::text(render(&hits)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thin_triggers_queries_and_blocks() {
        let mut t = Trigger::new(
            "t",
            "slack",
            "Slack: <@U1> wrote in channel C1\n\n+1\n\nTo answer, reply in the thread.",
        );
        assert!(is_thin(&t));
        t.content =
            "Slack: <@U1> wrote in channel C1\n\nhow do we roll back a failed deploy of the api?"
                .into();
        assert!(!is_thin(&t));
        assert!(is_thin(&Trigger::new("t", "api", "yes")));
        assert!(!is_thin(&Trigger::new(
            "t",
            "api",
            "write the release notes for 2.3"
        )));

        assert_eq!(
            clean_query("\n\"deploy rollback runbook\"\nbecause..."),
            "deploy rollback runbook"
        );
        assert_eq!(clean_query("Query: `api deploy`"), "api deploy");

        let hit = KnowledgeHit {
            title: "Rollback runbook".into(),
            container: "ENG".into(),
            snippet: "Run deploy --undo".into(),
            url: "https://wiki/x".into(),
            ..KnowledgeHit::default()
        };
        let block = render(&[hit]);
        assert!(
            block.contains("- **Rollback runbook** (ENG): Run deploy --undo <https://wiki/x>"),
            "{block}"
        );
        assert!(render(&[]).starts_with("No knowledge-base page matched"));
    }
}
