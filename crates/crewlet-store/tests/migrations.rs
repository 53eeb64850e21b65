//! Migrations against a real PostgreSQL: order, bookkeeping, the advisory
//! lock, unknown migrations, embedding width, native partitions.

mod common;

use crewlet_store::migrate::{MIGRATIONS, Step};
use crewlet_store::partitions::{ensure_partitions, ensure_partitions_between, week_start};
use crewlet_store::{MigrationOptions, Migrator, StoreError, TimePartitioning};

const TABLES: [&str; 13] = [
    "crewlet_events",
    "token_usage",
    "token_budget_usage",
    "agent_diary",
    "episodes",
    "synthesized_skills",
    "synthesized_skill_versions",
    "counterparty_profiles",
    "agent_onboarding_markers",
    "chat_thread_follows",
    "company_config",
    "webhook_deliveries",
    "scheduled_runs",
];

#[tokio::test]
async fn first_run_applies_every_file_in_order_and_creates_every_table() -> anyhow::Result<()> {
    let Some((_guard, db)) = common::empty().await else {
        return Ok(());
    };
    let migrator = Migrator::new(db.clone(), MigrationOptions::default());
    let before = migrator.status().await?;
    assert_eq!(before.pending.len(), MIGRATIONS.len());
    assert!(!before.is_current());

    let mut lines = Vec::new();
    let report = migrator
        .run_with_progress(|p| {
            if matches!(p.step, Step::Applied { .. }) {
                lines.push(p.name.to_owned());
            }
        })
        .await?;
    let names: Vec<String> = MIGRATIONS.iter().map(|m| m.name.to_owned()).collect();
    assert_eq!(report.applied, names);
    assert_eq!(lines, names);
    // Only the native path can run here: TimescaleDB is not installed.
    assert_eq!(report.partitioning, TimePartitioning::Native);
    assert_eq!(report.embedding_dim, 1536);

    let client = db.client().await?;
    for table in TABLES {
        let row = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .await?;
        assert!(row.get::<_, bool>(0), "table {table} missing");
    }
    let recorded: Vec<String> = client
        .query(
            "SELECT filename FROM schema_migrations ORDER BY applied_at, filename",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(recorded, names);

    // A second run has nothing to do.
    let again = migrator.run().await?;
    assert!(again.applied.is_empty());
    assert_eq!(again.already_applied, MIGRATIONS.len());
    assert!(migrator.status().await?.is_current());
    Ok(())
}

#[tokio::test]
async fn two_concurrent_runners_both_succeed_and_apply_each_file_once() -> anyhow::Result<()> {
    let Some((_guard, db)) = common::empty().await else {
        return Ok(());
    };
    let a = Migrator::new(db.clone(), MigrationOptions::default());
    let b = Migrator::new(db.clone(), MigrationOptions::default());
    let (ra, rb) = tokio::join!(a.run(), b.run());
    let (ra, rb) = (ra?, rb?);
    // Exactly one of them did the work; the other waited on the lock.
    assert_eq!(ra.applied.len() + rb.applied.len(), MIGRATIONS.len());
    assert!(ra.applied.is_empty() || rb.applied.is_empty());
    let client = db.client().await?;
    let n: i64 = client
        .query_one("SELECT count(*) FROM schema_migrations", &[])
        .await?
        .get(0);
    assert_eq!(usize::try_from(n)?, MIGRATIONS.len());
    Ok(())
}

#[tokio::test]
async fn a_database_with_unknown_migrations_is_refused_by_name() -> anyhow::Result<()> {
    let Some((_guard, db)) = common::migrated().await else {
        return Ok(());
    };
    let client = db.client().await?;
    client
        .execute(
            "INSERT INTO schema_migrations (filename) VALUES ('9998_from_the_future.sql'), ('9999_also.sql')",
            &[],
        )
        .await?;
    let migrator = Migrator::new(db.clone(), MigrationOptions::default());
    let err = migrator.run().await.err();
    match &err {
        Some(StoreError::UnknownMigrations { names }) => {
            assert_eq!(names, &["9998_from_the_future.sql", "9999_also.sql"]);
        }
        other => panic!("expected UnknownMigrations, got {other:?}"),
    }
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.contains("9998_from_the_future.sql, 9999_also.sql"),
        "{msg}"
    );
    let status = migrator.status().await?;
    assert_eq!(status.unknown.len(), 2);
    assert!(!status.is_current());
    Ok(())
}

