//! Slack in the engine: the working status a seat's own bot shows in the
//! thread while a Slack-triggered turn runs (`integrations.slack`
//! `typing_status` and `status_phrases`). Inbound Slack events reach the
//! seats through the webhook API and the router, not through here.

mod phrases;
mod status;

pub(crate) use status::SlackStatus;
