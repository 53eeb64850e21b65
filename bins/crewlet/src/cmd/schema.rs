//! `crewlet schema company|bootstrap [--markdown]`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use crewlet_config::{Tier, configuration_markdown, tier_markdown};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which file: the company YAML or the bootstrap config.yaml. May be
    /// left out with --markdown to print the whole configuration reference
    /// (docs/configuration.md).
    #[arg(value_enum, required_unless_present = "markdown")]
    pub kind: Option<Kind>,
    /// Print the reference as Markdown instead of the JSON Schema.
    #[arg(long)]
    pub markdown: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Kind {
    Company,
    Bootstrap,
}

impl From<Kind> for Tier {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::Company => Tier::Company,
            Kind::Bootstrap => Tier::Bootstrap,
        }
    }
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let text = match (args.kind.map(Tier::from), args.markdown) {
        (Some(tier), false) => tier.schema_json(),
        (Some(tier), true) => tier_markdown(tier),
        (None, _) => configuration_markdown(),
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    Ok(ExitCode::SUCCESS)
}
