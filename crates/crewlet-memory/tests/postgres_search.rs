//! The pipelined similarity search against a real PostgreSQL: a search
//! that fails on the server leaves its pooled connection outside any
//! transaction, ready for the next caller.

mod common;

use chrono::Utc;
use crewlet_core::AgentId;
use crewlet_memory::{Diary, DiaryKind, MemoryError, NewDiaryEntry, PostgresDiary};
use crewlet_store::{Database, DatabaseOptions};

#[tokio::test]
async fn a_failed_search_does_not_leave_the_connection_in_a_transaction() -> anyhow::Result<()> {
    let Some((guard, _)) = common::migrated().await else {
        return Ok(());
    };
    // One pooled connection, so the next query reuses the failed one.
    let db = Database::connect_with(
        &guard.dsn,
        DatabaseOptions {
            max_connections: 1,
            ..DatabaseOptions::default()
        },
    )
    .await?;
    let agent = AgentId::for_seat("Conformance", "eng");
    let now = Utc::now();
    let right = PostgresDiary::new(db.clone(), 1536);
    right
        .write(
            NewDiaryEntry {
                agent_id: agent,
                kind: DiaryKind::Long,
                content: "a fact".to_owned(),
                ttl_until: None,
                embedding: Some(vec![1.0, 0.0]),
            },
            now,
        )
        .await?;
    // A repository told the wrong width pads the query to 4 dimensions: the
    // server refuses to compare them with the stored 1536.
    let wrong = PostgresDiary::new(db.clone(), 4);
    let err = wrong.similar(&agent, &[1.0, 0.0], 5, now).await.err();
    assert!(matches!(err, Some(MemoryError::Store(_))), "{err:?}");

    // Inside a transaction left open, now() would be the BEGIN's time.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let client = db.client().await?;
    let answer = client
        .simple_query("SELECT now() = statement_timestamp()")
        .await?;
    let fresh = answer.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
        _ => None,
    });
    assert_eq!(
        fresh.as_deref(),
        Some("t"),
        "the connection was still inside the failed search's transaction"
    );
    drop(client);
    let found = right.similar(&agent, &[1.0], 5, now).await?;
    assert_eq!(found.len(), 1);
    Ok(())
}
