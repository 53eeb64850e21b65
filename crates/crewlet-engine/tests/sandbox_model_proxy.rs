//! The model key stays outside the box, end to end with real boxes
//! (bubblewrap + cgroups): a coding agent on the host network calls its
//! model with curl through the engine's model proxy, using the token and
//! URL it was given; the fake Anthropic server sees the real key, the box
//! never has it, the calls are charged to the seat once (its own report is
//! not charged again), a whole and a streamed answer come back, and the
//! token is refused once the run has ended. A box with `network: none`
//! gets no model variables at all, unless its seat opts in to the raw key.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::sandbox::{executable, sandbox_available};
use common::*;
use crewlet_config::Company;
use crewlet_core::EventType;
use crewlet_engine::{Backends, Engine, EngineBuilder, EngineOptions, EnvLookup};
use crewlet_queue::{EventQueue, MemoryBroker};
use crewlet_store::Stores;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When, Wire};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(120);

/// The seat's real model key: in the engine's environment only.
const REAL_KEY: &str = "sk-ant-real-model-key-7f3a9c0e5d";

/// The coding agent: dumps its environment, calls the model through
/// whatever `ANTHROPIC_BASE_URL`/`ANTHROPIC_API_KEY` it has (a whole
/// answer, a streamed one, and one with a made-up token), and reports a
/// usage of its own that must not be charged.
const AGENT: &str = r#"#!/bin/sh
out=/srv/out
env > "$out/env-$CREWLET_AGENT_HANDLE.txt"
if [ -z "$ANTHROPIC_BASE_URL" ]; then
  echo "No model variables here." > /home/user/.crewlet/findings.md
  exit 0
fi
call() {
  curl -sS -N -o "$out/$1" -w '%{http_code}' \
    -H "x-api-key: $2" -H 'content-type: application/json' -H 'anthropic-version: 2023-06-01' \
    --data "{\"model\":\"claude-x\",\"max_tokens\":50,\"stream\":$3,\"messages\":[{\"role\":\"user\",\"content\":\"from the box\"}]}" \
    "$ANTHROPIC_BASE_URL/v1/messages?beta=true"
}
whole=$(call whole.json "$ANTHROPIC_API_KEY" false)
stream=$(call stream.txt "$ANTHROPIC_API_KEY" true)
bad=$(call bad.json "crewlet-run-00000000000000000000000000000000" false)
printf 'whole=%s stream=%s bad=%s\n' "$whole" "$stream" "$bad" > "$out/codes.txt"
printf 'Called the model through the proxy (whole=%s stream=%s).\n' "$whole" "$stream" > /home/user/.crewlet/findings.md
echo '{"result": "done", "usage": {"input_tokens": 1000, "output_tokens": 1000}}'
"#;

fn company(llm: &FakeLlmServer, root: &Path, network: &str, roles: &str) -> Company {
    let yaml = format!(
        r#"name: Proxy Co
providers:
  llm:
    fake: {{type: openai-compatible, model: fake-model, base_url: "{openai}"}}
    claude: {{type: anthropic, model: claude-x, base_url: "{anthropic}", api_keys: ["${{REAL_MODEL_KEY}}"]}}
  sandbox:
    type: local
    default_coding_agent: command
    command: ["/opt/agent/agent"]
    poll_seconds: 0.05
    local:
      containment: bubblewrap
      state_dir: "{boxes}"
      network: "{network}"
      memory_mb: 512
      mounts: ["{agent}:/opt/agent", "{out}:/srv/out:rw"]
turn_engine:
  max_concurrent_turns: 4
roles:
{roles}"#,
        openai = llm.openai_base_url(),
        anthropic = llm.anthropic_base_url(),
        boxes = root.join("boxes").display(),
        agent = root.join("agent").display(),
        out = root.join("out").display(),
    );
    Company::from_yaml("proxy", &yaml).unwrap_or_else(|e| panic!("{e}"))
}

