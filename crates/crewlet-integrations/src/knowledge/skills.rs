//! Reading tool skill pages back: every page of the Tool Skills container
//! (a Confluence space, a Plane project) or of a local folder, as its YAML
//! frontmatter and its body in plain text.
//!
//! A page is a skill when it opens with a YAML code block whose mapping has
//! a `trigger` (what `crewlet confluence import` / `crewlet plane import`
//! write, and what the original's importers wrote). On Confluence the walk
//! asks only for pages labelled [`SKILL_LABEL`]; on Plane it reads every
//! page of the project and keeps those that decode. Other pages (a space's
//! home page, notes) are passed over quietly.
//!
//! A walk is all or nothing: [`SkillSource::walk`] fails when it cannot
//! list the whole container, so a caller never mistakes half a container
//! for all of it.

use std::path::PathBuf;

use async_trait::async_trait;
use crewlet_config::Company;
use serde_json::Value;

use super::confluence_client::ConfluenceClient;
use super::creds::{ConfluenceAuth, expand};
use super::import::md_files;
use super::import_confluence::SKILL_LABEL;
use super::markdown::{decode_entities, html_to_lines, split_frontmatter};
use crate::plane::PlaneClient;

/// Confluence pages asked for per request of a walk.
const PAGE_SIZE: usize = 100;

/// One skill page, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillPage {
    /// Where it came from (`confluence:TS/123`, `plane:TS/<id>`, a path).
    pub source: String,
    /// The frontmatter mapping.
    pub frontmatter: Value,
    /// The body as text (Markdown for files, flattened HTML for pages).
    pub body: String,
}

/// What a walk found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SkillWalk {
    pub pages: Vec<SkillPage>,
    /// Pages that looked like skills but could not be read, and why.
    pub rejected: Vec<(String, String)>,
}

/// Where skill pages live.
#[async_trait]
pub trait SkillSource: Send + Sync {
    /// What it is, for logs (`confluence space TS`).
    fn describe(&self) -> String;

    /// Every skill page; an error when the container could not be listed
    /// completely.
    async fn walk(&self) -> Result<SkillWalk, String>;
}

/// Parses YAML frontmatter text; `None` when it is not a mapping with a
/// `trigger` (not a skill).
fn skill_frontmatter(yaml: &str) -> Option<Result<Value, String>> {
    let value: Value = match serde_saphyr::from_str(yaml) {
        Ok(v) => v,
        Err(e) => {
            return Some(Err(format!("unreadable YAML: {e}"))).filter(|_| yaml.contains("trigger"));
        }
    };
    value
        .get("trigger")
        .filter(|t| !t.is_null())
        .is_some()
        .then_some(Ok(value))
}

/// A Markdown file with frontmatter; `None` when it is not a skill.
pub fn decode_markdown(text: &str) -> Option<Result<(Value, String), String>> {
    let (raw, body) = split_frontmatter(text);
    let fm = skill_frontmatter(raw?)?;
    Some(fm.map(|v| (v, body.trim().to_owned())))
}

/// A Confluence storage-format page that opens with a `code` macro of
/// YAML; `None` when it is not a skill.
pub fn decode_confluence(storage: &str) -> Option<Result<(Value, String), String>> {
    let start = storage.find("<ac:structured-macro")?;
    let open = "<![CDATA[";
    let end_macro = storage[start..].find("</ac:structured-macro>")? + start;
    let inner = &storage[start..end_macro];
    let body_at = inner.find("<ac:plain-text-body>")?;
    let cdata = &inner[body_at..];
    let yaml_start = cdata.find(open)? + open.len();
    let yaml_end = cdata.rfind("]]>")?;
    if yaml_end < yaml_start {
        return None;
    }
    // The importer splits a `]]>` inside the text across two sections.
    let yaml = cdata[yaml_start..yaml_end].replace("]]]]><![CDATA[>", "]]>");
    let fm = skill_frontmatter(&yaml)?;
    let rest = &storage[end_macro + "</ac:structured-macro>".len()..];
    Some(fm.map(|v| (v, html_to_lines(rest))))
}

