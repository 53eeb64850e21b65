use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime, Timeouts,
};
use tokio_postgres::NoTls;
use tokio_postgres::config::Host;

use crate::error::{DbTarget, StoreError, describe, query_err};

/// How the pool connects. Defaults suit one engine or API process.
#[derive(Clone, Debug)]
pub struct DatabaseOptions {
    /// Pool size (default 16).
    pub max_connections: usize,
    /// How long one connection attempt may take (default 5 s).
    pub connect_timeout: Duration,
    /// How long a caller waits for a free pooled connection (default 30 s).
    pub wait_timeout: Duration,
    /// `application_name` shown in `pg_stat_activity` (default `crewlet`).
    pub application_name: String,
}

impl Default for DatabaseOptions {
    fn default() -> Self {
        Self {
            max_connections: 16,
            connect_timeout: Duration::from_secs(5),
            wait_timeout: Duration::from_secs(30),
            application_name: "crewlet".to_owned(),
        }
    }
}

/// A connection pool to Crewlet's one PostgreSQL database (Tier A
/// `providers.database.dsn`). Cheap to clone.
#[derive(Clone)]
pub struct Database {
    pool: Pool,
    target: Arc<DbTarget>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// Reads the server address out of a DSN (URL or `key=value` form) without
/// keeping the password anywhere an error could show it.
pub fn parse_dsn(dsn: &str) -> Result<(tokio_postgres::Config, DbTarget), StoreError> {
    let config = tokio_postgres::Config::from_str(dsn)
        // The driver's parse errors name the bad key, never echo the DSN.
        .map_err(|e| StoreError::InvalidDsn(describe(&e)))?;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("postgres").to_owned();
    let database = config.get_dbname().unwrap_or(&user).to_owned();
    Ok((
        config,
        DbTarget {
            host,
            port,
            database,
            user,
        },
    ))
}

impl Database {
    /// Connects with default options and checks the server answers.
    pub async fn connect(dsn: &str) -> Result<Self, StoreError> {
        Self::connect_with(dsn, DatabaseOptions::default()).await
    }

    /// Builds the pool and opens one connection, so an unreachable server is
    /// reported now, naming host, port and database.
    pub async fn connect_with(dsn: &str, options: DatabaseOptions) -> Result<Self, StoreError> {
        let db = Self::lazy(dsn, options)?;
        let client = db.client().await?;
        client
            .simple_query("SELECT 1")
            .await
            .map_err(query_err("connection check"))?;
        Ok(db)
    }

    /// One round trip on a pooled connection: `Ok` when the server answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .simple_query("SELECT 1")
            .await
            .map_err(query_err("connection check"))?;
        Ok(())
    }

    /// Builds the pool without connecting; connections open on first use.
    pub fn lazy(dsn: &str, options: DatabaseOptions) -> Result<Self, StoreError> {
        let (mut config, target) = parse_dsn(dsn)?;
        config.connect_timeout(options.connect_timeout);
        config.application_name(&options.application_name);
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.max_connections.max(1))
            .runtime(Runtime::Tokio1)
            .timeouts(Timeouts {
                wait: Some(options.wait_timeout),
                create: Some(options.connect_timeout + Duration::from_secs(1)),
                recycle: Some(options.connect_timeout),
            })
            .build()
            .map_err(|e| StoreError::InvalidDsn(format!("cannot build the pool: {e}")))?;
        Ok(Self {
            pool,
            target: Arc::new(target),
        })
    }

    /// Host, port, database and user this pool connects to.
    pub fn target(&self) -> &DbTarget {
        &self.target
    }

    /// The underlying deadpool pool, for code that needs raw access.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// A pooled connection; an unreachable server becomes
    /// [`StoreError::Unreachable`].
    pub async fn client(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(|e| self.pool_error(e))
    }

    fn pool_error(&self, e: PoolError) -> StoreError {
        let reason = match &e {
            PoolError::Backend(pg) => describe(pg),
            PoolError::Timeout(kind) => format!("timed out ({kind:?}) waiting for a connection"),
            other => other.to_string(),
        };
        StoreError::Unreachable {
            target: (*self.target).clone(),
            reason,
        }
    }

    /// Fails with [`StoreError::MissingExtension`] unless the server can
    /// install `extension` (listed in `pg_available_extensions`).
    pub async fn require_extension(&self, extension: &str) -> Result<(), StoreError> {
        if self.extension_available(extension).await? {
            return Ok(());
        }
        Err(StoreError::MissingExtension {
            target: (*self.target).clone(),
            extension: extension.to_owned(),
            hint: match extension {
                "vector" => {
                    "install pgvector on the server (e.g. the postgresql-18-pgvector package, or an image that ships it)"
                }
                _ => "install it on the server",
            },
        })
    }

    /// Whether the server lists `extension` in `pg_available_extensions`.
    pub async fn extension_available(&self, extension: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT 1 FROM pg_available_extensions WHERE name = $1",
                &[&extension],
            )
            .await
            .map_err(query_err("reading pg_available_extensions"))?;
        Ok(row.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_dsn_is_read_without_keeping_the_password() -> Result<(), StoreError> {
        let (_, t) = parse_dsn("postgres://crewlet:s3cret@db.example:6543/crewlet")?;
        assert_eq!(t.host, "db.example");
        assert_eq!(t.port, 6543);
        assert_eq!(t.database, "crewlet");
        assert!(!t.to_string().contains("s3cret"));
        Ok(())
    }

    #[test]
    fn key_value_dsn_and_defaults() -> Result<(), StoreError> {
        let (_, t) = parse_dsn("host=h user=alice password=pw")?;
        assert_eq!(
            (t.host.as_str(), t.port, t.database.as_str()),
            ("h", 5432, "alice")
        );
        Ok(())
    }

    #[test]
    fn bad_dsn_error_does_not_echo_the_dsn() {
        let err = parse_dsn("postgres://u:hunter2@h:notaport/db")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.starts_with("invalid database dsn"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[tokio::test]
    async fn unreachable_server_names_host_port_and_database_not_the_password() {
        let err = Database::connect_with(
            "postgres://crewlet:topsecret@127.0.0.1:1/crewlet_db",
            DatabaseOptions {
                connect_timeout: Duration::from_secs(2),
                ..DatabaseOptions::default()
            },
        )
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(err.contains("127.0.0.1:1"), "{err}");
        assert!(err.contains("crewlet_db"), "{err}");
        assert!(!err.contains("topsecret"), "{err}");
    }
}
