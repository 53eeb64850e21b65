//! [`apply`]: carry out a [`Plan`], seat by seat, and report what was done.

use super::super::client::MattermostClient;
use super::{
    BOT_DESCRIPTION, Plan, RetirePlan, SeatPlan, Step, TOKEN_DESCRIPTION, TokenCheck, check_token,
};
use crate::provision::envfile::TokenSink;
use crate::provision::outcome::{any_changed, any_failed, record_token, revoked_again};
use crate::provision::{MintedToken, Outcome, SeatOutcome};

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub seats: Vec<SeatOutcome>,
    pub minted: Vec<MintedToken>,
}

impl Report {
    pub fn failed(&self) -> bool {
        any_failed(&self.seats)
    }

    /// Whether anything on the server or in the env file changed.
    pub fn changed(&self) -> bool {
        any_changed(&self.seats)
    }
}

/// Carries out `plan` as the admin, recording minted tokens in `sink`;
/// `on_step(handle, what)` hears of each change as it is made.
pub async fn apply(
    plan: &Plan,
    admin: &MattermostClient,
    sink: &mut dyn TokenSink,
    on_step: &mut dyn FnMut(&str, &str),
) -> Report {
    let mut report = Report::default();
    for seat in &plan.seats {
        let mut out = SeatOutcome::new(&seat.handle, &seat.username, seat.notes.clone());
        out.outcome = match seat.action.start() {
            Err(ended) => ended,
            Ok(steps) => {
                let mut run = SeatRun {
                    admin,
                    plan,
                    seat,
                    sink: &mut *sink,
                    on_step: &mut *on_step,
                    out: &mut out,
                    minted: &mut report.minted,
                    user_id: seat.user_id.clone(),
                };
                match run.steps(steps).await {
                    Ok(()) => Outcome::Ok,
                    Err(why) => Outcome::Failed(why),
                }
            }
        };
        report.seats.push(out);
    }
    for r in &plan.retire {
        report.seats.push(retire(admin, r, on_step).await);
    }
    report
}

struct SeatRun<'a> {
    admin: &'a MattermostClient,
    plan: &'a Plan,
    seat: &'a SeatPlan,
    sink: &'a mut dyn TokenSink,
    on_step: &'a mut dyn FnMut(&str, &str),
    out: &'a mut SeatOutcome,
    minted: &'a mut Vec<MintedToken>,
    user_id: Option<String>,
}

