//! The loop's own tools, answered by the loop rather than the registry:
//! `load_tool_skill` (a tool skill's body; loading one unlocks the tools a
//! required skill covers), and in Execute the discovery pair
//! `list_mcp_server_tools` / `activate_tool`, with which a phase picks up a
//! tool of the seat's catalogue that the plan did not name.

use std::collections::{BTreeSet, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{Value, json};

use crewlet_llm::ToolSpec;

use crate::Tool;
use crate::skills::{LOAD_TOOL_SKILL, ToolSkills};
use crate::tool::first_sentence;

pub const LIST_MCP_SERVER_TOOLS: &str = "list_mcp_server_tools";
pub const ACTIVATE_TOOL: &str = "activate_tool";

/// What one loop (one phase session) has loaded and activated.
#[derive(Debug, Default)]
pub(super) struct Session {
    pub loaded: BTreeSet<String>,
    /// Registered names, in activation order.
    pub activated: Vec<String>,
}

/// Which of the loop's own tools a request offers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaTools {
    /// `load_tool_skill` (when there are skills), and the required-skill
    /// guard with it.
    pub load_skills: bool,
    /// `list_mcp_server_tools` and `activate_tool`.
    pub discovery: bool,
}

impl MetaTools {
    pub const NONE: MetaTools = MetaTools {
        load_skills: false,
        discovery: false,
    };

    pub(super) fn specs(&self, skills: Option<&ToolSkills>) -> Vec<ToolSpec> {
        let mut out = Vec::new();
        if self.skills_on(skills) {
            out.push(crate::skills::load_tool_skill_spec());
        }
        if self.discovery {
            out.push(list_spec());
            out.push(activate_spec());
        }
        out
    }

    pub(super) fn skills_on(&self, skills: Option<&ToolSkills>) -> bool {
        self.load_skills && skills.is_some_and(|s| !s.is_empty())
    }

    pub(super) fn handles(&self, name: &str, skills: Option<&ToolSkills>) -> bool {
        (name == LOAD_TOOL_SKILL && self.skills_on(skills))
            || (self.discovery && (name == LIST_MCP_SERVER_TOOLS || name == ACTIVATE_TOOL))
    }
}

fn list_spec() -> ToolSpec {
    ToolSpec {
        name: LIST_MCP_SERVER_TOOLS.to_owned(),
        description: "Lists the tools you have that are not offered in this phase yet: those of \
                      one MCP server, or without `server` every server and its tool count."
            .to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {
                "server": {"type": "string", "description": "An MCP server name, or `builtin`."}
            },
            "additionalProperties": false
        }),
    }
}

fn activate_spec() -> ToolSpec {
    ToolSpec {
        name: ACTIVATE_TOOL.to_owned(),
        description: "Makes one of your tools callable in this phase from the next round on \
                      (a tool the plan did not name)."
            .to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The tool's name, as listed."}
            },
            "required": ["name"],
            "additionalProperties": false
        }),
    }
}

fn arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// `load_tool_skill`: the body, and the key remembered as loaded.
pub(super) fn load_skill(
    skills: &ToolSkills,
    args: &Value,
    session: &mut Session,
) -> Result<String, String> {
    let key = arg(args, "key").ok_or("`key` is required")?;
    let body = skills.load(key)?;
    session.loaded.insert(key.to_owned());
    Ok(body)
}

const BUILTIN: &str = "builtin";

/// `list_mcp_server_tools`.
pub(super) fn list_tools(seat_tools: &[Arc<dyn Tool>], args: &Value) -> Result<String, String> {
    let server_of = |t: &Arc<dyn Tool>| t.mcp_origin().map_or(BUILTIN, |(s, _)| s).to_owned();
    match arg(args, "server") {
        None => {
            let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
            for t in seat_tools {
                *counts.entry(server_of(t)).or_default() += 1;
            }
            if counts.is_empty() {
                return Ok("You have no tools.".to_owned());
            }
            let mut out = String::from("Servers (call again with `server` for their tools):\n");
            for (server, n) in counts {
                let _ = writeln!(out, "- {server}: {n} tool(s)");
            }
            Ok(out)
        }
        Some(server) => {
            let tools: Vec<&Arc<dyn Tool>> = seat_tools
                .iter()
                .filter(|t| server_of(t) == server)
                .collect();
            if tools.is_empty() {
                let mut servers: Vec<String> = seat_tools.iter().map(server_of).collect();
                servers.sort();
                servers.dedup();
                return Err(format!(
                    "you have no server `{server}`; yours are: {}",
                    if servers.is_empty() {
                        "none".to_owned()
                    } else {
                        servers.join(", ")
                    }
                ));
            }
            let mut out = format!("Tools of `{server}` (activate_tool makes one callable):\n");
            for t in tools {
                let _ = writeln!(
                    out,
                    "- {}: {}",
                    t.name(),
                    first_sentence(t.description(), 200)
                );
            }
            Ok(out)
        }
    }
}

/// The seat's tool called `name`: by its name here or its name on its MCP
/// server.
pub(super) fn find<'t>(seat_tools: &'t [Arc<dyn Tool>], name: &str) -> Option<&'t Arc<dyn Tool>> {
    seat_tools.iter().find(|t| t.name() == name).or_else(|| {
        seat_tools
            .iter()
            .find(|t| t.mcp_origin().is_some_and(|(_, remote)| remote == name))
    })
}

/// `activate_tool`: the answer, and the registered name when it was newly
/// activated.
pub(super) fn activate(
    seat_tools: &[Arc<dyn Tool>],
    offered: &HashSet<&str>,
    args: &Value,
    session: &mut Session,
) -> (Result<String, String>, Option<String>) {
    let Some(name) = arg(args, "name") else {
        return (Err("`name` is required".into()), None);
    };
    let Some(tool) = find(seat_tools, name) else {
        return (
            Err(format!(
                "you have no tool `{name}`; list_mcp_server_tools shows the ones you have"
            )),
            None,
        );
    };
    let registered = tool.name().to_owned();
    if offered.contains(registered.as_str()) || session.activated.contains(&registered) {
        return (Ok(format!("`{registered}` is already callable.")), None);
    }
    session.activated.push(registered.clone());
    (
        Ok(format!(
            "`{registered}` is callable from your next round on."
        )),
        Some(registered),
    )
}
