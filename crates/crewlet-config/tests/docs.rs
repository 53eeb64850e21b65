//! The committed docs and schemas are exactly what the generators produce.
//! To refresh them after changing the types:
//! `CREWLET_BLESS=1 cargo test -p crewlet-config --test docs`
//! (or `cargo xtask schema` and `crewlet schema --markdown > docs/configuration.md`).

use std::path::{Path, PathBuf};

use crewlet_config::{Tier, configuration_markdown};

fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs")
}

fn check(path: PathBuf, generated: &str) {
    if std::env::var_os("CREWLET_BLESS").is_some() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        }
        std::fs::write(&path, generated).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} differs from the generated text; run `CREWLET_BLESS=1 cargo test -p crewlet-config --test docs` and commit",
        path.display()
    );
}

#[test]
fn configuration_reference_matches_the_types() {
    check(docs().join("configuration.md"), &configuration_markdown());
}

#[test]
fn json_schemas_match_the_types() {
    for tier in [Tier::Company, Tier::Bootstrap] {
        check(
            docs().join(format!("schema/{tier}.schema.json")),
            &tier.schema_json(),
        );
    }
}

#[test]
fn every_field_of_both_tiers_is_documented() {
    // Every property in either schema has a description, so the reference
    // never shows an empty cell.
    fn walk(v: &serde_json::Value, at: &str, missing: &mut Vec<String>) {
        if let Some(props) = v.get("properties").and_then(|p| p.as_object()) {
            for (k, p) in props {
                if p.get("description").is_none() {
                    missing.push(format!("{at}.{k}"));
                }
            }
        }
        if let Some(obj) = v.as_object() {
            for (k, child) in obj {
                walk(child, &format!("{at}/{k}"), missing);
            }
        }
    }
    for tier in [Tier::Company, Tier::Bootstrap] {
        let mut missing = Vec::new();
        walk(tier.schema(), tier.as_str(), &mut missing);
        assert!(missing.is_empty(), "undocumented fields: {missing:?}");
    }
}
