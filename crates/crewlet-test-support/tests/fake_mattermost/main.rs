//! The fake Mattermost behaves like the real one where a bot integration
//! looks: REST, the websocket, faults, bots and tokens.

mod support;

use crewlet_test_support::mattermost::{ChannelType, FakeMattermost};
use futures::StreamExt;
use serde_json::{Value, json};
use support::{
    DEADLINE, TestResult, World, api, connect, ends_abruptly, event, recv, send, world, ws_url,
};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

#[tokio::test]
async fn rest_posts_membership_since_and_auth() -> TestResult {
    let World {
        mm,
        town,
        alice,
        bot,
    } = world().await;
    let team = mm.add_team("other-team");
    let elsewhere = mm.add_channel(&team, "elsewhere", ChannelType::Private);

    let (status, ping) = api(&mm, None, "GET", "/system/ping", None).await?;
    assert_eq!((status, ping), (200, json!({"status": "OK"})));

    let body = json!({"channel_id": town, "message": "hello from the bot"});
    let (status, post) = api(&mm, Some(&bot.token), "POST", "/posts", Some(body)).await?;
    assert_eq!(status, 201, "{post}");
    assert_eq!(post["user_id"], bot.id.as_str());
    assert_eq!(post["props"]["from_bot"], "true");
    let post_id = post["id"].as_str().ok_or("post id")?.to_owned();
    assert_eq!(post_id.len(), 26);

    let body = json!({"channel_id": elsewhere, "message": "not a member"});
    let (status, error) = api(&mm, Some(&bot.token), "POST", "/posts", Some(body)).await?;
    assert_eq!(status, 403);
    assert_eq!(error["id"], "api.context.permissions.app_error");
    assert_eq!(error["status_code"], 403);
    assert!(mm.posts_in(&elsewhere).is_empty());

    // Nothing changed since the post; a reaction brings it back.
    let since = post["update_at"].as_i64().ok_or("update_at")?;
    let path = format!("/channels/{town}/posts?since={since}");
    let (status, page) = api(&mm, Some(&bot.token), "GET", &path, None).await?;
    assert_eq!(status, 200);
    assert_eq!(page["order"], json!([]));
    mm.react_as(&alice.id, &post_id, "thumbsup");
    let (_, page) = api(&mm, Some(&bot.token), "GET", &path, None).await?;
    assert_eq!(page["order"], json!([post_id]));
    let again = &page["posts"][&post_id];
    assert!(again["update_at"].as_i64() > Some(since));
    assert_eq!(again["create_at"], post["create_at"]);
    assert_eq!(mm.reactions().len(), 1);

    // Without `since`: a page, newest first (the join posts are older).
    let (_, page) = api(
        &mm,
        Some(&alice.token),
        "GET",
        &format!("/channels/{town}/posts"),
        None,
    )
    .await?;
    let order = page["order"].as_array().ok_or("order")?;
    assert_eq!(order.len(), 3);
    assert_eq!(order[0], post_id.as_str());
    let kinds: Vec<String> = mm.posts_in(&town).iter().map(|p| p.kind.clone()).collect();
    assert_eq!(kinds, ["system_join_channel", "system_join_channel", ""]);
    let path = format!("/channels/{elsewhere}/posts");
    assert_eq!(api(&mm, Some(&bot.token), "GET", &path, None).await?.0, 403);
    assert!(
        mm.requests()
            .contains(&("GET".into(), format!("/api/v4/channels/{town}/posts")))
    );

    // Replies must point at a post of the same channel.
    let body = json!({"channel_id": town, "message": "reply", "root_id": post_id});
    let (status, reply) = api(&mm, Some(&alice.token), "POST", "/posts", Some(body)).await?;
    assert_eq!((status, &reply["root_id"]), (201, &json!(post_id)));
    let body = json!({"channel_id": town, "message": "reply", "root_id": "nope"});
    assert_eq!(
        api(&mm, Some(&alice.token), "POST", "/posts", Some(body))
            .await?
            .0,
        400
    );

    // Reactions and typing over REST.
    let body = json!({"user_id": bot.id, "post_id": post_id, "emoji_name": "eyes"});
    assert_eq!(
        api(
            &mm,
            Some(&bot.token),
            "POST",
            "/reactions",
            Some(body.clone())
        )
        .await?
        .0,
        201
    );
    assert_eq!(
        api(&mm, Some(&alice.token), "POST", "/reactions", Some(body))
            .await?
            .0,
        403
    );
    let body = json!({"channel_id": town, "parent_id": post_id});
    let (status, ok) = api(
        &mm,
        Some(&bot.token),
        "POST",
        "/users/me/typing",
        Some(body),
    )
    .await?;
    assert_eq!((status, ok), (200, json!({"status": "OK"})));
    assert_eq!(mm.typing()[0].parent_id, post_id);

    // Bad, missing and unknown.
    let (status, error) = api(&mm, Some("not-a-token"), "GET", "/users/me", None).await?;
    assert_eq!(status, 401);
    assert_eq!(error["id"], "api.context.session_expired.app_error");
    assert_eq!(api(&mm, None, "GET", "/users/me", None).await?.0, 401);
    let (status, error) = api(&mm, Some(&bot.token), "GET", "/no/such/route", None).await?;
    assert_eq!((status, &error["status_code"]), (404, &json!(404)));
    assert_eq!(
        api(&mm, Some(&bot.token), "POST", "/posts", None).await?.0,
        400
    );
    Ok(())
}

