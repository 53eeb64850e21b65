//! `crewlet mattermost provision` and `doctor` against the fake Mattermost
//! server: bots created, joined and given tokens in a fresh 0600 env file;
//! a second run changes nothing; disabled bots and revoked tokens are
//! repaired; a dry run and a refused preflight write nothing;
//! decommissioning disables and revokes; the doctor sees a healthy
//! install, a bad seat token and a SiteURL that browsers are refused by.

mod common;

use std::path::PathBuf;

use crewlet_config::Company;
use crewlet_integrations::mattermost::MattermostClient;
use crewlet_integrations::mattermost::doctor::{Check, diagnose};
use crewlet_integrations::mattermost::provision::{
    Options, Outcome, Plan, ProvisionError, Report, SeatOutcome, apply, plan,
};
use crewlet_integrations::provision::envfile::EnvFile;
use crewlet_test_support::mattermost::{ChannelType, FakeMattermost, User};

use common::TempDir;

struct World {
    mm: FakeMattermost,
    admin: MattermostClient,
    team: String,
    town: String,
    eng: String,
    /// A bot managed by hand (a literal token in the company file).
    ops: User,
    dir: TempDir,
}

impl World {
    async fn new() -> World {
        let mm = FakeMattermost::start().await;
        let root = mm.add_admin("root");
        let team = mm.add_team("acme");
        let town = mm.add_channel(&team, "town-square", ChannelType::Open);
        let eng = mm.add_channel(&team, "engineering", ChannelType::Private);
        let ops = mm.add_bot("ops-bot", "Ops");
        mm.join(&town, &ops.id);
        let admin = MattermostClient::new(&mm.url(), &root.token).unwrap();
        World {
            mm,
            admin,
            team,
            town,
            eng,
            ops,
            dir: TempDir::new("crewlet-mm-provision"),
        }
    }

    fn env_path(&self) -> PathBuf {
        self.dir.env_path()
    }

    fn env(&self) -> EnvFile {
        self.dir.env()
    }

    fn company(&self, pm_channel: &str) -> Company {
        let yaml = format!(
            r#"name: MM Co
providers:
  llm:
    main: {{type: openai, model: m, api_keys: [k-k-k-k]}}
integrations:
  mattermost:
    enabled: true
    url: "{url}"
    team: acme
    provisioning:
      username_prefix: crewlet-
      channels: [town-square]
      display_name_suffix: " (bot)"
roles:
  - name: Agent SWE
    handle: swe
    integrations:
      mattermost: {{bot_token: "${{MM_SWE}}", channel: engineering}}
  - name: Agent PM
    handle: pm
    integrations:
      mattermost: {{bot_token: "${{MM_PM}}", channel: "{pm_channel}"}}
  - name: Ops
    handle: ops
    integrations:
      mattermost: {{bot_token: "{ops}", username: ops-bot}}
"#,
            url = self.mm.url(),
            ops = self.ops.token,
        );
        Company::from_yaml("mm.yaml", &yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    async fn plan(&self, options: &Options) -> Result<Plan, ProvisionError> {
        let values = self.env().values();
        let env = move |v: &str| values.get(v).cloned();
        plan(&self.company(""), &self.admin, options, &env).await
    }

    async fn run(&self, options: &Options) -> Report {
        let plan = self.plan(options).await.unwrap_or_else(|e| panic!("{e}"));
        let mut sink = self.env();
        let mut steps = Vec::new();
        let report = apply(
            &plan,
            &self.admin,
            &mut sink,
            &mut |handle: &str, what: &str| steps.push(format!("{handle}: {what}")),
        )
        .await;
        let done: usize = report.seats.iter().map(|s| s.done.len()).sum();
        assert_eq!(steps.len(), done, "one step line per change");
        report
    }

    fn posts_and_puts(&self) -> Vec<(String, String)> {
        self.mm
            .requests()
            .into_iter()
            .filter(|(m, _)| m == "POST" || m == "PUT")
            .collect()
    }

    async fn bot_id(&self, username: &str) -> String {
        self.admin.user_by_username(username).await.unwrap().id
    }
}

fn seat<'a>(report: &'a Report, handle: &str) -> &'a SeatOutcome {
    report
        .seats
        .iter()
        .find(|s| s.handle == handle)
        .unwrap_or_else(|| panic!("no seat {handle} in\n{report}"))
}

