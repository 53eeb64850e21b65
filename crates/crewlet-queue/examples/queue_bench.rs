//! Queue benchmark (in progress).
fn main() {}
