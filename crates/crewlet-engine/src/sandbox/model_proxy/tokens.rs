//! The per-run tokens a box uses in place of the model key. A token is
//! two v4 UUIDs from the OS's random source (244 random bits), kept only
//! as its SHA-256 digest: a presented token is hashed and looked up, so no
//! comparison runs over the secret itself. A token is valid from its run's
//! start until it is revoked (the run collected, lost, parked or its box
//! removed); the engine never stores it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

use super::Upstream;
use crate::sandbox::budget::Payer;

/// Tokens carry this prefix, so one found in a log is recognisable.
const PREFIX: &str = "crewlet-run-";

type Digest = [u8; 32];

/// What a token lets its run do, and what the run has spent through it.
#[derive(Debug)]
pub(crate) struct Grant {
    /// The sandbox run (its row's id).
    pub run: Uuid,
    pub seat: String,
    /// The task the run works on (its budget warnings name it).
    pub task_id: String,
    pub upstream: Arc<Upstream>,
    pub payer: Payer,
    calls: AtomicU64,
    tokens: AtomicU64,
    refused: AtomicBool,
}

impl Grant {
    pub(crate) fn new(
        run: Uuid,
        seat: &str,
        task_id: &str,
        upstream: Arc<Upstream>,
        payer: Payer,
    ) -> Self {
        Self {
            run,
            seat: seat.to_owned(),
            task_id: task_id.to_owned(),
            upstream,
            payer,
            calls: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            refused: AtomicBool::new(false),
        }
    }

    /// Counts one model call that was answered, and its tokens.
    pub(crate) fn add(&self, tokens: u64) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.tokens.fetch_add(tokens, Ordering::Relaxed);
    }

    /// True the first time a call of this run is refused for a spent
    /// budget (its event is published once per run).
    pub(crate) fn first_refusal(&self) -> bool {
        !self.refused.swap(true, Ordering::Relaxed)
    }

    /// Model calls answered and tokens charged so far.
    pub(crate) fn spent(&self) -> (u64, u64) {
        (
            self.calls.load(Ordering::Relaxed),
            self.tokens.load(Ordering::Relaxed),
        )
    }
}

/// The live tokens, by digest.
#[derive(Default)]
pub(crate) struct Tokens {
    live: Mutex<Live>,
}

#[derive(Default)]
struct Live {
    by_digest: HashMap<Digest, Arc<Grant>>,
    by_run: HashMap<Uuid, Digest>,
}

fn digest(token: &str) -> Digest {
    Sha256::digest(token.as_bytes()).into()
}

impl Tokens {
    /// A new token for `grant`'s run; an earlier token of the same run is
    /// revoked.
    pub(crate) fn issue(&self, grant: Grant) -> String {
        let mut raw = [0u8; 32];
        raw[..16].copy_from_slice(Uuid::new_v4().as_bytes());
        raw[16..].copy_from_slice(Uuid::new_v4().as_bytes());
        let token = format!("{PREFIX}{}", hex::encode(raw));
        let d = digest(&token);
        let mut live = self.live.lock();
        if let Some(old) = live.by_run.insert(grant.run, d) {
            live.by_digest.remove(&old);
        }
        live.by_digest.insert(d, Arc::new(grant));
        token
    }

    /// The grant of a live token.
    pub(crate) fn verify(&self, presented: &str) -> Option<Arc<Grant>> {
        let presented = presented.trim();
        if !presented.starts_with(PREFIX) {
            return None;
        }
        self.live.lock().by_digest.get(&digest(presented)).cloned()
    }

    /// Ends `run`'s token; its grant (with what it spent), if it had one.
    pub(crate) fn revoke(&self, run: Uuid) -> Option<Arc<Grant>> {
        let mut live = self.live.lock();
        let d = live.by_run.remove(&run)?;
        live.by_digest.remove(&d)
    }

    /// How many tokens are live.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.live.lock().by_digest.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::model_proxy::Vendor;

    fn grant(run: Uuid) -> Grant {
        Grant::new(
            run,
            "eng",
            "t1",
            Arc::new(Upstream {
                vendor: Vendor::Anthropic,
                base: "http://127.0.0.1:1".into(),
                key: Some("real".into()),
            }),
            Payer {
                agent_id: crewlet_core::AgentId::for_seat("C", "eng"),
                limits: crewlet_turn::BudgetLimits::default(),
            },
        )
    }

    #[test]
    fn a_token_is_valid_from_issue_to_revoke_and_never_guessed() {
        let tokens = Tokens::default();
        let run = Uuid::now_v7();
        let t = tokens.issue(grant(run));
        assert!(t.starts_with(PREFIX) && t.len() == PREFIX.len() + 64, "{t}");
        assert_eq!(tokens.verify(&t).map(|g| g.run), Some(run));
        // Whitespace a client may keep around a header value is fine;
        // anything else is another token.
        assert!(tokens.verify(&format!(" {t}\n")).is_some());
        let mut wrong = t.clone();
        wrong.pop();
        wrong.push(if t.ends_with('0') { '1' } else { '0' });
        assert!(tokens.verify(&wrong).is_none());
        assert!(tokens.verify("").is_none());
        assert!(tokens.verify("real").is_none());
        // Two tokens are never the same.
        let other = tokens.issue(grant(Uuid::now_v7()));
        assert_ne!(t, other);
        assert_eq!(tokens.len(), 2);
        // Revoked: gone, with what it spent.
        if let Some(g) = tokens.verify(&t) {
            g.add(30);
            g.add(12);
        }
        let revoked = tokens.revoke(run);
        assert_eq!(revoked.map(|g| g.spent()), Some((2, 42)));
        assert!(tokens.verify(&t).is_none());
        assert!(tokens.revoke(run).is_none(), "revoked twice");
        assert!(tokens.verify(&other).is_some(), "another run's token stays");
    }

    #[test]
    fn a_run_given_a_new_token_loses_its_old_one() {
        let tokens = Tokens::default();
        let run = Uuid::now_v7();
        let first = tokens.issue(grant(run));
        let second = tokens.issue(grant(run));
        assert!(tokens.verify(&first).is_none());
        assert!(tokens.verify(&second).is_some());
        assert_eq!(tokens.len(), 1);
    }
}
