//! `crewlet confluence import` / `crewlet plane import`: publish a folder
//! of Markdown to the knowledge backend.
//!
//! Every `.md` file under the folder (hidden directories skipped) is one
//! page:
//! - a file whose YAML frontmatter has `trigger:` is a **tool skill**: it
//!   goes to the Tool Skills container (Confluence space or Plane project,
//!   `SKILLS` unless told otherwise), titled by its frontmatter `title`
//!   (else its `# H1`, else its `key`, else the file name), the
//!   frontmatter kept at the top of the page as a YAML code block;
//! - every other file is a **knowledge doc**: its container is the name
//!   of the directory it sits in, its title the frontmatter `title` or
//!   else its first `# H1`, and that H1 line is left out of the body. A
//!   `parent:` in the frontmatter nests a new page under the page of that
//!   title. A doc without a title, or directly in the root folder, is
//!   skipped with a reason.
//!
//! [`plan`] looks every page up (container + title; Plane also by the
//! page's `external_id`) and says what would change: create, update, or
//! nothing when the stored page already has this content. [`apply`] does
//! it, page by page; one failing does not stop the rest. Both report
//! progress every [`PROGRESS_EVERY`] pages.

use std::fmt;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::markdown::{Format, render, split_frontmatter, take_h1};

/// Progress is reported every this many pages.
pub const PROGRESS_EVERY: usize = 50;
/// Default Tool Skills container.
pub const DEFAULT_SKILLS_CONTAINER: &str = "TS";

/// What a file publishes as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocKind {
    Knowledge,
    Skill { key: String },
}

/// One file to publish.
#[derive(Debug, Clone)]
pub struct Doc {
    /// Relative to the imported folder.
    pub path: PathBuf,
    pub kind: DocKind,
    pub container: String,
    pub title: String,
    /// The Markdown the page body is rendered from.
    pub markdown: String,
    /// Title of the page a new page is created under.
    pub parent: Option<String>,
}

/// The files of a folder.
#[derive(Debug, Clone, Default)]
pub struct Collected {
    pub docs: Vec<Doc>,
    /// Files that publish nothing, and why.
    pub skipped: Vec<(PathBuf, String)>,
}

/// Every `.md` file under `dir`, in name order, hidden entries skipped.
pub(crate) fn md_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        if entry.file_type()?.is_dir() {
            md_files(&path, out)?;
        } else if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("md"))
        {
            out.push(path);
        }
    }
    Ok(())
}

fn fm_str(fm: &Value, key: &str) -> Option<String> {
    fm.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Reads every Markdown file under `dir`.
pub fn collect(dir: &Path, skills_container: &str) -> std::io::Result<Collected> {
    let mut files = Vec::new();
    md_files(dir, &mut files)?;
    let mut out = Collected::default();
    for file in files {
        let rel = file.strip_prefix(dir).unwrap_or(&file).to_path_buf();
        let text = match std::fs::read(&file).map(String::from_utf8) {
            Ok(Ok(t)) => t,
            Ok(Err(_)) => {
                out.skipped.push((rel, "not UTF-8 text".into()));
                continue;
            }
            Err(e) => {
                out.skipped.push((rel, format!("cannot read: {e}")));
                continue;
            }
        };
        match read_doc(&rel, &text, skills_container) {
            Ok(doc) => out.docs.push(doc),
            Err(why) => out.skipped.push((rel, why)),
        }
    }
    Ok(out)
}

fn read_doc(rel: &Path, text: &str, skills_container: &str) -> Result<Doc, String> {
    let (raw_fm, body) = split_frontmatter(text);
    let fm: Value = match raw_fm {
        Some(raw) if !raw.trim().is_empty() => {
            serde_saphyr::from_str(raw).map_err(|e| format!("unreadable frontmatter: {e}"))?
        }
        _ => Value::Null,
    };
    if !fm.is_null() && !fm.is_object() {
        return Err("the frontmatter is not a mapping".into());
    }
    let (h1, rest) = take_h1(body);
    let stem = rel
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if fm.get("trigger").is_some_and(|t| !t.is_null()) {
        let key = fm_str(&fm, "key").unwrap_or_else(|| stem.clone());
        let title = fm_str(&fm, "title").or(h1).unwrap_or_else(|| key.clone());
        let raw = raw_fm.unwrap_or_default();
        let markdown = format!("```yaml\n{}\n```\n\n{}", raw.trim_end(), rest);
        return Ok(Doc {
            path: rel.to_path_buf(),
            kind: DocKind::Skill { key },
            container: skills_container.to_owned(),
            title,
            markdown,
            parent: None,
        });
    }
    let container = rel
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().trim().to_owned())
        .filter(|n| !n.is_empty())
        .ok_or("not inside a container directory (its directory name is the space or project)")?;
    let title = fm_str(&fm, "title")
        .or(h1)
        .ok_or("no title: give it a `# H1` or a frontmatter `title`")?;
    Ok(Doc {
        path: rel.to_path_buf(),
        kind: DocKind::Knowledge,
        container,
        title,
        markdown: rest,
        parent: fm_str(&fm, "parent"),
    })
}

