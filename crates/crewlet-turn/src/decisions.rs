//! The two decisions a turn asks the model for: `submit_plan` at the end of
//! Plan and `submit_review` at the end of Review.

use crewlet_llm::ToolSpec;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};

pub const SUBMIT_PLAN: &str = "submit_plan";
pub const SUBMIT_REVIEW: &str = "submit_review";

/// What Plan decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanDecision {
    /// Execute the steps, then review.
    Plan,
    /// Simple enough to do at once: execute without review.
    Direct,
    /// Nothing to do.
    Skip,
}

impl PlanDecision {
    pub fn as_str(&self) -> &'static str {
        match self {
            PlanDecision::Plan => "plan",
            PlanDecision::Direct => "direct",
            PlanDecision::Skip => "skip",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanStep {
    #[serde(default, deserialize_with = "text")]
    pub intent: String,
    #[serde(default, deserialize_with = "text")]
    pub approach: String,
    #[serde(default, deserialize_with = "names")]
    pub tools: Vec<String>,
    #[serde(default, deserialize_with = "text")]
    pub on_failure: String,
}

/// The arguments of `submit_plan`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub decision: PlanDecision,
    #[serde(default, deserialize_with = "text")]
    pub reasoning: String,
    #[serde(default)]
    pub steps: Vec<PlanStep>,
    #[serde(default, deserialize_with = "names")]
    pub tools_needed: Vec<String>,
    #[serde(default, deserialize_with = "names")]
    pub success_criteria: Vec<String>,
}

impl Plan {
    /// The plan used when the model never submitted one.
    pub fn skip(reasoning: impl Into<String>) -> Self {
        Self {
            decision: PlanDecision::Skip,
            reasoning: reasoning.into(),
            steps: Vec::new(),
            tools_needed: Vec::new(),
            success_criteria: Vec::new(),
        }
    }

    /// Every tool the plan names (`tools_needed` and each step's `tools`),
    /// first mention first, without duplicates.
    pub fn tool_names(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for name in self
            .tools_needed
            .iter()
            .chain(self.steps.iter().flat_map(|s| s.tools.iter()))
        {
            if !out.contains(name) {
                out.push(name.clone());
            }
        }
        out
    }

    pub fn parse(arguments: &Value) -> Result<Self, String> {
        serde_json::from_value(arguments.clone()).map_err(|e| format!("invalid submit_plan: {e}"))
    }
}

/// What Review decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewDecision {
    Done,
    SelfIterate,
}

impl ReviewDecision {
    pub fn as_str(&self) -> &'static str {
        match self {
            ReviewDecision::Done => "done",
            ReviewDecision::SelfIterate => "self_iterate",
        }
    }
}

/// The arguments of `submit_review`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Review {
    pub decision: ReviewDecision,
    #[serde(default, deserialize_with = "text")]
    pub notes: String,
    #[serde(default, deserialize_with = "text")]
    pub completed_work: String,
    #[serde(default, deserialize_with = "text")]
    pub final_artifact: String,
}

impl Review {
    pub fn parse(arguments: &Value) -> Result<Self, String> {
        serde_json::from_value(arguments.clone()).map_err(|e| format!("invalid submit_review: {e}"))
    }
}

/// Models send a list where a string was asked for and the reverse; both are
/// read rather than bounced back.
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Null => String::new(),
        Value::String(s) => s,
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_owned))
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    })
}

fn names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Null => Vec::new(),
        Value::String(s) if s.trim().is_empty() => Vec::new(),
        Value::String(s) => vec![s],
        Value::Array(items) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    })
}

pub fn submit_plan_spec() -> ToolSpec {
    ToolSpec {
        name: SUBMIT_PLAN.into(),
        description:
            "Submit your plan for this turn. decision: `plan` (execute the steps, then review), \
                      `direct` (simple enough to do at once, no review) or `skip` (nothing to do)."
                .into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "decision": {"type": "string", "enum": ["plan", "direct", "skip"]},
                "reasoning": {"type": "string", "description": "Why this decision."},
                "steps": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "intent": {"type": "string"},
                            "approach": {"type": "string"},
                            "tools": {"type": "array", "items": {"type": "string"}},
                            "on_failure": {"type": "string"}
                        },
                        "required": ["intent"]
                    }
                },
                "tools_needed": {"type": "array", "items": {"type": "string"},
                                 "description": "Names of the tools Execute will need."},
                "success_criteria": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["decision", "reasoning"]
        }),
    }
}

/// [`submit_plan_spec`] whose tool names can only be `tools`, the seat's
/// own (no enum when it has none): a plan cannot name a tool that does not
/// exist.
pub fn submit_plan_spec_for<'a>(tools: impl IntoIterator<Item = &'a str>) -> ToolSpec {
    let names: Vec<&str> = tools.into_iter().collect();
    let mut spec = submit_plan_spec();
    if names.is_empty() {
        return spec;
    }
    let props = &mut spec.parameters["properties"];
    props["tools_needed"]["items"]["enum"] = json!(names);
    props["steps"]["items"]["properties"]["tools"]["items"]["enum"] = json!(names);
    spec
}

pub fn submit_review_spec() -> ToolSpec {
    ToolSpec {
        name: SUBMIT_REVIEW.into(),
        description:
            "Submit your review of the work. decision: `done` (the success criteria are met) \
                      or `self_iterate` (plan again to fix what is missing)."
                .into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "decision": {"type": "string", "enum": ["done", "self_iterate"]},
                "notes": {"type": "string"},
                "completed_work": {"type": "string", "description": "What was actually done."},
                "final_artifact": {"type": "string",
                                   "description": "The deliverable: reply text, link, summary."}
            },
            "required": ["decision", "notes", "completed_work", "final_artifact"]
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_parse_leniently() -> Result<(), String> {
        let p = Plan::parse(&json!({
            "decision": "plan",
            "reasoning": ["a", "b"],
            "steps": [{"intent": "look", "tools": ["lookup", "note"]}, {"intent": "write", "tools": "note"}],
            "tools_needed": ["lookup"],
            "success_criteria": "answer found"
        }))?;
        assert_eq!(p.decision, PlanDecision::Plan);
        assert_eq!(p.reasoning, "a\nb");
        assert_eq!(p.success_criteria, ["answer found"]);
        assert_eq!(p.tool_names(), ["lookup", "note"]);
        Ok(())
    }

    #[test]
    fn a_plan_needs_a_known_decision() {
        assert!(Plan::parse(&json!({"reasoning": "x"})).is_err());
        let err = Plan::parse(&json!({"decision": "maybe"}))
            .err()
            .unwrap_or_default();
        assert!(err.starts_with("invalid submit_plan"), "{err}");
    }

    #[test]
    fn reviews_parse() -> Result<(), String> {
        let r = Review::parse(&json!({"decision": "self_iterate", "notes": "n",
            "completed_work": ["x", "y"], "final_artifact": null}))?;
        assert_eq!(r.decision, ReviewDecision::SelfIterate);
        assert_eq!(r.completed_work, "x\ny");
        assert_eq!(r.final_artifact, "");
        assert!(Review::parse(&json!({"decision": "ok"})).is_err());
        Ok(())
    }
}
