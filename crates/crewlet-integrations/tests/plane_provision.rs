//! `crewlet plane provision` against the fake Plane: a first run creates
//! the missing projects, adds the seats with their roles and registers the
//! workspace webhook (Plane's generated secret written to the env file);
//! a second run changes nothing; a new `--base-url` re-points the hook.
//! Then the registered webhook is proven usable end to end: the fake
//! POSTs a signed event to it, and a receiver that checks it the way the
//! API's `/webhooks/plane` does (`webhook::plane::receive` with the
//! company's `webhook_secret`, expanded from the env file) accepts it.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use crewlet_config::{Company, interpolate};
use crewlet_integrations::Inbound;
use crewlet_integrations::plane::PlaneClient;
use crewlet_integrations::plane::provision::{
    MemberState, Options, Plan, ProjectState, Report, TokenState, WebhookPlan, apply, plan,
};
use crewlet_integrations::provision::envfile::EnvFile;
use crewlet_integrations::webhook::plane::receive;
use crewlet_test_support::plane::{FakePlane, PlaneUser};
use parking_lot::Mutex;
use serde_json::json;

use common::TempDir;

/// What the receiver saw: (status it answered, notification kind or error).
type Seen = Arc<Mutex<Vec<(u16, String)>>>;

/// A stand-in for the API's `/webhooks/plane`: the secret comes from the
/// company's `webhook_secret`, expanded with the env file at receive time.
struct Receiver {
    url: String,
    seen: Seen,
    _server: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct Ctx {
    company: Arc<Company>,
    env_file: PathBuf,
    seen: Seen,
}

async fn plane_webhook(State(ctx): State<Ctx>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let values = EnvFile::load(&ctx.env_file).unwrap().values();
    let raw = ctx
        .company
        .integrations
        .plane
        .as_ref()
        .and_then(|p| p.webhook_secret.clone())
        .unwrap_or_default();
    let secret = interpolate(&raw, |v| values.get(v).cloned()).ok();
    let (status, what) = match receive(&headers, &body, secret.as_deref().map(str::as_bytes)) {
        Ok(Inbound::Notification(n)) => (StatusCode::ACCEPTED, n.kind.clone()),
        Ok(_) => (StatusCode::OK, "ignored".to_owned()),
        // The API's own mapping: 401 bad signature, 400 bad JSON, 503 no secret.
        Err(e) => (
            StatusCode::from_u16(e.status_code()).unwrap_or(StatusCode::BAD_REQUEST),
            e.to_string(),
        ),
    };
    ctx.seen.lock().push((status.as_u16(), what));
    status
}

async fn receiver(company: &Company, env_file: PathBuf) -> Receiver {
    let seen: Seen = Arc::default();
    let ctx = Ctx {
        company: Arc::new(company.clone()),
        env_file,
        seen: seen.clone(),
    };
    let app = Router::new()
        .route("/webhooks/plane", post(plane_webhook))
        .with_state(ctx);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Receiver {
        url,
        seen,
        _server: server,
    }
}

struct World {
    plane: FakePlane,
    root: PlaneUser,
    swe: PlaneUser,
    eng: String,
    dir: TempDir,
    company: Company,
}

impl World {
    async fn new() -> World {
        let plane = FakePlane::start("acme").await;
        let root = plane.add_user("root", true);
        let swe = plane.add_user("swe", false);
        plane.add_user("pm", false);
        let eng = plane.add_project("ENG");
        plane.join(&eng, &root.id);
        let yaml = format!(
            r#"name: Plane Co
providers:
  llm:
    main: {{type: openai, model: m, api_keys: [k-k-k-k]}}
knowledge:
  plane_projects: [HB]
integrations:
  plane:
    enabled: true
    url: "{url}"
    workspace: acme
    token: "${{PLANE_ORG_TOKEN}}"
    webhook_secret: "${{PLANE_WEBHOOK_SECRET}}"
    provisioning:
      role: member
      roles: {{pm: admin}}
      projects: [OPS]
roles:
  - name: Agent PM
    handle: pm
    integrations:
      plane: {{user: pm, token: "${{PLANE_PM_TOKEN}}", project: PROD}}
units:
  - name: Engineering
    lead: Agent SWE
    integrations:
      plane: {{project: ENG}}
    roles:
      - name: Agent SWE
        handle: swe
        integrations:
          plane: {{user: swe@example.com, token: "${{PLANE_SWE_TOKEN}}"}}
"#,
            url = plane.url()
        );
        let company = Company::from_yaml("plane.yaml", &yaml).unwrap_or_else(|e| panic!("{e}"));
        let dir = TempDir::new("crewlet-plane-prov");
        std::fs::write(dir.env_path(), format!("PLANE_SWE_TOKEN={}\n", swe.token)).unwrap();
        World {
            plane,
            root,
            swe,
            eng,
            dir,
            company,
        }
    }

