//! The HTTP providers against a real model server: llama.cpp's
//! `llama-server` serving SmolLM2-135M-Instruct (`cargo xtask services up
//! --only llm`), through its chat completions (`openai-compatible`) and its
//! Anthropic Messages endpoint (`anthropic`).
//!
//! What the providers report is checked against what the server itself
//! says: a recording proxy between provider and server keeps the raw
//! answers (their usage, llama.cpp's `timings`, the key each request
//! carried), `/tokenize` counts the prompt, `/slots` shows whether a request
//! still runs. The tests share one server whose slots and counters they
//! read, so they run one at a time ([`serial`]). Under `CI=true` a missing
//! server fails them; elsewhere they skip.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crewlet_llm::{
    AnthropicProvider, Completion, CompletionRequest, CompletionStream, ErrorClass, LlmError,
    LlmProvider, Message, OpenAiProvider, ProviderConfig, ProviderKind, StreamEvent, SystemBlock,
    ToolCall, ToolChoice, ToolSpec, Usage, http_client,
};
use crewlet_test_support::services::LlmServer;
use futures::StreamExt;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The name the server gives its model (`--alias`).
const MODEL: &str = "smollm2-135m-instruct";
/// Per call: generous, as CI machines are loaded and the burst queues on
/// two slots.
const CALL_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a condition on the server (an idle slot, a recorded exchange)
/// may take to come true.
const DEADLINE: Duration = Duration::from_secs(120);

/// One test at a time: they read server-wide state (`/slots`, counters).
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

fn config(kind: ProviderKind, base_url: String, keys: &[String]) -> ProviderConfig {
    ProviderConfig::new("llama", kind, MODEL)
        .with_base_url(base_url)
        .with_keys(keys.iter().cloned())
        .with_timeout(CALL_TIMEOUT)
        .with_retries(0, Duration::from_millis(10))
        .with_temperature(0.0)
}

/// The `openai-compatible` provider straight at the server.
fn openai(server: &LlmServer) -> Result<OpenAiProvider, LlmError> {
    let cfg = config(
        ProviderKind::OpenAiCompatible,
        server.openai_base_url(),
        &server.api_keys,
    );
    OpenAiProvider::new(&cfg, http_client()?)
}

/// The `anthropic` provider straight at the server.
fn anthropic(server: &LlmServer) -> Result<AnthropicProvider, LlmError> {
    let cfg = config(
        ProviderKind::Anthropic,
        server.base_url.clone(),
        &server.api_keys,
    );
    AnthropicProvider::new(&cfg, http_client()?)
}

/// A client that opens one connection per request, so the recorder sees
/// each request on its own connection.
fn unpooled_client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
}

fn ask(text: &str, max_tokens: u32) -> CompletionRequest {
    CompletionRequest {
        system: vec![SystemBlock::stable(
            "You are a helpful assistant. Answer briefly.",
        )],
        messages: vec![Message::user(text)],
        max_tokens: Some(max_tokens),
        ..CompletionRequest::default()
    }
}

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "Get the current weather in a city".into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "the city's name", "maxLength": 40}
            },
            "required": ["city"]
        }),
    }
}

fn note_tool() -> ToolSpec {
    ToolSpec {
        name: "write_note".into(),
        description: "Write a note for later".into(),
        parameters: json!({
            "type": "object",
            // bounded, so the grammar closes the string before max_tokens
            "properties": {"text": {"type": "string", "maxLength": 60}},
            "required": ["text"]
        }),
    }
}