fn handles(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn a_first_run_provisions_every_seat_and_a_second_changes_nothing() {
    let w = World::new().await;
    let report = w.run(&Options::default()).await;
    assert!(!report.failed(), "{report}");
    let swe = seat(&report, "swe");
    assert_eq!(
        swe.done,
        [
            "created",
            "joined team",
            "joined ~town-square",
            "joined ~engineering",
            "minted token into MM_SWE"
        ],
        "{report}"
    );
    assert!(
        seat(&report, "pm")
            .done
            .contains(&"minted token into MM_PM".to_owned())
    );
    assert_eq!(
        seat(&report, "ops").outcome,
        Outcome::Skipped("manual token".into())
    );
    assert_eq!(report.minted.len(), 2);
    assert!(!format!("{report}{report:?}").contains(report.minted[0].value()));

    // The env file is new, private, and holds tokens that are the bots'.
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
    let swe_token = env.get("MM_SWE").unwrap();
    let me = w.admin.with_token(&swe_token).me().await.unwrap();
    assert_eq!((me.username.as_str(), me.is_bot), ("crewlet-swe", true));
    let bots = w.admin.bots().await.unwrap();
    let bot = bots.iter().find(|b| b.username == "crewlet-swe").unwrap();
    assert_eq!(bot.display_name, "Agent SWE (bot)");
    for channel in [&w.town, &w.eng] {
        assert!(w.admin.is_channel_member(channel, &me.id).await.unwrap());
    }
    assert!(w.admin.is_team_member(&w.team, &me.id).await.unwrap());

    let writes = w.posts_and_puts().len();
    let plan = w.plan(&Options::default()).await.unwrap();
    assert_eq!(plan.changes(), 0, "{plan}");
    assert!(plan.to_string().contains("nothing to change"), "{plan}");
    let again = w.run(&Options::default()).await;
    assert!(!again.changed() && !again.failed(), "{again}");
    assert!(again.to_string().contains("nothing changed"), "{again}");
    assert_eq!(w.posts_and_puts().len(), writes, "the second run wrote");
    assert_eq!(w.env().get("MM_SWE"), Some(swe_token));
}

#[tokio::test]
async fn a_disabled_bot_is_enabled_renamed_and_given_a_fresh_token() {
    let w = World::new().await;
    let old = w.mm.add_bot("crewlet-swe", "Old name");
    w.admin.disable_bot(&old.id).await.unwrap();
    let report = w
        .run(&Options {
            handles: handles(&["swe"]),
            ..Options::default()
        })
        .await;
    assert_eq!(report.seats.len(), 1, "--handles: {report}");
    let swe = seat(&report, "swe");
    assert_eq!(swe.outcome, Outcome::Ok, "{report}");
    assert_eq!(&swe.done[..2], ["enabled", "renamed"], "{report}");
    assert!(swe.done.contains(&"minted token into MM_SWE".to_owned()));
    let token = w.env().get("MM_SWE").unwrap();
    assert_ne!(token, old.token);
    assert_eq!(w.admin.with_token(&token).me().await.unwrap().id, old.id);
}

#[tokio::test]
async fn a_revoked_token_is_minted_again_and_other_env_lines_are_kept() {
    let w = World::new().await;
    assert!(!w.run(&Options::default()).await.failed());
    let id = w.bot_id("crewlet-swe").await;
    for t in w.admin.tokens(&id).await.unwrap() {
        w.admin.revoke_token(&t.id).await.unwrap();
    }
    let pm_token = w.env().get("MM_PM").unwrap();
    let text = std::fs::read_to_string(w.env_path()).unwrap();
    std::fs::write(w.env_path(), format!("# keep me\nOTHER=1\n{text}")).unwrap();

    let report = w.run(&Options::default()).await;
    assert_eq!(
        seat(&report, "swe").done,
        ["minted token into MM_SWE"],
        "{report}"
    );
    assert!(seat(&report, "pm").done.is_empty(), "{report}");
    let env = w.env();
    assert_eq!(env.get("OTHER").as_deref(), Some("1"));
    assert_eq!(env.get("MM_PM"), Some(pm_token));
    let text = std::fs::read_to_string(w.env_path()).unwrap();
    assert!(text.starts_with("# keep me\nOTHER=1\n"), "{text}");
    assert_eq!(text.matches("MM_SWE=").count(), 1, "{text}");
    let me = w
        .admin
        .with_token(&env.get("MM_SWE").unwrap())
        .me()
        .await
        .unwrap();
    assert_eq!(me.id, id);
}

#[tokio::test]
async fn a_dry_run_changes_nothing_on_the_server() {
    let w = World::new().await;
    let plan = w.plan(&Options::default()).await.unwrap();
    assert!(plan.changes() > 0);
    let text = plan.to_string();
    assert!(
        text.contains("create the bot") && text.contains("mint a token into MM_SWE"),
        "{text}"
    );
    assert!(text.contains("skip: manual token"), "{text}");
    assert_eq!(w.posts_and_puts(), Vec::<(String, String)>::new());
    assert!(!w.env_path().exists());
}

#[tokio::test]
async fn the_preflight_refuses_a_non_admin_and_a_server_without_bot_creation() {
    let w = World::new().await;
    let jane = w.mm.add_user("jane");
    let company = w.company("");
    let env = |_: &str| None;
    let not_admin = MattermostClient::new(&w.mm.url(), &jane.token).unwrap();
    let err = plan(&company, &not_admin, &Options::default(), &env)
        .await
        .unwrap_err();
    assert!(matches!(err, ProvisionError::Refused(_)), "{err}");
    assert!(err.to_string().contains("not a system admin"), "{err}");

    w.mm.set_setting("EnableBotAccountCreation", false);
    let err = plan(&company, &w.admin, &Options::default(), &env)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("EnableBotAccountCreation is off"),
        "{err}"
    );
    w.mm.set_setting("EnableBotAccountCreation", true);
    w.mm.set_setting("EnableUserAccessTokens", false);
    let err = plan(&company, &w.admin, &Options::default(), &env)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("EnableUserAccessTokens is off"),
        "{err}"
    );
    assert_eq!(w.posts_and_puts(), Vec::<(String, String)>::new());

    let wrong = MattermostClient::new(&w.mm.url(), "not-a-token").unwrap();
    let err = plan(&company, &wrong, &Options::default(), &env)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("admin token was rejected"),
        "{err}"
    );
}

