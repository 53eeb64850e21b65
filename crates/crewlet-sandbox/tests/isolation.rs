//! What a box cannot do: read the engine's environment or files, reach a
//! host port it was not granted, or take the host down with a fork bomb or
//! a memory hog.

mod common;

use std::time::Duration;

use crewlet_sandbox::{BoxSpec, Exec, Limits, Network, Sandbox};
use tokio::io::AsyncReadExt;

fn small() -> Limits {
    Limits {
        memory_mb: Some(128),
        pids: Some(64),
        cpus: Some(1.0),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_box_sees_none_of_the_engines_environment() {
    let Some(sb) = common::local().await else {
        return;
    };
    let mut spec = BoxSpec {
        limits: small(),
        ..BoxSpec::default()
    };
    spec.env.insert("GRANTED".into(), "yes".into());
    let id = sb.create(&spec).await.expect("create");
    let out = sb.exec(&id, &Exec::shell("env")).await.expect("env");
    assert!(out.success(), "{out:?}");
    let seen: Vec<(String, String)> = out
        .stdout
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect();
    assert!(
        seen.iter().any(|(k, v)| k == "GRANTED" && v == "yes"),
        "{seen:?}"
    );
    // Cargo gives every test process variables of its own; none may leak.
    let ours: Vec<(String, String)> = std::env::vars().collect();
    assert!(
        ours.iter().any(|(k, _)| k == "CARGO_MANIFEST_DIR"),
        "the check needs cargo's variables"
    );
    let base = [
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "TERM", "TMPDIR", "PWD", "SHLVL", "_",
    ];
    for (k, v) in &ours {
        if base.contains(&k.as_str()) || k.starts_with("XDG_") {
            continue;
        }
        assert!(
            !seen
                .iter()
                .any(|(sk, sv)| sk == k || (sv == v && v.len() > 3)),
            "{k} leaked into the box"
        );
    }
    // Nor through /proc: the box has its own pid namespace.
    let engine_pid = std::process::id();
    let peek = sb
        .exec(
            &id,
            &Exec::shell(format!(
                "cat /proc/{engine_pid}/environ 2>&1 | head -c 200; ls /proc | grep -c '^[0-9]'"
            )),
        )
        .await
        .expect("peek");
    assert!(
        !peek.stdout.contains("CARGO"),
        "engine environ readable: {peek:?}"
    );
    sb.kill(&id).await.expect("kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_box_cannot_read_the_engines_files_or_another_box() {
    let Some(sb) = common::local().await else {
        return;
    };
    let spec = BoxSpec {
        limits: small(),
        ..BoxSpec::default()
    };
    let a = sb.create(&spec).await.expect("a");
    let b = sb.create(&spec).await.expect("b");
    sb.write_file(&a, "secret.txt", b"box-a-secret")
        .await
        .expect("write");
    let manifest = format!("{}/Cargo.toml", env!("CARGO_MANIFEST_DIR"));
    assert!(std::path::Path::new(&manifest).is_file());
    let script = format!(
        "cat '{manifest}' 2>/dev/null && echo READ-MANIFEST; \
         ls /root /work /var/cache 2>/dev/null && echo LISTED-HOST; \
         grep -rs box-a-secret / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr 2>/dev/null && echo FOUND-A; \
         touch /usr/evil 2>/dev/null && echo WROTE-USR; \
         echo checked"
    );
    let out = sb
        .exec(&b, &Exec::shell(script).timeout(Duration::from_secs(120)))
        .await
        .expect("exec");
    assert_eq!(out.stdout.trim(), "checked", "{out:?}");
    // The secret is really there for box a (the check above could not have
    // missed it for a wrong reason).
    let own = sb
        .exec(&a, &Exec::shell("grep -rs box-a-secret /home/user"))
        .await
        .expect("own");
    assert!(own.stdout.contains("box-a-secret"), "{own:?}");
    sb.kill(&a).await.expect("kill a");
    sb.kill(&b).await.expect("kill b");
}

async fn try_connect(sb: &dyn Sandbox, network: Network) -> (bool, Option<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let spec = BoxSpec {
        network,
        limits: small(),
        ..BoxSpec::default()
    };
    let id = sb.create(&spec).await.expect("create");
    let accept = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.ok()?;
        let mut buf = String::new();
        s.read_to_string(&mut buf).await.ok()?;
        Some(buf)
    });
    let cmd = Exec::shell(format!(
        "echo hello-host > /dev/tcp/127.0.0.1/{port} && echo sent"
    ))
    .timeout(Duration::from_secs(60));
    let out = sb
        .exec(
            &id,
            &Exec {
                argv: vec!["/bin/bash".into(), "-c".into(), cmd.argv[2].clone()],
                ..cmd
            },
        )
        .await
        .expect("exec");
    let sent = out.stdout.contains("sent");
    let got = if sent {
        tokio::time::timeout(Duration::from_secs(60), accept)
            .await
            .ok()
            .and_then(|r| r.ok())
            .flatten()
    } else {
        accept.abort();
        None
    };
    sb.kill(&id).await.expect("kill");
    (sent, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_box_reaches_a_host_port_only_when_granted_the_network() {
    let Some(sb) = common::local().await else {
        return;
    };
    let (sent, got) = try_connect(&*sb, Network::None).await;
    assert!(
        !sent && got.is_none(),
        "a box without network reached the host: {got:?}"
    );
    // The same command with the host's network does reach it, so the check
    // above failed for the right reason.
    let (sent, got) = try_connect(&*sb, Network::Host).await;
    assert!(sent, "a box on the host network could not connect");
    assert_eq!(got.as_deref(), Some("hello-host\n"));
}

/// Processes of this box still alive on the host.
fn host_processes_of(id: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
        })
        .filter(|e| std::fs::read_to_string(e.path().join("cgroup")).is_ok_and(|c| c.contains(id)))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_is_contained_and_stopped() {
    let Some(sb) = common::local().await else {
        return;
    };
    let spec = BoxSpec {
        limits: small(),
        ..BoxSpec::default()
    };
    let id = sb.create(&spec).await.expect("create");
    // The bomb runs in a subshell and the script ends in `exec`: the shell
    // that must outlast the timeout never forks once the pid limit bites
    // (a shell that cannot fork gives up, which would end it early).
    let bomb = Exec::shell("(b(){ b | b & }; b); exec sleep 30").timeout(Duration::from_secs(3));
    let sb2 = sb.clone();
    let id2 = id.clone();
    let running = tokio::spawn(async move { sb2.exec(&id2, &bomb).await });
    // While it rages, the host still starts processes.
    for _ in 0..5 {
        let st = tokio::process::Command::new("true")
            .status()
            .await
            .expect("host spawn");
        assert!(st.success());
        tokio::task::yield_now().await;
    }
    // And the bomb never has more processes than the box's pid limit (64).
    let mut most = 0;
    while !running.is_finished() {
        most = most.max(host_processes_of(&id.0));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(most <= 64, "{most} processes in a box limited to 64");
    let out = running.await.expect("join").expect("exec");
    assert!(out.timed_out, "{out:?}");
    assert_eq!(host_processes_of(&id.0), 0, "the bomb outlived its command");
    let after = sb.exec(&id, &Exec::shell("echo ok")).await.expect("after");
    assert_eq!(after.stdout, "ok\n");
    sb.kill(&id).await.expect("kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hog_is_killed_and_the_box_lives_on() {
    let Some(sb) = common::local().await else {
        return;
    };
    let spec = BoxSpec {
        limits: Limits {
            memory_mb: Some(64),
            ..small()
        },
        ..BoxSpec::default()
    };
    let id = sb.create(&spec).await.expect("create");
    let hog = Exec::new([
        "python3",
        "-c",
        "x = bytes(range(256)) * (2 * 1024 * 1024)\nprint('allocated', len(x))",
    ])
    .timeout(Duration::from_secs(120));
    let out = sb.exec(&id, &hog).await.expect("exec");
    assert!(
        !out.stdout.contains("allocated"),
        "512 MiB fit in 64: {out:?}"
    );
    assert!(out.oom_killed, "not reported as an OOM kill: {out:?}");
    assert_ne!(out.exit_code, Some(0));
    // The box (and the engine, which is running this test) carry on.
    let small_alloc = Exec::new([
        "python3",
        "-c",
        "x = bytes(range(256)) * 4096\nprint('fine', len(x))",
    ]);
    let ok = sb.exec(&id, &small_alloc).await.expect("after");
    assert_eq!(ok.stdout, "fine 1048576\n", "{ok:?}");
    sb.kill(&id).await.expect("kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cpu_limit_holds_a_busy_loop_to_its_share() {
    let Some(sb) = common::local().await else {
        return;
    };
    let spec = BoxSpec {
        limits: Limits {
            cpus: Some(0.25),
            ..small()
        },
        ..BoxSpec::default()
    };
    let id = sb.create(&spec).await.expect("create");
    // Spins for 2 s of wall time and prints the CPU seconds it got. A host
    // under load gives it less, never more: only a missing limit fails this.
    let spin = "import os, time\nt = time.time()\nwhile time.time() - t < 2.0: pass\nc = os.times()\nprint(c.user + c.system)";
    let out = sb
        .exec(
            &id,
            &Exec::new(["python3", "-c", spin]).timeout(Duration::from_secs(120)),
        )
        .await
        .expect("spin");
    let cpu: f64 = out
        .stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{out:?}"));
    assert!(cpu < 1.2, "a quarter core gave {cpu} CPU seconds in 2 s");
    sb.kill(&id).await.expect("kill");
}
