//! The `## Relevant knowledge` block: a turn's Plan prompt lists the pages
//! the seat may read that match the query its auxiliary model wrote; a page
//! restricted to another seat never shows; a thin trigger is not searched
//! at turn start, but once the plan is known, into Execute. The same
//! against the fake Confluence (REST + CQL) and the fake Plane, each seat
//! searching with its own token so the backends' page permissions hold.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use crewlet_config::Company;
use crewlet_core::EventType;
use crewlet_engine::{Backends, Engine, EngineBuilder, EngineOptions};
use crewlet_integrations::knowledge::{KnowledgeSearcher, MemoryPage, MemorySearcher};
use crewlet_queue::{EventQueue, MemoryBroker};
use crewlet_store::Stores;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

fn company(llm: &str) -> Company {
    let yaml = format!(
        "name: Know Co\nproviders:\n  llm:\n    fake: {{type: openai-compatible, model: fake-model, base_url: \"{llm}\"}}\nroles:\n  - {{name: CTO, handle: cto, manages: [eng]}}\n  - {{name: Engineer, handle: eng}}\n"
    );
    Company::from_yaml("know", &yaml).unwrap_or_else(|e| panic!("{e}"))
}

fn script() -> Script {
    Script::new()
        // The auxiliary model writes the query.
        .on(
            When::no_tools().and_system_contains("You write search queries"),
            Reply::text("deploy rollback"),
        )
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "direct", "reasoning": "roll back the deploy", "steps": [{"intent": "roll back the api deploy"}]}),
            ),
        )
        .on(When::any(), Reply::text("done"))
}

fn searcher() -> Arc<MemorySearcher> {
    let s = MemorySearcher::new();
    let page = |id: &str, title: &str, body: &str, readers: &[&str]| MemoryPage {
        id: id.into(),
        container: "ENG".into(),
        title: title.into(),
        body: body.into(),
        ancestors: Vec::new(),
        readers: readers.iter().map(|r| (*r).to_owned()).collect(),
    };
    s.put(page(
        "p1",
        "Deploy rollback runbook",
        "To roll back a deploy run deploy --undo.",
        &[],
    ));
    s.put(page(
        "p2",
        "Incident deploy rollback postmortem",
        "Restricted: rollback of the deploy failed.",
        &["cto"],
    ));
    Arc::new(s)
}

async fn start(llm: &FakeLlmServer, stores: &Stores) -> Engine {
    let knowledge: Arc<dyn KnowledgeSearcher> = searcher();
    start_with(company(&llm.openai_base_url()), stores, Some(knowledge)).await
}

async fn start_with(
    company: Company,
    stores: &Stores,
    knowledge: Option<Arc<dyn KnowledgeSearcher>>,
) -> Engine {
    let queue: Arc<dyn EventQueue> = Arc::new(MemoryBroker::new().client());
    let backends = Backends::new(queue, stores.clone());
    let builder = EngineBuilder::new(company, &backends).options(EngineOptions {
        stream_progress: false,
        ..EngineOptions::default()
    });
    let builder = match knowledge {
        Some(k) => builder.knowledge(k),
        None => builder,
    };
    builder.start().await.unwrap_or_else(|e| panic!("{e}"))
}

