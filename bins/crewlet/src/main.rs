//! `crewlet`: parse the command line and hand it to the command's module in
//! `cmd/`. No logic lives here.

mod cmd;

use std::process::ExitCode;

use clap::Parser;

/// jemalloc: a webhook's request, events and routing allocate and free many
/// small objects across threads, where glibc's malloc spent a third of the
/// engine's CPU; mimalloc was as fast but held twice the memory per seat
/// (docs/performance.md, issue 18).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    cmd::run(cmd::Cli::parse())
}
