//! Finding (and if need be building) the `crewlet-fake-mcp` binary for tests
//! in other crates.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::SERVER_NAME;

/// The path of the `crewlet-fake-mcp` binary for tests in other crates of
/// the workspace: `CREWLET_FAKE_MCP_BIN` if set, else the one beside the
/// running test executable, built with cargo first when it is missing or
/// older than this crate's sources.
pub fn binary_path() -> Result<PathBuf, String> {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PATH.get_or_init(locate_or_build).clone()
}

fn locate_or_build() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var("CREWLET_FAKE_MCP_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| format!("no current executable: {e}"))?;
    // target/{profile}/deps/test-binary -> target/{profile}
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("the test executable is not inside target/{profile}/deps")?;
    let candidate = profile_dir.join(format!("{SERVER_NAME}{}", std::env::consts::EXE_SUFFIX));
    if candidate.exists() && !is_stale(&candidate) {
        return Ok(candidate);
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut cmd = std::process::Command::new(cargo);
    cmd.arg("build")
        .arg("--manifest-path")
        .arg(&manifest)
        .args(["-p", SERVER_NAME, "--bin", SERVER_NAME]);
    if profile_dir.file_name().and_then(|n| n.to_str()) == Some("release") {
        cmd.arg("--release");
    }
    let status = cmd
        .status()
        .map_err(|e| format!("could not run cargo to build {SERVER_NAME}: {e}"))?;
    if !status.success() || !candidate.exists() {
        return Err(format!(
            "building {SERVER_NAME} failed ({status}); run `cargo build -p {SERVER_NAME}`"
        ));
    }
    Ok(candidate)
}

/// Is the binary older than any source file of this crate?
fn is_stale(binary: &Path) -> bool {
    let Ok(built) = binary.metadata().and_then(|m| m.modified()) else {
        return true;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sources = [
        root.join("Cargo.toml"),
        root.join("src/lib.rs"),
        root.join("src/main.rs"),
        root.join("src/binary.rs"),
        root.join("src/http.rs"),
        root.join("src/logfile.rs"),
        root.join("src/rpc.rs"),
        root.join("src/stdio.rs"),
    ];
    sources.iter().any(|p| {
        p.metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|modified| modified > built)
    })
}
