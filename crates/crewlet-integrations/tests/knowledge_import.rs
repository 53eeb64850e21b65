//! `crewlet confluence import` / `crewlet plane import` against the fakes:
//! a first run creates every page (docs into the space or project named by
//! their directory, skills into the Tool Skills one), a second changes
//! nothing, and editing one file updates exactly that page (Confluence:
//! one version up). A dry run (the plan alone) writes nothing.

mod common;

use std::path::Path;

use crewlet_config::Company;
use crewlet_integrations::knowledge::import::{
    self, Action, Collected, ImportPlan, ImportReport, Publisher,
};
use crewlet_integrations::knowledge::{
    ConfluencePublisher, IMPORT_PROPERTY, PlanePublisher, SKILL_LABEL,
};
use crewlet_test_support::confluence::FakeConfluence;
use crewlet_test_support::plane::FakePlane;

use common::TempDir;

fn folder() -> TempDir {
    let dir = TempDir::new("crewlet-kb-import");
    dir.write(
        "ENG/onboarding.md",
        "# Onboarding\n\nWelcome to **engineering**.\n",
    );
    dir.write(
        "ENG/runbook.md",
        "# Deploy runbook\n\n1. build\n2. ship\n\n```sh\nmake deploy\n```\n",
    );
    dir.write(
        "HB/handbook.md",
        "---\ntitle: Company handbook\n---\n# Handbook\n\nBe kind.\n",
    );
    dir.write(
        "tool-skills/github.md",
        "---\nkey: mcp:github\ntrigger:\n  mcp_server: github\nphases: [plan]\ntitle: Using GitHub\nsummary: How to use GitHub.\n---\n\nOpen pull requests with care.\n",
    );
    dir.write("README.md", "# Not a doc\n");
    dir.write("ENG/untitled.md", "no heading here\n");
    dir.write(".hidden/ignored.md", "# Hidden\n");
    dir
}

async fn run(publisher: &dyn Publisher, dir: &Path) -> (ImportPlan, ImportReport) {
    let collected: Collected = import::collect(dir, "SKILLS").unwrap();
    let plan = import::plan(publisher, collected, &mut |_| {}).await;
    let report = import::apply(publisher, &plan, &mut |_| {}).await;
    (plan, report)
}

fn actions(plan: &ImportPlan) -> Vec<(String, &'static str)> {
    plan.items
        .iter()
        .map(|i| {
            let a = match i.action {
                Action::Create => "create",
                Action::Update(_) => "update",
                Action::Unchanged { .. } => "unchanged",
                Action::Fail(_) => "fail",
            };
            (format!("{}/{}", i.doc.container, i.doc.title), a)
        })
        .collect()
}