/// A Plane `description_html` that opens with a `<pre><code>` block of
/// YAML; `None` when it is not a skill.
pub fn decode_plane(html: &str) -> Option<Result<(Value, String), String>> {
    let pre = html.find("<pre")?;
    // Only a block at the top of the page: nothing but markup before it.
    if !html_to_lines(&html[..pre]).trim().is_empty() {
        return None;
    }
    let after_pre = &html[pre..];
    let code_open = after_pre.find("<code")?;
    let code_text = after_pre[code_open..].find('>')? + code_open + 1;
    let code_close = after_pre.find("</code>")?;
    if code_close < code_text {
        return None;
    }
    let yaml = decode_entities(&after_pre[code_text..code_close]);
    let fm = skill_frontmatter(&yaml)?;
    let pre_close = after_pre.find("</pre>").map_or(code_close + 7, |i| i + 6);
    Some(fm.map(|v| (v, html_to_lines(&after_pre[pre_close..]))))
}

/// Skills of a Confluence space, read with the org account.
#[derive(Debug)]
pub struct ConfluenceSkills {
    client: ConfluenceClient,
    space: String,
}

impl ConfluenceSkills {
    pub fn new(client: ConfluenceClient, space: impl Into<String>) -> Self {
        Self {
            client,
            space: space.into(),
        }
    }

    /// From `integrations.confluence` (url, email, token); `None` when it
    /// is not configured.
    pub fn from_company(
        company: &Company,
        env: impl Fn(&str) -> Option<String>,
        space: &str,
    ) -> Option<Self> {
        let env: &dyn Fn(&str) -> Option<String> = &env;
        let cfg = company.integrations.confluence.as_ref()?;
        let url = expand(cfg.url.as_deref(), env)?;
        let auth = ConfluenceAuth::from_parts(
            expand(cfg.email.as_deref(), env),
            expand(cfg.token.as_deref(), env),
        )?;
        let client = ConfluenceClient::new(&url, auth).ok()?;
        Some(Self::new(client, space))
    }
}

#[async_trait]
impl SkillSource for ConfluenceSkills {
    fn describe(&self) -> String {
        format!("confluence space {}", self.space)
    }

    async fn walk(&self) -> Result<SkillWalk, String> {
        let cql = format!(
            "space = {} AND type = page AND label = {}",
            super::escape_cql(&self.space),
            super::escape_cql(SKILL_LABEL)
        );
        let mut out = SkillWalk::default();
        let mut start = 0;
        loop {
            let answer = self
                .client
                .search_from(&cql, start, PAGE_SIZE, "body.storage,version")
                .await
                .map_err(|e| e.to_string())?;
            let results = answer
                .get("results")
                .and_then(Value::as_array)
                .ok_or("a search answer without results")?;
            for page in results {
                let id = page.get("id").and_then(Value::as_str).unwrap_or_default();
                let source = format!("confluence:{}/{id}", self.space);
                let storage = page
                    .pointer("/body/storage/value")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                match decode_confluence(storage) {
                    Some(Ok((frontmatter, body))) => out.pages.push(SkillPage {
                        source,
                        frontmatter,
                        body,
                    }),
                    Some(Err(why)) => out.rejected.push((source, why)),
                    None => out.rejected.push((
                        source,
                        "labelled a skill but has no leading YAML code block with a trigger".into(),
                    )),
                }
            }
            if results.len() < PAGE_SIZE {
                return Ok(out);
            }
            start += results.len();
        }
    }
}

/// Skills of a Plane project, read with the org token.
#[derive(Debug)]
pub struct PlaneSkills {
    client: PlaneClient,
    project: String,
}

impl PlaneSkills {
    pub fn new(client: PlaneClient, project: impl Into<String>) -> Self {
        Self {
            client,
            project: project.into(),
        }
    }

    /// From an enabled `integrations.plane` (url, workspace, token); `None`
    /// when it is not configured.
    pub fn from_company(
        company: &Company,
        env: impl Fn(&str) -> Option<String>,
        project: &str,
    ) -> Option<Self> {
        let env: &dyn Fn(&str) -> Option<String> = &env;
        let cfg = company.integrations.plane.as_ref().filter(|p| p.enabled)?;
        let url = expand(Some(&cfg.url), env)?;
        let workspace = expand(cfg.workspace.as_deref(), env)?;
        let token = expand(cfg.token.as_deref(), env)?;
        let client = PlaneClient::new(&url, &workspace, &token).ok()?;
        Some(Self::new(client, project))
    }
}

#[async_trait]
impl SkillSource for PlaneSkills {
    fn describe(&self) -> String {
        format!("plane project {}", self.project)
    }

