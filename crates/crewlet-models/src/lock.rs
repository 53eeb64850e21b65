//! One pull (or removal) of a model at a time, across processes: an
//! exclusive `flock` on `<models dir>/.<name>.lock`. The kernel drops the
//! lock when its holder exits, so a killed pull never leaves a stale lock.

use std::path::{Path, PathBuf};

use crate::error::ModelError;

/// Held while a model's folder is written; released on drop.
#[derive(Debug)]
pub(crate) struct ModelLock {
    _file: std::fs::File,
}

/// The lock file of model `name` under `dir`.
pub(crate) fn lock_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!(".{name}.lock"))
}

/// Waits for the lock of model `name` (logging once that it waits).
pub(crate) async fn acquire(dir: &Path, name: &str) -> Result<ModelLock, ModelError> {
    let path = lock_path(dir, name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| ModelError::io("create the lock file", &path, e))?;
    #[cfg(unix)]
    {
        use rustix::fs::{FlockOperation, flock};
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(ModelLock { _file: file }),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => {}
            Err(e) => return Err(ModelError::io("lock", &path, e.into())),
        }
        tracing::info!(
            model = name,
            lock = %path.display(),
            "another process is pulling {name}; waiting for it"
        );
        let waited = path.clone();
        let task = tokio::task::spawn_blocking(move || {
            flock(&file, FlockOperation::LockExclusive).map(|()| file)
        });
        match task.await {
            Ok(Ok(file)) => Ok(ModelLock { _file: file }),
            Ok(Err(e)) => Err(ModelError::io("lock", waited, e.into())),
            Err(e) => Err(ModelError::Task {
                name: name.to_owned(),
                message: e.to_string(),
            }),
        }
    }
    #[cfg(not(unix))]
    Ok(ModelLock { _file: file })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_second_holder_waits_for_the_first() {
        let dir = std::env::temp_dir().join(format!("crewlet-models-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let first = acquire(&dir, "m").await.expect("first");
        let dir2 = dir.clone();
        let second = tokio::spawn(async move { acquire(&dir2, "m").await.map(|_| ()) });
        // Not acquired while the first is held: it is still pending after
        // the first's holder has yielded many times.
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert!(!second.is_finished());
        drop(first);
        let got = tokio::time::timeout(Duration::from_secs(120), second).await;
        assert!(matches!(got, Ok(Ok(Ok(())))), "{got:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
