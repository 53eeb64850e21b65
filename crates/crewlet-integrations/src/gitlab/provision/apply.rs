//! [`apply`]: carry out a [`Plan`], seat by seat, then the hooks, and
//! report what was done.

use super::super::client::{GitlabClient, Space};
use super::{HookAction, HookPlan, Plan, SeatPlan, Step};
use crate::provision::envfile::TokenSink;
use crate::provision::outcome::{any_changed, any_failed, record_token, revoked_again};
use crate::provision::{MintedToken, Outcome, SeatOutcome};

/// What was done about one hook.
#[derive(Debug, Clone)]
pub struct HookOutcome {
    /// `group acme` or `project acme/app`.
    pub target: String,
    /// `created`, `updated`, or empty.
    pub done: Option<String>,
    pub outcome: Outcome,
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub seats: Vec<SeatOutcome>,
    pub hooks: Vec<HookOutcome>,
    pub minted: Vec<MintedToken>,
}

impl Report {
    pub fn failed(&self) -> bool {
        any_failed(&self.seats) || self.hooks.iter().any(|h| h.outcome.is_failed())
    }

    /// Whether anything on GitLab or in the env file changed.
    pub fn changed(&self) -> bool {
        any_changed(&self.seats) || self.hooks.iter().any(|h| h.done.is_some())
    }
}

/// Carries out `plan` as the admin, recording minted tokens in `sink`;
/// `on_step(who, what)` hears of each change as it is made.
pub async fn apply(
    plan: &Plan,
    admin: &GitlabClient,
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
                    user_id: seat.user_id,
                };
                match run.steps(steps).await {
                    Ok(()) => Outcome::Ok,
                    Err(why) => Outcome::Failed(why),
                }
            }
        };
        report.seats.push(out);
    }
    for hook in &plan.hooks {
        report
            .hooks
            .push(apply_hook(plan, admin, hook, on_step).await);
    }
    report
}

async fn apply_hook(
    plan: &Plan,
    admin: &GitlabClient,
    hook: &HookPlan,
    on_step: &mut dyn FnMut(&str, &str),
) -> HookOutcome {
    let target = format!("{} {}", hook.space.noun(), hook.path);
    let mut out = HookOutcome {
        target: target.clone(),
        done: None,
        outcome: Outcome::Ok,
    };
    let existing = match &hook.action {
        HookAction::Keep => return out,
        HookAction::Fail(why) => {
            out.outcome = Outcome::Failed(why.clone());
            return out;
        }
        HookAction::Create => None,
        HookAction::Update { hook_id, .. } => Some(*hook_id),
    };
    let Some(token) = plan.webhook_token.as_deref() else {
        out.outcome = Outcome::Failed("integrations.gitlab.webhook_token is not set".into());
        return out;
    };
    match admin
        .put_hook(hook.space, hook.id, existing, &plan.hook_url, token)
        .await
    {
        Ok(_) => {
            let what = if existing.is_some() {
                "updated the hook"
            } else {
                "created the hook"
            };
            on_step(&target, what);
            out.done = Some(what.to_owned());
        }
        Err(e) => out.outcome = Outcome::Failed(format!("cannot write the hook: {e}")),
    }
    out
}

struct SeatRun<'a> {
    admin: &'a GitlabClient,
    plan: &'a Plan,
    seat: &'a SeatPlan,
    sink: &'a mut dyn TokenSink,
    on_step: &'a mut dyn FnMut(&str, &str),
    out: &'a mut SeatOutcome,
    minted: &'a mut Vec<MintedToken>,
    user_id: Option<u64>,
}

impl SeatRun<'_> {
    fn done(&mut self, what: String) {
        (self.on_step)(&self.seat.handle, &what);
        self.out.done.push(what);
    }

    fn uid(&self) -> Result<u64, String> {
        self.user_id
            .ok_or_else(|| "the user's id is unknown".to_owned())
    }

    async fn steps(&mut self, steps: &[Step]) -> Result<(), String> {
        let admin = self.admin;
        for step in steps {
            match step {
                Step::Create { email } => {
                    let user = admin
                        .create_user(&self.seat.username, &self.seat.name, email)
                        .await
                        .map_err(|e| format!("cannot create the user: {e}"))?;
                    self.user_id = Some(user.id);
                    self.done("created".into());
                }
                Step::Join {
                    space,
                    id,
                    path,
                    level,
                } => {
                    admin
                        .add_member(*space, *id, self.uid()?, *level)
                        .await
                        .map_err(|e| format!("cannot join {} {path}: {e}", space.noun()))?;
                    self.done(format!("joined {} {path}", space.noun()));
                }
                Step::SetLevel {
                    space,
                    id,
                    path,
                    to,
                    ..
                } => {
                    admin
                        .set_member_level(*space, *id, self.uid()?, *to)
                        .await
                        .map_err(|e| {
                            format!("cannot change its access to {} {path}: {e}", space.noun())
                        })?;
                    self.done(level_change(*space, path, *to));
                }
                Step::Mint { var, .. } => self.mint(var).await?,
            }
        }
        Ok(())
    }

    /// Mints a token and records it; a token that cannot be recorded is
    /// revoked again, so none is left live that nobody holds.
    async fn mint(&mut self, var: &str) -> Result<(), String> {
        let uid = self.uid()?;
        let name = format!("crewlet-{}", self.seat.handle);
        let token = self
            .admin
            .mint_token(uid, &name, &self.plan.scopes, &self.plan.expires_at)
            .await
            .map_err(|e| format!("cannot mint a token: {e}"))?;
        let recorded = record_token(
            &mut *self.sink,
            var,
            &token.token,
            "GitLab returned no token value",
        );
        if let Err(why) = recorded {
            let revoked = self.admin.revoke_token(token.id).await;
            return Err(revoked_again(&why, token.id, revoked));
        }
        self.minted
            .push(MintedToken::new(&self.seat.handle, var, token.token));
        self.done(format!(
            "minted token into {var} (expires {})",
            self.plan.expires_at
        ));
        Ok(())
    }
}

fn level_change(space: Space, path: &str, to: u32) -> String {
    format!(
        "now {} of {} {path}",
        super::seats::level_name(to),
        space.noun()
    )
}
