//! Finding the `crewlet-fake-cli-agent` binary (a fake `claude`, see its
//! source in `src/bin/`) from tests of other crates.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The fake's binary name.
pub const NAME: &str = "crewlet-fake-cli-agent";

/// The fake's path: `CREWLET_FAKE_CLI_AGENT_BIN` if set, else the one in the
/// running test's target directory, built with cargo when it is missing or
/// older than its source.
pub fn binary_path() -> Result<PathBuf, String> {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PATH.get_or_init(locate_or_build).clone()
}

fn locate_or_build() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("CREWLET_FAKE_CLI_AGENT_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| format!("no current executable: {e}"))?;
    // target/<profile>/deps/<test> -> target/<profile>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("the test executable is not under target/<profile>/deps")?;
    let binary = profile_dir.join(format!("{NAME}{}", std::env::consts::EXE_SUFFIX));
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("src/bin/{NAME}.rs"));
    let fresh = |b: &Path| {
        let built = b.metadata().and_then(|m| m.modified());
        let written = source.metadata().and_then(|m| m.modified());
        matches!((built, written), (Ok(b), Ok(w)) if b >= w)
    };
    if binary.is_file() && fresh(&binary) {
        return Ok(binary);
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let mut cmd = std::process::Command::new(cargo);
    cmd.args(["build", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .args(["-p", "crewlet-test-support", "--bin", NAME]);
    if profile_dir.file_name().and_then(|n| n.to_str()) == Some("release") {
        cmd.arg("--release");
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run cargo to build {NAME}: {e}"))?;
    if status.success() && binary.is_file() {
        Ok(binary)
    } else {
        Err(format!(
            "building {NAME} failed ({status}); run `cargo build -p crewlet-test-support --bin {NAME}`"
        ))
    }
}
