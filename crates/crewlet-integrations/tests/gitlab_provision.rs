//! `crewlet gitlab provision` against the fake GitLab: users, group
//! memberships, tokens (in a fresh 0600 env file) and the group hook are
//! created; a second run writes nothing (lists read page by page); a
//! revoked token is minted again and a changed access level is applied; a
//! dry run and a non-admin token write nothing; one seat failing leaves the
//! others provisioned; without group hooks each unit project gets one.

mod common;

use std::path::PathBuf;

use crewlet_config::Company;
use crewlet_integrations::gitlab::GitlabClient;
use crewlet_integrations::gitlab::provision::{
    Action, HookAction, Options, Outcome, Plan, ProvisionError, Report, SeatOutcome, Step, apply,
    plan,
};
use crewlet_integrations::provision::envfile::EnvFile;
use crewlet_test_support::gitlab::FakeGitlab;

use common::TempDir;

const HOOK_TOKEN: &str = "hook-secret-1";
const API: &str = "http://crewlet.test:8080";

struct World {
    gl: FakeGitlab,
    admin: GitlabClient,
    dir: TempDir,
    /// `access_levels` of the provisioning block (YAML flow mapping).
    levels: String,
}

impl World {
    async fn new() -> World {
        let gl = FakeGitlab::start().await;
        let root = gl.add_admin("root");
        gl.add_group("acme");
        gl.add_project("acme/app");
        let admin = GitlabClient::new(&gl.url(), &root).unwrap();
        World {
            gl,
            admin,
            dir: TempDir::new("crewlet-gl-provision"),
            levels: "{lead: maintainer}".into(),
        }
    }

    fn env_path(&self) -> PathBuf {
        self.dir.env_path()
    }

    fn env(&self) -> EnvFile {
        self.dir.env()
    }

    fn company(&self) -> Company {
        let yaml = format!(
            r#"name: GL Co
providers:
  llm:
    main: {{type: openai, model: m, api_keys: [k-k-k-k]}}
integrations:
  gitlab:
    enabled: true
    url: "{url}"
    webhook_token: "${{GITLAB_WEBHOOK_TOKEN}}"
    provisioning:
      group: acme
      access_level: developer
      access_levels: {levels}
      username_prefix: agent-
roles:
  - name: Platform Lead
    handle: lead
    integrations:
      gitlab: {{token: "${{GL_LEAD}}"}}
units:
  - name: Platform
    lead: Platform Lead
    integrations:
      gitlab_projects: [acme/app]
    roles:
      - name: Engineer
        handle: eng
        integrations:
          gitlab: {{user: agent-eng, token: "${{GL_ENG}}"}}
"#,
            url = self.gl.url(),
            levels = self.levels,
        );
        Company::from_yaml("gl.yaml", &yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    async fn plan_as(&self, admin: &GitlabClient) -> Result<Plan, ProvisionError> {
        let values = self.env().values();
        let env = move |v: &str| match v {
            "GITLAB_WEBHOOK_TOKEN" => Some(HOOK_TOKEN.to_owned()),
            _ => values.get(v).cloned(),
        };
        let options = Options {
            base_url: format!("{API}/"),
            ..Options::default()
        };
        plan(&self.company(), admin, &options, &env).await
    }

    async fn plan(&self) -> Plan {
        self.plan_as(&self.admin)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    async fn run(&self) -> Report {
        let plan = self.plan().await;
        let mut sink = self.env();
        let mut steps = 0;
        let report = apply(&plan, &self.admin, &mut sink, &mut |_: &str, _: &str| {
            steps += 1
        })
        .await;
        let done: usize = report.seats.iter().map(|s| s.done.len()).sum::<usize>()
            + report.hooks.iter().filter(|h| h.done.is_some()).count();
        assert_eq!(steps, done, "one step line per change");
        report
    }

    /// Whether `token` authenticates as `username`.
    async fn works_as(&self, token: &str, username: &str) -> bool {
        self.admin
            .with_token(token)
            .me()
            .await
            .is_ok_and(|u| u.username == username)
    }
}

fn seat<'a>(report: &'a Report, handle: &str) -> &'a SeatOutcome {
    report
        .seats
        .iter()
        .find(|s| s.handle == handle)
        .unwrap_or_else(|| panic!("no seat {handle} in\n{report}"))
}

#[tokio::test]
async fn a_first_run_provisions_every_seat_and_a_second_changes_nothing() {
    let w = World::new().await;
    // An unrelated hook and a page size of one: the client must page.
    w.gl.set_max_per_page(1);
    w.gl.add_hook("acme", "https://ci.example/hook", "ci-secret");
    let first = w.run().await;
    assert!(!first.failed(), "{first}");
    assert_eq!(
        seat(&first, "eng").done,
        [
            "created",
            "joined group acme",
            &format!("minted token into GL_ENG (expires {})", expiry(&first)),
        ],
        "{first}"
    );
    assert_eq!(seat(&first, "lead").username, "agent-lead");
    assert_eq!(first.minted.len(), 2);
    assert!(!format!("{first}{first:?}").contains(first.minted[0].value()));

    // The users, at their levels, with working tokens in a new 0600 file.
    let eng = w.gl.user("agent-eng").unwrap();
    assert_eq!(eng.name, "Engineer");
    assert_eq!(eng.email, "agent-eng@noreply.invalid");
    assert_eq!(w.gl.member_level("acme", "agent-eng"), Some(30));
    assert_eq!(w.gl.member_level("acme", "agent-lead"), Some(40));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(w.env_path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let env = w.env();
    assert!(w.works_as(&env.get("GL_ENG").unwrap(), "agent-eng").await);
    assert!(w.works_as(&env.get("GL_LEAD").unwrap(), "agent-lead").await);
    let minted = w.gl.tokens_of("agent-eng");
    assert_eq!(minted.len(), 1);
    assert_eq!(minted[0].scopes, ["api"]);
    assert_eq!(minted[0].name, "crewlet-eng");
    assert!(minted[0].expires_at.is_some());

    // One group hook to the API with the webhook token.
    let hooks: Vec<_> =
        w.gl.hooks("acme")
            .into_iter()
            .filter(|h| h.url != "https://ci.example/hook")
            .collect();
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0].url, format!("{API}/webhooks/gitlab"));
    assert_eq!(hooks[0].token, HOOK_TOKEN);
    for event in ["note_events", "issues_events", "merge_requests_events"] {
        assert_eq!(hooks[0].events.get(event), Some(&true), "{event}");
    }
    assert_eq!(hooks[0].events.get("push_events"), Some(&false));

