//! Keeping secrets out of logs and exported spans.
//!
//! Two layers of defence: the exact values registered at boot
//! ([`register_secret`]: API keys, tokens, DSN passwords) and patterns for
//! credentials that look like credentials wherever they came from (`sk-…`,
//! Slack `xox?-…`, GitHub `ghp_…`, GitLab `glpat-…`, AWS `AKIA…`, PEM blocks,
//! the password in `scheme://user:password@host`, bearer tokens).

use parking_lot::RwLock;
use std::borrow::Cow;
use std::io::{self, Write};
use std::sync::{Arc, LazyLock};

use regex::Regex;
use tracing_subscriber::fmt::MakeWriter;

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Registered values shorter than this are ignored: they would blank out
/// ordinary words and numbers all over the logs.
pub const MIN_SECRET_LEN: usize = 4;

/// Credential shapes redacted even when nobody registered them. The
/// replacement keeps the non-secret prefix (`$1`) so a reader still sees what
/// kind of value was there.
const PATTERNS: &[(&str, &str)] = &[
    // PEM blocks (private keys, certificates); JSON logs carry the newlines as `\n`.
    (
        r"-----BEGIN [A-Z0-9 ]+-----[\s\S]*?-----END [A-Z0-9 ]+-----",
        "[redacted pem]",
    ),
    // The password of `scheme://user:password@host` (PostgreSQL DSNs, AMQP, Redis...).
    (
        r"([A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:)[^\s@/]+@",
        "${1}[redacted]@",
    ),
    // OpenAI / Anthropic style keys: sk-..., sk-proj-..., sk-ant-...
    (r"\b(sk-)[A-Za-z0-9_\-]{16,}", "${1}[redacted]"),
    // Slack tokens: xoxb-, xoxp-, xoxa-, xoxr-, xoxs-, xoxo-; app-level xapp-.
    (r"\b(xox[abposr]-)[A-Za-z0-9\-]{8,}", "${1}[redacted]"),
    (r"\b(xapp-)[A-Za-z0-9\-]{8,}", "${1}[redacted]"),
    // GitHub tokens: ghp_, gho_, ghu_, ghs_, ghr_, and fine-grained github_pat_.
    (r"\b(gh[pousr]_)[A-Za-z0-9]{20,}", "${1}[redacted]"),
    (r"\b(github_pat_)[A-Za-z0-9_]{20,}", "${1}[redacted]"),
    // GitLab personal/project/group access tokens.
    (r"\b(glpat-)[A-Za-z0-9_\-]{16,}", "${1}[redacted]"),
    // AWS access key ids.
    (r"\b(AKIA|ASIA)[0-9A-Z]{16}\b", "${1}[redacted]"),
    // `Authorization: Bearer <token>` wherever it was printed.
    (
        r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/\-]{8,}=*",
        "${1}[redacted]",
    ),
];

static COMPILED_PATTERNS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    PATTERNS
        .iter()
        .filter_map(|(pattern, replacement)| Some((Regex::new(pattern).ok()?, *replacement)))
        .collect()
});

/// Replaces secrets in text: the registered values (also in their JSON- and
/// Debug-escaped spellings, as they appear in formatted log lines) and the
/// credential [patterns](self).
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
    literals: Option<Regex>,
}

impl Redactor {
    /// A redactor for `secrets` (values shorter than [`MIN_SECRET_LEN`] are ignored).
    pub fn new<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut redactor = Self::default();
        redactor.add_all(secrets);
        redactor
    }

    /// Adds one secret value; returns whether it was kept.
    pub fn add(&mut self, secret: impl Into<String>) -> bool {
        let added = self.push(secret.into());
        if added {
            self.rebuild();
        }
        added
    }

    /// Adds several secret values.
    pub fn add_all<I, S>(&mut self, secrets: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut changed = false;
        for secret in secrets {
            changed |= self.push(secret.into());
        }
        if changed {
            self.rebuild();
        }
    }

    /// How many distinct secret values are registered.
    pub fn len(&self) -> usize {
        self.secrets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    fn push(&mut self, secret: String) -> bool {
        let secret = secret.trim().to_owned();
        if secret.chars().count() < MIN_SECRET_LEN || self.secrets.contains(&secret) {
            return false;
        }
        self.secrets.push(secret);
        true
    }

    fn rebuild(&mut self) {
        let mut needles: Vec<String> = Vec::new();
        for secret in &self.secrets {
            for spelling in spellings(secret) {
                if !needles.contains(&spelling) {
                    needles.push(spelling);
                }
            }
        }
        // Longest first so a secret that contains another is replaced whole.
        needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
        let alternation = needles
            .iter()
            .map(|n| regex::escape(n))
            .collect::<Vec<_>>()
            .join("|");
        self.literals = regex::RegexBuilder::new(&alternation)
            .size_limit(64 << 20)
            .build()
            .ok();
    }

    /// `text` with every secret replaced by [`REDACTED`]; borrowed when
    /// nothing matched.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        if let Some(literals) = &self.literals
            && literals.is_match(&out)
        {
            out = Cow::Owned(literals.replace_all(&out, REDACTED).into_owned());
        }
        for (pattern, replacement) in COMPILED_PATTERNS.iter() {
            if pattern.is_match(&out) {
                out = Cow::Owned(pattern.replace_all(&out, *replacement).into_owned());
            }
        }
        out
    }
}

