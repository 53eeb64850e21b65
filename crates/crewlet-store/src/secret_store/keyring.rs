//! The keyring from the bootstrap file's `secrets` block: AES-256-GCM keys by
//! id, one of them active. A sealed value is the envelope
//! `enc:v1:<key_id>:<base64(nonce || ciphertext)>`, with the secret's name as
//! associated data, so an envelope copied to another name does not open.

use std::fmt;

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

const PREFIX: &str = "enc:v1:";
const NONCE_LEN: usize = 12;

/// Why a key or a sealed value is refused. Names keys and secrets, never
/// material or values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyringError {
    #[error("secrets.keys: the key `{id}` is refused: {reason}")]
    BadKey { id: String, reason: String },
    #[error(
        "secrets.active_key_id `{id}` names no key in secrets.keys (keys: {known}); new secrets are sealed with the active key"
    )]
    NoActiveKey { id: String, known: String },
    #[error(
        "the secret `{name}` was sealed with the key `{key_id}`, which is not in secrets.keys: add that key back (keep old keys until `crewlet secrets rekey` has moved every secret)"
    )]
    MissingKey { name: String, key_id: String },
    #[error(
        "the secret `{name}` does not open with the key `{key_id}`: the key material is not the one that sealed it, or the row was altered"
    )]
    WrongKey { name: String, key_id: String },
    #[error("the secret `{name}` is not a sealed value (expected `enc:v1:<key id>:...`)")]
    NotSealed { name: String },
}

/// AES-256-GCM keys by id.
pub struct Keyring {
    active: String,
    keys: Vec<(String, Aes256Gcm)>,
}

impl fmt::Debug for Keyring {
    // Key ids only: never the material.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("active", &self.active)
            .field("keys", &self.key_ids())
            .finish()
    }
}

