//! `crewlet gitlab provision COMPANY --base-url URL` creates or repairs the
//! seats' GitLab users, their group (and project) memberships, their tokens
//! (minted into the env file) and the webhook to Crewlet's API. `${VAR}`s
//! are read from the env file first, then from the process environment.
//! Exit codes: 0 all good, 1 a seat or hook failed, 2 anything else (a
//! refused preflight included).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use crewlet_integrations::gitlab::provision::{
    self, ADMIN_TOKEN_VAR, DEFAULT_EMAIL_DOMAIN, DEFAULT_TOKEN_DAYS, Options, admin_client,
};

use super::provisioning::{Out, Secret, admin_token, load, runtime};

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
    let runtime = runtime()?;
    match args.cmd {
        GitlabCommand::Provision(a) => runtime.block_on(provision(a)),
    }
}

async fn provision(args: ProvisionArgs) -> Result<ExitCode> {
    let (company, mut file, env) = load(&args.company, &args.env_file)?;
    let admin_token = admin_token(args.admin_token, &file, ADMIN_TOKEN_VAR);
    let admin = admin_client(&company, &admin_token, &env)?;
    let options = Options {
        base_url: args.base_url,
        handles: args.handles,
        email_domain: args.email_domain,
        token_days: args.token_days,
        rewrite_hooks: args.rewrite_hooks,
    };
    let out = Out::new(args.print);
    let plan = provision::plan(&company, &admin, &options, &env).await?;
    out.plan(&plan);
    if args.dry_run {
        return Ok(out.dry_run(plan.fails()));
    }
    if plan.changes() > 0 {
        out.say("\napplying:");
    }
    let report = provision::apply(&plan, &admin, &mut file, &mut |who: &str, what: &str| {
        out.step(who, what)
    })
    .await;
    let failed = report.failed();
    Ok(out.finish(&report, failed, &report.minted, &file, args.print))
}
