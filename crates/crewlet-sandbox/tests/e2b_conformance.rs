//! The conformance suite on the E2B backend, against a fake E2B on loopback
//! (this machine cannot reach e2b.dev), and what is E2B's own: the API key,
//! removal of a box that is gone, keepalive as E2B's timeout.

#[path = "common/fake_e2b.rs"]
mod fake_e2b;

use std::sync::Arc;
use std::time::Duration;

use crewlet_sandbox::e2b::{E2bOptions, E2bSandbox};
use crewlet_sandbox::{
    BoxId, BoxSpec, Exec, ExecOutput, Result, RunId, RunOutput, RunState, Sandbox, SandboxError,
};
use fake_e2b::{FakeE2b, KEY};

/// A sandbox against the fake, which lives as long as the sandbox.
struct OnFake {
    sb: E2bSandbox,
    fake: FakeE2b,
}

/// The suite takes a `dyn Sandbox`; this one hands every call on.
#[async_trait::async_trait]
impl Sandbox for OnFake {
    fn backend(&self) -> &'static str {
        self.sb.backend()
    }
    async fn create(&self, spec: &BoxSpec) -> Result<BoxId> {
        self.sb.create(spec).await
    }
    async fn reconnect(&self, id: &BoxId, spec: &BoxSpec) -> Result<()> {
        self.sb.reconnect(id, spec).await
    }
    async fn exec(&self, id: &BoxId, cmd: &Exec) -> Result<ExecOutput> {
        self.sb.exec(id, cmd).await
    }
    async fn start(&self, id: &BoxId, cmd: &Exec) -> Result<RunId> {
        self.sb.start(id, cmd).await
    }
    async fn poll(&self, id: &BoxId, run: &RunId) -> Result<RunState> {
        self.sb.poll(id, run).await
    }
    async fn run_output(&self, id: &BoxId, run: &RunId) -> Result<RunOutput> {
        self.sb.run_output(id, run).await
    }
    async fn write_file(&self, id: &BoxId, path: &str, bytes: &[u8]) -> Result<()> {
        self.sb.write_file(id, path, bytes).await
    }
    async fn read_file(&self, id: &BoxId, path: &str) -> Result<Vec<u8>> {
        self.sb.read_file(id, path).await
    }
    async fn pause(&self, id: &BoxId) -> Result<()> {
        self.sb.pause(id).await
    }
    async fn resume(&self, id: &BoxId) -> Result<()> {
        self.sb.resume(id).await
    }
    async fn keepalive(&self, id: &BoxId, ttl: Duration) -> Result<()> {
        self.sb.keepalive(id, ttl).await
    }
    async fn kill(&self, id: &BoxId) -> Result<()> {
        self.sb.kill(id).await
    }
    async fn list(&self) -> Result<Vec<BoxId>> {
        self.sb.list().await
    }
    async fn reap(&self) -> Result<Vec<BoxId>> {
        self.sb.reap().await
    }
}

fn options(fake: &FakeE2b, key: &str) -> E2bOptions {
    E2bOptions {
        api_key: key.to_owned(),
        domain: "e2b.invalid".into(),
        template: "base".into(),
        api_url_override: Some(fake.url.clone()),
        envd_url_override: Some(fake.url.clone()),
    }
}

async fn on_fake_with(key: &str) -> Option<Arc<OnFake>> {
    let Some(fake) = FakeE2b::start().await else {
        return crewlet_sandbox::testsuite::skip(
            "bubblewrap cannot run here, so the fake E2B cannot either",
        );
    };
    let sb = E2bSandbox::new(options(&fake, key)).unwrap_or_else(|e| panic!("{e}"));
    Some(Arc::new(OnFake { sb, fake }))
}

async fn on_fake() -> Option<Arc<OnFake>> {
    on_fake_with(KEY).await
}

crewlet_sandbox::sandbox_conformance!(on_fake());

#[tokio::test]
async fn the_key_goes_as_x_api_key_and_never_into_errors() {
    let Some(good) = on_fake().await else { return };
    let id = good.create(&crewlet_sandbox::testsuite::spec()).await;
    let id = id.unwrap_or_else(|e| panic!("with the right key: {e}"));
    good.kill(&id).await.unwrap_or_else(|e| panic!("{e}"));

    let wrong = "e2b_wrong_key_987654321";
    let Some(bad) = on_fake_with(wrong).await else {
        return;
    };
    match bad.create(&crewlet_sandbox::testsuite::spec()).await {
        Err(e @ SandboxError::Api(_)) => {
            let text = e.to_string();
            assert!(text.contains("401"), "{text}");
            // The fake echoes the key it was given; the error must not.
            assert!(!text.contains(wrong), "the key leaked: {text}");
        }
        other => panic!("with a wrong key: {other:?}"),
    }
    let listed = bad.list().await;
    assert!(
        matches!(&listed, Err(e) if !e.to_string().contains(wrong)),
        "{listed:?}"
    );
}

