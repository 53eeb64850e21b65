//! What `crewlet config ...` and `crewlet budgets ...` do, against the
//! database named by the bootstrap. Each returns the text to print.

use std::fmt::Write as _;
use std::path::Path;

use crewlet_config::{Bootstrap, Company, SeatKind};
use crewlet_store::{ConfigRevision, Stores, agent_scope};
use serde_json::Value;

use crate::company::{company_of, import_company};
use crate::error::EngineError;

/// Opens (and migrates) the database of `bootstrap`; `command` names the
/// command in the error when there is no database.
pub async fn open_stores(
    bootstrap: &Bootstrap,
    command: &'static str,
) -> Result<Stores, EngineError> {
    Ok(crewlet_backends::open_database(bootstrap, command).await?)
}

fn org_line(company: &Company) -> String {
    let org = company.organization();
    let agents = org.agents().count();
    format!(
        "company `{}`: {} units, {} seats ({} agents, {} humans)",
        company.name,
        org.units().len(),
        org.seats().len(),
        agents,
        org.seats().len() - agents
    )
}

/// `crewlet config import FILE`: validates and activates a new revision.
/// `dry_run` only validates.
pub async fn config_import(
    stores: &Stores,
    path: &Path,
    author: &str,
    summary: Option<&str>,
    dry_run: bool,
) -> Result<String, EngineError> {
    if dry_run {
        let company = Company::load(path)?;
        return Ok(format!(
            "{} is valid: {} (dry run: nothing stored)\n",
            path.display(),
            org_line(&company)
        ));
    }
    let imported = import_company(stores.config.as_ref(), path, author, summary).await?;
    let r = &imported.revision;
    Ok(if imported.created {
        format!(
            "imported {} as revision {} (parent {}), now active: {}\n",
            path.display(),
            r.revision_id,
            r.parent_revision_id
                .map_or_else(|| "none".into(), |p| p.to_string()),
            org_line(&imported.company)
        )
    } else {
        format!(
            "{} is identical to the active revision {}; nothing imported\n",
            path.display(),
            r.revision_id
        )
    })
}

async fn revision(stores: &Stores, id: Option<i64>) -> Result<ConfigRevision, EngineError> {
    match id {
        Some(id) => stores.config.get(id).await?.ok_or(EngineError::NotFound {
            what: "company revision",
            key: id.to_string(),
        }),
        None => stores.config.active().await?.ok_or(EngineError::NotFound {
            what: "company revision",
            key: "active (none is active: run `crewlet config import FILE`)".into(),
        }),
    }
}

/// How a revision is written out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Yaml,
    Json,
}

/// `crewlet config export`: the active revision (or `id`) as YAML or JSON.
pub async fn config_export(
    stores: &Stores,
    id: Option<i64>,
    format: ExportFormat,
) -> Result<String, EngineError> {
    let rev = revision(stores, id).await?;
    render(&canonical(rev.payload), format)
}

/// A stored payload in the company's own key order (the database may keep
/// JSON objects in another order); as stored when it no longer parses.
fn canonical(payload: Value) -> Value {
    serde_json::from_value::<Company>(payload.clone())
        .ok()
        .and_then(|c| serde_json::to_value(&c).ok())
        .unwrap_or(payload)
}

fn render(payload: &Value, format: ExportFormat) -> Result<String, EngineError> {
    match format {
        ExportFormat::Yaml => serde_saphyr::to_string(payload)
            .map_err(|e| EngineError::Other(format!("cannot write yaml: {e}"))),
        ExportFormat::Json => serde_json::to_string_pretty(payload)
            .map(|s| s + "\n")
            .map_err(|e| EngineError::Other(format!("cannot write json: {e}"))),
    }
}

/// `crewlet config show`: a revision's metadata and org summary.
pub async fn config_show(stores: &Stores, id: Option<i64>) -> Result<String, EngineError> {
    let rev = revision(stores, id).await?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "revision   {}{}",
        rev.revision_id,
        if rev.is_active { " (active)" } else { "" }
    );
    let _ = writeln!(
        out,
        "parent     {}",
        rev.parent_revision_id
            .map_or_else(|| "-".into(), |p| p.to_string())
    );
    let _ = writeln!(
        out,
        "created    {} by {} ({})",
        rev.created_at.to_rfc3339(),
        rev.created_by,
        rev.source
    );
    if let Some(a) = rev.activated_at {
        let _ = writeln!(out, "activated  {}", a.to_rfc3339());
    }
    let _ = writeln!(out, "summary    {}", rev.summary);
    match company_of(&rev) {
        Ok(company) => {
            let _ = writeln!(out, "{}", org_line(&company));
            let org = company.organization();
            for s in org.seats() {
                let kind = if s.kind == SeatKind::Human {
                    "human"
                } else {
                    "agent"
                };
                let unit = if s.unit_path.is_empty() {
                    "(org-wide)".to_owned()
                } else {
                    s.unit_path.join(" / ")
                };
                let _ = writeln!(
                    out,
                    "  {:<20} {:<6} {:<28} manager: {}",
                    s.handle,
                    kind,
                    unit,
                    s.manager.as_deref().unwrap_or("-")
                );
            }
        }
        Err(e) => {
            let _ = writeln!(out, "warning: {e}");
        }
    }
    Ok(out)
}

