//! `cargo xtask schema [--check]`: the JSON Schemas in `docs/schema/` are the
//! output of `crewlet schema <kind>`; `docs/openapi.json` is the output of
//! `crewlet-api --openapi`.

use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::{cmd, workspace_root};

/// `crewlet schema <kind>` and the file it is written to (relative to the root).
pub const SCHEMAS: &[(&str, &str)] = &[
    ("company", "docs/schema/company.schema.json"),
    ("bootstrap", "docs/schema/bootstrap.schema.json"),
];

/// The OpenAPI document (generated from the API's routes).
pub const OPENAPI: &str = "docs/openapi.json";

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Fail if a committed schema differs from the generated one (writes nothing).
    #[arg(long)]
    pub check: bool,
}

pub fn run(args: &Args) -> Result<()> {
    let root = workspace_root();
    let mut stale = Vec::new();
    let mut jobs: Vec<(String, Vec<&str>, &str)> = SCHEMAS
        .iter()
        .map(|(kind, rel)| {
            let what = format!("the {kind} schema");
            (what, vec!["-p", "crewlet", "--", "schema", kind], *rel)
        })
        .collect();
    let openapi = vec![
        "-p",
        "crewlet-api-bin",
        "--bin",
        "crewlet-api",
        "--",
        "--openapi",
    ];
    jobs.push(("the openapi document".into(), openapi, OPENAPI));
    for (what, run_args, rel) in jobs {
        let generated = generate(&root, &what, &run_args)?;
        let path = root.join(rel);
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() == Some(generated.as_str()) {
            println!("schema: {rel} is up to date");
            continue;
        }
        if args.check {
            stale.push(rel);
            continue;
        }
        write(&path, &generated)?;
        println!("schema: wrote {rel}");
    }
    if !stale.is_empty() {
        bail!(
            "out of date: {}; run `cargo xtask schema` and commit the result",
            stale.join(", ")
        );
    }
    Ok(())
}

/// The output of `cargo run -q <run_args>`, ending in a newline.
fn generate(root: &Path, what: &str, run_args: &[&str]) -> Result<String> {
    let mut cargo = cmd::cargo();
    cargo.current_dir(root).args(["run", "-q"]).args(run_args);
    let mut text = cmd::output(&mut cargo).with_context(|| format!("cannot generate {what}"))?;
    if text.trim().is_empty() {
        bail!("`{}` printed nothing", cmd::describe(&cargo));
    }
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
