//! `crewlet config ...` and `crewlet budgets ...` against a fresh
//! PostgreSQL database.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crewlet_test_support::database::FreshDatabase;

fn crewlet(dir: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_crewlet"));
    for (k, _) in std::env::vars() {
        if k.starts_with("CREWLET_") {
            c.env_remove(k);
        }
    }
    c.args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run crewlet {args:?}: {e}"))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn company(seats: &[&str]) -> String {
    let mut y = "name: Admin Co\nproviders:\n  llm:\n    m: {type: openai-compatible, model: m, base_url: \"http://127.0.0.1:9/v1\"}\nroles:\n".to_owned();
    for s in seats {
        y.push_str(&format!("  - {{name: Seat {s}, handle: {s}}}\n"));
    }
    y
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_list_show_diff_export_and_budgets() {
    let admin = crewlet_test_support::require!(postgres);
    let db = FreshDatabase::create(&admin).await;
    let dir: PathBuf =
        std::env::temp_dir().join(format!("crewlet-admin-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.join("cfg.yaml"),
        format!("providers:\n  database:\n    dsn: \"{}\"\n", db.dsn),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("v1.yaml"), company(&["ceo"])).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("v2.yaml"), company(&["ceo", "eng"])).unwrap_or_else(|e| panic!("{e}"));
    let cfg = ["--config", "cfg.yaml"];
    let run = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend_from_slice(&cfg);
        crewlet(&dir, &all)
    };

    let o = run(&["config", "revisions"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("no company revisions yet"));

    let o = run(&["config", "import", "v1.yaml", "--dry-run"]);
    assert!(
        o.status.success() && text(&o).contains("dry run"),
        "{}",
        text(&o)
    );
    let o = run(&["config", "import", "v1.yaml"]);
    assert!(
        o.status.success() && text(&o).contains("as revision 1"),
        "{}",
        text(&o)
    );
    let o = run(&["config", "import", "v1.yaml"]);
    assert!(
        o.status.success() && text(&o).contains("identical"),
        "{}",
        text(&o)
    );
    let o = run(&[
        "config",
        "import",
        "v2.yaml",
        "--summary",
        "hire an engineer",
    ]);
    assert!(
        o.status.success() && text(&o).contains("as revision 2 (parent 1)"),
        "{}",
        text(&o)
    );

    let o = run(&["config", "revisions"]);
    let list = text(&o);
    assert!(list.contains("hire an engineer"), "{list}");
    assert_eq!(
        list.lines().filter(|l| l.starts_with('*')).count(),
        1,
        "{list}"
    );

    let o = run(&["config", "show"]);
    assert!(
        o.status.success()
            && text(&o).contains("revision   2 (active)")
            && text(&o).contains("eng"),
        "{}",
        text(&o)
    );

    let o = run(&["config", "diff", "v1.yaml"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("-  handle: eng"), "{}", text(&o));
    let o = run(&["config", "diff", "v2.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(&["config", "diff", "--from", "1", "--to", "2"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));

    let o = run(&["config", "export", "--revision", "1", "-o", "exported.yaml"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = crewlet(&dir, &["validate", "exported.yaml", "--tier", "company"]);
    assert!(
        o.status.success(),
        "the export is a valid company: {}",
        text(&o)
    );
    let o = run(&["config", "export", "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    assert_eq!(json["roles"].as_array().map(Vec::len), Some(2));

    let o = run(&["budgets", "show"]);
    assert!(
        o.status.success() && text(&o).contains("no budget has been charged yet"),
        "{}",
        text(&o)
    );
    let o = run(&["budgets", "reset", "--all"]);
    assert!(
        o.status.success() && text(&o).contains("nothing to reset"),
        "{}",
        text(&o)
    );
    let o = run(&["budgets", "reset", "nobody"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("nobody"), "{}", text(&o));

    let _ = std::fs::remove_dir_all(&dir);
}
