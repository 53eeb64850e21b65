//! The dev/CI Pulsar standalone answers on its binary and admin ports.
//!
//! Needs `cargo xtask services up`. Without the broker this test skips,
//! except under `CI=true`, where it fails.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use xtask::services::config::{
    PULSAR_CLUSTER, PULSAR_DEFAULT_NAMESPACE, pulsar_admin_url, pulsar_url,
};

const TIMEOUT: Duration = Duration::from_secs(5);

/// `host:port` of `scheme://host:port[/...]`.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// Fails under CI, skips elsewhere.
fn unreachable(what: &str, why: &str) {
    let msg = format!("Pulsar not reachable at {what} ({why}); run `cargo xtask services up`");
    assert!(!xtask::in_ci(), "CI=true: {msg}");
    crewlet_test_support::services::skip(&msg);
}

#[test]
fn broker_and_admin_api_answer() {
    let broker = std::env::var("CREWLET_TEST_PULSAR_URL").unwrap_or_else(|_| pulsar_url());
    let admin =
        std::env::var("CREWLET_TEST_PULSAR_ADMIN_URL").unwrap_or_else(|_| pulsar_admin_url());

    let broker_addr = host_port(&broker);
    let connected = broker_addr
        .to_socket_addrs()
        .map(|mut addrs| addrs.any(|a| TcpStream::connect_timeout(&a, TIMEOUT).is_ok()))
        .unwrap_or(false);
    if !connected {
        unreachable(&broker, "TCP connect failed");
        return;
    }

    let admin_addr = host_port(&admin);
    let clusters = match xtask::http::get(&admin_addr, "/admin/v2/clusters", TIMEOUT) {
        Ok(r) => r,
        Err(e) => {
            unreachable(&admin, &format!("{e:#}"));
            return;
        }
    };
    assert_eq!(
        clusters.status, 200,
        "GET /admin/v2/clusters: {}",
        clusters.body
    );
    assert!(
        clusters.body.contains(PULSAR_CLUSTER),
        "cluster {PULSAR_CLUSTER} missing from {}",
        clusters.body
    );

    let namespaces = xtask::http::get(&admin_addr, "/admin/v2/namespaces/public", TIMEOUT)
        .expect("GET /admin/v2/namespaces/public");
    assert!(
        namespaces.is_success() && namespaces.body.contains(PULSAR_DEFAULT_NAMESPACE),
        "namespace {PULSAR_DEFAULT_NAMESPACE} missing: {} {}",
        namespaces.status,
        namespaces.body
    );
}
