//! The `local` provider against the real SmolLM2-135M-Instruct GGUF: plain
//! answers, streaming and usage, tool calls and the turn's decisions under
//! constrained decoding, the prompt cache, and a prompt beyond the context.
//! Greedy decoding throughout, so every answer is reproducible.

mod common;

use std::sync::{Arc, OnceLock};

use common::{check_schema, load, provider, require_local_model, stream_all};
use crewlet_llm::{
    Completion, CompletionRequest, LlmError, LlmProvider, Message, StreamEvent, SystemBlock,
    ToolChoice, ToolSpec,
};
use crewlet_llm_local::grammar::AnswerShape;
use crewlet_llm_local::{LocalModel, prompt};
use crewlet_turn::{Plan, Review, submit_plan_spec, submit_review_spec};
use serde_json::{Value, json};

/// The model most tests share (loading costs about a second).
fn shared() -> Option<Arc<LocalModel>> {
    static SHARED: OnceLock<Arc<LocalModel>> = OnceLock::new();
    let path = require_local_model()?;
    Some(SHARED.get_or_init(|| load(&path, None, 8)).clone())
}

fn request(system: &str, user: &str, max_tokens: u32) -> CompletionRequest {
    CompletionRequest {
        system: vec![SystemBlock::stable(system)],
        messages: vec![Message::user(user)],
        max_tokens: Some(max_tokens),
        ..Default::default()
    }
}

/// A tool whose arguments use a required string, an enum, a bounded
/// integer and an array.
fn file_ticket() -> ToolSpec {
    ToolSpec {
        name: "file_ticket".into(),
        description: "File a ticket in the team's tracker.".into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "title": {"type": "string", "maxLength": 80, "description": "One-line summary."},
                "priority": {"type": "string", "enum": ["low", "medium", "high"]},
                "estimate_hours": {"type": "integer", "minimum": 1, "maximum": 40},
                "labels": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3}
            },
            "required": ["title", "priority", "estimate_hours", "labels"],
            "additionalProperties": false
        }),
    }
}

fn web_search() -> ToolSpec {
    ToolSpec {
        name: "web_search".into(),
        description: "Search the web.".into(),
        parameters: json!({
            "type": "object",
            "properties": {"query": {"type": "string", "maxLength": 100}},
            "required": ["query"]
        }),
    }
}

/// Asserts every call of `completion` names one of `offered` and its
/// arguments are JSON matching that tool's schema; answers the arguments.
fn valid_calls(completion: &Completion, offered: &[ToolSpec]) -> Vec<(String, Value)> {
    completion
        .tool_calls
        .iter()
        .map(|call| {
            let Some(tool) = offered.iter().find(|t| t.name == call.name) else {
                panic!(
                    "call of `{}`, a tool not offered: {completion:?}",
                    call.name
                );
            };
            let args: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|e| {
                panic!(
                    "arguments of `{}` are not JSON ({e}): {}",
                    call.name, call.arguments
                )
            });
            if let Err(e) = check_schema(&tool.parameters, &args) {
                panic!("arguments of `{}` break its schema: {e}: {args}", call.name);
            }
            (call.name.clone(), args)
        })
        .collect()
}

/// Streams `request` with calls required and checks the answer is calls
/// only: no text leaks out, one call delta per call, all valid.
async fn required_calls(
    model: &Arc<LocalModel>,
    request: &CompletionRequest,
    offered: &[ToolSpec],
) -> Vec<(String, Value)> {
    let provider = provider(model.clone(), 1);
    let (events, completion) = stream_all(&provider, request).await.expect("an answer");
    assert!(
        !completion.tool_calls.is_empty(),
        "calls were required, the answer is text: {completion:?}"
    );
    assert!(completion.content.is_empty(), "{completion:?}");
    let texts: Vec<&StreamEvent> = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::TextDelta(_)))
        .collect();
    assert!(
        texts.is_empty(),
        "the call's markup leaked as text: {texts:?}"
    );
    let call_deltas = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::ToolCallDelta { .. }))
        .count();
    assert_eq!(call_deltas, completion.tool_calls.len(), "{events:?}");
    eprintln!("usage {:?}", completion.usage);
    valid_calls(&completion, offered)
}

