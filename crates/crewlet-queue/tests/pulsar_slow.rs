//! SLOW Pulsar tests (about a minute and a half in all; they run in parallel):
//!
//! - `slow_broker_restart_*` starts its OWN throwaway standalone broker
//!   (free loopback ports, wiped temp data dir, from the jars `cargo xtask
//!   services up` cached) so that it can SIGKILL and restart it without
//!   disturbing the shared broker.
//! - `slow_connect_and_subscribe_*` starts its own broker too, crashes and
//!   relaunches it, and connects and subscribes while it is starting.
//! - `slow_long_handler_*` holds one message in a handler for 35 s on the
//!   shared broker, longer than every timeout in play.
//! - `slow_token_auth_and_tls_*` starts its own broker with token
//!   authentication and a TLS port (free loopback ports; certificate from the
//!   openssl CLI, JWTs signed here with the broker's secret).

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crewlet_queue::testsuite::{Recorder, fast_delivery, test_event, unique_topic};
use crewlet_queue::{EventQueue, PulsarOptions, PulsarQueue, QueueError, handler_fn};
use support::ThrowawayPulsar;

fn options(url: &str) -> PulsarOptions {
    let mut o = PulsarOptions::new(url).with_delivery(fast_delivery());
    o.operation_timeout = Duration::from_secs(2);
    o.publish_backoff = vec![Duration::from_millis(200); 4];
    o.reconnect_max_backoff = Duration::from_secs(1);
    // Generous: a throwaway broker on a loaded 2-core machine can take minutes.
    o.startup_retry = Duration::from_secs(240);
    o
}

/// Warnings logged by this test binary (a global subscriber, installed once;
/// tests filter by their own unique topic names).
fn warnings() -> &'static std::sync::Mutex<Vec<u8>> {
    static LOG: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(|| Capture(&LOG))
            .try_init();
    });
    &LOG
}

struct Capture(&'static std::sync::Mutex<Vec<u8>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The captured warning lines that mention `needle`.
fn warnings_about(needle: &str) -> Vec<String> {
    let log = warnings().lock().unwrap_or_else(|p| p.into_inner());
    String::from_utf8_lossy(&log)
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_owned)
        .collect()
}

/// A fresh throwaway broker on free ports, once it is ready.
async fn started_and_ready(jars: std::path::PathBuf) -> ThrowawayPulsar {
    let [broker_port, web_port] = support::free_ports();
    match ThrowawayPulsar::start(jars, broker_port, web_port) {
        Ok(b) => ready(b).await,
        Err(e) => panic!("cannot start a throwaway broker: {e}"),
    }
}

async fn ready(broker: ThrowawayPulsar) -> ThrowawayPulsar {
    let waited = tokio::task::spawn_blocking(move || {
        let mut b = broker;
        // A bound, not a pause: it returns as soon as the broker is healthy.
        // Recovering after a SIGKILL under a saturated 2-core machine took
        // just over 240 s once (CI run 59, with stress-ng running).
        let r = b.wait_ready(Duration::from_secs(600));
        (b, r)
    })
    .await;
    match waited {
        Ok((b, Ok(()))) => b,
        Ok((_, Err(e))) => panic!("throwaway broker: {e}"),
        Err(e) => panic!("waiting for the broker: {e}"),
    }
}

