//! `crewlet llm list|login|doctor|status|logout` against the fake `claude`
//! (`crewlet-fake-cli-agent` of crewlet-test-support).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A temporary directory holding a company file, the provider's state
/// directory and a stand-in for the operator's own home.
struct Fixture {
    dir: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "crewlet-llm-cli-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let fake = crewlet_test_support::fake_cli_agent::binary_path()
            .unwrap_or_else(|e| panic!("fake cli agent: {e}"));
        let company = format!(
            "\
name: Acme
providers:
  llm:
    sub:
      type: cli-agent
      model: sonnet
      cli:
        agent: claude-code
        state_dir: {state}
        env:
          FAKE_CLI_MODE: tool
          FAKE_CLI_TOOL: crewlet_doctor_check
          FAKE_CLI_TOOL_ARGS: '{{\"ok\": true}}'
          FAKE_CLI_FORBID: ANTHROPIC_API_KEY,CREWLET_TEST_SECRET
        overrides:
          binary: {fake}
    api:
      type: openai
      model: gpt-4.1
      api_keys: ['${{CREWLET_TEST_OPENAI_KEY}}']
roles:
  - name: Engineer
",
            state = dir.join("state").display(),
            fake = fake.display(),
        );
        std::fs::write(dir.join("company.yaml"), company).unwrap_or_else(|e| panic!("{e}"));
        Self { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// A login of the CLI in the stand-in operator home.
    fn host_login(&self) -> PathBuf {
        let home = self.path("operator-home");
        let creds = home.join(".claude");
        std::fs::create_dir_all(&creds).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(creds.join(".credentials.json"), b"{\"host\":\"login\"}")
            .unwrap_or_else(|e| panic!("{e}"));
        home
    }

    fn crewlet(&self, args: &[&str]) -> Output {
        let company = self.path("company.yaml");
        Command::new(env!("CARGO_BIN_EXE_crewlet"))
            .arg("llm")
            .args(args)
            .arg("--company")
            .arg(&company)
            // secrets of the engine's environment that must never reach the CLI
            .env("ANTHROPIC_API_KEY", "sk-ant-metered-should-not-leak")
            .env("CREWLET_TEST_SECRET", "db-password")
            .env("CREWLET_TEST_OPENAI_KEY", "sk-openai")
            .env("HOME", self.path("operator-home"))
            .output()
            .unwrap_or_else(|e| panic!("cannot run crewlet: {e}"))
    }

    fn adopted(&self) -> PathBuf {
        self.path("state/credentials/.claude/.credentials.json")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn line_of<'a>(out: &'a str, start: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line starting `{start}` in:\n{out}"))
}

#[test]
fn list_shows_every_provider_with_its_kind_and_auth() {
    let f = Fixture::new();
    let o = f.crewlet(&["list"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let sub = line_of(&out, "sub ");
    for word in ["cli-agent", "sonnet", "claude-code", "none"] {
        assert!(sub.contains(word), "{sub}");
    }
    let api = line_of(&out, "api ");
    for word in ["openai", "gpt-4.1", "api key"] {
        assert!(api.contains(word), "{api}");
    }
}

#[test]
fn login_from_host_then_doctor_then_logout() {
    let f = Fixture::new();
    let home = f.host_login();

    // not logged in: doctor says so, and points at the host login it sees
    let o = f.crewlet(&["doctor", "sub", "--no-smoke"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("--from-host"), "{out}");
    assert!(
        line_of(&out, "host login").contains(".claude/.credentials.json"),
        "{out}"
    );

    let o = f.crewlet(&[
        "login",
        "sub",
        "--from-host",
        "--home",
        &home.display().to_string(),
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert_eq!(
        std::fs::read(f.adopted()).ok().as_deref(),
        Some(&b"{\"host\":\"login\"}"[..]),
        "{out}"
    );

    // a real round trip, with the engine's secrets in crewlet's environment
    let o = f.crewlet(&["doctor", "sub"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        line_of(&out, "version").contains("9.9.9 (Fake Claude Code)"),
        "{out}"
    );
    assert!(
        line_of(&out, "round trip").contains("ok (42 in / 7 out tokens)"),
        "{out}"
    );
    assert!(line_of(&out, "problems").contains("none"), "{out}");

    let o = f.crewlet(&["status"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        line_of(&out, "sub:").contains("login: credentials (.claude/.credentials.json)"),
        "{out}"
    );

    let o = f.crewlet(&["logout", "sub"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("removed .claude/.credentials.json"), "{out}");
    assert!(!f.adopted().exists());
    // the seats' seeded copies go too
    let seat_copy = f.path("state/seats/_doctor/home/.claude/.credentials.json");
    assert!(!seat_copy.exists(), "{}", seat_copy.display());
    // and the operator's own login is untouched
    assert!(home.join(".claude/.credentials.json").is_file());

    let o = f.crewlet(&["status", "sub"]);
    assert!(
        line_of(&text(&o), "sub:").contains("login: none"),
        "{}",
        text(&o)
    );
}

#[test]
fn from_host_without_a_host_login_says_where_it_looked() {
    let f = Fixture::new();
    let empty = f.path("empty-home");
    std::fs::create_dir_all(&empty).unwrap_or_else(|e| panic!("{e}"));
    let o = f.crewlet(&[
        "login",
        "sub",
        "--from-host",
        "--home",
        &empty.display().to_string(),
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains(".claude/.credentials.json"), "{out}");
    assert!(!f.adopted().exists());
}

#[test]
fn a_captured_token_logs_the_provider_in() {
    let f = Fixture::new();
    let o = f.crewlet(&["login", "sub", "--capture-token"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    // the token is shown masked, and kept for the provider
    assert!(!out.contains("sk-ant-oat01-fake"), "{out}");
    let kept =
        std::fs::read_to_string(f.path("state/credentials/crewlet-token")).unwrap_or_default();
    assert!(kept.starts_with("sk-ant-oat01-fake"), "{kept}");
    let o = f.crewlet(&["list"]);
    assert!(line_of(&text(&o), "sub ").contains("token"), "{}", text(&o));
    let o = f.crewlet(&["doctor", "sub"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // logging out removes the captured token, and nothing else feeds one
    let o = f.crewlet(&["logout", "sub"]);
    let out = text(&o);
    assert!(out.contains("removed crewlet-token"), "{out}");
    assert!(!out.contains("still reaches"), "{out}");
    assert!(line_of(&text(&f.crewlet(&["list"])), "sub ").contains("none"));
}

#[test]
fn unknown_and_api_providers_are_refused_by_name() {
    let f = Fixture::new();
    let o = f.crewlet(&["doctor", "nope"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("no provider `nope`") && out.contains("sub, api"),
        "{out}"
    );

    let o = f.crewlet(&["login", "api", "--from-host"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("`type: openai`, not cli-agent"), "{out}");
}

#[test]
fn login_runs_the_cli_own_login_into_crewlets_directory() {
    let f = Fixture::new();
    let o = f.crewlet(&["login", "sub"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("Login successful."), "{out}");
    // the fake's /login wrote where CLAUDE_CONFIG_DIR pointed: Crewlet's copy
    assert!(f.adopted().is_file(), "{out}");
    assert!(!f.path("operator-home/.claude/.credentials.json").exists());
}
