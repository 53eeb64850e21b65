//! The Confluence side of the importer: pages keyed by space and title,
//! bodies in storage format, the source hash kept in the page's
//! `crewlet_import` content property (a page without one is compared by
//! body), every update one version up. Runs as the org account
//! (`integrations.confluence.email` + `token`).

use async_trait::async_trait;
use crewlet_config::Company;

use super::confluence_client::ConfluenceClient;
use super::creds::{ConfluenceAuth, expand};
use super::import::{Doc, DocKind, Existing, Found, Publisher, same_body};
use super::markdown::Format;

/// Label on every knowledge doc page.
pub const DOC_LABEL: &str = "crewlet-doc";
/// Label on every tool skill page.
pub const SKILL_LABEL: &str = "crewlet-skill";

/// Publishes to Confluence.
#[derive(Debug)]
pub struct ConfluencePublisher {
    client: ConfluenceClient,
}

impl ConfluencePublisher {
    /// The org account of `company` (`integrations.confluence`).
    pub fn from_company(
        company: &Company,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ConfluencePublisher, String> {
        let env: &dyn Fn(&str) -> Option<String> = &env;
        let cfg = company
            .integrations
            .confluence
            .as_ref()
            .ok_or("the company has no integrations.confluence")?;
        let url = expand(cfg.url.as_deref(), env)
            .ok_or("integrations.confluence.url is not set (or its variable is not)")?;
        let auth = ConfluenceAuth::from_parts(
            expand(cfg.email.as_deref(), env),
            expand(cfg.token.as_deref(), env),
        )
        .ok_or("integrations.confluence.token is not set (or its variable is not)")?;
        Ok(Self::new(
            ConfluenceClient::new(&url, auth).map_err(|e| e.to_string())?,
        ))
    }

    pub fn new(client: ConfluenceClient) -> Self {
        Self { client }
    }
}

#[async_trait]
impl Publisher for ConfluencePublisher {
    fn format(&self) -> Format {
        Format::ConfluenceStorage
    }

    async fn find(&self, doc: &Doc, body: &str, hash: &str) -> Result<Found, String> {
        let page = self
            .client
            .find_page(&doc.container, &doc.title)
            .await
            .map_err(|e| e.to_string())?;
        Ok(match page {
            None => Found::Missing,
            Some(p) => {
                let same = match &p.import_hash {
                    Some(h) => h == hash,
                    None => same_body(&p.body, body),
                };
                if same {
                    Found::Same { id: p.id }
                } else {
                    Found::Differs(Existing {
                        id: p.id,
                        version: p.version,
                    })
                }
            }
        })
    }

    async fn create(&self, doc: &Doc, body: &str, hash: &str) -> Result<String, String> {
        let parent = match &doc.parent {
            Some(title) => {
                let found = self
                    .client
                    .find_page(&doc.container, title)
                    .await
                    .map_err(|e| e.to_string())?;
                if found.is_none() {
                    tracing::info!(page = %doc.title, parent = %title, "parent page not found: created at the space root");
                }
                found.map(|p| p.id)
            }
            None => None,
        };
        let label = match doc.kind {
            DocKind::Knowledge => DOC_LABEL,
            DocKind::Skill { .. } => SKILL_LABEL,
        };
        self.client
            .create_page(
                &doc.container,
                &doc.title,
                body,
                parent.as_deref(),
                hash,
                &[label],
            )
            .await
            .map(|p| p.id)
            .map_err(|e| e.to_string())
    }

    async fn update(
        &self,
        doc: &Doc,
        page: &Existing,
        body: &str,
        hash: &str,
    ) -> Result<(), String> {
        let current = super::confluence_client::PageRef {
            id: page.id.clone(),
            title: doc.title.clone(),
            version: page.version,
            body: String::new(),
            import_hash: None,
        };
        self.client
            .update_page(&current, &doc.title, body, hash)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}
