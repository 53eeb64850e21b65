//! The company an engine runs: the active revision in `company_config`, or a
//! company file imported as a new revision.

use std::path::{Path, PathBuf};

use crewlet_config::Company;
use crewlet_store::{ConfigRevision, ConfigRevisions, NewRevision};
use tracing::info;

use crate::error::EngineError;

/// The file name looked for beside the bootstrap file when no revision is
/// active yet (the quickstart layout: `config.yaml` + `company.yaml`).
pub const SIBLING_COMPANY_FILE: &str = "company.yaml";

/// The company of a stored revision.
pub fn company_of(revision: &ConfigRevision) -> Result<Company, EngineError> {
    let company: Company =
        serde_json::from_value(revision.payload.clone()).map_err(|e| EngineError::BadRevision {
            revision_id: revision.revision_id,
            reason: e.to_string(),
        })?;
    company.validate().map_err(|e| EngineError::BadRevision {
        revision_id: revision.revision_id,
        reason: e.to_string(),
    })?;
    Ok(company)
}

/// The active revision and its company, if one is active.
pub async fn active_company(
    configs: &dyn ConfigRevisions,
) -> Result<Option<(Company, ConfigRevision)>, EngineError> {
    match configs.active().await? {
        Some(rev) => Ok(Some((company_of(&rev)?, rev))),
        None => Ok(None),
    }
}

/// What [`import_company`] did.
#[derive(Debug, Clone)]
pub struct Imported {
    pub revision: ConfigRevision,
    pub company: Company,
    /// False when the file equals the active revision (nothing was stored).
    pub created: bool,
}

/// Validates the company file at `path` and stores it as the new active
/// revision (parented on the current one). A file identical to the active
/// revision is not stored again.
pub async fn import_company(
    configs: &dyn ConfigRevisions,
    path: &Path,
    created_by: &str,
    summary: Option<&str>,
) -> Result<Imported, EngineError> {
    let company = Company::load(path)?;
    let payload = serde_json::to_value(&company)
        .map_err(|e| EngineError::Other(format!("cannot serialize the company: {e}")))?;
    let active = configs.active().await?;
    if let Some(rev) = &active
        && rev.payload == payload
    {
        info!(revision_id = rev.revision_id, file = %path.display(), "company file equals the active revision; nothing imported");
        return Ok(Imported {
            revision: rev.clone(),
            company,
            created: false,
        });
    }
    let revision = configs
        .create(NewRevision {
            parent_revision_id: active.as_ref().map(|r| r.revision_id),
            created_by: created_by.to_owned(),
            source: "cli-import".into(),
            summary: summary
                .map(str::to_owned)
                .unwrap_or_else(|| format!("imported from {}", path.display())),
            payload,
            activate: true,
        })
        .await?;
    info!(revision_id = revision.revision_id, company = %company.name, file = %path.display(), "company revision imported and activated");
    Ok(Imported {
        revision,
        company,
        created: true,
    })
}

/// `company.yaml` beside the bootstrap file, if it exists.
pub fn sibling_company_file(config_path: Option<&Path>) -> Option<PathBuf> {
    let dir = match config_path?.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let candidate = dir.join(SIBLING_COMPANY_FILE);
    candidate.is_file().then_some(candidate)
}

/// Who is importing: `$USER@host`, for `created_by`.
pub fn local_author() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "cli".into());
    format!("{user} (crewlet cli)")
}

#[cfg(test)]
mod tests {
    use crewlet_store::MemoryConfigRevisions;

    use super::*;

    #[tokio::test]
    async fn import_is_idempotent_and_parents_on_the_active_revision() -> Result<(), EngineError> {
        let dir =
            std::env::temp_dir().join(format!("crewlet-engine-import-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| EngineError::file("create", &dir, e))?;
        let file = dir.join("company.yaml");
        std::fs::write(
            &file,
            format!(
                "name: A\nroles:\n  - {{name: CEO, handle: ceo}}\n{}",
                crate::TEST_LLM
            ),
        )
        .map_err(|e| EngineError::file("write", &file, e))?;
        let configs = MemoryConfigRevisions::new();
        let first = import_company(&configs, &file, "t", None).await?;
        assert!(first.created);
        let again = import_company(&configs, &file, "t", None).await?;
        assert!(!again.created);
        assert_eq!(again.revision.revision_id, first.revision.revision_id);
        std::fs::write(
            &file,
            format!(
                "name: A\nroles:\n  - {{name: CEO, handle: boss}}\n{}",
                crate::TEST_LLM
            ),
        )
        .map_err(|e| EngineError::file("write", &file, e))?;
        let second = import_company(&configs, &file, "t", Some("rename")).await?;
        assert_eq!(
            second.revision.parent_revision_id,
            Some(first.revision.revision_id)
        );
        let (company, rev) = active_company(&configs)
            .await?
            .ok_or(EngineError::Other("none".into()))?;
        assert_eq!(rev.revision_id, second.revision.revision_id);
        assert_eq!(company.roles[0].handle.as_deref(), Some("boss"));
        assert_eq!(
            sibling_company_file(Some(&dir.join("config.yaml"))),
            Some(file)
        );
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }
}