    // Again, with another hook listed first: nothing to do, nothing written.
    w.gl.clear_requests();
    let again = w.plan().await;
    assert_eq!(again.changes(), 0, "{again}");
    let second = w.run().await;
    assert!(!second.failed() && !second.changed(), "{second}");
    assert!(second.to_string().contains("nothing changed"), "{second}");
    assert_eq!(w.gl.writes(), [], "a second run writes nothing");
    assert!(
        w.gl.requests()
            .iter()
            .any(|r| r.path.ends_with("/hooks") && r.query.contains("page=")),
        "lists are read with page/per_page"
    );
    assert_eq!(w.gl.users().len(), 3);
}

fn expiry(report: &Report) -> String {
    report
        .seats
        .iter()
        .flat_map(|s| &s.done)
        .find_map(|d| d.split("(expires ").nth(1))
        .map(|d| d.trim_end_matches(')').to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_revoked_token_is_minted_again_and_a_new_level_applied() {
    let mut w = World::new().await;
    assert!(!w.run().await.failed());
    let old = w.env().get("GL_ENG").unwrap();
    let lead_token = w.env().get("GL_LEAD").unwrap();
    w.gl.revoke_tokens_of("agent-eng");
    w.levels = "{lead: reporter}".into();

    let plan = w.plan().await;
    let eng = plan.seats.iter().find(|s| s.handle == "eng").unwrap();
    assert!(
        matches!(&eng.action, Action::Steps(s) if matches!(s.as_slice(), [Step::Mint { var, .. }] if var == "GL_ENG")),
        "{plan}"
    );
    let report = w.run().await;
    assert!(!report.failed(), "{report}");
    assert_eq!(seat(&report, "lead").done, ["now reporter of group acme"]);
    let new = w.env().get("GL_ENG").unwrap();
    assert_ne!(new, old);
    assert!(w.works_as(&new, "agent-eng").await);
    assert_eq!(w.env().get("GL_LEAD").unwrap(), lead_token, "kept");
    assert_eq!(w.gl.member_level("acme", "agent-lead"), Some(20));
    assert_eq!(w.plan().await.changes(), 0);
}

#[tokio::test]
async fn a_dry_run_and_a_non_admin_token_change_nothing() {
    let w = World::new().await;
    let plan = w.plan().await;
    assert!(plan.changes() > 0, "{plan}");
    assert!(plan.to_string().contains("create the user"), "{plan}");
    assert!(plan.hooks.iter().all(|h| h.action == HookAction::Create));
    assert_eq!(w.gl.writes(), [], "planning writes nothing");
    assert!(!w.env_path().exists());

    let uid = w.gl.add_user("mallory", false);
    let token = w.gl.add_token(uid);
    let refused = w.plan_as(&w.admin.with_token(&token)).await;
    let Err(ProvisionError::Refused(why)) = refused else {
        panic!("a non-admin token must be refused: {refused:?}");
    };
    assert!(
        why.contains("@mallory") && why.contains("administrator"),
        "{why}"
    );
    let bad = w.plan_as(&w.admin.with_token("nope")).await;
    assert!(matches!(bad, Err(ProvisionError::Refused(ref why)) if why.contains("rejected")));
    assert_eq!(w.gl.writes(), []);
}

#[tokio::test]
async fn one_seat_failing_leaves_the_others_provisioned() {
    let w = World::new().await;
    w.gl.reject_username("agent-eng");
    let report = w.run().await;
    assert!(report.failed());
    let eng = seat(&report, "eng");
    assert!(
        matches!(&eng.outcome, Outcome::Failed(why) if why.contains("cannot create the user")),
        "{report}"
    );
    assert!(report.to_string().contains("1 failed"), "{report}");
    assert_eq!(seat(&report, "lead").outcome, Outcome::Ok);
    assert!(w.env().get("GL_LEAD").is_some());
    assert!(w.env().get("GL_ENG").is_none());
    assert_eq!(w.gl.hooks("acme").len(), 1, "the hook is made all the same");
}

#[tokio::test]
async fn without_group_hooks_each_unit_project_gets_one() {
    let w = World::new().await;
    w.gl.disable_group_hooks();
    let plan = w.plan().await;
    assert!(
        plan.notes
            .iter()
            .any(|n| n.contains("one hook per project")),
        "{plan}"
    );
    let report = w.run().await;
    assert!(!report.failed(), "{report}");
    let hooks = w.gl.hooks("acme/app");
    assert_eq!(hooks.len(), 1);
    assert_eq!(hooks[0].token, HOOK_TOKEN);
    assert_eq!(w.plan().await.changes(), 0);
}
