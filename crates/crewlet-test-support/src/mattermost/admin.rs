//! Config, bot accounts and personal access tokens.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::rest::{
    Query, Reply, Res, bad_request, body_json, created, fail, field, forbidden, not_found, ok,
    resolve, user_not_found,
};
use super::state::{Data, SERVER_VERSION};

const BOTS: &str = "EnableBotAccountCreation";
const TOKENS: &str = "EnableUserAccessTokens";

fn flag(on: bool) -> &'static str {
    if on { "true" } else { "false" }
}

pub(crate) fn client_config(d: &Data) -> Res {
    ok(json!({
        "SiteURL": d.site_url,
        "Version": SERVER_VERSION,
        "BuildNumber": "fake",
        "TimeBetweenUserTypingUpdatesMilliseconds": "5000",
        "EnableBotAccountCreation": flag(d.setting(BOTS)),
        "EnableUserAccessTokens": flag(d.setting(TOKENS)),
    }))
}

pub(crate) fn config(d: &Data, me: &str) -> Res {
    if !d.is_admin(me) {
        return Err(forbidden());
    }
    ok(json!({
        "ServiceSettings": {
            "SiteURL": d.site_url,
            "EnableBotAccountCreation": d.setting(BOTS),
            "EnableUserAccessTokens": d.setting(TOKENS),
        }
    }))
}

fn admin(d: &Data, me: &str) -> Result<(), Reply> {
    if d.is_admin(me) {
        Ok(())
    } else {
        Err(forbidden())
    }
}

fn bot_not_found() -> Reply {
    not_found("store.sql_bot.get.missing.app_error", "Bot does not exist.")
}

pub(crate) fn list_bots(d: &Data, me: &str, q: &Query) -> Res {
    admin(d, me)?;
    let (skip, take) = q.page(60)?;
    let with_disabled = q.flag("include_deleted");
    let mut bots: Vec<_> = d
        .users
        .values()
        .filter(|u| u.is_bot && (with_disabled || u.delete_at == 0))
        .collect();
    bots.sort_by_key(|u| u.create_at);
    let bots: Vec<Value> = bots
        .into_iter()
        .skip(skip)
        .take(take)
        .map(|u| u.bot_json())
        .collect();
    ok(json!(bots))
}

fn valid_username(name: &str) -> bool {
    let first_ok = name.chars().next().is_some_and(|c| c.is_ascii_lowercase());
    first_ok
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
}

pub(crate) fn create_bot(d: &mut Data, me: &str, body: &[u8]) -> Res {
    admin(d, me)?;
    if !d.setting(BOTS) {
        return Err(fail(
            StatusCode::FORBIDDEN,
            "api.bot.create_disabled",
            "Bot creation has been disabled.",
        ));
    }
    let body = body_json(body)?;
    let username = field(&body, "username")?;
    if !valid_username(username) {
        return Err(bad_request(
            "model.user.is_valid.username.app_error",
            "Username must begin with a letter and contain up to 64 lowercase characters \
             made up of numbers, letters, and the symbols '.', '-', and '_'.",
        ));
    }
    if d.username_taken(username) {
        return Err(bad_request(
            "app.user.save.username_exists.app_error",
            "An account with that username already exists.",
        ));
    }
    let id = d.new_user(username, true, false);
    let Some(bot) = d.users.get_mut(&id) else {
        return Err(user_not_found());
    };
    bot.display_name = body["display_name"].as_str().unwrap_or_default().to_owned();
    bot.description = body["description"].as_str().unwrap_or_default().to_owned();
    bot.owner_id = me.to_owned();
    created(bot.bot_json())
}

pub(crate) fn patch_bot(d: &mut Data, me: &str, id: &str, body: &[u8]) -> Res {
    admin(d, me)?;
    let body = body_json(body)?;
    if !d.users.get(id).is_some_and(|u| u.is_bot) {
        return Err(bot_not_found());
    }
    if let Some(username) = body["username"].as_str() {
        let taken = d.user_by_name(username).is_some_and(|other| other.id != id);
        if taken {
            return Err(bad_request(
                "app.user.save.username_exists.app_error",
                "An account with that username already exists.",
            ));
        }
        if !valid_username(username) {
            return Err(bad_request(
                "model.user.is_valid.username.app_error",
                "Invalid username.",
            ));
        }
    }
    let now = d.now();
    let Some(bot) = d.users.get_mut(id) else {
        return Err(bot_not_found());
    };
    if let Some(username) = body["username"].as_str() {
        bot.username = username.to_owned();
    }
    if let Some(name) = body["display_name"].as_str() {
        bot.display_name = name.to_owned();
    }
    if let Some(description) = body["description"].as_str() {
        bot.description = description.to_owned();
    }
    bot.update_at = now;
    ok(bot.bot_json())
}

pub(crate) fn set_bot_enabled(d: &mut Data, me: &str, id: &str, enabled: bool) -> Res {
    admin(d, me)?;
    let now = d.now();
    let Some(bot) = d.users.get_mut(id).filter(|u| u.is_bot) else {
        return Err(bot_not_found());
    };
    bot.delete_at = if enabled { 0 } else { now };
    bot.update_at = now;
    ok(bot.bot_json())
}

fn tokens_enabled(d: &Data) -> Result<(), Reply> {
    if d.setting(TOKENS) {
        Ok(())
    } else {
        Err(fail(
            StatusCode::NOT_IMPLEMENTED,
            "api.user.create_user_access_token.disabled",
            "Personal access tokens are disabled on this server.",
        ))
    }
}

/// Admins may manage anyone's tokens, a user their own.
fn may_manage(d: &Data, me: &str, user: &str) -> Result<(), Reply> {
    if user == me || d.is_admin(me) {
        Ok(())
    } else {
        Err(forbidden())
    }
}

pub(crate) fn create_token(d: &mut Data, me: &str, user: &str, body: &[u8]) -> Res {
    tokens_enabled(d)?;
    let user = resolve(me, user);
    may_manage(d, me, user)?;
    let body = body_json(body)?;
    let description = field(&body, "description")?;
    if !d.users.contains_key(user) {
        return Err(user_not_found());
    }
    let token = d.mint_token(user, description, false);
    let mut json = token.to_json();
    json["token"] = json!(token.token);
    created(json)
}

pub(crate) fn list_tokens(d: &Data, me: &str, user: &str, q: &Query) -> Res {
    tokens_enabled(d)?;
    let user = resolve(me, user);
    may_manage(d, me, user)?;
    if !d.users.contains_key(user) {
        return Err(user_not_found());
    }
    let (skip, take) = q.page(100)?;
    let tokens: Vec<Value> = d
        .tokens
        .iter()
        .filter(|t| t.user_id == user && !t.session)
        .skip(skip)
        .take(take)
        .map(|t| t.to_json())
        .collect();
    ok(json!(tokens))
}

pub(crate) fn revoke_token(d: &mut Data, me: &str, body: &[u8]) -> Res {
    tokens_enabled(d)?;
    let body = body_json(body)?;
    let token_id = field(&body, "token_id")?;
    let Some(index) = d.tokens.iter().position(|t| t.id == token_id && !t.session) else {
        return Err(not_found(
            "app.user_access_token.get_by_token.app_error",
            "Unable to find the personal access token.",
        ));
    };
    let owner = d.tokens[index].user_id.clone();
    may_manage(d, me, &owner)?;
    d.tokens.remove(index);
    ok(json!({"status": "OK"}))
}
