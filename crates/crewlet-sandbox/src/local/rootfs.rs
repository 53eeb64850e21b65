//! A box's home as the engine opens it.
//!
//! Everything in a box's home was made or can be changed by the box, so the
//! engine never opens a host path under it. Every file operation starts from
//! a descriptor of the home and resolves the rest with `openat2(2)` beneath
//! it, following no symbolic link at all and crossing no mount
//! (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//! RESOLVE_NO_XDEV`): the kernel checks and opens in one step, so a box that
//! swaps a directory for a link while the engine works cannot win a race,
//! the open fails on the link instead. Parents are made one component at a
//! time with `mkdirat(2)` on the directory just opened, and opened again the
//! same way. What is opened must be a regular file: reads and writes open
//! non-blocking (a FIFO cannot hang the engine) and check `fstat` before a
//! byte moves; reads are capped.
//!
//! A link, a path out of the home or a file that is not a regular one is
//! [`SandboxError::Escape`]: something in the box put it there.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::{HOME, Result, SandboxError};

/// How every path under a box's home is resolved.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// How often an open the kernel asks to retry (`EAGAIN`: a rename raced
/// the resolution) is tried before it is an error.
const RETRIES: usize = 8;

/// How much of a file a read takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// The whole file, refusing one larger than this many bytes.
    All(u64),
    /// At most the last this many bytes (a run's output: the error is at
    /// the end).
    Tail(u64),
}

/// A box's home, open: the root every box file is resolved from.
#[derive(Debug)]
pub(crate) struct HomeFs {
    home: OwnedFd,
}

impl HomeFs {
    /// Opens the home directory itself (a host path the engine made, not
    /// the box: the box sees it as its `/home/user` mount and cannot move
    /// it).
    pub fn open(home: &Path) -> Result<Self> {
        let home_fd = rustix::fs::open(
            home,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| SandboxError::io(home, e.into()))?;
        Ok(Self { home: home_fd })
    }

    /// Reads the file at `rel` (relative to the home), as `take` says.
    pub fn read(&self, rel: &Path, take: Take) -> Result<Vec<u8>> {
        let (parent, name) = split(rel)?;
        let dir = self.dir(parent, rel, false)?;
        let fd = open_beneath(
            dir.as_fd(),
            name,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::NOFOLLOW,
            Mode::empty(),
            rel,
        )?;
        let mut file = File::from(fd);
        let len = regular_len(&file, rel)?;
        let (start, max) = match take {
            Take::All(max) if len > max => return Err(too_large(rel, len, max)),
            Take::All(max) => (0, max),
            Take::Tail(max) => (len.saturating_sub(max), max),
        };
        if start > 0 {
            file.seek(SeekFrom::Start(start))
                .map_err(|e| SandboxError::io(shown(rel), e))?;
        }
        // The file may grow while it is read: never more than asked.
        let mut buf = Vec::with_capacity(len.min(max) as usize);
        file.take(max.saturating_add(u64::from(matches!(take, Take::All(_)))))
            .read_to_end(&mut buf)
            .map_err(|e| SandboxError::io(shown(rel), e))?;
        if let Take::All(max) = take
            && buf.len() as u64 > max
        {
            return Err(too_large(rel, buf.len() as u64, max));
        }
        Ok(buf)
    }

    /// Writes `bytes` to the file at `rel` (relative to the home), making
    /// its parents as needed and replacing what it held.
    pub fn write(&self, rel: &Path, bytes: &[u8]) -> Result<()> {
        let (parent, name) = split(rel)?;
        let dir = self.dir(parent, rel, true)?;
        let fd = open_beneath(
            dir.as_fd(),
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o644),
            rel,
        )?;
        let mut file = File::from(fd);
        // Checked before anything changes: no truncation of what is not ours.
        regular_len(&file, rel)?;
        file.set_len(0)
            .and_then(|()| file.write_all(bytes))
            .map_err(|e| SandboxError::io(shown(rel), e))
    }

    /// Opens the directory `parent` (relative to the home) one component at
    /// a time, making the missing ones when `make` says so. `rel` is the
    /// whole path, for errors.
    fn dir(&self, parent: &Path, rel: &Path, make: bool) -> Result<OwnedFd> {
        let dir_flags = OFlags::PATH | OFlags::DIRECTORY;
        let mut cur = rustix::io::fcntl_dupfd_cloexec(&self.home, 0)
            .map_err(|e| SandboxError::io(HOME, e.into()))?;
        for c in parent.components() {
            let Component::Normal(name) = c else {
                return Err(escape(rel, "its path leaves the box's home"));
            };
            let name = Path::new(name);
            let next = match open_beneath(cur.as_fd(), name, dir_flags, Mode::empty(), rel) {
                Err(SandboxError::Io { source, .. })
                    if make && source.kind() == std::io::ErrorKind::NotFound =>
                {
                    match rustix::fs::mkdirat(&cur, name, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(refused(rel, e)),
                    }
                    // Opened the same way: whatever is there now is checked.
                    open_beneath(cur.as_fd(), name, dir_flags, Mode::empty(), rel)?
                }
                other => other?,
            };
            cur = next;
        }
        Ok(cur)
    }
}