#[tokio::test]
async fn rest_lookups() -> TestResult {
    let World {
        mm,
        town,
        alice,
        bot,
    } = world().await;
    let token = Some(bot.token.as_str());
    let (status, me) = api(&mm, token, "GET", "/users/me", None).await?;
    assert_eq!(status, 200);
    assert_eq!(
        (&me["id"], &me["is_bot"], &me["roles"]),
        (&json!(bot.id), &json!(true), &json!("system_user"))
    );
    let (_, user) = api(&mm, token, "GET", "/users/username/alice", None).await?;
    assert_eq!(user["id"], alice.id.as_str());
    assert_eq!(
        api(&mm, token, "GET", "/users/username/nobody", None)
            .await?
            .0,
        404
    );
    let (_, users) = api(
        &mm,
        token,
        "POST",
        "/users/ids",
        Some(json!([alice.id, "x"])),
    )
    .await?;
    assert_eq!(users.as_array().map(Vec::len), Some(1));

    let (_, team) = api(&mm, token, "GET", "/teams/name/acme", None).await?;
    let team_id = team["id"].as_str().ok_or("team id")?;
    let path = format!("/teams/{team_id}/channels/name/town-square");
    let (_, channel) = api(&mm, token, "GET", &path, None).await?;
    assert_eq!(
        (&channel["id"], &channel["type"]),
        (&json!(town), &json!("O"))
    );
    let path = format!("/teams/{team_id}/members/{}", bot.id);
    assert_eq!(api(&mm, token, "GET", &path, None).await?.0, 200);

    // A direct channel: made once, listed with the team's channels.
    let body = json!([bot.id, alice.id]);
    let (status, dm) = api(&mm, token, "POST", "/channels/direct", Some(body.clone())).await?;
    assert_eq!(status, 201);
    assert_eq!(
        api(&mm, token, "POST", "/channels/direct", Some(body))
            .await?
            .0,
        200
    );
    let mut ids = [bot.id.clone(), alice.id.clone()];
    ids.sort();
    assert_eq!(dm["name"], format!("{}__{}", ids[0], ids[1]));
    assert_eq!(
        mm.direct_channel(&alice.id, &bot.id),
        dm["id"].as_str().ok_or("dm id")?
    );
    let path = format!("/users/me/teams/{team_id}/channels");
    let (_, channels) = api(&mm, token, "GET", &path, None).await?;
    let types: Vec<&Value> = channels
        .as_array()
        .ok_or("channels")?
        .iter()
        .map(|c| &c["type"])
        .collect();
    assert_eq!(types, [&json!("O"), &json!("D")]);

    // Membership: a member may add someone; the new member is in the team too.
    let carol = mm.add_user("carol");
    let path = format!("/channels/{town}/members/{}", carol.id);
    assert_eq!(api(&mm, token, "GET", &path, None).await?.0, 404);
    let body = json!({"user_id": carol.id});
    let path = format!("/channels/{town}/members");
    assert_eq!(api(&mm, token, "POST", &path, Some(body)).await?.0, 201);
    let path = format!("/channels/{town}/members/{}", carol.id);
    assert_eq!(api(&mm, token, "GET", &path, None).await?.0, 200);
    let body = json!({"team_id": team_id, "user_id": carol.id});
    let path = format!("/teams/{team_id}/members");
    assert_eq!(api(&mm, token, "POST", &path, Some(body)).await?.0, 403);

    let (_, config) = api(&mm, None, "GET", "/config/client?format=old", None).await?;
    assert_eq!(config["SiteURL"], mm.url());
    assert_eq!(config["EnableBotAccountCreation"], "true");
    assert_eq!(api(&mm, token, "GET", "/config", None).await?.0, 403);
    Ok(())
}

