//! `cargo xtask bench memory`: figures of agent memory.
//!
//! Sections, each in its own file so they can grow apart:
//! - [`embedder`]: the local embedder's throughput and RSS
//!   (`crates/crewlet-embed-local/examples/embed_bench.rs`);
//! - [`prefetch`]: prefetch candidate selection at scale and diary writes
//!   with embedding (`crates/crewlet-memory/examples/prefetch_bench.rs`,
//!   `diary_write_bench.rs`).
//!
//! `--only embedder|prefetch|writes` runs one section.

pub mod embedder;
pub mod prefetch;

use anyhow::Result;

/// Each section flattens its own flags in here; their structs need distinct
/// names (clap names an argument group after its struct).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Fewer sentences and rows, for a smoke run.
    #[arg(long)]
    pub quick: bool,
    #[command(flatten)]
    pub embedder: embedder::EmbedderArgs,
    #[command(flatten)]
    pub prefetch: prefetch::PrefetchArgs,
}

pub fn run(args: Args) -> Result<()> {
    if prefetch::selected(&args, prefetch::Section::Embedder) {
        embedder::run(&args)?;
    }
    prefetch::run(&args)
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: super::Args,
    }

    #[test]
    fn the_sections_flags_fit_together() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["memory", "--quick", "--sentences", "64"]);
        let args = cli.map(|c| c.args).ok();
        assert!(args.is_some_and(|a| a.quick && a.embedder.sentences == 64));
        let cli = Cli::try_parse_from([
            "memory",
            "--only",
            "prefetch",
            "--diary-rows",
            "20000",
            "--keep-db",
            "kept",
        ]);
        let args = cli.map(|c| c.args).ok();
        assert!(args.is_some_and(|a| {
            a.prefetch.diary_rows == 20_000
                && a.prefetch.keep_db.as_deref() == Some("kept")
                && super::prefetch::selected(&a, super::prefetch::Section::Prefetch)
                && !super::prefetch::selected(&a, super::prefetch::Section::Embedder)
        }));
    }
}
