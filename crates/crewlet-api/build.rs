//! Rebuilds the crate when a dashboard asset changes: `include_dir!` embeds
//! `dashboard/` at compile time but cannot tell cargo to watch it on
//! stable Rust.

fn main() {
    println!("cargo:rerun-if-changed=dashboard");
}
