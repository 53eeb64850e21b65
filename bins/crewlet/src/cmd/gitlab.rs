//! `crewlet gitlab provision COMPANY --base-url URL` creates or repairs the
//! seats' GitLab users, their group (and project) memberships, their tokens
//! (minted into the env file) and the webhook to Crewlet's API. `${VAR}`s
//! are read from the env file first, then from the process environment.
//! Exit codes: 0 all good, 1 a seat or hook failed, 2 anything else (a
//! refused preflight included).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use crewlet_config::Company;
use crewlet_integrations::gitlab::provision::{
    self, ADMIN_TOKEN_VAR, DEFAULT_EMAIL_DOMAIN, DEFAULT_TOKEN_DAYS, Options, admin_client,
};
use crewlet_integrations::mattermost::envfile::EnvFile;

/// A credential that prints as `***`.
#[derive(Clone)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: GitlabCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum GitlabCommand {
    /// Create or repair every seat's user, its group membership and its
    /// token (minted into the seat's `${VAR}` in the env file), and the
    /// group webhook to `{base-url}/webhooks/gitlab`.
    Provision(ProvisionArgs),
}

#[derive(Debug, clap::Args)]
pub struct ProvisionArgs {
    /// The company file.
    pub company: PathBuf,
    /// Crewlet's API as GitLab reaches it; the webhook posts to
    /// `{URL}/webhooks/gitlab`.
    #[arg(long, value_name = "URL")]
    pub base_url: String,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Only these seats (comma separated handles).
    #[arg(long, value_delimiter = ',', value_name = "HANDLES")]
    pub handles: Vec<String>,
    /// The env file minted tokens are written to.
    #[arg(long, default_value = ".env", value_name = "PATH")]
    pub env_file: PathBuf,
    /// An instance administrator's token (never read from the company
    /// file); default: GITLAB_ADMIN_TOKEN from the environment, then from
    /// the env file.
    #[arg(long, env = ADMIN_TOKEN_VAR, hide_env_values = true, value_name = "TOKEN")]
    pub admin_token: Option<Secret>,
    /// Created users get `{username}@{DOMAIN}` as their email.
    #[arg(long, default_value = DEFAULT_EMAIL_DOMAIN, value_name = "DOMAIN")]
    pub email_domain: String,
    /// Days a minted token is valid.
    #[arg(long, default_value_t = DEFAULT_TOKEN_DAYS, value_name = "DAYS")]
    pub token_days: u32,
    /// Also write the webhook token to hooks that already look right
    /// (GitLab never shows a hook's token, so a changed one is not noticed).
    #[arg(long)]
    pub rewrite_hooks: bool,
    /// Print `export VAR=value` for each minted token on stdout (the rest
    /// of the output then goes to stderr).
    #[arg(long)]
    pub print: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match args.cmd {
        GitlabCommand::Provision(a) => runtime.block_on(provision(a)),
    }
}

async fn provision(args: ProvisionArgs) -> Result<ExitCode> {
    let company = Company::load(&args.company)?;
    let mut file = EnvFile::load(&args.env_file)
        .with_context(|| format!("cannot read {}", args.env_file.display()))?;
    let values = file.values();
    let env = move |var: &str| values.get(var).cloned().or_else(|| std::env::var(var).ok());
    let admin_token = args
        .admin_token
        .map(|s| s.0)
        .or_else(|| file.get(ADMIN_TOKEN_VAR))
        .unwrap_or_default();
    let admin = admin_client(&company, &admin_token, &env)?;
    let options = Options {
        base_url: args.base_url,
        handles: args.handles,
        email_domain: args.email_domain,
        token_days: args.token_days,
        rewrite_hooks: args.rewrite_hooks,
    };
    // With --print, stdout carries only the export lines.
    let to_stderr = args.print;
    let say = |text: &str| {
        if to_stderr {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    };
    let plan = provision::plan(&company, &admin, &options, &env).await?;
    say(&format!("plan:\n{plan}"));
    if args.dry_run {
        say("dry run: nothing was changed");
        return Ok(if plan.fails() {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        });
    }
    if plan.changes() > 0 {
        say("\napplying:");
    }
    let report = provision::apply(&plan, &admin, &mut file, &mut |who: &str, what: &str| {
        say(&format!("  {who}: {what}"))
    })
    .await;
    say(&format!("\nreport:\n{report}"));
    if !report.minted.is_empty() {
        say(&format!(
            "tokens written to {}; restart `crewlet run` so the engine reads them",
            file.path().display()
        ));
    }
    if args.print {
        for minted in &report.minted {
            println!("export {}={}", minted.var, minted.value());
        }
    }
    Ok(if report.failed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
