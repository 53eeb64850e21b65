//! Builtin tools that need only the organization (and, when learning is
//! on, the caller's own notes on people).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use crewlet_config::{Organization, Seat, SeatKind};
use crewlet_memory::{CounterpartyProfiles, Page};
use crewlet_turn::{Tool, ToolAnnotations, ToolContext, ToolError, ToolOutput};
use serde_json::{Value, json};

/// Most colleagues one lookup returns.
const MAX_MATCHES: usize = 20;

/// Most of the caller's profiles one lookup reads.
const MAX_NOTES: usize = 1000;

/// `lookup_colleague {query}`: finds seats by handle, name, unit or goal,
/// with what the calling seat has learned of each (its counterparty
/// profiles, when learning is on).
pub(crate) struct LookupColleague {
    org: Arc<Organization>,
    profiles: Option<Arc<dyn CounterpartyProfiles>>,
}

impl LookupColleague {
    pub const NAME: &'static str = "lookup_colleague";

    pub fn new(org: Arc<Organization>) -> Self {
        Self {
            org,
            profiles: None,
        }
    }

    /// Shows the caller's own notes on each match.
    pub fn with_profiles(mut self, profiles: Arc<dyn CounterpartyProfiles>) -> Self {
        self.profiles = Some(profiles);
        self
    }

    /// Every note `observer` holds, by subject: read once per lookup.
    async fn notes_of(&self, observer: &str) -> HashMap<String, Vec<String>> {
        let mut by_subject: HashMap<String, Vec<String>> = HashMap::new();
        let Some(profiles) = &self.profiles else {
            return by_subject;
        };
        match profiles.list(observer, Page::first(MAX_NOTES)).await {
            Ok(all) => {
                for p in &all {
                    by_subject
                        .entry(p.subject.clone())
                        .or_default()
                        .push(crewlet_learning::profiles::render(p));
                }
            }
            Err(e) => tracing::debug!(error = %e, "reading counterparty profiles failed"),
        }
        by_subject
    }

    /// The notes on `seat`, under any identity the seat has.
    fn notes_on(notes: &HashMap<String, Vec<String>>, seat: &Seat) -> Vec<String> {
        let mut ids: Vec<&str> = vec![seat.handle.as_str()];
        if let Some(c) = &seat.role.contact {
            for id in [
                &c.email,
                &c.slack_user_id,
                &c.mattermost_user_id,
                &c.github_login,
                &c.gitlab_username,
                &c.atlassian_account_id,
                &c.plane_user_id,
            ]
            .into_iter()
            .flatten()
            {
                ids.push(id.as_str());
            }
        }
        ids.into_iter()
            .filter_map(|id| notes.get(id))
            .flatten()
            .cloned()
            .collect()
    }

    fn describe(&self, seat: &Seat) -> Value {
        let kind = match seat.kind {
            SeatKind::Agent => "agent",
            SeatKind::Human => "human",
        };
        let mut v = json!({
            "handle": seat.handle,
            "name": seat.name,
            "kind": kind,
            "unit": seat.unit_path.join(" / "),
            "manager": seat.manager,
            "reports": seat.reports,
            "goal": seat.role.goal,
            "responsibilities": seat.role.responsibilities,
        });
        // How to reach a person: which identities exist, not their values
        // beyond what colleagues need (an email or chat id is an address).
        if seat.kind == SeatKind::Human
            && let Some(c) = &seat.role.contact
        {
            v["contact"] = json!({
                "email": c.email,
                "slack_user_id": c.slack_user_id,
                "mattermost_user_id": c.mattermost_user_id,
                "github_login": c.github_login,
                "gitlab_username": c.gitlab_username,
            });
        }
        v
    }
}

fn matches(seat: &Seat, query: &str) -> bool {
    let q = query.to_lowercase();
    let q = q.trim_start_matches('@');
    seat.handle.to_lowercase().contains(q)
        || seat.name.to_lowercase().contains(q)
        || seat.unit_path.iter().any(|u| u.to_lowercase().contains(q))
        || seat
            .role
            .goal
            .as_deref()
            .is_some_and(|g| g.to_lowercase().contains(q))
        || seat
            .role
            .responsibilities
            .iter()
            .any(|r| r.to_lowercase().contains(q))
}

