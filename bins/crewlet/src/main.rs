//! `crewlet`: parse the command line and hand it to the command's module in
//! `cmd/`. No logic lives here.

mod cmd;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc: a webhook's request, events and routing allocate and free many
/// small objects across threads, where glibc's malloc spent a third of the
/// engine's CPU (docs/performance.md, issue 18).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    cmd::run(cmd::Cli::parse())
}