/// Acknowledged publishes survive a broker crash (SIGKILL) and restart; a
/// publish during the outage retries and then fails naming the topic; the
/// consumer comes back on its own (the member's supervisor) and receives
/// everything published before and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_broker_restart_loses_no_acknowledged_publish() {
    let Some(jars) = support::require_jars() else {
        return;
    };
    let mut broker = started_and_ready(jars).await;
    let q = match PulsarQueue::connect(options(&broker.url())).await {
        Ok(q) => q,
        Err(e) => panic!("connect: {e}"),
    };
    let topic = unique_topic("restart");
    let rec = Recorder::new();
    let _sub = match q.subscribe(&topic, "g", rec.handler()).await {
        Ok(s) => s,
        Err(e) => panic!("subscribe: {e}"),
    };
    let mut acked = Vec::new();
    for i in 0..20 {
        let e = test_event(format!("before {i}"));
        if let Err(err) = q.publish(&topic, &e).await {
            panic!("publish before the crash: {err}");
        }
        acked.push(e.id);
    }
    rec.wait_for(20, Duration::from_secs(60), "before the crash")
        .await;

    broker.kill();
    match q.publish(&topic, &test_event("during the outage")).await {
        Err(e @ QueueError::Publish { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(&topic) && msg.contains("5 attempt"), "{msg}");
        }
        other => panic!("publish during the outage: {other:?}"),
    }

    if let Err(e) = broker.restart() {
        panic!("restart: {e}");
    }
    let _broker = ready(broker).await;
    // The broker takes a moment to load the topic again: publish until it takes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut after = 0;
    while after < 20 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "publishing after the restart never succeeded"
        );
        let e = test_event(format!("after {after}"));
        match q.publish(&topic, &e).await {
            Ok(()) => {
                acked.push(e.id);
                after += 1;
            }
            Err(err) => eprintln!("publish after restart not yet: {err}"),
        }
    }
    let want: BTreeSet<_> = acked.iter().copied().collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let got: BTreeSet<_> = rec.seen().iter().map(|d| d.event.id).collect();
        let missing = want.difference(&got).count();
        if missing == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{missing} acknowledged events never arrived after the restart"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    q.shutdown().await;
}

/// A broker that is still starting is waited for, not failed on: after a
/// crash and relaunch, a node that connects and a connected node that
/// subscribes while the broker refuses connections and then loads both come
/// up once it is ready, and receive what is published.
///
/// (The relaunch keeps the data: a brand-new standalone broker answers
/// lookups a moment before it has created `public/default`, and a missing
/// namespace is final by design.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_connect_and_subscribe_wait_for_a_starting_broker() {
    let Some(jars) = support::require_jars() else {
        return;
    };
    let mut broker = started_and_ready(jars).await;
    warnings();
    let url = broker.url();
    let connected = match PulsarQueue::connect(options(&url)).await {
        Ok(q) => q,
        Err(e) => panic!("connect: {e}"),
    };

    // Crash and relaunch, then at once: subscribe on the connected node and
    // connect a second node, while the broker refuses connections and loads.
    if let Err(e) = broker.restart() {
        panic!("restart: {e}");
    }
    assert!(!broker.healthy(), "the relaunched broker was ready at once");
    // The readiness wait runs alongside: after a SIGKILL it also mends the
    // bookie registration loop (see `ThrowawayPulsar::wait_ready`).
    let readiness = tokio::spawn(ready(broker));
    let (first, second) = (unique_topic("restarting"), unique_topic("late-node"));
    let (rec1, rec2) = (Recorder::new(), Recorder::new());
    let subscribed = connected.subscribe(&first, "g", rec1.handler()).await;
    let late_node = async {
        let q = PulsarQueue::connect(options(&url)).await?;
        let sub = q.subscribe(&second, "g", rec2.handler()).await?;
        Ok::<_, QueueError>((q, sub))
    }
    .await;
    let broker = match readiness.await {
        Ok(b) => b,
        Err(e) => panic!("waiting for the restarted broker: {e}"),
    };
    let _first_sub = match subscribed {
        Ok(s) => s,
        Err(e) => panic!(
            "subscribe while the broker restarts: {e}\n{}",
            broker.log_tail()
        ),
    };
    let (late, _second_sub) = match late_node {
        Ok(n) => n,
        Err(e) => panic!(
            "connect and subscribe while the broker restarts: {e}\n{}",
            broker.log_tail()
        ),
    };
    let (e1, e2) = (
        test_event("to the first node"),
        test_event("to the late node"),
    );
    for (q, topic, e) in [(&connected, &first, &e1), (&late, &second, &e2)] {
        if let Err(err) = q.publish(topic, e).await {
            panic!("publish after the restart: {err}\n{}", broker.log_tail());
        }
    }
    rec1.wait_for(
        1,
        Duration::from_secs(60),
        "the subscription made during the restart",
    )
    .await;
    rec2.wait_for(1, Duration::from_secs(60), "the late node's subscription")
        .await;
    assert_eq!(rec1.seen()[0].event.id, e1.id);
    assert_eq!(rec2.seen()[0].event.id, e2.id);
    // It did wait: each retry is logged, naming the operation.
    let retries = warnings_about(&format!("subscribe to {first} as g"));
    assert!(
        retries
            .iter()
            .any(|l| l.contains("pulsar broker not ready")),
        "no retry logged for the subscription made during the restart: {retries:?}"
    );
    connected.shutdown().await;
    late.shutdown().await;
}