#[async_trait]
impl Tool for LookupColleague {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn description(&self) -> &str {
        "Find colleagues in the org chart by handle, name, unit or what they do. \
         Returns each match's handle, name, whether they are an agent or a human, \
         unit, manager, reports, goal and responsibilities. An empty query lists everyone."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "A handle, a name, a unit or a topic, e.g. `eng`, `CTO`, `Engineering`, `release notes`."}
            },
            "required": ["query"]
        })
    }

    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }

    async fn invoke(&self, ctx: &ToolContext, arguments: Value) -> Result<ToolOutput, ToolError> {
        let query = match arguments.get("query") {
            Some(Value::String(s)) => s.trim().to_owned(),
            None | Some(Value::Null) => String::new(),
            Some(other) => {
                return Err(ToolError::InvalidArguments(format!(
                    "`query` must be a string, not {other}"
                )));
            }
        };
        let seats = self.org.seats();
        // An exact handle wins outright.
        let exact: Vec<&Seat> = seats
            .iter()
            .filter(|s| s.handle.eq_ignore_ascii_case(query.trim_start_matches('@')))
            .map(Arc::as_ref)
            .collect();
        let found: Vec<&Seat> = if !exact.is_empty() {
            exact
        } else {
            seats
                .iter()
                .filter(|s| query.is_empty() || matches(s, &query))
                .map(Arc::as_ref)
                .collect()
        };
        let total = found.len();
        let notes = self.notes_of(&ctx.agent_handle).await;
        let mut list: Vec<Value> = Vec::new();
        for s in found.into_iter().take(MAX_MATCHES) {
            let mut v = self.describe(s);
            if s.handle == ctx.agent_handle {
                v["is_you"] = json!(true);
            } else {
                let notes = Self::notes_on(&notes, s);
                if !notes.is_empty() {
                    v["your_notes"] = json!(notes);
                }
            }
            list.push(v);
        }
        let out = json!({"matches": list, "total": total, "truncated": total > MAX_MATCHES});
        Ok(ToolOutput::text(out.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use crewlet_config::Company;
    use crewlet_core::{AgentId, TraceContext};
    use crewlet_llm::Phase;

    use super::*;

    fn ctx(handle: &str) -> ToolContext {
        ToolContext {
            agent_id: AgentId::for_seat("T", handle),
            agent_handle: handle.into(),
            role_name: "x".into(),
            task_id: "t".into(),
            turn_id: uuid::Uuid::nil(),
            phase: Phase::Execute,
            iteration: 1,
            delegation_depth: 0,
            delegation_chain: Vec::new(),
            trace: TraceContext::new_root(),
        }
    }

    #[tokio::test]
    async fn finds_by_handle_name_and_unit() -> Result<(), ToolError> {
        let company = Company::from_yaml(
            "t",
            &format!("name: T\nroles:\n  - {{name: Founder, handle: founder, kind: human, contact: {{email: f@x.io}}}}\nunits:\n  - name: Engineering\n    lead: cto\n    roles:\n      - {{name: CTO, handle: cto}}\n      - {{name: Engineer, handle: eng, goal: ship fixes}}\n{}", crate::TEST_LLM),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let tool = LookupColleague::new(Arc::new(company.organization()));
        let out = tool.invoke(&ctx("eng"), json!({"query": "@cto"})).await?;
        let v: Value = serde_json::from_str(&out.content).unwrap_or_default();
        assert_eq!(v["matches"][0]["handle"], "cto");
        assert_eq!(v["matches"][0]["reports"][0], "eng");
        let out = tool
            .invoke(&ctx("eng"), json!({"query": "engineering"}))
            .await?;
        let v: Value = serde_json::from_str(&out.content).unwrap_or_default();
        assert_eq!(v["total"], 2);
        let out = tool
            .invoke(&ctx("eng"), json!({"query": "founder"}))
            .await?;
        let v: Value = serde_json::from_str(&out.content).unwrap_or_default();
        assert_eq!(v["matches"][0]["kind"], "human");
        assert_eq!(v["matches"][0]["contact"]["email"], "f@x.io");
        assert!(tool.invoke(&ctx("eng"), json!({"query": 3})).await.is_err());
        Ok(())
    }

    #[tokio::test]
    async fn shows_the_callers_own_notes_on_a_colleague() -> Result<(), ToolError> {
        let company = Company::from_yaml(
            "t",
            &format!("name: T\nroles:\n  - {{name: Founder, handle: founder, kind: human, contact: {{email: f@x.io, slack_user_id: U1}}}}\n  - {{name: Engineer, handle: eng}}\n  - {{name: Ops, handle: ops}}\n{}", crate::TEST_LLM),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let stores = crewlet_memory::MemoryStores::in_memory();
        stores
            .profiles
            .observe(crewlet_memory::ProfileObservation {
                observer: "eng".into(),
                subject: "U1".into(),
                platform: "slack".into(),
                display_name: Some("Fran".into()),
                summary: Some("Wants weekly digests.".into()),
                traits: serde_json::Map::new(),
                seen_at: chrono::Utc::now(),
                embedding: None,
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let tool = LookupColleague::new(Arc::new(company.organization()))
            .with_profiles(stores.profiles.clone());
        let out = tool
            .invoke(&ctx("eng"), json!({"query": "founder"}))
            .await?;
        let v: Value = serde_json::from_str(&out.content).unwrap_or_default();
        let notes = v["matches"][0]["your_notes"].to_string();
        assert!(notes.contains("Wants weekly digests."), "{v}");
        // Notes are private to the seat that took them.
        let out = tool
            .invoke(&ctx("ops"), json!({"query": "founder"}))
            .await?;
        let v: Value = serde_json::from_str(&out.content).unwrap_or_default();
        assert!(v["matches"][0].get("your_notes").is_none(), "{v}");
        Ok(())
    }
}
