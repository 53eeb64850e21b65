//! `cargo xtask bench memory`: figures of agent memory.
//!
//! Sections, each in its own file so they can grow apart:
//! - [`embedder`]: the local embedder's throughput and RSS
//!   (`crates/crewlet-embed-local/examples/embed_bench.rs`);
//! - diary writes with embedding and prefetch candidate selection at scale
//!   (`prefetch.rs`).

pub mod embedder;

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
}

pub fn run(args: Args) -> Result<()> {
    embedder::run(&args)?;
    // diary and prefetch sections are added by prefetch.rs
    Ok(())
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
    }
}