/// `openat2` of one or more components under `dir`, never leaving it and
/// following no link.
fn open_beneath(
    dir: BorrowedFd<'_>,
    path: &Path,
    flags: OFlags,
    mode: Mode,
    rel: &Path,
) -> Result<OwnedFd> {
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(dir, path, flags | OFlags::CLOEXEC, mode, RESOLVE) {
            Ok(fd) => return Ok(fd),
            Err(Errno::AGAIN | Errno::INTR) if tries < RETRIES => tries += 1,
            Err(e) => return Err(refused(rel, e)),
        }
    }
}

/// The error of a failed open or mkdir of `rel`.
fn refused(rel: &Path, e: Errno) -> SandboxError {
    match e {
        // With RESOLVE_NO_SYMLINKS and O_NOFOLLOW, a link anywhere in the path.
        Errno::LOOP => escape(rel, "a symbolic link is on its path"),
        Errno::XDEV => escape(rel, "its path leaves the box's home"),
        // A socket, or a FIFO nobody reads (opened for writing).
        Errno::NXIO => escape(rel, "not a regular file"),
        Errno::NOSYS => SandboxError::Unavailable(
            "the local sandbox opens a box's files with openat2(2), which this kernel lacks \
             (Linux 5.6 or later is needed)"
                .into(),
        ),
        e => SandboxError::io(shown(rel), e.into()),
    }
}

/// The length of an open regular file; anything else is refused.
fn regular_len(file: &File, rel: &Path) -> Result<u64> {
    let meta = file
        .metadata()
        .map_err(|e| SandboxError::io(shown(rel), e))?;
    if !meta.file_type().is_file() {
        return Err(escape(rel, "not a regular file"));
    }
    Ok(meta.len())
}

/// `rel` as its parent and its last component (a file name).
fn split(rel: &Path) -> Result<(&Path, &Path)> {
    match (rel.parent(), rel.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, Path::new(name))),
        _ => Err(escape(rel, "its path leaves the box's home")),
    }
}

fn escape(rel: &Path, reason: &'static str) -> SandboxError {
    SandboxError::Escape {
        path: shown(rel),
        reason,
    }
}

fn too_large(rel: &Path, len: u64, max: u64) -> SandboxError {
    SandboxError::Invalid(format!(
        "{} is {len} bytes, more than the {max} the engine reads",
        shown(rel)
    ))
}

/// The in-box path of `rel`, for errors.
fn shown(rel: &Path) -> String {
    format!("{HOME}/{}", rel.display())
}

