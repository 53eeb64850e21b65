//! The provisioning ledger (`slack-apps.json` next to the company file by
//! default): which Slack app is which seat's, the fingerprint of the
//! manifest last pushed to it, and the secrets Slack hands out only when
//! the app is created (OAuth client id and secret, signing secret).
//!
//! It is a secrets file: written through a temporary file in the same
//! directory that is renamed over it (a crash never leaves half a ledger,
//! and the once-only secrets are never truncated away), readable by its
//! owner only (0600). Slack cannot list the apps a token made, so losing
//! the ledger means the next run creates new apps.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One seat's app.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppRecord {
    pub app_id: String,
    /// [`fingerprint`](super::manifest::fingerprint) of the manifest last
    /// pushed; an equal one means there is nothing to update.
    #[serde(default)]
    pub manifest_fingerprint: String,
    #[serde(default)]
    pub client_id: String,
    #[serde(default)]
    pub client_secret: String,
    #[serde(default)]
    pub signing_secret: String,
    /// The bot's user id, from the last install.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bot_user_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub team_id: String,
}

impl std::fmt::Debug for AppRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppRecord")
            .field("app_id", &self.app_id)
            .field("manifest_fingerprint", &self.manifest_fingerprint)
            .field("client_id", &self.client_id)
            .field("bot_user_id", &self.bot_user_id)
            .finish_non_exhaustive()
    }
}

/// Every seat's app, by handle.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    #[serde(default)]
    pub apps: BTreeMap<String, AppRecord>,
}

/// A ledger file that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("cannot read the ledger {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("cannot write the ledger {path}: {reason}")]
    Write { path: PathBuf, reason: String },
}

impl Ledger {
    /// Reads `path`; a missing file is an empty ledger.
    pub fn load(path: &Path) -> Result<Ledger, LedgerError> {
        let read_err = |reason: String| LedgerError::Read {
            path: path.to_owned(),
            reason,
        };
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| read_err(e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Ledger::default()),
            Err(e) => Err(read_err(e.to_string())),
        }
    }

    /// Writes the whole ledger to `path` (0600, atomically).
    pub fn save(&self, path: &Path) -> Result<(), LedgerError> {
        let write_err = |reason: String| LedgerError::Write {
            path: path.to_owned(),
            reason,
        };
        let mut text = serde_json::to_string_pretty(self).map_err(|e| write_err(e.to_string()))?;
        text.push('\n');
        write_secret_file(path, text.as_bytes()).map_err(|e| write_err(e.to_string()))
    }
}

/// Replaces `path` with `bytes` through a 0600 temporary file beside it.
pub(crate) fn write_secret_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "ledger".into());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let mut file = options.open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "crewlet-slack-ledger-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        dir
    }

    #[test]
    fn a_missing_ledger_is_empty_and_a_saved_one_reads_back() {
        let dir = temp_dir("roundtrip");
        let path = dir.join("slack-apps.json");
        let empty = Ledger::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(empty.apps.is_empty());
        let mut ledger = Ledger::default();
        ledger.apps.insert(
            "eng".into(),
            AppRecord {
                app_id: "A1".into(),
                client_secret: "very-secret".into(),
                ..AppRecord::default()
            },
        );
        ledger.save(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            Ledger::load(&path).unwrap_or_else(|e| panic!("{e}")),
            ledger
        );
        assert!(!format!("{ledger:?}").contains("very-secret"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path)
                .unwrap_or_else(|e| panic!("{e}"))
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