#[tokio::test]
async fn websocket_events_mentions_and_origin() -> TestResult {
    let World {
        mm,
        town,
        alice,
        bot,
    } = world().await;
    let mut ws = connect(&mm, &bot).await?;
    assert_eq!(mm.socket_users(), vec![bot.id.clone()]);

    let post = mm.post_as(&alice.id, &town, "hey @crewbot, look", None);
    let posted = event(&mut ws, "posted").await?;
    assert_eq!(posted["seq"], 1);
    assert_eq!(posted["broadcast"]["channel_id"], town.as_str());
    let data = &posted["data"];
    assert_eq!(
        (&data["channel_type"], &data["sender_name"]),
        (&json!("O"), &json!("@alice"))
    );
    let mentions: Value = serde_json::from_str(data["mentions"].as_str().ok_or("mentions")?)?;
    assert_eq!(mentions, json!([bot.id]));
    let inner: Value = serde_json::from_str(data["post"].as_str().ok_or("post string")?)?;
    assert_eq!(
        (&inner["id"], &inner["message"]),
        (&json!(post.id), &json!(post.message))
    );

    mm.post_as(&alice.id, &town, "no mention here", None);
    let posted = event(&mut ws, "posted").await?;
    assert_eq!(posted["seq"], 2);
    assert!(posted["data"].get("mentions").is_none(), "{posted}");

    // @channel mentions everyone but the author; a DM does not by itself.
    mm.post_as(&alice.id, &town, "@channel lunch", None);
    assert!(
        event(&mut ws, "posted").await?["data"]
            .get("mentions")
            .is_some()
    );
    let dm = mm.direct_channel(&alice.id, &bot.id);
    mm.post_as(&alice.id, &dm, "psst", None);
    let posted = event(&mut ws, "posted").await?;
    assert_eq!(posted["data"]["channel_type"], "D");
    assert!(posted["data"].get("mentions").is_none(), "{posted}");

    // Reactions, and actions from the client.
    mm.react_as(&alice.id, &post.id, "smile");
    let reacted = event(&mut ws, "reaction_added").await?;
    let reaction: Value =
        serde_json::from_str(reacted["data"]["reaction"].as_str().ok_or("reaction")?)?;
    assert_eq!(reaction["emoji_name"], "smile");
    send(&mut ws, json!({"action": "ping", "seq": 2})).await?;
    assert_eq!(
        recv(&mut ws).await?,
        json!({"status": "OK", "seq_reply": 2, "data": {"text": "pong"}})
    );
    let typing =
        json!({"action": "user_typing", "seq": 3, "data": {"channel_id": town, "parent_id": ""}});
    send(&mut ws, typing).await?;
    assert_eq!(
        recv(&mut ws).await?,
        json!({"status": "OK", "seq_reply": 3})
    );
    assert_eq!(mm.typing().len(), 1);

    // Alice, authenticated by header, sees the bot typing.
    let mut request = ws_url(&mm).into_client_request()?;
    let bearer = HeaderValue::from_str(&format!("Bearer {}", alice.token))?;
    request.headers_mut().insert("Authorization", bearer);
    request
        .headers_mut()
        .insert("Origin", HeaderValue::from_str(&mm.url())?);
    let (mut alice_ws, _) = tokio_tungstenite::connect_async(request).await?;
    assert_eq!(recv(&mut alice_ws).await?["event"], "hello");
    mm.wait_for("two sockets", DEADLINE, |mm| mm.sockets() == 2)
        .await;
    let body = json!({"channel_id": town});
    api(
        &mm,
        Some(&bot.token),
        "POST",
        "/users/me/typing",
        Some(body),
    )
    .await?;
    let typing = event(&mut alice_ws, "typing").await?;
    assert_eq!(typing["data"]["user_id"], bot.id.as_str());
    assert_eq!(
        typing["broadcast"]["omit_users"],
        json!({ bot.id.clone(): true })
    );

    // A foreign origin is refused before the upgrade.
    let mut request = ws_url(&mm).into_client_request()?;
    request
        .headers_mut()
        .insert("Origin", HeaderValue::from_static("http://evil.example"));
    match tokio_tungstenite::connect_async(request).await {
        Err(WsError::Http(response)) => assert_eq!(response.status(), 403),
        other => return Err(format!("expected 403, got {other:?}").into()),
    }

    // A wrong token fails the challenge and closes.
    let (mut bad, _) = tokio_tungstenite::connect_async(ws_url(&mm)).await?;
    send(
        &mut bad,
        json!({"seq": 1, "action": "authentication_challenge", "data": {"token": "nope"}}),
    )
    .await?;
    let reply = recv(&mut bad).await?;
    assert_eq!(
        (&reply["status"], &reply["seq_reply"]),
        (&json!("FAIL"), &json!(1))
    );
    assert_eq!(
        reply["error"]["id"],
        "api.web_socket_router.not_authenticated.app_error"
    );
    let closed = tokio::time::timeout(DEADLINE, bad.next()).await?;
    assert!(matches!(closed, Some(Ok(Message::Close(_))) | None));

    mm.refuse_sockets(true);
    match tokio_tungstenite::connect_async(ws_url(&mm)).await {
        Err(WsError::Http(response)) => assert_eq!(response.status(), 503),
        other => return Err(format!("expected 503, got {other:?}").into()),
    }
    Ok(())
}