/// The ways a value can be spelled inside a formatted log line: as is, JSON
/// string-escaped, and `{:?}`-escaped (text logs quote Debug values).
fn spellings(secret: &str) -> Vec<String> {
    let mut out = vec![secret.to_owned()];
    if let Ok(json) = serde_json::to_string(secret) {
        let inner = json[1..json.len() - 1].to_owned();
        if !out.contains(&inner) {
            out.push(inner);
        }
    }
    let debug = format!("{secret:?}");
    let inner = debug[1..debug.len() - 1].to_owned();
    if !out.contains(&inner) {
        out.push(inner);
    }
    out
}

static GLOBAL: LazyLock<RwLock<Arc<Redactor>>> = LazyLock::new(Default::default);

/// Registers a secret value for the process: from now on it never appears in
/// a log line or an exported span attribute. Call at boot for every API key,
/// token and password the configuration holds. Values shorter than
/// [`MIN_SECRET_LEN`] characters are ignored; returns whether it was kept.
pub fn register_secret(secret: impl Into<String>) -> bool {
    register_secrets([secret.into()]) == 1
}

/// Registers several secret values; returns how many were new.
pub fn register_secrets<I, S>(secrets: I) -> usize
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut guard = GLOBAL.write();
    let mut next = Redactor::clone(&guard);
    let before = next.len();
    next.add_all(secrets);
    let added = next.len() - before;
    if added > 0 {
        *guard = Arc::new(next);
    }
    added
}

/// The process-wide redactor (registered secrets + patterns).
pub fn global_redactor() -> Arc<Redactor> {
    GLOBAL.read().clone()
}

/// `text` with every registered secret and credential pattern replaced.
pub fn redact(text: &str) -> Cow<'_, str> {
    // The borrow of the global redactor ends here, so the result is copied
    // only when something was replaced.
    match global_redactor().redact(text) {
        Cow::Borrowed(_) => Cow::Borrowed(text),
        Cow::Owned(s) => Cow::Owned(s),
    }
}

/// A [`MakeWriter`] whose writers hold each formatted log line and write it
/// redacted. `tracing-subscriber` formats a whole line and then writes it, so
/// a secret is never split across two writes.
pub struct RedactingMakeWriter<M> {
    inner: M,
}

impl<M> RedactingMakeWriter<M> {
    pub fn new(inner: M) -> Self {
        Self { inner }
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for RedactingMakeWriter<M> {
    type Writer = RedactingWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter {
            inner: self.inner.make_writer(),
            buf: Vec::new(),
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        RedactingWriter {
            inner: self.inner.make_writer_for(meta),
            buf: Vec::new(),
        }
    }
}

/// Buffers what is written and passes it on redacted on flush or drop.
pub struct RedactingWriter<W: Write> {
    inner: W,
    buf: Vec<u8>,
}

impl<W: Write> RedactingWriter<W> {
    fn pass_on(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let bytes = std::mem::take(&mut self.buf);
        let text = String::from_utf8_lossy(&bytes);
        let redactor = global_redactor();
        self.inner.write_all(redactor.redact(&text).as_bytes())
    }
}

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.pass_on()?;
        self.inner.flush()
    }
}

impl<W: Write> Drop for RedactingWriter<W> {
    fn drop(&mut self) {
        // A log line that cannot be written has nowhere to report to.
        let _ = self.pass_on();
        let _ = self.inner.flush();
    }
}

/// Redacts attribute values and span-event attributes before a finished span
/// reaches `inner` (and so the exporter).
#[derive(Debug)]
pub(crate) struct RedactingProcessor<P> {
    inner: P,
}

impl<P> RedactingProcessor<P> {
    pub(crate) fn new(inner: P) -> Self {
        Self { inner }
    }
}