/// Offers both tools after two earlier rounds in which the model called
/// `get_weather`. A 135M model asked cold answers in text, and llama.cpp's
/// "required" grammar allows text before the call, so it may write text
/// until `max_tokens`; with the rounds in its history its first token is a
/// call (p = 0.96 measured). The history also sends assistant tool calls
/// and tool results through each provider's wire format.
fn weather_request(choice: ToolChoice) -> CompletionRequest {
    let mut messages = Vec::new();
    for (i, (city, weather)) in [("Rome", "cloudy"), ("Oslo", "snow")]
        .into_iter()
        .enumerate()
    {
        let call = ToolCall {
            id: format!("call_{i}"),
            name: "get_weather".into(),
            arguments: json!({"city": city}).to_string(),
        };
        messages.push(Message::user(format!("What is the weather in {city}?")));
        messages.push(Message::assistant("", vec![call.clone()]));
        messages.push(Message::Tool {
            call_id: call.id,
            name: call.name,
            content: weather.into(),
            is_error: false,
        });
    }
    messages.push(Message::user(WEATHER_ASK));
    CompletionRequest {
        messages,
        tools: vec![note_tool(), weather_tool()],
        tool_choice: choice,
        ..ask(WEATHER_ASK, 96)
    }
}

const WEATHER_ASK: &str = "What is the weather in Paris?";

/// The streamed text and the final completion of a stream.
async fn drain(mut stream: CompletionStream) -> Result<(String, Completion), LlmError> {
    let mut text = String::new();
    let mut done = None;
    while let Some(event) = stream.next().await {
        match event? {
            StreamEvent::TextDelta(t) => text.push_str(&t),
            StreamEvent::Completed(c) => done = Some(c),
            _ => {}
        }
    }
    let completion = done.ok_or_else(|| LlmError::Decode {
        provider: "test".into(),
        message: "the stream ended without a completion".into(),
    })?;
    Ok((text, completion))
}

/// llama-server's own endpoints (`/tokenize`, `/slots`, ...).
struct Admin {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Admin {
    fn new(server: &LlmServer) -> Result<Self, reqwest::Error> {
        Ok(Self {
            http: reqwest::Client::builder().no_proxy().build()?,
            base: server.base_url.clone(),
            key: server.api_keys[0].clone(),
        })
    }

    async fn get(&self, path: &str) -> Result<reqwest::Response, reqwest::Error> {
        self.http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .send()
            .await?
            .error_for_status()
    }

    async fn post(&self, path: &str, body: &Value) -> Result<Value, reqwest::Error> {
        self.http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .json(body)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await
    }

    /// How many tokens the server's chat template and tokenizer make of
    /// `messages` (OpenAI wire format), as a completion would count them.
    async fn prompt_tokens(
        &self,
        messages: Value,
    ) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
        let templated = self
            .post("/apply-template", &json!({"messages": messages}))
            .await?;
        let prompt = templated["prompt"]
            .as_str()
            .ok_or("no prompt from /apply-template")?;
        let tokens = self
            .post(
                "/tokenize",
                &json!({"content": prompt, "add_special": true, "parse_special": true}),
            )
            .await?;
        let n = tokens["tokens"].as_array().ok_or("no tokens")?.len();
        Ok(u64::try_from(n)?)
    }

    async fn slots(&self) -> Result<Vec<Value>, reqwest::Error> {
        self.get("/slots").await?.json().await
    }

