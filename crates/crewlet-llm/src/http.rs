//! What the HTTP providers share: sending a JSON body with a leased key,
//! classifying failures, rotating keys and retrying, and reading
//! server-sent events.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::{
    Completion, CompletionStream, ErrorClass, KeyLease, KeyPool, LlmError, ProviderConfig,
    StreamEvent,
};

/// Longest error body quoted in an error message.
const ERROR_BODY_QUOTE: usize = 600;
/// Shortest cooldown after a rate limit, so `Retry-After: 0` cannot spin.
const MIN_RATE_LIMIT_COOLDOWN: Duration = Duration::from_secs(1);

/// How a provider sends its key.
#[derive(Clone, Copy, Debug)]
pub(crate) enum AuthStyle {
    /// `Authorization: Bearer <key>`.
    Bearer,
    /// `x-api-key: <key>`.
    XApiKey,
}

/// One provider entry's URL, client, keys and retry policy.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub name: String,
    pub url: String,
    pub client: reqwest::Client,
    pub pool: KeyPool,
    pub auth: AuthStyle,
    pub extra_headers: HeaderMap,
    pub timeout: Duration,
    pub retries: u32,
    pub retry_backoff: Duration,
}

impl Endpoint {
    pub fn new(
        config: &ProviderConfig,
        client: reqwest::Client,
        url: String,
        auth: AuthStyle,
    ) -> Self {
        Self {
            name: config.name.clone(),
            url,
            client,
            pool: KeyPool::new(config.name.clone(), config.api_keys.clone()),
            auth,
            extra_headers: HeaderMap::new(),
            timeout: config.timeout,
            retries: config.retries,
            retry_backoff: config.retry_backoff,
        }
    }

    pub fn with_header(mut self, name: &'static str, value: &'static str) -> Self {
        self.extra_headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
        self
    }

    /// POSTs `body` and returns the successful response and the key lease
    /// (held while a stream is read). Rate-limited and refused keys are
    /// cooled and the next key is tried; 5xx and network failures are retried
    /// `retries` times with doubling backoff. `streaming` bounds only the wait
    /// for the response head, so a long stream is not cut by the timeout.
    pub async fn send(
        &self,
        body: &serde_json::Value,
        streaming: bool,
    ) -> Result<(reqwest::Response, KeyLease), LlmError> {
        let mut transient_failures = 0u32;
        let mut rotations = 0usize;
        loop {
            let lease = self.pool.acquire()?;
            let mut req = self
                .client
                .post(&self.url)
                .headers(self.extra_headers.clone())
                .json(body);
            let key = lease.key().expose();
            if !key.is_empty() {
                req = match self.auth {
                    AuthStyle::Bearer => req.bearer_auth(key),
                    AuthStyle::XApiKey => req.header("x-api-key", key),
                };
            }
            let outcome = if streaming {
                match tokio::time::timeout(self.timeout, req.send()).await {
                    Ok(r) => r.map_err(|e| self.transport_error(&e)),
                    Err(_) => Err(LlmError::Timeout {
                        provider: self.name.clone(),
                        timeout: self.timeout,
                    }),
                }
            } else {
                req.timeout(self.timeout)
                    .send()
                    .await
                    .map_err(|e| self.transport_error(&e))
            };
            let err = match outcome {
                Ok(resp) if resp.status().is_success() => {
                    lease.succeeded();
                    return Ok((resp, lease));
                }
                Ok(resp) => self.http_error(resp, &lease).await,
                Err(e) => e,
            };
            match err.class() {
                ErrorClass::RateLimit => {
                    let retry_after = match &err {
                        LlmError::Http { retry_after, .. } => *retry_after,
                        _ => None,
                    };
                    lease.rate_limited(retry_after.map(|d| d.max(MIN_RATE_LIMIT_COOLDOWN)));
                    rotations += 1;
                }
                ErrorClass::Auth => {
                    lease.auth_failed();
                    rotations += 1;
                }
                ErrorClass::Server | ErrorClass::Timeout
                    if transient_failures < self.retries && crate::retry::take_retry() =>
                {
                    let delay = crate::retry::backoff(self.retry_backoff, transient_failures);
                    transient_failures += 1;
                    tracing::warn!(provider = %self.name, error = %err, retry_in_ms = delay.as_millis() as u64, "llm call failed; retrying");
                    drop(lease);
                    tokio::time::sleep(delay).await;
                    continue;
                }
                _ => return Err(err),
            }
            // Every key has been tried once in this call: stop rotating.
            if rotations > self.pool.len() {
                return Err(err);
            }
        }
    }

    /// Sends and reads the whole JSON answer.
    pub async fn send_json(&self, body: &serde_json::Value) -> Result<serde_json::Value, LlmError> {
        let (resp, _lease) = self.send(body, false).await?;
        let bytes = resp.bytes().await.map_err(|e| self.transport_error(&e))?;
        serde_json::from_slice(&bytes).map_err(|e| self.decode(format!("answer is not json: {e}")))
    }

    pub fn decode(&self, message: impl Into<String>) -> LlmError {
        LlmError::Decode {
            provider: self.name.clone(),
            message: message.into(),
        }
    }

