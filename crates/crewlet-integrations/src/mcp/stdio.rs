//! Stdio transport: the server is a child process; each JSON-RPC message is
//! one line on its stdin / stdout; stderr is its log.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::protocol::{self, Incoming, RpcError};
use super::spec::INHERITED_ENV;
use super::{MAX_MESSAGE_BYTES, McpError, McpServerSpec, on_notification};

/// Lines of stderr kept for error messages.
const STDERR_TAIL_LINES: usize = 20;
const STDERR_LINE_CHARS: usize = 500;
/// How long a server gets to exit after its stdin is closed, before it is killed.
const GRACEFUL_EXIT: Duration = Duration::from_secs(2);

type Reply = oneshot::Sender<Result<Value, RpcError>>;

struct Shared {
    server: String,
    /// `None` once the connection is closed.
    pending: Mutex<Option<HashMap<u64, Reply>>>,
    close_reason: Mutex<Option<String>>,
    stderr_tail: Mutex<VecDeque<String>>,
    tools_changed: Arc<AtomicBool>,
}

impl Shared {
    fn insert(&self, id: u64, reply: Reply) -> bool {
        match self.pending.lock().as_mut() {
            Some(map) => {
                map.insert(id, reply);
                true
            }
            None => false,
        }
    }

    fn take(&self, id: u64) -> Option<Reply> {
        self.pending.lock().as_mut()?.remove(&id)
    }

    fn close(&self, reason: String) {
        let mut reason_slot = self.close_reason.lock();
        if reason_slot.is_none() {
            *reason_slot = Some(reason);
        }
        // Dropping the senders wakes every waiter with "closed".
        self.pending.lock().take();
    }

    fn stderr_tail(&self) -> String {
        self.stderr_tail
            .lock()
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Removes a pending request when its caller stops waiting for any reason.
struct PendingGuard<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.shared.take(self.id);
    }
}

pub(crate) struct StdioTransport {
    shared: Arc<Shared>,
    outgoing: Mutex<Option<mpsc::UnboundedSender<String>>>,
    child: Mutex<Option<Child>>,
    next_id: AtomicU64,
    tasks: Vec<JoinHandle<()>>,
}

impl StdioTransport {
    /// Starts the process. Does not speak to it yet.
    pub(crate) fn spawn(
        spec: &McpServerSpec,
        tools_changed: Arc<AtomicBool>,
    ) -> Result<Self, McpError> {
        let command = spec.command.clone().unwrap_or_default();
        let start_failed = |reason: String| McpError::StartFailed {
            server: spec.name.clone(),
            reason,
            stderr: String::new(),
        };
        let mut cmd = Command::new(&command);
        cmd.args(&spec.args).env_clear();
        for key in INHERITED_ENV {
            if let Some(value) = std::env::var_os(key) {
                cmd.env(key, value);
            }
        }
        cmd.envs(&spec.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| start_failed(format!("could not run `{command}`: {e}")))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(start_failed("its stdio pipes could not be opened".into()));
        };
        tracing::debug!(mcp_server = %spec.name, command = %command, pid = child.id(), "mcp server started");