const LONG_TURN: Duration = Duration::from_secs(35);

/// A handler that runs longer than the broker keep-alive (30 s), the client
/// operation timeout (2 s here) and the redelivery delay is not redelivered
/// mid-turn, not even to an idle second member: there is no ack timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_long_handler_is_delivered_exactly_once() {
    let url = crewlet_test_support::require!(pulsar);
    let topic = unique_topic("long-turn");
    let starts = Arc::new(AtomicUsize::new(0));
    let done = Recorder::new();
    let handler = {
        let (starts, done) = (starts.clone(), done.clone());
        handler_fn(move |d| {
            let (starts, done) = (starts.clone(), done.clone());
            async move {
                starts.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(LONG_TURN).await;
                done.record(d);
                Ok(())
            }
        })
    };
    let mut nodes = Vec::new();
    let mut subs = Vec::new();
    for _ in 0..2 {
        let q = match PulsarQueue::connect(options(&url)).await {
            Ok(q) => q,
            Err(e) => panic!("connect: {e}"),
        };
        match q.subscribe(&topic, "seat", handler.clone()).await {
            Ok(s) => subs.push(s),
            Err(e) => panic!("subscribe: {e}"),
        }
        nodes.push(q);
    }
    // Published from a node with a roomy operation timeout: a receipt later
    // than 2 s on a busy broker would make the publish retry, and a second
    // copy would look like a redelivery.
    let mut patient = options(&url);
    patient.operation_timeout = Duration::from_secs(60);
    let publisher = match PulsarQueue::connect(patient).await {
        Ok(q) => q,
        Err(e) => panic!("connect: {e}"),
    };
    if let Err(e) = publisher.publish(&topic, &test_event("an LLM turn")).await {
        panic!("publish: {e}");
    }
    publisher.shutdown().await;
    done.wait_for(1, LONG_TURN + Duration::from_secs(60), "long turn")
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(starts.load(Ordering::SeqCst), 1, "delivered exactly once");
    assert_eq!(done.len(), 1);
    for q in nodes {
        q.shutdown().await;
    }
}

/// An HS256 JWT for `subject`, as `pulsar tokens create --secret-key` makes.
fn hs256_token(secret: &[u8], subject: &str) -> String {
    use base64::Engine;
    use hmac::{KeyInit, Mac};
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let signing_input = format!(
        "{}.{}",
        b64.encode(br#"{"alg":"HS256"}"#),
        b64.encode(format!(r#"{{"sub":"{subject}"}}"#))
    );
    let mut mac = match hmac::Hmac::<sha2::Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        Err(e) => panic!("hmac key: {e}"),
    };
    mac.update(signing_input.as_bytes());
    format!(
        "{signing_input}.{}",
        b64.encode(mac.finalize().into_bytes())
    )
}

/// A self-signed certificate for 127.0.0.1 (not a CA, so rustls accepts it
/// as its own trust anchor) and its PKCS#8 key, made with the openssl CLI.
fn self_signed_cert(dir: &std::path::Path) -> std::io::Result<()> {
    let status = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
        ])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-addext", "keyUsage=digitalSignature,keyEncipherment"])
        .args(["-addext", "extendedKeyUsage=serverAuth"])
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "openssl req failed: {status}"
        )))
    }
}

