//! [`EnvFile`]: the `.env` file provisioning writes minted tokens into.
//!
//! Lines are kept as they are; `VAR=value` (or `export VAR=value`) sets a
//! variable, the last one of a name wins. Writing replaces the variable's
//! line in place (or appends one) and swaps the whole file in through a
//! temporary file in the same directory, so a crash never leaves half a
//! file. A new file is created readable by its owner only (0600); an
//! existing one keeps its permissions.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Where a minted token is recorded.
pub trait TokenSink {
    /// Stores `value` as `var`; the error says why it could not.
    fn record(&mut self, var: &str, value: &str) -> Result<(), String>;
}

/// An env file, read once and written through.
#[derive(Clone)]
pub struct EnvFile {
    path: PathBuf,
    lines: Vec<String>,
}

impl std::fmt::Debug for EnvFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvFile")
            .field("path", &self.path)
            .field("lines", &self.lines.len())
            .finish()
    }
}

impl EnvFile {
    /// Reads `path`; a missing file is an empty one (created on first write).
    pub fn load(path: &Path) -> std::io::Result<EnvFile> {
        let lines = match std::fs::read_to_string(path) {
            Ok(text) => text.lines().map(str::to_owned).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        Ok(EnvFile {
            path: path.to_owned(),
            lines,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The value of `var` in the file, if it sets it.
    pub fn get(&self, var: &str) -> Option<String> {
        self.lines
            .iter()
            .rev()
            .find_map(|line| parse(line).filter(|(k, _)| *k == var).map(|(_, v)| v))
    }

    /// Every variable the file sets.
    pub fn values(&self) -> HashMap<String, String> {
        self.lines
            .iter()
            .filter_map(|line| parse(line))
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
    }

    /// Sets `var` (in place where the file sets it, else at the end) and
    /// writes the file.
    pub fn set(&mut self, var: &str, value: &str) -> std::io::Result<()> {
        let line = format!("{var}={value}");
        let mut lines = self.lines.clone();
        let mut found = false;
        for existing in lines.iter_mut() {
            if parse(existing).is_some_and(|(k, _)| k == var) {
                *existing = line.clone();
                found = true;
            }
        }
        if !found {
            lines.push(line);
        }
        write_atomically(&self.path, &lines)?;
        self.lines = lines;
        Ok(())
    }
}

impl TokenSink for EnvFile {
    fn record(&mut self, var: &str, value: &str) -> Result<(), String> {
        self.set(var, value)
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }
}

/// `(name, value)` of a `NAME=value` line: `export ` allowed, quotes and
/// surrounding blanks taken off the value. Comments and blanks are `None`.
fn parse(line: &str) -> Option<(&str, String)> {
    let line = line.trim_start();
    if line.starts_with('#') {
        return None;
    }
    let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
    let (name, value) = line.split_once('=')?;
    let name = name.trim_end();
    let valid = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return None;
    }
    let value = value.trim();
    let unquoted = ['"', '\'']
        .iter()
        .find_map(|q| {
            value
                .strip_prefix(*q)
                .and_then(|v| v.strip_suffix(*q))
                .filter(|_| value.len() >= 2)
        })
        .unwrap_or(value);
    Some((name, unquoted.to_owned()))
}

fn write_atomically(path: &Path, lines: &[String]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "env".into());
    let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut text = lines.join("\n");
    text.push('\n');
    let result = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let mut file = options.open(&temp)?;
        // An existing file keeps its mode; a new one is 0600 whatever the umask.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(path)
                .map(|m| m.permissions().mode() & 0o7777)
                .unwrap_or(0o600);
            file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_with_export_quotes_and_comments() {
        assert_eq!(parse("A=1"), Some(("A", "1".into())));
        assert_eq!(parse("export B = \"two\" "), Some(("B", "two".into())));
        assert_eq!(parse("C='x'"), Some(("C", "x".into())));
        assert_eq!(parse("D=\""), Some(("D", "\"".into())));
        assert_eq!(parse("# E=1"), None);
        assert_eq!(parse("not a line"), None);
        assert_eq!(parse("1X=1"), None);
    }

    #[test]
    fn set_replaces_in_place_keeps_other_lines_and_creates_0600() {
        let dir = std::env::temp_dir().join(format!("crewlet-envfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(".env");
        let _ = std::fs::remove_file(&path);
        let mut env = EnvFile::load(&path).unwrap();
        assert_eq!(env.get("A"), None);
        env.set("A", "1").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, "# keep\nA=1\nB=2\n").unwrap();
        let mut env = EnvFile::load(&path).unwrap();
        env.set("A", "3").unwrap();
        env.set("C", "4").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "# keep\nA=3\nB=2\nC=4\n");
        assert_eq!(EnvFile::load(&path).unwrap().get("A").as_deref(), Some("3"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
