//! [`SecretValues`] conformance, and the [`SecretStore`] over it.

use std::sync::Arc;

use chrono::Utc;

use super::ok;
use crate::repos::secrets::{SealedSecret, SecretValues};
use crate::secret_store::{Keyring, KeyringError, SecretError, SecretStore};

fn row(name: &str, value: &str) -> SealedSecret {
    SealedSecret {
        name: name.to_owned(),
        value: value.to_owned(),
        key_id: "k1".to_owned(),
        updated_at: Utc::now(),
        updated_by: "ops".to_owned(),
        source: "cli".to_owned(),
    }
}

fn ring(active: &str, keys: &[(&str, &str)]) -> Arc<Keyring> {
    let keys = keys.iter().map(|(k, m)| ((*k).to_owned(), (*m).to_owned()));
    Arc::new(ok(Keyring::new(active, keys), "building a keyring"))
}

pub async fn rows_are_put_replaced_listed_and_removed(repo: Arc<dyn SecretValues>) {
    assert!(ok(repo.list().await, "list").is_empty());
    ok(repo.put(&row("B_TOKEN", "enc:v1:k1:b")).await, "put");
    ok(repo.put(&row("A_TOKEN", "enc:v1:k1:a")).await, "put");
    // A second put of a name replaces it.
    ok(repo.put(&row("A_TOKEN", "enc:v1:k1:a2")).await, "put again");
    let names: Vec<String> = ok(repo.list().await, "list")
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["A_TOKEN", "B_TOKEN"]);
    let a = ok(repo.get("A_TOKEN").await, "get");
    assert_eq!(a.as_ref().map(|r| r.value.as_str()), Some("enc:v1:k1:a2"));
    assert_eq!(a.as_ref().map(|r| r.source.as_str()), Some("cli"));
    assert!(ok(repo.get("NOPE").await, "get").is_none());

    // Replace only while the envelope is still the one read.
    assert!(!ok(
        repo.replace("enc:v1:k1:a", &row("A_TOKEN", "enc:v1:k2:x"))
            .await,
        "stale replace"
    ));
    assert!(ok(
        repo.replace("enc:v1:k1:a2", &row("A_TOKEN", "enc:v1:k2:x"))
            .await,
        "replace"
    ));
    assert!(!ok(
        repo.replace("enc:v1:k1:q", &row("NOPE", "enc:v1:k2:x"))
            .await,
        "replace missing"
    ));
    assert!(ok(repo.get("NOPE").await, "get").is_none());

    assert!(ok(repo.remove("A_TOKEN").await, "remove"));
    assert!(!ok(repo.remove("A_TOKEN").await, "remove again"));
    assert_eq!(ok(repo.list().await, "list").len(), 1);
}

pub async fn the_store_seals_lists_names_only_and_loads_values(repo: Arc<dyn SecretValues>) {
    let k1 = Keyring::generate_key();
    let store = SecretStore::new(repo.clone(), Some(ring("k1", &[("k1", &k1)])));
    ok(
        store.set("GITHUB_TOKEN", "ghp-123", "ops", "cli").await,
        "set",
    );
    ok(
        store.set("SLACK_BOT_TOKEN", "xoxb-9", "ops", "cli").await,
        "set",
    );
    // What the table holds is sealed.
    for r in ok(repo.list().await, "raw list") {
        assert!(r.value.starts_with("enc:v1:k1:"), "{}", r.name);
        assert!(!r.value.contains("ghp-123") && !r.value.contains("xoxb-9"));
        assert_eq!(r.key_id, "k1");
    }
    let listed = ok(store.list().await, "list");
    assert_eq!(listed.len(), 2);
    assert!(!format!("{listed:?}").contains("ghp-123"));
    let values = ok(store.load().await, "load");
    assert_eq!(
        values.get("GITHUB_TOKEN").map(String::as_str),
        Some("ghp-123")
    );
    assert_eq!(
        values.get("SLACK_BOT_TOKEN").map(String::as_str),
        Some("xoxb-9")
    );
    assert!(matches!(
        store.set("not a name", "v", "ops", "cli").await,
        Err(SecretError::InvalidName(_))
    ));

    // Another key material under the same id: a clear error naming both.
    let other = SecretStore::new(
        repo.clone(),
        Some(ring("k1", &[("k1", &Keyring::generate_key())])),
    );
    let e = other
        .load()
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("`k1`") && e.contains("GITHUB_TOKEN"), "{e}");
    // No keyring: nothing can be stored, and stored rows are refused.
    let none = SecretStore::new(repo.clone(), None);
    assert!(matches!(
        none.set("X", "v", "ops", "cli").await,
        Err(SecretError::NoKeyring)
    ));
    assert!(matches!(
        none.load().await,
        Err(SecretError::RowsWithoutKeyring(2))
    ));
    assert!(ok(none.remove("GITHUB_TOKEN").await, "remove"));
    assert!(ok(none.remove("SLACK_BOT_TOKEN").await, "remove"));
    assert!(ok(none.load().await, "load empty").is_empty());
}

pub async fn rekey_moves_every_secret_to_the_active_key(repo: Arc<dyn SecretValues>) {
    let k1 = Keyring::generate_key();
    let k2 = Keyring::generate_key();
    let old = SecretStore::new(repo.clone(), Some(ring("k1", &[("k1", &k1)])));
    for (name, value) in [("A", "1"), ("B", "2"), ("C", "3")] {
        ok(old.set(name, value, "ops", "cli").await, "set");
    }
    // The new key is active; the old one is still listed.
    let both = SecretStore::new(repo.clone(), Some(ring("k2", &[("k1", &k1), ("k2", &k2)])));
    ok(both.set("D", "4", "ops", "cli").await, "set under k2");
    let report = ok(both.rekey("ops").await, "rekey");
    assert_eq!(
        (report.resealed, report.current, report.changed_meanwhile),
        (3, 1, 0)
    );
    for r in ok(repo.list().await, "list") {
        assert_eq!(r.key_id, "k2", "{}", r.name);
        assert!(r.value.starts_with("enc:v1:k2:"));
    }
    // The old key can go now.
    let new_only = SecretStore::new(repo.clone(), Some(ring("k2", &[("k2", &k2)])));
    let values = ok(new_only.load().await, "load under k2 only");
    assert_eq!(values.len(), 4);
    assert_eq!(values.get("A").map(String::as_str), Some("1"));
    // Again: nothing to do.
    let again = ok(new_only.rekey("ops").await, "rekey again");
    assert_eq!((again.resealed, again.current), (0, 4));
    // And before a rekey, dropping the old key names it.
    ok(old.set("E", "5", "ops", "cli").await, "set under k1");
    let e = new_only.load().await.err();
    assert!(
        matches!(&e, Some(SecretError::Keyring(KeyringError::MissingKey { key_id, .. })) if key_id == "k1"),
        "{e:?}"
    );
}
