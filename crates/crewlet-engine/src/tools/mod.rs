//! The company's tools: builtins and MCP tools in one [`ToolRegistry`], with
//! per-role visibility, and the catalogue the API lists.

pub(crate) mod builtin;
pub(crate) mod mcp;
pub(crate) mod subagents;

use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;

use crewlet_api::{ToolAnnotations as ApiAnnotations, ToolView};
use crewlet_turn::{Tool, ToolRegistry, Visibility};

pub use mcp::{TOOL_NAME_SEPARATOR, tool_name};

/// The registry plus where each tool comes from (`builtin` or a server name).
#[derive(Default)]
pub(crate) struct ToolCatalog {
    pub registry: Arc<ToolRegistry>,
    providers: RwLock<BTreeMap<String, String>>,
}

impl ToolCatalog {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add_builtin(&self, tool: Arc<dyn Tool>, visibility: Visibility) {
        self.set_provider(tool.name(), "builtin");
        self.registry.upsert(tool, visibility);
    }

    pub fn set_provider(&self, name: &str, provider: &str) {
        self.providers
            .write()
            .insert(name.to_owned(), provider.to_owned());
    }

    /// The tools `handle` sees, or every tool of every agent seat.
    pub fn views(&self, handles: &[&str]) -> Vec<ToolView> {
        let providers = self.providers.read();
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        for handle in handles {
            for tool in self.registry.tools_for(handle) {
                if !seen.insert(tool.name().to_owned()) {
                    continue;
                }
                let a = tool.annotations();
                out.push(ToolView {
                    name: tool.name().to_owned(),
                    description: tool.description().to_owned(),
                    provider: providers
                        .get(tool.name())
                        .cloned()
                        .unwrap_or_else(|| "builtin".into()),
                    annotations: ApiAnnotations {
                        read_only: a.read_only,
                        destructive: a.destructive,
                        idempotent: a.idempotent,
                        open_world: a.open_world,
                    },
                    input_schema: tool.schema(),
                });
            }
        }
        out
    }
}
