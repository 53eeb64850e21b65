//! The diary sections of `cargo xtask bench memory`:
//! - prefetch candidate selection at scale: the Plan prefetch's
//!   `similar` top-50 + `recent` top-50 on a large PostgreSQL diary
//!   (`crates/crewlet-memory/examples/prefetch_bench.rs`);
//! - diary writes with embedding by the local model, single and batched, on
//!   PostgreSQL and the in-memory twin
//!   (`crates/crewlet-memory/examples/diary_write_bench.rs`).
//!
//! Both run in release mode so xtask stays free of database and model
//! dependencies; they need the PostgreSQL (and the model) of `cargo xtask
//! services up`.

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, clap::Args)]
pub struct PrefetchArgs {
    /// Diary rows in all (prefetch section).
    #[arg(long, default_value_t = 1_000_000)]
    pub diary_rows: u64,
    /// Rows of the agent under test, among --diary-rows.
    #[arg(long, default_value_t = 100_000)]
    pub agent_rows: u64,
    /// Agents holding the rows: the one under test, a small one (100 rows),
    /// the rest share what is left.
    #[arg(long, default_value_t = 1_000)]
    pub agents: u64,
    /// Timed candidate selections per agent (after a warm-up of 50).
    #[arg(long, default_value_t = 500)]
    pub queries: usize,
    /// Keep the loaded database under this name; a re-run with the same
    /// sizes skips the load (drop it by hand when done).
    #[arg(long, value_name = "NAME")]
    pub keep_db: Option<String>,
    /// Diary writes per mode and store (writes section).
    #[arg(long, default_value_t = 512)]
    pub writes: usize,
    /// Run only this section (`embedder` is the embedder section's).
    #[arg(long, value_enum)]
    pub only: Option<Section>,
}

/// The sections of `bench memory`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Section {
    Embedder,
    Prefetch,
    Writes,
}

/// Whether `section` runs under `--only`.
pub fn selected(args: &super::Args, section: Section) -> bool {
    args.prefetch.only.is_none_or(|only| only == section)
}

pub fn run(args: &super::Args) -> Result<()> {
    let own = &args.prefetch;
    if selected(args, Section::Prefetch) {
        println!("== prefetch candidate selection");
        let mut cargo = crate::bench::release_example("crewlet-memory", None, "prefetch_bench");
        if args.quick {
            cargo.arg("--quick");
        } else {
            cargo.args([
                "--diary-rows",
                &own.diary_rows.to_string(),
                "--agent-rows",
                &own.agent_rows.to_string(),
                "--agents",
                &own.agents.to_string(),
                "--queries",
                &own.queries.to_string(),
            ]);
        }
        if let Some(name) = &own.keep_db {
            cargo.args(["--keep-db", name]);
        }
        println!("bench: {}", cmd::describe(&cargo));
        cmd::run(&mut cargo).context(
            "the prefetch bench failed (is PostgreSQL up? `cargo xtask services up --only postgres`)",
        )?;
    }
    if selected(args, Section::Writes) {
        println!("== diary writes with embedding");
        let mut cargo = crate::bench::release_example("crewlet-memory", None, "diary_write_bench");
        if args.quick {
            cargo.arg("--quick");
        } else {
            cargo.args(["--writes", &own.writes.to_string()]);
        }
        cargo.args(["--threads", &args.embedder.embed_threads.to_string()]);
        println!("bench: {}", cmd::describe(&cargo));
        cmd::run(&mut cargo).context(
            "the diary write bench failed (PostgreSQL up and the model fetched? `cargo xtask services up`)",
        )?;
    }
    Ok(())
}
