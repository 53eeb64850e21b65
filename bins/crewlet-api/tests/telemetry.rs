//! The `crewlet-api` binary as deployed: configured by a bootstrap file and
//! `OTEL_EXPORTER_OTLP_ENDPOINT`, it logs JSON lines, accepts a signed
//! webhook in a `webhook github` span exported as `crewlet-api`, and flushes
//! that span when it stops on SIGTERM.
#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crewlet_test_support::otlp_receiver::OtlpReceiver;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const TOKEN: &str = "ops-token-7f3a9c2e51";
const GITHUB_SECRET: &str = "gh-hook-secret-4b8d1e";
const WAIT: Duration = Duration::from_secs(30);

const BOOTSTRAP: &str = r#"
api:
  host: 127.0.0.1
  auth:
    tokens:
      - id: ops
        token: ops-token-7f3a9c2e51
"#;

const COMPANY: &str = r#"
name: Smoke Co
providers:
  llm:
    main: {type: openai, model: m, api_keys: ["${OPENAI_API_KEY}"]}
integrations:
  github:
    webhook_secret: "${CREWLET_CO_SMOKE_GITHUB_SECRET}"
roles:
  - name: Engineer
    handle: eng
"#;

/// Kills the child on the way out, whatever happens in the test.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signature(body: &[u8]) -> Result<String, Box<dyn std::error::Error>> {
    let mut mac = Hmac::<Sha256>::new_from_slice(GITHUB_SECRET.as_bytes())?;
    mac.update(body);
    Ok(format!(
        "sha256={}",
        hex::encode(mac.finalize().into_bytes())
    ))
}

#[test]
fn the_standalone_process_exports_the_webhook_span_and_flushes_it_at_sigterm() -> TestResult {
    let receiver = OtlpReceiver::start()?;
    let dir = std::env::temp_dir().join(format!("crewlet-api-otlp-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let config = dir.join("config.yaml");
    std::fs::write(&config, BOOTSTRAP)?;

    let child = Command::new(env!("CARGO_BIN_EXE_crewlet-api"))
        .arg(&config)
        .args(["--port", "0"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.base_url())
        .env("CREWLET_CO_SMOKE_GITHUB_SECRET", GITHUB_SECRET)
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut child = Running(child);
    let stderr = child.0.stderr.take().ok_or("no stderr")?;
    let (lines_tx, lines) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut log = Vec::new();
    let addr = loop {
        let line = lines.recv_timeout(WAIT).map_err(|_| {
            format!(
                "no `api listening` line; stderr so far:\n{}",
                log.join("\n")
            )
        })?;
        let json: Value = serde_json::from_str(&line)
            .map_err(|e| format!("stderr is a pipe, so JSON lines ({e}): {line}"))?;
        log.push(line);
        if json["message"] == "api listening" {
            break json["addr"]
                .as_str()
                .ok_or("listening line has an addr")?
                .to_owned();
        }
    };

    let http = reqwest::blocking::Client::new();
    let r = http
        .put(format!("http://{addr}/config"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/yaml")
        .header("x-summary", "telemetry test")
        .body(COMPANY)
        .send()?;
    assert_eq!(r.status(), 201, "{}", r.text()?);

    let body = serde_json::to_vec(&serde_json::json!({
        "action": "opened",
        "issue": {"number": 3, "title": "It broke", "body": "@eng look",
                  "html_url": "https://github.com/acme/app/issues/3"},
        "repository": {"full_name": "acme/app"},
        "sender": {"login": "octocat", "type": "User"}
    }))?;
    let r = http
        .post(format!("http://{addr}/webhooks/github/eng"))
        .header("content-type", "application/json")
        .header("x-github-event", "issues")
        .header("x-github-delivery", "smoke-delivery-1")
        .header("x-hub-signature-256", signature(&body)?)
        .body(body)
        .send()?;
    assert_eq!(r.status(), 202);
    let accepted: Value = r.json()?;
    let trace_id = accepted["trace_id"]
        .as_str()
        .ok_or("accepted has a trace_id")?;

    // SIGTERM: graceful stop, then the telemetry guard flushes the batch.
    let status = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()?;
    assert!(status.success());
    let exit = child.0.wait()?;
    assert!(exit.success(), "exit status {exit:?}");
    drop(child);
    let _ = reader.join();
    log.extend(lines.try_iter());
    let log = log.join("\n");

    let spans = receiver
        .wait_for_spans(|s| s.iter().any(|s| s.name == "webhook github"), WAIT)
        .map_err(|e| format!("{e:?}\nstderr:\n{log}"))?;
    let hook = spans
        .iter()
        .find(|s| s.name == "webhook github")
        .ok_or("the webhook span")?;
    assert_eq!(hook.trace_id, trace_id, "the answer's trace is the span's");
    assert_eq!(hook.parent_span_id, None, "the delivery starts its trace");
    assert_eq!(hook.service_name.as_deref(), Some("crewlet-api"));
    assert_eq!(hook.attr_str("source"), Some("github"));
    assert_eq!(hook.attr_str("delivery_id"), Some("smoke-delivery-1"));

    assert!(log.contains("SIGTERM received"), "{log}");
    assert!(log.contains("\"message\":\"api stopped\""), "{log}");
    let everything = format!("{spans:?}\n{log}");
    for secret in [TOKEN, GITHUB_SECRET] {
        assert!(
            !everything.contains(secret),
            "{secret} leaked:\n{everything}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