#[tokio::test]
async fn a_box_that_is_gone_is_killed_fine_and_found_missing() {
    let Some(sb) = on_fake().await else { return };
    let ghost = BoxId("neverwas123".into());
    sb.kill(&ghost)
        .await
        .unwrap_or_else(|e| panic!("kill on 404: {e}"));
    let exec = sb.exec(&ghost, &Exec::new(["true"])).await;
    assert!(matches!(exec, Err(SandboxError::NoSuchBox(_))), "{exec:?}");
    let read = sb.read_file(&ghost, "x").await;
    assert!(matches!(read, Err(SandboxError::NoSuchBox(_))), "{read:?}");
    let odd = BoxId("../etc".into());
    assert!(matches!(
        sb.exec(&odd, &Exec::new(["true"])).await,
        Err(SandboxError::NoSuchBox(_))
    ));
}

#[tokio::test]
async fn keepalive_sets_the_timeout_and_reap_leaves_it_to_e2b() {
    let Some(sb) = on_fake().await else { return };
    let id = sb
        .create(&crewlet_sandbox::testsuite::spec())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    sb.keepalive(&id, Duration::from_secs(1234))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sb.fake.timeout_of(&id.0), Some(1234));
    assert!(sb.reap().await.unwrap_or_else(|e| panic!("{e}")).is_empty());
    assert!(sb.fake.sandbox_ids().contains(&id.0));
    sb.kill(&id).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(!sb.fake.sandbox_ids().contains(&id.0));
}

#[tokio::test]
async fn another_client_picks_a_box_up_by_its_id() {
    let Some(sb) = on_fake().await else { return };
    let id = sb
        .create(&crewlet_sandbox::testsuite::spec())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    sb.write_file(&id, "note", b"kept")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // A fresh client (an engine after a restart) knows nothing but the id.
    let again = E2bSandbox::new(options(&sb.fake, KEY)).unwrap_or_else(|e| panic!("{e}"));
    again
        .reconnect(&id, &crewlet_sandbox::testsuite::spec())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let out = again
        .exec(&id, &Exec::shell("cat note; echo \" $BOX_VAR\""))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.stdout, "kept from-box\n");
    sb.kill(&id).await.unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn an_error_in_the_end_of_stream_frame_is_an_api_error() {
    let Some(sb) = on_fake().await else { return };
    let id = sb
        .create(&crewlet_sandbox::testsuite::spec())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let out = sb
        .exec(&id, &Exec::new(["true"]).cwd("/home/user/not-there"))
        .await;
    match out {
        Err(SandboxError::Api(m)) => {
            assert!(
                m.contains("invalid_argument") && m.contains("not-there"),
                "{m}"
            );
        }
        other => panic!("exec in a missing cwd: {other:?}"),
    }
    // The box goes on working.
    let ok = sb
        .exec(&id, &Exec::shell("echo fine"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ok.stdout, "fine\n");
    sb.kill(&id).await.unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn a_timed_out_command_leaves_nothing_running() {
    let Some(sb) = on_fake().await else { return };
    let id = sb
        .create(&crewlet_sandbox::testsuite::spec())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let cmd = Exec::shell("(sleep 60; touch late) & echo $! > child; wait")
        .timeout(Duration::from_millis(500));
    let out = sb.exec(&id, &cmd).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(out.timed_out, "{out:?}");
    let child = sb
        .read_file(&id, "child")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let child = String::from_utf8_lossy(&child).trim().to_owned();
    assert!(child.parse::<u32>().is_ok(), "child pid {child:?}");
    // Killed processes may stay zombies until this host's init reaps them,
    // so liveness is the process state, polled until it settles.
    let probe = Exec::shell(format!(
        "s=$(awk '{{print $3}}' /proc/{child}/stat 2>/dev/null); if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo alive; else echo gone; fi"
    ));
    let mut alive = true;
    for _ in 0..250 {
        let said = sb.exec(&id, &probe).await.unwrap_or_else(|e| panic!("{e}"));
        if said.stdout.trim() == "gone" {
            alive = false;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive, "the timed-out command's child {child} still runs");
    sb.kill(&id).await.unwrap_or_else(|e| panic!("{e}"));
}