#[tokio::test]
async fn embedding_width_is_fixed_at_first_migration() -> anyhow::Result<()> {
    let Some((_guard, db)) = common::empty().await else {
        return Ok(());
    };
    let small = MigrationOptions { embedding_dim: 8 };
    Migrator::new(db.clone(), small).run().await?;
    let client = db.client().await?;
    let typ: String = client
        .query_one(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute
             WHERE attrelid = 'agent_diary'::regclass AND attname = 'embedding'",
            &[],
        )
        .await?
        .get(0);
    assert_eq!(typ, "vector(8)");
    // the HNSW index accepts vectors of that width
    client
        .execute(
            "INSERT INTO agent_diary (id, agent_id, kind, content, embedding)
             VALUES (gen_random_uuid(), gen_random_uuid(), 'diary_long', 'x', '[1,0,0,0,0,0,0,1]')",
            &[],
        )
        .await?;

    let err = Migrator::new(db.clone(), MigrationOptions::default())
        .run()
        .await
        .err();
    assert!(
        matches!(
            err,
            Some(StoreError::EmbeddingWidthMismatch {
                configured: 1536,
                stored: 8
            })
        ),
        "{err:?}"
    );
    let status = Migrator::new(db.clone(), small).status().await?;
    assert_eq!(status.embedding_dim, Some(8));
    assert_eq!(crewlet_store::stored_embedding_dim(&db).await?, Some(8));
    Ok(())
}

#[tokio::test]
async fn stored_embedding_dim_is_none_before_the_first_migration() -> anyhow::Result<()> {
    let Some((_guard, db)) = common::empty().await else {
        return Ok(());
    };
    assert_eq!(crewlet_store::stored_embedding_dim(&db).await?, None);
    Ok(())
}

#[tokio::test]
async fn episodes_carry_task_and_skills_and_write_a_turn_once() -> anyhow::Result<()> {
    let Some((_guard, db)) = common::migrated().await else {
        return Ok(());
    };
    let client = db.client().await?;
    let insert = "INSERT INTO episodes (id, agent_handle, task_id, started_at, ended_at)
                  VALUES ('00000000-0000-0000-0000-000000000001', 'eng', 'ENG-1',
                          '2026-03-01T10:00:00Z', '2026-03-01T10:01:00Z')
                  ON CONFLICT DO NOTHING";
    assert_eq!(client.execute(insert, &[]).await?, 1);
    assert_eq!(
        client.execute(insert, &[]).await?,
        0,
        "the turn id is the key"
    );
    let row = client
        .query_one("SELECT task_id, skills_used::text FROM episodes", &[])
        .await?;
    assert_eq!(row.get::<_, Option<String>>(0).as_deref(), Some("ENG-1"));
    assert_eq!(row.get::<_, String>(1), "[]");
    for index in ["episodes_by_id", "agent_diary_content"] {
        let found: bool = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&index])
            .await?
            .get(0);
        assert!(found, "index {index} missing");
    }
    Ok(())
}

#[tokio::test]
async fn embedding_width_beyond_hnsw_limit_is_refused_before_touching_the_database() {
    let Some((_guard, db)) = common::empty().await else {
        return;
    };
    let err = Migrator::new(
        db,
        MigrationOptions {
            embedding_dim: 3072,
        },
    )
    .run()
    .await
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(err.contains("3072"), "{err}");
}

#[tokio::test]
async fn native_partitions_are_created_ahead_and_adopt_rows_from_the_default_partition()
-> anyhow::Result<()> {
    let Some((_guard, db)) = common::migrated().await else {
        return Ok(());
    };
    let client = db.client().await?;
    let this_week = format!(
        "crewlet_events_w{}",
        week_start(chrono::Utc::now()).format("%Y%m%d")
    );
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&this_week])
        .await?
        .get(0);
    assert!(exists, "{this_week} should exist after migrating");
    let last_week = format!(
        "episodes_w{}",
        week_start(chrono::Utc::now() - chrono::Duration::weeks(1)).format("%Y%m%d")
    );
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&last_week])
        .await?
        .get(0);
    assert!(
        exists,
        "{last_week} (late events) should exist after migrating"
    );
    // Idempotent.
    assert!(ensure_partitions(&db, 4).await?.is_empty());

    // An event far in the past lands in the default partition...
    let old = chrono::Utc::now() - chrono::Duration::weeks(20);
    client
        .execute(
            "INSERT INTO crewlet_events (event_time, event_id, event_type, source, category)
             VALUES ($1, gen_random_uuid(), 'task_started', 't', 'task')",
            &[&old],
        )
        .await?;
    let in_default: i64 = client
        .query_one("SELECT count(*) FROM crewlet_events_default", &[])
        .await?
        .get(0);
    assert_eq!(in_default, 1);
    // ...and moves into its week's partition once that is created.
    let created = ensure_partitions_between(&db, old, old).await?;
    assert_eq!(created.len(), 2, "{created:?}");
    let in_default: i64 = client
        .query_one("SELECT count(*) FROM crewlet_events_default", &[])
        .await?
        .get(0);
    assert_eq!(in_default, 0);
    let total: i64 = client
        .query_one("SELECT count(*) FROM crewlet_events", &[])
        .await?
        .get(0);
    assert_eq!(total, 1);
    Ok(())
}

