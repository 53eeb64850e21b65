//! Slow and idle clients cannot starve the server: partial headers and idle
//! connections are closed after their timeouts, the connection cap closes
//! the longest-idle connection to admit a new one, and `/health` and
//! `/ready` answer under 1,100 idle connections with 1,024 file descriptors.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Harness, Options};
use crewlet_api::ApiLimits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Generous: the server's own timers are what the tests wait on.
const WAIT: Duration = Duration::from_secs(30);

fn addr(h: &Harness) -> String {
    h.base.trim_start_matches("http://").to_owned()
}

/// Reads until the server closes the connection; the bytes it sent.
async fn closed_by_server(stream: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let read = tokio::time::timeout(WAIT, async {
        let mut buf = [0u8; 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the server kept the connection open");
    got
}

/// A client that opens a fresh connection per request.
fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_partial_header_is_closed_after_the_header_read_timeout() {
    let header = Duration::from_millis(500);
    let h = Harness::with(Options {
        limits: ApiLimits {
            header_read_timeout: header,
            idle_timeout: Duration::from_secs(600),
            ..ApiLimits::default()
        },
        ..Options::default()
    })
    .await;
    let mut slow = TcpStream::connect(addr(&h)).await.unwrap();
    let started = Instant::now();
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let got = closed_by_server(&mut slow).await;
    assert!(
        started.elapsed() >= header,
        "closed before the header read timeout"
    );
    assert!(got.is_empty(), "no answer to a request never completed");

    // A complete request on a fresh connection is served, and the kept-alive
    // connection is not cut by the header timer while it waits (its idle
    // timeout is 600 s): a second request on it after the header timeout
    // still works.
    let mut kept = TcpStream::connect(addr(&h)).await.unwrap();
    kept.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = kept.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    tokio::time::sleep(header * 2).await;
    kept.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let again = closed_by_server(&mut kept).await;
    assert!(
        again.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&again)
    );
    h.stop().await;
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let idle = Duration::from_millis(700);
    let h = Harness::with(Options {
        limits: ApiLimits {
            idle_timeout: idle,
            ..ApiLimits::default()
        },
        ..Options::default()
    })
    .await;
    // Fresh and never used.
    let mut fresh = TcpStream::connect(addr(&h)).await.unwrap();
    let started = Instant::now();
    assert!(closed_by_server(&mut fresh).await.is_empty());
    assert!(started.elapsed() >= idle, "closed before the idle timeout");
    // Kept alive after one request.
    let mut used = TcpStream::connect(addr(&h)).await.unwrap();
    used.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let got = closed_by_server(&mut used).await;
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    h.stop().await;
}

#[tokio::test]
async fn health_and_ready_answer_while_the_cap_is_full_of_slow_clients() {
    let cap = 16;
    let h = Harness::with(Options {
        limits: ApiLimits {
            max_connections: cap,
            header_read_timeout: Duration::from_secs(600),
            idle_timeout: Duration::from_secs(600),
            ..ApiLimits::default()
        },
        ..Options::default()
    })
    .await;
    // Twice the cap of idle connections, then the cap of partial headers.
    let mut held = Vec::new();
    for _ in 0..cap * 2 {
        held.push(TcpStream::connect(addr(&h)).await.unwrap());
    }
    for _ in 0..cap {
        let mut s = TcpStream::connect(addr(&h)).await.unwrap();
        s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        held.push(s);
    }
    let http = fresh_client();
    for _ in 0..10 {
        let r = http.get(h.url("/health")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let r = http.get(h.url("/ready")).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    // The oldest idle connections were closed to make room.
    let mut first = held.remove(0);
    assert!(closed_by_server(&mut first).await.is_empty());
    drop(held);
    h.stop().await;
}

/// The child half of the next test: a server with RLIMIT_NOFILE at 1,024
/// (and default limits), printing its address and serving until stdin ends.
/// A no-op unless started by the parent.
#[test]
fn fd_limited_server() {
    const CHILD: &str = "CREWLET_API_FD_LIMITED_SERVER";
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    set_open_file_limit(1024);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let h = Harness::start().await;
        println!("\nLISTENING {}", addr(&h));
        std::io::stdout().flush().unwrap();
        tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        })
        .await
        .unwrap();
        h.stop().await;
    });
}

#[cfg(unix)]
fn open_file_limit() -> (u64, u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct we pass.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) }, 0);
    (l.rlim_cur, l.rlim_max)
}

#[cfg(unix)]
fn set_open_file_limit(soft: u64) {
    let (_, hard) = open_file_limit();
    let l = libc::rlimit {
        rlim_cur: soft.min(hard),
        rlim_max: hard,
    };
    // SAFETY: setrlimit only reads the struct we pass.
    assert_eq!(
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) },
        0,
        "cannot set RLIMIT_NOFILE to {soft}"
    );
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_answers_under_1100_idle_connections_with_1024_fds() {
    const IDLE: usize = 1100;
    // This process holds the 1,100 client sockets: it needs more than 1,024.
    let (soft, hard) = open_file_limit();
    if soft < 2048 {
        assert!(
            hard >= 2048,
            "the test client needs 2048 open files (hard limit {hard})"
        );
        set_open_file_limit(2048);
    }
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "fd_limited_server",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CREWLET_API_FD_LIMITED_SERVER", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    // Reads the child's stdout to its end, so the child never writes to a
    // closed pipe.
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // The harness may have printed `test fd_limited_server ... ` first.
            if let Some(at) = line.find("LISTENING ")
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(line[at + "LISTENING ".len()..].trim().to_owned());
            }
        }
    });
    let addr = tokio::time::timeout(Duration::from_secs(120), rx)
        .await
        .expect("the child server did not start")
        .expect("the child server exited before listening");

    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        idle.push(TcpStream::connect(&addr).await.unwrap());
    }
    let http = fresh_client();
    let mut failures = Vec::new();
    for path in ["/health", "/ready"].iter().cycle().take(20) {
        match http.get(format!("http://{addr}{path}")).send().await {
            Ok(r) if r.status() == 200 => {}
            Ok(r) => failures.push(format!("{path}: {}", r.status())),
            Err(e) => failures.push(format!("{path}: {e}")),
        }
    }
    drop(idle);
    drop(child.stdin.take());
    let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    assert!(
        failures.is_empty(),
        "{} of 20 probes failed under {IDLE} idle connections: {failures:?}",
        failures.len()
    );
}
