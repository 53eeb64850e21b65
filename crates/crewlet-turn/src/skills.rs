//! Tool skills: short guides, kept as knowledge-base pages, that teach a
//! seat how to use a tool or an MCP server.
//!
//! A skill has a `trigger` (which tools it is about), the `phases` it is
//! listed in, a `title`, a one-line `summary` (at most
//! [`MAX_SKILL_SUMMARY_BYTES`]) and a `body` (at most
//! [`MAX_SKILL_BODY_BYTES`]). Every phase prompt lists the summaries of the
//! skills whose trigger matches the phase's tools (`## Tool skills`); the
//! body reaches the model only when it calls `load_tool_skill(key)`.
//!
//! A skill is `required` unless it says otherwise: the tool loop refuses a
//! call of a tool the skill covers until the skill has been loaded in the
//! same phase session (the guard, see `tool_loop`).
//!
//! `${name}` in a title, summary or body is replaced by the company's
//! `skill_variables` value of that name when one is set; anything else
//! (`$name`, `$$`, `{placeholder}`, an unknown `${other}`) stays as written.
//!
//! Where skills come from (a Confluence space, a Plane project, a folder)
//! is the engine's business; this module only holds and renders them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;

use crewlet_llm::{Phase, ToolSpec};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::Tool;

/// Longest skill body, in bytes of its source.
pub const MAX_SKILL_BODY_BYTES: usize = 32 * 1024;
/// Longest skill summary, in bytes of its source.
pub const MAX_SKILL_SUMMARY_BYTES: usize = 240;
/// The built-in tool that hands a skill's body to the model.
pub const LOAD_TOOL_SKILL: &str = "load_tool_skill";

/// Which tools a skill is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SkillTrigger {
    /// One tool, by its name here (`server__tool`), its name on its MCP
    /// server, or the original's `server_tool` spelling.
    Tool(String),
    /// Every tool of this MCP server.
    McpServer(String),
    AnyOf(Vec<SkillTrigger>),
    AllOf(Vec<SkillTrigger>),
}

fn leaf_tool_matches(name: &str, tool: &dyn Tool) -> bool {
    if tool.name() == name {
        return true;
    }
    match tool.mcp_origin() {
        Some((server, remote)) => {
            remote == name
                || name
                    .strip_prefix(server)
                    .and_then(|rest| rest.strip_prefix('_'))
                    == Some(remote)
        }
        None => false,
    }
}

fn leaf_server_matches(server: &str, tool: &dyn Tool) -> bool {
    tool.mcp_origin().is_some_and(|(s, _)| s == server)
}

impl SkillTrigger {
    /// Whether the trigger matches a set of tools (a phase's surface).
    pub fn fires(&self, tools: &[Arc<dyn Tool>]) -> bool {
        match self {
            SkillTrigger::Tool(name) => tools.iter().any(|t| leaf_tool_matches(name, t.as_ref())),
            SkillTrigger::McpServer(server) => tools
                .iter()
                .any(|t| leaf_server_matches(server, t.as_ref())),
            SkillTrigger::AnyOf(all) => all.iter().any(|t| t.fires(tools)),
            SkillTrigger::AllOf(all) => all.iter().all(|t| t.fires(tools)),
        }
    }

    /// Whether one of the trigger's leaves names `tool`.
    pub fn covers(&self, tool: &dyn Tool) -> bool {
        match self {
            SkillTrigger::Tool(name) => leaf_tool_matches(name, tool),
            SkillTrigger::McpServer(server) => leaf_server_matches(server, tool),
            SkillTrigger::AnyOf(all) | SkillTrigger::AllOf(all) => {
                all.iter().any(|t| t.covers(tool))
            }
        }
    }

    fn check(&self) -> Result<(), String> {
        match self {
            SkillTrigger::Tool(s) | SkillTrigger::McpServer(s) if s.trim().is_empty() => {
                Err("a trigger names an empty tool or server".into())
            }
            SkillTrigger::AnyOf(all) | SkillTrigger::AllOf(all) if all.is_empty() => {
                Err("any_of / all_of needs at least one trigger".into())
            }
            SkillTrigger::AnyOf(all) | SkillTrigger::AllOf(all) => {
                all.iter().try_for_each(SkillTrigger::check)
            }
            _ => Ok(()),
        }
    }
}

/// A phase a skill may be listed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkillPhase {
    Plan,
    Execute,
    Review,
    /// Listed in a sub-agent's prompt (`spawn_subagent`).
    Subagent,
}

