//! `crewlet llm list|login|doctor|status|logout`: the company's model
//! providers, and the login of its subscription (`type: cli-agent`) ones.
//!
//! Reads the company file (`--company`, default `company.yaml`) and the
//! process environment for its `${VAR}`s; touches no database. Exit 0: done
//! (for `doctor`: no problem found); 1: `doctor` found problems or a login
//! command failed; 2: the file, the provider name or the CLI is wrong.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, anyhow, bail};
use crewlet_config::{Company, LlmKind, LlmProvider, interpolate, interpolate_all, process_env};
use crewlet_llm::CliAgentSettings;
use crewlet_llm::cli_agent::CliAgentProvider;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: LlmCommand,
    /// The company file.
    #[arg(
        long,
        global = true,
        default_value = "company.yaml",
        value_name = "FILE"
    )]
    pub company: PathBuf,
}

#[derive(Debug, clap::Subcommand)]
pub enum LlmCommand {
    /// Every model provider: type, model and whether it can authenticate
    /// (for cli-agent ones: the CLI and its login).
    List,
    /// Log a cli-agent provider in: `--from-host` adopts this machine's
    /// login of the CLI, `--capture-token` keeps a headless token the CLI
    /// mints; neither runs the CLI's own login on this terminal.
    Login {
        /// The provider's name in `providers.llm`.
        name: String,
        /// Copy the CLI's credential files out of this machine's home
        /// (`--home`) into Crewlet's own directory.
        #[arg(long, conflicts_with = "capture_token")]
        from_host: bool,
        /// Run the CLI's token command (`claude setup-token`) and keep the
        /// token for the provider.
        #[arg(long)]
        capture_token: bool,
        /// The home `--from-host` reads; default: `$HOME`.
        #[arg(long, value_name = "DIR", requires = "from_host")]
        home: Option<PathBuf>,
    },
    /// Check cli-agent providers (one, or all): the binary, its version,
    /// the login, and a real round trip that must come back as a tool call.
    Doctor {
        name: Option<String>,
        /// Skip the round trip (spends no subscription quota).
        #[arg(long)]
        no_smoke: bool,
        /// Where to look for a login of the machine's own to suggest; default: `$HOME`.
        #[arg(long, value_name = "DIR")]
        home: Option<PathBuf>,
    },
    /// The login of cli-agent providers (one, or all), and what the CLI
    /// says about it where it has a status command.
    Status { name: Option<String> },
    /// Remove Crewlet's copy of a cli-agent provider's login (its
    /// `credentials/` files, a captured token and the seats' copies).
    Logout { name: String },
}

