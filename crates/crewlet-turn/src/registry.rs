//! The tools of a company and which roles see which.

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use indexmap::IndexMap;

use crate::{Tool, TurnError};

/// Who sees a tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Visibility {
    /// Every role.
    All,
    /// Only these role handles.
    Roles(BTreeSet<String>),
}

impl Visibility {
    pub fn roles<I, S>(handles: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Visibility::Roles(handles.into_iter().map(Into::into).collect())
    }

    pub fn allows(&self, handle: &str) -> bool {
        match self {
            Visibility::All => true,
            Visibility::Roles(handles) => handles.contains(handle),
        }
    }
}

struct Entry {
    tool: Arc<dyn Tool>,
    visibility: Visibility,
}

/// Registered tools, in registration order. Tools may come and go while
/// turns run (an MCP server connects late): the tool loop re-reads the
/// registry every round.
#[derive(Default)]
pub struct ToolRegistry {
    entries: RwLock<IndexMap<String, Entry>>,
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> RwLockReadGuard<'_, IndexMap<String, Entry>> {
        self.entries.read()
    }

    fn write(&self) -> RwLockWriteGuard<'_, IndexMap<String, Entry>> {
        self.entries.write()
    }

    /// Adds a tool; a second tool of the same name is an error.
    pub fn register(&self, tool: Arc<dyn Tool>, visibility: Visibility) -> Result<(), TurnError> {
        let name = tool.name().to_owned();
        let mut entries = self.write();
        if entries.contains_key(&name) {
            return Err(TurnError::DuplicateTool { name });
        }
        entries.insert(name, Entry { tool, visibility });
        Ok(())
    }

    /// Adds or replaces a tool (an MCP server reconnected).
    pub fn upsert(&self, tool: Arc<dyn Tool>, visibility: Visibility) {
        let name = tool.name().to_owned();
        self.write().insert(name, Entry { tool, visibility });
    }

    pub fn remove(&self, name: &str) -> bool {
        self.write().shift_remove(name).is_some()
    }

    /// The tools the role `handle` sees, in registration order.
    pub fn tools_for(&self, handle: &str) -> Vec<Arc<dyn Tool>> {
        self.read()
            .values()
            .filter(|e| e.visibility.allows(handle))
            .map(|e| e.tool.clone())
            .collect()
    }

    /// The tool `name` if the role `handle` sees it.
    pub fn get_for(&self, handle: &str, name: &str) -> Option<Arc<dyn Tool>> {
        self.read()
            .get(name)
            .filter(|e| e.visibility.allows(handle))
            .map(|e| e.tool.clone())
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.read().keys().cloned().collect();
        f.debug_tuple("ToolRegistry").field(&names).finish()
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use serde_json::{Value, json};

    use super::*;
    use crate::{ToolContext, ToolError, ToolOutput};

    struct Named(&'static str);

    #[async_trait]
    impl Tool for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            "test tool"
        }
        fn schema(&self) -> Value {
            json!({"type": "object"})
        }
        async fn invoke(&self, _: &ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::text(self.0))
        }
    }

    fn names(tools: &[Arc<dyn Tool>]) -> Vec<&str> {
        tools.iter().map(|t| t.name()).collect()
    }

    #[test]
    fn roles_see_only_their_tools() -> Result<(), TurnError> {
        let r = ToolRegistry::new();
        r.register(Arc::new(Named("shared")), Visibility::All)?;
        r.register(Arc::new(Named("deploy")), Visibility::roles(["eng", "ops"]))?;
        r.register(Arc::new(Named("invoice")), Visibility::roles(["finance"]))?;
        assert_eq!(names(&r.tools_for("eng")), ["shared", "deploy"]);
        assert_eq!(names(&r.tools_for("finance")), ["shared", "invoice"]);
        assert_eq!(names(&r.tools_for("pm")), ["shared"]);
        assert!(r.get_for("pm", "deploy").is_none());
        assert!(r.get_for("ops", "deploy").is_some());
        Ok(())
    }

    #[test]
    fn duplicate_names_are_refused_but_upsert_replaces() -> Result<(), TurnError> {
        let r = ToolRegistry::new();
        r.register(Arc::new(Named("a")), Visibility::All)?;
        assert!(matches!(
            r.register(Arc::new(Named("a")), Visibility::All),
            Err(TurnError::DuplicateTool { .. })
        ));
        r.upsert(Arc::new(Named("a")), Visibility::roles(["x"]));
        assert!(r.tools_for("y").is_empty());
        assert!(r.remove("a"));
        assert!(r.is_empty());
        Ok(())
    }
}