#[tokio::test]
async fn missing_database_server_is_a_clear_error() {
    let err = crewlet_store::Database::connect("postgres://crewlet:pw123@127.0.0.1:1/crewlet")
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("cannot reach postgresql at 127.0.0.1:1"),
        "{err}"
    );
    assert!(!err.contains("pw123"), "{err}");
}

#[tokio::test]
async fn llm_calls_migration_backfills_recent_phase_events_from_their_payloads()
-> anyhow::Result<()> {
    let Some((_guard, db)) = common::migrated().await else {
        return Ok(());
    };
    let migration = MIGRATIONS
        .iter()
        .find(|m| m.name == "0006_event_llm_calls.sql")
        .map(|m| m.sql)
        .unwrap_or_else(|| panic!("0006_event_llm_calls.sql is not embedded"));
    let client = db.client().await?;
    // Back to the schema before 0006 (dropping the column drops the index
    // that includes it), then rows as an older crewlet wrote them.
    client
        .batch_execute(
            "ALTER TABLE crewlet_events DROP COLUMN llm_calls;
             CREATE INDEX crewlet_events_token_rollup ON crewlet_events (event_time)
                 INCLUDE (phase, input_tokens) WHERE event_type = 'agent_phase_completed';",
        )
        .await?;
    let recent = chrono::Utc::now() - chrono::Duration::days(2);
    let old = chrono::Utc::now() - chrono::Duration::days(60);
    let rows: [(&str, chrono::DateTime<chrono::Utc>, serde_json::Value); 9] = [
        ("number", recent, serde_json::json!({"calls": 4})),
        ("fraction", recent, serde_json::json!({"calls": 2.7})),
        ("string", recent, serde_json::json!({"calls": " 3 "})),
        ("huge", recent, serde_json::json!({"calls": 1e12})),
        ("negative", recent, serde_json::json!({"calls": -2})),
        ("word", recent, serde_json::json!({"calls": "many"})),
        ("absent", recent, serde_json::json!({"input_tokens": 5})),
        ("old", old, serde_json::json!({"calls": 4})),
        ("other_type", recent, serde_json::json!({"calls": 4})),
    ];
    for (name, at, payload) in &rows {
        let event_type = if *name == "other_type" {
            "task_started"
        } else {
            "agent_phase_completed"
        };
        client
            .execute(
                "INSERT INTO crewlet_events (event_time, event_id, event_type, source, category, summary, payload)
                 VALUES ($1, gen_random_uuid(), $2, 't', 'system', $3, $4)",
                &[at, &event_type, name, payload],
            )
            .await?;
    }
    client.batch_execute(migration).await?;
    let got: std::collections::BTreeMap<String, Option<i32>> = client
        .query("SELECT summary, llm_calls FROM crewlet_events", &[])
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let want: std::collections::BTreeMap<String, Option<i32>> = [
        ("number", Some(4)),
        ("fraction", Some(2)),
        ("string", Some(3)),
        ("huge", Some(i32::MAX)),
        ("negative", None),
        ("word", None),
        ("absent", None),
        ("old", None),
        ("other_type", None),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(got, want);
    let covering: bool = client
        .query_one(
            "SELECT pg_get_indexdef('crewlet_events_token_rollup'::regclass) LIKE '%llm_calls%'",
            &[],
        )
        .await?
        .get(0);
    assert!(covering, "the rollup index should include llm_calls");
    Ok(())
}

#[tokio::test]
async fn the_diary_is_split_by_agent_and_the_upgrade_keeps_every_row() -> anyhow::Result<()> {
    let Some((_guard, db)) = common::migrated().await else {
        return Ok(());
    };
    let migration = MIGRATIONS
        .iter()
        .find(|m| m.name == "0009_diary_by_agent.sql")
        .map(|m| m.sql.replace("{{embedding_dim}}", "1536"))
        .unwrap_or_else(|| panic!("0009_diary_by_agent.sql is not embedded"));
    let client = db.client().await?;
    // Back to the one table of 0004 + 0008, holding rows of 40 agents (some
    // with a TTL, some without a vector), as an older crewlet wrote them.
    client
        .batch_execute(
            "DROP TABLE agent_diary;
             CREATE TABLE agent_diary (
                 id uuid PRIMARY KEY, agent_id uuid NOT NULL,
                 kind text NOT NULL CHECK (kind IN ('diary_long', 'diary_short')),
                 content text NOT NULL, embedding vector(1536), ttl_until timestamptz,
                 created_at timestamptz NOT NULL DEFAULT now());
             CREATE INDEX agent_diary_embedding ON agent_diary USING hnsw (embedding vector_cosine_ops);
             CREATE INDEX agent_diary_recent ON agent_diary (agent_id, created_at DESC);
             CREATE INDEX agent_diary_expiry ON agent_diary (ttl_until) WHERE ttl_until IS NOT NULL;
             CREATE INDEX agent_diary_content ON agent_diary (agent_id, md5(content));
             INSERT INTO agent_diary (id, agent_id, kind, content, embedding, ttl_until, created_at)
             SELECT gen_random_uuid(), md5('agent ' || (g % 40))::uuid,
                    CASE WHEN g % 3 = 0 THEN 'diary_short' ELSE 'diary_long' END,
                    'note ' || g,
                    CASE WHEN g % 5 = 0 THEN NULL
                         ELSE (SELECT array_agg(CASE WHEN i = 1 + g % 1536 THEN 1 ELSE 0 END)
                               FROM generate_series(1, 1536) i)::vector END,
                    CASE WHEN g % 3 = 0 THEN now() + interval '1 day' END,
                    now() - make_interval(secs => g)
             FROM generate_series(1, 400) g;
             CREATE TABLE diary_before AS SELECT * FROM agent_diary;",
        )
        .await?;
    client
        .batch_execute(&format!("BEGIN; {migration}; COMMIT;"))
        .await?;

    let kind: String = client
        .query_one(
            "SELECT relkind::text FROM pg_class WHERE relname = 'agent_diary'",
            &[],
        )
        .await?
        .get(0);
    assert_eq!(kind, "p", "agent_diary is a partitioned table");
    let partitions: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_partition_tree('agent_diary') WHERE isleaf",
            &[],
        )
        .await?
        .get(0);
    assert_eq!(partitions, 32);
    let lost: i64 = client
        .query_one(
            "SELECT count(*) FROM (
                 (SELECT id, agent_id, kind, content, embedding::text, ttl_until, created_at FROM diary_before
                  EXCEPT SELECT id, agent_id, kind, content, embedding::text, ttl_until, created_at FROM agent_diary)
                 UNION ALL
                 (SELECT id, agent_id, kind, content, embedding::text, ttl_until, created_at FROM agent_diary
                  EXCEPT SELECT id, agent_id, kind, content, embedding::text, ttl_until, created_at FROM diary_before)) d",
            &[],
        )
        .await?
        .get(0);
    assert_eq!(lost, 0, "every row survives the upgrade unchanged");
    let split: i64 = client
        .query_one(
            "SELECT count(*) FROM (SELECT agent_id FROM agent_diary
                                   GROUP BY agent_id HAVING count(DISTINCT tableoid) > 1) s",
            &[],
        )
        .await?
        .get(0);
    assert_eq!(split, 0, "an agent's rows live in one partition");
    for index in [
        "agent_diary_embedding",
        "agent_diary_recent",
        "agent_diary_expiry",
        "agent_diary_content",
        "agent_diary_pkey",
    ] {
        let parts: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_partition_tree($1::text::regclass) WHERE isleaf",
                &[&index],
            )
            .await?
            .get(0);
        assert_eq!(parts, 32, "{index} exists on every partition");
    }
    // One agent's search reads one partition.
    let plan: Vec<String> = client
        .query(
            "EXPLAIN SELECT id FROM agent_diary WHERE agent_id = md5('agent 7')::uuid
             ORDER BY created_at DESC LIMIT 5",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let touched = plan
        .iter()
        .filter(|l| l.contains(" on agent_diary_p"))
        .count();
    assert_eq!(touched, 1, "{plan:#?}");
    Ok(())
}
