//! The integrations on a corporate network, through their real constructors
//! (which read the environment once, through crewlet-http): a Mattermost seat
//! (REST and its websocket) behind a private CA reached through the proxy
//! HTTPS_PROXY names, and a GitLab server that NO_PROXY sends direct. This
//! binary holds this one test because it writes the process environment.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use crewlet_integrations::gitlab::GitlabClient;
use crewlet_integrations::mattermost::{
    MattermostClient, SeatAccount, SeatInbox, SeatPost, SeatSocket, SocketOptions, Verdict,
};
use crewlet_test_support::gitlab::FakeGitlab;
use crewlet_test_support::mattermost::{ChannelType, FakeMattermost};
use crewlet_test_support::network::{ConnectProxy, TestCa, TlsFront, corporate_env};
use parking_lot::Mutex;
use tokio::sync::watch;

#[derive(Default)]
struct Inbox(Mutex<Vec<String>>);

#[async_trait]
impl SeatInbox for Inbox {
    async fn seen(&self, _: &SeatAccount, post: SeatPost, _: Verdict) -> Result<(), String> {
        self.0.lock().push(post.post.message.clone());
        Ok(())
    }
}

/// Generous: CI runs these under heavy load; the waits end as soon as the
/// condition holds.
const PATIENCE: Duration = Duration::from_secs(60);

#[test]
fn mattermost_through_the_proxy_and_gitlab_direct_trusting_ssl_cert_file() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mm = FakeMattermost::start().await;
        let team = mm.add_team("corp");
        let town = mm.add_channel(&team, "town-square", ChannelType::Open);
        let bot = mm.add_bot("ada", "Ada");
        let alice = mm.add_user("alice");
        mm.join(&town, &bot.id);
        mm.join(&town, &alice.id);
        let gitlab = FakeGitlab::start().await;
        let gitlab_token = gitlab.add_admin("root");

        let ca = TestCa::new();
        let mm_front = TlsFront::start(&ca, mm.addr()).await.unwrap();
        let gitlab_addr = gitlab
            .url()
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .unwrap();
        let gitlab_front = TlsFront::start(&ca, gitlab_addr).await.unwrap();
        let proxy = ConnectProxy::start().await.unwrap();
        // SAFETY: the only test of this binary, on a current-thread runtime,
        // before any client has read the environment.
        unsafe { corporate_env(ca.ca_file(), &proxy.url(), Some("127.0.0.1")) };

        // GitLab at https://127.0.0.1:<port>: NO_PROXY, so direct.
        let gl = GitlabClient::new(
            &format!("https://127.0.0.1:{}", gitlab_front.port()),
            &gitlab_token,
        )
        .unwrap();
        assert_eq!(gl.me().await.unwrap().username, "root");
        assert!(proxy.seen().is_empty(), "{:?}", proxy.seen());
        assert_eq!(gitlab_front.handshakes(), 1);

        // Mattermost at https://localhost:<port>: through the proxy, REST
        // and websocket alike.
        let client = MattermostClient::new(&mm_front.https_url(), &bot.token).unwrap();
        assert_eq!(client.me().await.unwrap().username, "ada");
        let inbox = Arc::new(Inbox::default());
        let socket = SeatSocket::new(
            "ada",
            client,
            "corp",
            SocketOptions::default(),
            inbox.clone(),
        );
        let status = socket.status();
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(socket.run(stopped));
        mm.wait_for("the seat's socket", PATIENCE, |m| {
            m.socket_users() == vec![bot.id.clone()]
        })
        .await;
        mm.post_as(&alice.id, &town, "hello @ada", None);
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !inbox.0.lock().iter().any(|m| m == "hello @ada") {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the post never reached the seat: {:?}",
                status.last_error()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = stop.send(true);
        let _ = task.await;

        let targets = proxy.connect_targets();
        let expected = format!("localhost:{}", mm_front.port());
        assert!(targets.len() >= 2, "REST and websocket: {targets:?}");
        assert!(targets.iter().all(|t| *t == expected), "{targets:?}");
        assert!(
            mm.requests()
                .iter()
                .any(|(m, p)| m == "GET" && p == "/api/v4/websocket")
        );
    });
}
