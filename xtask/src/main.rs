//! `cargo xtask`: see `cargo xtask --help`.

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Developer and CI automation for the Crewlet workspace"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Install, start, stop and inspect the local PostgreSQL and Pulsar (127.0.0.1 only),
    /// and fetch the local models.
    Services {
        #[command(subcommand)]
        action: xtask::services::Action,
    },
    /// Run the CI checks: start the services (idempotent), then rustfmt,
    /// clippy (-D warnings) and the whole test suite.
    Ci {
        /// Do not start PostgreSQL and Pulsar first (tests needing them then
        /// skip, or fail under CI=true).
        #[arg(long)]
        no_services: bool,
    },
    /// Fetch model files (`fetch`: the catalogue's models, as `crewlet models pull` does).
    Models {
        #[command(subcommand)]
        action: ModelsAction,
    },
    /// Run schemathesis against the served OpenAPI document (the last step of `ci`).
    Schemathesis,
    /// Regenerate docs/schema/*.schema.json from the `crewlet schema` command.
    Schema(xtask::schema::Args),
    /// Run a benchmark and print its figures.
    Bench {
        #[command(subcommand)]
        bench: xtask::bench::Bench,
    },
}

#[derive(Debug, Subcommand)]
enum ModelsAction {
    /// Pull every catalogue model that is not installed and print where they are.
    Fetch,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Services { action } => xtask::services::run(action),
        Command::Ci { no_services } => {
            if !no_services {
                println!("==> services up (a no-op when already running)");
                xtask::services::run(xtask::services::Action::Up { only: None })?;
            }
            xtask::ci::run()
        }
        Command::Models {
            action: ModelsAction::Fetch,
        } => xtask::services::fetch_models(),
        Command::Schemathesis => xtask::schemathesis::run(),
        Command::Schema(args) => xtask::schema::run(&args),
        Command::Bench { bench } => bench.run(),
    }
}
