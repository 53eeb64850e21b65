//! `cargo xtask bench knowledge`: knowledge search latency (the prefetch's
//! search step, the auxiliary query excluded) and the import of 1,000
//! Markdown pages, against the fake Confluence and Plane (the
//! `knowledge_bench` example of `crewlet-integrations`, in release).

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Pages imported and searched.
    #[arg(long, default_value_t = 1000)]
    pub pages: usize,
    /// Searches timed per backend.
    #[arg(long, default_value_t = 500)]
    pub searches: usize,
}

pub fn run(args: Args) -> Result<()> {
    let mut cargo = super::release_example("crewlet-integrations", None, "knowledge_bench");
    cargo.args([
        "--pages",
        &args.pages.to_string(),
        "--searches",
        &args.searches.to_string(),
    ]);
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the knowledge bench failed")
}
