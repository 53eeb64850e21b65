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
    pub(crate) fn invalid(what: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidInput {
            what: what.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn decode(what: impl Into<String>, reason: impl fmt::Display) -> Self {
        Self::Decode {
            what: what.into(),
            reason: reason.to_string(),
        }
    }

    pub(crate) fn not_found(what: impl Into<String>, key: impl fmt::Display) -> Self {
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
}

/// The useful part of a driver error: the server's message, code, detail and
/// hint for database errors, the I/O cause otherwise.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
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
pub(crate) fn query_err(
    what: impl Into<String>,
) -> impl FnOnce(tokio_postgres::Error) -> StoreError {
    let what = what.into();
    move |e| StoreError::Query {
        what,
        reason: describe(&e),
    }
}

/// The SQLSTATE of a driver error, when the server sent one.
pub(crate) fn sqlstate(e: &tokio_postgres::Error) -> Option<&str> {
    e.as_db_error().map(|d| d.code().code())
}