    fn transport_error(&self, e: &reqwest::Error) -> LlmError {
        if e.is_timeout() {
            LlmError::Timeout {
                provider: self.name.clone(),
                timeout: self.timeout,
            }
        } else {
            LlmError::Network {
                provider: self.name.clone(),
                message: error_chain(e),
            }
        }
    }

    async fn http_error(&self, resp: reqwest::Response, lease: &KeyLease) -> LlmError {
        let status = resp.status().as_u16();
        let retry_after = reset_after(resp.headers());
        let body = resp.text().await.unwrap_or_default();
        let mut message = error_message(&body);
        let key = lease.key().expose();
        if !key.is_empty() && message.contains(key) {
            message = message.replace(key, "[redacted]");
        }
        let class = ErrorClass::from_status(status);
        let overflow = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| crate::error::context_overflow_message(&v));
        if class == ErrorClass::Fatal && overflow.is_some() {
            return LlmError::ContextOverflow {
                provider: self.name.clone(),
                message,
            };
        }
        LlmError::Http {
            provider: self.name.clone(),
            status,
            class,
            message,
            retry_after,
        }
    }
}

/// The error and its causes, without the request URL (the provider name
/// already says where the call went).
fn error_chain(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    if let Some(url) = e.url() {
        out = out.replace(&format!(" for url ({url})"), "");
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// When a refused call may go again: `Retry-After`, else the later of
/// OpenAI's `x-ratelimit-reset-requests` and `x-ratelimit-reset-tokens`.
pub(crate) fn reset_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(d) = header("retry-after").and_then(parse_retry_after) {
        return Some(d);
    }
    ["x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"]
        .into_iter()
        .filter_map(|name| header(name).and_then(parse_reset))
        .max()
}

/// A reset duration as OpenAI writes it: `20`, `1.5s`, `250ms`, `6m0s`,
/// `1h2m3.5s`.
pub(crate) fn parse_reset(value: &str) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if let Some(d) = parse_retry_after(value) {
        return Some(d);
    }
    let mut total = 0.0f64;
    let mut rest = value;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&n| n > 0)?;
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[unit_len..];
    }
    (total.is_finite() && total >= 0.0).then(|| Duration::from_secs_f64(total.min(86_400.0)))
}

/// `Retry-After` in seconds (`120`, `1.5`); an HTTP date is not honoured.
pub(crate) fn parse_retry_after(value: &str) -> Option<Duration> {
    let secs: f64 = value.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

/// The provider's own error message when the body is the usual
/// `{"error": {"message": ..}}`, else the start of the body.
fn error_message(body: &str) -> String {
    let from_json = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let e = v.get("error")?;
            e.get("message")
                .and_then(|m| m.as_str())
                .or_else(|| e.as_str())
                .map(str::to_owned)
        });
    let msg = from_json.unwrap_or_else(|| body.trim().to_owned());
    if msg.is_empty() {
        return "no error message".to_owned();
    }
    let mut end = msg.len().min(ERROR_BODY_QUOTE);
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    msg[..end].to_owned()
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SseFrame {
    pub event: Option<String>,
    pub data: String,
}

/// Splits a byte stream into server-sent events.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    buf: BytesMut,
    frame: SseFrame,
    has_data: bool,
}

impl SseDecoder {
    /// Feeds bytes; complete frames are pushed to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<SseFrame>) {
        self.buf.extend_from_slice(bytes);
        while let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
            let line = self.buf.split_to(pos + 1);
            let mut line = &line[..pos];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            self.line(&String::from_utf8_lossy(line), out);
        }
    }

    /// Ends the stream: a last frame without its blank line still counts.
    pub fn finish(&mut self, out: &mut Vec<SseFrame>) {
        if !self.buf.is_empty() {
            let rest = String::from_utf8_lossy(self.buf.chunk()).into_owned();
            self.buf.clear();
            self.line(rest.trim_end_matches('\r'), out);
        }
        self.line("", out);
    }

    fn line(&mut self, line: &str, out: &mut Vec<SseFrame>) {
        if line.is_empty() {
            if self.has_data || self.frame.event.is_some() {
                out.push(std::mem::take(&mut self.frame));
                self.has_data = false;
            }
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.frame.event = Some(value.to_owned()),
            "data" => {
                if self.has_data {
                    self.frame.data.push('\n');
                }
                self.frame.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
    }
}

/// Builds a completion from the frames of one provider's stream.
pub(crate) trait StreamAssembler: Send + 'static {
    /// Reads one frame; returns `true` when the stream is complete.
    fn frame(&mut self, frame: &SseFrame, out: &mut Vec<StreamEvent>) -> Result<bool, LlmError>;
    fn finish(self: Box<Self>) -> Result<Completion, LlmError>;
}

struct SseState {
    body: BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    decoder: SseDecoder,
    assembler: Option<Box<dyn StreamAssembler>>,
    pending: VecDeque<Result<StreamEvent, LlmError>>,
    endpoint_name: String,
    timeout: Duration,
    _lease: KeyLease,
}