/// `crewlet config revisions`: newest first.
pub async fn config_revisions(
    stores: &Stores,
    limit: u32,
    json: bool,
) -> Result<String, EngineError> {
    let revs = stores.config.list(limit).await?;
    if json {
        let list: Vec<Value> = revs
            .iter()
            .map(|r| {
                serde_json::json!({
                    "revision_id": r.revision_id,
                    "parent_revision_id": r.parent_revision_id,
                    "is_active": r.is_active,
                    "created_at": r.created_at,
                    "activated_at": r.activated_at,
                    "created_by": r.created_by,
                    "source": r.source,
                    "summary": r.summary,
                })
            })
            .collect();
        return serde_json::to_string_pretty(&list)
            .map(|s| s + "\n")
            .map_err(|e| EngineError::Other(e.to_string()));
    }
    if revs.is_empty() {
        return Ok("no company revisions yet: run `crewlet config import FILE`\n".into());
    }
    let mut out = format!(
        "{:<4} {:>8} {:>8}  {:<25} {:<24} {:<12} summary\n",
        "", "revision", "parent", "created", "by", "source"
    );
    for r in &revs {
        let _ = writeln!(
            out,
            "{:<4} {:>8} {:>8}  {:<25} {:<24} {:<12} {}",
            if r.is_active { "*" } else { "" },
            r.revision_id,
            r.parent_revision_id
                .map_or_else(|| "-".into(), |p| p.to_string()),
            r.created_at.format("%Y-%m-%d %H:%M:%S UTC"),
            truncate(&r.created_by, 24),
            truncate(&r.source, 12),
            r.summary
        );
    }
    Ok(out)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        s.chars()
            .take(n.saturating_sub(1))
            .chain(std::iter::once('~'))
            .collect()
    }
}

/// One side of a diff.
#[derive(Debug, Clone)]
pub enum DiffSide {
    Active,
    Revision(i64),
    File(std::path::PathBuf),
}

/// `crewlet config diff`: a unified diff of two companies as YAML. Returns
/// the text and whether they differ.
pub async fn config_diff(
    stores: &Stores,
    from: &DiffSide,
    to: &DiffSide,
) -> Result<(String, bool), EngineError> {
    let (a_name, a) = side(stores, from).await?;
    let (b_name, b) = side(stores, to).await?;
    let a = render(&a, ExportFormat::Yaml)?;
    let b = render(&b, ExportFormat::Yaml)?;
    let diff = unified_diff(&a, &b, &a_name, &b_name, 3);
    let changed = !diff.is_empty();
    Ok((
        if changed {
            diff
        } else {
            format!("no differences between {a_name} and {b_name}\n")
        },
        changed,
    ))
}

async fn side(stores: &Stores, side: &DiffSide) -> Result<(String, Value), EngineError> {
    match side {
        DiffSide::Active => {
            let r = revision(stores, None).await?;
            Ok((
                format!("revision {} (active)", r.revision_id),
                canonical(r.payload),
            ))
        }
        DiffSide::Revision(id) => {
            let r = revision(stores, Some(*id)).await?;
            Ok((format!("revision {}", r.revision_id), canonical(r.payload)))
        }
        DiffSide::File(path) => {
            let company = Company::load(path)?;
            let v =
                serde_json::to_value(&company).map_err(|e| EngineError::Other(e.to_string()))?;
            Ok((path.display().to_string(), v))
        }
    }
}

