//! `cargo xtask bench quotas`: S seats call one provider as fast as they
//! can, through the guarded OpenAI provider over real HTTP, against the fake
//! model server enforcing R requests per window W itself (a sliding log:
//! one request over answers 429 with `Retry-After`). Each limiter (memory;
//! PostgreSQL, split over P connection pools as P processes would be) runs
//! for N windows. Prints the 429s the server answered (target 0), the calls
//! that failed, and the rate the server accepted against its cap (target
//! within 5%). `none` runs the same seats with no quota (429s and their
//! reset waits only), for comparison.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use crewlet_core::quota::{ProviderQuotas, QuotaLimits};
use crewlet_llm::{
    CompletionRequest, GuardOptions, GuardedProvider, LlmProvider, Message, ProviderConfig,
    ProviderKind, RETRIES_PER_TURN, build_provider, http_client, with_retry_budget,
};
use crewlet_store::{
    Database, MemoryProviderQuotas, MigrationOptions, Migrator, PostgresProviderQuotas,
};
use crewlet_test_support::database::FreshDatabase;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};

struct Args {
    seats: usize,
    rpm: usize,
    window: Duration,
    windows: u32,
    processes: usize,
    limiters: Vec<String>,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        seats: 100,
        rpm: 60,
        window: Duration::from_secs(60),
        windows: 2,
        processes: 2,
        limiters: vec!["memory".into(), "postgres".into()],
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .with_context(|| format!("{flag} {value}"))
        };
        match flag.as_str() {
            "--seats" => a.seats = usize::try_from(number()?.max(1))?,
            "--rpm" => a.rpm = usize::try_from(number()?.max(1))?,
            "--window-secs" => a.window = Duration::from_secs(number()?.max(1)),
            "--windows" => a.windows = u32::try_from(number()?.max(1))?,
            "--processes" => a.processes = usize::try_from(number()?.max(1))?,
            "--limiters" => a.limiters = value.split(',').map(str::to_owned).collect(),
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(a)
}

/// What one run measured.
struct Outcome {
    accepted: u64,
    rate_limited: u64,
    ok: u64,
    failed: u64,
    elapsed: Duration,
}

async fn run(a: &Args, stores: Vec<Option<Arc<dyn ProviderQuotas>>>) -> anyhow::Result<Outcome> {
    let server =
        FakeLlmServer::start(Script::new().on(When::any(), Reply::text("ok").usage(50, 5))).await?;
    server.set_recording(false);
    server.cap_requests(a.rpm, a.window);
    let limits = QuotaLimits::per_minute(Some(u32::try_from(a.rpm)?), None).over(a.window);
    // One guarded provider per "process", each with its own HTTP client,
    // key pool, breaker and (for PostgreSQL) connection pool.
    let mut providers = Vec::new();
    for store in stores {
        let cfg = ProviderConfig::new("bench", ProviderKind::OpenAi, "gpt-bench")
            .with_base_url(server.openai_base_url())
            .with_keys(["sk-bench"]);
        let inner = build_provider(&cfg, &http_client()?)?;
        let mut options = GuardOptions::default();
        if let Some(store) = store {
            options = options.quota(store, "bench/bench", limits);
        }
        providers.push(Arc::new(GuardedProvider::new(inner, options)) as Arc<dyn LlmProvider>);
    }
    let request = CompletionRequest {
        messages: vec![Message::user("hello")],
        max_tokens: Some(16),
        ..CompletionRequest::default()
    };
    let duration = a.window * a.windows;
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + duration;
    let seats: Vec<_> = (0..a.seats)
        .map(|i| {
            let p = providers[i % providers.len()].clone();
            let request = request.clone();
            tokio::spawn(async move {
                let (mut ok, mut failed) = (0u64, 0u64);
                loop {
                    let call = with_retry_budget(RETRIES_PER_TURN, p.complete(&request));
                    match tokio::time::timeout_at(deadline, call).await {
                        Ok(Ok(_)) => ok += 1,
                        Ok(Err(e)) => {
                            failed += 1;
                            eprintln!("call failed: {e}");
                        }
                        Err(_) => return (ok, failed),
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep_until(deadline).await;
    let (accepted, rate_limited) = (server.accepted_count(), server.rate_limited_count());
    let elapsed = started.elapsed();
    let (mut ok, mut failed) = (0, 0);
    for seat in seats {
        let (o, f) = seat.await?;
        ok += o;
        failed += f;
    }
    Ok(Outcome {
        accepted,
        rate_limited,
        ok,
        failed,
        elapsed,
    })
}

async fn postgres_stores(processes: usize) -> anyhow::Result<(FreshDatabase, Vec<Database>)> {
    let admin = std::env::var("CREWLET_BENCH_DATABASE_URL")
        .unwrap_or_else(|_| crewlet_test_support::services::postgres_dsn());
    if crewlet_test_support::services::require_postgres().is_none() {
        bail!("PostgreSQL is not reachable; start it with `cargo xtask services up`");
    }
    let fresh = FreshDatabase::create(&admin).await;
    let first = Database::connect(&fresh.dsn).await?;
    Migrator::new(first.clone(), MigrationOptions::default())
        .run()
        .await?;
    let mut pools = vec![first];
    for _ in 1..processes {
        pools.push(Database::connect(&fresh.dsn).await?);
    }
    Ok((fresh, pools))
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    let window = a.window.as_secs_f64();
    println!(
        "{} seats calling one provider as fast as they can; the fake provider allows {} requests in any {window} s \
         (sliding window, 429 + Retry-After over it); {} windows ({} s) per limiter",
        a.seats,
        a.rpm,
        a.windows,
        window * f64::from(a.windows)
    );
    println!(
        "| limiter | seats | cap | window | run | 429s seen | failed calls | calls served | accepted per window | of cap |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut _keep = None;
    for limiter in &a.limiters {
        let (label, stores): (String, Vec<Option<Arc<dyn ProviderQuotas>>>) = match limiter.as_str()
        {
            "memory" => {
                let store: Arc<dyn ProviderQuotas> = Arc::new(MemoryProviderQuotas::new());
                ("memory".into(), vec![Some(store)])
            }
            "postgres" => {
                let (fresh, pools) = postgres_stores(a.processes).await?;
                _keep = Some(fresh);
                let label = format!("postgres ({} pools)", pools.len());
                let stores = pools
                    .into_iter()
                    .map(|db| Some(Arc::new(PostgresProviderQuotas::new(db)) as _))
                    .collect();
                (label, stores)
            }
            "none" => ("none (429 waits only)".into(), vec![None]),
            other => bail!("unknown limiter {other} (memory, postgres, none)"),
        };
        let o = run(&a, stores).await?;
        #[allow(clippy::cast_precision_loss)]
        let per_window = o.accepted as f64 / (o.elapsed.as_secs_f64() / window);
        #[allow(clippy::cast_precision_loss)]
        let share = per_window / a.rpm as f64 * 100.0;
        println!(
            "| {label} | {} | {} | {window} s | {:.1} s | {} | {} | {} | {per_window:.2} | {share:.1}% |",
            a.seats,
            a.rpm,
            o.elapsed.as_secs_f64(),
            o.rate_limited,
            o.failed,
            o.ok,
        );
    }
    Ok(())
}
