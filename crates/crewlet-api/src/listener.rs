//! Before a listener serves: whether this bootstrap may serve on it (no
//! anonymous reads leave the machine by accident), the local operator token
//! of a loopback listener without tokens, and one start log that says who
//! reads what.

use std::path::Path;

use crewlet_config::{AnonymousAccess, AnonymousRead, ApiConfig};
use tracing::{info, warn};

use crate::error::ApiError;
use crate::local_token::install_local_token;

/// Checks that `config` may serve on `host:port` (a listener that is not
/// loopback refuses anonymous reads unless `allow_anonymous_read:
/// anyone_on_the_network`, and never serves content anonymously), points
/// `config` at `host`, gives a loopback listener without configured tokens
/// its local operator token, and logs who reads what. The engine's embedded
/// API and the standalone API call it before [`crate::ApiBuilder::build`].
pub fn prepare_listener(config: &mut ApiConfig, host: &str, port: u16) -> Result<(), ApiError> {
    let anonymous = config.auth.anonymous_access(host).map_err(|reason| {
        ApiError::Refused(format!(
            "refusing to serve: api.auth.allow_anonymous_read: {reason}"
        ))
    })?;
    config.host = host.to_owned();
    let local = install_local_token(config, host, port);
    log_access(config, anonymous, host, port, local.as_deref());
    Ok(())
}

/// Who reads what, said once at start.
fn log_access(
    config: &ApiConfig,
    anonymous: AnonymousAccess,
    host: &str,
    port: u16,
    local: Option<&Path>,
) {
    let anonymous_reads = match anonymous {
        AnonymousAccess::None => "nothing (every read needs a token)",
        AnonymousAccess::Metadata => {
            "metadata only (seats, states, event types, timings, token figures; no prompts, responses, memory or task text)"
        }
        AnonymousAccess::Content => {
            "everything, content included (allow_anonymous_read: content, loopback only)"
        }
    };
    info!(
        listener = %format!("{host}:{port}"),
        "api access: anonymous callers read {anonymous_reads}; tokens: `read` reads metadata, `read:content` reads content too, `operate` also runs tasks and budgets, `admin` also /config; webhooks answer to their own signatures"
    );
    let loopback = crewlet_config::is_loopback_host(host);
    match (config.auth.allow_anonymous_read, anonymous) {
        (Some(AnonymousRead::AnyoneOnTheNetwork), AnonymousAccess::Metadata) if !loopback => {
            warn!(listener = %format!("{host}:{port}"),
                "anyone who can reach this listener reads metadata without a token (allow_anonymous_read: anyone_on_the_network)");
        }
        (None, AnonymousAccess::None) => {
            info!(listener = %format!("{host}:{port}"),
                "anonymous reads are off: {host} is not a loopback address (set api.auth.allow_anonymous_read: anyone_on_the_network to let anyone on the network read metadata)");
        }
        _ => {}
    }
    if let Some(file) = local {
        info!(file = %file.display(),
            "no api token is configured: the local operator token of this loopback listener (every scope, content included) is in this file; paste it into the dashboard to see prompts and responses (`crewlet task send` reads it too)");
    }
}
