//! Files written so that a cut never leaves one that looks complete: bytes
//! go to `.NAME.part` beside the destination, which is synced and renamed
//! into place only once its size and sha256 are right, and removed on any
//! error (or when the pull is dropped). Also: hashing while copying, and
//! turning a full disk into an error that says how much room was needed.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::ModelError;
use crate::progress::Meter;

/// The temporary name of `dest` while it is written.
pub(crate) fn part_path(dest: &Path) -> PathBuf {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dest.with_file_name(format!(".{name}.part"))
}

/// Removes its file when dropped, unless [`disarm`](Self::disarm)ed.
pub(crate) struct PartGuard {
    path: PathBuf,
    armed: bool,
}

impl PartGuard {
    pub(crate) fn new(path: PathBuf) -> Self {
        Self { path, armed: true }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the synced part file to `dest` and syncs the folder, so the
    /// new name survives a crash.
    pub(crate) fn commit(mut self, dest: &Path) -> Result<(), ModelError> {
        std::fs::rename(&self.path, dest).map_err(|e| ModelError::io("rename", dest, e))?;
        self.armed = false;
        if let Some(dir) = dest.parent() {
            sync_dir(dir)?;
        }
        Ok(())
    }
}

impl Drop for PartGuard {
    fn drop(&mut self) {
        if self.armed {
            match std::fs::remove_file(&self.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(file = %self.path.display(), error = %e, "cannot remove a partial download")
                }
            }
        }
    }
}

/// Syncs a folder's entries (new and renamed names) to disk.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), ModelError> {
    #[cfg(unix)]
    {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| ModelError::io("sync", dir, e))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// What a write to the cache needs to say when the disk is full.
#[derive(Debug, Clone)]
pub(crate) struct Room {
    pub(crate) name: &'static str,
    pub(crate) dir: PathBuf,
    /// Bytes the whole pull writes.
    pub(crate) needed: u64,
}

impl Room {
    /// A write to `path` failed: a full disk becomes [`ModelError::NoSpace`].
    pub(crate) fn write_error(&self, path: &Path, e: std::io::Error) -> ModelError {
        if is_no_space(&e) {
            ModelError::NoSpace {
                name: self.name.to_owned(),
                dir: self.dir.clone(),
                needed: self.needed,
                available: free_space(&self.dir),
            }
        } else {
            ModelError::io("write", path, e)
        }
    }

    /// Refuses up front when the file system has less room than the pull
    /// writes (unknown free space is no refusal).
    pub(crate) fn check(&self) -> Result<(), ModelError> {
        match free_space(&self.dir) {
            Some(available) if available < self.needed => Err(ModelError::NoSpace {
                name: self.name.to_owned(),
                dir: self.dir.clone(),
                needed: self.needed,
                available: Some(available),
            }),
            _ => Ok(()),
        }
    }
}

fn is_no_space(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// Bytes an unprivileged process may still write under `dir`.
pub(crate) fn free_space(dir: &Path) -> Option<u64> {
    #[cfg(unix)]
    {
        let s = rustix::fs::statvfs(dir).ok()?;
        Some(s.f_bavail.saturating_mul(s.f_frsize))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        None
    }
}

/// A failed [`copy_hashed`]: on which side.
#[derive(Debug)]
pub(crate) enum CopyError {
    Read(std::io::Error),
    Write(std::io::Error),
}

/// Copies `reader` to `writer`, hashing and counting; returns the bytes
/// copied and their lower-case hex sha256.
pub(crate) fn copy_hashed(
    reader: &mut impl Read,
    writer: &mut impl Write,
    meter: &mut Meter,
) -> Result<(u64, String), CopyError> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CopyError::Read(e)),
        };
        let chunk = &buf[..n];
        hasher.update(chunk);
        writer.write_all(chunk).map_err(CopyError::Write)?;
        total += n as u64;
        meter.advance(n as u64);
    }
    writer.flush().map_err(CopyError::Write)?;
    Ok((total, hex::encode(hasher.finalize())))
}

/// The sha256 of a file, read in full.
pub(crate) fn hash_file(path: &Path, meter: &mut Meter) -> Result<(u64, String), ModelError> {
    let mut file = std::fs::File::open(path).map_err(|e| ModelError::io("open", path, e))?;
    copy_hashed(&mut file, &mut std::io::sink(), meter).map_err(|e| match e {
        CopyError::Read(e) | CopyError::Write(e) => ModelError::io("read", path, e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::{Progress, Stage};

    fn temp_dir(tag: &str) -> PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let dir = std::env::temp_dir().join(format!(
            "crewlet-models-part-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("mkdir");
        dir
    }

    #[test]
    fn an_unfinished_part_file_is_removed_and_a_committed_one_renamed() {
        let dir = temp_dir("guard");
        let dest = dir.join("model.gguf");
        let part = part_path(&dest);
        assert_eq!(part, dir.join(".model.gguf.part"));
        {
            let guard = PartGuard::new(part.clone());
            std::fs::write(guard.path(), b"half").expect("write");
        }
        assert!(!part.exists() && !dest.exists());
        let guard = PartGuard::new(part.clone());
        std::fs::write(guard.path(), b"whole").expect("write");
        guard.commit(&dest).expect("commit");
        assert!(!part.exists());
        assert_eq!(std::fs::read(&dest).expect("read"), b"whole");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn copying_hashes_what_it_writes() {
        let mut meter = Meter::start(&Progress::Silent, "m", Stage::Extract, 3);
        let mut out = Vec::new();
        let (n, sha) = copy_hashed(&mut &b"abc"[..], &mut out, &mut meter).expect("copy");
        assert_eq!((n, out.as_slice()), (3, &b"abc"[..]));
        assert_eq!(
            sha,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    /// `/dev/full` answers every write with ENOSPC, as a full disk does.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_full_disk_says_how_much_room_the_pull_needs() {
        let mut full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let mut meter = Meter::start(&Progress::Silent, "m", Stage::Extract, 3);
        let Err(CopyError::Write(e)) = copy_hashed(&mut &b"abc"[..], &mut full, &mut meter) else {
            panic!("a write to /dev/full succeeded");
        };
        let room = Room {
            name: "m",
            dir: std::env::temp_dir(),
            needed: 5 * 1024 * 1024,
        };
        let err = room.write_error(Path::new("/dev/full"), e);
        assert!(
            matches!(
                err,
                ModelError::NoSpace {
                    needed: 5242880,
                    ..
                }
            ),
            "{err}"
        );
        let text = err.to_string();
        assert!(text.contains("needs 5.0 MiB free"), "{text}");
        assert!(text.contains("available"), "{text}");
    }

    #[test]
    fn the_up_front_check_refuses_more_than_the_disk_holds() {
        let room = Room {
            name: "m",
            dir: std::env::temp_dir(),
            needed: u64::MAX,
        };
        if free_space(&room.dir).is_some() {
            let err = room
                .check()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains("no room left"), "{err}");
        }
        let small = Room { needed: 1, ..room };
        assert!(small.check().is_ok());
    }
}
