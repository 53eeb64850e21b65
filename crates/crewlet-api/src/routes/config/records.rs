//! What a revision looks like on the wire: its record (no payload), the
//! record with its company, and the audit wrapper.

use chrono::{DateTime, SecondsFormat, Utc};
use crewlet_store::ConfigRevision;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

/// Times as the original engine writes them (`+00:00`, microseconds).
fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, false)
}

/// A revision without its payload: the original engine's record
/// (`revision_id` ... `activated_at`), then ours (`revision_number`,
/// `parent_revision_number`, `company`).
#[derive(Debug, Serialize, ToSchema)]
pub struct RevisionRecord {
    /// The revision's id (uuid): what `If-Match`, `ETag` and the
    /// `/config/revisions/{id}` paths take.
    pub revision_id: Uuid,
    pub parent_revision_id: Option<Uuid>,
    /// RFC 3339, `+00:00`.
    pub created_at: String,
    /// `api:{token id}` for revisions written through the API.
    pub created_by: String,
    /// `api` (PUT /config), `api.revert`, `cli-import`, ...
    pub source: String,
    pub summary: String,
    pub is_active: bool,
    pub activated_at: Option<String>,
    /// The revision's number: its place in the history (also accepted
    /// wherever a revision id is).
    pub revision_number: i64,
    pub parent_revision_number: Option<i64>,
    /// The company's `name` in this revision.
    pub company: Option<String>,
}

impl From<&ConfigRevision> for RevisionRecord {
    fn from(r: &ConfigRevision) -> Self {
        Self {
            revision_id: r.uuid,
            parent_revision_id: r.parent_uuid,
            created_at: iso(r.created_at),
            created_by: r.created_by.clone(),
            source: r.source.clone(),
            summary: r.summary.clone(),
            is_active: r.is_active,
            activated_at: r.activated_at.map(iso),
            revision_number: r.revision_id,
            parent_revision_number: r.parent_revision_id,
            company: r
                .payload
                .get("name")
                .and_then(|n| n.as_str())
                .map(str::to_owned),
        }
    }
}

/// `GET /config/revisions/{id}`: the record and the company.
#[derive(Debug, Serialize, ToSchema)]
pub struct RevisionDetail {
    #[serde(flatten)]
    pub record: RevisionRecord,
    /// The company, as stored (JSON).
    #[schema(value_type = Object)]
    pub payload: Value,
}

/// `GET /config/audit`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RevisionAudit {
    pub revisions: Vec<RevisionRecord>,
}
