//! `crewlet validate FILE [--tier company|bootstrap|auto] [--json]`.
//!
//! Exit 0: valid (a short summary is printed). Exit 1: invalid, every problem
//! listed. Exit 2: the file cannot be read. Reads no environment variable and
//! touches no network: `${VAR}` references are left as written.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use crewlet_config::{
    Bootstrap, Checked, Company, Organization, Problem, QueueKind, SeatKind, Tier, check_bytes,
};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The file to check.
    pub file: PathBuf,
    /// Which kind of file; `auto` guesses from its keys (`name`, `units`,
    /// `roles`: company; `providers.queue`, `api`, `debug`: bootstrap).
    #[arg(long, value_enum, default_value_t = TierArg::Auto)]
    pub tier: TierArg,
    /// Print the problems as a JSON array of {file, path, line, column, message}
    /// (`[]` when the file is valid).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TierArg {
    Company,
    Bootstrap,
    Auto,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let source = args.file.display().to_string();
    // Bytes, not text: a file that is not UTF-8 is a located problem (exit 1).
    let bytes = std::fs::read(&args.file).with_context(|| format!("cannot read {source}"))?;
    let tier = match args.tier {
        TierArg::Company => Some(Tier::Company),
        TierArg::Bootstrap => Some(Tier::Bootstrap),
        TierArg::Auto => None,
    };
    let checked = check_bytes(&source, &bytes, tier);
    let problems = checked.problems();
    let warnings = checked.warnings();
    let mut out = String::new();
    if args.json {
        out = serde_json::to_string_pretty(problems).context("cannot encode the problems")?;
        out.push('\n');
        // The JSON array is problems only; warnings go to stderr as text.
        let mut text = String::new();
        warning_lines(&mut text, warnings);
        std::io::stderr()
            .lock()
            .write_all(text.as_bytes())
            .context("cannot write to stderr")?;
    } else if problems.is_empty() {
        warning_lines(&mut out, warnings);
        match &checked {
            Checked::Company(Ok((company, org)), _) => {
                company_summary(&mut out, &source, company, org)
            }
            Checked::Bootstrap(Ok(b), _) => bootstrap_summary(&mut out, &source, b),
            _ => {}
        }
    } else {
        warning_lines(&mut out, warnings);
        report(&mut out, &source, problems);
    }
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .context("cannot write to stdout")?;
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `file:line:column: warning: path: message`, one per line.
fn warning_lines(out: &mut String, warnings: &[Problem]) {
    for w in warnings {
        let mut at = w.file.clone();
        if let Some(line) = w.line {
            at.push_str(&format!(":{line}"));
            if let Some(column) = w.column {
                at.push_str(&format!(":{column}"));
            }
        }
        let path = if w.path.is_empty() {
            String::new()
        } else {
            format!("{}: ", w.path)
        };
        let _ = writeln!(out, "{at}: warning: {path}{}", w.message);
    }
}