impl SkillPhase {
    fn of(phase: Phase) -> Option<SkillPhase> {
        match phase {
            Phase::Plan => Some(SkillPhase::Plan),
            Phase::Execute => Some(SkillPhase::Execute),
            Phase::Review => Some(SkillPhase::Review),
            Phase::Auxiliary => None,
        }
    }
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Frontmatter {
    key: String,
    trigger: SkillTrigger,
    phases: Vec<SkillPhase>,
    title: String,
    summary: String,
    #[serde(default = "yes")]
    required: bool,
}

/// One skill.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ToolSkill {
    pub key: String,
    pub trigger: SkillTrigger,
    pub phases: BTreeSet<SkillPhase>,
    pub title: String,
    pub summary: String,
    pub body: String,
    pub required: bool,
    /// Where it was read from (a page id, a file), for logs.
    pub source: String,
}

impl ToolSkill {
    /// A skill from its frontmatter (already parsed from YAML) and body.
    pub fn from_parts(
        frontmatter: Value,
        body: &str,
        source: impl Into<String>,
    ) -> Result<ToolSkill, String> {
        let fm: Frontmatter =
            serde_json::from_value(frontmatter).map_err(|e| format!("frontmatter: {e}"))?;
        let key = fm.key.trim().to_owned();
        if key.is_empty() {
            return Err("`key` is empty".into());
        }
        fm.trigger.check()?;
        if fm.phases.is_empty() {
            return Err("`phases` is empty".into());
        }
        if fm.title.trim().is_empty() {
            return Err("`title` is empty".into());
        }
        let summary = fm.summary.trim().to_owned();
        if summary.is_empty() {
            return Err("`summary` is empty".into());
        }
        if summary.len() > MAX_SKILL_SUMMARY_BYTES {
            return Err(format!(
                "the summary is {} bytes; at most {MAX_SKILL_SUMMARY_BYTES}",
                summary.len()
            ));
        }
        let body = body.trim().to_owned();
        if body.len() > MAX_SKILL_BODY_BYTES {
            return Err(format!(
                "the body is {} bytes; at most {MAX_SKILL_BODY_BYTES}",
                body.len()
            ));
        }
        Ok(ToolSkill {
            key,
            trigger: fm.trigger,
            phases: fm.phases.into_iter().collect(),
            title: fm.title.trim().to_owned(),
            summary,
            body,
            required: fm.required,
            source: source.into(),
        })
    }

    /// The skill as a listing shows it, variables substituted.
    fn entry(&self, vars: &BTreeMap<String, String>) -> CatalogueEntry {
        CatalogueEntry {
            key: self.key.clone(),
            title: substitute(&self.title, vars),
            summary: substitute(&self.summary, vars),
            required: self.required,
        }
    }
}

/// Replaces each `${name}` whose `name` is in `vars` (with a non-empty
/// value); everything else is left byte for byte.
pub fn substitute(text: &str, vars: &BTreeMap<String, String>) -> String {
    if vars.is_empty() || !text.contains("${") {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let name_len = identifier_len(after);
        let value = (name_len > 0 && after[name_len..].starts_with('}'))
            .then(|| vars.get(&after[..name_len]))
            .flatten()
            .filter(|v| !v.is_empty());
        match value {
            Some(v) => {
                out.push_str(v);
                rest = &after[name_len + 1..];
            }
            None => {
                out.push_str("${");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Length of the identifier (`[A-Za-z_][A-Za-z0-9_]*`) at the start of `s`.
fn identifier_len(s: &str) -> usize {
    let mut len = 0;
    for (i, c) in s.char_indices() {
        let ok = c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit());
        if !ok {
            break;
        }
        len = i + c.len_utf8();
    }
    len
}

/// The `${name}` references of `text`.
fn references(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        let after = &rest[at + 2..];
        let n = identifier_len(after);
        if n > 0 && after[n..].starts_with('}') {
            out.push(&after[..n]);
        }
        rest = after;
    }
    out
}

/// A skill as a phase prompt lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogueEntry {
    pub key: String,
    pub title: String,
    pub summary: String,
    pub required: bool,
}

/// A skill reference that no variable resolves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnresolvedVariable {
    pub skill: String,
    pub variable: String,
    /// `title`, `summary` or `body`.
    pub field: &'static str,
}

/// The company's skills and its `skill_variables`. Shared by every turn;
/// a re-sync replaces the set while turns run.
#[derive(Debug, Default)]
pub struct ToolSkills {
    skills: RwLock<BTreeMap<String, Arc<ToolSkill>>>,
    variables: RwLock<BTreeMap<String, String>>,
}

