//! The vocabulary every other Crewlet crate speaks: agent ids, the event
//! envelope and its catalogue of types and categories, and W3C trace context.
//!
//! This crate owns no I/O and depends on no other crewlet crate. Routing
//! (topics) belongs to `crewlet-queue`, storage to `crewlet-store`.

mod agent_id;
mod budget;
mod event;
mod event_type;
pub mod payload;
mod phase;
pub mod quota;
mod trace;
mod wire;

pub use agent_id::{AGENT_ID_NAMESPACE, AgentId};
pub use budget::BudgetPeriod;
pub use event::{Event, TAG_AGENT_HANDLE};
pub use event_type::{Category, EventType};
pub use payload::{EventPayload, PayloadError};
pub use phase::Phase;
pub use quota::{ProviderQuotas, QuotaError, QuotaLimits, QuotaSlot, QuotaState};
pub use trace::{SpanId, TraceContext, TraceId, TraceParseError};
