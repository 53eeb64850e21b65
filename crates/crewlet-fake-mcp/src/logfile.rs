//! The JSONL log the servers share: appended one whole line at a time,
//! read back finished line by finished line.

use std::io::Write as _;
use std::path::Path;

use serde_json::Value;

use crate::Server;

/// The lines of `text` that end in a newline (a line still being written
/// by another process has none yet).
fn complete_lines(text: &str) -> impl Iterator<Item = &str> {
    let done = text.rfind('\n').map_or(0, |i| i + 1);
    text[..done].lines().filter(|l| !l.trim().is_empty())
}

/// The log file's finished lines, each parsed: for tests reading what the
/// servers recorded. A missing file is an empty log; a finished line that is
/// not JSON is an error naming its number and text.
pub fn read_log(path: &Path) -> Result<Vec<Value>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    complete_lines(&text)
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| format!("{} line {}: {e}: {l}", path.display(), i + 1))
        })
        .collect()
}

impl Server {
    /// Appends one line with a single `write` on an `O_APPEND` file: several
    /// server processes share one log, and a line written in pieces (as
    /// `writeln!` on a `File` does, one `write` per formatted fragment) can
    /// interleave with another process's line.
    pub(crate) fn append_log(&self, line: Value) {
        let Some(path) = &self.config.log else { return };
        let mut text = line.to_string();
        text.push('\n');
        let _guard = self.log_lock.lock();
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(e) = written {
            eprintln!("fake-mcp: cannot write {}: {e}", path.display());
        }
    }

    pub(crate) fn read_log(&self) -> Vec<Value> {
        let Some(path) = &self.config.log else {
            return Vec::new();
        };
        let _guard = self.log_lock.lock();
        let text = std::fs::read_to_string(path).unwrap_or_default();
        // A line another process has not finished is left for the next read;
        // a finished line that is not JSON is a bug in this server, skipped here.
        complete_lines(&text)
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}