impl ToolSkills {
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces every skill (a full walk of the skills container).
    pub fn replace_all(&self, skills: impl IntoIterator<Item = ToolSkill>) {
        let map = skills
            .into_iter()
            .map(|s| (s.key.clone(), Arc::new(s)))
            .collect();
        *self.skills.write() = map;
    }

    /// Adds or replaces one skill.
    pub fn upsert(&self, skill: ToolSkill) {
        self.skills
            .write()
            .insert(skill.key.clone(), Arc::new(skill));
    }

    pub fn remove(&self, key: &str) -> bool {
        self.skills.write().remove(key).is_some()
    }

    /// Sets the `skill_variables` (empty values are dropped).
    pub fn set_variables(&self, vars: impl IntoIterator<Item = (String, String)>) {
        *self.variables.write() = vars.into_iter().filter(|(_, v)| !v.is_empty()).collect();
    }

    pub fn keys(&self) -> Vec<String> {
        self.skills.read().keys().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.skills.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.skills.read().is_empty()
    }

    pub fn get(&self, key: &str) -> Option<Arc<ToolSkill>> {
        self.skills.read().get(key).cloned()
    }

    /// The skills listed in `phase` whose trigger matches `surface`, in key
    /// order (a stable prompt), with variables substituted.
    pub fn catalogue(&self, phase: Phase, surface: &[Arc<dyn Tool>]) -> Vec<CatalogueEntry> {
        self.listed(SkillPhase::of(phase), surface)
    }

    /// The skills listed for sub-agents (`phases: [subagent]`) whose
    /// trigger matches `surface`, like [`catalogue`](Self::catalogue).
    pub fn subagent_catalogue(&self, surface: &[Arc<dyn Tool>]) -> Vec<CatalogueEntry> {
        self.listed(Some(SkillPhase::Subagent), surface)
    }

    fn listed(&self, phase: Option<SkillPhase>, surface: &[Arc<dyn Tool>]) -> Vec<CatalogueEntry> {
        let Some(phase) = phase else {
            return Vec::new();
        };
        let vars = self.variables.read();
        self.skills
            .read()
            .values()
            .filter(|s| s.phases.contains(&phase) && s.trigger.fires(surface))
            .map(|s| s.entry(&vars))
            .collect()
    }

    /// The `load_tool_skill` answer: the titled body, or an error that
    /// lists the keys there are.
    pub fn load(&self, key: &str) -> Result<String, String> {
        let skills = self.skills.read();
        match skills.get(key.trim()) {
            Some(s) => {
                let vars = self.variables.read();
                Ok(format!(
                    "# {}\n\n{}",
                    substitute(&s.title, &vars),
                    substitute(&s.body, &vars)
                ))
            }
            None => {
                let keys: Vec<&str> = skills.keys().map(String::as_str).collect();
                Err(format!(
                    "no tool skill `{key}`; the skills are: {}",
                    if keys.is_empty() {
                        "none".to_owned()
                    } else {
                        keys.join(", ")
                    }
                ))
            }
        }
    }

    /// The required skills, not in `loaded`, that hold back a call of
    /// `tool` by a seat whose tools are `seat_tools`: those whose trigger
    /// matches the seat and covers the tool.
    pub fn blocking(
        &self,
        tool: &dyn Tool,
        seat_tools: &[Arc<dyn Tool>],
        loaded: &BTreeSet<String>,
    ) -> Vec<CatalogueEntry> {
        let vars = self.variables.read();
        self.skills
            .read()
            .values()
            .filter(|s| {
                s.required
                    && !loaded.contains(&s.key)
                    && s.trigger.covers(tool)
                    && s.trigger.fires(seat_tools)
            })
            .map(|s| s.entry(&vars))
            .collect()
    }

    /// Every `${name}` a skill uses that no variable resolves.
    pub fn unresolved_variables(&self) -> Vec<UnresolvedVariable> {
        let vars = self.variables.read();
        let mut out = Vec::new();
        for s in self.skills.read().values() {
            for (field, text) in [
                ("title", &s.title),
                ("summary", &s.summary),
                ("body", &s.body),
            ] {
                let mut seen = BTreeSet::new();
                for name in references(text) {
                    if !vars.contains_key(name) && seen.insert(name) {
                        out.push(UnresolvedVariable {
                            skill: s.key.clone(),
                            variable: name.to_owned(),
                            field,
                        });
                    }
                }
            }
        }
        out
    }
}