#[tokio::test]
async fn a_missing_channel_fails_its_seat_only() {
    let w = World::new().await;
    let values = w.env().values();
    let env = move |v: &str| values.get(v).cloned();
    let company = w.company("nowhere");
    let plan = plan(&company, &w.admin, &Options::default(), &env)
        .await
        .unwrap();
    let report = apply(&plan, &w.admin, &mut w.env(), &mut |_: &str, _: &str| {}).await;
    assert!(report.failed());
    assert_eq!(
        seat(&report, "pm").outcome,
        Outcome::Failed("channel ~nowhere does not exist in team acme".into())
    );
    assert_eq!(seat(&report, "swe").outcome, Outcome::Ok, "{report}");
    assert!(report.to_string().contains("FAILED: channel ~nowhere"));
}

#[tokio::test]
async fn decommission_disables_and_revokes_and_provision_brings_it_back() {
    let w = World::new().await;
    assert!(!w.run(&Options::default()).await.failed());
    let old = w.env().get("MM_SWE").unwrap();
    let report = w
        .run(&Options {
            decommission: handles(&["swe"]),
            ..Options::default()
        })
        .await;
    assert_eq!(
        seat(&report, "swe").done,
        ["disabled", "revoked 1 token(s)"],
        "{report}"
    );
    assert!(seat(&report, "pm").done.is_empty(), "{report}");
    let id = w.bot_id("crewlet-swe").await;
    assert!(w.admin.tokens(&id).await.unwrap().is_empty());
    let bots = w.admin.bots().await.unwrap();
    assert!(bots.iter().any(|b| b.user_id == id && b.delete_at != 0));
    assert!(w.admin.with_token(&old).me().await.unwrap_err().is_auth());

    let report = w.run(&Options::default()).await;
    let swe = seat(&report, "swe");
    assert_eq!(
        swe.done,
        ["enabled", "minted token into MM_SWE"],
        "{report}"
    );
    let fresh = w.env().get("MM_SWE").unwrap();
    assert_ne!(fresh, old);
    assert_eq!(w.admin.with_token(&fresh).me().await.unwrap().id, id);
}

