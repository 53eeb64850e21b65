//! envd, the daemon in every E2B sandbox (port 49983): files over plain
//! HTTP (`/files`), processes over Connect RPC (`process.Process/*`, JSON
//! codec).

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use futures::StreamExt;
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

use super::api::{REQUEST_TIMEOUT, api_error, scrub};
use super::connect::{self, Decoder, Frame};
use crate::{Result, SandboxError};

/// envd's port, part of the sandbox's host name.
pub const ENVD_PORT: u16 = 49983;
/// The user commands run as and files belong to.
pub const USER: &str = "user";

/// Where one sandbox's envd is and how to reach it.
#[derive(Clone)]
pub struct Envd {
    pub http: reqwest::Client,
    /// `https://49983-<id>.<domain>`, or the override.
    pub base: String,
    pub sandbox: String,
    pub token: Option<String>,
}

/// How a process run to its end went.
#[derive(Debug)]
pub enum Outcome {
    Done(Finished),
    /// Past its timeout: the stream was dropped and the process sent
    /// SIGKILL (when its pid was known).
    TimedOut {
        pid: Option<u32>,
    },
}

/// How a process ended, as envd reports it.
#[derive(Debug, Default)]
pub struct Finished {
    pub pid: Option<u32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// `None` when no end event came (a signal, or the stream broke).
    pub exit_code: Option<i32>,
}

#[derive(Serialize)]
struct StartRequest<'a> {
    process: ProcessConfig<'a>,
}

#[derive(Serialize)]
struct ProcessConfig<'a> {
    cmd: &'a str,
    args: &'a [String],
    envs: &'a BTreeMap<String, String>,
    cwd: &'a str,
}

#[derive(Deserialize)]
struct StartResponse {
    event: Option<ProcessEvent>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProcessEvent {
    start: Option<StartEvent>,
    data: Option<DataEvent>,
    end: Option<EndEvent>,
}

#[derive(Deserialize)]
struct StartEvent {
    #[serde(default)]
    pid: u32,
}

#[derive(Deserialize)]
struct DataEvent {
    stdout: Option<String>,
    stderr: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EndEvent {
    #[serde(default)]
    exit_code: i32,
    #[serde(default)]
    exited: bool,
}

impl Envd {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            // Which sandbox and port, for a proxy that routes on headers
            // rather than on the host name.
            .header("E2b-Sandbox-Id", &self.sandbox)
            .header("E2b-Sandbox-Port", ENVD_PORT.to_string());
        if let Some(token) = &self.token {
            req = req.header("X-Access-Token", token);
        }
        req
    }

    fn secret(&self) -> &str {
        self.token.as_deref().unwrap_or("")
    }

    async fn check(&self, what: &str, resp: reqwest::Response) -> Result<reqwest::Response> {
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let body = resp.text().await.unwrap_or_default();
        // The proxy answers 502 for a sandbox that is not there (any more).
        if status == StatusCode::BAD_GATEWAY && body.contains("not found") {
            return Err(SandboxError::NoSuchBox(self.sandbox.clone()));
        }
        Err(api_error(what, status, &body, self.secret()))
    }

    fn send_error(&self, what: &str, e: reqwest::Error) -> SandboxError {
        SandboxError::Api(scrub(&format!("{what}: {e}"), self.secret()))
    }

    /// A file's bytes, `None` when it does not exist.
    pub async fn read(&self, path: &str) -> Result<Option<Vec<u8>>> {
        let resp = self
            .request(reqwest::Method::GET, "/files")
            .query(&[("path", path), ("username", USER)])
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            .map_err(|e| self.send_error("GET /files", e))?;
        if resp.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let resp = self.check("GET /files", resp).await?;
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| self.send_error("GET /files", e))?;
        Ok(Some(bytes.to_vec()))
    }

