//! What the provisioning and import tests share: a scratch directory with
//! the env file provisioning writes into. Each test file has `mod common;`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crewlet_integrations::provision::envfile::EnvFile;

/// A directory removed when dropped, named `{prefix}-{pid}-{n}`.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `text` to `rel`, creating its directories.
    pub fn write(&self, rel: &str, text: &str) {
        let path = self.0.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// The env file provisioning writes into (`.env` in the directory).
    pub fn env_path(&self) -> PathBuf {
        self.0.join(".env")
    }

    /// The env file as it is now.
    pub fn env(&self) -> EnvFile {
        EnvFile::load(&self.env_path()).unwrap()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
