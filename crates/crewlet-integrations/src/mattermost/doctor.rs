//! `crewlet mattermost doctor`: check an install the way it breaks, without
//! changing anything and without an admin credential.
//!
//! In order: the server answers (`/system/ping`, no credentials); its
//! SiteURL is the configured url; a websocket upgrade shaped like a
//! browser's (with an `Origin`) is accepted, which is what the web app of
//! every person on the team depends on; the team exists. Then per seat:
//! its token resolves, `/users/me` is a bot with the expected username, it
//! is in the team and in its channels, and a real websocket authenticates
//! with it (the seat's only way to hear anything).
//!
//! Every check is [`Check::NotChecked`] until it runs, so a report never
//! shows a failure nobody observed; a server that does not answer stops
//! the run there.

use std::fmt;
use std::time::Duration;

use crewlet_config::Company;
use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

use super::client::MattermostClient;
use super::seats::{self, EnvLookup, SeatSpec};
use super::wire::Frame;

/// How long each websocket probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(15);

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    NotChecked,
    /// Passed, with what was seen.
    Ok(String),
    /// Checked and wrong, in plain words.
    Bad(String),
}

impl Check {
    pub fn is_bad(&self) -> bool {
        matches!(self, Check::Bad(_))
    }

    pub fn is_ok(&self) -> bool {
        matches!(self, Check::Ok(_))
    }

    /// `ok`, `FAILED` or `?`.
    pub fn cell(&self) -> &'static str {
        match self {
            Check::NotChecked => "?",
            Check::Ok(_) => "ok",
            Check::Bad(_) => "FAILED",
        }
    }

    fn line(&self) -> String {
        match self {
            Check::NotChecked => "? (not checked)".into(),
            Check::Ok(d) if d.is_empty() => "ok".into(),
            Check::Ok(d) => format!("ok ({d})"),
            Check::Bad(d) => format!("FAILED: {d}"),
        }
    }
}

/// One seat's checks.
#[derive(Debug, Clone)]
pub struct SeatCheck {
    pub handle: String,
    /// The username the company file gives the bot.
    pub username: String,
    pub token: Check,
    pub account: Check,
    pub team: Check,
    pub channels: Check,
    pub websocket: Check,
}

impl SeatCheck {
    fn new(handle: &str, username: &str) -> Self {
        SeatCheck {
            handle: handle.to_owned(),
            username: username.to_owned(),
            token: Check::NotChecked,
            account: Check::NotChecked,
            team: Check::NotChecked,
            channels: Check::NotChecked,
            websocket: Check::NotChecked,
        }
    }

    fn checks(&self) -> [(&'static str, &Check); 5] {
        [
            ("token", &self.token),
            ("account", &self.account),
            ("team", &self.team),
            ("channels", &self.channels),
            ("websocket", &self.websocket),
        ]
    }
}

/// What the doctor found.
#[derive(Debug, Clone)]
pub struct DoctorReport {
    pub url: String,
    pub team: String,
    /// Problems with the company file itself.
    pub config: Vec<String>,
    /// `/system/ping`; the detail is the server version.
    pub server: Check,
    pub site_url: Check,
    pub browser_websocket: Check,
    pub team_found: Check,
    pub seats: Vec<SeatCheck>,
}

impl DoctorReport {
    fn new(url: &str, team: &str) -> Self {
        DoctorReport {
            url: url.to_owned(),
            team: team.to_owned(),
            config: Vec::new(),
            server: Check::NotChecked,
            site_url: Check::NotChecked,
            browser_websocket: Check::NotChecked,
            team_found: Check::NotChecked,
            seats: Vec::new(),
        }
    }

    /// Everything found wrong, in plain words.
    pub fn problems(&self) -> Vec<String> {
        let mut out = self.config.clone();
        let server = [
            ("server", &self.server),
            ("site url", &self.site_url),
            ("browser websocket", &self.browser_websocket),
            ("team", &self.team_found),
        ];
        for (what, check) in server {
            if let Check::Bad(why) = check {
                out.push(format!("{what}: {why}"));
            }
        }
        for seat in &self.seats {
            for (what, check) in seat.checks() {
                if let Check::Bad(why) = check {
                    out.push(format!("seat {} {what}: {why}", seat.handle));
                }
            }
        }
        out
    }

