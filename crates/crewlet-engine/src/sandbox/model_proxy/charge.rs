//! A proxied call's budget: held before it is forwarded (refused when a
//! budget is spent), settled with what its answer reports once the answer
//! has streamed back.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use crewlet_core::payload::EventPayload as _;
use crewlet_store::{BudgetRefusal, ReservationId, ReserveOutcome};
use futures::stream::{BoxStream, Stream, StreamExt as _};
use tracing::{debug, warn};

use super::usage::UsageMeter;
use super::{Grant, Shared, refuse};

/// How long a call waits while only other calls' budget holds stand in its
/// way, before it is refused.
const HOLD_WAIT: Duration = Duration::from_secs(60);

/// Holds the seat's budget for one call: refused (429) when a budget is
/// spent; waits while only other calls' holds stand in the way. A call's
/// cost is known only once it is answered, so the hold is one token and
/// the settlement charges what the answer reports.
pub(super) async fn reserve(s: &Shared, grant: &Grant) -> Result<ReservationId, Box<Response>> {
    let deadline = tokio::time::Instant::now() + HOLD_WAIT;
    let mut pause = Duration::from_millis(50);
    let charge = grant
        .payer
        .limits
        .charge(grant.payer.agent_id, &grant.seat, 1);
    loop {
        let refusal = match s.ledger.reserve(&charge).await {
            Ok(ReserveOutcome::Reserved(id)) => return Ok(id),
            Ok(ReserveOutcome::Refused(r)) => r,
            Err(e) => {
                warn!(agent = %grant.seat, error = %e, "model proxy: cannot read the seat's budget");
                return Err(Box::new(refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "api_error",
                    "budget_unavailable",
                    "the seat's budget cannot be read right now; try again shortly",
                )));
            }
        };
        if refusal.is_spent(1) || tokio::time::Instant::now() >= deadline {
            if grant.first_refusal() {
                exhausted(s, grant, &refusal).await;
            }
            return Err(Box::new(spent(grant, &refusal)));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// `budget_exhausted`, as a turn publishes it, for the run's first refused
/// call.
async fn exhausted(s: &Shared, grant: &Grant, r: &BudgetRefusal) {
    let payload = crewlet_core::payload::BudgetExhausted {
        budget_type: r.budget_type.as_str().to_owned(),
        used_tokens: r.used_tokens,
        max_tokens: r.max_tokens,
    };
    let mut event = payload
        .to_event("engine")
        .with_summary(format!(
            "{} token budget exhausted ({} of {}): the coding agent's model calls are refused",
            r.budget_type.as_str(),
            r.used_tokens,
            r.max_tokens
        ))
        .with_agent_handle(&grant.seat);
    event.task_id = Some(grant.task_id.clone());
    crate::sink::publish_event(s.queue.as_ref(), event).await;
}

fn spent(grant: &Grant, r: &BudgetRefusal) -> Response {
    let budget = match r.budget_type {
        crewlet_store::BudgetType::Org => "the company's".to_owned(),
        crewlet_store::BudgetType::Agent => format!("seat `{}`'s", grant.seat),
        crewlet_store::BudgetType::Unit => {
            format!("unit `{}`'s", r.unit.as_deref().unwrap_or_default())
        }
    };
    warn!(agent = %grant.seat, run = %grant.run, budget = r.budget_type.as_str(), used = r.used_tokens, max = r.max_tokens,
          "model proxy: the seat's budget is spent; the coding agent's call was refused");
    refuse(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limit_error",
        "budget_exhausted",
        &format!(
            "{budget} token budget is spent ({} of {} tokens this period): the call was not sent to the model. Stop, write what you did to your findings, and end.",
            r.used_tokens, r.max_tokens
        ),
    )
}

/// A charged call's answer on its way back, read for its usage; the hold
/// is settled when it ends, fails, or the box hangs up.
pub(super) struct Metered {
    inner: BoxStream<'static, reqwest::Result<Bytes>>,
    meter: UsageMeter,
    settle: Option<Settle>,
}

struct Settle {
    shared: Arc<Shared>,
    grant: Arc<Grant>,
    hold: ReservationId,
    answered: bool,
}

impl Settle {
    async fn run(self, tokens: u64) {
        let Self {
            shared,
            grant,
            hold,
            answered,
        } = self;
        let warnings = match shared.ledger.settle(hold, tokens).await {
            Ok(w) => w,
            Err(e) => {
                warn!(agent = %grant.seat, run = %grant.run, tokens, error = %e, "model proxy: cannot charge the call to the seat's budgets");
                Vec::new()
            }
        };
        if tokens > 0
            && let Err(e) = shared.ledger.record_usage(&grant.seat, tokens).await
        {
            warn!(agent = %grant.seat, run = %grant.run, error = %e, "model proxy: cannot record the call's tokens");
        }
        if answered {
            grant.add(tokens);
        }
        debug!(agent = %grant.seat, run = %grant.run, tokens, "model proxy: call charged");
        crate::sandbox::budget::publish_warnings(
            shared.queue.as_ref(),
            &grant.seat,
            &grant.task_id,
            grant.payer.limits.warn_at,
            warnings,
        )
        .await;
    }
}

impl Metered {
    pub(super) fn new(
        inner: BoxStream<'static, reqwest::Result<Bytes>>,
        content_type: &str,
        shared: Arc<Shared>,
        grant: Arc<Grant>,
        hold: ReservationId,
        answered: bool,
    ) -> Self {
        Self {
            inner,
            meter: UsageMeter::new(content_type),
            settle: Some(Settle {
                shared,
                grant,
                hold,
                answered,
            }),
        }
    }

    fn end(&mut self) {
        let Some(settle) = self.settle.take() else {
            return;
        };
        let tokens = self.meter.finish();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(settle.run(tokens));
            }
            // No runtime (the engine is gone): the ledger's stale sweep
            // releases the hold.
            Err(_) => {
                warn!(agent = %settle.grant.seat, tokens, "model proxy: a call ended after the engine stopped; not charged");
            }
        }
    }
}

impl Stream for Metered {
    type Item = reqwest::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        match this.inner.poll_next_unpin(cx) {
            Poll::Ready(Some(Ok(bytes))) => {
                this.meter.feed(&bytes);
                Poll::Ready(Some(Ok(bytes)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.end();
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                this.end();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        self.end();
    }
}