impl SseState {
    fn absorb(&mut self, frames: Vec<SseFrame>) -> bool {
        let Some(assembler) = self.assembler.as_mut() else {
            return true;
        };
        let mut events = Vec::new();
        for frame in &frames {
            match assembler.frame(frame, &mut events) {
                Ok(false) => {}
                Ok(true) => {
                    self.pending.extend(events.drain(..).map(Ok));
                    return true;
                }
                Err(e) => {
                    self.pending.extend(events.drain(..).map(Ok));
                    self.pending.push_back(Err(e));
                    self.assembler = None;
                    return false;
                }
            }
        }
        self.pending.extend(events.into_iter().map(Ok));
        false
    }

    fn complete(&mut self) {
        if let Some(assembler) = self.assembler.take() {
            self.pending
                .push_back(assembler.finish().map(StreamEvent::Completed));
        }
    }
}

/// Turns a successful streaming response into deltas and a final completion.
pub(crate) fn sse_stream(
    endpoint: &Endpoint,
    resp: reqwest::Response,
    lease: KeyLease,
    assembler: Box<dyn StreamAssembler>,
) -> CompletionStream {
    let state = SseState {
        body: resp.bytes_stream().boxed(),
        decoder: SseDecoder::default(),
        assembler: Some(assembler),
        pending: VecDeque::new(),
        endpoint_name: endpoint.name.clone(),
        timeout: endpoint.timeout,
        _lease: lease,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.pending.pop_front() {
                return Some((item, st));
            }
            st.assembler.as_ref()?;
            let mut frames = Vec::new();
            match tokio::time::timeout(st.timeout, st.body.next()).await {
                Err(_) => {
                    st.assembler = None;
                    let err = LlmError::Timeout {
                        provider: st.endpoint_name.clone(),
                        timeout: st.timeout,
                    };
                    return Some((Err(err), st));
                }
                Ok(Some(Err(e))) => {
                    st.assembler = None;
                    let err = if e.is_timeout() {
                        LlmError::Timeout {
                            provider: st.endpoint_name.clone(),
                            timeout: st.timeout,
                        }
                    } else {
                        LlmError::Network {
                            provider: st.endpoint_name.clone(),
                            message: error_chain(&e),
                        }
                    };
                    return Some((Err(err), st));
                }
                Ok(Some(Ok(bytes))) => {
                    st.decoder.push(&bytes, &mut frames);
                    if st.absorb(frames) {
                        st.complete();
                    }
                }
                Ok(None) => {
                    st.decoder.finish(&mut frames);
                    st.absorb(frames);
                    st.complete();
                }
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_frames_split_across_chunks() {
        let mut d = SseDecoder::default();
        let mut out = Vec::new();
        d.push(b"event: message_start\r\ndata: {\"a\"", &mut out);
        assert!(out.is_empty());
        d.push(
            b":1}\r\n\r\n: comment\n\ndata: x\ndata: y\n\ndata: [DONE]",
            &mut out,
        );
        d.finish(&mut out);
        assert_eq!(
            out,
            vec![
                SseFrame {
                    event: Some("message_start".into()),
                    data: "{\"a\":1}".into()
                },
                SseFrame {
                    event: None,
                    data: "x\ny".into()
                },
                SseFrame {
                    event: None,
                    data: "[DONE]".into()
                },
            ]
        );
    }

    #[test]
    fn retry_after_seconds_are_read() {
        assert_eq!(parse_retry_after("120"), Some(Duration::from_secs(120)));
        assert_eq!(
            parse_retry_after(" 1.5 "),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-3"), None);
    }

    #[test]
    fn openai_reset_headers_are_read_when_retry_after_is_missing() {
        let ms = Duration::from_millis;
        assert_eq!(parse_reset("20"), Some(ms(20_000)));
        assert_eq!(parse_reset("1.5s"), Some(ms(1500)));
        assert_eq!(parse_reset("250ms"), Some(ms(250)));
        assert_eq!(parse_reset("6m0s"), Some(ms(360_000)));
        assert_eq!(parse_reset("1h2m3.5s"), Some(ms(3_723_500)));
        for bad in ["", "s", "5x", "1..2s", "m5"] {
            assert_eq!(parse_reset(bad), None, "{bad}");
        }
        let mut headers = HeaderMap::new();
        headers.insert("x-ratelimit-reset-requests", HeaderValue::from_static("2s"));
        headers.insert("x-ratelimit-reset-tokens", HeaderValue::from_static("6m0s"));
        assert_eq!(reset_after(&headers), Some(ms(360_000)));
        headers.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(reset_after(&headers), Some(ms(7000)));
        assert_eq!(reset_after(&HeaderMap::new()), None);
    }

    #[test]
    fn provider_error_messages_are_extracted() {
        assert_eq!(
            error_message(r#"{"error":{"message":"Rate limit reached","type":"x"}}"#),
            "Rate limit reached"
        );
        assert_eq!(error_message("upstream down"), "upstream down");
        assert_eq!(error_message(""), "no error message");
        assert_eq!(error_message(&"é".repeat(400)).len(), 600);
    }
}