async fn doctor(
    w: &World,
    overrides: &[(&str, &str)],
) -> crewlet_integrations::mattermost::doctor::DoctorReport {
    let mut values = w.env().values();
    for (k, v) in overrides {
        values.insert((*k).to_owned(), (*v).to_owned());
    }
    let env = move |v: &str| values.get(v).cloned();
    diagnose(&w.company(""), &env).await
}

#[tokio::test]
async fn the_doctor_passes_a_provisioned_install_and_names_a_bad_seat_token() {
    let w = World::new().await;
    assert!(!w.run(&Options::default()).await.failed());
    let report = doctor(&w, &[]).await;
    assert_eq!(report.problems(), Vec::<String>::new(), "{report}");
    assert!(
        report.server.is_ok() && report.browser_websocket.is_ok(),
        "{report}"
    );
    for s in &report.seats {
        assert!(s.websocket.is_ok() && s.channels.is_ok(), "{report}");
    }
    let text = report.to_string();
    assert!(text.contains("problems     : none"), "{text}");
    assert!(text.contains("engineering,town-square"), "{text}");

    let report = doctor(&w, &[("MM_PM", "garbage")]).await;
    let problems = report.problems();
    assert_eq!(problems.len(), 1, "{report}");
    assert!(
        problems[0].starts_with("seat pm account: the server refuses the token"),
        "{report}"
    );
    let pm = report.seats.iter().find(|s| s.handle == "pm").unwrap();
    assert_eq!(pm.websocket, Check::NotChecked);
    assert!(report.to_string().contains("FAILED"));
}

#[tokio::test]
async fn the_doctor_reports_a_site_url_that_refuses_browsers() {
    let w = World::new().await;
    assert!(!w.run(&Options::default()).await.failed());
    w.mm.set_site_url("http://chat.elsewhere.example");
    let report = doctor(&w, &[]).await;
    assert!(report.site_url.is_bad(), "{report}");
    match &report.browser_websocket {
        Check::Bad(why) => assert!(why.contains("403"), "{why}"),
        other => panic!("browser websocket: {other:?}"),
    }
    // The engine sends no Origin: the seats' own sockets still work.
    assert!(report.seats.iter().all(|s| s.websocket.is_ok()), "{report}");
    assert_eq!(report.problems().len(), 2, "{report}");
}

#[tokio::test]
async fn the_doctor_stops_at_an_unreachable_server() {
    let w = World::new().await;
    w.mm.stop().await;
    let report = doctor(&w, &[("MM_SWE", "x"), ("MM_PM", "y")]).await;
    assert!(report.server.is_bad(), "{report}");
    assert_eq!(report.site_url, Check::NotChecked);
    assert_eq!(report.browser_websocket, Check::NotChecked);
    assert_eq!(report.team_found, Check::NotChecked);
    assert!(report.seats.iter().all(|s| s.token == Check::NotChecked));
    assert_eq!(report.problems().len(), 1, "{report}");
    assert!(report.to_string().contains("? (not checked)"));
}
