//! `crewlet-fake-mcp [--http ADDR]`: see the library docs for the knobs.

#[tokio::main]
async fn main() {
    let code = crewlet_fake_mcp::run(std::env::args().skip(1).collect()).await;
    std::process::exit(code);
}
