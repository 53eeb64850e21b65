//! `crewlet slack provision` against the fake Slack Web API: a first run
//! creates and installs the apps and writes their secrets into a 0600 env
//! file, a second finds nothing to do, a dry run creates nothing, hand-made
//! apps are left alone, a failing seat does not stop the others, and a
//! rotated configuration token pair is written back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crewlet_config::Company;
use crewlet_integrations::slack::{
    Action, CONFIG_REFRESH_TOKEN_VAR, CONFIG_TOKEN_EXPIRES_VAR, CONFIG_TOKEN_VAR, EnvStore, Ledger,
    Options, Report, SlackClient, provision,
};
use crewlet_test_support::slack::FakeSlack;
use parking_lot::Mutex;

const BASE: &str = "https://crew.example";
const BOOT_TOKEN: &str = "xoxe.xoxp-boot";

fn company(extra_roles: &str) -> Company {
    let yaml = format!(
        "name: Slack Co
providers:
  llm:
    m: {{type: openai-compatible, model: m, base_url: \"http://127.0.0.1:9/v1\"}}
roles:
  - name: Software Engineer
    handle: eng
    integrations:
      slack:
        signing_secret: \"${{SLACK_SIGNING_SECRET_ENG}}\"
        bot_token: \"${{SLACK_BOT_TOKEN_ENG}}\"
        bot_user_id: \"${{SLACK_BOT_USER_ENG}}\"
  - name: Operator
    handle: ops
    integrations:
      slack: {{signing_secret: hand-made-secret, bot_token: xoxb-hand-made}}
{extra_roles}"
    );
    Company::from_yaml("company.yaml", &yaml).unwrap_or_else(|e| panic!("{e}"))
}

const DESIGNER: &str = "  - name: Designer
    handle: design
    integrations:
      slack:
        signing_secret: \"${SLACK_SIGNING_SECRET_DESIGN}\"
        bot_token: \"${SLACK_BOT_TOKEN_DESIGN}\"
";

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!(
            "crewlet-slack-provision-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        Dir(dir)
    }

    fn env_file(&self) -> PathBuf {
        self.0.join(".env")
    }

    fn ledger(&self) -> PathBuf {
        self.0.join("slack-apps.json")
    }

    fn env(&self) -> BTreeMap<String, String> {
        std::fs::read_to_string(self.env_file())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn mode(path: &Path) -> u32 {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode()
            & 0o777
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        0o600
    }
}

/// An env store over the dir's `.env` whose process environment is `shell`.
fn store(dir: &Dir, shell: &[(&str, &str)]) -> EnvStore {
    let shell: BTreeMap<String, String> = shell
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    EnvStore::open(&dir.env_file(), Box::new(move |v| shell.get(v).cloned()))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn options(dir: &Dir) -> Options {
    Options::new(BASE, dir.ledger())
}

/// The operator: approves each install on the fake and pastes the whole
/// redirect URL back. Records which seats were asked.
fn operator(
    slack: &Arc<FakeSlack>,
    asked: &Arc<Mutex<Vec<String>>>,
) -> impl FnMut(&str, &str) -> Result<String, String> + use<> {
    let (slack, asked) = (slack.clone(), asked.clone());
    move |handle: &str, url: &str| {
        asked.lock().push(handle.to_owned());
        let parsed = reqwest::Url::parse(url).map_err(|e| e.to_string())?;
        let client_id = parsed
            .query_pairs()
            .find(|(k, _)| k == "client_id")
            .map(|(_, v)| v.into_owned())
            .ok_or("no client_id")?;
        let code = slack.authorize(&client_id).ok_or("unknown client")?;
        Ok(format!(
            "{BASE}/webhooks/slack-oauth?code={code}&state={handle}"
        ))
    }
}

async fn run(
    slack: &FakeSlack,
    company: &Company,
    env: &mut EnvStore,
    prompt: &mut dyn crewlet_integrations::slack::InstallPrompt,
    options: &Options,
) -> Report {
    let client = SlackClient::new(&slack.api_url()).unwrap_or_else(|e| panic!("{e}"));
    provision(company, &client, env, prompt, options)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_first_run_creates_and_installs_and_a_second_finds_nothing_to_do() {
    let slack = Arc::new(FakeSlack::start().await);
    slack.add_config_token(BOOT_TOKEN);
    let dir = Dir::new("first");
    let company = company("");
    let asked = Arc::new(Mutex::new(Vec::new()));
    let mut prompt = operator(&slack, &asked);

    let mut env = store(&dir, &[(CONFIG_TOKEN_VAR, BOOT_TOKEN)]);
    let report = run(&slack, &company, &mut env, &mut prompt, &options(&dir)).await;
    assert!(!report.failed(), "{report}");
    let eng = report.seat("eng").unwrap_or_else(|| panic!("{report}"));
    assert_eq!(eng.action, Action::Created, "{report}");
    assert!(eng.installed);
    let ops = report.seat("ops").unwrap_or_else(|| panic!("{report}"));
    assert!(matches!(ops.action, Action::Skipped(_)), "{report}");

    let apps = slack.apps();
    assert_eq!(apps.len(), 1, "only the ${{VAR}} seat gets an app");
    let app = &apps[0];
    assert_eq!(
        app.manifest["display_information"]["name"],
        "Software Engineer"
    );
    assert_eq!(
        app.manifest["settings"]["event_subscriptions"]["request_url"],
        "https://crew.example/webhooks/slack/eng"
    );
    let written = dir.env();
    assert_eq!(
        written.get("SLACK_SIGNING_SECRET_ENG"),
        Some(&app.signing_secret)
    );
    let token = written
        .get("SLACK_BOT_TOKEN_ENG")
        .unwrap_or_else(|| panic!("no bot token in {written:?}"));
    assert!(token.starts_with("xoxb-"));
    assert!(
        written
            .get("SLACK_BOT_USER_ENG")
            .is_some_and(|u| u.starts_with("UBOT"))
    );
    assert_eq!(mode(&dir.env_file()), 0o600);
    assert_eq!(mode(&dir.ledger()), 0o600);
    let ledger = Ledger::load(&dir.ledger()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ledger.apps["eng"].app_id, app.app_id);
    assert_eq!(ledger.apps["eng"].client_secret, app.client_secret);
    assert_eq!(*asked.lock(), ["eng"]);

    // Again: nothing changed, nothing to install.
    let mut env = store(&dir, &[(CONFIG_TOKEN_VAR, BOOT_TOKEN)]);
    let again = run(&slack, &company, &mut env, &mut prompt, &options(&dir)).await;
    let eng = again.seat("eng").unwrap_or_else(|| panic!("{again}"));
    assert_eq!(eng.action, Action::Unchanged, "{again}");
    assert!(!eng.installed);
    assert_eq!(slack.calls("apps.manifest.create"), 1);
    assert_eq!(slack.calls("apps.manifest.update"), 0);
    assert_eq!(asked.lock().len(), 1, "no second install");
    assert_eq!(dir.env().get("SLACK_BOT_TOKEN_ENG"), Some(token));

    // A new base URL is a new manifest: the app is updated in place.
    let mut moved = options(&dir);
    moved.base_url = "https://new.example".into();
    let updated = run(&slack, &company, &mut env, &mut prompt, &moved).await;
    assert_eq!(
        updated.seat("eng").map(|s| &s.action),
        Some(&Action::Updated)
    );
    assert_eq!(slack.apps()[0].updates, 1);
    assert_eq!(
        slack.apps()[0].manifest["settings"]["event_subscriptions"]["request_url"],
        "https://new.example/webhooks/slack/eng"
    );
}

#[tokio::test]
async fn a_dry_run_validates_and_creates_nothing() {
    let slack = Arc::new(FakeSlack::start().await);
    slack.add_config_token(BOOT_TOKEN);
    let dir = Dir::new("dry");
    let company = company(DESIGNER);
    let mut prompt = |_: &str, _: &str| -> Result<String, String> { Err("never asked".into()) };
    let mut env = store(&dir, &[(CONFIG_TOKEN_VAR, BOOT_TOKEN)]);
    let mut opts = options(&dir);
    opts.dry_run = true;
    let report = run(&slack, &company, &mut env, &mut prompt, &opts).await;
    assert!(!report.failed(), "{report}");
    assert_eq!(
        report.seat("eng").map(|s| &s.action),
        Some(&Action::WouldCreate)
    );
    assert_eq!(
        report.seat("design").map(|s| &s.action),
        Some(&Action::WouldCreate)
    );
    assert!(report.to_string().contains("would install"));
    assert_eq!(slack.calls("apps.manifest.validate"), 2);
    assert!(slack.apps().is_empty());
    assert!(!dir.ledger().exists());
    assert!(!dir.env_file().exists());
}

#[tokio::test]
async fn one_seat_failing_does_not_stop_the_others_and_a_rerun_resumes_it() {
    let slack = Arc::new(FakeSlack::start().await);
    slack.add_config_token(BOOT_TOKEN);
    let dir = Dir::new("partial");
    let company = company(DESIGNER);
    let asked = Arc::new(Mutex::new(Vec::new()));
    let mut approve = operator(&slack, &asked);
    // The operator mistypes eng's code.
    let mut prompt = |handle: &str, url: &str| {
        if handle == "eng" {
            Ok("not-a-code".to_owned())
        } else {
            approve(handle, url)
        }
    };
    let mut env = store(&dir, &[(CONFIG_TOKEN_VAR, BOOT_TOKEN)]);
    let report = run(&slack, &company, &mut env, &mut prompt, &options(&dir)).await;
    assert!(report.failed());
    assert!(
        matches!(&report.seat("eng").map(|s| &s.action), Some(Action::Failed(why)) if why.contains("invalid_code")),
        "{report}"
    );
    let design = report.seat("design").unwrap_or_else(|| panic!("{report}"));
    assert_eq!(design.action, Action::Created);
    assert!(design.installed);
    // eng's app exists and its signing secret is already usable.
    assert!(dir.env().contains_key("SLACK_SIGNING_SECRET_ENG"));
    assert!(!dir.env().contains_key("SLACK_BOT_TOKEN_ENG"));

    let mut prompt = operator(&slack, &asked);
    let mut env = store(&dir, &[(CONFIG_TOKEN_VAR, BOOT_TOKEN)]);
    let rerun = run(&slack, &company, &mut env, &mut prompt, &options(&dir)).await;
    assert!(!rerun.failed(), "{rerun}");
    let eng = rerun.seat("eng").unwrap_or_else(|| panic!("{rerun}"));
    assert_eq!(eng.action, Action::Unchanged);
    assert!(eng.installed, "the missing token is installed on the rerun");
    assert_eq!(slack.apps().len(), 2, "no duplicate app");
}

#[tokio::test]
async fn the_configuration_token_is_rotated_and_the_new_pair_persisted() {
    let slack = Arc::new(FakeSlack::start().await);
    slack.add_refresh_token("xoxe-1-from-file");
    let dir = Dir::new("rotate");
    std::fs::write(
        dir.env_file(),
        "# provisioning state\nSLACK_CONFIG_REFRESH_TOKEN=xoxe-1-from-file\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let company = company("");
    let mut prompt = |_: &str, _: &str| -> Result<String, String> { Err("skipped".into()) };
    // A stale export in the shell must not shadow the file's pair.
    let shell = [(CONFIG_REFRESH_TOKEN_VAR, "xoxe-1-stale")];
    let mut env = store(&dir, &shell);
    let mut opts = options(&dir);
    opts.skip_install = true;
    let report = run(&slack, &company, &mut env, &mut prompt, &opts).await;
    assert!(!report.failed(), "{report}");
    assert!(
        report
            .seat("eng")
            .is_some_and(|s| s.notes.iter().any(|n| n.contains("install skipped")))
    );
    let written = dir.env();
    let token = written.get(CONFIG_TOKEN_VAR).cloned().unwrap_or_default();
    assert!(token.starts_with("xoxe.xoxp-fake-"), "{written:?}");
    let refresh = written
        .get(CONFIG_REFRESH_TOKEN_VAR)
        .cloned()
        .unwrap_or_default();
    assert!(refresh.starts_with("xoxe-1-fake-"), "{written:?}");
    let expires: i64 = written
        .get(CONFIG_TOKEN_EXPIRES_VAR)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(expires > chrono::Utc::now().timestamp());
    assert!(
        std::fs::read_to_string(dir.env_file())
            .is_ok_and(|t| t.starts_with("# provisioning state"))
    );
    assert_eq!(slack.calls("tooling.tokens.rotate"), 1);

    // The stored token is fresh: the next run does not rotate again.
    let mut env = store(&dir, &shell);
    let again = run(&slack, &company, &mut env, &mut prompt, &opts).await;
    assert!(!again.failed(), "{again}");
    assert_eq!(slack.calls("tooling.tokens.rotate"), 1);

    // The stored token is refused (revoked early): rotated once, then retried.
    slack.expire_config_token(&token);
    let mut moved = opts.clone();
    moved.base_url = "https://new.example".into();
    let mut env = store(&dir, &shell);
    let retried = run(&slack, &company, &mut env, &mut prompt, &moved).await;
    assert_eq!(
        retried.seat("eng").map(|s| &s.action),
        Some(&Action::Updated),
        "{retried}"
    );
    assert_eq!(slack.calls("tooling.tokens.rotate"), 2);
    assert_ne!(dir.env().get(CONFIG_TOKEN_VAR), Some(&token));
}

#[tokio::test]
async fn mixed_credentials_are_refused_and_rate_limits_fail_only_their_seat() {
    let slack = Arc::new(FakeSlack::start().await);
    slack.add_config_token(BOOT_TOKEN);
    let dir = Dir::new("refused");
    let company = company(
        "  - name: Mixed
    handle: mixed
    integrations:
      slack: {signing_secret: \"${SLACK_SIGNING_SECRET_MIXED}\", bot_token: xoxb-literal}
",
    );
    let mut prompt = |_: &str, _: &str| -> Result<String, String> { Err("skipped".into()) };
    let mut env = store(&dir, &[(CONFIG_TOKEN_VAR, BOOT_TOKEN)]);
    let mut opts = options(&dir);
    opts.skip_install = true;
    opts.rate_limit_budget = std::time::Duration::ZERO;
    slack.rate_limit("apps.manifest.create", true);
    let report = run(&slack, &company, &mut env, &mut prompt, &opts).await;
    assert!(report.failed());
    assert!(
        matches!(report.seat("mixed").map(|s| &s.action), Some(Action::Failed(why)) if why.contains("literal")),
        "{report}"
    );
    assert!(
        matches!(report.seat("eng").map(|s| &s.action), Some(Action::Failed(why)) if why.contains("rate limited")),
        "{report}"
    );
    assert!(matches!(
        report.seat("ops").map(|s| &s.action),
        Some(Action::Skipped(_))
    ));
    slack.rate_limit("apps.manifest.create", false);
    let mut env = store(&dir, &[(CONFIG_TOKEN_VAR, BOOT_TOKEN)]);
    let later = run(&slack, &company, &mut env, &mut prompt, &opts).await;
    assert_eq!(later.seat("eng").map(|s| &s.action), Some(&Action::Created));
}
