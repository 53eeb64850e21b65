//! Nothing a box writes can point the engine outside it: real boxes under
//! bubblewrap leave links (to a secret file the test made on the host, and
//! to `/etc/shadow`) and FIFOs where the engine reads and writes, and swap
//! a directory for a link to a host directory while the engine copies files
//! in and out. Every such open is refused with [`SandboxError::Escape`];
//! the host files are never read nor written.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crewlet_sandbox::{BoxId, BoxSpec, Exec, RunId, RunState, Sandbox, SandboxError};

/// A host directory outside every box, with a secret file in it.
struct Host {
    dir: PathBuf,
    secret: PathBuf,
    marker: String,
}

impl Host {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "crewlet-escape-host-{}",
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::create_dir_all(&dir).expect("host dir");
        let marker = format!("HOST-SECRET-{}", uuid::Uuid::now_v7().simple());
        let secret = dir.join("secret");
        std::fs::write(&secret, &marker).expect("secret");
        Self {
            dir,
            secret,
            marker,
        }
    }

    /// The host directory holds its secret, unchanged, and nothing else.
    fn assert_untouched(&self, mtime: std::time::SystemTime) {
        assert_eq!(
            std::fs::read_to_string(&self.secret).ok().as_deref(),
            Some(self.marker.as_str()),
            "the host file was written"
        );
        let meta = std::fs::metadata(&self.secret).expect("secret meta");
        assert_eq!(
            meta.modified().ok(),
            Some(mtime),
            "the host file was touched"
        );
        let names: Vec<_> = std::fs::read_dir(&self.dir)
            .expect("host dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["secret"], "a file appeared on the host");
    }

    fn mtime(&self) -> std::time::SystemTime {
        std::fs::metadata(&self.secret)
            .and_then(|m| m.modified())
            .expect("mtime")
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

/// Starts `script` detached and polls it until it is no longer running.
async fn run_to_end(sb: &dyn Sandbox, id: &BoxId, script: &str) -> (RunId, RunState) {
    let run = sb.start(id, &Exec::shell(script)).await.expect("start");
    let state = poll_to_end(sb, id, &run).await.expect("poll");
    (run, state)
}

async fn poll_to_end(sb: &dyn Sandbox, id: &BoxId, run: &RunId) -> Result<RunState, SandboxError> {
    // Waits for the condition; the bound is only for a run that never ends.
    for _ in 0..12_000 {
        match sb.poll(id, run).await? {
            RunState::Running => tokio::time::sleep(Duration::from_millis(10)).await,
            done => return Ok(done),
        }
    }
    panic!("run {run} still running after minutes");
}

fn escape_at(r: &Result<impl std::fmt::Debug, SandboxError>, suffix: &str) -> bool {
    matches!(r, Err(SandboxError::Escape { path, .. }) if path.ends_with(suffix))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_links_its_output_or_report_to_a_host_file_is_refused() {
    let Some(sb) = common::local().await else {
        return;
    };
    let host = Host::new();
    let mtime = host.mtime();
    let id = sb.create(&BoxSpec::default()).await.expect("create");

    // stdout, then stderr, each swapped for a link once written.
    for (stream, target) in [
        ("stdout", p(&host.secret)),
        ("stderr", "/etc/shadow".to_owned()),
    ] {
        let script = format!(
            "echo out; echo err >&2; for d in /home/user/.crewlet/runs/*/; do \
             [ -L \"${{d}}stdout\" ] || [ -L \"${{d}}stderr\" ] || ln -sf '{target}' \"${{d}}{stream}\"; done"
        );
        let (run, state) = run_to_end(sb.as_ref(), &id, &script).await;
        assert_eq!(state, RunState::Exited { code: 0 }, "{stream}");
        let out = sb.run_output(&id, &run).await;
        assert!(
            escape_at(&out, &format!("/.crewlet/runs/{run}/{stream}")),
            "{stream}: {out:?}"
        );
    }

    // The report, linked to the host secret and to /etc/shadow.
    for target in [p(&host.secret), "/etc/shadow".to_owned()] {
        let out = sb
            .exec(
                &id,
                &Exec::shell(format!(
                    "mkdir -p ~/.crewlet && ln -sf '{target}' ~/.crewlet/findings.md && echo linked"
                )),
            )
            .await
            .expect("link findings");
        assert_eq!(out.stdout, "linked\n", "{out:?}");
        let read = sb.read_file(&id, "/home/user/.crewlet/findings.md").await;
        assert!(escape_at(&read, "/.crewlet/findings.md"), "{read:?}");
        // And the engine's own files written there are refused too.
        let write = sb
            .write_file(&id, "/home/user/.crewlet/findings.md", b"x")
            .await;
        assert!(escape_at(&write, "/.crewlet/findings.md"), "{write:?}");
    }

    // The exit code: a link the wrapper's `mv` moves the code through.
    let script = "mkdir -p /home/user/exitdir; for d in /home/user/.crewlet/runs/*/; do \
                  [ -e \"${d}exit\" ] || ln -s /home/user/exitdir \"${d}exit\"; done";
    let run = sb.start(&id, &Exec::shell(script)).await.expect("start");
    let polled = poll_to_end(sb.as_ref(), &id, &run).await;
    assert!(
        escape_at(&polled, &format!("/runs/{run}/exit")),
        "{polled:?}"
    );

    host.assert_untouched(mtime);
    sb.kill(&id).await.expect("kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_and_fifos_in_a_box_are_never_followed_by_copies_in_or_out() {
    let Some(sb) = common::local().await else {
        return;
    };
    let host = Host::new();
    let mtime = host.mtime();
    let id = sb.create(&BoxSpec::default()).await.expect("create");
    let out = sb
        .exec(
            &id,
            &Exec::shell(format!(
                "ln -s '{}' out && ln -s '{}' outfile && ln -s /etc shadowdir && mkfifo pipe && echo ok",
                p(&host.dir),
                p(&host.secret)
            )),
        )
        .await
        .expect("links");
    assert_eq!(out.stdout, "ok\n", "{out:?}");
    let read = sb.read_file(&id, "out/secret").await;
    assert!(escape_at(&read, "workspace/out/secret"), "{read:?}");
    let read = sb.read_file(&id, "outfile").await;
    assert!(escape_at(&read, "workspace/outfile"), "{read:?}");
    let read = sb.read_file(&id, "shadowdir/shadow").await;
    assert!(escape_at(&read, "workspace/shadowdir/shadow"), "{read:?}");
    for path in ["out/new.txt", "out/sub/new.txt", "out/secret", "outfile"] {
        let write = sb.write_file(&id, path, b"pwned").await;
        assert!(
            matches!(write, Err(SandboxError::Escape { .. })),
            "{path}: {write:?}"
        );
    }
    // A FIFO nobody writes or reads: refused at once instead of hanging.
    let read = tokio::time::timeout(Duration::from_secs(60), sb.read_file(&id, "pipe"))
        .await
        .expect("reading a FIFO hung");
    assert!(escape_at(&read, "workspace/pipe"), "{read:?}");
    let write = tokio::time::timeout(Duration::from_secs(60), sb.write_file(&id, "pipe", b"x"))
        .await
        .expect("writing a FIFO hung");
    assert!(escape_at(&write, "workspace/pipe"), "{write:?}");
    // A tail read takes the end of a big file without the rest, and
    // refuses a link as a whole read does.
    let big = sb
        .exec(
            &id,
            &Exec::shell(
                "head -c 4194304 /dev/zero | tr '\\0' a > big && printf END >> big && echo ok",
            ),
        )
        .await
        .expect("big");
    assert_eq!(big.stdout, "ok\n", "{big:?}");
    let tail = sb.read_file_tail(&id, "big", 3).await.expect("tail");
    assert_eq!(tail, b"END");
    let read = sb.read_file_tail(&id, "outfile", 3).await;
    assert!(escape_at(&read, "workspace/outfile"), "{read:?}");
    // Plain files beside them still go both ways.
    sb.write_file(&id, "plain/ok.txt", b"fine")
        .await
        .expect("write plain");
    assert_eq!(
        sb.read_file(&id, "plain/ok.txt").await.expect("read plain"),
        b"fine"
    );
    host.assert_untouched(mtime);
    sb.kill(&id).await.expect("kill");
}

/// Swaps `d` (a real directory) and `l` (a link to the host directory) with
/// `renameat2(RENAME_EXCHANGE)`, so `d` is always there and is a link half
/// of the time; notes `swaps.done` after 10,000 exchanges and goes on until
/// `stop` appears.
const SWAPPER: &str = r#"
chdir "/home/user/workspace" or die "cd: $!";
mkdir "d"; open(my $f, ">", "d/f") or die; print $f "inside"; close $f;
symlink("HOST", "l") or die "symlink: $!";
open(my $s, ">", "started"); close $s;
my ($n, $ok, $from, $to) = (0, 0, "d", "l");
while (1) {
    $ok++ if syscall(NR, -100, $from, -100, $to, 2) == 0;
    $n++;
    if ($n == 10000) { open(my $d, ">", "swaps.done.tmp"); print $d $ok; close $d; rename "swaps.done.tmp", "swaps.done"; }
    last if $n >= 10000 && $n % 64 == 0 && -e "stop";
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_host_link_10000_times_never_lets_a_copy_out() {
    let Some(sb) = common::local().await else {
        return;
    };
    let host = Host::new();
    let mtime = host.mtime();
    let id = sb.create(&BoxSpec::default()).await.expect("create");
    let script = SWAPPER
        .replace("HOST", &p(&host.dir))
        .replace("NR", &libc::SYS_renameat2.to_string());
    sb.write_file(&id, "swapper.pl", script.as_bytes())
        .await
        .expect("swapper");
    let run = sb
        .start(&id, &Exec::new(["perl", "swapper.pl"]))
        .await
        .expect("start");
    // Waits for the swapper to be going (or to have failed).
    loop {
        if sb.read_file(&id, "started").await.is_ok() {
            break;
        }
        if !matches!(sb.poll(&id, &run).await, Ok(RunState::Running)) {
            let out = sb.run_output(&id, &run).await;
            panic!("the swapper ended before it started: {out:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Copies in and out under `d` until the swapper has made its 10,000
    // exchanges, at least MIN_OPS rounds were made, and both outcomes were
    // seen (bounded by MAX_OPS rounds).
    const MIN_OPS: usize = 2_000;
    const MAX_OPS: usize = 50_000;
    let (mut ok, mut refused, mut missing) = (0usize, 0usize, 0usize);
    let mut swaps: Option<String> = None;
    let mut round = 0;
    while round < MAX_OPS {
        let results = [
            sb.write_file(&id, &format!("d/w-{round}"), b"engine-wrote")
                .await
                .map(|()| Vec::new()),
            sb.write_file(&id, &format!("d/sub-{round}/x"), b"engine-wrote")
                .await
                .map(|()| Vec::new()),
            sb.write_file(&id, "d/secret", b"engine-wrote")
                .await
                .map(|()| Vec::new()),
            sb.read_file(&id, "d/secret").await,
            sb.read_file(&id, "d/f").await,
        ];
        for r in results {
            match r {
                Ok(bytes) => {
                    assert!(
                        !String::from_utf8_lossy(&bytes).contains(&host.marker),
                        "read the host file through the link"
                    );
                    ok += 1;
                }
                Err(SandboxError::Escape { .. }) => refused += 1,
                // `d/secret` before the first write landed in the real `d`.
                Err(SandboxError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    missing += 1
                }
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        round += 1;
        if swaps.is_none() && round % 50 == 0 {
            swaps = sb
                .read_file(&id, "swaps.done")
                .await
                .ok()
                .map(|b| String::from_utf8_lossy(&b).into_owned());
            if !matches!(sb.poll(&id, &run).await, Ok(RunState::Running)) {
                let out = sb.run_output(&id, &run).await;
                panic!("the swapper ended early: {out:?}");
            }
        }
        if swaps.is_some() && round >= MIN_OPS && ok > 0 && refused > 0 {
            break;
        }
    }
    eprintln!(
        "{round} rounds against 10,000+ swaps: {ok} copies went through, {refused} were refused, {missing} found nothing"
    );
    assert_eq!(swaps.as_deref(), Some("10000"), "the swapper did not swap");
    assert!(
        ok > 0 && refused > 0,
        "the race never happened: {ok} ok, {refused} refused"
    );
    sb.write_file(&id, "stop", b"").await.expect("stop");
    let end = poll_to_end(sb.as_ref(), &id, &run).await.expect("poll");
    assert_eq!(end, RunState::Exited { code: 0 });
    let out = sb.run_output(&id, &run).await.expect("output");
    assert!(!out.stdout.contains(&host.marker) && !out.stderr.contains(&host.marker));
    host.assert_untouched(mtime);
    // What went through is in the box, where it belongs.
    let inside = sb
        .exec(
            &id,
            &Exec::shell("cat d/f l/f 2>/dev/null; ls d l 2>/dev/null | grep -c '^w-'"),
        )
        .await
        .expect("look");
    assert!(inside.stdout.starts_with("inside"), "{inside:?}");
    sb.kill(&id).await.expect("kill");
}
