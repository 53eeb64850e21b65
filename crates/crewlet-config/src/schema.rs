//! JSON Schemas of both tiers, generated from the types.

use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;

use serde_json::Value;

use crate::bootstrap::Bootstrap;
use crate::company::Company;
use crate::yaml::{Node, NodeKind};

static COMPANY: LazyLock<Value> = LazyLock::new(|| schemars::schema_for!(Company).to_value());
static BOOTSTRAP: LazyLock<Value> = LazyLock::new(|| schemars::schema_for!(Bootstrap).to_value());

/// Which configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    /// Tier A, `config.yaml`.
    Bootstrap,
    /// Tier B, the company YAML.
    Company,
}

impl Tier {
    /// The tier's JSON Schema (draft 2020-12), generated once per process.
    pub fn schema(self) -> &'static Value {
        match self {
            Tier::Bootstrap => &BOOTSTRAP,
            Tier::Company => &COMPANY,
        }
    }

    /// The schema as pretty JSON with a trailing newline, as committed under
    /// `docs/schema/`.
    pub fn schema_json(self) -> String {
        let mut text = serde_json::to_string_pretty(self.schema()).unwrap_or_default();
        text.push('\n');
        text
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Bootstrap => "bootstrap",
            Tier::Company => "company",
        }
    }

    /// Guesses the tier from a document's top-level keys: `name`, `units`,
    /// `roles` (and the other company keys, or `providers.llm`) mean a
    /// company; `debug`, `api`, `observability`, `providers.queue` or
    /// `providers.database` mean a bootstrap file. `None` when the keys say
    /// both or neither.
    pub fn detect(text: &str) -> Option<Tier> {
        let root = crate::yaml::parse(text).root?;
        Self::detect_tree(&root)
    }

    pub(crate) fn detect_tree(root: &Node) -> Option<Tier> {
        const COMPANY_KEYS: [&str; 12] = [
            "name",
            "units",
            "roles",
            "mission",
            "vision",
            "policies",
            "token_budget",
            "turn_engine",
            "learning",
            "scheduling",
            "mcp_servers",
            "integrations",
        ];
        const BOOTSTRAP_KEYS: [&str; 3] = ["debug", "api", "observability"];
        let NodeKind::Map(entries) = &root.kind else {
            return None;
        };
        let mut company = false;
        let mut bootstrap = false;
        for e in entries {
            company |= COMPANY_KEYS.contains(&e.key.as_str());
            bootstrap |= BOOTSTRAP_KEYS.contains(&e.key.as_str());
            if e.key == "providers" {
                company |= e.value.get("llm").is_some() || e.value.get("embeddings").is_some();
                bootstrap |= e.value.get("queue").is_some() || e.value.get("database").is_some();
            }
        }
        match (company, bootstrap) {
            (true, false) => Some(Tier::Company),
            (false, true) => Some(Tier::Bootstrap),
            _ => None,
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Tier {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "bootstrap" => Ok(Tier::Bootstrap),
            "company" => Ok(Tier::Company),
            other => Err(format!(
                "unknown tier `{other}`: expected `company` or `bootstrap`"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_tiers_by_keys() {
        assert_eq!(Tier::detect("name: Acme\n"), Some(Tier::Company));
        assert_eq!(Tier::detect("providers:\n  llm: {}\n"), Some(Tier::Company));
        assert_eq!(Tier::detect("api:\n  port: 8000\n"), Some(Tier::Bootstrap));
        assert_eq!(
            Tier::detect("providers:\n  queue: {type: memory}\n"),
            Some(Tier::Bootstrap)
        );
        assert_eq!(Tier::detect("name: x\ndebug: true\n"), None);
        assert_eq!(Tier::detect("- a\n"), None);
    }

    #[test]
    fn schemas_forbid_unknown_keys_and_show_defaults() {
        let s = Tier::Company.schema();
        assert_eq!(s.get("additionalProperties"), Some(&Value::Bool(false)));
        let te = s.pointer("/$defs/TurnEngine/properties/max_iterations/default");
        assert_eq!(te, Some(&Value::from(3)));
        let b = Tier::Bootstrap.schema();
        let tenant = b.pointer("/$defs/QueueConfig/properties/tenant/default");
        assert_eq!(tenant, Some(&Value::from("public")));
    }
}