    fn env_path(&self) -> PathBuf {
        self.dir.env_path()
    }

    fn client(&self) -> PlaneClient {
        PlaneClient::new(&self.plane.url(), "acme", &self.root.token).unwrap()
    }

    async fn plan(&self, base_url: &str) -> Plan {
        let values = EnvFile::load(&self.env_path()).unwrap().values();
        let env = move |v: &str| values.get(v).cloned();
        let options = Options {
            base_url: Some(base_url.to_owned()),
        };
        plan(&self.company, &self.client(), &options, &env)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    async fn apply(&self, plan: &Plan) -> Report {
        let mut sink = EnvFile::load(&self.env_path()).unwrap();
        let mut lines = Vec::new();
        let report = apply(plan, &self.client(), &mut sink, &mut |l: &str| {
            lines.push(l.to_owned())
        })
        .await;
        assert_eq!(lines.len(), report.done.len() + report.failed.len());
        report
    }
}

fn issue_event() -> serde_json::Value {
    json!({
        "event": "issue",
        "action": "created",
        "webhook_id": "hook",
        "workspace_id": "ws",
        "data": {"id": "i-1", "name": "Fix the build", "project": "p-1", "description_html": "<p>red</p>"},
        "activity": {"actor": {"id": "u-9", "display_name": "Founder"}}
    })
}

#[tokio::test]
async fn a_first_run_provisions_a_second_changes_nothing_and_the_webhook_works() {
    let w = World::new().await;
    let rx = receiver(&w.company, w.env_path()).await;

    let first = w.plan(&rx.url).await;
    let projects: Vec<(String, bool)> = first
        .projects
        .iter()
        .map(|p| (p.identifier.clone(), p.state == ProjectState::Create))
        .collect();
    assert_eq!(
        projects,
        [
            ("OPS".into(), true),
            ("HB".into(), true),
            ("PROD".into(), true),
            ("ENG".into(), false)
        ],
        "{first}"
    );
    let mut members: Vec<(String, String, String)> = first
        .members
        .iter()
        .inspect(|m| assert_eq!(m.state, MemberState::Add, "{first}"))
        .map(|m| (m.handle.clone(), m.project.clone(), m.role.clone()))
        .collect();
    members.sort();
    let want: Vec<(String, String, String)> = [
        ("pm", "HB", "admin"),
        ("pm", "OPS", "admin"),
        ("pm", "PROD", "admin"),
        ("swe", "ENG", "member"),
        ("swe", "HB", "member"),
        ("swe", "OPS", "member"),
    ]
    .iter()
    .map(|(a, b, c)| ((*a).into(), (*b).into(), (*c).into()))
    .collect();
    assert_eq!(members, want);
    assert!(
        matches!(&first.webhook, WebhookPlan::Create { url, secret: None } if *url == format!("{}/webhooks/plane", rx.url)),
        "{first}"
    );
    let token = |h: &str| {
        first
            .tokens
            .iter()
            .find(|t| t.handle == h)
            .unwrap()
            .state
            .clone()
    };
    assert_eq!(token("swe"), TokenState::Ok);
    assert!(
        matches!(token("pm"), TokenState::Needed(ref how) if how.contains("PLANE_PM_TOKEN")),
        "{first}"
    );
    assert_eq!(first.changes(), 4 + 6);
    assert!(w.plane.writes().is_empty(), "planning writes nothing");

    let report = w.apply(&first).await;
    assert!(!report.failed(), "{report}");
    assert_eq!(
        report.secret_recorded.as_deref(),
        Some("PLANE_WEBHOOK_SECRET")
    );
    let hook = &w.plane.webhooks()[0];
    let env = EnvFile::load(&w.env_path()).unwrap();
    assert_eq!(
        env.get("PLANE_WEBHOOK_SECRET").as_deref(),
        Some(hook.secret_key.as_str())
    );
    assert_eq!(
        env.get("PLANE_SWE_TOKEN").as_deref(),
        Some(w.swe.token.as_str()),
        "other lines kept"
    );
    assert!(
        !format!("{report:?}{first:?}").contains(&hook.secret_key),
        "no secret in Debug"
    );
    let ops = w.plane.project_by_identifier("OPS").unwrap();
    assert_eq!(ops.members.get(&w.swe.id), Some(&15));
    let prod = w.plane.project_by_identifier("PROD").unwrap();
    assert_eq!(
        prod.members.len(),
        2,
        "the operator (creator) and pm: {prod:?}"
    );
    assert!(
        w.plane
            .project_by_identifier("ENG")
            .unwrap()
            .members
            .contains_key(&w.swe.id)
    );
    assert_eq!(w.eng, w.plane.project_by_identifier("ENG").unwrap().id);

    // Second run: nothing to change, nothing written.
    w.plane.clear_requests();
    let second = w.plan(&rx.url).await;
    assert_eq!(second.changes(), 0, "{second}");
    assert!(
        second.to_string().ends_with("nothing to change"),
        "{second}"
    );
    let report = w.apply(&second).await;
    assert!(report.done.is_empty() && !report.failed(), "{report}");
    assert!(w.plane.writes().is_empty(), "{:?}", w.plane.writes());

    // The registered webhook delivers to the receiver, signed with the
    // secret the company's webhook_secret now resolves to.
    let deliveries = w.plane.deliver(&issue_event()).await;
    assert_eq!(deliveries.len(), 1);
    assert_eq!(
        deliveries[0].status,
        Some(202),
        "{deliveries:?} {:?}",
        rx.seen.lock()
    );
    assert_eq!(
        rx.seen.lock().as_slice(),
        [(202, "issue.created".to_owned())]
    );

    // A new public URL re-points the same hook; deliveries follow it.
    let rx2 = receiver(&w.company, w.env_path()).await;
    let moved = w.plan(&rx2.url).await;
    assert!(
        matches!(&moved.webhook, WebhookPlan::Update { to, .. } if *to == format!("{}/webhooks/plane", rx2.url)),
        "{moved}"
    );
    assert_eq!(moved.changes(), 1);
    let report = w.apply(&moved).await;
    assert!(!report.failed(), "{report}");
    assert_eq!(w.plane.webhooks().len(), 1);
    let deliveries = w.plane.deliver(&issue_event()).await;
    assert_eq!(deliveries[0].status, Some(202), "{deliveries:?}");
    assert_eq!(rx2.seen.lock().len(), 1);
    assert_eq!(rx.seen.lock().len(), 1, "the old URL hears nothing more");
}

#[tokio::test]
async fn a_configured_secret_is_offered_and_a_forged_delivery_is_refused() {
    let w = World::new().await;
    std::fs::write(
        w.env_path(),
        format!(
            "PLANE_SWE_TOKEN={}\nPLANE_WEBHOOK_SECRET=our-secret\n",
            w.swe.token
        ),
    )
    .unwrap();
    let rx = receiver(&w.company, w.env_path()).await;
    let first = w.plan(&rx.url).await;
    let report = w.apply(&first).await;
    assert!(!report.failed(), "{report}");
    assert_eq!(
        report.secret_recorded, None,
        "the fake kept the offered secret"
    );
    assert_eq!(w.plane.webhooks()[0].secret_key, "our-secret");
    assert_eq!(w.plane.deliver(&issue_event()).await[0].status, Some(202));
    // The receiver's secret no longer matches the hook's: 401.
    std::fs::write(w.env_path(), "PLANE_WEBHOOK_SECRET=rotated\n").unwrap();
    assert_eq!(w.plane.deliver(&issue_event()).await[0].status, Some(401));
}

#[tokio::test]
async fn a_seat_outside_the_workspace_fails_alone_and_a_bad_operator_is_refused() {
    let w = World::new().await;
    let yaml = serde_json::to_string(&w.company).unwrap();
    let mut company: Company = serde_json::from_str(&yaml).unwrap();
    if let Some(p) = company.roles[0].integrations.plane.as_mut() {
        p.user = Some("ghost@example.com".into());
    }
    let values = EnvFile::load(&w.env_path()).unwrap().values();
    let env = move |v: &str| values.get(v).cloned();
    let p = plan(&company, &w.client(), &Options::default(), &env)
        .await
        .unwrap();
    assert!(p.blocked());
    assert!(
        p.members.iter().filter(|m| m.handle == "pm").all(
            |m| matches!(&m.state, MemberState::Fail(why) if why.contains("ghost@example.com"))
        )
    );
    assert!(matches!(p.webhook, WebhookPlan::NotManaged(_)));
    let report = w.apply(&p).await;
    assert!(report.failed(), "{report}");
    assert!(
        w.plane
            .project_by_identifier("OPS")
            .unwrap()
            .members
            .contains_key(&w.swe.id),
        "swe is still provisioned"
    );

    let bad = PlaneClient::new(&w.plane.url(), "acme", "nope").unwrap();
    let refused = plan(&w.company, &bad, &Options::default(), &env).await;
    assert!(refused.is_err_and(|e| e.to_string().contains("operator token")));
}
