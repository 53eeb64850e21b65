//! The dev/CI PostgreSQL answers and has pgvector.
//!
//! Needs `cargo xtask services up`. Without the server this test skips,
//! except under `CI=true`, where it fails.

use std::time::Duration;

use tokio_postgres::NoTls;

fn database_url() -> String {
    std::env::var("CREWLET_TEST_DATABASE_URL")
        .unwrap_or_else(|_| xtask::services::config::pg_dsn("postgres"))
}

/// Fails under CI, skips (returns `true`) elsewhere.
fn unreachable(url: &str, why: &str) -> bool {
    let msg = format!("PostgreSQL not reachable at {url} ({why}); run `cargo xtask services up`");
    assert!(!xtask::in_ci(), "CI=true: {msg}");
    crewlet_test_support::services::skip(&msg);
    true
}

/// `e: cause: cause ...` (tokio-postgres puts the OS error in the source).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

#[tokio::test]
async fn pgvector_distance_is_computed() {
    let url = database_url();
    let connect = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_postgres::connect(&url, NoTls),
    );
    let (client, connection) = match connect.await {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => {
            unreachable(&url, &error_chain(&e));
            return;
        }
        Err(_) => {
            unreachable(&url, "connect timed out after 10 s");
            return;
        }
    };
    let driver = tokio::spawn(connection);

    // Tests in other crates may create the extension concurrently: a lost race
    // is fine as long as the extension exists afterwards.
    if let Err(e) = client
        .batch_execute("CREATE EXTENSION IF NOT EXISTS vector")
        .await
    {
        let row = client
            .query_opt("SELECT 1 FROM pg_extension WHERE extname = 'vector'", &[])
            .await
            .expect("query pg_extension");
        assert!(row.is_some(), "CREATE EXTENSION vector failed: {e}");
    }

    let row = client
        .query_one(
            "SELECT ('[1,2,3]'::vector <-> '[1,2,4]'::vector)::float8",
            &[],
        )
        .await
        .expect("pgvector L2 distance");
    let distance: f64 = row.get(0);
    assert!(
        (distance - 1.0).abs() < 1e-9,
        "expected 1.0, got {distance}"
    );

    drop(client);
    driver
        .await
        .expect("connection task")
        .expect("connection closed cleanly");
}