const TICKET_PROMPTS: &[&str] = &[
    "The login page crashes on Safari. File it as urgent.",
    "Write down that we should update the README someday, it is a small job.",
    "Customers report the invoice PDF has the wrong currency symbol; it blocks billing.",
];

#[tokio::test]
async fn a_plain_question_is_answered_from_the_model() {
    let Some(model) = shared() else { return };
    let provider = provider(model, 2);
    let completion = provider
        .complete(&request(
            "You are a helpful assistant.",
            "What is the capital of France?",
            32,
        ))
        .await
        .expect("an answer");
    assert!(completion.content.contains("Paris"), "{completion:?}");
    assert!(completion.tool_calls.is_empty());
    assert_eq!(completion.provider, "local");
    assert_eq!(completion.model, common::MODEL_NAME);
    assert!(
        (1..=32).contains(&completion.usage.output_tokens),
        "{:?}",
        completion.usage
    );
}

#[tokio::test]
async fn streamed_text_is_the_answer_and_usage_is_the_tokenizers_count() {
    let Some(model) = shared() else { return };
    let provider = provider(model.clone(), 2);
    let request = request(
        "You are a helpful assistant. Answer in one sentence.",
        "Name the three primary colors.",
        48,
    );
    let (events, completion) = stream_all(&provider, &request).await.expect("an answer");
    let deltas: Vec<&str> = events
        .iter()
        .map(|e| match e {
            StreamEvent::TextDelta(t) => t.as_str(),
            other => panic!("a text answer streamed {other:?}"),
        })
        .collect();
    let streamed = deltas.concat();
    assert!(!completion.content.is_empty());
    // The final content is the streamed text without its surrounding blanks.
    assert_eq!(streamed.trim(), completion.content, "{deltas:?}");

    let shape = AnswerShape::of(&request.tools, &request.tool_choice);
    let prompt_tokens = model
        .prompt_tokens(&prompt::chat(&request, &shape))
        .expect("the prompt renders");
    assert_eq!(completion.usage.input_tokens, prompt_tokens.len() as u64);
    let output = completion.usage.output_tokens;
    assert!((1..=48).contains(&output), "{:?}", completion.usage);
    // Each generated token is one delta while the text is ASCII (a
    // character split over tokens waits for its last byte).
    if streamed.is_ascii() {
        assert_eq!(deltas.len() as u64, output, "{deltas:?}");
    }
    // Greedy output of this answer is tokenized the way the tokenizer
    // itself would encode the text.
    let reencoded = model.tokenizer.encode(&streamed).expect("encodes");
    assert_eq!(reencoded.len() as u64, output, "{streamed:?}");
}

#[tokio::test]
async fn required_calls_always_match_the_tool_schema() {
    let Some(model) = shared() else { return };
    let offered = [file_ticket(), web_search()];
    for user in TICKET_PROMPTS {
        let mut r = request(
            "You are the support lead. Track every problem you hear about.",
            user,
            128,
        );
        r.tools = offered.to_vec();
        r.tool_choice = ToolChoice::Required;
        let calls = required_calls(&model, &r, &offered).await;
        eprintln!("{user} -> {calls:?}");
    }
}

#[tokio::test]
async fn a_named_tool_is_the_one_called_with_valid_arguments() {
    let Some(model) = shared() else { return };
    let offered = [file_ticket(), web_search()];
    for user in TICKET_PROMPTS {
        let mut r = request(
            "You are the support lead. Track every problem you hear about.",
            user,
            128,
        );
        r.tools = offered.to_vec();
        r.tool_choice = ToolChoice::Tool("file_ticket".into());
        let calls = required_calls(&model, &r, &offered[..1]).await;
        assert!(
            calls.iter().all(|(name, _)| name == "file_ticket"),
            "{calls:?}"
        );
        eprintln!("{user} -> {calls:?}");
    }
}