pub fn run(args: Args) -> Result<ExitCode> {
    let company = Company::load(&args.company)?;
    let file = args.company.display().to_string();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match args.cmd {
        LlmCommand::List => list(&company),
        LlmCommand::Login {
            name,
            from_host,
            capture_token,
            home,
        } => {
            let p = cli_provider(&company, &file, &name)?;
            if from_host {
                login_from_host(&p, home)
            } else if capture_token {
                p.capture_token()?;
                println!(
                    "token kept in {} (mode 0600); every seat of `{name}` gets it as {}",
                    p.workspace().credential_dir().display(),
                    p.profile().token_env
                );
                Ok(ExitCode::SUCCESS)
            } else {
                login_interactive(&p)
            }
        }
        LlmCommand::Doctor {
            name,
            no_smoke,
            home,
        } => {
            let home = home_dir(home).ok();
            let mut healthy = true;
            for (i, p) in selected(&company, &file, name.as_deref())?
                .iter()
                .enumerate()
            {
                let report = runtime.block_on(p.doctor(home.as_deref(), !no_smoke));
                if i > 0 {
                    println!();
                }
                print!("{}", report.render());
                healthy &= report.ok();
            }
            Ok(if healthy {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        LlmCommand::Status { name } => {
            for p in selected(&company, &file, name.as_deref())? {
                status(&p, &runtime);
            }
            Ok(ExitCode::SUCCESS)
        }
        LlmCommand::Logout { name } => {
            let p = cli_provider(&company, &file, &name)?;
            let removed = p.logout()?;
            let dir = p.workspace().credential_dir();
            if removed.is_empty() {
                println!("`{name}` had no login of Crewlet's in {}", dir.display());
            } else {
                println!("removed {} from {}", removed.join(", "), dir.display());
            }
            // built again: a captured token is gone now, a configured one is not
            if cli_provider(&company, &file, &name)?.settings().has_token() {
                println!(
                    "note: a token still reaches the CLI from the company file or the environment ({}); remove it there",
                    p.profile().token_env
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn login_from_host(p: &CliAgentProvider, home: Option<PathBuf>) -> Result<ExitCode> {
    let home = home_dir(home)?;
    let copied = p.adopt_host_login(&home)?;
    println!(
        "adopted {} from {} into {}",
        copied.join(", "),
        home.display(),
        p.workspace().credential_dir().display()
    );
    println!("this is a copy: agents never write to your own login.");
    if !p.profile().token_capture_args.is_empty() {
        println!(
            "both copies now share one refresh token, so a vendor that rotates it may log one side out; `crewlet llm login {} --capture-token` mints a headless token instead",
            p.settings().provider
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn login_interactive(p: &CliAgentProvider) -> Result<ExitCode> {
    let dir = p.workspace().credential_dir();
    println!(
        "running `{}`'s own login; the login lands in {}, not in your own home",
        p.profile().binary,
        dir.display()
    );
    let code = p.interactive_login()?;
    if code != 0 {
        eprintln!("the login command exited with status {code}");
        return Ok(ExitCode::from(1));
    }
    if !p.login_state().logged_in() {
        eprintln!(
            "the login command wrote none of the profile's credential files ({}) under {}",
            p.profile().credential_paths.join(", "),
            dir.display()
        );
        return Ok(ExitCode::from(1));
    }
    println!(
        "logged in; check it with `crewlet llm doctor {}`",
        p.settings().provider
    );
    Ok(ExitCode::SUCCESS)
}

fn status(p: &CliAgentProvider, runtime: &tokio::runtime::Runtime) {
    let login = p.login_state();
    let files = if login.files.is_empty() {
        String::new()
    } else {
        format!(" ({})", login.files.join(", "))
    };
    println!(
        "{}: {} login: {}{files}",
        p.settings().provider,
        p.profile().name,
        login.label()
    );
    match p.binary() {
        Ok(b) => println!("  binary: {}", b.display()),
        Err(e) => println!("  binary: missing ({e})"),
    }
    println!("  state dir: {}", p.workspace().state_dir().display());
    if let Ok(Some(said)) = runtime.block_on(p.cli_status()) {
        for line in said.lines().take(5) {
            println!("  cli: {line}");
        }
    }
}

fn home_dir(home: Option<PathBuf>) -> Result<PathBuf> {
    home.or_else(|| std::env::var_os("HOME").map(PathBuf::from))
        .ok_or_else(|| anyhow!("HOME is not set: pass --home DIR"))
}

fn list(company: &Company) -> Result<ExitCode> {
    let providers = company.llm_providers();
    println!(
        "{:<20} {:<18} {:<24} {:<14} auth",
        "name", "type", "model", "cli"
    );
    for (name, entry) in providers.iter() {
        let mut model = entry.model.clone();
        let (cli, auth) = match entry.kind {
            LlmKind::CliAgent => match build(name, entry) {
                Ok(p) => {
                    if p.settings().model.is_empty() {
                        "(cli default)".clone_into(&mut model);
                    }
                    (p.profile().name.clone(), p.login_state().label().to_owned())
                }
                Err(e) => (
                    entry
                        .cli
                        .as_ref()
                        .map_or("-", |c| c.agent.as_str())
                        .to_owned(),
                    format!("unusable: {e:#}"),
                ),
            },
            _ => ("-".to_owned(), api_key_state(entry).to_owned()),
        };
        println!(
            "{:<20} {:<18} {:<24} {:<14} {auth}",
            name,
            entry.kind.to_string(),
            model,
            cli
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether an API provider's keys resolve in this environment.
fn api_key_state(entry: &LlmProvider) -> &'static str {
    let resolved = if entry.api_keys.is_empty() {
        entry
            .kind
            .conventional_key_var()
            .and_then(process_env)
            .is_some_and(|k| !k.trim().is_empty())
    } else {
        entry
            .api_keys
            .iter()
            .any(|k| interpolate(k, process_env).is_ok_and(|k| !k.trim().is_empty()))
    };
    match (resolved, entry.kind) {
        (true, _) => "api key",
        (false, LlmKind::OpenaiCompatible) => "no key (keyless server)",
        (false, _) => "no api key",
    }
}

/// The cli-agent providers `name` selects: that one, or all.
fn selected(company: &Company, file: &str, name: Option<&str>) -> Result<Vec<CliAgentProvider>> {
    match name {
        Some(name) => Ok(vec![cli_provider(company, file, name)?]),
        None => {
            let all: Vec<CliAgentProvider> = company
                .providers
                .llm
                .iter()
                .filter(|(_, e)| e.kind == LlmKind::CliAgent)
                .map(|(n, e)| build(n, e))
                .collect::<Result<_>>()?;
            if all.is_empty() {
                bail!(
                    "{file} has no cli-agent provider (providers.llm entries of `type: cli-agent`)"
                );
            }
            Ok(all)
        }
    }
}

/// The cli-agent provider `name`, or an error saying why there is none.
fn cli_provider(company: &Company, file: &str, name: &str) -> Result<CliAgentProvider> {
    let Some(entry) = company.providers.llm.get(name) else {
        let names: Vec<&str> = company.providers.llm.keys().map(String::as_str).collect();
        bail!(
            "{file} has no provider `{name}` in providers.llm (it has: {})",
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        );
    };
    if entry.kind != LlmKind::CliAgent {
        bail!(
            "provider `{name}` is `type: {}`, not cli-agent: `crewlet llm login|doctor|status|logout` work on subscription CLI providers only",
            entry.kind
        );
    }
    build(name, entry)
}

/// Builds the provider of entry `name` with `${VAR}`s from this process.
fn build(name: &str, entry: &LlmProvider) -> Result<CliAgentProvider> {
    let cli = entry
        .cli
        .as_ref()
        .ok_or_else(|| anyhow!("provider `{name}` has no `cli` block"))?;
    let cli =
        interpolate_all(cli, process_env).with_context(|| format!("providers.llm.{name}.cli"))?;
    let keys = entry
        .api_keys
        .iter()
        .filter_map(|k| interpolate(k, process_env).ok())
        .collect::<Vec<_>>();
    let block = serde_json::to_value(&cli).context("cannot read the cli block")?;
    let settings =
        CliAgentSettings::from_cli_block(name, &entry.model, &block, &keys, &process_env)
            .with_context(|| format!("provider `{name}`"))?;
    CliAgentProvider::new(settings).with_context(|| format!("provider `{name}`"))
}