/// A broker with token authentication and a TLS port: the engine's token
/// over `pulsar+ssl://` with `tls_trust_certs_path` makes a full round trip;
/// no token, a forged token, or a TLS connection that does not trust the
/// broker's certificate are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_token_auth_and_tls_round_trip() {
    use base64::Engine;
    let Some(jars) = support::require_jars() else {
        return;
    };
    let secret: Vec<u8> = (0..32u8)
        .map(|i| i.wrapping_mul(37).wrapping_add(11))
        .collect();
    let admin = hs256_token(&secret, "admin");
    let engine = hs256_token(&secret, "engine");
    let [plain_port, tls_port, web_port] = support::free_ports();
    let conf_admin = admin.clone();
    let broker = ThrowawayPulsar::start_with(jars, plain_port, web_port, move |dir| {
        self_signed_cert(dir)?;
        let key = base64::engine::general_purpose::STANDARD.encode(&secret);
        let conf = format!(
            "authenticationEnabled=true\n\
             authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken\n\
             tokenSecretKey=data:;base64,{key}\n\
             superUserRoles=admin\n\
             authorizationEnabled=false\n\
             brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\n\
             brokerClientAuthenticationParameters=token:{conf_admin}\n\
             brokerServicePortTls={tls_port}\n\
             tlsCertificateFilePath={}\n\
             tlsKeyFilePath={}\n",
            dir.join("cert.pem").display(),
            dir.join("key.pem").display(),
        );
        Ok((conf, Some(conf_admin)))
    });
    let broker = match broker {
        Ok(b) => b,
        Err(e) => panic!("cannot start a token-auth TLS broker: {e}"),
    };
    let broker = ready(broker).await;
    let cert = broker.dir.join("cert.pem");
    let tls_url = format!("pulsar+ssl://127.0.0.1:{tls_port}");
    let plain_url = format!("pulsar://127.0.0.1:{plain_port}");

    let mut good = options(&tls_url).with_auth_token(engine.clone());
    good.tls_trust_certs_path = Some(cert.clone());
    let q = match PulsarQueue::connect(good).await {
        Ok(q) => q,
        Err(e) => panic!("token over TLS refused: {e}"),
    };
    let topic = unique_topic("auth-tls");
    let rec = Recorder::new();
    let _sub = match q.subscribe(&topic, "g", rec.handler()).await {
        Ok(s) => s,
        Err(e) => panic!("subscribe over TLS: {e}"),
    };
    let e = test_event("over tls with a token");
    if let Err(err) = q.publish(&topic, &e).await {
        panic!("publish over TLS: {err}");
    }
    rec.wait_for(1, Duration::from_secs(30), "round trip over TLS")
        .await;
    assert_eq!(rec.seen()[0].event.id, e.id);
    q.shutdown().await;

    // The plain port takes the same token (so the refusals below are about auth).
    match PulsarQueue::connect(options(&plain_url).with_auth_token(engine.clone())).await {
        Ok(q) => {
            q.shutdown().await;
        }
        Err(e) => panic!("token on the plain port refused: {e}"),
    }
    let forged = hs256_token(b"not-the-broker-secret-not-the-broker", "engine");
    for (what, opts) in [
        ("no token", options(&plain_url)),
        (
            "a forged token",
            options(&plain_url).with_auth_token(forged),
        ),
        (
            "TLS without the trust certs",
            options(&tls_url).with_auth_token(engine.clone()),
        ),
    ] {
        match PulsarQueue::connect(opts).await {
            Err(err) => {
                let msg = err.to_string();
                eprintln!("{what} refused as expected: {msg}");
                assert!(
                    !msg.contains("still failing after"),
                    "{what} was retried as if the broker were starting: {msg}"
                );
            }
            Ok(_) => panic!("{what} was accepted"),
        }
    }
}
