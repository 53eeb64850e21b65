//! The embedder section of `cargo xtask bench memory`: sentences/s of the
//! local all-MiniLM-L6-v2 embedder (single-sentence calls and batches of 32)
//! and the RSS it adds (before and after loading, after a warm-up batch).
//!
//! The work is done by `crates/crewlet-embed-local/examples/embed_bench.rs`
//! (run in release mode) so xtask stays free of candle. The model comes from
//! `cargo xtask services up` (or `cargo xtask models fetch`).

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, clap::Args)]
pub struct EmbedderArgs {
    /// Diary-sized sentences embedded per mode (after a warm-up batch).
    #[arg(long, default_value_t = 512)]
    pub sentences: usize,
    /// Threads of the embedder's pool; 0: one per core.
    #[arg(long, default_value_t = 0)]
    pub embed_threads: usize,
    /// Skip the embedder section.
    #[arg(long)]
    pub no_embedder: bool,
}

pub fn run(args: &super::Args) -> Result<()> {
    let own = &args.embedder;
    if own.no_embedder {
        return Ok(());
    }
    println!("== local embedder");
    let mut cargo = crate::bench::release_example("crewlet-embed-local", None, "embed_bench");
    if args.quick {
        cargo.arg("--quick");
    } else {
        cargo.args(["--sentences", &own.sentences.to_string()]);
    }
    cargo.args(["--threads", &own.embed_threads.to_string()]);
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo)
        .context("the embedder bench failed (is the model fetched? `cargo xtask models fetch`)")
}