#[tokio::test]
async fn confluence_import_twice_changes_nothing_and_an_edit_updates_one_page() {
    let wiki = FakeConfluence::start().await;
    let org = wiki.add_user("org");
    for space in ["ENG", "HB", "SKILLS"] {
        wiki.add_space(space);
    }
    let company = Company::from_yaml(
        "c.yaml",
        &format!(
            "name: Wiki Co\nintegrations:\n  confluence:\n    url: \"{}\"\n    email: org@example.com\n    token: \"${{ORG}}\"\n",
            wiki.url()
        ),
    )
    .unwrap();
    let token = org.token.clone();
    let publisher =
        ConfluencePublisher::from_company(&company, move |v| (v == "ORG").then(|| token.clone()))
            .unwrap();
    let dir = folder();

    let (plan, report) = run(&publisher, &dir.0).await;
    let skipped: Vec<String> = plan
        .skipped
        .iter()
        .map(|(p, _)| p.display().to_string())
        .collect();
    assert_eq!(skipped, ["ENG/untitled.md", "README.md"], "{plan}");
    assert_eq!(
        (report.created, report.updated, report.unchanged),
        (4, 0, 0),
        "{report}"
    );
    assert!(report.failed.is_empty(), "{report}");
    let runbook = wiki.page_by_title("ENG", "Deploy runbook").unwrap();
    assert!(
        !runbook.body.contains("Deploy runbook"),
        "the H1 is the title, not the body"
    );
    assert!(
        runbook.body.contains("<ol>")
            && runbook
                .body
                .contains(r#"<ac:structured-macro ac:name="code">"#),
        "{}",
        runbook.body
    );
    assert_eq!(runbook.version, 1);
    assert!(runbook.properties.contains_key(IMPORT_PROPERTY));
    let hb = wiki
        .page_by_title("HB", "Company handbook")
        .expect("the frontmatter title wins");
    assert!(
        hb.body.contains("Be kind") && !hb.body.contains("<h1>"),
        "{}",
        hb.body
    );
    let skill = wiki.page_by_title("SKILLS", "Using GitHub").unwrap();
    assert!(
        skill.body.contains("mcp_server: github") && skill.labels.contains(&SKILL_LABEL.to_owned()),
        "{skill:?}"
    );

    // Second run: everything is unchanged and nothing is written.
    wiki.clear_requests();
    let (plan, report) = run(&publisher, &dir.0).await;
    assert!(
        actions(&plan).iter().all(|(_, a)| *a == "unchanged"),
        "{plan}"
    );
    assert_eq!(
        (report.created, report.updated, report.unchanged),
        (0, 0, 4)
    );
    assert!(wiki.writes().is_empty(), "{:?}", wiki.writes());

    // One edit: exactly that page, one version up.
    dir.write(
        "ENG/runbook.md",
        "# Deploy runbook\n\n1. build\n2. test\n3. ship\n",
    );
    wiki.clear_requests();
    let collected = import::collect(&dir.0, "SKILLS").unwrap();
    let plan = import::plan(&publisher, collected, &mut |_| {}).await;
    assert!(
        wiki.writes().is_empty(),
        "planning (a dry run) writes nothing"
    );
    let changed: Vec<_> = actions(&plan)
        .into_iter()
        .filter(|(_, a)| *a != "unchanged")
        .collect();
    assert_eq!(changed, [("ENG/Deploy runbook".to_owned(), "update")]);
    let report = import::apply(&publisher, &plan, &mut |_| {}).await;
    assert_eq!(
        (report.created, report.updated, report.unchanged),
        (0, 1, 3),
        "{report}"
    );
    let writes = wiki.writes();
    assert_eq!(writes.len(), 1);
    assert_eq!(
        (writes[0].method.as_str(), writes[0].path.clone()),
        ("PUT", format!("/rest/api/content/{}", runbook.id))
    );
    let after = wiki.page(&runbook.id).unwrap();
    assert_eq!(after.version, 2);
    assert!(after.body.contains("test"));
    assert_eq!(wiki.page_by_title("ENG", "Onboarding").unwrap().version, 1);
}

#[tokio::test]
async fn confluence_import_reports_a_missing_space_and_goes_on() {
    let wiki = FakeConfluence::start().await;
    let org = wiki.add_user("org");
    wiki.add_space("ENG");
    let company = Company::from_yaml(
        "c.yaml",
        &format!(
            "name: W\nintegrations:\n  confluence:\n    url: \"{}\"\n    token: \"{}\"\n",
            wiki.url(),
            org.token
        ),
    )
    .unwrap();
    let publisher = ConfluencePublisher::from_company(&company, |_| None).unwrap();
    let dir = folder();
    let (_, report) = run(&publisher, &dir.0).await;
    assert_eq!(report.created, 2, "the ENG pages: {report}");
    assert_eq!(
        report.failed.len(),
        2,
        "HB and SKILLS do not exist: {report}"
    );
    assert!(report.to_string().contains("failed 2"));
}

#[tokio::test]
async fn plane_import_twice_changes_nothing_and_an_edit_updates_one_page() {
    let plane = FakePlane::start("acme").await;
    let org = plane.add_user("org", false);
    let mut ids = Vec::new();
    for p in ["ENG", "HB", "SKILLS"] {
        let id = plane.add_project(p);
        plane.join(&id, &org.id);
        ids.push(id);
    }
    let company = Company::from_yaml(
        "c.yaml",
        &format!(
            "name: Plane Co\nintegrations:\n  plane:\n    enabled: true\n    url: \"{}\"\n    workspace: acme\n    token: \"{}\"\n    webhook_secret: \"${{S}}\"\n",
            plane.url(),
            org.token
        ),
    )
    .unwrap();
    let publisher = PlanePublisher::from_company(&company, |_| None).unwrap();
    let dir = folder();
    // Enough docs for progress lines (every 50 pages).
    for i in 0..50 {
        dir.write(
            &format!("HB/note-{i:02}.md"),
            &format!("# Note {i}\n\nText {i}.\n"),
        );
    }
    let collected = import::collect(&dir.0, "SKILLS").unwrap();
    let mut lines = Vec::new();
    let plan = import::plan(&publisher, collected, &mut |l| lines.push(l.to_owned())).await;
    let report = import::apply(&publisher, &plan, &mut |l| lines.push(l.to_owned())).await;
    assert_eq!(lines, ["looked up 50/54 pages", "50/54 pages done"]);
    assert_eq!(
        (report.created, report.updated, report.unchanged),
        (54, 0, 0),
        "{report}"
    );
    let pages = plane.pages();
    let runbook = pages
        .iter()
        .find(|p| p.name == "Deploy runbook")
        .unwrap()
        .clone();
    assert_eq!(runbook.project_id, ids[0]);
    assert_eq!(runbook.external_id.as_deref(), Some("doc:Deploy runbook"));
    assert_eq!(runbook.external_source.as_deref(), Some("crewlet"));
    assert!(
        runbook
            .description_html
            .contains("<pre><code class=\"language-sh\">make deploy"),
        "{}",
        runbook.description_html
    );
    let skill = pages.iter().find(|p| p.name == "Using GitHub").unwrap();
    assert_eq!(
        (skill.project_id.as_str(), skill.external_id.as_deref()),
        (ids[2].as_str(), Some("skill:mcp:github"))
    );

    plane.clear_requests();
    let (plan, report) = run(&publisher, &dir.0).await;
    assert!(
        actions(&plan).iter().all(|(_, a)| *a == "unchanged"),
        "{plan}"
    );
    assert_eq!(
        (report.created, report.updated, report.unchanged),
        (0, 0, 54)
    );
    assert!(plane.writes().is_empty(), "{:?}", plane.writes());

    dir.write("ENG/runbook.md", "# Deploy runbook\n\nNow with a canary.\n");
    plane.clear_requests();
    let fresh = PlanePublisher::from_company(&company, |_| None).unwrap();
    let (plan, report) = run(&fresh, &dir.0).await;
    let changed: Vec<_> = actions(&plan)
        .into_iter()
        .filter(|(_, a)| *a != "unchanged")
        .collect();
    assert_eq!(changed, [("ENG/Deploy runbook".to_owned(), "update")]);
    assert_eq!((report.updated, report.unchanged), (1, 53), "{report}");
    let writes = plane.writes();
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].method, "PATCH");
    assert!(
        writes[0].path.ends_with(&format!("/pages/{}/", runbook.id)),
        "{:?}",
        writes[0]
    );
    let after = plane
        .pages()
        .into_iter()
        .find(|p| p.id == runbook.id)
        .unwrap();
    assert!(after.description_html.contains("canary"));
    assert_eq!(plane.pages().len(), 54, "updated in place, nothing added");
}

#[tokio::test]
async fn plane_import_fails_pages_of_a_missing_project_only() {
    let plane = FakePlane::start("acme").await;
    let org = plane.add_user("org", false);
    let eng = plane.add_project("ENG");
    plane.join(&eng, &org.id);
    let company = Company::from_yaml(
        "c.yaml",
        &format!(
            "name: P\nintegrations:\n  plane:\n    enabled: true\n    url: \"{}\"\n    workspace: acme\n    token: \"{}\"\n    webhook_secret: \"${{S}}\"\n",
            plane.url(),
            org.token
        ),
    )
    .unwrap();
    let publisher = PlanePublisher::from_company(&company, |_| None).unwrap();
    let dir = folder();
    let collected = import::collect(&dir.0, "SKILLS").unwrap();
    let plan = import::plan(&publisher, collected, &mut |_| {}).await;
    let text = plan.to_string();
    assert!(text.contains("project HB does not exist"), "{text}");
    assert!(text.contains("2 to create"), "{text}");
    let report = import::apply(&publisher, &plan, &mut |_| {}).await;
    assert_eq!((report.created, report.failed.len()), (2, 2), "{report}");
}