    async fn walk(&self) -> Result<SkillWalk, String> {
        let projects = self.client.projects().await.map_err(|e| e.to_string())?;
        let Some(project) = projects
            .iter()
            .find(|p| p.identifier.eq_ignore_ascii_case(&self.project))
        else {
            return Err(format!(
                "project {} does not exist or the org token cannot see it",
                self.project
            ));
        };
        let pages = self
            .client
            .pages(&project.id)
            .await
            .map_err(|e| e.to_string())?;
        let mut out = SkillWalk::default();
        for page in pages.into_iter().filter(|p| !p.archived) {
            let source = format!("plane:{}/{}", self.project, page.id);
            match decode_plane(&page.description_html) {
                Some(Ok((frontmatter, body))) => out.pages.push(SkillPage {
                    source,
                    frontmatter,
                    body,
                }),
                Some(Err(why)) => out.rejected.push((source, why)),
                // Not a skill: the project's other pages.
                None if page.external_source.as_deref() == Some(super::EXTERNAL_SOURCE) => {
                    out.rejected.push((
                        source,
                        "imported as a skill but no longer opens with a YAML block with a trigger"
                            .into(),
                    ));
                }
                None => {}
            }
        }
        Ok(out)
    }
}

/// Skills from `.md` files under a folder (hidden entries skipped).
#[derive(Debug, Clone)]
pub struct DirSkills {
    dir: PathBuf,
}

impl DirSkills {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }
}

#[async_trait]
impl SkillSource for DirSkills {
    fn describe(&self) -> String {
        format!("folder {}", self.dir.display())
    }

    async fn walk(&self) -> Result<SkillWalk, String> {
        let mut files = Vec::new();
        md_files(&self.dir, &mut files)
            .map_err(|e| format!("cannot read {}: {e}", self.dir.display()))?;
        let mut out = SkillWalk::default();
        for file in files {
            let source = file.display().to_string();
            let text = match std::fs::read_to_string(&file) {
                Ok(t) => t,
                Err(e) => {
                    out.rejected.push((source, format!("cannot read: {e}")));
                    continue;
                }
            };
            match decode_markdown(&text) {
                Some(Ok((frontmatter, body))) => out.pages.push(SkillPage {
                    source,
                    frontmatter,
                    body,
                }),
                Some(Err(why)) => out.rejected.push((source, why)),
                None => {}
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knowledge::markdown::{Format, render};

    const SKILL: &str = "---\nkey: mcp:gh\ntrigger:\n  mcp_server: gh\nphases: [execute]\n\
                         title: GitHub\nsummary: Check CI.\n---\n\nUse **green** builds.\n\n\
                         - one\n- two & three\n";

    #[test]
    fn a_skill_round_trips_through_both_page_formats() {
        let Some(Ok((fm, body))) = decode_markdown(SKILL) else {
            panic!("not decoded")
        };
        assert_eq!(fm["trigger"]["mcp_server"], "gh");
        let (raw, rest) = split_frontmatter(SKILL);
        // What the importer publishes: the frontmatter as a YAML block.
        let page = format!(
            "```yaml\n{}\n```\n\n{rest}",
            raw.unwrap_or_default().trim_end()
        );
        for format in [Format::ConfluenceStorage, Format::PlaneHtml] {
            let html = render(&page, format);
            let decoded = match format {
                Format::ConfluenceStorage => decode_confluence(&html),
                Format::PlaneHtml => decode_plane(&html),
            };
            let Some(Ok((fm2, text))) = decoded else {
                panic!("{format:?} not decoded: {html}")
            };
            assert_eq!(fm2, fm, "{format:?}");
            assert!(text.contains("Use green builds."), "{format:?}: {text}");
            assert!(text.contains("- two & three"), "{format:?}: {text}");
        }
        assert_eq!(body, "Use **green** builds.\n\n- one\n- two & three");
    }

    #[test]
    fn pages_that_are_not_skills_are_passed_over() {
        assert!(decode_markdown("# Notes\nhello").is_none());
        assert!(decode_markdown("---\ntitle: x\n---\nbody").is_none());
        assert!(decode_plane("<p>Welcome</p><pre><code>trigger: x</code></pre>").is_none());
        assert!(decode_confluence("<p>Home page</p>").is_none());
        // a YAML block that mentions a trigger but does not parse is an error
        let bad = "<pre><code class=\"language-yaml\">trigger: [</code></pre>";
        assert!(matches!(decode_plane(bad), Some(Err(_))));
    }
}
