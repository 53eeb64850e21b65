//! `crewlet models pull [NAME] [--config FILE] [--offline]`, `models list
//! [--json]`, `models rm NAME`, `models verify [NAME]`: the model cache
//! (`CREWLET_MODELS_DIR`, else `~/.cache/crewlet/models`). The work is done
//! by `crewlet_models`; see docs/models.md.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use crewlet_config::{Checked, Company, Tier, check_bytes};
use crewlet_models::{Entry, ModelStore, Progress, PullOptions, catalogue, human_bytes};

/// The file `crewlet run` reads beside a bootstrap file.
const SIBLING_COMPANY_FILE: &str = "company.yaml";

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: ModelsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ModelsCommand {
    /// Download a model, check its sha256 and install it (a no-op when it is
    /// there). No NAME: every catalogue model the company in `--config`
    /// uses, else every catalogue model.
    Pull {
        /// A catalogue name (`crewlet models list`).
        name: Option<String>,
        /// A company file, or a bootstrap config.yaml with a company.yaml
        /// beside it: pull the models its providers name.
        #[arg(long, short = 'c', value_name = "FILE", conflicts_with = "name")]
        config: Option<PathBuf>,
        /// Download nothing: fail, saying what is missing, unless installed
        /// (also `CREWLET_OFFLINE=1`).
        #[arg(long)]
        offline: bool,
    },
    /// The catalogue: name, size, installed or not, path.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Delete a model from the cache.
    Rm {
        /// A catalogue name.
        name: String,
    },
    /// Hash an installed model's files against their pinned sha256 (no
    /// NAME: every installed model).
    Verify { name: Option<String> },
}

pub fn run(args: Args) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let store = ModelStore::from_env();
    match args.cmd {
        ModelsCommand::Pull {
            name,
            config,
            offline,
        } => {
            let entries = match (name, config) {
                (Some(name), _) => vec![crewlet_models::entry(&name)?],
                (None, Some(config)) => company_models(&config)?,
                (None, None) => catalogue().iter().collect(),
            };
            if entries.is_empty() {
                println!("the company uses no catalogue model: nothing to pull");
                return Ok(ExitCode::SUCCESS);
            }
            let options = PullOptions {
                offline: offline || crewlet_models::offline_from_env(),
                progress: progress(),
            };
            runtime.block_on(pull_all(&store, &entries, &options))
        }
        ModelsCommand::List { json } => list(&store, json),
        ModelsCommand::Rm { name } => {
            let entry = crewlet_models::entry(&name)?;
            if runtime.block_on(store.remove(entry))? {
                println!("{name}: removed {}", store.model_dir(entry).display());
            } else {
                println!("{name}: not installed");
            }
            Ok(ExitCode::SUCCESS)
        }
        ModelsCommand::Verify { name } => {
            let entries = match name {
                Some(name) => vec![crewlet_models::entry(&name)?],
                None => {
                    let mut installed = Vec::new();
                    for e in catalogue() {
                        if store.installed(e)?.is_some() {
                            installed.push(e);
                        }
                    }
                    installed
                }
            };
            runtime.block_on(verify_all(&store, &entries))
        }
    }
}

