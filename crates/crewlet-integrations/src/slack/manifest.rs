//! The app manifest of one agent seat: what `crewlet slack provision`
//! pushes through the manifest API and what the manual setup in
//! `docs/slack.md` lists. One seat, one app: the app is named after the
//! role, its bot after the handle, and Slack delivers its events to the
//! seat's own webhook, `{base}/webhooks/slack/{handle}`.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// Bot token scopes of every seat's app. The token has two readers: the
/// engine (posting, the working status, reading who wrote) and a Slack
/// MCP server the company may give its seats (history, channel lists,
/// reactions). The `*:read` list scopes of every conversation kind are
/// there because a channel listing that covers all kinds fails as a whole
/// when one of them is missing.
pub const BOT_SCOPES: &[&str] = &[
    "app_mentions:read",
    "channels:history",
    "channels:read",
    "chat:write",
    "files:read",
    "groups:history",
    "groups:read",
    "im:history",
    "im:read",
    "im:write",
    "mpim:history",
    "mpim:read",
    "reactions:write",
    "users:read",
];

/// Bot events every seat's app subscribes to: mentions, and messages in
/// each kind of conversation the bot is in (public and private channels,
/// direct and group messages).
pub const BOT_EVENTS: &[&str] = &[
    "app_mention",
    "message.channels",
    "message.groups",
    "message.im",
    "message.mpim",
];

/// Where Slack sends the browser after an install is approved; outside
/// `/webhooks/slack/` so that no handle can collide with it.
pub const OAUTH_CALLBACK_PATH: &str = "/webhooks/slack-oauth";

/// Slack's page an operator opens to install an app in the workspace.
pub const AUTHORIZE_URL: &str = "https://slack.com/oauth/v2/authorize";

/// Slack's limits on the app's name and description.
const NAME_MAX: usize = 35;
const DESCRIPTION_MAX: usize = 140;

/// The seat's Events API request URL.
pub fn events_url(base_url: &str, handle: &str) -> String {
    format!("{}/webhooks/slack/{handle}", base_url.trim_end_matches('/'))
}

/// The OAuth redirect URL every seat's app shares.
pub fn oauth_redirect_url(base_url: &str) -> String {
    format!("{}{OAUTH_CALLBACK_PATH}", base_url.trim_end_matches('/'))
}

fn clip(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

/// The manifest of the app of seat `handle` (role `role_name`).
pub fn seat_manifest(role_name: &str, handle: &str, base_url: &str) -> Value {
    json!({
        "display_information": {
            "name": clip(role_name.trim(), NAME_MAX),
            "description": clip(&format!("Crewlet agent seat @{handle}"), DESCRIPTION_MAX),
        },
        "features": {
            "bot_user": {"display_name": handle, "always_online": true},
        },
        "oauth_config": {
            "redirect_urls": [oauth_redirect_url(base_url)],
            "scopes": {"bot": BOT_SCOPES},
        },
        "settings": {
            "event_subscriptions": {
                "request_url": events_url(base_url, handle),
                "bot_events": BOT_EVENTS,
            },
            "org_deploy_enabled": false,
            "socket_mode_enabled": false,
            "token_rotation_enabled": false,
        },
    })
}

/// The link that installs the app `client_id`; `state` names the seat so
/// the landing page can say whose code it shows.
pub fn authorize_url(client_id: &str, redirect_url: &str, state: &str) -> String {
    let scope = BOT_SCOPES.join(",");
    let params = [
        ("client_id", client_id),
        ("scope", scope.as_str()),
        ("redirect_uri", redirect_url),
        ("state", state),
    ];
    match reqwest::Url::parse_with_params(AUTHORIZE_URL, params) {
        Ok(url) => url.to_string(),
        // AUTHORIZE_URL is a constant that parses; keep a usable fallback.
        Err(_) => format!("{AUTHORIZE_URL}?client_id={client_id}"),
    }
}

/// SHA-256 of the manifest with its keys sorted: equal manifests, equal
/// fingerprints, whatever order their keys were built in.
pub fn fingerprint(manifest: &Value) -> String {
    let canonical = sorted(manifest).to_string();
    hex::encode(Sha256::digest(canonical.as_bytes()))
}

fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for k in keys {
                if let Some(inner) = map.get(k) {
                    out.insert(k.clone(), sorted(inner));
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seat_manifest_points_at_the_seats_webhook() {
        let m = seat_manifest("Software Engineer", "eng", "https://crew.example/");
        assert_eq!(m["display_information"]["name"], "Software Engineer");
        assert_eq!(m["features"]["bot_user"]["display_name"], "eng");
        assert_eq!(
            m["settings"]["event_subscriptions"]["request_url"],
            "https://crew.example/webhooks/slack/eng"
        );
        assert_eq!(
            m["oauth_config"]["redirect_urls"][0],
            "https://crew.example/webhooks/slack-oauth"
        );
        let scopes = m["oauth_config"]["scopes"]["bot"].to_string();
        for s in ["chat:write", "app_mentions:read", "reactions:write"] {
            assert!(scopes.contains(s), "{s} missing");
        }
    }

    #[test]
    fn long_role_names_are_clipped_to_slacks_limit() {
        let m = seat_manifest(&"x".repeat(50), "x", "https://a");
        assert_eq!(
            m["display_information"]["name"].as_str().map(str::len),
            Some(35)
        );
    }

    #[test]
    fn the_fingerprint_ignores_key_order_but_not_content() {
        let a = json!({"a": 1, "b": {"c": [1, 2], "d": "x"}});
        let b = json!({"b": {"d": "x", "c": [1, 2]}, "a": 1});
        let c = json!({"b": {"d": "y", "c": [1, 2]}, "a": 1});
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_ne!(fingerprint(&a), fingerprint(&c));
    }

    #[test]
    fn the_authorize_url_carries_the_client_the_redirect_and_the_seat() {
        let url = authorize_url(
            "123.456",
            "https://crew.example/webhooks/slack-oauth",
            "eng",
        );
        assert!(url.starts_with("https://slack.com/oauth/v2/authorize?client_id=123.456"));
        assert!(url.contains("state=eng"));
        assert!(url.contains("redirect_uri=https%3A%2F%2Fcrew.example%2Fwebhooks%2Fslack-oauth"));
    }
}