/// The `## Tool skills` section of a phase prompt; empty without entries.
/// `enforced` says whether the phase can load skills (and so whether the
/// required ones are marked).
pub fn render_catalogue(entries: &[CatalogueEntry], enforced: bool) -> String {
    if entries.is_empty() {
        return String::new();
    }
    let mut out = String::from("## Tool skills\n");
    if enforced {
        out.push_str(
            "Guides to your tools. Call `load_tool_skill(key)` to read one. A skill marked \
             (required) must be loaded in this phase before the tools it covers will run.\n",
        );
    }
    for e in entries {
        let mark = if enforced && e.required {
            " (required)"
        } else {
            ""
        };
        let _ = writeln!(out, "- `{}`{mark}: {}. {}", e.key, e.title, e.summary);
    }
    out
}

/// The message a blocked call gets back.
pub fn block_message(tool: &str, missing: &[CatalogueEntry]) -> String {
    let mut out = format!("`{tool}` needs a tool skill you have not loaded in this phase:\n");
    for e in missing {
        let _ = writeln!(out, "- `{}`: {}", e.key, e.summary);
    }
    let keys: Vec<String> = missing
        .iter()
        .map(|e| format!("load_tool_skill(key=\"{}\")", e.key))
        .collect();
    let _ = write!(
        out,
        "Call {} first, then call `{tool}` again. Once per phase is enough.",
        keys.join(" and ")
    );
    out
}