/// The seat's turn: plan, run the coding agent once, report its findings.
fn script() -> Script {
    let plan = json!({"decision": "plan", "reasoning": "code work", "steps": [{"intent": "have it coded", "tools": ["run_sandbox"]}],
                      "tools_needed": ["run_sandbox"], "success_criteria": ["reported"]});
    Script::new()
        // The box's own calls, through the proxy: Anthropic's wire.
        .on(When::any().and_wire(Wire::Anthropic), Reply::text("hello from the model").usage(40, 10))
        .on(
            When::tool_offered("submit_review"),
            Reply::tool_call("submit_review", json!({"decision": "done", "notes": "ok", "completed_work": "x", "final_artifact": "Reported."})),
        )
        .on(When::tool_offered("submit_plan"), Reply::tool_call("submit_plan", plan))
        .on(When::tool_result_contains("The coding agent finished"), Reply::text("Reported."))
        .on(
            When::tool_offered("run_sandbox").and_after_tool_result(false),
            Reply::tool_call("run_sandbox", json!({"brief": "Call your model."})),
        )
        .on(When::any(), Reply::text("?"))
}

/// The engine's environment: the test's PATH and the seat's real key.
fn engine_env() -> EnvLookup {
    Arc::new(|name: &str| match name {
        "PATH" => Some(std::env::var("PATH").unwrap_or_default()),
        "REAL_MODEL_KEY" => Some(REAL_KEY.to_owned()),
        _ => None,
    })
}

fn setup(name: &str) -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!(
        "crewlet-model-proxy-{name}-{}",
        uuid::Uuid::now_v7().simple()
    ));
    for dir in ["agent", "out"] {
        std::fs::create_dir_all(root.join(dir)).unwrap_or_else(|e| panic!("{e}"));
    }
    executable(&root.join("agent").join("agent"), AGENT);
    root
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `NAME=value` of an `env` dump.
fn var<'a>(dump: &'a str, name: &str) -> Option<&'a str> {
    dump.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
}

async fn tokens_used(stores: &Stores, handle: &str) -> u64 {
    stores
        .ledger
        .usage()
        .await
        .unwrap_or_default()
        .iter()
        .find(|u| u.agent_handle == handle)
        .map_or(0, |u| u.tokens_used)
}