#[tokio::test]
async fn a_call_longer_than_max_tokens_is_finished_not_cut() {
    let Some(model) = shared() else { return };
    let offered = [file_ticket()];
    // No call fits in 8 tokens: the one begun runs on to its end.
    let mut r = request(
        "You are the support lead. Track every problem you hear about.",
        TICKET_PROMPTS[2],
        8,
    );
    r.tools = offered.to_vec();
    r.tool_choice = ToolChoice::Required;
    let provider = provider(model, 1);
    let completion = provider.complete(&r).await.expect("an answer");
    assert!(completion.usage.output_tokens > 8, "{:?}", completion.usage);
    let calls = valid_calls(&completion, &offered);
    assert_eq!(calls.len(), 1, "{completion:?}");
}

#[tokio::test]
async fn plans_parse_every_time() {
    let Some(model) = shared() else { return };
    let spec = submit_plan_spec();
    for task in [
        "Task: reply to the customer who asked for our opening hours (9 to 5, Monday to Friday).",
        "Task: research three competitors and summarise their pricing.",
    ] {
        let mut r = request(
            "You are the CEO of a small company. Plan how to do the task, then submit the plan with submit_plan.",
            task,
            160,
        );
        r.tools = vec![spec.clone()];
        r.tool_choice = ToolChoice::Required;
        let calls = required_calls(&model, &r, std::slice::from_ref(&spec)).await;
        for (_, args) in calls {
            let plan = Plan::parse(&args).unwrap_or_else(|e| panic!("{e}: {args}"));
            eprintln!("{task} -> {plan:?}");
        }
    }
}

#[tokio::test]
async fn reviews_parse_every_time() {
    let Some(model) = shared() else { return };
    let spec = submit_review_spec();
    for (task, work) in [
        (
            "Task: reply to the customer who asked for our opening hours.",
            "I replied: we are open 9 to 5, Monday to Friday.",
        ),
        (
            "Task: write a haiku about spring.",
            "I have not written anything yet.",
        ),
    ] {
        let mut r = request(
            "You are the CEO of a small company. Review the work against the task, then submit the review with submit_review.",
            &format!("{task}\n\nWork done: {work}"),
            160,
        );
        r.tools = vec![spec.clone()];
        r.tool_choice = ToolChoice::Required;
        let calls = required_calls(&model, &r, std::slice::from_ref(&spec)).await;
        for (_, args) in calls {
            let review = Review::parse(&args).unwrap_or_else(|e| panic!("{e}: {args}"));
            eprintln!("{task} -> {review:?}");
        }
    }
}

