//! Paths into a YAML tree (`units[0].roles[2].handle`): building, printing
//! and parsing them.

use std::fmt;

/// One step of a [`YamlPath`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// Where a node sits in a document, e.g. `units[0].roles[2].handle`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct YamlPath(pub Vec<Seg>);

impl YamlPath {
    pub fn root() -> Self {
        Self(Vec::new())
    }

    /// A path extended by a key.
    pub fn key(&self, key: &str) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Key(key.to_owned()));
        p
    }

    /// A path extended by a list index.
    pub fn index(&self, i: usize) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Index(i));
        p
    }

    /// Parses the dotted form produced by `Display` (`a.b[2].c`); keys that
    /// needed quoting are not supported and yield `None`.
    pub fn parse(text: &str) -> Option<Self> {
        let mut segs = Vec::new();
        for part in text.split('.').filter(|p| !p.is_empty()) {
            let (key, mut rest) = match part.find('[') {
                Some(i) => (&part[..i], &part[i..]),
                None => (part, ""),
            };
            if !key.is_empty() {
                segs.push(Seg::Key(key.to_owned()));
            }
            while let Some(stripped) = rest.strip_prefix('[') {
                let end = stripped.find(']')?;
                segs.push(Seg::Index(stripped[..end].parse().ok()?));
                rest = &stripped[end + 1..];
            }
            if !rest.is_empty() {
                return None;
            }
        }
        Some(Self(segs))
    }
}

fn plain_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl fmt::Display for YamlPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Key(k) if plain_key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Seg::Key(k) => {
                    let quoted = serde_json::to_string(k).unwrap_or_else(|_| format!("\"{k}\""));
                    write!(f, "[{quoted}]")?;
                }
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}
