//! Embeds `migrations/*.sql` (workspace root) into the binary, in filename
//! order, so adding a migration is dropping a file in that folder.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let dir = manifest.join("../../migrations");
    println!("cargo:rerun-if-changed={}", dir.display());

    let mut files: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_owned();
            Some((name, p))
        })
        .collect();
    files.sort();

    let mut out = String::from("&[\n");
    for (name, path) in &files {
        let digits = name.split('_').next().unwrap_or_default();
        assert!(
            digits.len() == 4 && digits.bytes().all(|b| b.is_ascii_digit()),
            "migration `{name}` must be named NNNN_description.sql"
        );
        println!("cargo:rerun-if-changed={}", path.display());
        let abs = path.canonicalize().unwrap_or_else(|_| path.clone());
        let _ = writeln!(
            out,
            "    crate::migrate::Migration {{ name: {name:?}, sql: include_str!({:?}) }},",
            abs.display().to_string()
        );
    }
    out.push(']');
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
    std::fs::write(out_dir.join("migrations.rs"), out)
        .unwrap_or_else(|e| panic!("cannot write migrations.rs: {e}"));
}
