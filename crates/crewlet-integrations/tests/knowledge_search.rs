//! The knowledge searchers against the fake Confluence and the fake Plane:
//! a seat on its own account does not see a page restricted to another
//! user; a seat on the org account with an empty scope searches nothing;
//! the scope list narrows hits; auto-drafts (and the Tool Skills project)
//! never surface; an unreachable server gives no hits, never an error;
//! Plane's strict AND search is relaxed to shorter queries.

use std::collections::HashMap;

use crewlet_config::Company;
use crewlet_integrations::knowledge::{
    AUTO_DRAFTED_PARENT, ConfluenceSearcher, KnowledgeHit, KnowledgeSearcher, PlaneSearcher,
};
use crewlet_test_support::confluence::FakeConfluence;
use crewlet_test_support::plane::FakePlane;

const LLM: &str = "providers:\n  llm:\n    main: {type: openai, model: m, api_keys: [k-k-k-k]}\n";

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |v: &str| map.get(v).cloned()
}

fn company(yaml: &str) -> Company {
    Company::from_yaml("company.yaml", yaml).unwrap_or_else(|e| panic!("{e}"))
}

fn titles(hits: &[KnowledgeHit]) -> Vec<&str> {
    hits.iter().map(|h| h.title.as_str()).collect()
}

/// A port nothing listens on.
async fn dead_url() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}")
}

