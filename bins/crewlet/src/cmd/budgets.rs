//! `crewlet budgets show|reset`: the token budget ledger in the database of
//! the bootstrap config. The work is done by `crewlet_engine::admin`.

use std::process::ExitCode;

use anyhow::Result;
use crewlet_engine::admin;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: BudgetsCommand,
    #[command(flatten)]
    pub database: super::DatabaseArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum BudgetsCommand {
    /// Used and maximum tokens per budget (org, each agent), and lifetime usage.
    Show {
        #[arg(long)]
        json: bool,
    },
    /// Set a budget's usage back to 0: `org`, a seat handle, or `agent:{id}`.
    Reset {
        #[arg(required_unless_present = "all")]
        scopes: Vec<String>,
        /// Every budget.
        #[arg(long)]
        all: bool,
    },
}

pub fn run(args: Args) -> Result<ExitCode> {
    super::with_stores(&args.database, "crewlet budgets", |_, stores| async move {
        let text = match args.cmd {
            BudgetsCommand::Show { json } => admin::budgets_show(&stores, json).await?,
            BudgetsCommand::Reset { scopes, all } => {
                admin::budgets_reset(&stores, &scopes, all).await?
            }
        };
        print!("{text}");
        Ok(ExitCode::SUCCESS)
    })
}
