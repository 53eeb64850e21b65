//! Helpers of the fake Mattermost's tests: REST calls, websocket frames,
//! a small world of a team, a channel, a person and a bot.

use std::time::Duration;

use crewlet_test_support::mattermost::{ChannelType, FakeMattermost, User};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub type TestResult = Result<(), Box<dyn std::error::Error>>;
pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Generous: only a broken fake takes this long.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// A REST call; returns the status and the JSON body (`Null` if none).
pub async fn api(
    mm: &FakeMattermost,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Result<(u16, Value), Box<dyn std::error::Error>> {
    let method = reqwest::Method::from_bytes(method.as_bytes())?;
    let mut request = reqwest::Client::new().request(method, format!("{}/api/v4{path}", mm.url()));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.timeout(DEADLINE).send().await?;
    let status = response.status().as_u16();
    let text = response.text().await?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
}

pub fn ws_url(mm: &FakeMattermost) -> String {
    format!("ws://{}/api/v4/websocket", mm.addr())
}

/// The next text frame as JSON.
pub async fn recv(ws: &mut Ws) -> Result<Value, Box<dyn std::error::Error>> {
    loop {
        let frame = tokio::time::timeout(DEADLINE, ws.next()).await?;
        match frame {
            Some(Ok(Message::Text(text))) => return Ok(serde_json::from_str(text.as_str())?),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => return Err(format!("expected a text frame, got {other:?}").into()),
        }
    }
}

/// The next event named `name` (others skipped).
pub async fn event(ws: &mut Ws, name: &str) -> Result<Value, Box<dyn std::error::Error>> {
    loop {
        let frame = recv(ws).await?;
        if frame["event"] == name {
            return Ok(frame);
        }
    }
}

pub async fn send(ws: &mut Ws, frame: Value) -> TestResult {
    ws.send(Message::Text(frame.to_string().into())).await?;
    Ok(())
}

/// Connects, answers the challenge, returns the socket after `hello`.
pub async fn connect(mm: &FakeMattermost, user: &User) -> Result<Ws, Box<dyn std::error::Error>> {
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url(mm)).await?;
    let challenge =
        json!({"seq": 1, "action": "authentication_challenge", "data": {"token": user.token}});
    send(&mut ws, challenge).await?;
    assert_eq!(
        recv(&mut ws).await?,
        json!({"status": "OK", "seq_reply": 1})
    );
    let hello = recv(&mut ws).await?;
    assert_eq!(hello["event"], "hello");
    assert_eq!(hello["seq"], 0);
    assert_eq!(hello["broadcast"]["user_id"], user.id.as_str());
    assert_eq!(hello["data"]["server_version"], "10.5.0");
    Ok(ws)
}

/// The socket ends with an error or EOF, without a close frame.
pub async fn ends_abruptly(ws: &mut Ws) -> TestResult {
    loop {
        match tokio::time::timeout(DEADLINE, ws.next()).await? {
            None | Some(Err(_)) => return Ok(()),
            Some(Ok(Message::Close(frame))) => {
                return Err(format!("got a close frame: {frame:?}").into());
            }
            Some(Ok(_)) => continue,
        }
    }
}

pub struct World {
    pub mm: FakeMattermost,
    pub town: String,
    pub alice: User,
    pub bot: User,
}

pub async fn world() -> World {
    let mm = FakeMattermost::start().await;
    let team = mm.add_team("acme");
    let town = mm.add_channel(&team, "town-square", ChannelType::Open);
    let alice = mm.add_user("alice");
    let bot = mm.add_bot("crewbot", "Crew Bot");
    mm.join(&town, &alice.id);
    mm.join(&town, &bot.id);
    World {
        mm,
        town,
        alice,
        bot,
    }
}