/// The engine on memory backends with the test's environment.
async fn start(company: Company) -> (Engine, Backends) {
    let queue: Arc<dyn EventQueue> = Arc::new(MemoryBroker::new().client());
    let backends = Backends::new(queue, Stores::memory());
    let engine = EngineBuilder::new(company, &backends)
        .options(EngineOptions {
            stream_progress: false,
            env: engine_env(),
            ..EngineOptions::default()
        })
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (engine, backends)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_reaches_its_model_through_the_proxy_and_never_holds_the_key() {
    if !sandbox_available().await {
        return;
    }
    let root = setup("host");
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let roles = "  - name: Engineer\n    handle: eng\n    llm_sandbox: claude\n    token_budget: 1000000\n    sandbox: {enabled: true}\n";
    let (engine, backends) = start(company(&llm, &root, "", roles)).await;
    engine
        .assign("eng", "api", "Have the coding agent call its model.")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for("the engineer's task to complete", WAIT, || {
        completed_by(&backends.stores, "eng")
    })
    .await;

    // The box had a token and the proxy's address, never the key.
    let out = root.join("out");
    let dump = read(&out.join("env-eng.txt"));
    assert!(
        !dump.contains(REAL_KEY),
        "the real key is in the box:\n{dump}"
    );
    let token = var(&dump, "ANTHROPIC_API_KEY").unwrap_or_default();
    assert!(token.starts_with("crewlet-run-"), "{dump}");
    let proxy = var(&dump, "ANTHROPIC_BASE_URL").unwrap_or_default();
    assert!(proxy.starts_with("http://127.0.0.1:"), "{dump}");
    assert!(var(&dump, "OPENAI_API_KEY").is_none(), "{dump}");

    // Both answers came back through it; a made-up token did not pass.
    assert_eq!(
        read(&out.join("codes.txt")).trim(),
        "whole=200 stream=200 bad=401"
    );
    let whole: Value = serde_json::from_str(&read(&out.join("whole.json"))).unwrap_or_default();
    assert_eq!(whole["content"][0]["text"], "hello from the model");
    let stream = read(&out.join("stream.txt"));
    assert!(
        stream.starts_with("event: message_start")
            && stream.contains("\"text_delta\"")
            && stream.contains("event: message_stop"),
        "{stream}"
    );
    let bad: Value = serde_json::from_str(&read(&out.join("bad.json"))).unwrap_or_default();
    assert_eq!(bad["error"]["code"], "invalid_token", "{bad}");

    // The model saw the real key, on the box's two calls only.
    let calls: Vec<_> = llm
        .requests()
        .into_iter()
        .filter(|r| r.wire == Wire::Anthropic)
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    for c in &calls {
        assert_eq!(c.api_key.as_deref(), Some(REAL_KEY));
        assert!(!c.headers.contains_key("authorization"));
        assert_eq!(c.body["messages"][0]["content"], "from the box");
    }

    // Charged once: the proxy's 2 x 50 tokens; the agent's own report
    // (2,000) is in its event but not charged again. The turn's own calls
    // report no usage.
    wait_for("the proxied calls to be charged", WAIT, || async {
        (tokens_used(&backends.stores, "eng").await >= 100).then_some(())
    })
    .await;
    assert_eq!(tokens_used(&backends.stores, "eng").await, 100);
    let budgets = backends.stores.ledger.budgets().await.unwrap_or_default();
    assert!(
        budgets
            .iter()
            .any(|b| b.scope.starts_with("agent:") && b.used_tokens == 100),
        "{budgets:?}"
    );
    let completed = events_of(&backends.stores, EventType::SandboxRunCompleted).await;
    assert_eq!(completed.len(), 1, "{completed:?}");
    assert_eq!(completed[0].payload["usage"]["input_tokens"], 1000);

    // The run has ended: its token no longer opens anything.
    let after = reqwest::Client::new()
        .post(format!("{proxy}/v1/messages"))
        .header("x-api-key", token)
        .json(&json!({"model": "claude-x", "max_tokens": 5, "messages": []}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(after.status(), 401);
    let body: Value = after.json().await.unwrap_or_default();
    assert_eq!(body["error"]["code"], "invalid_token", "{body}");
    assert_eq!(
        llm.requests()
            .iter()
            .filter(|r| r.wire == Wire::Anthropic)
            .count(),
        2
    );

    engine.shutdown().await;
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_box_that_cannot_reach_the_proxy_gets_no_key_unless_its_seat_opts_in() {
    if !sandbox_available().await {
        return;
    }
    let root = setup("offline");
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let roles = "  - name: Engineer\n    handle: eng\n    llm_sandbox: claude\n    sandbox: {enabled: true}\n  - name: Raw\n    handle: raw\n    llm_sandbox: claude\n    sandbox: {enabled: true, model_key: raw}\n";
    let (engine, backends) = start(company(&llm, &root, "none", roles)).await;
    for seat in ["eng", "raw"] {
        engine
            .assign(seat, "api", "Have the coding agent call its model.")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    for seat in ["eng", "raw"] {
        wait_for(&format!("{seat}'s task to complete"), WAIT, || {
            completed_by(&backends.stores, seat)
        })
        .await;
    }
    engine.shutdown().await;

    let out = root.join("out");
    // The default: nothing about the model in the box.
    let plain = read(&out.join("env-eng.txt"));
    assert!(!plain.contains(REAL_KEY), "{plain}");
    for name in ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY"] {
        assert!(var(&plain, name).is_none(), "{name} in\n{plain}");
    }
    // The opt-in: the real key and base URL, as documented.
    let raw = read(&out.join("env-raw.txt"));
    assert_eq!(var(&raw, "ANTHROPIC_API_KEY"), Some(REAL_KEY));
    assert_eq!(
        var(&raw, "ANTHROPIC_BASE_URL"),
        Some(llm.anthropic_base_url().as_str())
    );
    // No proxy: the raw seat's agent could not reach its model either
    // (`network: none`), and its own report is what is charged.
    assert_eq!(
        read(&out.join("codes.txt")).trim(),
        "whole=000 stream=000 bad=000"
    );
    assert_eq!(tokens_used(&backends.stores, "raw").await, 2000);
    assert_eq!(tokens_used(&backends.stores, "eng").await, 0);
    let _ = std::fs::remove_dir_all(&root);
}