struct Wiki {
    fake: FakeConfluence,
    env: Vec<(&'static str, String)>,
}

async fn wiki() -> Wiki {
    let fake = FakeConfluence::start().await;
    let org = fake.add_user("org");
    let eng = fake.add_user("eng");
    let cto = fake.add_user("cto");
    fake.add_space("ENG");
    fake.add_space("HB");
    fake.add_page(
        "ENG",
        "Deploy runbook",
        "<p>How to <b>deploy</b> the API &amp; roll back.</p>",
        None,
    );
    let secret = fake.add_page("ENG", "Secret deploy plan", "<p>deploy in secret</p>", None);
    fake.restrict(&secret, &[&cto.account_id]);
    fake.add_page(
        "HB",
        "Handbook: deploy etiquette",
        "<p>deploy politely</p>",
        None,
    );
    let skills = fake.add_page("ENG", AUTO_DRAFTED_PARENT, "<p>drafts live here</p>", None);
    let group = fake.add_page("ENG", "Draft group", "<p>group</p>", Some(&skills));
    fake.add_page(
        "ENG",
        "Draft deploy skill",
        "<p>deploy draft</p>",
        Some(&group),
    );
    fake.add_space("TS");
    fake.add_page(
        "TS",
        "Deploy tool skill",
        "<p>deploy with the tool</p>",
        None,
    );
    let env = vec![
        ("ORG_TOKEN", org.token),
        ("ENG_TOKEN", eng.token),
        ("CTO_TOKEN", cto.token),
    ];
    Wiki { fake, env }
}

fn wiki_company(url: &str, spaces: &str) -> Company {
    company(&format!(
        r#"name: Wiki Co
{LLM}knowledge:
  confluence_spaces: {spaces}
integrations:
  confluence:
    url: "{url}"
    email: org@example.com
    token: "${{ORG_TOKEN}}"
roles:
  - name: Eng
    handle: eng
    integrations:
      confluence: {{user: eng@example.com, token: "${{ENG_TOKEN}}"}}
  - name: CTO
    handle: cto
    integrations:
      confluence: {{token: "${{CTO_TOKEN}}"}}
  - name: Ops
    handle: ops
"#
    ))
}

impl Wiki {
    fn searcher(&self, spaces: &str) -> ConfluenceSearcher {
        let pairs: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        ConfluenceSearcher::from_company(&wiki_company(&self.fake.url(), spaces), env_of(&pairs))
            .expect("a confluence searcher")
    }
}

#[tokio::test]
async fn confluence_searches_as_the_seat_and_respects_restrictions() {
    let w = wiki().await;
    let s = w.searcher("[]");
    assert_eq!(s.name(), "confluence");
    let eng = s.search("eng", "deploy", 10, &[]).await;
    assert_eq!(
        titles(&eng),
        ["Deploy runbook", "Handbook: deploy etiquette"],
        "{eng:#?}"
    );
    let runbook = &eng[0];
    assert_eq!(runbook.container, "ENG");
    assert_eq!(runbook.snippet, "How to deploy the API & roll back.");
    assert_eq!(
        runbook.url,
        format!("{}/spaces/ENG/pages/{}", w.fake.url(), runbook.page_id)
    );
    let searches: Vec<_> = w
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/search"))
        .collect();
    assert_eq!(
        searches[0].user.as_deref(),
        Some("acc-eng"),
        "Basic user:token of the seat"
    );
    assert_eq!(
        searches[0].param("cql"),
        Some(r#"type = page AND text ~ "deploy""#)
    );
    // The CTO (Bearer, its own token) sees the restricted page.
    let cto = s.search("cto", "deploy", 10, &[]).await;
    assert!(titles(&cto).contains(&"Secret deploy plan"), "{cto:#?}");
    assert_eq!(
        w.fake.requests().last().unwrap().user.as_deref(),
        Some("acc-cto")
    );
    // Never the auto-drafts (at any depth) nor the Tool Skills space.
    for hits in [&eng, &cto] {
        assert!(
            !titles(hits)
                .iter()
                .any(|t| t.contains("Draft") || t.contains("tool skill")),
            "{hits:#?}"
        );
    }
    // Other excluded ancestors are honoured too.
    let ex = s.search("cto", "group", 10, &[]).await;
    assert!(ex.is_empty(), "a page under the auto-draft parent: {ex:#?}");
    assert!(s.search("eng", "deploy", 1, &[]).await.len() == 1);
}

#[tokio::test]
async fn confluence_org_token_with_an_empty_scope_searches_nothing_and_a_scope_narrows() {
    let w = wiki().await;
    let s = w.searcher("[]");
    assert!(!s.can_search("ops") && s.can_search("eng") && !s.can_search("stranger"));
    w.fake.clear_requests();
    assert!(s.search("ops", "deploy", 10, &[]).await.is_empty());
    assert!(w.fake.requests().is_empty(), "no request at all");

    let scoped = w.searcher("[hb]");
    assert!(scoped.can_search("ops"));
    let ops = scoped.search("ops", "deploy", 10, &[]).await;
    assert_eq!(titles(&ops), ["Handbook: deploy etiquette"]);
    let last = w.fake.requests().pop().unwrap();
    assert_eq!(last.user.as_deref(), Some("acc-org"), "the org account");
    assert_eq!(
        last.param("cql"),
        Some(r#"space IN ("HB") AND type = page AND text ~ "deploy""#)
    );
    let eng = scoped.search("eng", "deploy", 10, &[]).await;
    assert_eq!(
        titles(&eng),
        ["Handbook: deploy etiquette"],
        "the scope narrows own accounts too"
    );
}

#[tokio::test]
async fn confluence_unreachable_or_refused_gives_no_hits() {
    let url = dead_url().await;
    let s =
        ConfluenceSearcher::from_company(&wiki_company(&url, "[]"), env_of(&[("ENG_TOKEN", "t")]))
            .unwrap();
    assert!(s.search("eng", "deploy", 5, &[]).await.is_empty());
    let w = wiki().await;
    let s = ConfluenceSearcher::from_company(
        &wiki_company(&w.fake.url(), "[]"),
        env_of(&[("ENG_TOKEN", "wrong")]),
    )
    .unwrap();
    assert!(
        s.search("eng", "deploy", 5, &[]).await.is_empty(),
        "a 401 is no hits"
    );
    assert_eq!(w.fake.requests().last().unwrap().user, None);
    // Quotes and backslashes cannot break out of the CQL string.
    let s = w.searcher("[]");
    assert!(
        s.search("eng", r#"x" OR space = "HB"#, 5, &[])
            .await
            .is_empty()
    );
}

struct Tracker {
    fake: FakePlane,
    env: Vec<(&'static str, String)>,
    eng: String,
    hb: String,
    eng_user: String,
}

async fn tracker() -> Tracker {
    let fake = FakePlane::start("acme").await;
    let org = fake.add_user("org", false);
    let eng = fake.add_user("eng", false);
    let cto = fake.add_user("cto", false);
    let eng_p = fake.add_project("ENG");
    let hb = fake.add_project("HB");
    let skills = fake.add_project("TS");
    for p in [&eng_p, &hb, &skills] {
        for u in [&org, &eng, &cto] {
            fake.join(p, &u.id);
        }
    }
    fake.add_page(
        &eng_p,
        "Deploy runbook",
        "<p>How to deploy the api with kubectl</p>",
        None,
    );
    let secret = fake.add_page(
        &eng_p,
        "Secret deploy plan",
        "<p>deploy in secret</p>",
        None,
    );
    fake.restrict(&secret, &[&cto.id]);
    fake.add_page(
        &hb,
        "Handbook deploy etiquette",
        "<p>deploy politely</p>",
        None,
    );
    let drafts = fake.add_page(&eng_p, AUTO_DRAFTED_PARENT, "<p>drafts</p>", None);
    fake.add_page(
        &eng_p,
        "Deploy draft skill",
        "<p>deploy draft</p>",
        Some(&drafts),
    );
    fake.add_page(
        &eng_p,
        "[Auto-draft] Deploy helper",
        "<p>deploy helper</p>",
        None,
    );
    fake.add_page(
        &skills,
        "Deploy tool skill",
        "<p>deploy with the tool</p>",
        None,
    );
    let eng_user = eng.id.clone();
    let env = vec![
        ("ORG_TOKEN", org.token),
        ("ENG_TOKEN", eng.token),
        ("CTO_TOKEN", cto.token),
    ];
    Tracker {
        fake,
        env,
        eng: eng_p,
        hb,
        eng_user,
    }
}

fn tracker_company(url: &str, projects: &str) -> Company {
    company(&format!(
        r#"name: Plane Co
{LLM}knowledge:
  plane_projects: {projects}
integrations:
  plane:
    enabled: true
    url: "{url}"
    workspace: acme
    token: "${{ORG_TOKEN}}"
    webhook_secret: "${{PLANE_WEBHOOK_SECRET}}"
roles:
  - name: Eng
    handle: eng
    integrations:
      plane: {{user: eng, token: "${{ENG_TOKEN}}"}}
  - name: CTO
    handle: cto
    integrations:
      plane: {{user: cto, token: "${{CTO_TOKEN}}"}}
  - name: Ops
    handle: ops
"#
    ))
}

impl Tracker {
    fn searcher(&self, projects: &str) -> PlaneSearcher {
        let pairs: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        PlaneSearcher::from_company(&tracker_company(&self.fake.url(), projects), env_of(&pairs))
            .expect("a plane searcher")
    }

    fn searches(&self) -> Vec<crewlet_test_support::plane::Request> {
        self.fake
            .requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/pages/search/"))
            .collect()
    }
}

#[tokio::test]
async fn plane_searches_as_the_seat_and_hides_restricted_pages_drafts_and_skills() {
    let t = tracker().await;
    let s = t.searcher("[]");
    assert_eq!(s.name(), "plane");
    let eng = s.search("eng", "deploy", 10, &[]).await;
    let mut got = titles(&eng);
    got.sort_unstable();
    assert_eq!(
        got,
        ["Deploy runbook", "Handbook deploy etiquette"],
        "{eng:#?}"
    );
    let runbook = eng.iter().find(|h| h.title == "Deploy runbook").unwrap();
    assert_eq!(runbook.container, "ENG");
    assert!(runbook.snippet.contains("kubectl"), "{runbook:?}");
    assert_eq!(
        runbook.url,
        format!(
            "{}/acme/projects/{}/pages/{}",
            t.fake.url(),
            t.eng,
            runbook.page_id
        )
    );
    let search = t.searches().pop().unwrap();
    assert_eq!(
        search.user.as_deref(),
        Some(t.eng_user.as_str()),
        "the seat's own token"
    );
    assert_eq!(search.param("query"), Some("deploy"));
    assert_eq!(
        search.param("projects"),
        None,
        "unscoped on the seat's own token"
    );
    let cto = s.search("cto", "deploy", 10, &[]).await;
    assert!(titles(&cto).contains(&"Secret deploy plan"), "{cto:#?}");
    assert!(
        !titles(&cto)
            .iter()
            .any(|t| t.contains("draft") || t.contains("Draft") || t.contains("tool")),
        "{cto:#?}"
    );
}

#[tokio::test]
async fn plane_org_token_with_an_empty_scope_searches_nothing_and_a_scope_narrows() {
    let t = tracker().await;
    let s = t.searcher("[]");
    assert!(!s.can_search("ops") && s.can_search("eng"));
    assert!(s.search("ops", "deploy", 10, &[]).await.is_empty());
    assert!(t.fake.requests().is_empty());

    let scoped = t.searcher("[hb]");
    assert!(scoped.can_search("ops"));
    let ops = scoped.search("ops", "deploy", 10, &[]).await;
    assert_eq!(titles(&ops), ["Handbook deploy etiquette"]);
    let search = t.searches().pop().unwrap();
    assert_eq!(search.param("projects"), Some(t.hb.as_str()));
    let eng = scoped.search("eng", "deploy", 10, &[]).await;
    assert_eq!(titles(&eng), ["Handbook deploy etiquette"]);
    // A scope naming no visible project searches nothing (never widens).
    let nowhere = t.searcher("[NOPE]");
    assert!(nowhere.search("eng", "deploy", 10, &[]).await.is_empty());
}

#[tokio::test]
async fn plane_relaxes_a_too_strict_query_and_survives_an_unreachable_server() {
    let t = tracker().await;
    let s = t.searcher("[]");
    let hits = s
        .search(
            "eng",
            "runbook kubectl rollback canary strategy blue green",
            5,
            &[],
        )
        .await;
    assert_eq!(titles(&hits), ["Deploy runbook"]);
    let queries: Vec<String> = t
        .searches()
        .iter()
        .map(|r| r.param("query").unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        queries,
        [
            "runbook kubectl rollback canary strategy blue green",
            "runbook kubectl rollback canary",
            "runbook kubectl"
        ]
    );
    // Over 16 distinct words is trimmed (the server refuses more).
    let long: Vec<String> = (0..30).map(|i| format!("w{i}")).collect();
    s.search("eng", &format!("deploy {}", long.join(" ")), 5, &[])
        .await;
    let sent = t.searches()[3].param("query").unwrap().split(' ').count();
    assert_eq!(sent, 16);

    let url = dead_url().await;
    let dead =
        PlaneSearcher::from_company(&tracker_company(&url, "[]"), env_of(&[("ENG_TOKEN", "t")]))
            .unwrap();
    assert!(dead.search("eng", "deploy", 5, &[]).await.is_empty());
    let refused = PlaneSearcher::from_company(
        &tracker_company(&t.fake.url(), "[]"),
        env_of(&[("ENG_TOKEN", "wrong")]),
    )
    .unwrap();
    assert!(refused.search("eng", "deploy", 5, &[]).await.is_empty());
}