#[tokio::test]
async fn drop_sockets_stop_and_restart() -> TestResult {
    let World {
        mm,
        town,
        alice,
        bot,
    } = world().await;
    let addr = mm.addr();
    let mut ws = connect(&mm, &bot).await?;
    mm.drop_sockets();
    ends_abruptly(&mut ws).await?;
    mm.wait_for("no sockets", DEADLINE, |mm| mm.sockets() == 0)
        .await;

    // Still serving: a new socket gets the new post.
    let mut ws = connect(&mm, &bot).await?;
    let post = mm.post_as(&alice.id, &town, "still here?", None);
    assert_eq!(event(&mut ws, "posted").await?["seq"], 1);

    mm.stop().await;
    ends_abruptly(&mut ws).await?;
    assert_eq!(mm.sockets(), 0);
    assert!(tokio_tungstenite::connect_async(ws_url(&mm)).await.is_err());
    assert!(
        api(&mm, Some(&bot.token), "GET", "/users/me", None)
            .await
            .is_err()
    );

    mm.restart().await?;
    assert_eq!(mm.addr(), addr);
    let mut ws = connect(&mm, &bot).await?;
    let path = format!("/channels/{town}/posts");
    let (status, page) = api(&mm, Some(&bot.token), "GET", &path, None).await?;
    assert_eq!(status, 200);
    assert_eq!(page["order"][0], post.id.as_str());
    mm.post_as(&alice.id, &town, "back", None);
    assert_eq!(event(&mut ws, "posted").await?["seq"], 1);
    Ok(())
}

