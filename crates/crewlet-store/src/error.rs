use std::fmt;

/// Where the store connects: enough to name the server in an error, never
/// the password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbTarget {
    pub host: String,
    pub port: u16,
    pub database: String,
    pub user: String,
}

impl fmt::Display for DbTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{} (database `{}`, user `{}`)",
            self.host, self.port, self.database, self.user
        )
    }
}

/// Everything that can go wrong in the store. Messages are lower-case, name
/// what failed and, where there is one, the fix. None ever carries a password.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid database dsn: {0}")]
    InvalidDsn(String),

    #[error("cannot reach postgresql at {target}: {reason}")]
    Unreachable { target: DbTarget, reason: String },

    #[error("postgresql at {target} does not offer the `{extension}` extension; {hint}")]
    MissingExtension {
        target: DbTarget,
        extension: String,
        hint: &'static str,
    },

    #[error("{what} failed: {reason}")]
    Query { what: String, reason: String },

    /// The connection broke or the server refused work for a while (it is
    /// restarting, shutting down, out of connection slots): the same
    /// request may succeed once the database is back.
    #[error("{what} failed, the database is unavailable: {reason}")]
    Unavailable { what: String, reason: String },

    #[error("migration `{name}` failed: {reason}")]
    Migration { name: String, reason: String },

    #[error(
        "the database has migrations this binary does not know: {}; it was migrated by a newer crewlet: upgrade crewlet (downgrades are not supported, restore a backup instead)",
        names.join(", ")
    )]
    UnknownMigrations { names: Vec<String> },

    #[error(
        "embedding width mismatch: the configuration asks for {configured} dimensions but the database was created with {stored}; set the embedding width back to {stored} (it is fixed at the first migration)"
    )]
    EmbeddingWidthMismatch { configured: u32, stored: u32 },

    #[error("{what} conflict: {reason}")]
    Conflict { what: String, reason: String },

    #[error("{what} `{key}` not found")]
    NotFound { what: String, key: String },

    #[error("invalid {what}: {reason}")]
    InvalidInput { what: String, reason: String },

    #[error("cannot read {what} from the database: {reason}")]
    Decode { what: String, reason: String },
}

impl StoreError {
    pub fn invalid(what: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidInput {
            what: what.into(),
            reason: reason.into(),
        }
    }

    pub fn decode(what: impl Into<String>, reason: impl fmt::Display) -> Self {
        Self::Decode {
            what: what.into(),
            reason: reason.to_string(),
        }
    }

    pub fn not_found(what: impl Into<String>, key: impl fmt::Display) -> Self {
        Self::NotFound {
            what: what.into(),
            key: key.to_string(),
        }
    }

    /// Whether the error is the database being unreachable (as opposed to a
    /// bad request or bad data), e.g. for retry decisions.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable { .. })
    }

    /// Whether the error says the database is unavailable right now
    /// (unreachable, connection lost, restarting) rather than that the
    /// request is wrong: retrying the same request later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unreachable { .. } | Self::Unavailable { .. })
    }
}

/// SQLSTATEs of a server that cannot take work for a while: class 08
/// (connection exception), 57P01-57P03 (admin or crash shutdown, cannot
/// connect now) and 53300 (too many connections).
fn is_unavailable_state(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "53300")
}

/// Whether a driver error is the connection or the server being unavailable
/// (as opposed to the statement or its data being wrong).
pub(crate) fn is_unavailable(e: &tokio_postgres::Error) -> bool {
    match e.as_db_error() {
        Some(db) => is_unavailable_state(db.code().code()),
        // No server answer: the connection closed, or I/O failed under it.
        None => {
            e.is_closed() || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
        }
    }
}

/// The useful part of a driver error: the server's message, code, detail and
/// hint for database errors, the I/O cause otherwise.
pub fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = format!("{} ({})", db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            s.push_str(&format!("; detail: {detail}"));
        }
        if let Some(hint) = db.hint() {
            s.push_str(&format!("; hint: {hint}"));
        }
        return s;
    }
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = cause.source();
    }
    s
}

/// Maps a driver error to [`StoreError::Query`] naming `what` was attempted.
pub fn query_err(what: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> StoreError {
    let what = what.into();
    move |e| {
        let reason = describe(&e);
        if is_unavailable(&e) {
            StoreError::Unavailable { what, reason }
        } else {
            StoreError::Query { what, reason }
        }
    }
}

/// The SQLSTATE of a driver error, when the server sent one.
pub fn sqlstate(e: &tokio_postgres::Error) -> Option<&str> {
    e.as_db_error().map(|d| d.code().code())
}
