//! The conformance suite against a real Apache Pulsar broker
//! (`cargo xtask services up`). Skipped when the broker is absent, except
//! under `CI=true` where that is a failure.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use crewlet_queue::testsuite::QueueFactory;
use crewlet_queue::{DeliveryOptions, EventQueue, PulsarOptions, PulsarQueue};

struct Pulsar {
    url: String,
}

pub fn options(url: &str, delivery: DeliveryOptions) -> PulsarOptions {
    let mut o = PulsarOptions::new(url).with_delivery(delivery);
    o.stream_refresh = Duration::from_millis(300);
    o.publish_backoff = vec![Duration::from_millis(100); 4];
    o
}

#[async_trait]
impl QueueFactory for Pulsar {
    async fn node(&self, delivery: DeliveryOptions) -> Arc<dyn EventQueue> {
        match PulsarQueue::connect(options(&self.url, delivery)).await {
            Ok(q) => Arc::new(q),
            Err(e) => panic!("cannot connect to {}: {e}", self.url),
        }
    }

    fn patience(&self) -> Duration {
        Duration::from_secs(60)
    }

    fn grace(&self) -> Duration {
        Duration::from_secs(1)
    }
}

fn pulsar() -> Option<Pulsar> {
    crewlet_test_support::services::require_pulsar().map(|url| Pulsar { url })
}

crewlet_queue::conformance_tests!(pulsar());
