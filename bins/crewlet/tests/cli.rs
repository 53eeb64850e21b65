//! The `crewlet` binary: exit codes and output of `validate`, `schema`,
//! `--version`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn crewlet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_crewlet"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run crewlet: {e}"))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A file in a fresh temporary directory, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "crewlet-cli-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
        Self(path)
    }

    fn arg(&self) -> &str {
        self.0.to_str().unwrap_or_default()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[test]
fn valid_examples_exit_0_with_a_summary() {
    let o = crewlet(&["validate", "examples/acme/company.yaml"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("valid company `Acme Robotics`"), "{out}");
    assert!(
        out.contains("6 units, 12 seats (10 agent, 2 human)"),
        "{out}"
    );
    // Two managers (the inherited lead and the SRE): the first is shown.
    assert!(
        out.contains("release-eng    Release Engineer  -> platform-lead"),
        "{out}"
    );
    // Every key of acme has an effect now (learning included).
    assert!(!out.contains("warning:"), "{out}");
    // Keys with no effect yet are warnings, with their line; still exit 0.
    let dir = std::env::temp_dir().join(format!("crewlet-cli-inert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let file = dir.join("company.yaml");
    std::fs::write(
        &file,
        "name: Inert Co\nproviders:\n  llm:\n    main: {type: openai, model: m, api_keys: [k]}\nlearning:\n  enabled: true\n  skill_curator:\n    enabled: true\nroles:\n  - name: CEO\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let path = file.display().to_string();
    let o = crewlet(&["validate", &path]);
    let inert = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{inert}");
    assert!(
        inert.contains(&format!(
            "{path}:7:3: warning: learning.skill_curator: has no effect yet"
        )),
        "{inert}"
    );
    assert!(!inert.contains("learning.enabled"), "{inert}");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.contains("Release (squad, lead platform-lead, inherited)"),
        "{out}"
    );

    let o = crewlet(&[
        "validate",
        "examples/quickstart/company.yaml",
        "--tier",
        "company",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));

    for config in [
        "examples/quickstart/config.yaml",
        "examples/acme/config.yaml",
    ] {
        let o = crewlet(&["validate", config]);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{out}");
        assert!(out.contains("valid bootstrap"), "{out}");
    }
    let o = crewlet(&["validate", "examples/acme/config.yaml"]);
    assert!(
        stdout(&o).contains("postgres://crewlet:***@"),
        "the password is not printed"
    );
}

#[test]
fn invalid_files_exit_1_listing_every_problem() {
    let f = TempFile::new(
        "company.yaml",
        "name: X\nprovidrs: {}\nroles:\n  - name: A\n    handle: Bad\n    manages: [ghost]\n    schedules:\n      - {name: s, cron: '61 * * * *', task: t}\n",
    );
    let o = crewlet(&["validate", f.arg()]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    // Warnings first (the file would be accepted with them alone)...
    assert!(
        lines[0]
            .contains(":6:15: warning: roles[0].manages[0]: manages `ghost`, which names no role"),
        "{out}"
    );
    // ...then every problem, in file order.
    assert!(
        lines[1].ends_with(
            "company.yaml:2:1: providrs: unknown key `providrs`; did you mean `providers`?"
        ),
        "{out}"
    );
    assert!(
        lines[2].contains(":5:13: roles[0].handle: handle `Bad` must match"),
        "{out}"
    );
    assert!(
        lines[3].contains(":8:")
            && lines[3].contains("roles[0].schedules[0].cron: cron `61 * * * *`"),
        "{out}"
    );
    assert!(lines[4].ends_with("company.yaml: 3 problems"), "{out}");
}

#[test]
fn json_output_lists_problems_with_locations() {
    let f = TempFile::new("config.yaml", "api:\n  port: -1\n  hots: x\n");
    let o = crewlet(&["validate", "--json", f.arg()]);
    assert_eq!(o.status.code(), Some(1));
    let problems: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON: {e}"));
    let problems = problems.as_array().cloned().unwrap_or_default();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert_eq!(problems[0]["path"], "api.port");
    assert_eq!(problems[0]["line"], 2);
    assert_eq!(problems[0]["column"], 9);
    assert_eq!(problems[0]["file"], f.arg());
    assert_eq!(problems[1]["path"], "api.hots");
    assert_eq!(
        problems[1]["message"],
        "unknown key `hots`; did you mean `host`?"
    );

    let o = crewlet(&["validate", "--json", "examples/quickstart/company.yaml"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o).trim(), "[]");
}

#[test]
fn unreadable_files_exit_2() {
    let o = crewlet(&["validate", "does/not/exist.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot read does/not/exist.yaml"), "{err}");
    let o = crewlet(&["validate", "examples"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a directory is not readable as a file"
    );
}

#[test]
fn the_tier_is_detected_or_asked_for() {
    let both = TempFile::new("x.yaml", "name: X\ndebug: true\n");
    let o = crewlet(&["validate", both.arg()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("pass --tier"), "{}", stdout(&o));
    // Forcing a tier checks the file as that tier.
    let o = crewlet(&[
        "validate",
        "--tier",
        "bootstrap",
        "examples/quickstart/company.yaml",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("unknown key `name`"), "{}", stdout(&o));
}

#[test]
fn validate_reads_no_environment() {
    let o = Command::new(env!("CARGO_BIN_EXE_crewlet"))
        .args(["validate", "examples/quickstart/config.yaml"])
        .current_dir(root())
        .env("CREWLET_API__PORT", "not-a-port")
        .env("CREWLET_PROVIDERS__QUEUE__TYPE", "bogus")
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("127.0.0.1:8000"));
}

#[test]
fn schema_prints_the_committed_json_schemas() {
    for kind in ["company", "bootstrap"] {
        let o = crewlet(&["schema", kind]);
        assert_eq!(o.status.code(), Some(0));
        let schema: serde_json::Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{kind}: not JSON: {e}"));
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        let committed =
            std::fs::read_to_string(root().join(format!("docs/schema/{kind}.schema.json")))
                .unwrap_or_default();
        assert_eq!(
            stdout(&o),
            committed,
            "docs/schema/{kind}.schema.json is stale"
        );
    }
    let o = crewlet(&["schema", "--markdown"]);
    let committed =
        std::fs::read_to_string(root().join("docs/configuration.md")).unwrap_or_default();
    assert_eq!(stdout(&o), committed, "docs/configuration.md is stale");
    let o = crewlet(&["schema", "--markdown", "bootstrap"]);
    assert!(
        stdout(&o).contains("### `providers.queue` (QueueConfig)"),
        "{}",
        stdout(&o)
    );
    let o = crewlet(&["schema"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a kind is required without --markdown"
    );
}

#[test]
fn version_is_printed() {
    let o = crewlet(&["--version"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o).trim(),
        format!("crewlet {}", env!("CARGO_PKG_VERSION"))
    );
}
