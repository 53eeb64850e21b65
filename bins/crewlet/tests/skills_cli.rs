//! The tool-skill commands as an operator runs them (real processes,
//! against the fake Confluence and the fake Plane): `import` publishes
//! `examples/tool-skills` to the Tool Skills container, `resync` reads it
//! back the way the engine does and lists every skill, and a second import
//! changes nothing.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tool-skills")
}

const KEYS: [&str; 5] = [
    "skill:chat_posts",
    "skill:learned_skills",
    "skill:memory",
    "tool:a2a_ask",
    "tool:search_knowledge",
];

async fn run(dir: &Path, args: Vec<String>) -> Output {
    let mut cmd = crewlet();
    cmd.current_dir(dir).args(args);
    output(cmd).await
}

/// import, resync, import again, for `backend` (`confluence` or `plane`).
async fn import_resync_import(dir: &Path, backend: &str) {
    let examples = examples().display().to_string();
    let import = vec![
        backend.to_owned(),
        "import".into(),
        "company.yaml".into(),
        examples,
    ];
    let first = run(dir, import.clone()).await;
    let out = text(&first);
    assert_eq!(first.status.code(), Some(0), "{out}");
    assert!(out.contains("created 5,"), "{out}");

    let resync = run(
        dir,
        vec![backend.into(), "resync".into(), "company.yaml".into()],
    )
    .await;
    let out = text(&resync);
    assert_eq!(resync.status.code(), Some(0), "{out}");
    assert!(out.contains("5 skill(s) of 5 skill page(s)"), "{out}");
    for key in KEYS {
        assert!(out.contains(&format!("  {key}  (")), "{key}: {out}");
    }

    let again = run(dir, import).await;
    let out = text(&again);
    assert_eq!(again.status.code(), Some(0), "{out}");
    assert!(out.contains("created 0, updated 0, unchanged 5"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluence_import_then_resync_lists_every_skill() {
    use crewlet_test_support::confluence::FakeConfluence;
    let wiki = FakeConfluence::start().await;
    let admin = wiki.add_user("admin");
    wiki.add_space("TS");
    wiki.add_page("TS", "Tool Skills", "<p>Home</p>", None);
    let dir = crewlet_test_support::e2e::temp_dir("skills-cli-confluence");
    std::fs::write(
        dir.join("company.yaml"),
        format!(
            "name: Wiki Co\nintegrations:\n  confluence: {{url: \"{}\", email: {}, token: {}}}\nroles:\n  - {{name: Engineer, handle: eng}}\n",
            wiki.url(),
            admin.email,
            admin.token
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    import_resync_import(&dir, "confluence").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plane_import_then_resync_lists_every_skill() {
    use crewlet_test_support::plane::FakePlane;
    let plane = FakePlane::start("acme").await;
    let admin = plane.add_user("admin", true);
    let ts = plane.add_project("TS");
    plane.join(&ts, &admin.id);
    let dir = crewlet_test_support::e2e::temp_dir("skills-cli-plane");
    std::fs::write(
        dir.join("company.yaml"),
        format!(
            "name: Plane Co\nintegrations:\n  plane: {{enabled: true, url: \"{}\", workspace: acme, token: {}, webhook_secret: s3cret-s3cret}}\nroles:\n  - {{name: Engineer, handle: eng}}\n",
            plane.url(),
            admin.token
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    import_resync_import(&dir, "plane").await;
}