    /// A gauge or counter of `/metrics` (`llamacpp:` prefix omitted).
    async fn metric(&self, name: &str) -> Result<f64, Box<dyn std::error::Error + Send + Sync>> {
        let text = self.get("/metrics").await?.text().await?;
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("llamacpp:{name} ")))
            .ok_or_else(|| format!("/metrics has no llamacpp:{name}"))?;
        let value = line.rsplit(' ').next().unwrap_or_default();
        Ok(value.parse()?)
    }

    /// Waits (up to [`DEADLINE`]) until no slot processes a request.
    async fn wait_idle(&self) -> Result<Vec<Value>, Box<dyn std::error::Error + Send + Sync>> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let slots = self.slots().await?;
            let busy = slots.iter().any(|s| s["is_processing"] == true);
            if !busy && self.metric("requests_processing").await? == 0.0 {
                return Ok(slots);
            }
            if Instant::now() > deadline {
                return Err(format!("slots still busy after {DEADLINE:?}: {slots:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One request and its answer as they crossed the wire.
#[derive(Debug, Clone)]
struct Exchange {
    request: Vec<u8>,
    response: Vec<u8>,
}

impl Exchange {
    fn request_header(&self, name: &str) -> Option<String> {
        header(&self.request, name)
    }

    fn status(&self) -> Option<u16> {
        let head = String::from_utf8_lossy(&self.response);
        head.split_whitespace().nth(1)?.parse().ok()
    }

    /// The response body, de-chunked.
    fn body(&self) -> Vec<u8> {
        let Some(split) = self.response.windows(4).position(|w| w == b"\r\n\r\n") else {
            return Vec::new();
        };
        let body = &self.response[split + 4..];
        let chunked = header(&self.response, "transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        if chunked {
            dechunk(body)
        } else {
            body.to_vec()
        }
    }

    /// The JSON `data:` payloads of a server-sent-event body, with their
    /// `event:` names.
    fn sse(&self) -> Vec<(Option<String>, Value)> {
        let body = String::from_utf8_lossy(&self.body()).into_owned();
        let mut out = Vec::new();
        let mut event = None;
        for line in body.lines() {
            if let Some(name) = line.strip_prefix("event:") {
                event = Some(name.trim().to_owned());
            } else if let Some(data) = line.strip_prefix("data:")
                && let Ok(v) = serde_json::from_str::<Value>(data.trim())
            {
                out.push((event.take(), v));
            }
        }
        out
    }
}

fn header(raw: &[u8], name: &str) -> Option<String> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    String::from_utf8_lossy(&raw[..end])
        .split("\r\n")
        .skip(1)
        .find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&data[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok());
        let Some(size) = size.filter(|&s| s > 0) else {
            break;
        };
        data = &data[eol + 2..];
        let take = size.min(data.len());
        out.extend_from_slice(&data[..take]);
        data = data.get(take + 2..).unwrap_or_default();
    }
    out
}

/// A TCP proxy in front of the server that keeps both directions of every
/// connection. With an [`unpooled_client`], one connection is one request.
struct Recorder {
    addr: SocketAddr,
    exchanges: Arc<Mutex<Vec<Exchange>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Recorder {
    async fn start(server: &LlmServer) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let upstream = server
            .base_url
            .strip_prefix("http://")
            .ok_or("the test server is not plain http")?
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let exchanges = Arc::new(Mutex::new(Vec::new()));
        let log = exchanges.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let log = log.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let (request, response) = tokio::join!(tee(cr, sw), tee(sr, cw));
                    log.lock().push(Exchange { request, response });
                });
            }
        });
        Ok(Self {
            addr,
            exchanges,
            accept,
        })
    }

    fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The first `n` exchanges, once that many connections have closed.
    async fn wait_for(&self, n: usize) -> Result<Vec<Exchange>, String> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let seen = self.exchanges.lock().clone();
            if seen.len() >= n {
                return Ok(seen);
            }
            if Instant::now() > deadline {
                return Err(format!("{} of {n} exchanges recorded", seen.len()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies `from` to `to` until either side closes; returns what passed.
async fn tee(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                seen.extend_from_slice(&buf[..n]);
                if to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown().await;
    seen
}

fn require() -> Option<LlmServer> {
    let server = crewlet_test_support::services::require_llm_server()?;
    assert!(
        server.api_keys.len() >= 2,
        "the key pool tests need two keys; CREWLET_TEST_LLM_API_KEYS has {}",
        server.api_keys.len()
    );
    Some(server)
}

// ---- openai-compatible ----------------------------------------------------

#[tokio::test]
async fn openai_compatible_answers_and_counts_the_prompt_like_the_server() -> TestResult {
    let Some(server) = require() else {
        return Ok(());
    };
    let _one = serial().await;
    let provider = openai(&server)?;
    let request = ask("Name the capital of France.", 24);
    let c = provider.complete(&request).await?;
    assert!(!c.content.trim().is_empty(), "{c:?}");
    assert!(c.tool_calls.is_empty(), "{c:?}");
    assert!(
        c.usage.output_tokens > 0 && c.usage.output_tokens <= 24,
        "{c:?}"
    );
    // the prompt as the server's template and tokenizer count it
    let admin = Admin::new(&server)?;
    let counted = admin
        .prompt_tokens(provider.body(&request, false)["messages"].clone())
        .await?;
    assert_eq!(c.usage.input_tokens, counted, "{c:?}");
    Ok(())
}

#[tokio::test]
async fn openai_compatible_streams_and_reports_the_servers_usage() -> TestResult {
    let Some(server) = require() else {
        return Ok(());
    };
    let _one = serial().await;
    let recorder = Recorder::start(&server).await?;
    let cfg = config(
        ProviderKind::OpenAiCompatible,
        format!("{}/v1", recorder.base_url()),
        &server.api_keys,
    );
    let provider = OpenAiProvider::new(&cfg, unpooled_client()?)?;
    let request = ask("Write one sentence about the sea.", 40);
    let (streamed, c) = drain(provider.stream(&request).await?).await?;
    assert!(!c.content.trim().is_empty(), "{c:?}");
    assert_eq!(streamed, c.content, "the deltas add up to the answer");

    let exchange = recorder.wait_for(1).await?.remove(0);
    assert_eq!(exchange.status(), Some(200));
    let chunks = exchange.sse();
    let raw_text: String = chunks
        .iter()
        .filter_map(|(_, v)| {
            v.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect();
    assert_eq!(raw_text, c.content);
    let last_usage = chunks
        .iter()
        .rev()
        .find_map(|(_, v)| v.get("usage").filter(|u| !u.is_null()))
        .ok_or("the stream carried no usage (stream_options.include_usage)")?;
    let n = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_u64).unwrap_or(u64::MAX);
    assert_eq!(
        c.usage,
        Usage {
            input_tokens: n(last_usage, "/prompt_tokens"),
            output_tokens: n(last_usage, "/completion_tokens"),
            cache_read_tokens: n(last_usage, "/prompt_tokens_details/cached_tokens"),
        }
    );
    // llama.cpp's own timings of the same answer agree
    let timings = chunks
        .iter()
        .rev()
        .find_map(|(_, v)| v.get("timings"))
        .ok_or("the stream carried no timings")?;
    assert_eq!(c.usage.output_tokens, n(timings, "/predicted_n"));
    assert_eq!(
        c.usage.input_tokens,
        n(timings, "/prompt_n") + n(timings, "/cache_n")
    );
    assert!(c.usage.input_tokens > 0 && c.usage.output_tokens > 0);
    let counted = Admin::new(&server)?
        .prompt_tokens(provider.body(&request, true)["messages"].clone())
        .await?;
    assert_eq!(c.usage.input_tokens, counted);
    Ok(())
}

/// The first tool call of `c` names `tool` and carries a JSON object.
fn assert_call(c: &Completion, tool: &str) {
    let call = c
        .tool_calls
        .first()
        .unwrap_or_else(|| panic!("no tool call in {c:?}"));
    assert_eq!(call.name, tool, "{c:?}");
    let args = call
        .parsed_arguments()
        .unwrap_or_else(|e| panic!("arguments {:?} are not JSON: {e}", call.arguments));
    assert!(args.is_object(), "{args}");
    assert!(!call.id.is_empty());
}

#[tokio::test]
async fn openai_compatible_calls_a_named_tool_whole_and_streamed() -> TestResult {
    let Some(server) = require() else {
        return Ok(());
    };
    let _one = serial().await;
    let provider = openai(&server)?;
    // the history leads to get_weather: naming the other tool shows the
    // choice is honoured (llama.cpp reads OpenAI's object form as "auto")
    let request = weather_request(ToolChoice::Tool("write_note".into()));
    let whole = provider.complete(&request).await?;
    assert_call(&whole, "write_note");
    let (_, streamed) = drain(provider.stream(&request).await?).await?;
    assert_call(&streamed, "write_note");
    assert!(streamed.usage.input_tokens > 0 && streamed.usage.output_tokens > 0);
    Ok(())
}

#[tokio::test]
async fn openai_compatible_required_tool_choice_yields_a_call() -> TestResult {
    let Some(server) = require() else {
        return Ok(());
    };
    let _one = serial().await;
    let provider = openai(&server)?;
    let request = weather_request(ToolChoice::Required);
    let c = provider.complete(&request).await?;
    let call = c
        .tool_calls
        .first()
        .ok_or_else(|| format!("no tool call in {c:?}"))?;
    assert!(
        ["get_weather", "write_note"].contains(&call.name.as_str()),
        "{c:?}"
    );
    assert!(call.parsed_arguments()?.is_object(), "{c:?}");
    // the answer to the call goes back and the model answers in text
    let call = c.tool_calls[0].clone();
    let mut messages = request.messages.clone();
    messages.push(Message::assistant("", vec![call.clone()]));
    messages.push(Message::Tool {
        call_id: call.id,
        name: call.name,
        content: "sunny, 21 degrees".into(),
        is_error: false,
    });
    let follow_up = CompletionRequest {
        messages,
        tool_choice: ToolChoice::None,
        ..request
    };
    let answer = provider.complete(&follow_up).await?;
    assert!(answer.tool_calls.is_empty(), "{answer:?}");
    assert!(!answer.content.trim().is_empty(), "{answer:?}");
    Ok(())
}

/// A prompt of more tokens than the server's context holds.
async fn overflowing_request(
    admin: &Admin,
) -> Result<CompletionRequest, Box<dyn std::error::Error + Send + Sync>> {
    let n_ctx = admin
        .slots()
        .await?
        .iter()
        .filter_map(|s| s["n_ctx"].as_u64())
        .max()
        .ok_or("/slots names no n_ctx")?;
    let text = "the quick brown fox jumps over the lazy dog ".repeat(usize::try_from(n_ctx)? / 4);
    let tokens = admin.post("/tokenize", &json!({"content": text})).await?["tokens"]
        .as_array()
        .map_or(0, Vec::len);
    assert!(tokens as u64 > n_ctx, "{tokens} tokens fit {n_ctx}");
    Ok(ask(&text, 16))
}

fn assert_overflow(result: Result<Completion, LlmError>) {
    match result {
        Err(e @ LlmError::ContextOverflow { .. }) => {
            assert_eq!(e.class(), ErrorClass::Fatal);
            assert!(!e.is_transient());
            assert!(e.to_string().contains("context"), "{e}");
        }
        other => panic!("expected a context overflow, got {other:?}"),
    }
}

#[tokio::test]
async fn a_prompt_longer_than_the_context_is_a_context_overflow() -> TestResult {
    let Some(server) = require() else {
        return Ok(());
    };
    let _one = serial().await;
    let admin = Admin::new(&server)?;
    let request = overflowing_request(&admin).await?;
    let openai = openai(&server)?;
    assert_overflow(openai.complete(&request).await);
    assert_overflow(match openai.stream(&request).await {
        Ok(stream) => drain(stream).await.map(|(_, c)| c),
        Err(e) => Err(e),
    });
    let anthropic = anthropic(&server)?;
    assert_overflow(anthropic.complete(&request).await);
    assert_overflow(match anthropic.stream(&request).await {
        Ok(stream) => drain(stream).await.map(|(_, c)| c),
        Err(e) => Err(e),
    });
    Ok(())
}

#[tokio::test]
async fn a_client_that_drops_mid_stream_leaves_no_request_running() -> TestResult {
    let Some(server) = require() else {
        return Ok(());
    };
    let _one = serial().await;
    let admin = Admin::new(&server)?;
    admin.wait_idle().await?;
    let provider = openai(&server)?;
    let max_tokens = 2000;
    let request = ask(
        "Count from 1 to 1000, writing every number as a word on its own line.",
        max_tokens,
    );
    let mut stream = provider.stream(&request).await?;
    let mut deltas = 0;
    while deltas < 5 {
        match stream.next().await {
            Some(Ok(StreamEvent::TextDelta(_))) => deltas += 1,
            Some(Ok(StreamEvent::Completed(c))) => {
                return Err(format!("the answer ended after {deltas} deltas: {c:?}").into());
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.into()),
            None => return Err("the stream ended early".into()),
        }
    }
    // the request is running on the server now
    let busy: Vec<Value> = admin
        .slots()
        .await?
        .into_iter()
        .filter(|s| s["is_processing"] == true)
        .collect();
    assert_eq!(busy.len(), 1, "one slot serves the stream: {busy:?}");
    let (slot, task) = (busy[0]["id"].clone(), busy[0]["id_task"].clone());

    drop(stream);
    let slots = admin.wait_idle().await?;
    let ours = slots
        .iter()
        .find(|s| s["id"] == slot)
        .ok_or("the slot is gone")?;
    assert_eq!(ours["id_task"], task, "no other task ran on the slot");
    // cut, not finished: it would have gone on, and it stopped well short
    let next = &ours["next_token"][0];
    assert_eq!(next["has_next_token"], true, "{ours}");
    let decoded = next["n_decoded"].as_u64().ok_or("no n_decoded")?;
    assert!(decoded < u64::from(max_tokens), "{ours}");
    Ok(())
}

#[tokio::test]
async fn a_burst_of_twenty_calls_spreads_over_both_keys() -> TestResult {
    let Some(server) = require() else {
        return Ok(());
    };
    let _one = serial().await;
    let recorder = Recorder::start(&server).await?;
    let keys = &server.api_keys[..2];
    let cfg = config(
        ProviderKind::OpenAiCompatible,
        format!("{}/v1", recorder.base_url()),
        keys,
    );
    let provider = Arc::new(OpenAiProvider::new(&cfg, unpooled_client()?)?);
    let calls = (0..20).map(|i| {
        let provider = provider.clone();
        async move {
            provider
                .complete(&ask(&format!("Say the number {i}."), 4))
                .await
        }
    });
    let results = futures::future::join_all(calls).await;
    for (i, r) in results.iter().enumerate() {
        let c = r.as_ref().map_err(|e| format!("call {i}: {e}"))?;
        assert!(c.usage.output_tokens > 0, "call {i}: {c:?}");
    }

    let exchanges = recorder.wait_for(20).await?;
    assert_eq!(exchanges.len(), 20, "one connection per call, no retries");
    let mut per_key: BTreeMap<String, usize> = BTreeMap::new();
    for e in &exchanges {
        assert_eq!(e.status(), Some(200), "{e:?}");
        let auth = e
            .request_header("authorization")
            .ok_or("a request without a key")?;
        let key = auth.strip_prefix("Bearer ").ok_or("not a bearer key")?;
        *per_key.entry(key.to_owned()).or_default() += 1;
    }
    assert_eq!(
        per_key.keys().cloned().collect::<Vec<_>>(),
        {
            let mut k = keys.to_vec();
            k.sort();
            k
        },
        "both keys carried calls: {:?}",
        per_key.values().collect::<Vec<_>>()
    );
    Ok(())
}

#[tokio::test]
async fn a_key_the_server_refuses_is_passed_over_for_the_next() -> TestResult {
    let Some(server) = require() else {
        return Ok(());
    };
    let _one = serial().await;
    let keys = vec![
        "not-a-key-of-this-server".to_owned(),
        server.api_keys[1].clone(),
    ];
    let cfg = config(
        ProviderKind::OpenAiCompatible,
        server.openai_base_url(),
        &keys,
    );
    let provider = OpenAiProvider::new(&cfg, http_client()?)?;
    let c = provider.complete(&ask("Say yes.", 4)).await?;
    assert!(c.usage.output_tokens > 0, "{c:?}");
    // with only the refused key, that key cools and the entry has none left
    let cfg = config(
        ProviderKind::OpenAiCompatible,
        server.openai_base_url(),
        &keys[..1],
    );
    let refused = OpenAiProvider::new(&cfg, http_client()?)?
        .complete(&ask("Say yes.", 4))
        .await;
    match refused {
        Err(LlmError::CredentialsExhausted { retry_in, .. }) => {
            assert!(
                retry_in.is_some_and(|d| d > Duration::from_secs(60)),
                "{retry_in:?}"
            );
        }
        other => panic!("expected the refused key to be cooled, got {other:?}"),
    }
    Ok(())
}

// ---- anthropic --------------------------------------------------------------

#[tokio::test]
async fn anthropic_answers_whole_with_usage() -> TestResult {
    let Some(server) = require() else {
        return Ok(());
    };
    let _one = serial().await;
    let provider = anthropic(&server)?;
    let c = provider
        .complete(&ask("Name the capital of Italy.", 24))
        .await?;
    assert!(!c.content.trim().is_empty(), "{c:?}");
    assert!(c.usage.input_tokens > 0, "{c:?}");
    assert!(
        c.usage.output_tokens > 0 && c.usage.output_tokens <= 24,
        "{c:?}"
    );
    Ok(())
}

#[tokio::test]
async fn anthropic_streams_and_reports_the_servers_usage() -> TestResult {
    let Some(server) = require() else {
        return Ok(());
    };
    let _one = serial().await;
    let recorder = Recorder::start(&server).await?;
    let cfg = config(
        ProviderKind::Anthropic,
        recorder.base_url(),
        &server.api_keys,
    );
    let provider = AnthropicProvider::new(&cfg, unpooled_client()?)?;
    let (streamed, c) = drain(
        provider
            .stream(&ask("Write one sentence about hills.", 40))
            .await?,
    )
    .await?;
    assert!(!c.content.trim().is_empty(), "{c:?}");
    assert_eq!(streamed, c.content);

    let exchange = recorder.wait_for(1).await?.remove(0);
    assert_eq!(exchange.status(), Some(200));
    assert!(exchange.request_header("x-api-key").is_some());
    let events = exchange.sse();
    let kind = |(name, v): &(Option<String>, Value)| {
        name.clone()
            .or_else(|| v["type"].as_str().map(str::to_owned))
            .unwrap_or_default()
    };
    let start = events
        .iter()
        .find(|e| kind(e) == "message_start")
        .ok_or("no message_start")?;
    let delta = events
        .iter()
        .rev()
        .find(|e| kind(e) == "message_delta")
        .ok_or("no message_delta")?;
    let n = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    let read = n(&start.1, "/message/usage/cache_read_input_tokens");
    assert_eq!(
        c.usage,
        Usage {
            input_tokens: n(&start.1, "/message/usage/input_tokens") + read,
            output_tokens: n(&delta.1, "/usage/output_tokens"),
            cache_read_tokens: read,
        }
    );
    assert!(
        c.usage.input_tokens > 0 && c.usage.output_tokens > 0,
        "{c:?}"
    );
    Ok(())
}

#[tokio::test]
async fn anthropic_calls_a_tool_whole_and_streamed() -> TestResult {
    let Some(server) = require() else {
        return Ok(());
    };
    let _one = serial().await;
    let provider = anthropic(&server)?;
    // llama.cpp reads a named tool choice on this endpoint as "any"
    let request = weather_request(ToolChoice::Tool("get_weather".into()));
    let whole = provider.complete(&request).await?;
    assert_call(&whole, "get_weather");
    let (_, streamed) = drain(provider.stream(&request).await?).await?;
    assert_call(&streamed, "get_weather");
    assert!(streamed.usage.output_tokens > 0, "{streamed:?}");
    Ok(())
}