        let shared = Arc::new(Shared {
            server: spec.name.clone(),
            pending: Mutex::new(Some(HashMap::new())),
            close_reason: Mutex::new(None),
            stderr_tail: Mutex::new(VecDeque::new()),
            tools_changed,
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let tasks = vec![
            tokio::spawn(write_loop(stdin, rx)),
            tokio::spawn(read_loop(stdout, shared.clone(), tx.downgrade())),
            tokio::spawn(stderr_loop(stderr, shared.clone())),
        ];
        Ok(StdioTransport {
            shared,
            outgoing: Mutex::new(Some(tx)),
            child: Mutex::new(Some(child)),
            next_id: AtomicU64::new(1),
            tasks,
        })
    }

    fn send(&self, message: &Value) -> bool {
        match self.outgoing.lock().as_ref() {
            Some(tx) => tx.send(message.to_string()).is_ok(),
            None => false,
        }
    }

    pub(crate) async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, McpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if !self.shared.insert(id, tx) {
            return Err(self.closed_error(method).await);
        }
        let _guard = PendingGuard {
            shared: &self.shared,
            id,
        };
        if !self.send(&protocol::request(id, method, params)) {
            return Err(self.closed_error(method).await);
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(Ok(result))) => Ok(result),
            Ok(Ok(Err(e))) => Err(McpError::Rpc {
                server: self.shared.server.clone(),
                method: method.to_string(),
                code: e.code,
                message: e.message,
                data: e.data.map(Box::new),
            }),
            Ok(Err(_closed)) => Err(self.closed_error(method).await),
            Err(_elapsed) => {
                // `initialize` must not be cancelled; the connection is dropped instead.
                if method != "initialize" {
                    self.send(&protocol::notification(
                        "notifications/cancelled",
                        json!({"requestId": id, "reason": format!("no answer within {timeout:?}")}),
                    ));
                }
                Err(McpError::Timeout {
                    server: self.shared.server.clone(),
                    method: method.to_string(),
                    after: timeout,
                })
            }
        }
    }

    pub(crate) async fn notify(&self, method: &str, params: Value) -> Result<(), McpError> {
        if self.send(&protocol::notification(method, params)) {
            Ok(())
        } else {
            Err(self.closed_error(method).await)
        }
    }

    pub(crate) fn stderr_tail(&self) -> String {
        self.shared.stderr_tail()
    }

    /// The exit status, waiting briefly for a process whose stdout just closed.
    async fn exit_status(&self) -> Option<std::process::ExitStatus> {
        for _ in 0..40 {
            {
                let mut child = self.child.lock();
                match child.as_mut().map(Child::try_wait) {
                    Some(Ok(Some(status))) => return Some(status),
                    Some(Ok(None)) => {}
                    _ => return None,
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        None
    }

    pub(crate) async fn closed_error(&self, method: &str) -> McpError {
        let mut reason = self
            .shared
            .close_reason
            .lock()
            .clone()
            .unwrap_or_else(|| "the connection is closed".to_string());
        if let Some(status) = self.exit_status().await {
            reason.push_str(&format!(" ({status})"));
        }
        McpError::Closed {
            server: self.shared.server.clone(),
            method: method.to_string(),
            reason,
            stderr: self.stderr_tail(),
        }
    }

    /// Closes stdin, gives the server [`GRACEFUL_EXIT`] to leave, then kills it.
    pub(crate) async fn close(&self) {
        self.outgoing.lock().take();
        let child = self.child.lock().take();
        if let Some(mut child) = child {
            match tokio::time::timeout(GRACEFUL_EXIT, child.wait()).await {
                Ok(_) => {}
                Err(_) => {
                    let _ = child.kill().await;
                }
            }
        }
        self.shared.close("the client shut the server down".into());
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Drop for StdioTransport {
    fn drop(&mut self) {
        // The child, if still here, is killed by `kill_on_drop`.
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn write_loop(mut stdin: ChildStdin, mut rx: mpsc::UnboundedReceiver<String>) {
    while let Some(line) = rx.recv().await {
        let written = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.write_all(b"\n").await?;
            stdin.flush().await
        };
        if written.await.is_err() {
            break;
        }
    }
    // Dropping stdin closes it: the server's signal to exit.
}

async fn read_loop(
    stdout: ChildStdout,
    shared: Arc<Shared>,
    reply: mpsc::WeakUnboundedSender<String>,
) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    let reason = loop {
        line.clear();
        match read_line_capped(&mut reader, &mut line, MAX_MESSAGE_BYTES).await {
            Ok(true) => {}
            Ok(false) => break "the server closed its stdout".to_string(),
            Err(e) => break format!("reading its stdout failed: {e}"),
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(batch)) => {
                for message in batch {
                    dispatch(message, &shared, &reply);
                }
            }
            Ok(message) => dispatch(message, &shared, &reply),
            Err(_) => {
                let preview: String = text.chars().take(200).collect();
                tracing::warn!(mcp_server = %shared.server, line = %preview, "mcp server wrote a non-JSON line on stdout; ignored");
            }
        }
    };
    tracing::debug!(mcp_server = %shared.server, %reason, "mcp stdio connection closed");
    shared.close(reason);
}

fn dispatch(message: Value, shared: &Shared, reply: &mpsc::WeakUnboundedSender<String>) {
    match protocol::classify(message) {
        Incoming::Response { id, outcome } => {
            match protocol::response_id(&id).and_then(|id| shared.take(id)) {
                Some(waiter) => {
                    let _ = waiter.send(outcome);
                }
                None => {
                    tracing::debug!(mcp_server = %shared.server, %id, "mcp response for no waiting request (timed out or cancelled)");
                }
            }
        }
        Incoming::Request { id, method } => {
            let answer = protocol::answer_server_request(id, &method);
            if let Some(tx) = reply.upgrade() {
                let _ = tx.send(answer.to_string());
            }
        }
        Incoming::Notification { method, params } => {
            on_notification(&shared.server, &method, &params, &shared.tools_changed);
        }
        Incoming::Invalid(reason) => {
            tracing::warn!(mcp_server = %shared.server, %reason, "mcp server sent an invalid message; ignored");
        }
    }
}

/// Reads one `\n`-terminated line into `buf` (without the newline). `false`
/// at end of stream; an error for a line longer than `max`.
async fn read_line_capped<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<bool> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(!buf.is_empty());
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(pos) => (&available[..pos], Some(pos + 1)),
            None => (available, None),
        };
        if buf.len() + chunk.len() > max {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a message is longer than {max} bytes"),
            ));
        }
        buf.extend_from_slice(chunk);
        let used = done.unwrap_or(available.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(true);
        }
    }
}

async fn stderr_loop(stderr: tokio::process::ChildStderr, shared: Arc<Shared>) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line: String = line.chars().take(STDERR_LINE_CHARS).collect();
        tracing::info!(mcp_server = %shared.server, "{line}");
        let mut tail = shared.stderr_tail.lock();
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_split_and_capped() {
        let data: &[u8] = b"{\"a\":1}\n\n{\"b\":2}";
        let mut reader = BufReader::with_capacity(3, data);
        let mut buf = Vec::new();
        assert!(read_line_capped(&mut reader, &mut buf, 100).await.unwrap());
        assert_eq!(buf, b"{\"a\":1}");
        buf.clear();
        assert!(read_line_capped(&mut reader, &mut buf, 100).await.unwrap());
        assert!(buf.is_empty());
        assert!(read_line_capped(&mut reader, &mut buf, 100).await.unwrap());
        assert_eq!(buf, b"{\"b\":2}");
        buf.clear();
        assert!(!read_line_capped(&mut reader, &mut buf, 100).await.unwrap());

        let long: &[u8] = b"0123456789\n";
        let mut reader = BufReader::new(long);
        let mut buf = Vec::new();
        assert!(read_line_capped(&mut reader, &mut buf, 5).await.is_err());
    }
}