    /// Writes a file; envd makes the parents.
    pub async fn write(&self, path: &str, bytes: &[u8]) -> Result<()> {
        let boundary = format!("crewlet-{}", uuid::Uuid::new_v4().simple());
        let name = path.rsplit('/').next().unwrap_or("file").replace('"', "");
        let mut body = Vec::with_capacity(bytes.len() + 256);
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let resp = self
            .request(reqwest::Method::POST, "/files")
            .query(&[("path", path), ("username", USER)])
            .header(
                "Content-Type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body)
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            .map_err(|e| self.send_error("POST /files", e))?;
        self.check("POST /files", resp).await?;
        Ok(())
    }

    /// Runs a process to its end; past `timeout` the stream is dropped, the
    /// process killed and [`Outcome::TimedOut`] returned.
    pub async fn run(
        &self,
        argv: &[String],
        env: &BTreeMap<String, String>,
        cwd: &str,
        timeout: Duration,
    ) -> Result<Outcome> {
        let Some((cmd, args)) = argv.split_first() else {
            return Err(SandboxError::Invalid("empty command line".into()));
        };
        let req = StartRequest {
            process: ProcessConfig {
                cmd,
                args,
                envs: env,
                cwd,
            },
        };
        let json = serde_json::to_vec(&req)
            .map_err(|e| SandboxError::Invalid(format!("encode process request: {e}")))?;
        let what = "process.Process/Start";
        let mut done = Finished::default();
        let stream = async {
            let resp = self
                .request(reqwest::Method::POST, "/process.Process/Start")
                .header("Content-Type", "application/connect+json")
                .header("Connect-Protocol-Version", "1")
                .header("Authorization", user_auth())
                // envd sends keepalive events this often (seconds), so an
                // idle command does not look like a dead connection.
                .header("Keepalive-Ping-Interval", "50")
                .body(connect::envelope(0, &json))
                .send()
                .await
                .map_err(|e| self.send_error(what, e))?;
            let resp = self.check(what, resp).await?;
            let mut body = resp.bytes_stream();
            let mut dec = Decoder::default();
            loop {
                while let Some(frame) = dec
                    .next_frame()
                    .map_err(|e| SandboxError::Api(format!("{what}: {}", e.0)))?
                {
                    match frame {
                        Frame::Message(m) => absorb(&m, &mut done)?,
                        Frame::End => return Ok(()),
                    }
                }
                match body.next().await {
                    Some(Ok(chunk)) => dec.push(&chunk),
                    Some(Err(e)) => return Err(self.send_error(what, e)),
                    None => {
                        return Err(SandboxError::Api(format!(
                            "{what}: the stream ended without its end frame"
                        )));
                    }
                }
            }
        };
        match tokio::time::timeout(timeout, stream).await {
            Ok(Ok(())) => Ok(Outcome::Done(done)),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                if let Some(pid) = done.pid {
                    self.kill(pid).await;
                }
                Ok(Outcome::TimedOut { pid: done.pid })
            }
        }
    }

    /// SIGKILL to a process (best effort: it may be gone already).
    pub async fn kill(&self, pid: u32) {
        let body = serde_json::json!({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"});
        let sent = self
            .request(reqwest::Method::POST, "/process.Process/SendSignal")
            .header("Content-Type", "application/json")
            .header("Connect-Protocol-Version", "1")
            .header("Authorization", user_auth())
            .json(&body)
            .timeout(Duration::from_secs(30))
            .send()
            .await;
        if let Err(e) = sent {
            tracing::debug!(sandbox = %self.sandbox, pid, error = %e, "SendSignal failed");
        }
    }
}

/// envd picks the process's user from HTTP basic auth with no password.
fn user_auth() -> String {
    format!("Basic {}", B64.encode(format!("{USER}:")))
}

fn absorb(msg: &[u8], done: &mut Finished) -> Result<()> {
    let resp: StartResponse = serde_json::from_slice(msg)
        .map_err(|e| SandboxError::Api(format!("process.Process/Start: bad event: {e}")))?;
    let Some(event) = resp.event else {
        return Ok(());
    };
    if let Some(start) = event.start {
        done.pid = Some(start.pid);
    }
    if let Some(data) = event.data {
        let b64 = |s: &str| {
            B64.decode(s)
                .map_err(|e| SandboxError::Api(format!("process.Process/Start: bad output: {e}")))
        };
        if let Some(s) = data.stdout {
            done.stdout.extend(b64(&s)?);
        }
        if let Some(s) = data.stderr {
            done.stderr.extend(b64(&s)?);
        }
    }
    if let Some(end) = event.end {
        done.exit_code = end.exited.then_some(end.exit_code);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_fill_the_result() {
        let mut done = Finished::default();
        for m in [
            r#"{"event":{"start":{"pid":42}}}"#,
            r#"{"event":{"data":{"stdout":"aGVsbG8K"}}}"#,
            r#"{"event":{"data":{"stderr":"b29wcwo="}}}"#,
            r#"{"event":{"keepalive":{}}}"#,
            r#"{"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3"}}}"#,
        ] {
            absorb(m.as_bytes(), &mut done).unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(done.pid, Some(42));
        assert_eq!(done.stdout, b"hello\n");
        assert_eq!(done.stderr, b"oops\n");
        assert_eq!(done.exit_code, Some(3));
        // Proto3 JSON leaves a zero exit code out.
        let mut ok = Finished::default();
        absorb(br#"{"event":{"end":{"exited":true}}}"#, &mut ok).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok.exit_code, Some(0));
    }
}
