//! The Plane side of the importer: the container is a project identifier
//! (the project must exist: `crewlet plane provision` creates it), pages
//! are `description_html`, keyed by `external_source: crewlet` +
//! `external_id` (`doc:<title>` or `skill:<key>`) and else by exact name;
//! a page whose name and body already match is left alone. Runs as the
//! org account (`integrations.plane.token`).

use std::collections::HashMap;

use async_trait::async_trait;
use crewlet_config::Company;
use parking_lot::Mutex;

use super::creds::expand;
use super::import::{Doc, DocKind, Existing, Found, Publisher, same_body};
use super::markdown::Format;
use crate::plane::{Page, PlaneClient};

/// `external_source` of every page the importer writes.
pub const EXTERNAL_SOURCE: &str = "crewlet";

/// Publishes to Plane.
#[derive(Debug)]
pub struct PlanePublisher {
    client: PlaneClient,
    /// Identifier (upper case) -> project id; read once.
    projects: Mutex<Option<HashMap<String, String>>>,
    /// Project id -> its pages; read once per project, kept current.
    pages: Mutex<HashMap<String, Vec<Page>>>,
}

/// The `external_id` of `doc`'s page.
pub fn external_id(doc: &Doc) -> String {
    match &doc.kind {
        DocKind::Knowledge => format!("doc:{}", doc.title),
        DocKind::Skill { key } => format!("skill:{key}"),
    }
}

impl PlanePublisher {
    /// The org account of `company` (an enabled `integrations.plane`).
    pub fn from_company(
        company: &Company,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<PlanePublisher, String> {
        let env: &dyn Fn(&str) -> Option<String> = &env;
        let cfg = company
            .integrations
            .plane
            .as_ref()
            .ok_or("the company has no integrations.plane")?;
        let url = expand(Some(&cfg.url), env).ok_or("integrations.plane.url is not set")?;
        let workspace = expand(cfg.workspace.as_deref(), env)
            .ok_or("integrations.plane.workspace is not set")?;
        let token = expand(cfg.token.as_deref(), env)
            .ok_or("integrations.plane.token is not set (or its variable is not)")?;
        let client = PlaneClient::new(&url, &workspace, &token).map_err(|e| e.to_string())?;
        Ok(Self::new(client))
    }

    pub fn new(client: PlaneClient) -> Self {
        Self {
            client,
            projects: Mutex::new(None),
            pages: Mutex::new(HashMap::new()),
        }
    }

    async fn project_id(&self, identifier: &str) -> Result<String, String> {
        let cached = self.projects.lock().clone();
        let map = match cached {
            Some(m) => m,
            None => {
                let list = self.client.projects().await.map_err(|e| e.to_string())?;
                let map: HashMap<String, String> = list
                    .into_iter()
                    .map(|p| (p.identifier.to_ascii_uppercase(), p.id))
                    .collect();
                *self.projects.lock() = Some(map.clone());
                map
            }
        };
        map.get(&identifier.to_ascii_uppercase()).cloned().ok_or_else(|| {
            format!("project {identifier} does not exist (or is not visible to the org token): create it first, e.g. with `crewlet plane provision`")
        })
    }

    async fn project_pages(&self, project: &str) -> Result<Vec<Page>, String> {
        if let Some(p) = self.pages.lock().get(project) {
            return Ok(p.clone());
        }
        let list = self
            .client
            .pages(project)
            .await
            .map_err(|e| e.to_string())?;
        self.pages.lock().insert(project.to_owned(), list.clone());
        Ok(list)
    }

    fn remember(&self, project: &str, page: Page) {
        let mut pages = self.pages.lock();
        let list = pages.entry(project.to_owned()).or_default();
        list.retain(|p| p.id != page.id);
        list.push(page);
    }
}

fn matching<'p>(pages: &'p [Page], doc: &Doc) -> Option<&'p Page> {
    let ext = external_id(doc);
    pages
        .iter()
        .find(|p| {
            p.external_source.as_deref() == Some(EXTERNAL_SOURCE)
                && p.external_id.as_deref() == Some(ext.as_str())
        })
        .or_else(|| pages.iter().find(|p| p.name == doc.title))
}

#[async_trait]
impl Publisher for PlanePublisher {
    fn format(&self) -> Format {
        Format::PlaneHtml
    }

    async fn find(&self, doc: &Doc, body: &str, _hash: &str) -> Result<Found, String> {
        let project = self.project_id(&doc.container).await?;
        let pages = self.project_pages(&project).await?;
        Ok(match matching(&pages, doc) {
            None => Found::Missing,
            Some(p) if p.name == doc.title && same_body(&p.description_html, body) => {
                Found::Same { id: p.id.clone() }
            }
            Some(p) => Found::Differs(Existing {
                id: p.id.clone(),
                version: 0,
            }),
        })
    }

    async fn create(&self, doc: &Doc, body: &str, _hash: &str) -> Result<String, String> {
        let project = self.project_id(&doc.container).await?;
        let parent = match &doc.parent {
            Some(title) => {
                let pages = self.project_pages(&project).await?;
                let found = pages
                    .iter()
                    .find(|p| &p.name == title)
                    .map(|p| p.id.clone());
                if found.is_none() {
                    tracing::info!(page = %doc.title, parent = %title, "parent page not found: created at the project root");
                }
                found
            }
            None => None,
        };
        let page = Page {
            name: doc.title.clone(),
            description_html: body.to_owned(),
            parent,
            external_id: Some(external_id(doc)),
            external_source: Some(EXTERNAL_SOURCE.to_owned()),
            ..Page::default()
        };
        let created = self
            .client
            .create_page(&project, &page)
            .await
            .map_err(|e| e.to_string())?;
        let id = created.id.clone();
        self.remember(&project, created);
        Ok(id)
    }

    async fn update(
        &self,
        doc: &Doc,
        page: &Existing,
        body: &str,
        _hash: &str,
    ) -> Result<(), String> {
        let project = self.project_id(&doc.container).await?;
        let updated = self
            .client
            .update_page(&project, &page.id, &doc.title, body)
            .await
            .map_err(|e| e.to_string())?;
        self.remember(&project, updated);
        Ok(())
    }
}
