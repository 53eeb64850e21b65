//! The `local` provider's queue and cancellation against the real model:
//! a dropped stream stops generating and frees its place, and with
//! `max_concurrent: 1` calls take turns. Both read the model's count of
//! generated tokens, so they run one at a time on a model of their own.

mod common;

use std::sync::{Arc, OnceLock};

use common::{load, provider, require_local_model};
use crewlet_llm::{CompletionRequest, LlmProvider, Message, StreamEvent, SystemBlock};
use crewlet_llm_local::LocalModel;
use futures::StreamExt;

/// This binary's model, and the lock that keeps its tests apart (each
/// reads the model's token count).
fn model() -> Option<Arc<LocalModel>> {
    static MODEL: OnceLock<Arc<LocalModel>> = OnceLock::new();
    let path = require_local_model()?;
    Some(MODEL.get_or_init(|| load(&path, None, 4)).clone())
}

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn request(user: &str, max_tokens: u32) -> CompletionRequest {
    CompletionRequest {
        system: vec![SystemBlock::stable("You are a helpful assistant.")],
        messages: vec![Message::user(user)],
        max_tokens: Some(max_tokens),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_stops_generating_and_frees_its_place() {
    let Some(model) = model() else { return };
    let _alone = ONE_AT_A_TIME.lock().await;
    // One place: the second call can start only once the first let go.
    let provider = provider(model.clone(), 1);
    const MAX: u32 = 128;
    let long = request(
        "Write a long story about a dragon who learns to cook. Use at least five paragraphs.",
        MAX,
    );
    let before = model.tokens_generated();
    let mut stream = provider.stream(&long).await.expect("a stream");
    match stream.next().await {
        Some(Ok(StreamEvent::TextDelta(_))) => {}
        other => panic!("expected the first text delta, got {other:?}"),
    }
    drop(stream);

    // The same request again, to its end: it waits for the cancelled one's
    // place, and shows how long the uncancelled answer is.
    let full = provider
        .complete(&long)
        .await
        .expect("the second call completes");
    assert_eq!(
        full.usage.output_tokens,
        u64::from(MAX),
        "the uncancelled answer must run to max_tokens for this test to show anything: {full:?}"
    );
    let cancelled = model.tokens_generated() - before - full.usage.output_tokens;
    assert!(
        cancelled >= 1,
        "the first delta came from a generated token"
    );
    assert!(
        cancelled < u64::from(MAX),
        "the dropped stream's generation ran to the end ({cancelled} tokens)"
    );
    eprintln!("the cancelled generation stopped after {cancelled} of {MAX} tokens");
    assert_eq!(provider.queued(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_place_three_calls_take_turns_and_all_complete() {
    let Some(model) = model() else { return };
    let _alone = ONE_AT_A_TIME.lock().await;
    let provider = Arc::new(provider(model.clone(), 1));
    let base = model.tokens_generated();
    let questions = [
        "What is the capital of France?",
        "Name a primary color.",
        "What is 3 + 4?",
    ];
    let calls: Vec<_> = questions
        .iter()
        .map(|q| {
            let provider = provider.clone();
            let model = model.clone();
            let request = request(q, 24);
            tokio::spawn(async move {
                let mut stream = provider.stream(&request).await.expect("a stream");
                // At least every token generated before this call got its place.
                let generated_before = model.tokens_generated() - base;
                let mut completion = None;
                while let Some(event) = stream.next().await {
                    if let StreamEvent::Completed(c) = event.expect("no error") {
                        completion = Some(c);
                    }
                }
                let completion = completion.expect("a completed answer");
                (generated_before, completion.usage.output_tokens)
            })
        })
        .collect();
    let mut before = Vec::new();
    let mut outputs = Vec::new();
    for call in calls {
        let (generated_before, output) = call.await.expect("the call's task");
        assert!(output > 0);
        before.push(generated_before);
        outputs.push(output);
    }
    // With one place the k-th call to start found every token of the k
    // calls ahead of it generated. The counts are read a little after each
    // start, so the order is not known; still the k-th smallest count is at
    // least the k smallest answers together. Calls side by side would all
    // find (almost) nothing generated.
    before.sort_unstable();
    let mut ascending = outputs.clone();
    ascending.sort_unstable();
    for (k, generated_before) in before.iter().enumerate() {
        let ahead: u64 = ascending[..k].iter().sum();
        assert!(
            *generated_before >= ahead,
            "call {k} started after {generated_before} tokens, before the calls ahead of it ({ahead} tokens at least) were done: {before:?} {outputs:?}"
        );
    }
    assert_eq!(model.tokens_generated() - base, outputs.iter().sum::<u64>());
    assert_eq!(provider.queued(), 0);
}