/// An existing page that differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing {
    pub id: String,
    /// Confluence version number (0 on Plane).
    pub version: u64,
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Missing,
    Same { id: String },
    Differs(Existing),
}

/// A backend pages are published to.
#[async_trait]
pub trait Publisher: Send + Sync {
    fn format(&self) -> Format;
    /// The page `doc` publishes to, and whether it holds `body` already.
    async fn find(&self, doc: &Doc, body: &str, hash: &str) -> Result<Found, String>;
    /// Creates the page; its id.
    async fn create(&self, doc: &Doc, body: &str, hash: &str) -> Result<String, String>;
    async fn update(
        &self,
        doc: &Doc,
        page: &Existing,
        body: &str,
        hash: &str,
    ) -> Result<(), String>;
}

/// What will happen to one page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Create,
    Update(Existing),
    Unchanged { id: String },
    Fail(String),
}

#[derive(Debug, Clone)]
pub struct PlanItem {
    pub doc: Doc,
    pub body: String,
    pub hash: String,
    pub action: Action,
}

/// Every page of an import and what will happen to it.
#[derive(Debug, Clone, Default)]
pub struct ImportPlan {
    pub items: Vec<PlanItem>,
    pub skipped: Vec<(PathBuf, String)>,
}

impl ImportPlan {
    fn count(&self, f: impl Fn(&Action) -> bool) -> usize {
        self.items.iter().filter(|i| f(&i.action)).count()
    }
}

fn label(doc: &Doc) -> String {
    let kind = match doc.kind {
        DocKind::Knowledge => "doc",
        DocKind::Skill { .. } => "skill",
    };
    format!(
        "{kind} {}/{} ({})",
        doc.container,
        doc.title,
        doc.path.display()
    )
}

impl fmt::Display for ImportPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for item in &self.items {
            match &item.action {
                Action::Create => writeln!(f, "  create {}", label(&item.doc))?,
                Action::Update(e) => writeln!(f, "  update {} (page {})", label(&item.doc), e.id)?,
                Action::Unchanged { .. } => {}
                Action::Fail(why) => writeln!(f, "  cannot publish {}: {why}", label(&item.doc))?,
            }
        }
        for (path, why) in &self.skipped {
            writeln!(f, "  skip {}: {why}", path.display())?;
        }
        write!(
            f,
            "{} to create, {} to update, {} unchanged, {} failing, {} skipped",
            self.count(|a| *a == Action::Create),
            self.count(|a| matches!(a, Action::Update(_))),
            self.count(|a| matches!(a, Action::Unchanged { .. })),
            self.count(|a| matches!(a, Action::Fail(_))),
            self.skipped.len()
        )
    }
}

/// The content hash recorded with a page: kind, title and rendered body.
pub fn content_hash(doc: &Doc, body: &str) -> String {
    let mut h = Sha256::new();
    let kind = match &doc.kind {
        DocKind::Knowledge => "doc".to_owned(),
        DocKind::Skill { key } => format!("skill:{key}"),
    };
    for part in [kind.as_str(), doc.title.as_str(), body] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    hex::encode(h.finalize())
}

