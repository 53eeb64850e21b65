//! The webhook secrets of one company, expanded: each source says where its
//! secrets sit in the company YAML ([`WebhookSource::secrets`]); this module
//! expands `${VAR}` references and holds the values, never printing them.

use std::collections::HashMap;
use std::fmt;

use crewlet_config::{Company, Organization, interpolate};
use tracing::warn;

use super::Source;

/// A secret's bytes; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Box<[u8]>);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into().into_bytes().into_boxed_slice())
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// The secret as text (empty when it is not UTF-8).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Where one secret of a source sits in the company, as the source declares it.
#[derive(Debug, Clone)]
pub struct SecretRef<'c> {
    /// Which of the source's secrets: the YAML field name
    /// (`webhook_secret`, `webhook_token`, `signing_secret`).
    pub name: &'static str,
    /// The seat whose secret this is, for per-seat apps (Slack).
    pub seat: Option<&'c str>,
    /// Its YAML path, named in warnings and errors.
    pub path: String,
    /// The configured value, `${VAR}` references unexpanded.
    pub raw: Option<&'c String>,
}

impl<'c> SecretRef<'c> {
    /// A company-wide secret (not a seat's), at `path` in the YAML.
    pub fn company(name: &'static str, path: impl Into<String>, raw: Option<&'c String>) -> Self {
        Self {
            name,
            seat: None,
            path: path.into(),
            raw,
        }
    }
}

/// The webhook secrets of one company revision, expanded.
#[derive(Debug, Default, Clone)]
pub struct WebhookSecrets {
    by_slot: HashMap<(Source, &'static str, Option<String>), Secret>,
}

impl WebhookSecrets {
    /// Every source's secrets of `company`, `${VAR}` expanded through `env`.
    /// An empty or unexpandable secret is left out (with a warning naming
    /// its path, never a value): its webhooks answer 503 until it is set.
    pub fn from_company(
        company: &Company,
        org: &Organization,
        env: impl Fn(&str) -> Option<String>,
    ) -> Self {
        let mut by_slot = HashMap::new();
        for source in Source::ALL {
            for r in source.webhook().secrets(company, org) {
                let Some(raw) = r.raw else { continue };
                let key = r.path.as_str();
                match interpolate(raw, |name| env(name)) {
                    Ok(v) if !v.trim().is_empty() => {
                        by_slot.insert((source, r.name, r.seat.map(str::to_owned)), Secret::new(v));
                    }
                    Ok(_) => warn!(
                        key,
                        "webhook secret is empty; its webhooks answer 503 until it is set"
                    ),
                    // The error names the variable, never a value.
                    Err(e) => {
                        warn!(key, error = %e, "webhook secret cannot be expanded; its webhooks answer 503 until it is set");
                    }
                }
            }
        }
        Self { by_slot }
    }

    /// Secret `name` of `source` (of seat `seat` for per-seat secrets).
    pub fn get(&self, source: Source, name: &'static str, seat: Option<&str>) -> Option<&Secret> {
        self.by_slot.get(&(source, name, seat.map(str::to_owned)))
    }

    /// Sets a secret (tests, and callers that hold secrets elsewhere).
    pub fn insert(
        &mut self,
        source: Source,
        name: &'static str,
        seat: Option<&str>,
        secret: Secret,
    ) {
        self.by_slot
            .insert((source, name, seat.map(str::to_owned)), secret);
    }

    /// Every expanded secret, as text (to register for redaction).
    pub fn values(&self) -> Vec<String> {
        self.by_slot
            .values()
            .map(|s| String::from_utf8_lossy(s.bytes()).into_owned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_read_where_each_source_declares_them_and_expanded() {
        let yaml = r#"
name: Acme
integrations:
  github: {webhook_secret: "${GH_HOOK}"}
  gitlab: {webhook_token: tok-en, signing_secret: "whsec_c2VjcmV0"}
  jira: {webhook_secret: "   "}
  confluence: {webhook_secret: "${UNSET}"}
roles:
  - name: Eng
    handle: eng
    integrations:
      slack: {signing_secret: slack-sign}
  - {name: Ops, handle: ops}
providers:
  llm:
    main: {type: openai, model: m, api_keys: [k]}
"#;
        let (company, _) =
            crewlet_config::check_company("t.yaml", yaml).unwrap_or_else(|p| panic!("{p:?}"));
        let org = company.organization();
        let env = |k: &str| (k == "GH_HOOK").then(|| "gh-hook".to_owned());
        let s = WebhookSecrets::from_company(&company, &org, env);
        let get = |source, name, seat| s.get(source, name, seat).map(Secret::as_str);
        assert_eq!(get(Source::Github, "webhook_secret", None), Some("gh-hook"));
        assert_eq!(get(Source::Gitlab, "webhook_token", None), Some("tok-en"));
        assert_eq!(
            get(Source::Gitlab, "signing_secret", None),
            Some("whsec_c2VjcmV0")
        );
        assert_eq!(get(Source::Jira, "webhook_secret", None), None, "blank");
        assert_eq!(get(Source::Confluence, "webhook_secret", None), None);
        assert_eq!(get(Source::Plane, "webhook_secret", None), None);
        assert_eq!(
            get(Source::Slack, "signing_secret", Some("eng")),
            Some("slack-sign")
        );
        assert_eq!(get(Source::Slack, "signing_secret", Some("ops")), None);
        let mut values = s.values();
        values.sort();
        assert_eq!(
            values,
            ["gh-hook", "slack-sign", "tok-en", "whsec_c2VjcmV0"]
        );
        assert_eq!(format!("{:?}", Secret::new("x")), "Secret(<redacted>)");
    }
}
