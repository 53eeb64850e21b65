//! `crewlet task send HANDLE TEXT [--wait]`: hand a seat work through the
//! running API (`POST /agents/{handle}/tasks`), and with `--wait` follow
//! the task's events until its turn ends, printing each step and then the
//! outcome. Exit codes: 0 posted (or completed), 1 the task failed, 3 the
//! wait timed out, 2 anything else.

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use crewlet_config::{Bootstrap, Scope};
use serde_json::Value;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: TaskCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum TaskCommand {
    /// Post a task to an agent seat's inbox.
    Send(SendArgs),
}

#[derive(Debug, clap::Args)]
pub struct SendArgs {
    /// The seat's handle.
    pub handle: String,
    /// What the seat should do.
    pub text: String,
    /// A short title.
    #[arg(long)]
    pub title: Option<String>,
    /// low, normal, high or urgent.
    #[arg(long)]
    pub priority: Option<String>,
    /// Follow the task until its turn ends and print the outcome.
    #[arg(long)]
    pub wait: bool,
    /// Give up waiting after this many seconds (exit 3).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// The API's base URL; default from the bootstrap's `api` section.
    #[arg(long, env = "CREWLET_URL")]
    pub url: Option<String>,
    /// A bearer token with the `operate` scope; default: the first such
    /// token of the bootstrap's `api.auth.tokens`, else the local operator
    /// token a loopback API without tokens writes to
    /// `~/.crewlet/run/api-{port}.token`.
    #[arg(long, env = "CREWLET_API_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Makes a retried send post the task once.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    #[command(flatten)]
    pub database: super::DatabaseArgs,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let TaskCommand::Send(args) = args.cmd;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(send(args))
}

/// The base URL and token: flags and variables first, then the bootstrap.
fn endpoint(args: &SendArgs) -> Result<(String, Option<String>)> {
    if let (Some(url), Some(token)) = (&args.url, &args.token) {
        return Ok((url.trim_end_matches('/').to_owned(), Some(token.clone())));
    }
    let bootstrap = Bootstrap::load(args.database.config.as_deref())?;
    let url = match &args.url {
        Some(u) => u.trim_end_matches('/').to_owned(),
        None => {
            let api = &bootstrap.api;
            if api.port == 0 {
                bail!(
                    "the bootstrap serves no embedded API (api.port is 0): pass --url of the running `crewlet run api`"
                );
            }
            let host = match api.host.as_str() {
                "0.0.0.0" | "" => "127.0.0.1",
                "::" => "[::1]",
                h => h,
            };
            format!("http://{host}:{}", api.port)
        }
    };
    // The local token belongs to the listener the request goes to.
    let port = reqwest::Url::parse(&url)
        .ok()
        .and_then(|u| u.port_or_known_default())
        .unwrap_or(bootstrap.api.port);
    let token = args
        .token
        .clone()
        .or_else(|| {
            bootstrap
                .api
                .auth
                .tokens
                .iter()
                .find(|t| t.grants(Scope::Operate))
                .map(|t| t.token.clone())
        })
        .or_else(|| crewlet_api::read_local_token(port));
    Ok((url, token))
}

async fn send(args: SendArgs) -> Result<ExitCode> {
    let (base, token) = endpoint(&args)?;
    let http = crewlet_http::client_builder()
        .timeout(Duration::from_secs(30))
        .build()
        .context("cannot build the HTTP client")?;
    let mut body = serde_json::json!({ "text": args.text });
    if let Some(t) = &args.title {
        body["title"] = Value::from(t.as_str());
    }
    if let Some(p) = &args.priority {
        body["priority"] = Value::from(p.as_str());
    }
    let mut request = http
        .post(format!("{base}/agents/{}/tasks", args.handle))
        .json(&body);
    if let Some(t) = &token {
        request = request.bearer_auth(t);
    }
    if let Some(k) = &args.idempotency_key {
        request = request.header("idempotency-key", k);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("cannot reach the API at {base} (is `crewlet run` up?)"))?;
    let status = response.status();
    let answer: Value = response.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        let reason = answer["reason"].as_str().unwrap_or("no reason given");
        let hint = if status.as_u16() == 401 && token.is_none() {
            "; posting needs a token with the `operate` scope: --token, CREWLET_API_TOKEN, or api.auth.tokens in the bootstrap"
        } else {
            ""
        };
        bail!("the API refused the task ({status}): {reason}{hint}");
    }
    let task_id = answer["task_id"]
        .as_str()
        .ok_or_else(|| anyhow!("the API answered without a task id: {answer}"))?
        .to_owned();
    let trace_id = answer["trace_id"].as_str().unwrap_or_default();
    println!(
        "task {task_id} posted to {} (trace {trace_id})",
        args.handle
    );
    if !args.wait {
        return Ok(ExitCode::SUCCESS);
    }
    follow(
        &http,
        &base,
        token.as_deref(),
        &task_id,
        Duration::from_secs(args.timeout),
    )
    .await
}

/// Polls the task's events, printing each new one, until `task_completed`
/// or `task_failed` (a failure that will be retried is printed and the
/// wait goes on).
async fn follow(
    http: &reqwest::Client,
    base: &str,
    token: Option<&str>,
    task_id: &str,
    timeout: Duration,
) -> Result<ExitCode> {
    let started = Instant::now();
    let mut seen: HashSet<String> = HashSet::new();
    loop {
        let mut request = http
            .get(format!("{base}/events"))
            .query(&[("task_id", task_id), ("limit", "500")]);
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        let page: Value = match request.send().await {
            Ok(r) if r.status().is_success() => r.json().await.unwrap_or(Value::Null),
            Ok(r) => bail!("cannot read the task's events: {}", r.status()),
            Err(e) => bail!("cannot read the task's events: {e}"),
        };
        let mut events: Vec<&Value> = page["events"]
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        events.sort_by(|a, b| a["timestamp"].as_str().cmp(&b["timestamp"].as_str()));
        for e in events {
            let id = e["id"].as_str().unwrap_or_default().to_owned();
            if !seen.insert(id) {
                continue;
            }
            let kind = e["type"].as_str().unwrap_or_default();
            println!("  {kind}: {}", e["summary"].as_str().unwrap_or_default());
            match kind {
                "task_completed" => {
                    let artifact = e["payload"]["final_artifact"].as_str().unwrap_or_default();
                    println!(
                        "completed ({})",
                        e["payload"]["decision"].as_str().unwrap_or("done")
                    );
                    if !artifact.is_empty() {
                        println!("{artifact}");
                    }
                    return Ok(ExitCode::SUCCESS);
                }
                "task_failed" if !e["payload"]["will_retry"].as_bool().unwrap_or(false) => {
                    println!(
                        "failed: {}: {}",
                        e["payload"]["reason"].as_str().unwrap_or("unknown"),
                        e["payload"]["detail"].as_str().unwrap_or_default()
                    );
                    return Ok(ExitCode::from(1));
                }
                _ => {}
            }
        }
        if started.elapsed() >= timeout {
            eprintln!(
                "gave up waiting after {} s; the task goes on",
                timeout.as_secs()
            );
            return Ok(ExitCode::from(3));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