#[tokio::test]
async fn bots_and_tokens() -> TestResult {
    let mm = FakeMattermost::start().await;
    let root = mm.add_admin("root");
    let alice = mm.add_user("alice");
    let admin = Some(root.token.as_str());

    let body = json!({"username": "helper", "display_name": "Helper", "description": "helps"});
    let (status, bot) = api(&mm, admin, "POST", "/bots", Some(body.clone())).await?;
    assert_eq!(status, 201, "{bot}");
    assert_eq!(
        (&bot["owner_id"], &bot["delete_at"]),
        (&json!(root.id), &json!(0))
    );
    let bot_id = bot["user_id"].as_str().ok_or("bot id")?.to_owned();
    let (status, error) = api(&mm, admin, "POST", "/bots", Some(body)).await?;
    assert_eq!(
        (status, &error["id"]),
        (400, &json!("app.user.save.username_exists.app_error"))
    );
    let body = json!({"username": "alice", "display_name": "Alice?"});
    assert_eq!(
        api(&mm, admin, "POST", "/bots", Some(body.clone()))
            .await?
            .0,
        400
    );
    assert_eq!(
        api(&mm, Some(&alice.token), "POST", "/bots", Some(body))
            .await?
            .0,
        403
    );

    // A token for the bot authenticates as the bot; its value is shown once.
    let path = format!("/users/{bot_id}/tokens");
    let (status, minted) = api(
        &mm,
        admin,
        "POST",
        &path,
        Some(json!({"description": "crewlet"})),
    )
    .await?;
    assert_eq!((status, &minted["is_active"]), (201, &json!(true)));
    let token = minted["token"].as_str().ok_or("token")?.to_owned();
    let (status, me) = api(&mm, Some(&token), "GET", "/users/me", None).await?;
    assert_eq!(
        (status, &me["id"], &me["is_bot"]),
        (200, &json!(bot_id), &json!(true))
    );
    let (_, listed) = api(
        &mm,
        admin,
        "GET",
        &format!("{path}?page=0&per_page=100"),
        None,
    )
    .await?;
    let listed = listed.as_array().ok_or("tokens")?;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], minted["id"]);
    assert!(listed[0].get("token").is_none());
    assert_eq!(
        api(&mm, Some(&alice.token), "GET", &path, None).await?.0,
        403
    );

    // Disabled: hidden from the plain list, its token refused; then back.
    let (_, disabled) = api(&mm, admin, "POST", &format!("/bots/{bot_id}/disable"), None).await?;
    assert!(disabled["delete_at"].as_i64() > Some(0));
    assert_eq!(
        api(&mm, Some(&token), "GET", "/users/me", None).await?.0,
        401
    );
    let (_, bots) = api(&mm, admin, "GET", "/bots?page=0&per_page=200", None).await?;
    assert_eq!(bots, json!([]));
    let (_, bots) = api(
        &mm,
        admin,
        "GET",
        "/bots?include_deleted=true&page=0&per_page=200",
        None,
    )
    .await?;
    assert_eq!(bots[0]["user_id"], bot_id.as_str());
    let (_, enabled) = api(&mm, admin, "POST", &format!("/bots/{bot_id}/enable"), None).await?;
    assert_eq!(enabled["delete_at"], 0);
    assert_eq!(
        api(&mm, Some(&token), "GET", "/users/me", None).await?.0,
        200
    );
    let body = json!({"display_name": "Helper Two"});
    let (_, patched) = api(&mm, admin, "PUT", &format!("/bots/{bot_id}"), Some(body)).await?;
    assert_eq!(patched["display_name"], "Helper Two");

    // Revoked: gone from the list, refused.
    let body = json!({"token_id": minted["id"]});
    let (status, ok) = api(&mm, admin, "POST", "/users/tokens/revoke", Some(body)).await?;
    assert_eq!((status, ok), (200, json!({"status": "OK"})));
    assert_eq!(
        api(&mm, Some(&token), "GET", "/users/me", None).await?.0,
        401
    );
    assert_eq!(api(&mm, admin, "GET", &path, None).await?.1, json!([]));

    // Settings off.
    mm.set_setting("EnableBotAccountCreation", false);
    mm.set_setting("EnableUserAccessTokens", false);
    let body = json!({"username": "another", "display_name": "Another"});
    let (status, error) = api(&mm, admin, "POST", "/bots", Some(body)).await?;
    assert_eq!(
        (status, &error["id"]),
        (403, &json!("api.bot.create_disabled"))
    );
    let body = json!({"description": "x"});
    let (status, error) = api(&mm, admin, "POST", &path, Some(body)).await?;
    assert_eq!(
        (status, &error["id"]),
        (501, &json!("api.user.create_user_access_token.disabled"))
    );
    let (_, config) = api(&mm, admin, "GET", "/config", None).await?;
    assert_eq!(config["ServiceSettings"]["EnableUserAccessTokens"], false);
    let (_, client) = api(&mm, None, "GET", "/config/client?format=old", None).await?;
    assert_eq!(client["EnableBotAccountCreation"], "false");
    Ok(())
}
