use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

/// Claims in memory; `down` makes every call fail, `stuck` every release.
#[derive(Default)]
struct Claims {
    keys: Mutex<HashSet<(String, String)>>,
    down: AtomicBool,
    stuck: AtomicBool,
}

impl Claims {
    fn has(&self, source: &str, key: &str) -> bool {
        self.keys
            .lock()
            .contains(&(source.to_owned(), key.to_owned()))
    }

    fn check(&self) -> Result<(), String> {
        if self.down.load(Ordering::SeqCst) {
            Err("down".into())
        } else {
            Ok(())
        }
    }
}

impl ClaimStore for Claims {
    type Error = String;

    async fn claim(&self, source: &str, key: &str) -> Result<bool, String> {
        self.check()?;
        Ok(self.keys.lock().insert((source.to_owned(), key.to_owned())))
    }

    async fn is_claimed(&self, source: &str, key: &str) -> Result<bool, String> {
        self.check()?;
        Ok(self.has(source, key))
    }

    async fn release(&self, source: &str, key: &str) -> Result<(), String> {
        self.check()?;
        if self.stuck.load(Ordering::SeqCst) {
            return Err("stuck".into());
        }
        self.keys
            .lock()
            .remove(&(source.to_owned(), key.to_owned()));
        Ok(())
    }
}

fn keys(k: &[&str]) -> Vec<String> {
    k.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn a_new_delivery_is_claimed_published_and_confirmed_then_a_duplicate() {
    let store = Claims::default();
    let k = keys(&["d1", "sha256:aa"]);
    let Admission::New(claim) = admit(&store, "github", &k).await else {
        panic!("new delivery not admitted");
    };
    assert_eq!(claim.keys(), k.as_slice());
    let published = claim.publish(async { Ok::<_, String>(7) }).await;
    let value = match published {
        Ok(p) => p.confirm().await,
        Err(e) => panic!("{e:?}"),
    };
    assert_eq!(value, 7);
    assert!(store.has("github", "d1#published"));
    assert!(matches!(
        admit(&store, "github", &k).await,
        Admission::Duplicate { replay: false }
    ));
    // The same body under a fresh id: a replay.
    assert!(matches!(
        admit(&store, "github", &keys(&["d2", "sha256:aa"])).await,
        Admission::Duplicate { replay: true }
    ));
}

#[tokio::test]
async fn a_failed_publish_gives_the_claims_back() {
    let store = Claims::default();
    let k = keys(&["d1"]);
    let Admission::New(claim) = admit(&store, "github", &k).await else {
        panic!("new delivery not admitted");
    };
    let failed = claim.publish(async { Err::<(), _>("queue down") }).await;
    let Err(unpublished) = failed else {
        panic!("the publish failed")
    };
    assert_eq!(unpublished.error, "queue down");
    assert!(unpublished.unreleased.is_empty());
    assert!(!store.has("github", "d1"));
    assert!(matches!(
        admit(&store, "github", &k).await,
        Admission::New(_)
    ));
    // A release that fails is reported, not hidden.
    let other = keys(&["d5"]);
    let Admission::New(claim) = admit(&store, "github", &other).await else {
        panic!("new delivery not admitted");
    };
    store.stuck.store(true, Ordering::SeqCst);
    let failed = claim.publish(async { Err::<(), _>("queue down") }).await;
    assert!(matches!(failed, Err(Unpublished { ref unreleased, .. }) if unreleased.len() == 1));
}

#[tokio::test]
async fn an_unconfirmed_or_unreachable_claim_defers_to_the_router() {
    let store = Claims::default();
    let k = keys(&["d1"]);
    // Claimed by a process that never confirmed the publish.
    assert!(store.claim("github", "d1").await.unwrap_or_default());
    assert!(matches!(
        admit(&store, "github", &k).await,
        Admission::Deferred(ref c) if c.keys().is_empty()
    ));
    store.down.store(true, Ordering::SeqCst);
    assert!(matches!(
        admit(&store, "github", &keys(&["d2"])).await,
        Admission::Deferred(_)
    ));
}

#[tokio::test]
async fn a_seen_delivery_goes_on_only_when_let_through_and_the_question_is_asked_once() {
    let store = Claims::default();
    let k = keys(&["r/d1", "r/sha256:aa"]);
    assert!(matches!(
        claim(&store, "engine.router", &k, || false).await,
        Claim::New(_)
    ));
    assert!(matches!(
        claim(&store, "engine.router", &k, || false).await,
        Claim::Seen { index: 0, .. }
    ));
    let mut asked = 0;
    let through = claim(&store, "engine.router", &k, || {
        asked += 1;
        true
    })
    .await;
    assert!(matches!(through, Claim::New(ref c) if c.keys().is_empty()));
    assert_eq!(asked, 1);
    store.down.store(true, Ordering::SeqCst);
    assert!(matches!(
        claim(&store, "engine.router", &k, || false).await,
        Claim::Unavailable(_)
    ));
}