/// Looks every doc up; changes nothing.
pub async fn plan(
    publisher: &dyn Publisher,
    collected: Collected,
    progress: &mut dyn FnMut(&str),
) -> ImportPlan {
    let total = collected.docs.len();
    let mut items = Vec::with_capacity(total);
    for (i, doc) in collected.docs.into_iter().enumerate() {
        let body = render(&doc.markdown, publisher.format());
        let hash = content_hash(&doc, &body);
        let action = match publisher.find(&doc, &body, &hash).await {
            Ok(Found::Missing) => Action::Create,
            Ok(Found::Same { id }) => Action::Unchanged { id },
            Ok(Found::Differs(e)) => Action::Update(e),
            Err(why) => Action::Fail(why),
        };
        items.push(PlanItem {
            doc,
            body,
            hash,
            action,
        });
        if (i + 1) % PROGRESS_EVERY == 0 && i + 1 < total {
            progress(&format!("looked up {}/{total} pages", i + 1));
        }
    }
    ImportPlan {
        items,
        skipped: collected.skipped,
    }
}

/// What an import did.
#[derive(Debug, Clone, Default)]
pub struct ImportReport {
    pub created: usize,
    pub updated: usize,
    pub unchanged: usize,
    /// Page and why.
    pub failed: Vec<(String, String)>,
}

impl fmt::Display for ImportReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (page, why) in &self.failed {
            writeln!(f, "  FAILED {page}: {why}")?;
        }
        write!(
            f,
            "created {}, updated {}, unchanged {}, failed {}",
            self.created,
            self.updated,
            self.unchanged,
            self.failed.len()
        )
    }
}

/// Publishes what `plan` says, page by page.
pub async fn apply(
    publisher: &dyn Publisher,
    plan: &ImportPlan,
    progress: &mut dyn FnMut(&str),
) -> ImportReport {
    let mut report = ImportReport::default();
    let total = plan.items.len();
    for (i, item) in plan.items.iter().enumerate() {
        let result = match &item.action {
            Action::Unchanged { .. } => {
                report.unchanged += 1;
                Ok(())
            }
            Action::Fail(why) => Err(why.clone()),
            Action::Create => publisher
                .create(&item.doc, &item.body, &item.hash)
                .await
                .map(|_| report.created += 1),
            Action::Update(page) => publisher
                .update(&item.doc, page, &item.body, &item.hash)
                .await
                .map(|()| report.updated += 1),
        };
        if let Err(why) = result {
            report.failed.push((label(&item.doc), why));
        }
        if (i + 1) % PROGRESS_EVERY == 0 && i + 1 < total {
            progress(&format!("{}/{total} pages done", i + 1));
        }
    }
    report
}

/// Whitespace-insensitive equality of two page bodies.
pub(crate) fn same_body(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_and_skills_are_told_apart() {
        let doc = read_doc(
            Path::new("ENG/onboarding.md"),
            "# Onboarding\n\nHello\n",
            "SKILLS",
        )
        .unwrap();
        assert_eq!(
            (doc.container.as_str(), doc.title.as_str()),
            ("ENG", "Onboarding")
        );
        assert_eq!(doc.markdown, "Hello\n");
        let skill = read_doc(
            Path::new("skills/gh.md"),
            "---\nkey: mcp:github\ntrigger:\n  mcp_server: github\ntitle: GitHub\n---\nUse it.\n",
            "TS",
        )
        .unwrap();
        assert_eq!(
            skill.kind,
            DocKind::Skill {
                key: "mcp:github".into()
            }
        );
        assert_eq!(
            (skill.container.as_str(), skill.title.as_str()),
            ("TS", "GitHub")
        );
        assert!(skill.markdown.starts_with("```yaml\nkey: mcp:github\n"));
        assert!(read_doc(Path::new("root.md"), "# T\n", "S").is_err());
        assert!(read_doc(Path::new("ENG/x.md"), "no title\n", "S").is_err());
        let titled = read_doc(
            Path::new("ENG/x.md"),
            "---\ntitle: Other\nparent: Home\n---\n# H\nb\n",
            "S",
        )
        .unwrap();
        assert_eq!(
            (titled.title.as_str(), titled.parent.as_deref()),
            ("Other", Some("Home"))
        );
    }
}
