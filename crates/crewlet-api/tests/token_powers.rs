//! A bearer token's powers are explicit: each attack that a token used to
//! be enough for is refused against the real router, with a reason, and
//! nothing is stored.
//!
//! - scopes: a `read` or `operate` token cannot touch `/config` (403 naming
//!   `admin`); no token stays 401;
//! - `PUT /config` with an MCP server running `/bin/sh` (or a loader
//!   variable such as `LD_PRELOAD`) is 400 `not_allowed` unless Tier A lists
//!   the program (or sets `allow_any_mcp_command`);
//! - `${VAR}` outside `security.company_env` in MCP `args`/`env`/`headers`/
//!   `url` or a provider's `api_keys` is 400 naming the variable and path,
//!   and a stored revision that has one never sees the value;
//! - a provider `base_url` or MCP `url` outside `security.outbound_hosts` is 400;
//! - a revert to a revision the policy refuses is 400;
//! - bodies over 1 MiB are 413, a Content-Type other than YAML or JSON 415.

mod common;

use std::sync::Arc;

use common::{hmac_hex, import};
use crewlet_api::{Api, ApiBuilder};
use crewlet_config::{ApiAuth, ApiConfig, ApiToken, Scope, Security};
use crewlet_queue::MemoryQueue;
use crewlet_store::{NewRevision, Stores};
use serde_json::Value;

const ADMIN: &str = "admin-token-0123456789";
const OPERATE: &str = "operate-token-0123456789";
const READ: &str = "read-token-0123456789";
const LEGACY: &str = "legacy-token-0123456789";

/// A value the company must never get: it stands for the engine's other secrets.
const ENGINE_SECRET: &str = "engine-only-secret-5Kd8Wq";

const BASE: &str = r#"name: Powers Co
providers:
  llm:
    main:
      type: openai
      model: gpt-test
      api_keys: ["${OPENAI_API_KEY}"]
roles:
  - name: CEO
    handle: ceo
"#;

struct Server {
    base: String,
    http: reqwest::Client,
    stores: Stores,
    _task: tokio::task::JoinHandle<()>,
}

fn tokens() -> Vec<ApiToken> {
    vec![
        ApiToken::new("founder", ADMIN).with_scopes([Scope::Admin]),
        ApiToken::new("ops", OPERATE).with_scopes([Scope::Operate]),
        ApiToken::new("dash", READ).with_scopes([Scope::Read]),
        ApiToken::new("legacy", LEGACY),
    ]
}

/// The real router on 127.0.0.1:0 with `security`, the four tokens above,
/// an environment in which every variable is set (to a value naming it),
/// and `company` as the active revision.
async fn serve(security: Security, company: Option<&str>) -> Server {
    let stores = Stores::memory();
    if let Some(yaml) = company {
        import(&stores, yaml).await;
    }
    let config = ApiConfig {
        auth: ApiAuth {
            tokens: tokens(),
            allow_anonymous_read: Some(crewlet_config::AnonymousRead::Refused),
            allowed_origins: vec![],
            ..ApiAuth::default()
        },
        ..ApiConfig::default()
    };
    let api: Api = ApiBuilder::new(config, Arc::new(MemoryQueue::standalone()), &stores)
        .secret_env(|name| Some(format!("{ENGINE_SECRET}-{name}")))
        .security(security)
        .build()
        .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = api.serve(listener, std::future::pending()).await;
    });
    Server {
        base,
        http: reqwest::Client::new(),
        stores,
        _task: task,
    }
}

