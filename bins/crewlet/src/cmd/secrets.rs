//! `crewlet secrets set|list|rm|rekey|keygen`: the secret store in the
//! database of the bootstrap config, sealed with its `secrets` keyring.
//! Values go in through stdin only (an argument would show in `ps` and the
//! shell history) and never come back out: `list` shows names and key ids.

use std::io::{IsTerminal as _, Read as _};
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use crewlet_store::{Keyring, is_secret_name};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: SecretsCommand,
    #[command(flatten)]
    pub database: super::DatabaseArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum SecretsCommand {
    /// Store NAME (what the company writes as `${NAME}`), its value read
    /// from stdin: `printf %s "$TOKEN" | crewlet secrets set NAME`.
    Set {
        name: String,
        /// Who wrote it, as listings show (`cli` unless a provisioner).
        #[arg(long, default_value = "cli")]
        source: String,
    },
    /// Names, key ids and who wrote each secret; never values.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Delete a secret.
    #[command(alias = "unset")]
    Rm { name: String },
    /// Seal every secret again under `secrets.active_key_id` (after adding
    /// a new key; keep the old key listed until this has run).
    Rekey,
    /// Print a new random key and the bootstrap snippet that uses it
    /// (touches no database).
    Keygen {
        #[arg(long, default_value = "key-1")]
        key_id: String,
    },
}

pub fn run(args: Args) -> Result<ExitCode> {
    if let SecretsCommand::Keygen { key_id } = &args.cmd {
        print!("{}", keygen(key_id));
        return Ok(ExitCode::SUCCESS);
    }
    // Read before connecting: a missing value fails fast.
    let value = match &args.cmd {
        SecretsCommand::Set { name, .. } => Some(read_value(name)?),
        _ => None,
    };
    super::with_stores(
        &args.database,
        "crewlet secrets",
        |bootstrap, stores| async move {
            let store = crewlet_backends::secret_store(&bootstrap, &stores)?;
            let author = crewlet_engine::local_author();
            match args.cmd {
                SecretsCommand::Set { name, source } => {
                    let value = value.unwrap_or_default();
                    let info = store.set(&name, &value, &author, &source).await?;
                    println!(
                        "stored `{}` (sealed with key `{}`); a running engine and API read it at the next config activation or restart",
                        info.name, info.key_id
                    );
                    if !bootstrap.security.company_env.allows(&name) {
                        eprintln!(
                            "note: security.company_env in the bootstrap file does not let the company read `{name}`: add it to company_env.names, or name it with an allowed prefix"
                        );
                    }
                }
                SecretsCommand::List { json } => {
                    let list = store.list().await?;
                    if json {
                        println!("{}", serde_json::to_string_pretty(&list)?);
                    } else if list.is_empty() {
                        println!("no secrets stored");
                    } else {
                        println!(
                            "{:<32} {:<12} {:<25} {:<16} source",
                            "name", "key", "updated", "by"
                        );
                        for s in list {
                            println!(
                                "{:<32} {:<12} {:<25} {:<16} {}",
                                s.name,
                                s.key_id,
                                s.updated_at.format("%Y-%m-%d %H:%M:%S UTC"),
                                s.updated_by,
                                s.source
                            );
                        }
                    }
                }
                SecretsCommand::Rm { name } => {
                    if !store.remove(&name).await? {
                        eprintln!("no secret `{name}` is stored");
                        return Ok(ExitCode::from(1));
                    }
                    println!("removed `{name}`");
                }
                SecretsCommand::Rekey => {
                    let r = store.rekey(&author).await?;
                    let active = store.keyring().map(|k| k.active_key_id().to_owned());
                    println!(
                        "{} sealed again under `{}`, {} already were, {} changed meanwhile (kept as written)",
                        r.resealed,
                        active.unwrap_or_default(),
                        r.current,
                        r.changed_meanwhile
                    );
                }
                SecretsCommand::Keygen { .. } => {}
            }
            Ok(ExitCode::SUCCESS)
        },
    )
}

/// The value of `name` from stdin, without its final line break.
fn read_value(name: &str) -> Result<String> {
    if !is_secret_name(name) {
        bail!(
            "`{name}` is not a secret name: use letters, digits and `_`, not starting with a digit"
        );
    }
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        bail!(
            "the value is read from stdin, not typed (it would show on the screen): printf %s \"$VALUE\" | crewlet secrets set {name}"
        );
    }
    let mut value = String::new();
    stdin
        .read_to_string(&mut value)
        .context("cannot read the value from stdin")?;
    let value = value
        .strip_suffix('\n')
        .map(|v| v.strip_suffix('\r').unwrap_or(v))
        .unwrap_or(&value)
        .to_owned();
    if value.is_empty() {
        bail!("stdin was empty: nothing to store as `{name}`");
    }
    Ok(value)
}

fn keygen(key_id: &str) -> String {
    let var = format!(
        "CREWLET_SECRET_KEY_{}",
        key_id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            })
            .collect::<String>()
    );
    format!(
        "{material}\n\n# Keep the key above out of the database's backups. In config.yaml:\nsecrets:\n  active_key_id: \"{key_id}\"\n  keys:\n    - id: \"{key_id}\"\n      material: \"${{{var}}}\"\n# and set {var} to the key in the environment of every crewlet process.\n",
        material = Keyring::generate_key()
    )
}