    pub fn ok(&self) -> bool {
        self.problems().is_empty()
    }
}

/// Checks the company's Mattermost install; `env` resolves `${VAR}`s.
pub async fn diagnose(company: &Company, env: EnvLookup<'_>) -> DoctorReport {
    let mm = match seats::enabled(company) {
        Ok(mm) => mm,
        Err(e) => {
            let mut report = DoctorReport::new("", "");
            report.config.push(e);
            return report;
        }
    };
    let specs = seats::seat_specs(company, mm, env);
    let mut report = DoctorReport::new(&mm.url, &mm.team);
    report.seats = specs
        .iter()
        .map(|s| SeatCheck::new(&s.handle, s.username.as_deref().unwrap_or_default()))
        .collect();
    if specs.is_empty() {
        report
            .config
            .push("no agent seat has integrations.mattermost: there is nothing to check".into());
    }
    let anon = match seats::server_url(mm, env)
        .and_then(|url| MattermostClient::new(&url, "").map_err(|e| e.to_string()))
    {
        Ok(c) => c,
        Err(e) => {
            report.config.push(e);
            return report;
        }
    };
    report.url = anon.base_url().to_owned();
    match anon.ping().await {
        Ok(version) => report.server = Check::Ok(format!("Mattermost {version}")),
        Err(e) => {
            report.server = Check::Bad(format!(
                "cannot reach {}: {e}; check the url, that the server runs and that this host can reach it",
                report.url
            ));
            return report;
        }
    }
    report.site_url = site_url(&anon).await;
    report.browser_websocket = browser_upgrade(&anon).await;

    // Tokens first: the team lookup borrows the first seat's that resolves.
    let tokens: Vec<Result<String, String>> = specs.iter().map(|s| s.token.resolve(env)).collect();
    let mut team_id = None;
    for token in tokens.iter().flatten() {
        match anon.with_token(token).team_by_name(&mm.team).await {
            Ok(team) => {
                report.team_found = Check::Ok(mm.team.clone());
                team_id = Some(team.id);
                break;
            }
            Err(e) if e.is_not_found() => {
                report.team_found = Check::Bad(format!(
                    "team `{}` does not exist: channels belong to a team, so no seat can hear anything",
                    mm.team
                ));
                break;
            }
            // A refused token is that seat's problem, reported with it.
            Err(e) if e.is_auth() => {}
            Err(e) => {
                report.team_found = Check::Bad(format!("cannot look up team `{}`: {e}", mm.team))
            }
        }
    }
    for ((spec, token), seat) in specs.iter().zip(tokens).zip(report.seats.iter_mut()) {
        check_seat(&anon, spec, token, team_id.as_deref(), seat).await;
    }
    report
}

async fn site_url(anon: &MattermostClient) -> Check {
    let config = match anon.client_config().await {
        Ok(c) => c,
        Err(e) => return Check::Bad(format!("cannot read the client config: {e}")),
    };
    let reported = config["SiteURL"].as_str().unwrap_or_default().trim();
    if reported.is_empty() {
        return Check::Bad(
            "the server has no SiteURL: the links it builds and browsers' live updates break"
                .into(),
        );
    }
    if seats::origin(reported) == seats::origin(anon.base_url()) {
        Check::Ok(reported.to_owned())
    } else {
        Check::Bad(format!(
            "the server's SiteURL is {reported}, not {}: Mattermost accepts a browser's \
             websocket only from the SiteURL's origin, so people using this address get no \
             live updates; set ServiceSettings.SiteURL to the address people use",
            anon.base_url()
        ))
    }
}

/// A websocket upgrade with the `Origin` a browser at the configured url sends.
async fn browser_upgrade(anon: &MattermostClient) -> Check {
    let url = anon.websocket_url();
    let Some(origin) = seats::origin(anon.base_url()) else {
        return Check::Bad(format!("{} has no origin", anon.base_url()));
    };
    let mut request = match url.as_str().into_client_request() {
        Ok(r) => r,
        Err(e) => return Check::Bad(format!("cannot build the upgrade request: {e}")),
    };
    match HeaderValue::from_str(&origin) {
        Ok(v) => {
            request.headers_mut().insert("origin", v);
        }
        Err(e) => return Check::Bad(format!("`{origin}` is not a header value: {e}")),
    }
    use tokio_tungstenite::tungstenite::Error as WsError;
    match tokio::time::timeout(
        PROBE_TIMEOUT,
        crewlet_http::connect_websocket(request, None),
    )
    .await
    {
        Ok(Ok((mut ws, _))) => {
            let _ = ws.close(None).await;
            Check::Ok(format!("upgraded with Origin: {origin}"))
        }
        Ok(Err(WsError::Http(response))) if response.status().as_u16() == 403 => {
            Check::Bad(format!(
                "the server refuses a browser's websocket from {origin} (403): its SiteURL does \
                 not match this address, so the web app gets no live updates here"
            ))
        }
        Ok(Err(WsError::Http(response))) => Check::Bad(format!(
            "the upgrade with Origin: {origin} was answered {}",
            response.status()
        )),
        Ok(Err(e)) => Check::Bad(format!("the upgrade with Origin: {origin} failed: {e}")),
        Err(_) => Check::Bad(format!(
            "the upgrade timed out after {}s",
            PROBE_TIMEOUT.as_secs()
        )),
    }
}

async fn check_seat(
    anon: &MattermostClient,
    spec: &SeatSpec,
    token: Result<String, String>,
    team_id: Option<&str>,
    seat: &mut SeatCheck,
) {
    let token = match token {
        Ok(t) => t,
        Err(e) => {
            seat.token = Check::Bad(format!("{e}; run `crewlet mattermost provision`"));
            return;
        }
    };
    seat.token = Check::Ok(String::new());
    let bot = anon.with_token(&token);
    let me = match bot.me().await {
        Ok(me) => me,
        Err(e) if e.is_auth() => {
            seat.account = Check::Bad(format!(
                "the server refuses the token ({e}): revoked, or its bot disabled; run \
                 `crewlet mattermost provision`"
            ));
            return;
        }
        Err(e) => {
            seat.account = Check::Bad(format!("cannot check the token: {e}"));
            return;
        }
    };
    let expected = spec.username.as_deref().unwrap_or_default();
    seat.account = if !me.is_bot {
        Check::Bad(format!(
            "the token is @{}'s, which is not a bot account",
            me.username
        ))
    } else if !expected.is_empty() && !me.username.eq_ignore_ascii_case(expected) {
        Check::Bad(format!(
            "the token belongs to @{}, not to @{expected}",
            me.username
        ))
    } else {
        Check::Ok(format!("@{}", me.username))
    };
    if let Some(team_id) = team_id {
        seat.team = match bot.is_team_member(team_id, &me.id).await {
            Ok(true) => Check::Ok(String::new()),
            Ok(false) => Check::Bad("the bot is not in the team".into()),
            Err(e) => Check::Bad(format!("cannot read its team membership: {e}")),
        };
        seat.channels = channels(&bot, spec, team_id, &me.id).await;
    }
    seat.websocket = seat_socket(&bot, &token).await;
}

async fn channels(bot: &MattermostClient, spec: &SeatSpec, team_id: &str, user_id: &str) -> Check {
    let wanted = match &spec.channels {
        Ok(w) => w,
        Err(e) => return Check::Bad(format!("channel: {e}")),
    };
    let joined = match bot.channels_for_user(user_id, team_id).await {
        Ok(list) => list,
        Err(e) => return Check::Bad(format!("cannot list its channels: {e}")),
    };
    let mut names: Vec<&str> = joined
        .iter()
        .filter(|c| !c.is_direct())
        .map(|c| c.name.as_str())
        .collect();
    names.sort_unstable();
    let missing: Vec<String> = wanted
        .iter()
        .filter(|w| !names.contains(&w.as_str()))
        .map(|w| format!("~{w}"))
        .collect();
    if !missing.is_empty() {
        return Check::Bad(format!(
            "not in {}: a bot hears nothing from a channel it is not in",
            missing.join(", ")
        ));
    }
    if names.is_empty() {
        return Check::Bad("in no channel of the team: only DMs can reach it".into());
    }
    Check::Ok(names.join(","))
}

/// The engine's own connection: no `Origin`, then the token challenge.
async fn seat_socket(bot: &MattermostClient, token: &str) -> Check {
    let url = bot.websocket_url();
    let attempt = async {
        let (mut ws, _) = crewlet_http::connect_websocket(url.as_str(), None)
            .await
            .map_err(|e| format!("the upgrade failed: {e}"))?;
        let challenge = json!({"seq": 1, "action": "authentication_challenge",
                               "data": {"token": token}});
        ws.send(Message::Text(challenge.to_string().into()))
            .await
            .map_err(|e| format!("cannot send the challenge: {e}"))?;
        let verdict = loop {
            let msg = match ws.next().await {
                None => break Err("the server closed the socket".to_owned()),
                Some(Err(e)) => break Err(format!("socket error: {e}")),
                Some(Ok(m)) => m,
            };
            let Message::Text(text) = msg else { continue };
            let Ok(frame) = serde_json::from_str::<Frame>(text.as_str()) else {
                continue;
            };
            if frame.seq_reply == Some(1) {
                break if frame.status == "OK" {
                    Ok(())
                } else {
                    let why = frame.error["message"].as_str().unwrap_or("FAIL").to_owned();
                    Err(format!(
                        "the server refused the token on the websocket: {why}"
                    ))
                };
            }
        };
        let _ = ws.close(None).await;
        verdict
    };
    match tokio::time::timeout(PROBE_TIMEOUT, attempt).await {
        Ok(Ok(())) => Check::Ok(String::new()),
        Ok(Err(e)) => Check::Bad(e),
        Err(_) => Check::Bad(format!(
            "no answer to the authentication within {}s",
            PROBE_TIMEOUT.as_secs()
        )),
    }
}

impl fmt::Display for DoctorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "url          : {}", self.url)?;
        writeln!(f, "server       : {}", self.server.line())?;
        writeln!(f, "site url     : {}", self.site_url.line())?;
        writeln!(f, "browser ws   : {}", self.browser_websocket.line())?;
        match &self.team_found {
            Check::Ok(_) => writeln!(f, "team         : {}", self.team_found.line())?,
            other => writeln!(f, "team         : {}, {}", self.team, other.line())?,
        }
        if !self.seats.is_empty() {
            let hw = self
                .seats
                .iter()
                .map(|s| s.handle.len())
                .fold(4, usize::max);
            let uw = self
                .seats
                .iter()
                .map(|s| s.username.len())
                .fold(8, usize::max);
            writeln!(f)?;
            writeln!(
                f,
                "{:hw$}  {:uw$}  TOKEN   ACCOUNT TEAM    WS      CHANNELS",
                "SEAT", "USERNAME"
            )?;
            for s in &self.seats {
                let channels = match &s.channels {
                    Check::Ok(names) => names.clone(),
                    other => other.cell().to_owned(),
                };
                writeln!(
                    f,
                    "{:hw$}  {:uw$}  {:7} {:7} {:7} {:7} {channels}",
                    s.handle,
                    s.username,
                    s.token.cell(),
                    s.account.cell(),
                    s.team.cell(),
                    s.websocket.cell(),
                )?;
            }
            writeln!(f)?;
        }
        let problems = self.problems();
        if problems.is_empty() {
            write!(f, "problems     : none")
        } else {
            write!(f, "problems     :")?;
            for p in problems {
                write!(f, "\n  - {p}")?;
            }
            Ok(())
        }
    }
}
