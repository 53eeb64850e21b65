//! One throw-away PostgreSQL database per test, so tests run in parallel
//! without seeing each other's rows.

use tokio_postgres::NoTls;

/// A database named `crewlet_test_<uuid>` created on the test server and
/// dropped (with `FORCE`, closing leftover connections) when this is dropped.
#[derive(Debug)]
pub struct FreshDatabase {
    /// DSN of the new database (the admin DSN with the database name replaced).
    pub dsn: String,
    /// The database name, `crewlet_test_<32 hex>`.
    pub name: String,
    admin_dsn: String,
}

impl FreshDatabase {
    /// Creates a fresh database on the server behind `admin_dsn` (a DSN in URL
    /// form whose user may `CREATE DATABASE`). Panics when it cannot: the
    /// server answered the reachability probe, so a failure here is a real one.
    pub async fn create(admin_dsn: &str) -> Self {
        let name = format!("crewlet_test_{}", uuid::Uuid::new_v4().simple());
        let (client, connection) = tokio_postgres::connect(admin_dsn, NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the test server {admin_dsn}: {e}"));
        let conn = tokio::spawn(connection);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("cannot create test database {name}: {e}"));
        drop(client);
        let _ = conn.await;
        Self {
            dsn: with_database(admin_dsn, &name),
            name,
            admin_dsn: admin_dsn.to_owned(),
        }
    }
}

impl Drop for FreshDatabase {
    fn drop(&mut self) {
        let admin_dsn = self.admin_dsn.clone();
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        // Drop cannot await; a helper thread with its own runtime does the work
        // whether or not the caller is inside a tokio runtime.
        let worker = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok((client, connection)) = tokio_postgres::connect(&admin_dsn, NoTls).await {
                    let conn = tokio::spawn(connection);
                    if let Err(e) = client.batch_execute(&sql).await {
                        eprintln!("warning: `{sql}` failed: {e}");
                    }
                    drop(client);
                    let _ = conn.await;
                }
            });
        });
        let _ = worker.join();
    }
}

/// `dsn` (URL form) with its database path replaced by `database`.
pub fn with_database(dsn: &str, database: &str) -> String {
    let (scheme, rest) = dsn.split_once("://").unwrap_or(("postgres", dsn));
    let (before_query, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let authority = before_query.split('/').next().unwrap_or(before_query);
    let mut out = format!("{scheme}://{authority}/{database}");
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_is_replaced_and_query_kept() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:55432/postgres", "t1"),
            "postgres://postgres@127.0.0.1:55432/t1"
        );
        assert_eq!(
            with_database("postgres://u:p@h:1/db?sslmode=disable", "t2"),
            "postgres://u:p@h:1/t2?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h:1", "t3"), "postgres://h:1/t3");
    }
}