/// Both seats ask the same question; eng's Plan sees only the public page,
/// cto's sees the page restricted to cto too.
async fn eng_and_cto_see_what_they_may(company: Company, llm: &FakeLlmServer) {
    let stores = Stores::memory();
    let engine = start_with(company, &stores, None).await;
    for (seat, mark) in [("eng", "MARK-ENG"), ("cto", "MARK-CTO")] {
        engine
            .assign(
                seat,
                "api",
                &format!("{mark} the api deploy broke production, please roll it back"),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    done(&stores, 2).await;
    let eng = prompts(llm, "MARK-ENG", "Plan");
    assert!(eng[0].contains("## Relevant knowledge"), "{}", eng[0]);
    assert!(eng[0].contains("Deploy rollback runbook"), "{}", eng[0]);
    assert!(
        !eng[0].contains("postmortem"),
        "a page restricted to cto reached eng"
    );
    let cto = prompts(llm, "MARK-CTO", "Plan");
    assert!(
        cto[0].contains("Incident deploy rollback postmortem"),
        "{}",
        cto[0]
    );
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluence_pages_reach_the_plan_as_the_seat_may_read_them() {
    use crewlet_test_support::confluence::FakeConfluence;
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let wiki = FakeConfluence::start().await;
    let admin = wiki.add_user("admin");
    let eng = wiki.add_user("eng");
    let cto = wiki.add_user("cto");
    wiki.add_space("ENG");
    wiki.add_page(
        "ENG",
        "Deploy rollback runbook",
        "<p>To roll back a deploy run deploy --undo.</p>",
        None,
    );
    let secret = wiki.add_page(
        "ENG",
        "Incident deploy rollback postmortem",
        "<p>The rollback of the deploy failed.</p>",
        None,
    );
    wiki.restrict(&secret, &[cto.account_id.as_str()]);
    let yaml = format!(
        "name: Wiki Co\nproviders:\n  llm:\n    fake: {{type: openai-compatible, model: fake-model, base_url: \"{llm}\"}}\nintegrations:\n  confluence: {{url: \"{url}\", email: {ae}, token: {at}}}\nroles:\n  - name: CTO\n    handle: cto\n    manages: [eng]\n    integrations: {{confluence: {{user: {ce}, token: {ct}}}}}\n  - name: Engineer\n    handle: eng\n    integrations: {{confluence: {{user: {ee}, token: {et}}}}}\n",
        llm = llm.openai_base_url(),
        url = wiki.url(),
        ae = admin.email,
        at = admin.token,
        ce = cto.email,
        ct = cto.token,
        ee = eng.email,
        et = eng.token,
    );
    let company = Company::from_yaml("wiki", &yaml).unwrap_or_else(|e| panic!("{e}"));
    eng_and_cto_see_what_they_may(company, &llm).await;
    assert!(
        wiki.requests().iter().any(|r| r
            .param("cql")
            .is_some_and(|c| c.contains("deploy rollback"))),
        "no CQL search reached the wiki"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_pages_reach_the_plan_as_the_seat_may_read_them() {
    use crewlet_test_support::plane::FakePlane;
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let plane = FakePlane::start("acme").await;
    let admin = plane.add_user("admin", true);
    let eng = plane.add_user("eng", false);
    let cto = plane.add_user("cto", false);
    let project = plane.add_project("ENG");
    for u in [&admin, &eng, &cto] {
        plane.join(&project, &u.id);
    }
    plane.add_page(
        &project,
        "Deploy rollback runbook",
        "<p>To roll back a deploy run deploy --undo.</p>",
        None,
    );
    let secret = plane.add_page(
        &project,
        "Incident deploy rollback postmortem",
        "<p>The rollback of the deploy failed.</p>",
        None,
    );
    plane.restrict(&secret, &[cto.id.as_str()]);
    let yaml = format!(
        "name: Plane Co\nproviders:\n  llm:\n    fake: {{type: openai-compatible, model: fake-model, base_url: \"{llm}\"}}\nintegrations:\n  plane: {{enabled: true, url: \"{url}\", workspace: acme, token: {at}, webhook_secret: s3cret-s3cret}}\nroles:\n  - name: CTO\n    handle: cto\n    manages: [eng]\n    integrations: {{plane: {{user: {cu}, token: {ct}}}}}\n  - name: Engineer\n    handle: eng\n    integrations: {{plane: {{user: {eu}, token: {et}}}}}\n",
        llm = llm.openai_base_url(),
        url = plane.url(),
        at = admin.token,
        cu = cto.email,
        ct = cto.token,
        eu = eng.email,
        et = eng.token,
    );
    let company = Company::from_yaml("plane", &yaml).unwrap_or_else(|e| panic!("{e}"));
    eng_and_cto_see_what_they_may(company, &llm).await;
}

/// The system prompts of `phase` calls for the task holding `marker`.
fn prompts(llm: &FakeLlmServer, marker: &str, phase: &str) -> Vec<String> {
    llm.requests()
        .into_iter()
        .map(|r| r.body.to_string())
        .filter(|b| b.contains(marker) && b.contains(&format!("# Phase: {phase}")))
        .collect()
}

async fn done(stores: &Stores, n: usize) {
    wait_for("the turns to complete", WAIT, || async {
        (events_of(stores, EventType::TaskCompleted).await.len() >= n).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_sees_the_pages_its_seat_may_read() {
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let stores = Stores::memory();
    let engine = start(&llm, &stores).await;
    engine
        .assign(
            "eng",
            "api",
            "MARK-ENG the api deploy broke production, please roll it back",
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    engine
        .assign(
            "cto",
            "api",
            "MARK-CTO the api deploy broke production, please roll it back",
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    done(&stores, 2).await;

    let eng = prompts(&llm, "MARK-ENG", "Plan");
    assert!(!eng.is_empty());
    assert!(eng[0].contains("## Relevant knowledge"), "{}", eng[0]);
    assert!(eng[0].contains("Deploy rollback runbook"));
    assert!(
        !eng[0].contains("postmortem"),
        "a page restricted to cto reached eng"
    );
    let cto = prompts(&llm, "MARK-CTO", "Plan");
    assert!(
        cto[0].contains("Incident deploy rollback postmortem"),
        "{}",
        cto[0]
    );

    let fetched = events_of(&stores, EventType::KnowledgePrefetched).await;
    assert_eq!(fetched.len(), 2);
    assert!(
        fetched
            .iter()
            .all(|e| e.payload["query"] == "deploy rollback")
    );
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thin_trigger_is_searched_after_the_plan_into_execute() {
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let stores = Stores::memory();
    let engine = start(&llm, &stores).await;
    engine
        .assign("eng", "api", "THIN yes")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    done(&stores, 1).await;
    let plan = prompts(&llm, "THIN yes", "Plan");
    assert!(
        !plan[0].contains("## Relevant knowledge"),
        "a thin trigger was searched at turn start"
    );
    let execute = prompts(&llm, "THIN yes", "Execute");
    assert!(!execute.is_empty());
    assert!(
        execute[0].contains("## Relevant knowledge"),
        "{}",
        execute[0]
    );
    assert!(execute[0].contains("Deploy rollback runbook"));
    let fetched = events_of(&stores, EventType::KnowledgePrefetched).await;
    assert_eq!(fetched.len(), 1);
    assert_eq!(fetched[0].payload["worker"], "knowledge_refetch");
    engine.shutdown().await;
}
