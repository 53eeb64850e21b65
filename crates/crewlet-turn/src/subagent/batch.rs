//! Running a batch of sub-agents: the budget split, the parallelism
//! bound, the deadline.

use crewlet_core::{Event, EventType, TraceContext};
use parking_lot::Mutex;
use serde_json::json;
use tokio::time::Instant;

use super::Host;
use super::run::{
    ChildOutcome, ChildReporter, ChildResult, ChildSpec, ChildTask, run_child, share,
};

/// Runs the children of a batch: the call's share split evenly between
/// them (children whose split would be under `min_per_child_tokens` are
/// refused, the last first), at most `max_parallel` at once, all done by
/// the batch deadline. Results in the order of `tasks`; then one
/// `subagent_batched` event.
pub(super) async fn run_batch(
    host: &Host,
    tasks: &[ChildTask],
    tools: &[String],
    rejected: &[String],
    parent_trace: TraceContext,
) -> Vec<ChildResult> {
    let n = tasks.len();
    let settings = &host.settings;
    let min = settings.min_per_child_tokens.max(1);
    let total = share(host).await;
    let (admitted, per_child) = match total {
        None => (n, None),
        Some(total) => {
            let fit = usize::try_from(total / min).unwrap_or(usize::MAX);
            let k = n.min(fit);
            (k, (k > 0).then(|| total / k as u64))
        }
    };
    let batch_deadline = deadline_after(settings.batch_timeout);
    let permits = tokio::sync::Semaphore::new(
        settings
            .max_parallel
            .clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
    );
    let slots: Mutex<Vec<Option<ChildResult>>> = Mutex::new(vec![None; n]);
    let runs = tasks.iter().enumerate().take(admitted).map(|(i, task)| {
        let (permits, slots) = (&permits, &slots);
        async move {
            let result = match tokio::time::timeout_at(batch_deadline, permits.acquire()).await {
                // A slot freed at the deadline starts nothing.
                Ok(Ok(_permit)) if Instant::now() < batch_deadline => {
                    let deadline = deadline_after(settings.timeout).min(batch_deadline);
                    run_child(
                        host,
                        ChildSpec {
                            task,
                            tools,
                            rejected,
                            cap: per_child,
                            deadline,
                            parent_trace,
                        },
                    )
                    .await
                }
                Ok(_) | Err(_) => ChildResult::unrun(
                    ChildOutcome::Timeout,
                    "the batch ran past its time limit before this sub-agent started".into(),
                    rejected.to_vec(),
                ),
            };
            slots.lock()[i] = Some(result);
        }
    });
    futures::future::join_all(runs).await;
    let refused_why = match total {
        Some(total) => format!(
            "refused: the batch's share of {total} tokens leaves this sub-agent less than \
             the minimum of {min} tokens"
        ),
        None => "refused".to_owned(),
    };
    let results: Vec<ChildResult> = slots
        .into_inner()
        .into_iter()
        .map(|slot| {
            slot.unwrap_or_else(|| {
                ChildResult::unrun(
                    ChildOutcome::Refused,
                    refused_why.clone(),
                    rejected.to_vec(),
                )
            })
        })
        .collect();

    let successes = results
        .iter()
        .filter(|r| r.outcome == ChildOutcome::Ok)
        .count();
    let total_tokens: u64 = results.iter().map(|r| r.usage.total()).sum();
    let reporter = ChildReporter {
        host,
        span: crewlet_telemetry::current_trace_context().unwrap_or(parent_trace),
        id: None,
    };
    let event = Event::new(
        EventType::Other("subagent_batched".into()),
        host.source.as_str(),
    )
    .with_payload(json!({
        "parent_handle": host.seat.handle,
        "turn_id": host.turn_id,
        "iteration": host.iteration,
        "task_count": n,
        "successes": successes,
        "failures": n - successes,
        "total_tokens": total_tokens,
        "subagent_ids": results.iter().map(|r| r.id).collect::<Vec<_>>(),
    }));
    reporter
        .emit(
            event,
            format!(
                "{} batched {n} sub-agents ({successes} ok, {} failed, {total_tokens} tokens)",
                host.seat.handle,
                n - successes
            ),
            json!({}),
        )
        .await;
    results
}

/// `d` from now; a limit too far off to represent is a year (a configured
/// number never panics the turn).
pub(super) fn deadline_after(d: std::time::Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .or_else(|| now.checked_add(std::time::Duration::from_secs(365 * 24 * 3600)))
        .unwrap_or(now)
}