fn report(out: &mut String, source: &str, problems: &[Problem]) {
    for p in problems {
        let _ = writeln!(out, "{p}");
    }
    let n = problems.len();
    let _ = writeln!(
        out,
        "{source}: {n} problem{}",
        if n == 1 { "" } else { "s" }
    );
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

fn company_summary(out: &mut String, source: &str, company: &Company, org: &Organization) {
    let humans = org
        .seats()
        .iter()
        .filter(|s| s.kind == SeatKind::Human)
        .count();
    let _ = writeln!(out, "{source}: valid company `{}`", company.name);
    let _ = writeln!(
        out,
        "  {}, {} ({} agent, {} human), {}, {}",
        plural(org.units().len(), "unit"),
        plural(org.seats().len(), "seat"),
        org.seats().len() - humans,
        humans,
        plural(company.llm_providers().len(), "LLM provider"),
        plural(company.mcp_servers.len(), "MCP server"),
    );
    let width = org
        .seats()
        .iter()
        .map(|s| s.handle.len())
        .max()
        .unwrap_or(0);
    let seat_line = |out: &mut String, handle: &str, depth: usize| {
        let Some(seat) = org.seat(handle) else { return };
        let indent = "  ".repeat(depth + 1);
        let kind = if seat.kind == SeatKind::Human {
            " [human]"
        } else {
            ""
        };
        let manager = match &seat.manager {
            Some(m) => format!("  -> {m}"),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "{indent}{handle:<width$}  {}{kind}{manager}",
            seat.name
        );
    };
    let org_wide: Vec<&str> = org
        .seats()
        .iter()
        .filter(|s| s.unit.is_none())
        .map(|s| s.handle.as_str())
        .collect();
    if !org_wide.is_empty() {
        let _ = writeln!(out, "\n  org-wide");
        for h in org_wide {
            seat_line(out, h, 1);
        }
    }
    let mut stack: Vec<(usize, usize)> = org
        .units()
        .iter()
        .enumerate()
        .filter(|(_, u)| u.parent.is_none())
        .map(|(i, _)| (i, 0))
        .rev()
        .collect();
    while let Some((i, depth)) = stack.pop() {
        let unit = &org.units()[i];
        let lead = match (&unit.lead, unit.lead_inherited) {
            (Some(l), false) => format!(", lead {l}"),
            (Some(l), true) => format!(", lead {l}, inherited"),
            (None, _) => ", no lead".into(),
        };
        let indent = "  ".repeat(depth + 1);
        let _ = writeln!(
            out,
            "{}{indent}{} ({}{lead})",
            if depth == 0 { "\n" } else { "" },
            unit.name,
            unit.kind
        );
        for h in &unit.seats {
            seat_line(out, h, depth + 1);
        }
        stack.extend(unit.children.iter().rev().map(|&c| (c, depth + 1)));
    }
}

fn bootstrap_summary(out: &mut String, source: &str, b: &Bootstrap) {
    let _ = writeln!(out, "{source}: valid bootstrap");
    let queue = match &b.providers.queue {
        None => "memory (in-process; nothing survives a restart)".to_owned(),
        Some(q) if q.kind == QueueKind::Memory => {
            "memory (in-process; nothing survives a restart)".to_owned()
        }
        Some(q) => format!(
            "pulsar {} (tenant {}, namespace {}{})",
            q.url.as_deref().unwrap_or("?"),
            q.tenant,
            q.namespace,
            if q.auth_token.is_some() {
                ", token auth"
            } else {
                ""
            }
        ),
    };
    let database = match &b.providers.database {
        None => "memory stores (nothing survives a restart)".to_owned(),
        Some(d) => format!(
            "{} (embedding width {})",
            redact_dsn(&d.dsn),
            d.embedding_dim
        ),
    };
    let api = if b.api.port == 0 {
        "not served by the engine (port 0)".to_owned()
    } else {
        format!("{}:{}", b.api.host, b.api.port)
    };
    let anonymous = match b.api.auth.anonymous_access(&b.api.host) {
        Ok(crewlet_config::AnonymousAccess::None) => "anonymous reads refused".to_owned(),
        Ok(crewlet_config::AnonymousAccess::Metadata) => {
            "anonymous reads of metadata only (content needs a `read:content` token)".to_owned()
        }
        Ok(crewlet_config::AnonymousAccess::Content) => {
            "anonymous reads of everything, content included (loopback only)".to_owned()
        }
        Err(reason) => format!("refuses to start: allow_anonymous_read {reason}"),
    };
    let auth = format!("{}, {anonymous}", plural(b.api.auth.tokens.len(), "token"));
    let _ = writeln!(out, "  queue:    {queue}");
    let _ = writeln!(out, "  database: {database}");
    let _ = writeln!(out, "  api:      {api}; {auth}");
    let _ = writeln!(
        out,
        "  logs:     {}{}{}",
        b.observability.log_format.as_str(),
        if b.debug { ", debug" } else { "" },
        b.observability
            .otlp_endpoint
            .as_deref()
            .map(|e| format!("; traces to {e}"))
            .unwrap_or_default()
    );
}

/// Hides the password of a URL-style or key=value DSN.
fn redact_dsn(dsn: &str) -> String {
    if let Some((scheme, rest)) = dsn.split_once("://") {
        if let Some((creds, host)) = rest.rsplit_once('@')
            && let Some((user, _)) = creds.split_once(':')
        {
            return format!("{scheme}://{user}:***@{host}");
        }
        return dsn.to_owned();
    }
    dsn.split_whitespace()
        .map(|kv| {
            if kv.starts_with("password=") {
                "password=***"
            } else {
                kv
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact_dsn("postgres://u:p@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact_dsn("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            redact_dsn("host=h password=p user=u"),
            "host=h password=*** user=u"
        );
    }
}
