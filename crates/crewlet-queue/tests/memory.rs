//! The conformance suite against the in-process broker.

use std::sync::Arc;

use async_trait::async_trait;
use crewlet_queue::testsuite::QueueFactory;
use crewlet_queue::{DeliveryOptions, EventQueue, MemoryBroker};

struct Memory(MemoryBroker);

#[async_trait]
impl QueueFactory for Memory {
    async fn node(&self, delivery: DeliveryOptions) -> Arc<dyn EventQueue> {
        Arc::new(self.0.client_with(delivery))
    }
}

fn memory() -> Option<Memory> {
    Some(Memory(MemoryBroker::new()))
}

crewlet_queue::conformance_tests!(memory());

#[tokio::test]
async fn run_all_in_one_go() {
    crewlet_queue::testsuite::run_all(&Memory(MemoryBroker::new())).await;
}