/// A unified diff of two texts, line by line (longest common subsequence),
/// with `context` lines around each change; empty when they are equal.
pub fn unified_diff(a: &str, b: &str, a_name: &str, b_name: &str, context: usize) -> String {
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    if a == b {
        return String::new();
    }
    let (n, m) = (a.len(), b.len());
    // lcs[i][j]: LCS length of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    // The edit script: (tag, a index, b index).
    let mut ops: Vec<(char, usize, usize)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push((' ', i, j));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', i, j));
            i += 1;
        } else {
            ops.push(('+', i, j));
            j += 1;
        }
    }
    let mut out = format!("--- {a_name}\n+++ {b_name}\n");
    let changes: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| o.0 != ' ')
        .map(|(k, _)| k)
        .collect();
    let mut k = 0;
    while k < changes.len() {
        let start = changes[k].saturating_sub(context);
        let mut end = changes[k] + context;
        while k + 1 < changes.len() && changes[k + 1] <= end + context {
            k += 1;
            end = changes[k] + context;
        }
        let end = end.min(ops.len() - 1);
        let (a0, b0) = (ops[start].1, ops[start].2);
        let a_len = ops[start..=end].iter().filter(|o| o.0 != '+').count();
        let b_len = ops[start..=end].iter().filter(|o| o.0 != '-').count();
        let _ = writeln!(out, "@@ -{},{} +{},{} @@", a0 + 1, a_len, b0 + 1, b_len);
        for (tag, ai, bi) in &ops[start..=end] {
            let line = if *tag == '+' { b[*bi] } else { a[*ai] };
            let _ = writeln!(out, "{tag}{line}");
        }
        k += 1;
    }
    out
}

/// `crewlet budgets show`: the ledger and lifetime usage.
pub async fn budgets_show(stores: &Stores, json: bool) -> Result<String, EngineError> {
    let budgets = stores.ledger.budgets().await?;
    let usage = stores.ledger.usage().await?;
    if json {
        let v = serde_json::json!({"budgets": budgets, "usage": usage});
        return serde_json::to_string_pretty(&v)
            .map(|s| s + "\n")
            .map_err(|e| EngineError::Other(e.to_string()));
    }
    let mut out = String::new();
    if budgets.is_empty() {
        out.push_str("no budget has been charged yet\n");
    } else {
        let _ = writeln!(
            out,
            "{:<48} {:<20} {:>14} {:>14}  refused",
            "scope", "agent", "used", "max"
        );
        for b in &budgets {
            let _ = writeln!(
                out,
                "{:<48} {:<20} {:>14} {:>14}  {}",
                b.scope,
                b.agent_handle.as_deref().unwrap_or("-"),
                b.used_tokens,
                if b.max_tokens == 0 {
                    "unlimited".into()
                } else {
                    b.max_tokens.to_string()
                },
                b.refused_at.map_or_else(|| "-".into(), |t| t.to_rfc3339())
            );
        }
    }
    if !usage.is_empty() {
        let _ = writeln!(out, "\nlifetime tokens per agent:");
        for u in &usage {
            let _ = writeln!(out, "  {:<20} {:>14}", u.agent_handle, u.tokens_used);
        }
    }
    Ok(out)
}

/// `crewlet budgets reset SCOPE...|--all`: sets usage back to 0. A scope is
/// `org`, `agent:{agent id}`, or a seat handle of the active company.
pub async fn budgets_reset(
    stores: &Stores,
    scopes: &[String],
    all: bool,
) -> Result<String, EngineError> {
    let mut targets: Vec<String> = Vec::new();
    if all {
        targets = stores
            .ledger
            .budgets()
            .await?
            .into_iter()
            .map(|b| b.scope)
            .collect();
    } else {
        let company = match stores.config.active().await? {
            Some(rev) => company_of(&rev).ok(),
            None => None,
        };
        for s in scopes {
            if s == "org" || s.starts_with("agent:") || s.starts_with("unit:") {
                targets.push(s.clone());
                continue;
            }
            let seat = company.as_ref().and_then(|c| {
                let org = c.organization();
                org.seat(s).map(|seat| seat.agent_id)
            });
            match seat {
                Some(id) => targets.push(agent_scope(&id)),
                None => {
                    return Err(EngineError::NotFound {
                        what: "budget scope (use `org`, `unit:{name}`, `agent:{id}` or a seat handle)",
                        key: s.clone(),
                    });
                }
            }
        }
    }
    if targets.is_empty() {
        return Ok("nothing to reset\n".into());
    }
    let mut out = String::new();
    for t in &targets {
        stores.ledger.reset(t).await?;
        let _ = writeln!(out, "reset {t}");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_shows_changes_with_context() {
        let a = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let b = "a\nb\nc\nD\ne\nf\ng\nh\ni\n";
        let d = unified_diff(a, b, "old", "new", 1);
        assert!(d.starts_with("--- old\n+++ new\n"), "{d}");
        assert!(d.contains("-d\n+D\n"), "{d}");
        assert!(d.contains("+i\n"), "{d}");
        assert!(!d.contains(" a\n"), "{d}");
        assert_eq!(unified_diff(a, a, "x", "y", 3), "");
    }

    #[tokio::test]
    async fn reset_by_handle_needs_a_known_seat() {
        let stores = Stores::memory();
        let err = budgets_reset(&stores, &["eng".into()], false).await;
        assert!(matches!(err, Err(EngineError::NotFound { .. })));
        assert_eq!(
            budgets_reset(&stores, &[], true).await.unwrap_or_default(),
            "nothing to reset\n"
        );
    }
}