impl SeatRun<'_> {
    fn done(&mut self, what: String) {
        (self.on_step)(&self.seat.handle, &what);
        self.out.done.push(what);
    }

    fn uid(&self) -> Result<String, String> {
        self.user_id
            .clone()
            .ok_or_else(|| "the bot's account id is unknown".to_owned())
    }

    async fn steps(&mut self, steps: &[Step]) -> Result<(), String> {
        let admin = self.admin;
        let team_id = self.plan.team_id.as_str();
        for step in steps {
            match step {
                Step::Create => {
                    let bot = admin
                        .create_bot(
                            &self.seat.username,
                            &self.seat.display_name,
                            BOT_DESCRIPTION,
                        )
                        .await
                        .map_err(|e| format!("cannot create the bot: {e}"))?;
                    self.user_id = Some(bot.user_id);
                    self.done("created".into());
                }
                Step::Enable => {
                    admin
                        .enable_bot(&self.uid()?)
                        .await
                        .map_err(|e| format!("cannot enable the bot: {e}"))?;
                    self.done("enabled".into());
                }
                Step::Rename { .. } => {
                    admin
                        .patch_bot(&self.uid()?, &self.seat.display_name)
                        .await
                        .map_err(|e| format!("cannot set its display name: {e}"))?;
                    self.done("renamed".into());
                }
                Step::JoinTeam => {
                    let uid = self.uid()?;
                    let added = admin.add_team_member(team_id, &uid).await;
                    let member = admin.is_team_member(team_id, &uid).await;
                    verified(added, member, &format!("team {}", self.plan.team))?;
                    self.done("joined team".into());
                }
                Step::JoinChannel { name, id } => {
                    let uid = self.uid()?;
                    let added = admin.add_channel_member(id, &uid).await;
                    let member = admin.is_channel_member(id, &uid).await;
                    verified(added, member, &format!("~{name}"))?;
                    self.done(format!("joined ~{name}"));
                }
                Step::Mint { var, .. } => self.mint(var).await?,
                Step::Verify { var } => {
                    let uid = self.uid()?;
                    let recorded = self.seat.recorded.clone().unwrap_or_default();
                    match check_token(admin, &recorded, &uid).await {
                        TokenCheck::Works => {}
                        TokenCheck::Refused(why) => {
                            self.out.notes.push(format!("{why}: replacing it"));
                            self.mint(var).await?;
                        }
                        TokenCheck::Unknown(why) => self.out.notes.push(format!(
                            "cannot check the token in {var} ({why}); left it as it is"
                        )),
                    }
                }
            }
        }
        Ok(())
    }

    /// Mints a token and records it; a token that cannot be recorded is
    /// revoked again, so none is left live that nobody holds.
    async fn mint(&mut self, var: &str) -> Result<(), String> {
        let uid = self.uid()?;
        let token = self
            .admin
            .mint_token(&uid, TOKEN_DESCRIPTION)
            .await
            .map_err(|e| format!("cannot mint a token: {e}"))?;
        let recorded = record_token(
            &mut *self.sink,
            var,
            &token.token,
            "the server returned no token value",
        );
        if let Err(why) = recorded {
            if token.id.is_empty() {
                return Err(format!("{why}; the minted token has no id to revoke it by"));
            }
            let revoked = self.admin.revoke_token(&token.id).await;
            return Err(revoked_again(&why, &token.id, revoked));
        }
        self.minted
            .push(MintedToken::new(&self.seat.handle, var, token.token));
        self.done(format!("minted token into {var}"));
        Ok(())
    }
}

/// A membership that was added counts once a read confirms it.
fn verified(
    added: Result<(), super::super::client::MattermostError>,
    member: Result<bool, super::super::client::MattermostError>,
    what: &str,
) -> Result<(), String> {
    match (added, member) {
        (_, Ok(true)) => Ok(()),
        (Err(e), _) => Err(format!("cannot join {what}: {e}")),
        (Ok(()), Ok(false)) => Err(format!("joined {what}, but it does not list the bot")),
        (Ok(()), Err(e)) => Err(format!("cannot confirm it joined {what}: {e}")),
    }
}

async fn retire(
    admin: &MattermostClient,
    r: &RetirePlan,
    on_step: &mut dyn FnMut(&str, &str),
) -> SeatOutcome {
    let mut out = SeatOutcome::new(&r.handle, &r.username, Vec::new());
    if let Some(why) = &r.fail {
        out.outcome = Outcome::Failed(why.clone());
        return out;
    }
    let Some(uid) = &r.user_id else {
        out.notes
            .push("no such bot: nothing to decommission".into());
        return out;
    };
    if r.disable {
        if let Err(e) = admin.disable_bot(uid).await {
            out.outcome = Outcome::Failed(format!("cannot disable the bot: {e}"));
            return out;
        }
        on_step(&r.handle, "disabled");
        out.done.push("disabled".into());
    }
    let mut left = Vec::new();
    let mut revoked = 0;
    for id in &r.tokens {
        match admin.revoke_token(id).await {
            Ok(()) => revoked += 1,
            Err(e) => left.push(format!("{id} ({e})")),
        }
    }
    if revoked > 0 {
        let what = format!("revoked {revoked} token(s)");
        on_step(&r.handle, &what);
        out.done.push(what);
    }
    if !left.is_empty() {
        out.outcome = Outcome::Failed(format!(
            "{} token(s) still active: {}",
            left.len(),
            left.join(", ")
        ));
    }
    out
}
