//! `crewlet node list|drain`: the fleet's nodes as the lease table shows
//! them, and handing one node's seats over before stopping it (rolling
//! upgrades). The work is done by `crewlet_engine::fleet::admin`.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use crewlet_config::Bootstrap;
use crewlet_engine::fleet::admin;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: NodeCommand,
    #[command(flatten)]
    pub database: super::DatabaseArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum NodeCommand {
    /// The live nodes: roles, seats held, duties, last heartbeat.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Ask a node to hand its seats over (each after its running turn);
    /// it stays up holding none until stopped.
    Drain {
        /// The node id.
        node: String,
        /// Wait until the node holds no seat.
        #[arg(long)]
        wait: bool,
        /// Give up waiting after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
}

pub fn run(args: Args) -> Result<ExitCode> {
    match args.cmd {
        NodeCommand::List { json } => {
            super::with_stores(&args.database, "crewlet node", |_, stores| async move {
                print!("{}", admin::node_list(&stores, json).await?);
                Ok(ExitCode::SUCCESS)
            })
        }
        NodeCommand::Drain {
            node,
            wait,
            timeout,
        } => {
            let bootstrap = Bootstrap::load(args.database.config.as_deref())?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            runtime.block_on(async move {
                let backends =
                    crewlet_engine::Backends::connect(&bootstrap, crewlet_engine::Process::Engine)
                        .await?;
                let wait = wait.then(|| Duration::from_secs(timeout));
                let result = admin::node_drain(&backends, &node, wait).await;
                backends.queue.shutdown().await;
                print!("{}", result?);
                Ok(ExitCode::SUCCESS)
            })
        }
    }
}
