//! `crewlet run` as a real process: the README quick start boots on a
//! machine without a model key and answers /health; a taken port fails
//! naming it; the admin commands say they need a database.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn crewlet() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_crewlet"));
    // The machine's own settings must not leak into these runs.
    for (k, _) in std::env::vars() {
        if k.starts_with("CREWLET_") || k == "OPENAI_API_KEY" || k == "RUST_LOG" {
            c.env_remove(k);
        }
    }
    c
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `GET http://127.0.0.1:{port}{path}` status, 0 when nothing answers.
fn status(port: u16, path: &str) -> u16 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return 0;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn quickstart_boots_without_a_model_key_and_stops_cleanly() {
    let port = free_port();
    let log = std::env::temp_dir().join(format!("crewlet-quickstart-{}.log", std::process::id()));
    let mut child = crewlet()
        .args([
            "run",
            "examples/quickstart/config.yaml",
            "--api-port",
            &port.to_string(),
        ])
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap_or_else(|e| panic!("{e}")))
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while status(port, "/ready") != 200 {
        if Instant::now() > deadline || matches!(child.try_wait(), Ok(Some(_))) {
            let _ = child.kill();
            panic!(
                "quickstart did not get ready:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(status(port, "/health"), 200);
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let exit = child.wait().unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(exit.success(), "exit {exit}:\n{text}");
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("nothing survives a restart"))
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "one clear line about durability:\n{text}"
    );
    assert!(
        text.contains("OPENAI_API_KEY"),
        "the missing key is named:\n{text}"
    );
    assert!(!text.contains("sk-"), "no secrets in logs");
    let _ = std::fs::remove_file(&log);
}

#[test]
fn a_taken_port_fails_naming_the_port_and_who_may_hold_it() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let port = holder
        .local_addr()
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let out = crewlet()
        .args([
            "run",
            "examples/quickstart/config.yaml",
            "--api-port",
            &port.to_string(),
        ])
        .current_dir(root())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("port {port} is already in use")),
        "{err}"
    );
    assert!(err.contains("crewlet run api"), "{err}");
    drop(holder);
}

#[test]
fn admin_commands_need_a_database() {
    for args in [["config", "revisions"], ["budgets", "show"]] {
        let out = crewlet()
            .args(args)
            .current_dir(root())
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("needs providers.database"), "{err}");
    }
    // Checking a file needs nothing.
    let out = crewlet()
        .args(["validate", "examples/quickstart/company.yaml"])
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success());
}

#[test]
fn run_and_run_api_share_one_command() {
    let out = crewlet()
        .args(["run", "--help"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--import-company",
        "--api-port",
        "--api-host",
        "--debug",
        "api",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    let out = crewlet()
        .args(["run", "api", "--help"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--port"));
}
