//! `crewlet config import|export|show|revisions|diff`: the company's stored
//! revisions in the database of the bootstrap config. The work is done by
//! `crewlet_engine::admin`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use crewlet_engine::admin::{self, DiffSide, ExportFormat};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: ConfigCommand,
    #[command(flatten)]
    pub database: super::DatabaseArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// Validate a company file (and check it against the bootstrap file's
    /// `security` block) and store it as the new active revision.
    Import {
        /// The company YAML.
        file: PathBuf,
        /// What changed (shown in `config revisions`).
        #[arg(long)]
        summary: Option<String>,
        /// Only validate; store nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Print the active revision (or `--revision N`) as YAML or JSON.
    Export {
        #[arg(long, value_name = "N")]
        revision: Option<i64>,
        #[arg(long, value_enum, default_value_t = Format::Yaml)]
        format: Format,
        /// Write to this file instead of stdout.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Who made the active revision (or `--revision N`), when, and its seats.
    Show {
        #[arg(long, value_name = "N")]
        revision: Option<i64>,
    },
    /// List revisions, newest first (`*` marks the active one).
    Revisions {
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[arg(long)]
        json: bool,
    },
    /// Diff two companies as YAML: by default the active revision against
    /// FILE; `--from N` / `--to N` pick revisions. Exit 1 when they differ.
    Diff {
        /// A company file (the new side).
        file: Option<PathBuf>,
        /// The old side: a revision (default: the active one).
        #[arg(long, value_name = "N")]
        from: Option<i64>,
        /// The new side: a revision (instead of FILE).
        #[arg(long, value_name = "N", conflicts_with = "file")]
        to: Option<i64>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Yaml,
    Json,
}

pub fn run(args: Args) -> Result<ExitCode> {
    super::with_stores(
        &args.database,
        "crewlet config",
        |bootstrap, stores| async move {
            let (text, code) = match args.cmd {
                ConfigCommand::Import {
                    file,
                    summary,
                    dry_run,
                } => {
                    crewlet_engine::run::check_company_file(&bootstrap.security, &file)?;
                    let author = crewlet_engine::local_author();
                    let text =
                        admin::config_import(&stores, &file, &author, summary.as_deref(), dry_run)
                            .await?;
                    (text, ExitCode::SUCCESS)
                }
                ConfigCommand::Export {
                    revision,
                    format,
                    output,
                } => {
                    let format = match format {
                        Format::Yaml => ExportFormat::Yaml,
                        Format::Json => ExportFormat::Json,
                    };
                    let text = admin::config_export(&stores, revision, format).await?;
                    if let Some(path) = output {
                        std::fs::write(&path, &text)
                            .with_context(|| format!("cannot write {}", path.display()))?;
                        (format!("wrote {}\n", path.display()), ExitCode::SUCCESS)
                    } else {
                        (text, ExitCode::SUCCESS)
                    }
                }
                ConfigCommand::Show { revision } => (
                    admin::config_show(&stores, revision).await?,
                    ExitCode::SUCCESS,
                ),
                ConfigCommand::Revisions { limit, json } => (
                    admin::config_revisions(&stores, limit, json).await?,
                    ExitCode::SUCCESS,
                ),
                ConfigCommand::Diff { file, from, to } => {
                    let old = from.map_or(DiffSide::Active, DiffSide::Revision);
                    let new = match (file, to) {
                        (Some(f), _) => DiffSide::File(f),
                        (None, Some(n)) => DiffSide::Revision(n),
                        (None, None) => {
                            anyhow::bail!("give a company FILE or --to N to compare with")
                        }
                    };
                    let (text, changed) = admin::config_diff(&stores, &old, &new).await?;
                    (
                        text,
                        if changed {
                            ExitCode::from(1)
                        } else {
                            ExitCode::SUCCESS
                        },
                    )
                }
            };
            print!("{text}");
            Ok(code)
        },
    )
}
