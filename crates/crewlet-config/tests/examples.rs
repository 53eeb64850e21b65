//! The shipped examples validate, and resolve to the org chart they describe.

use std::path::{Path, PathBuf};

use crewlet_config::{
    Bootstrap, Company, Organization, Phase, QueueKind, SeatKind, Tier, check_bootstrap,
    check_company, interpolate_all,
};
use crewlet_core::AgentId;

fn example(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(rel)
}

fn company(rel: &str) -> (Company, Organization) {
    let path = example(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    match check_company(&path.display().to_string(), &text) {
        Ok(pair) => pair,
        Err(problems) => {
            let listed: Vec<String> = problems.iter().map(ToString::to_string).collect();
            panic!("{rel} is not valid:\n{}", listed.join("\n"));
        }
    }
}

fn bootstrap(rel: &str) -> Bootstrap {
    let path = example(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    match check_bootstrap(&path.display().to_string(), &text) {
        Ok(b) => b,
        Err(problems) => {
            let listed: Vec<String> = problems.iter().map(ToString::to_string).collect();
            panic!("{rel} is not valid:\n{}", listed.join("\n"));
        }
    }
}

fn chain(org: &Organization, handle: &str) -> Vec<String> {
    org.seat(handle)
        .map(|s| s.manager_chain.to_vec())
        .unwrap_or_default()
}

#[test]
fn quickstart_company_validates_and_resolves() {
    let (company, org) = company("quickstart/company.yaml");
    assert_eq!(company.name, "Quickstart Co");
    let handles: Vec<&str> = org.seats().iter().map(|s| s.handle.as_str()).collect();
    assert_eq!(handles, ["founder", "ceo", "pm", "cto", "eng"]);
    assert_eq!(org.seat("founder").map(|s| s.kind), Some(SeatKind::Human));
    assert_eq!(org.agents().count(), 4);
    assert_eq!(chain(&org, "eng"), ["cto", "ceo", "founder"]);
    assert_eq!(chain(&org, "pm"), ["ceo", "founder"]);
    assert_eq!(chain(&org, "founder"), Vec::<String>::new());
    assert_eq!(
        org.seat("ceo").map(|s| s.reports.clone()),
        Some(vec!["cto".into(), "pm".into()])
    );
    assert_eq!(
        org.unit("Engineering").and_then(|u| u.lead.clone()),
        Some("cto".into())
    );
    let eng = org.seat("eng").map(|s| s.unit_path.clone());
    assert_eq!(eng, Some(vec!["Engineering".to_string()]));
    // Every phase runs on OpenAI, falling back to the local model.
    let role = &org
        .seat("eng")
        .map(|s| s.role.clone())
        .unwrap_or_else(|| panic!("no eng"));
    for phase in Phase::ALL {
        assert_eq!(company.llm_chain(role, phase), ["main", "local"]);
    }
    let local = &company.providers.llm["local"];
    assert_eq!(local.kind, crewlet_config::LlmKind::Local);
    assert_eq!(local.model, "smollm2-135m-instruct");
    assert!(local.path.is_none());
}

#[test]
fn quickstart_bootstrap_is_the_embedded_setup() {
    let b = bootstrap("quickstart/config.yaml");
    assert!(b.providers.queue.is_none());
    assert!(b.providers.database.is_none());
    assert_eq!((b.api.host.as_str(), b.api.port), ("127.0.0.1", 8000));
    assert_eq!(
        b.api.auth.allow_anonymous_read,
        Some(crewlet_config::AnonymousRead::Loopback)
    );
}

#[test]
fn quickstart_provider_expands_only_when_built() {
    let (company, _) = company("quickstart/company.yaml");
    let main = &company.providers.llm["main"];
    assert_eq!(
        main.api_keys,
        ["${OPENAI_API_KEY}"],
        "validation leaves references alone"
    );
    let env = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-test".to_string());
    let built = interpolate_all(main, env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(built.api_keys, ["sk-test"]);
    let missing = interpolate_all(main, |_| None).err().map(|e| e.to_string());
    assert_eq!(
        missing.as_deref(),
        Some("environment variable `OPENAI_API_KEY` is not set (referenced at api_keys[0])")
    );
}

#[test]
fn acme_company_validates_and_resolves() {
    let (company, org) = company("acme/company.yaml");
    assert_eq!(org.seats().len(), 12);
    assert_eq!(
        org.seats()
            .iter()
            .filter(|s| s.kind == SeatKind::Human)
            .count(),
        2
    );
    let paths: Vec<String> = org.units().iter().map(|u| u.path.join("/")).collect();
    assert_eq!(
        paths,
        [
            "Engineering",
            "Engineering/Platform",
            "Engineering/Platform/Release",
            "Engineering/Product Engineering",
            "Product",
            "Product/Docs",
        ]
    );
    // Release has no lead of its own: it inherits Platform's.
    let release = org
        .unit("Release")
        .unwrap_or_else(|| panic!("no Release unit"));
    assert_eq!(release.lead.as_deref(), Some("platform-lead"));
    assert!(release.lead_inherited);
    // The SRE `manages: [Release]` too: two managers, and the first in
    // seat order (the Platform Lead, before the SRE in Platform's roles) is
    // the one the chain follows, as in the original engine.
    assert_eq!(
        chain(&org, "release-eng"),
        ["platform-lead", "vp-eng", "ceo", "founder"]
    );
    assert_eq!(
        org.seat("release-eng").map(|s| s.managers.clone()),
        Some(vec!["platform-lead".to_string(), "sre".to_string()])
    );
    assert_eq!(chain(&org, "tech-writer"), ["cpo", "ceo", "founder"]);
    assert_eq!(chain(&org, "designer"), ["cpo", "ceo", "founder"]);
    assert_eq!(
        chain(&org, "frontend"),
        ["pe-lead", "vp-eng", "ceo", "founder"]
    );
    assert_eq!(org.seat("vp-eng").map(|s| s.reports.len()), Some(2));
    // Per-phase models.
    let role = |h: &str| {
        org.seat(h)
            .map(|s| s.role.clone())
            .unwrap_or_else(|| panic!("{h}"))
    };
    let vp = role("vp-eng");
    assert_eq!(company.llm_chain(&vp, Phase::Plan), ["claude"]);
    assert_eq!(company.llm_chain(&vp, Phase::Execute), ["gpt", "local"]);
    assert_eq!(company.llm_chain(&vp, Phase::Auxiliary), ["gpt-mini"]);
    let platform = role("platform-lead");
    assert_eq!(
        company.llm_chain(&platform, Phase::Execute),
        ["gpt", "claude"]
    );
    assert_eq!(company.llm_chain(&platform, Phase::Review), ["claude"]);
    let cpo = role("cpo");
    assert_eq!(company.llm_chain(&cpo, Phase::Review), ["claude"]);
    assert_eq!(company.llm_chain(&cpo, Phase::Auxiliary), ["gpt-mini"]);
    // mcp_env per server: the unit's entries, overlaid by the role's.
    let sre = org
        .seat("sre")
        .and_then(|s| s.mcp_env.get("github").cloned())
        .unwrap_or_default();
    assert_eq!(
        sre.get("GITHUB_TOOLSETS").map(String::as_str),
        Some("repos,issues,pull_requests,actions")
    );
    assert_eq!(
        sre.get("GITHUB_PERSONAL_ACCESS_TOKEN").map(String::as_str),
        Some("${SRE_GITHUB_TOKEN}")
    );
    // The org chart of everything under Engineering.
    let eng = org
        .units()
        .iter()
        .position(|u| u.name == "Engineering")
        .unwrap_or(0);
    assert_eq!(org.seats_under(eng).len(), 7);
}

#[test]
fn acme_bootstrap_uses_pulsar_and_postgres() {
    let b = bootstrap("acme/config.yaml");
    let queue = b.providers.queue.unwrap_or_else(|| panic!("no queue"));
    assert_eq!(queue.kind, QueueKind::Pulsar);
    assert_eq!(queue.tenant, "public");
    let db = b
        .providers
        .database
        .unwrap_or_else(|| panic!("no database"));
    assert_eq!(db.embedding_dim, 1536);
    assert_eq!(b.api.auth.tokens.len(), 2);
    assert_eq!(
        b.api.auth.allow_anonymous_read,
        Some(crewlet_config::AnonymousRead::Refused)
    );
}

#[test]
fn examples_are_detected_as_their_tier() {
    for (rel, tier) in [
        ("quickstart/company.yaml", Tier::Company),
        ("quickstart/config.yaml", Tier::Bootstrap),
        ("acme/company.yaml", Tier::Company),
        ("acme/config.yaml", Tier::Bootstrap),
    ] {
        let text = std::fs::read_to_string(example(rel)).unwrap_or_default();
        assert_eq!(Tier::detect(&text), Some(tier), "{rel}");
    }
}

#[test]
fn agent_ids_are_stable() {
    let (_, first) = company("acme/company.yaml");
    let (_, second) = company("acme/company.yaml");
    for (a, b) in first.seats().iter().zip(second.seats()) {
        assert_eq!(a.agent_id, b.agent_id);
        assert_eq!(a.agent_id, AgentId::for_seat("Acme Robotics", &a.handle));
    }
    // Pinned: a change here would orphan every stored diary, episode and budget.
    let sre = first.seat("sre").map(|s| s.agent_id.to_string());
    assert_eq!(sre.as_deref(), Some(PINNED_SRE_ID));
    assert_eq!(
        first
            .seat_by_id(AgentId::for_seat("Acme Robotics", "sre"))
            .map(|s| s.handle.as_str()),
        Some("sre")
    );
}

/// `uuid5(c1ea9c6e-3f5d-4c9c-9e9f-1d2c3b4a5e6f, "Acme Robotics:sre")`, the
/// original engine's recipe (computed with Python's `uuid.uuid5`).
const PINNED_SRE_ID: &str = "1438b840-5746-5a32-b918-86ea973959c2";

#[test]
fn companies_round_trip_through_json() {
    // The API accepts JSON bodies and the store keeps revisions as JSONB:
    // JSON is YAML, so the same validation reads it back unchanged.
    for rel in ["quickstart/company.yaml", "acme/company.yaml"] {
        let (company, _) = company(rel);
        let json = serde_json::to_string(&company).unwrap_or_default();
        let back = Company::from_yaml("revision.json", &json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, company, "{rel}");
        assert!(back.validate().is_ok(), "{rel}");
    }
}
