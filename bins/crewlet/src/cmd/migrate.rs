//! `crewlet migrate [CONFIG] [--check]`: apply the embedded database
//! migrations to `providers.database` of the bootstrap config, one progress
//! line per file. `--check` changes nothing and exits 1 when the database is
//! not up to date (pending or unknown migrations, or another embedding width).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use crewlet_config::Bootstrap;
use crewlet_store::migrate::Step;
use crewlet_store::{Database, DatabaseOptions, MigrationOptions, Migrator};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The bootstrap file (config.yaml); `CREWLET_*` variables override it.
    pub config: Option<PathBuf>,
    /// Only report: exit 1 if migrations are pending (nothing is changed).
    #[arg(long)]
    pub check: bool,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let bootstrap = Bootstrap::load(args.config.as_deref())?;
    let source = args
        .config
        .as_ref()
        .map_or_else(|| "the environment".to_owned(), |p| p.display().to_string());
    let Some(database) = bootstrap.providers.database else {
        bail!(
            "providers.database is not set in {source}: nothing to migrate (without it the stores live in memory)"
        );
    };
    let options = DatabaseOptions {
        max_connections: usize::try_from(database.max_connections.clamp(1, 4)).unwrap_or(4),
        ..DatabaseOptions::default()
    };
    let migration = MigrationOptions {
        embedding_dim: database.embedding_dim,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let db = Database::connect_with(&database.dsn, options).await?;
        let migrator = Migrator::new(db.clone(), migration);
        if args.check {
            return check(&migrator, db.target(), migration.embedding_dim).await;
        }
        let report = migrator
            .run_with_progress(|p| {
                match p.step {
                    Step::Applying => print!("[{}/{}] {} ... ", p.index, p.total, p.name),
                    Step::Applied { millis } => println!("ok ({millis} ms)"),
                }
                let _ = std::io::stdout().flush();
            })
            .await?;
        println!(
            "{}: {} applied now, {} already applied; embedding width {}, {} partitioning",
            db.target(),
            report.applied.len(),
            report.already_applied,
            report.embedding_dim,
            report.partitioning.as_str()
        );
        Ok(ExitCode::SUCCESS)
    })
}

async fn check(
    migrator: &Migrator,
    target: &crewlet_store::DbTarget,
    embedding_dim: u32,
) -> anyhow::Result<ExitCode> {
    let status = migrator.status().await?;
    let mut current = status.is_current();
    println!("{target}: {} applied", status.applied.len());
    for name in &status.pending {
        println!("pending  {name}");
    }
    for name in &status.unknown {
        println!("unknown  {name} (applied by a newer crewlet)");
    }
    if let Some(stored) = status.embedding_dim.filter(|d| *d != embedding_dim) {
        println!("embedding width: configured {embedding_dim}, database {stored}");
        current = false;
    }
    if current {
        println!("up to date");
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(1))
    }
}