/// True when `e` says the file is not there (as opposed to refused).
pub(crate) fn is_missing(e: &SandboxError) -> bool {
    matches!(e, SandboxError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    use super::*;

    struct Tmp(PathBuf);

    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A home and, beside it, a host directory with a secret.
    fn fixture() -> (Tmp, PathBuf, PathBuf, HomeFs) {
        let root = std::env::temp_dir().join(format!("crewlet-rootfs-{}", uuid::Uuid::new_v4()));
        let home = root.join("home");
        let host = root.join("host");
        std::fs::create_dir_all(home.join("dir")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(&host).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(host.join("secret"), "host-secret").unwrap_or_else(|e| panic!("{e}"));
        let fs = HomeFs::open(&home).unwrap_or_else(|e| panic!("{e}"));
        (Tmp(root), home, host, fs)
    }

    fn is_escape(r: &Result<impl std::fmt::Debug>) -> bool {
        matches!(r, Err(SandboxError::Escape { .. }))
    }

    #[test]
    fn files_round_trip_and_parents_are_made() {
        let (_t, home, _, fs) = fixture();
        fs.write(Path::new("a/b/c.txt"), b"hello")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            std::fs::read(home.join("a/b/c.txt")).ok(),
            Some(b"hello".to_vec())
        );
        // Rewriting replaces, never appends.
        fs.write(Path::new("a/b/c.txt"), b"hi")
            .unwrap_or_else(|e| panic!("{e}"));
        let back = fs.read(Path::new("a/b/c.txt"), Take::All(1024));
        assert_eq!(back.ok(), Some(b"hi".to_vec()));
        let missing = fs.read(Path::new("a/none"), Take::All(1024));
        assert!(missing.as_ref().is_err_and(is_missing), "{missing:?}");
    }

    #[test]
    fn reads_are_capped_and_take_the_tail() {
        let (_t, home, _, fs) = fixture();
        std::fs::write(home.join("big"), "0123456789").unwrap_or_else(|e| panic!("{e}"));
        let tail = fs.read(Path::new("big"), Take::Tail(4));
        assert_eq!(tail.ok(), Some(b"6789".to_vec()));
        let all = fs.read(Path::new("big"), Take::Tail(100));
        assert_eq!(all.ok(), Some(b"0123456789".to_vec()));
        let too_big = fs.read(Path::new("big"), Take::All(9));
        assert!(
            matches!(too_big, Err(SandboxError::Invalid(_))),
            "{too_big:?}"
        );
    }

    #[test]
    fn a_link_anywhere_on_the_path_is_refused_and_never_followed() {
        let (_t, home, host, fs) = fixture();
        let secret = host.join("secret");
        // The last component, to a host file and to a file inside the home.
        symlink(&secret, home.join("out")).unwrap_or_else(|e| panic!("{e}"));
        symlink("dir", home.join("inside")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(home.join("dir/f"), "in").unwrap_or_else(|e| panic!("{e}"));
        let r = fs.read(Path::new("out"), Take::All(1024));
        assert!(is_escape(&r), "{r:?}");
        let r = fs.read(Path::new("inside/f"), Take::All(1024));
        assert!(is_escape(&r), "{r:?}");
        // Writing through the link neither writes the target nor replaces
        // the link.
        let w = fs.write(Path::new("out"), b"pwned");
        assert!(is_escape(&w), "{w:?}");
        assert_eq!(
            std::fs::read_to_string(&secret).ok().as_deref(),
            Some("host-secret")
        );
        assert!(
            std::fs::symlink_metadata(home.join("out")).is_ok_and(|m| m.file_type().is_symlink())
        );
        // A directory on the path, for a read and for a write that would
        // make parents under it.
        symlink(&host, home.join("hostdir")).unwrap_or_else(|e| panic!("{e}"));
        let r = fs.read(Path::new("hostdir/secret"), Take::All(1024));
        assert!(is_escape(&r), "{r:?}");
        let w = fs.write(Path::new("hostdir/new/file"), b"x");
        assert!(is_escape(&w), "{w:?}");
        let w = fs.write(Path::new("hostdir/secret"), b"x");
        assert!(is_escape(&w), "{w:?}");
        let entries: Vec<_> = std::fs::read_dir(&host)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert_eq!(entries, ["secret"], "a file appeared on the host");
        // Absolute and relative links that climb out.
        symlink("../host/secret", home.join("up")).unwrap_or_else(|e| panic!("{e}"));
        let r = fs.read(Path::new("up"), Take::All(1024));
        assert!(is_escape(&r), "{r:?}");
        symlink("/proc/self/root/etc/passwd", home.join("magic")).unwrap_or_else(|e| panic!("{e}"));
        let r = fs.read(Path::new("magic"), Take::All(1024));
        assert!(is_escape(&r), "{r:?}");
        // `..` never reaches the kernel as a way out either.
        let r = fs.read(Path::new("../host/secret"), Take::All(1024));
        assert!(is_escape(&r), "{r:?}");
        let w = fs.write(Path::new("dir/../../host/x"), b"x");
        assert!(is_escape(&w), "{w:?}");
    }

    #[test]
    fn a_fifo_is_refused_without_hanging() {
        let (_t, home, _, fs) = fixture();
        let fifo = home.join("fifo");
        let made = rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, Mode::from_raw_mode(0o644));
        assert!(made.is_ok(), "{made:?}");
        // Nobody writes it: a blocking open or read would hang here.
        let r = fs.read(Path::new("fifo"), Take::All(1024));
        assert!(is_escape(&r), "{r:?}");
        // Nobody reads it: a blocking open for writing would hang here.
        let w = fs.write(Path::new("fifo"), b"x");
        assert!(is_escape(&w), "{w:?}");
        // A directory is not a file to read.
        let r = fs.read(Path::new("dir"), Take::All(1024));
        assert!(is_escape(&r), "{r:?}");
    }
}