async fn pull_all(
    store: &ModelStore,
    entries: &[&'static Entry],
    options: &PullOptions,
) -> Result<ExitCode> {
    for entry in entries {
        if let Some(path) = store.installed(entry)? {
            println!("{}: installed {}", entry.name, path.display());
            continue;
        }
        let started = std::time::Instant::now();
        if !options.offline {
            println!(
                "{}: pulling {} into {}",
                entry.name,
                human_bytes(entry.size()),
                store.model_dir(entry).display()
            );
        }
        let path = store.pull(entry, options).await?;
        println!(
            "{}: pulled in {:.1} s, {}",
            entry.name,
            started.elapsed().as_secs_f64(),
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn verify_all(store: &ModelStore, entries: &[&'static Entry]) -> Result<ExitCode> {
    if entries.is_empty() {
        println!("no model is installed in {}", store.dir().display());
        return Ok(ExitCode::SUCCESS);
    }
    let mut failed = false;
    for entry in entries {
        match store.verify(entry, &progress()).await {
            Ok(path) => println!(
                "{}: ok, {} file(s) match their pinned sha256 ({})",
                entry.name,
                entry.files.len(),
                path.display()
            ),
            Err(e) => {
                failed = true;
                eprintln!("{}: {e}", entry.name);
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn list(store: &ModelStore, json: bool) -> Result<ExitCode> {
    let mut rows = Vec::new();
    for entry in catalogue() {
        let installed = store.installed(entry)?.is_some();
        rows.push((entry, installed, store.path(entry)));
    }
    if json {
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|(e, installed, path)| {
                serde_json::json!({
                    "name": e.name,
                    "description": e.description,
                    "license": e.license,
                    "size": e.size(),
                    "download_size": e.download_size(),
                    "installed": installed,
                    "path": path.display().to_string(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&out).context("cannot encode the list")?
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("models dir: {}", store.dir().display());
    let width = rows.iter().map(|(e, ..)| e.name.len()).max().unwrap_or(4);
    println!("{:width$}  {:>10}  {:13}  PATH", "NAME", "SIZE", "STATE");
    for (e, installed, path) in &rows {
        let state = if *installed {
            "installed"
        } else {
            "not installed"
        };
        println!(
            "{:width$}  {:>10}  {state:13}  {}",
            e.name,
            human_bytes(e.size()),
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A bar on a terminal, plain lines every few seconds otherwise (this
/// command installs no log subscriber).
fn progress() -> Progress {
    if std::io::stderr().is_terminal() {
        Progress::Bar
    } else {
        Progress::Stderr
    }
}

/// The catalogue models the company at `path` uses (a company file, or a
/// bootstrap file with `company.yaml` beside it).
fn company_models(path: &Path) -> Result<Vec<&'static Entry>> {
    let company = match read_checked(path, None)? {
        Checked::Company(Ok((company, _)), _) => company,
        Checked::Bootstrap(Ok(_), _) => {
            let sibling = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .join(SIBLING_COMPANY_FILE);
            if !sibling.is_file() {
                bail!(
                    "{} is a bootstrap file with no {SIBLING_COMPANY_FILE} beside it; pass the company file to --config",
                    path.display()
                );
            }
            match read_checked(&sibling, Some(Tier::Company))? {
                Checked::Company(Ok((company, _)), _) => company,
                other => bail!(problems(&sibling, &other)),
            }
        }
        other => bail!(problems(path, &other)),
    };
    Ok(models_of(&company))
}

fn read_checked(path: &Path, tier: Option<Tier>) -> Result<Checked> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(check_bytes(&path.display().to_string(), &bytes, tier))
}

fn problems(path: &Path, checked: &Checked) -> String {
    let list: Vec<String> = checked
        .problems()
        .iter()
        .map(|p| format!("  {}", p.message))
        .collect();
    format!(
        "{} is not a valid company or bootstrap file (`crewlet validate {}` says more):\n{}",
        path.display(),
        path.display(),
        list.join("\n")
    )
}

/// The catalogue entries of the models `company` runs in process without a
/// `path` of their own: the ones the engine fetches on start
/// ([`crewlet_engine::catalogue_models`]).
pub(crate) fn models_of(company: &Company) -> Vec<&'static Entry> {
    crewlet_engine::catalogue_models(company)
        .iter()
        .filter_map(|name| crewlet_models::find(name))
        .collect()
}

#[cfg(test)]
mod tests {
    use crewlet_config::{EmbeddingsKind, EmbeddingsProvider};

    use super::*;

    fn company(yaml: &str) -> Company {
        let checked = check_bytes("test.yaml", yaml.as_bytes(), Some(Tier::Company));
        match checked {
            Checked::Company(Ok((c, _)), _) => c,
            other => panic!("{:?}", other.problems()),
        }
    }

    #[test]
    fn a_company_needs_the_catalogue_models_it_runs_in_process() {
        let mut c = company(
            "name: A\nroles:\n  - {name: CEO, handle: ceo}\nproviders:\n  llm:\n    small: {type: local, model: smollm2-135m-instruct}\n    again: {type: local, model: smollm2-135m-instruct}\n    own: {type: local, model: mine, path: /models/mine.gguf}\n    served: {type: openai-compatible, base_url: 'http://127.0.0.1:1/v1', model: all-minilm-l6-v2}\n    big: {type: openai, model: gpt-4.1}\n",
        );
        let names = |c: &Company| models_of(c).iter().map(|e| e.name).collect::<Vec<_>>();
        assert_eq!(names(&c), vec!["smollm2-135m-instruct"]);
        let mut embeddings = EmbeddingsProvider {
            kind: EmbeddingsKind::Local,
            model: "all-MiniLM-L6-v2".into(),
            api_key: None,
            api_keys: Vec::new(),
            base_url: None,
            dimensions: None,
            path: None,
            timeout_seconds: 60,
        };
        c.providers.embeddings = Some(embeddings.clone());
        assert_eq!(names(&c), vec!["smollm2-135m-instruct", "all-minilm-l6-v2"]);
        // an embedder folder of its own needs nothing from the cache
        embeddings.path = Some("/models/minilm".into());
        c.providers.embeddings = Some(embeddings);
        assert_eq!(names(&c), vec!["smollm2-135m-instruct"]);
        let c = company(
            "name: A\nroles:\n  - {name: CEO, handle: ceo}\nproviders:\n  llm:\n    big: {type: openai, model: gpt-4.1}\n",
        );
        assert!(models_of(&c).is_empty());
    }
}