fn redact_attributes(redactor: &Redactor, attributes: &mut [opentelemetry::KeyValue]) {
    for kv in attributes {
        if let opentelemetry::Value::String(s) = &kv.value
            && let Cow::Owned(clean) = redactor.redact(s.as_str())
        {
            kv.value = opentelemetry::Value::String(clean.into());
        }
    }
}

impl<P: opentelemetry_sdk::trace::SpanProcessor> opentelemetry_sdk::trace::SpanProcessor
    for RedactingProcessor<P>
{
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, mut span: opentelemetry_sdk::trace::SpanData) {
        let redactor = global_redactor();
        redact_attributes(&redactor, &mut span.attributes);
        for event in span.events.events.iter_mut() {
            if let Cow::Owned(clean) = redactor.redact(&event.name) {
                event.name = clean.into();
            }
            redact_attributes(&redactor, &mut event.attributes);
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles() {
        assert_eq!(COMPILED_PATTERNS.len(), PATTERNS.len());
    }

    #[test]
    fn registered_values_are_replaced_in_all_spellings() {
        let r = Redactor::new(["s3cr3t-value", "quote\"d\\pass"]);
        assert_eq!(r.redact("key=s3cr3t-value!"), "key=[redacted]!");
        // JSON-escaped, as in a JSON log line.
        let json = serde_json::to_string("pw quote\"d\\pass end").unwrap_or_default();
        assert_eq!(r.redact(&json), "\"pw [redacted] end\"");
        // Debug-escaped, as in a text log line.
        let debug = format!("{:?}", "quote\"d\\pass");
        assert_eq!(r.redact(&debug), "\"[redacted]\"");
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn short_and_duplicate_values_are_ignored() {
        let mut r = Redactor::new(["abc", "  ", ""]);
        assert!(r.is_empty());
        assert!(r.add("abcd"));
        assert!(!r.add("abcd"));
        assert_eq!(r.len(), 1);
        assert_eq!(r.redact("abc abcd"), "abc [redacted]");
    }

    #[test]
    fn a_secret_containing_another_is_replaced_whole() {
        let r = Redactor::new(["token", "token-long-part"]);
        assert_eq!(r.redact("x token-long-part y"), "x [redacted] y");
    }

    #[test]
    fn credential_patterns_are_replaced() {
        let r = Redactor::default();
        let cases = [
            ("key sk-proj-abcdefghijklmnop1234", "key sk-[redacted]"),
            ("sk-ant-api03-AAAAAAAAAAAAAAAAAAAA", "sk-[redacted]"),
            ("slack xoxb-1234-5678-abcdefgh", "slack xoxb-[redacted]"),
            ("xapp-1-A0123-4567-deadbeef", "xapp-[redacted]"),
            ("gh ghp_0123456789abcdefghijABCDEFGHIJ", "gh ghp_[redacted]"),
            (
                "github_pat_11AAAAAAA0abcdefghijklmnop",
                "github_pat_[redacted]",
            ),
            ("gl glpat-abcdefghij0123456789", "gl glpat-[redacted]"),
            ("aws AKIAIOSFODNN7EXAMPLE.", "aws AKIA[redacted]."),
            (
                "dsn postgres://crewlet:hunter22@db:5432/crewlet",
                "dsn postgres://crewlet:[redacted]@db:5432/crewlet",
            ),
            (
                "Authorization: Bearer abc.def.ghi-jkl",
                "Authorization: Bearer [redacted]",
            ),
            (
                "k=\"-----BEGIN PRIVATE KEY-----\\nMIIEvQ\\n-----END PRIVATE KEY-----\" done",
                "k=\"[redacted pem]\" done",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(r.redact(input), want, "input: {input}");
        }
        // Ordinary text stays as it is.
        for plain in [
            "task-1 finished in 32 ms",
            "http://example.com/path",
            "ask-me-anything",
            "postgres://db:5432/x",
        ] {
            assert_eq!(r.redact(plain), plain);
        }
    }

    #[test]
    fn writer_redacts_whole_lines() {
        register_secret("writer-secret-9f3a");
        let sink = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        {
            let mut w = RedactingWriter {
                inner: SharedVec(sink.clone()),
                buf: Vec::new(),
            };
            let _ = w.write_all(b"a writer-secret-9f3a b\n");
        }
        let text = String::from_utf8(sink.lock().map(|v| v.clone()).unwrap_or_default())
            .unwrap_or_default();
        assert_eq!(text, "a [redacted] b\n");
    }

    struct SharedVec(Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for SharedVec {
        fn write(&mut self, data: &[u8]) -> io::Result<usize> {
            if let Ok(mut v) = self.0.lock() {
                v.extend_from_slice(data);
            }
            Ok(data.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
}