impl Keyring {
    /// `keys` are `(id, base64 of 32 bytes)`; `active_key_id` must be one of
    /// them.
    pub fn new(
        active_key_id: &str,
        keys: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, KeyringError> {
        let mut out: Vec<(String, Aes256Gcm)> = Vec::new();
        for (id, material) in keys {
            let bad = |reason: &str| KeyringError::BadKey {
                id: id.clone(),
                reason: reason.to_owned(),
            };
            if id.is_empty() || id.contains(':') {
                return Err(bad("a key id is a non-empty name without `:`"));
            }
            if out.iter().any(|(k, _)| *k == id) {
                return Err(bad("the id is listed twice"));
            }
            let material = material.trim();
            if material.is_empty() {
                return Err(bad(
                    "the material is empty (is its `${VAR}` set in the environment?)",
                ));
            }
            let bytes = STANDARD.decode(material).map_err(|_| {
                bad("the material is not base64 (`crewlet secrets keygen` makes one)")
            })?;
            let cipher = Aes256Gcm::new_from_slice(&bytes)
                .map_err(|_| bad("the material is not 32 bytes (AES-256)"))?;
            out.push((id, cipher));
        }
        if !out.iter().any(|(k, _)| k == active_key_id) {
            return Err(KeyringError::NoActiveKey {
                id: active_key_id.to_owned(),
                known: out
                    .iter()
                    .map(|(k, _)| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        Ok(Self {
            active: active_key_id.to_owned(),
            keys: out,
        })
    }

    /// A new random key's material (base64 of 32 bytes).
    pub fn generate_key() -> String {
        STANDARD.encode(Aes256Gcm::generate_key(OsRng))
    }

    pub fn active_key_id(&self) -> &str {
        &self.active
    }

    pub fn key_ids(&self) -> Vec<&str> {
        self.keys.iter().map(|(k, _)| k.as_str()).collect()
    }

    /// `value` sealed under the active key, bound to `name`.
    pub fn seal(&self, name: &str, value: &str) -> Result<String, KeyringError> {
        let cipher = self.cipher(name, &self.active)?;
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let sealed = cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: value.as_bytes(),
                    aad: name.as_bytes(),
                },
            )
            .map_err(|_| KeyringError::WrongKey {
                name: name.to_owned(),
                key_id: self.active.clone(),
            })?;
        let mut bytes = Vec::with_capacity(NONCE_LEN + sealed.len());
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&sealed);
        Ok(format!(
            "{PREFIX}{}:{}",
            self.active,
            STANDARD.encode(bytes)
        ))
    }

    /// The value sealed in `envelope` for `name`.
    pub fn open(&self, name: &str, envelope: &str) -> Result<String, KeyringError> {
        let not_sealed = || KeyringError::NotSealed {
            name: name.to_owned(),
        };
        let key_id = envelope_key_id(envelope).ok_or_else(not_sealed)?;
        let body = &envelope[PREFIX.len() + key_id.len() + 1..];
        let cipher = self.cipher(name, key_id)?;
        let wrong = || KeyringError::WrongKey {
            name: name.to_owned(),
            key_id: key_id.to_owned(),
        };
        let bytes = STANDARD.decode(body).map_err(|_| not_sealed())?;
        if bytes.len() < NONCE_LEN {
            return Err(not_sealed());
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let plain = cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: name.as_bytes(),
                },
            )
            .map_err(|_| wrong())?;
        String::from_utf8(plain).map_err(|_| wrong())
    }

    fn cipher(&self, name: &str, key_id: &str) -> Result<&Aes256Gcm, KeyringError> {
        self.keys
            .iter()
            .find(|(k, _)| k == key_id)
            .map(|(_, c)| c)
            .ok_or_else(|| KeyringError::MissingKey {
                name: name.to_owned(),
                key_id: key_id.to_owned(),
            })
    }
}

/// The id of the key that sealed `envelope`, when it is one.
pub fn envelope_key_id(envelope: &str) -> Option<&str> {
    let rest = envelope.strip_prefix(PREFIX)?;
    let (key_id, _) = rest.split_once(':')?;
    (!key_id.is_empty()).then_some(key_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(active: &str, ids: &[&str]) -> (Keyring, Vec<String>) {
        let materials: Vec<String> = ids.iter().map(|_| Keyring::generate_key()).collect();
        let keys = ids
            .iter()
            .zip(&materials)
            .map(|(id, m)| ((*id).to_owned(), m.clone()));
        match Keyring::new(active, keys) {
            Ok(k) => (k, materials),
            Err(e) => panic!("{e}"),
        }
    }

    fn ok<T, E: fmt::Display>(r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_sealed_value_opens_under_its_name_only() {
        let (k, _) = ring("k1", &["k1"]);
        let sealed = ok(k.seal("SLACK_TOKEN", "xoxb-secret"));
        assert!(sealed.starts_with("enc:v1:k1:"));
        assert!(!sealed.contains("xoxb-secret"));
        assert_eq!(ok(k.open("SLACK_TOKEN", &sealed)), "xoxb-secret");
        // Bound to the name: moved to another row, it does not open.
        assert_eq!(
            k.open("OTHER", &sealed),
            Err(KeyringError::WrongKey {
                name: "OTHER".into(),
                key_id: "k1".into()
            })
        );
        // Two seals of one value differ (fresh nonce).
        assert_ne!(ok(k.seal("SLACK_TOKEN", "xoxb-secret")), sealed);
    }

    #[test]
    fn old_keys_still_open_what_they_sealed() {
        let (old, materials) = ring("k1", &["k1"]);
        let sealed = ok(old.seal("A", "v"));
        let both = ok(Keyring::new(
            "k2",
            [
                ("k1".to_owned(), materials[0].clone()),
                ("k2".to_owned(), Keyring::generate_key()),
            ],
        ));
        assert_eq!(ok(both.open("A", &sealed)), "v");
        assert!(ok(both.seal("A", "v")).starts_with("enc:v1:k2:"));
    }

    #[test]
    fn a_missing_or_wrong_key_is_named() {
        let (k1, _) = ring("k1", &["k1"]);
        let sealed = ok(k1.seal("A", "v"));
        let (k2, _) = ring("k2", &["k2"]);
        let e = k2.open("A", &sealed).err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("`k1`") && e.contains("`A`")),
            "{e:?}"
        );
        // Same id, other material.
        let (other, _) = ring("k1", &["k1"]);
        assert!(matches!(
            other.open("A", &sealed),
            Err(KeyringError::WrongKey { key_id, .. }) if key_id == "k1"
        ));
        assert!(matches!(
            k1.open("A", "plain text"),
            Err(KeyringError::NotSealed { .. })
        ));
    }

    #[test]
    fn bad_keyrings_are_refused_with_the_key_id() {
        let short = STANDARD.encode([1u8; 16]);
        let e = Keyring::new("k", [("k".to_owned(), short)]).err();
        assert!(
            matches!(e, Some(KeyringError::BadKey { ref id, .. }) if id == "k"),
            "{e:?}"
        );
        let e = Keyring::new("k", [("k".to_owned(), "not base64!".to_owned())]).err();
        assert!(matches!(e, Some(KeyringError::BadKey { .. })), "{e:?}");
        let e = Keyring::new("k", [("k".to_owned(), String::new())]).err();
        assert!(matches!(e, Some(KeyringError::BadKey { .. })), "{e:?}");
        let e = Keyring::new("missing", [("k".to_owned(), Keyring::generate_key())]).err();
        assert!(
            matches!(e, Some(KeyringError::NoActiveKey { ref id, .. }) if id == "missing"),
            "{e:?}"
        );
        // Debug never shows material.
        let material = Keyring::generate_key();
        let k = ok(Keyring::new("k", [("k".to_owned(), material.clone())]));
        assert!(!format!("{k:?}").contains(&material));
    }
}
