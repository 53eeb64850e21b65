//! `cargo xtask bench live-edit`: how long a config edit takes to be live
//! in the engine, on Pulsar + PostgreSQL.
//!
//! The engine (`run_until`, no embedded API) and the standalone API
//! (`standalone::serve`) run in this process, each with its own Pulsar
//! client and PostgreSQL pool, as two processes would: the edit reaches the
//! engine through the queue (the `config_revision_activated` nudge) and the
//! database (the active revision). An observer with a third Pulsar client
//! follows `config_revision_applied`. Each round edits one role's goal with
//! `PUT /config/roles/{handle}` and times from the API's answer to the
//! engine's `config_revision_applied` (the next engine up, every seat taken
//! over or waiting only for its own running turn). Prints p50/p99/max.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use crewlet_config::{
    ApiToken, Bootstrap, BootstrapProviders, DatabaseConfig, QueueConfig, QueueKind,
};
use crewlet_queue::{EventQueue, PulsarOptions, PulsarQueue};
use crewlet_test_support::services;

const TOKEN: &str = "live-edit-bench-token";

#[derive(Debug)]
struct Args {
    rounds: usize,
    seats: usize,
}

fn args() -> Result<Args> {
    let mut a = Args {
        rounds: 30,
        seats: 20,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--rounds" => a.rounds = value.parse()?,
            "--seats" => a.seats = value.parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    if a.rounds == 0 || a.seats == 0 {
        bail!("--rounds and --seats must be at least 1");
    }
    Ok(a)
}

fn company(seats: usize) -> String {
    let mut y = "name: Live Edit Bench\nproviders:\n  llm:\n    m: {type: openai-compatible, model: m, base_url: \"http://127.0.0.1:9/v1\"}\nroles:\n".to_owned();
    for i in 0..seats {
        y.push_str(&format!(
            "  - {{name: Seat {i}, handle: s{i}, goal: \"goal 0\"}}\n"
        ));
    }
    y
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    // Small sample sizes: nearest rank.
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = args()?;
    let (Some(admin_dsn), Some(pulsar_url)) =
        (services::require_postgres(), services::require_pulsar())
    else {
        bail!("bench live-edit needs PostgreSQL and Pulsar: `cargo xtask services up`");
    };
    let namespace = format!("bench-live-{}", uuid::Uuid::new_v4().simple());
    let admin = services::pulsar_admin_url();
    let r = reqwest::Client::new()
        .put(format!("{admin}/admin/v2/namespaces/public/{namespace}"))
        .send()
        .await
        .with_context(|| format!("cannot reach the pulsar admin api at {admin}"))?;
    if !r.status().is_success() {
        bail!("cannot create namespace public/{namespace}: {}", r.status());
    }
    let db = crewlet_test_support::database::FreshDatabase::create(&admin_dsn).await;
    let dir = std::env::temp_dir().join(format!("crewlet-live-edit-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let company_file = dir.join("company.yaml");
    std::fs::write(&company_file, company(args.seats))?;

    let mut bootstrap = Bootstrap {
        providers: BootstrapProviders {
            queue: Some(QueueConfig {
                kind: QueueKind::Pulsar,
                url: Some(pulsar_url.clone()),
                namespace: namespace.clone(),
                ..QueueConfig::default()
            }),
            database: Some(DatabaseConfig {
                dsn: db.dsn.clone(),
                embedding_dim: 1536,
                max_connections: 16,
            }),
            knowledge: None,
        },
        ..Bootstrap::default()
    };
    bootstrap.api.port = 0;
    bootstrap.api.auth.tokens = vec![ApiToken {
        id: "bench".into(),
        token: TOKEN.into(),
        scopes: None,
    }];

    // The observer first, so it sees every apply.
    let mut observer_options = PulsarOptions::new(pulsar_url);
    observer_options.namespace = namespace.clone();
    let observer = PulsarQueue::connect(observer_options).await?;
    let mut applied = observer
        .subscribe_stream("crewlet.events.config_revision_applied")
        .await?;

    let (engine_stop, engine_stopped) = tokio::sync::oneshot::channel::<()>();
    let engine = tokio::spawn(crewlet_engine::run::run_until(
        bootstrap.clone(),
        crewlet_engine::RunOptions {
            import_company: Some(company_file),
            ..crewlet_engine::RunOptions::default()
        },
        async move {
            let _ = engine_stopped.await;
        },
    ));
    let listener = crewlet_api::bind("127.0.0.1", 0).await?;
    let port = listener.local_addr()?.port();
    let (api_stop, api_stopped) = tokio::sync::oneshot::channel::<()>();
    let api = tokio::spawn(crewlet_api::standalone::serve(
        bootstrap,
        listener,
        async move {
            let _ = api_stopped.await;
        },
    ));
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ready = http.get(format!("{base}/ready")).send().await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        if Instant::now() > deadline {
            bail!("the api did not get ready");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let mut samples = Vec::new();
    let mut apply_ms = Vec::new();
    // Round 0 warms up (the engine may still be booting); not counted.
    for round in 0..=args.rounds {
        let handle = format!("s{}", round % args.seats);
        let resp = http
            .put(format!("{base}/config/roles/{handle}"))
            .bearer_auth(TOKEN)
            .json(&serde_json::json!({"goal": format!("goal {}", round + 1)}))
            .send()
            .await?;
        if resp.status().as_u16() != 201 {
            bail!("PUT /config/roles/{handle}: {}", resp.status());
        }
        let answered = Instant::now();
        let event = tokio::time::timeout(Duration::from_secs(60), applied.recv())
            .await
            .context("no config_revision_applied within 60 s")?
            .context("the observer's stream ended")?;
        let took = answered.elapsed();
        if round > 0 {
            samples.push(took);
            if let Some(ms) = event.event.payload["apply_ms"].as_u64() {
                apply_ms.push(ms);
            }
        }
    }
    samples.sort();
    apply_ms.sort_unstable();
    let median_apply = apply_ms.get(apply_ms.len() / 2).copied().unwrap_or(0);
    println!(
        "\nLive edit on Pulsar + PostgreSQL ({} seats, {} edits of one role's goal through the standalone API):\n",
        args.seats, args.rounds
    );
    println!(
        "| PUT answered -> config_revision_applied | p50 | p99 | max | engine's own apply (median) |"
    );
    println!("|---|---:|---:|---:|---:|");
    println!(
        "| {} rounds | {:.0} ms | {:.0} ms | {:.0} ms | {median_apply} ms |",
        samples.len(),
        percentile(&samples, 50.0).as_secs_f64() * 1000.0,
        percentile(&samples, 99.0).as_secs_f64() * 1000.0,
        samples.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
    );
    let _ = engine_stop.send(());
    let _ = api_stop.send(());
    let _ = engine.await;
    let _ = api.await;
    observer.shutdown().await;
    let _ = reqwest::Client::new()
        .delete(format!(
            "{admin}/admin/v2/namespaces/public/{namespace}?force=true"
        ))
        .send()
        .await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
