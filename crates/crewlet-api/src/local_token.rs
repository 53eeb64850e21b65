//! The local operator token: a founder running the quickstart on loopback
//! with no `api.auth.tokens` can still hand seats work (`crewlet task
//! send`, the dashboard's task box). At start the API makes a random token
//! with every scope, writes it to a file only the user can read
//! (`~/.crewlet/run/api-{port}.token`, mode 0600) and logs the file's path,
//! never the token. `crewlet task send` reads the same file. Only when the
//! listener is on a loopback address and no token is configured: any
//! configured token, or a non-loopback host, turns it off.

use std::io::Write as _;
use std::path::PathBuf;

use crewlet_config::{ApiConfig, ApiToken, Scope, is_loopback_host as is_loopback};

/// The id the local token is known by (the author of config revisions).
pub const LOCAL_TOKEN_ID: &str = "local-operator";

/// Where the token of the API on `port` is kept.
pub fn local_token_path(port: u16) -> Option<PathBuf> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(
        PathBuf::from(home)
            .join(".crewlet")
            .join("run")
            .join(format!("api-{port}.token")),
    )
}

/// Whether `config`, served on `host:port`, gets a local token.
pub fn wants_local_token(config: &ApiConfig, host: &str, port: u16) -> bool {
    port > 0 && config.auth.tokens.is_empty() && is_loopback(host)
}

/// Makes the token, writes it and adds it to `config`; the file's path, or
/// `None` when this listener gets none (or the file cannot be written:
/// logged, and the API runs without it).
pub fn install_local_token(config: &mut ApiConfig, host: &str, port: u16) -> Option<PathBuf> {
    if !wants_local_token(config, host, port) {
        return None;
    }
    let path = local_token_path(port)?;
    let token = format!(
        "crewlet-local-{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    if let Err(e) = write_private(&path, &token) {
        tracing::warn!(file = %path.display(), error = %e,
            "cannot write the local operator token; writes need api.auth.tokens");
        return None;
    }
    config
        .auth
        .tokens
        .push(ApiToken::new(LOCAL_TOKEN_ID, token).with_scopes([Scope::Admin]));
    Some(path)
}

/// The local token of the API on `port`, when its file is there.
pub fn read_local_token(port: u16) -> Option<String> {
    let path = local_token_path(port)?;
    let text = std::fs::read_to_string(path).ok()?;
    Some(text.trim().to_owned()).filter(|t| !t.is_empty())
}

fn write_private(path: &std::path::Path, token: &str) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("the token path has no folder"))?;
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        let tmp = path.with_extension("token.tmp");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(token.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    }
    #[cfg(not(unix))]
    {
        let mut file = std::fs::File::create(path)?;
        file.write_all(token.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unconfigured_loopback_listener_gets_one() {
        let mut c = ApiConfig::default();
        assert!(wants_local_token(&c, "127.0.0.1", 8000));
        assert!(wants_local_token(&c, "::1", 8000));
        assert!(wants_local_token(&c, "localhost", 8000));
        assert!(!wants_local_token(&c, "0.0.0.0", 8000));
        assert!(!wants_local_token(&c, "10.0.0.5", 8000));
        assert!(!wants_local_token(&c, "127.0.0.1", 0));
        c.auth.tokens.push(ApiToken::new("ops", "t"));
        assert!(!wants_local_token(&c, "127.0.0.1", 8000));
    }
}
