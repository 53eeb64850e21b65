//! `crewlet`: parse the command line and hand it to the command's module in
//! `cmd/`. No logic lives here.

mod cmd;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    cmd::run(cmd::Cli::parse())
}