impl Server {
    async fn put(&self, token: Option<&str>, content_type: &str, body: String) -> (u16, Value) {
        let mut req = self
            .http
            .put(format!("{}/config", self.base))
            .header("content-type", content_type)
            .header("x-summary", "test edit")
            .body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn put_yaml(&self, body: String) -> (u16, Value) {
        self.put(Some(ADMIN), "application/yaml", body).await
    }

    async fn send(&self, req: reqwest::RequestBuilder, token: Option<&str>) -> (u16, Value) {
        let req = match token {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn revisions(&self) -> usize {
        self.stores.config.list(100).await.unwrap().len()
    }
}

fn reason(body: &Value) -> String {
    body["reason"].as_str().unwrap_or_default().to_owned()
}

/// `(path, message)` of every problem in an error body.
fn problems(body: &Value) -> Vec<(String, String)> {
    body["problems"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|p| {
                    (
                        p["path"].as_str().unwrap_or_default().to_owned(),
                        p["message"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn with_mcp(block: &str) -> String {
    format!("{BASE}mcp_servers:\n{block}")
}

fn assert_never_leaks(body: &Value) {
    let text = body.to_string();
    assert!(
        !text.contains(ENGINE_SECRET),
        "a secret value leaked: {text}"
    );
}

#[tokio::test]
async fn config_needs_the_admin_scope_and_no_token_stays_401() {
    let s = serve(Security::default(), Some(BASE)).await;
    let url = |p: &str| format!("{}{p}", s.base);
    for token in [READ, OPERATE] {
        let (status, body) = s.put(Some(token), "application/yaml", BASE.into()).await;
        assert_eq!(status, 403, "{body}");
        assert_eq!(body["error"], "forbidden");
        assert!(reason(&body).contains("`admin` scope"), "{body}");
        for req in [
            s.http.get(url("/config")),
            s.http.get(url("/config/revisions")),
            s.http.post(url("/config/revisions/1/activate")),
            s.http.get(url("/config/roles")),
            s.http.get(url("/config/llm-providers/main")),
            s.http
                .put(url("/config/identity"))
                .json(&serde_json::json!({"mission": "m"})),
            s.http.delete(url("/config/units/Engineering")),
        ] {
            let (status, body) = s.send(req, Some(token)).await;
            assert_eq!(status, 403, "{body}");
            assert!(reason(&body).contains("`admin`"), "{body}");
        }
    }
    let (status, body) = s.put(None, "application/yaml", BASE.into()).await;
    assert_eq!(status, 401, "{body}");
    let (status, _) = s.send(s.http.get(url("/config")), None).await;
    assert_eq!(status, 401);
    let (status, _) = s
        .put(Some("not-a-token"), "application/yaml", BASE.into())
        .await;
    assert_eq!(status, 401);
    // Reads: every scope includes read; anonymous reads are off here.
    for token in [READ, OPERATE, ADMIN, LEGACY] {
        let (status, body) = s.send(s.http.get(url("/agents")), Some(token)).await;
        assert_eq!(status, 200, "{token}: {body}");
    }
    assert_eq!(s.send(s.http.get(url("/agents")), None).await.0, 401);
    assert_eq!(s.revisions().await, 1, "nothing was stored");
    // The admin token, and a token without `scopes` (every power, deprecated).
    for token in [ADMIN, LEGACY] {
        let (status, body) = s.put(Some(token), "application/yaml", BASE.into()).await;
        assert_eq!(status, 201, "{body}");
        let (status, _) = s.send(s.http.get(url("/config")), Some(token)).await;
        assert_eq!(status, 200);
    }
}

#[tokio::test]
async fn an_mcp_shell_is_refused_unless_tier_a_allows_the_program() {
    let s = serve(
        Security {
            mcp_commands: vec!["npx".into(), "/usr/local/bin/my-server".into()],
            ..Security::default()
        },
        Some(BASE),
    )
    .await;
    let shell =
        with_mcp("  - name: x\n    command: /bin/sh\n    args: [-c, \"id > /tmp/pwned\"]\n");
    let (status, body) = s.put_yaml(shell.clone()).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "not_allowed");
    assert!(reason(&body).contains("nothing was changed"), "{body}");
    let found = problems(&body);
    assert_eq!(found.len(), 1, "{body}");
    assert_eq!(found[0].0, "mcp_servers[0].command");
    assert!(
        found[0].1.contains("`/bin/sh`") && found[0].1.contains("security.mcp_commands"),
        "{body}"
    );
    assert_eq!(body["problems"][0]["line"], 13, "{body}");

    // A basename is not enough: `npx` allows the bare command only.
    for command in ["/tmp/evil/npx", "./npx", "my-server", "sh"] {
        let (status, body) = s
            .put_yaml(with_mcp(&format!(
                "  - name: x\n    command: \"{command}\"\n"
            )))
            .await;
        assert_eq!(status, 400, "{command}: {body}");
    }
    // A listed program may not be handed a loader or interpreter hook.
    let (status, body) = s
        .put_yaml(with_mcp(
            "  - name: x\n    command: npx\n    env: {LD_PRELOAD: /tmp/evil.so}\n",
        ))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(problems(&body)[0].0, "mcp_servers[0].env.LD_PRELOAD");
    assert_eq!(s.revisions().await, 1, "nothing was stored");

    for ok in [
        "  - name: x\n    command: npx\n    args: [-y, \"@acme/mcp\"]\n",
        "  - name: x\n    command: /usr/local/bin/my-server\n",
        "  - name: x\n    transport: http\n    url: https://mcp.example.com/mcp\n",
    ] {
        let (status, body) = s.put_yaml(with_mcp(ok)).await;
        assert_eq!(status, 201, "{ok}: {body}");
    }

    // The explicit switch lets an admin token run anything.
    let open = serve(
        Security {
            allow_any_mcp_command: true,
            ..Security::default()
        },
        Some(BASE),
    )
    .await;
    let (status, body) = open.put_yaml(shell).await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn variables_outside_the_allowlist_are_refused_by_name_and_path() {
    let s = serve(Security::default(), Some(BASE)).await;
    let company = r#"name: Powers Co
providers:
  llm:
    main:
      type: openai
      model: gpt-test
      api_keys: ["${OPENAI_API_KEY}", "${ACME_OPS_API_TOKEN}"]
mcp_servers:
  - name: files
    shared: false
    transport: http
    url: "https://mcp.example.com/${CREWLET_PROVIDERS__DATABASE__DSN}"
    headers:
      Authorization: "Bearer ${CREWLET_PROVIDERS__QUEUE__AUTH_TOKEN}"
roles:
  - name: CEO
    handle: ceo
    mcp_env:
      files:
        TOKEN: "${HOME}"
"#;
    let (status, body) = s.put_yaml(company.into()).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "not_allowed");
    let found = problems(&body);
    let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "providers.llm.main.api_keys[1]",
            "mcp_servers[0].url",
            "mcp_servers[0].headers.Authorization",
            "roles[0].mcp_env.files.TOKEN"
        ],
        "{body}"
    );
    for (var, (_, message)) in [
        "ACME_OPS_API_TOKEN",
        "CREWLET_PROVIDERS__DATABASE__DSN",
        "CREWLET_PROVIDERS__QUEUE__AUTH_TOKEN",
        "HOME",
    ]
    .iter()
    .zip(&found)
    {
        assert!(
            message.contains(&format!("`{var}`")) && message.contains("security.company_env"),
            "{message}"
        );
    }
    assert_never_leaks(&body);

    let args = with_mcp(
        "  - name: x\n    command: npx\n    args: [\"${CREWLET_API__AUTH__TOKENS}\"]\n    env: {K: \"${PULSAR_TOKEN}\"}\n",
    );
    let allow_npx = serve(
        Security {
            mcp_commands: vec!["npx".into()],
            ..Security::default()
        },
        Some(BASE),
    )
    .await;
    let (status, body) = allow_npx.put_yaml(args).await;
    assert_eq!(status, 400, "{body}");
    let paths: Vec<String> = problems(&body).into_iter().map(|(p, _)| p).collect();
    assert_eq!(paths, ["mcp_servers[0].args[0]", "mcp_servers[0].env.K"]);
    assert_eq!(s.revisions().await, 1, "nothing was stored");

    // Names the operator lists, and the default prefix, are fine.
    let mut listed = Security::default();
    listed.company_env.names.push("GITHUB_TOKEN".into());
    let s = serve(listed, Some(BASE)).await;
    let ok = with_mcp(
        "  - name: h\n    transport: http\n    url: https://mcp.example.com/mcp\n    headers: {Authorization: \"Bearer ${GITHUB_TOKEN}\", X-Other: \"${CREWLET_CO_DOCS}\"}\n",
    );
    let (status, body) = s.put_yaml(ok).await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn a_stored_revision_never_reads_a_variable_outside_the_allowlist() {
    // Stored without the API (an old revision, or `crewlet config import`):
    // the API expands its webhook secret only from the allowed names, so a
    // delivery signed with the engine's secret is not accepted.
    let company = format!(
        "{BASE}integrations:\n  github:\n    webhook_secret: \"${{ACME_OPS_API_TOKEN}}\"\n"
    );
    let s = serve(Security::default(), Some(&company)).await;
    let body = common::github_issue(1);
    let leaked = format!("{ENGINE_SECRET}-ACME_OPS_API_TOKEN");
    let sig = format!("sha256={}", hmac_hex(&leaked, &[&body]));
    let r = s
        .http
        .post(format!("{}/webhooks/github", s.base))
        .header("content-type", "application/json")
        .header("x-github-event", "issues")
        .header("x-github-delivery", "d-1")
        .header("x-hub-signature-256", sig)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let answer: Value = r.json().await.unwrap_or(Value::Null);
    assert_eq!(answer["error"], "missing_secret", "{answer}");
    assert_never_leaks(&answer);
}

#[tokio::test]
async fn hosts_outside_the_outbound_allowlist_are_refused() {
    let s = serve(
        Security {
            outbound_hosts: vec![
                "api.openai.com".into(),
                "*.anthropic.com".into(),
                "mcp.example.com".into(),
            ],
            ..Security::default()
        },
        Some(BASE),
    )
    .await;
    let provider = |base_url: &str| {
        format!(
            "name: Powers Co\nproviders:\n  llm:\n    main:\n      type: openai-compatible\n      model: m\n      api_keys: [\"${{OPENAI_API_KEY}}\"]\n      base_url: \"{base_url}\"\nroles:\n  - name: CEO\n    handle: ceo\n"
        )
    };
    for bad in [
        "https://attacker.example/v1",
        "https://api.openai.com@attacker.example/v1",
        "https://api.openai.com.attacker.example/v1",
        "https://anthropic.com.attacker.example/v1",
        "https://${CREWLET_CO_HOST}/v1",
    ] {
        let (status, body) = s.put_yaml(provider(bad)).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"], "not_allowed", "{bad}: {body}");
        assert_eq!(
            problems(&body)[0].0,
            "providers.llm.main.base_url",
            "{body}"
        );
        assert!(reason(&body).contains("security"), "{body}");
    }
    let (status, body) = s
        .put_yaml(with_mcp(
            "  - name: h\n    transport: http\n    url: https://attacker.example/mcp\n    headers: {Authorization: \"Bearer ${OPENAI_API_KEY}\"}\n",
        ))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(problems(&body)[0].0, "mcp_servers[0].url");
    assert!(
        problems(&body)[0].1.contains("`attacker.example`"),
        "{body}"
    );
    assert_eq!(s.revisions().await, 1, "nothing was stored");

    for good in ["https://api.openai.com/v1", "https://eu.api.anthropic.com"] {
        let (status, body) = s.put_yaml(provider(good)).await;
        assert_eq!(status, 201, "{good}: {body}");
    }
}

#[tokio::test]
async fn reverting_to_a_refused_revision_is_refused() {
    let s = serve(Security::default(), None).await;
    let shell = with_mcp("  - name: x\n    command: /bin/sh\n");
    let (company, _) = crewlet_config::check_company("old", &shell).unwrap();
    let old = s
        .stores
        .config
        .create(NewRevision {
            parent_revision_id: None,
            created_by: "test".into(),
            source: "cli-import".into(),
            summary: "an old revision".into(),
            payload: serde_json::to_value(&company).unwrap(),
            activate: false,
        })
        .await
        .unwrap();
    let current = import(&s.stores, BASE).await;
    let (status, body) = s
        .send(
            s.http.post(format!(
                "{}/config/revisions/{}/activate",
                s.base, old.revision_id
            )),
            Some(ADMIN),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "not_allowed");
    assert_eq!(problems(&body)[0].0, "mcp_servers[0].command");
    let active = s.stores.config.active().await.unwrap().unwrap();
    assert_eq!(
        active.revision_id, current,
        "the active revision did not change"
    );
}

#[tokio::test]
async fn bodies_over_one_mib_are_413_and_other_types_415() {
    let s = serve(Security::default(), Some(BASE)).await;
    let big = format!("{BASE}mission: \"{}\"\n", "x".repeat(1024 * 1024));
    let (status, body) = s.put_yaml(big).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"], "payload_too_large");
    for bad in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/octet-stream",
    ] {
        let (status, body) = s.put(Some(ADMIN), bad, BASE.into()).await;
        assert_eq!(status, 415, "{bad}: {body}");
        assert_eq!(body["error"], "unsupported_media_type");
        assert!(reason(&body).contains("application/yaml"), "{body}");
    }
    // Auth comes first: no token is 401 whatever the body.
    assert_eq!(s.put(None, "text/plain", BASE.into()).await.0, 401);
    assert_eq!(s.revisions().await, 1, "nothing was stored");

    let (status, body) = s
        .put(Some(ADMIN), "application/yaml; charset=utf-8", BASE.into())
        .await;
    assert_eq!(status, 201, "{body}");
    let json = serde_json::to_string(&serde_json::json!({
        "name": "Powers Co",
        "providers": {"llm": {"main": {"type": "openai", "model": "m", "api_keys": ["${OPENAI_API_KEY}"]}}},
        "roles": [{"name": "CEO", "handle": "ceo"}]
    }))
    .unwrap();
    let (status, body) = s.put(Some(ADMIN), "application/json", json).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = s.put(Some(ADMIN), "text/yaml", BASE.into()).await;
    assert_eq!(status, 201, "{body}");
}