/// The `load_tool_skill` tool as offered to the model.
pub fn load_tool_skill_spec() -> ToolSpec {
    ToolSpec {
        name: LOAD_TOOL_SKILL.to_owned(),
        description: "Reads a tool skill: the full guide behind an entry of `## Tool skills`. \
                      Required skills must be read before their tools run."
            .to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {
                "key": {"type": "string", "description": "The skill's key, as listed."}
            },
            "required": ["key"],
            "additionalProperties": false
        }),
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;

    use super::*;
    use crate::{ToolContext, ToolError, ToolOutput};

    struct T {
        name: &'static str,
        origin: Option<(&'static str, &'static str)>,
    }

    #[async_trait]
    impl Tool for T {
        fn name(&self) -> &str {
            self.name
        }
        fn description(&self) -> &str {
            "t"
        }
        fn schema(&self) -> Value {
            json!({"type": "object"})
        }
        fn mcp_origin(&self) -> Option<(&str, &str)> {
            self.origin
        }
        async fn invoke(&self, _: &ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::text(""))
        }
    }

    fn builtin(name: &'static str) -> Arc<dyn Tool> {
        Arc::new(T { name, origin: None })
    }

    fn mcp(server: &'static str, tool: &'static str, name: &'static str) -> Arc<dyn Tool> {
        Arc::new(T {
            name,
            origin: Some((server, tool)),
        })
    }

    fn skill(yaml_like: Value, body: &str) -> ToolSkill {
        match ToolSkill::from_parts(yaml_like, body, "test") {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    fn github_skill(required: bool) -> ToolSkill {
        skill(
            json!({"key": "mcp:github", "trigger": {"mcp_server": "github"},
                   "phases": ["plan", "execute"], "title": "GitHub",
                   "summary": "Read the repo at ${repo_url}.", "required": required}),
            "Open ${repo_url}/pulls. Cost: $5, $$, {id}, ${other}.",
        )
    }

    #[test]
    fn triggers_match_names_servers_and_the_originals_spelling() {
        let pr = mcp(
            "github",
            "create_pull_request",
            "github__create_pull_request",
        );
        let tools = vec![pr.clone(), builtin("refresh_memory")];
        assert!(SkillTrigger::Tool("create_pull_request".into()).fires(&tools));
        assert!(SkillTrigger::Tool("github_create_pull_request".into()).fires(&tools));
        assert!(SkillTrigger::Tool("github__create_pull_request".into()).fires(&tools));
        assert!(!SkillTrigger::Tool("gitlab_create_pull_request".into()).fires(&tools));
        assert!(SkillTrigger::McpServer("github".into()).fires(&tools));
        assert!(!SkillTrigger::McpServer("slack".into()).fires(&tools));
        let both = SkillTrigger::AllOf(vec![
            SkillTrigger::McpServer("github".into()),
            SkillTrigger::Tool("refresh_memory".into()),
        ]);
        assert!(both.fires(&tools));
        assert!(!both.fires(&tools[..1]));
        assert!(both.covers(tools[1].as_ref()));
        let either = SkillTrigger::AnyOf(vec![SkillTrigger::McpServer("slack".into())]);
        assert!(!either.fires(&tools));
    }

    #[test]
    fn frontmatter_is_checked() {
        let ok = json!({"key": "k", "trigger": {"tool": "x"}, "phases": ["plan"],
                        "title": "T", "summary": "S"});
        let s = skill(ok.clone(), "body");
        assert!(s.required, "skills are required unless they say otherwise");
        for (field, value, why) in [
            ("summary", json!("x".repeat(241)), "at most 240"),
            ("phases", json!([]), "`phases` is empty"),
            ("phases", json!(["deploy"]), "unknown variant"),
            ("trigger", json!({"any_of": []}), "at least one"),
            (
                "trigger",
                json!({"tool": "a", "mcp_server": "b"}),
                "frontmatter",
            ),
            ("key", json!(" "), "`key` is empty"),
        ] {
            let mut fm = ok.clone();
            fm[field] = value;
            match ToolSkill::from_parts(fm, "b", "t") {
                Err(e) => assert!(e.contains(why), "{field}: {e}"),
                Ok(_) => panic!("{field} should be refused"),
            }
        }
        let big = "x".repeat(MAX_SKILL_BODY_BYTES + 1);
        assert!(ToolSkill::from_parts(ok, &big, "t").is_err());
    }

    #[test]
    fn only_declared_braced_variables_are_substituted() {
        let vars: BTreeMap<String, String> = [
            ("repo_url".to_owned(), "https://git.example/acme".to_owned()),
            ("empty".to_owned(), String::new()),
        ]
        .into();
        assert_eq!(
            substitute(
                "a ${repo_url}/x $repo_url $$ {id} ${other} ${ repo_url} ${",
                &vars
            ),
            "a https://git.example/acme/x $repo_url $$ {id} ${other} ${ repo_url} ${"
        );
        let skills = ToolSkills::new();
        skills.upsert(github_skill(true));
        skills.set_variables(vars);
        let body = skills.load("mcp:github").unwrap_or_default();
        assert_eq!(
            body,
            "# GitHub\n\nOpen https://git.example/acme/pulls. Cost: $5, $$, {id}, ${other}."
        );
        let unresolved = skills.unresolved_variables();
        assert_eq!(unresolved.len(), 1, "{unresolved:?}");
        assert_eq!(
            (unresolved[0].variable.as_str(), unresolved[0].field),
            ("other", "body")
        );
        match skills.load("mcp:nope") {
            Err(e) => assert!(e.contains("mcp:github"), "{e}"),
            Ok(_) => panic!("unknown key loaded"),
        }
    }

    #[test]
    fn the_catalogue_follows_phase_and_surface_in_key_order() {
        let skills = ToolSkills::new();
        skills.upsert(github_skill(true));
        skills.upsert(skill(
            json!({"key": "a:memory", "trigger": {"tool": "refresh_memory"},
                   "phases": ["execute"], "title": "Memory", "summary": "Refresh first.",
                   "required": false}),
            "b",
        ));
        let gh = mcp("github", "get_issue", "github__get_issue");
        let surface = vec![gh, builtin("refresh_memory")];
        let keys = |phase| -> Vec<String> {
            skills
                .catalogue(phase, &surface)
                .into_iter()
                .map(|e| e.key)
                .collect()
        };
        assert_eq!(keys(Phase::Execute), ["a:memory", "mcp:github"]);
        assert_eq!(keys(Phase::Plan), ["mcp:github"]);
        assert!(keys(Phase::Review).is_empty());
        let text = render_catalogue(&skills.catalogue(Phase::Execute, &surface), true);
        assert!(text.starts_with("## Tool skills\n"), "{text}");
        assert!(
            text.contains("- `mcp:github` (required): GitHub. Read the repo at ${repo_url}."),
            "{text}"
        );
        assert!(text.contains("- `a:memory`: Memory."), "{text}");
        assert!(
            !render_catalogue(&skills.catalogue(Phase::Plan, &surface), false)
                .contains("(required)")
        );
    }

    #[test]
    fn required_skills_block_their_tools_until_loaded() {
        let skills = ToolSkills::new();
        skills.upsert(github_skill(true));
        let gh = mcp("github", "get_issue", "github__get_issue");
        let other = builtin("refresh_memory");
        let seat = vec![gh.clone(), other.clone()];
        let mut loaded = BTreeSet::new();
        let missing = skills.blocking(gh.as_ref(), &seat, &loaded);
        assert_eq!(missing.len(), 1);
        let message = block_message(gh.name(), &missing);
        assert!(
            message.contains("load_tool_skill(key=\"mcp:github\")"),
            "{message}"
        );
        assert!(skills.blocking(other.as_ref(), &seat, &loaded).is_empty());
        loaded.insert("mcp:github".to_owned());
        assert!(skills.blocking(gh.as_ref(), &seat, &loaded).is_empty());
        skills.upsert(github_skill(false));
        assert!(
            skills
                .blocking(gh.as_ref(), &seat, &BTreeSet::new())
                .is_empty()
        );
    }
}
