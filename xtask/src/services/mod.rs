//! `cargo xtask services up|down|status|restart-pulsar`: the real PostgreSQL
//! and Pulsar that tests and manual runs use, on 127.0.0.1 only, the
//! local models' files (`model`: fetched, nothing runs) and the
//! dashboard's browser tooling (`browser`: Chromium and npm packages) and
//! the code sandbox's host tools (`sandbox`: bubblewrap), and llama.cpp's
//! `llama-server` serving a small real model (`llm`).
//! Paths, ports and versions: [`config`].

pub mod browser;
pub mod config;
pub mod llm;
pub mod model;
pub mod postgres;
pub mod process;
pub mod pulsar;
pub mod sandbox;

use std::time::Instant;

use anyhow::Result;
use clap::{Subcommand, ValueEnum};

use config::Layout;
use process::DirLock;

#[derive(Debug, Subcommand)]
pub enum Action {
    /// Install (once) and start the services; a no-op for those already running.
    Up {
        /// Only this service.
        #[arg(long, value_enum)]
        only: Option<Service>,
    },
    /// Stop the services (data is kept).
    Down {
        /// Only this service.
        #[arg(long, value_enum)]
        only: Option<Service>,
    },
    /// Print the state of each service.
    Status,
    /// Stop and start Pulsar (e.g. to test reconnects).
    RestartPulsar,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Service {
    Postgres,
    Pulsar,
    /// The catalogue's models (SmolLM2 for the `local` LLM provider and
    /// llama-server, all-MiniLM-L6-v2 for the `local` embedder) in the model
    /// cache (nothing to start).
    Model,
    /// Chromium and the `tests/browser` packages for the dashboard's
    /// browser checks (nothing to start).
    Browser,
    /// bubblewrap, git and python3 for the local code sandbox (nothing to
    /// start).
    Sandbox,
    /// llama.cpp's `llama-server` (built once) serving SmolLM2-135M-Instruct
    /// on loopback, for the HTTP providers' real-server tests.
    Llm,
}

impl Service {
    fn selected(self, only: Option<Service>) -> bool {
        only.is_none_or(|o| o == self)
    }
}

pub fn run(action: Action) -> Result<()> {
    let layout = Layout::from_env();
    match action {
        Action::Up { only } => {
            let _lock = DirLock::acquire(layout.root())?;
            up(&layout, only)
        }
        Action::Down { only } => {
            let _lock = DirLock::acquire(layout.root())?;
            if Service::Llm.selected(only) {
                llm::down(&layout)?;
            }
            if Service::Pulsar.selected(only) {
                pulsar::down(&layout)?;
            }
            if Service::Postgres.selected(only) {
                postgres::down(&layout)?;
            }
            // The model is files only: nothing to stop, they stay.
            Ok(())
        }
        Action::Status => {
            println!("services dir: {}", layout.root().display());
            postgres::status(&layout);
            pulsar::status(&layout);
            model::status(&layout);
            browser::status();
            sandbox::status();
            llm::status(&layout);
            Ok(())
        }
        Action::RestartPulsar => {
            let _lock = DirLock::acquire(layout.root())?;
            pulsar::down(&layout)?;
            pulsar::up(&layout)
        }
    }
}

/// `cargo xtask models fetch`: the catalogue's models alone, under the lock.
pub fn fetch_models() -> Result<()> {
    let layout = Layout::from_env();
    let _lock = DirLock::acquire(layout.root())?;
    model::up(&layout)
}

fn up(layout: &Layout, only: Option<Service>) -> Result<()> {
    let started = Instant::now();
    if Service::Postgres.selected(only) {
        postgres::up(layout)?;
    }
    if Service::Pulsar.selected(only) {
        pulsar::up(layout)?;
    }
    if Service::Model.selected(only) {
        model::up(layout)?;
    }
    if Service::Browser.selected(only) {
        browser::up()?;
    }
    if Service::Sandbox.selected(only) {
        sandbox::up()?;
    }
    // after `model`, which fetches the GGUF it serves
    if Service::Llm.selected(only) {
        llm::up(layout)?;
    }
    println!("services: up in {:.2} s", started.elapsed().as_secs_f64());
    Ok(())
}
