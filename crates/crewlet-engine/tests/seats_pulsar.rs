//! The restart test on a real Pulsar broker: five tasks wait in a seat's
//! durable inbox while its engine stops; a new engine process (a new Pulsar
//! client) runs each exactly once. A fresh namespace isolates the topics.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use crewlet_config::Company;
use crewlet_core::EventType;
use crewlet_engine::{Backends, EngineBuilder, EngineOptions};
use crewlet_queue::{EventQueue, PulsarOptions, PulsarQueue};
use crewlet_store::Stores;
use crewlet_test_support::fake_llm::FakeLlmServer;
use crewlet_test_support::services::pulsar_admin_url;

const WAIT: Duration = Duration::from_secs(90);

async fn node(url: &str, namespace: &str, name: &str) -> Arc<dyn EventQueue> {
    let mut options = PulsarOptions::new(url).with_namespace("public", namespace);
    options.client_name = name.into();
    Arc::new(
        PulsarQueue::connect(options)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inbox_work_survives_an_engine_restart_on_pulsar() {
    let url = crewlet_test_support::require!(pulsar);
    let namespace = format!("e2e-restart-{}", uuid::Uuid::new_v4().simple());
    let admin = pulsar_admin_url();
    let http = reqwest::Client::new();
    let created = http
        .put(format!("{admin}/admin/v2/namespaces/public/{namespace}"))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("pulsar admin: {e}"));
    assert!(
        created.status().is_success(),
        "cannot create the namespace: {}",
        created.status()
    );

    let llm = FakeLlmServer::start(direct_turn(Duration::from_millis(250)))
        .await
        .unwrap_or_else(|e| panic!("fake llm: {e}"));
    let company = Company::from_yaml(
        "restart",
        &format!(
            "name: Pulsar Restart Co\nproviders:\n  llm:\n    fake: {{type: openai-compatible, model: m, base_url: \"{}\"}}\nroles:\n  - {{name: Engineer, handle: eng}}\n",
            llm.openai_base_url()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let options = EngineOptions {
        stream_progress: false,
        ..EngineOptions::default()
    };
    let stores = Stores::memory();

    let a = Backends::new(node(&url, &namespace, "engine-a").await, stores.clone());
    let first = EngineBuilder::new(company.clone(), &a)
        .options(options.clone())
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut task_ids = Vec::new();
    for i in 0..5 {
        task_ids.push(
            first
                .assign("eng", "test", &format!("task {i}"))
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        );
    }
    wait_for("the first turn to start", WAIT, || async {
        (!events_of(&stores, EventType::TaskStarted).await.is_empty()).then_some(())
    })
    .await;
    first.shutdown().await;
    a.queue.shutdown().await;
    let done_before = events_of(&stores, EventType::TaskCompleted).await.len();
    assert!(
        done_before < 5,
        "the engine stopped with work still waiting"
    );

    let b = Backends::new(node(&url, &namespace, "engine-b").await, stores.clone());
    let second = EngineBuilder::new(company, &b)
        .options(options)
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for("all five tasks to complete", WAIT, || async {
        (events_of(&stores, EventType::TaskCompleted).await.len() >= 5).then_some(())
    })
    .await;
    // Redeliveries come after a one-second delay: leave room for a double.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = per_task(&events_of(&stores, EventType::TaskStarted).await);
    let completed = per_task(&events_of(&stores, EventType::TaskCompleted).await);
    for id in &task_ids {
        assert_eq!(started.get(id), Some(&1), "task {id}: {started:?}");
        assert_eq!(completed.get(id), Some(&1), "task {id}: {completed:?}");
    }
    second.shutdown().await;
    b.queue.shutdown().await;
    let _ = http
        .delete(format!(
            "{admin}/admin/v2/namespaces/public/{namespace}?force=true"
        ))
        .send()
        .await;
}