#[tokio::test]
async fn auto_answers_text_or_valid_calls_never_broken_markup() {
    let Some(model) = shared() else { return };
    let provider = provider(model, 2);
    let offered = [file_ticket(), web_search()];
    for user in [
        "What is 2 + 2?",
        "Search the web for the latest Rust release.",
        TICKET_PROMPTS[0],
    ] {
        let mut r = request("You are a helpful assistant with tools.", user, 96);
        r.tools = offered.to_vec();
        r.tool_choice = ToolChoice::Auto;
        let (events, completion) = stream_all(&provider, &r).await.expect("an answer");
        if completion.tool_calls.is_empty() {
            assert!(!completion.content.is_empty(), "{completion:?}");
            assert!(
                !completion.content.contains("<tool_call>"),
                "text that looks like a call: {completion:?}"
            );
            let streamed: String = events
                .iter()
                .filter_map(|e| match e {
                    StreamEvent::TextDelta(t) => Some(t.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(streamed.trim(), completion.content);
        } else {
            assert!(completion.content.is_empty(), "{completion:?}");
            valid_calls(&completion, &offered);
        }
        eprintln!(
            "{user} -> {:?} {:?}",
            completion.content, completion.tool_calls
        );
    }
}

#[tokio::test]
async fn a_prompt_that_extends_the_last_reuses_its_cache_and_answers_as_a_cold_model() {
    let Some(path) = require_local_model() else {
        return;
    };
    // Models of this test's own, so no other test's conversation takes
    // the cached one.
    let warm = provider(load(&path, None, 4), 1);
    let first = request(
        "You are a helpful assistant. Answer briefly.",
        "What is the capital of France?",
        24,
    );
    let answer = warm.complete(&first).await.expect("a first answer");
    assert_eq!(answer.usage.cache_read_tokens, 0, "{:?}", answer.usage);
    let mut second = first.clone();
    second
        .messages
        .push(Message::assistant(answer.content.clone(), Vec::new()));
    second
        .messages
        .push(Message::user("And what is the capital of Italy?"));
    let warm_answer = warm.complete(&second).await.expect("a second answer");
    let usage = warm_answer.usage;
    // Everything up to the first answer's text is served from the cache.
    assert!(
        usage.cache_read_tokens >= answer.usage.input_tokens,
        "{usage:?} after {:?}",
        answer.usage
    );
    assert!(usage.cache_read_tokens < usage.input_tokens, "{usage:?}");

    let cold = provider(load(&path, None, 4), 1);
    let cold_answer = cold.complete(&second).await.expect("a cold answer");
    assert_eq!(cold_answer.usage.cache_read_tokens, 0);
    assert_eq!(cold_answer.usage.input_tokens, usage.input_tokens);
    assert_eq!(warm_answer.content, cold_answer.content);
    assert_eq!(
        warm_answer.usage.output_tokens,
        cold_answer.usage.output_tokens
    );
}

/// Two prompts that share only their beginning (two phases of one seat):
/// the second starts from a copy of that beginning, and the first one's
/// conversation stays whole for its own next round.
#[tokio::test]
async fn a_shared_beginning_is_copied_and_the_first_conversation_kept() {
    let Some(path) = require_local_model() else {
        return;
    };
    let warm = provider(load(&path, None, 4), 1);
    let system = "You are the CEO of Quickstart Co. The company ships a small, useful product \
                  and learns from every customer conversation. Your manager is the founder; \
                  the CTO and the product manager report to you. Answer briefly.";
    let plan = request(system, "Plan the week in one sentence.", 16);
    let review = request(system, "Review the release notes in one sentence.", 16);
    let plan_answer = warm.complete(&plan).await.expect("plan");
    let review_answer = warm.complete(&review).await.expect("review");
    // The review runs only what follows the shared system message.
    let shared = review_answer.usage.cache_read_tokens;
    assert!(shared >= 32, "{:?}", review_answer.usage);
    assert!(shared < review_answer.usage.input_tokens);
    // The plan's conversation was not cut back to that beginning: its next
    // round finds everything up to the plan's answer.
    let mut next = plan.clone();
    next.messages
        .push(Message::assistant(plan_answer.content.clone(), Vec::new()));
    next.messages.push(Message::user("And the week after?"));
    let next_answer = warm.complete(&next).await.expect("next round");
    assert!(
        next_answer.usage.cache_read_tokens >= plan_answer.usage.input_tokens,
        "{:?} after {:?}",
        next_answer.usage,
        plan_answer.usage
    );
    // And the copies changed nothing: a cold model answers the same.
    let cold = provider(load(&path, None, 4), 1);
    assert_eq!(
        cold.complete(&review).await.expect("cold review").content,
        review_answer.content
    );
}

#[tokio::test]
async fn a_prompt_beyond_the_context_is_a_context_overflow() {
    let Some(path) = require_local_model() else {
        return;
    };
    let model = load(&path, Some(512), 1);
    assert_eq!(model.context, 512);
    let provider = provider(model.clone(), 1);
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(80);
    let r = request("You are a helpful assistant.", &long, 16);
    let tokens = model
        .prompt_tokens(&prompt::chat(&r, &AnswerShape::Text))
        .expect("renders");
    assert!(
        tokens.len() > 512,
        "the prompt is only {} tokens",
        tokens.len()
    );
    for outcome in [
        provider.complete(&r).await.map(|_| ()),
        provider.stream(&r).await.map(|_| ()),
    ] {
        match outcome {
            Err(LlmError::ContextOverflow { provider, message }) => {
                assert_eq!(provider, "local");
                assert!(message.contains(&tokens.len().to_string()), "{message}");
                assert!(message.contains("512"), "{message}");
            }
            other => panic!("expected a context overflow, got {other:?}"),
        }
    }
    // A prompt that fits still answers on the same provider.
    let ok = provider
        .complete(&request("You are a helpful assistant.", "Say hello.", 8))
        .await
        .expect("a short prompt fits");
    assert!(!ok.content.is_empty());
}

#[test]
fn the_schema_checker_refuses_what_it_should() {
    let schema = file_ticket().parameters;
    let ok = json!({"title": "t", "priority": "low", "estimate_hours": 3, "labels": ["a"]});
    assert_eq!(check_schema(&schema, &ok), Ok(()));
    for bad in [
        json!({"title": "t", "priority": "urgent", "estimate_hours": 3, "labels": []}),
        json!({"title": "t", "priority": "low", "labels": []}),
        json!({"title": "t", "priority": "low", "estimate_hours": 41, "labels": []}),
        json!({"title": "t", "priority": "low", "estimate_hours": 2.5, "labels": []}),
        json!({"title": "t", "priority": "low", "estimate_hours": 2, "labels": ["a", "b", "c", "d"]}),
        json!({"title": "t", "priority": "low", "estimate_hours": 2, "labels": [1]}),
        json!({"title": "x".repeat(81), "priority": "low", "estimate_hours": 2, "labels": []}),
        json!({"title": "t", "priority": "low", "estimate_hours": 2, "labels": [], "x": 1}),
        json!([1]),
    ] {
        assert!(check_schema(&schema, &bad).is_err(), "{bad} passed");
    }
}

/// The one-token attention (generation, on the cache's own memory) and the
/// matrix-product attention (prompts) are the same function: the logits
/// after a prompt run whole equal those after the same prompt fed a token
/// at a time.
#[test]
fn a_token_at_a_time_gives_the_logits_of_the_whole_prompt() {
    let Some(path) = require_local_model() else {
        return;
    };
    let mut gguf = match crewlet_llm_local::gguf::GgufFile::open(&path) {
        Ok(g) => g,
        Err(e) => panic!("open: {e}"),
    };
    let weights = crewlet_llm_local::model::Weights::load(&mut gguf)
        .unwrap_or_else(|e| panic!("weights: {e}"));
    let n = weights.hyper.n_layer;
    // 40 tokens of a sentence (ids well inside the vocabulary).
    let tokens: Vec<u32> = (0..40u32).map(|i| 300 + i * 97).collect();
    let mut whole = crewlet_llm_local::model::KvCache::new(n);
    let at_once = weights
        .forward(&tokens, &mut whole)
        .unwrap_or_else(|e| panic!("whole: {e}"));
    let mut stepwise = crewlet_llm_local::model::KvCache::new(n);
    let mut last = Vec::new();
    for t in &tokens {
        last = weights
            .forward(&[*t], &mut stepwise)
            .unwrap_or_else(|e| panic!("step: {e}"));
    }
    assert_eq!(at_once.len(), last.len());
    // Not bit for bit: the activations are quantized to 8 bits per row, and
    // one rounding that goes the other way moves later layers a little. A
    // wrong attention moves the logits by whole units and reorders them.
    let worst = at_once
        .iter()
        .zip(&last)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let spread = at_once.iter().copied().fold(f32::NEG_INFINITY, f32::max)
        - at_once.iter().copied().fold(f32::INFINITY, f32::min);
    assert!(
        worst < 0.05 * spread,
        "largest logit difference {worst} of a spread of {spread}"
    );
    let top = |l: &[f32]| {
        let mut ids: Vec<usize> = (0..l.len()).collect();
        ids.sort_by(|a, b| l[*b].total_cmp(&l[*a]));
        ids.truncate(5);
        let first = ids[0];
        ids.sort_unstable();
        (first, ids)
    };
    // The same most likely token, and the same five most likely ones
    // (near-ties among them may swap places).
    assert_eq!(top(&at_once), top(&last));
}
