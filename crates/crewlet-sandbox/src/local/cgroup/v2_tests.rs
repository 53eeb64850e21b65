//! The cgroup v2 code against a file tree laid out as the kernel's
//! documentation (Documentation/admin-guide/cgroup-v2.rst) describes a
//! cgroup directory: not the kernel itself (this machine mounts cgroup v1),
//! so these tests show exactly what is written where and how the kernel's
//! answers are read, and nothing about how a real kernel reacts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

/// A fresh directory for one test.
fn temp() -> PathBuf {
    let d = std::env::temp_dir().join(format!("crewlet-cgv2-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
    d
}

/// Makes `dir` look like a non-root v2 cgroup with memory, pids and cpu
/// available: the files the kernel shows, with their initial values.
fn cgroup_dir(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{e}"));
    let files = [
        ("cgroup.controllers", "cpuset cpu io memory pids\n"),
        ("cgroup.subtree_control", ""),
        ("cgroup.procs", ""),
        ("cgroup.type", "domain\n"),
        ("cgroup.events", "populated 0\nfrozen 0\n"),
        ("cgroup.freeze", "0\n"),
        ("cgroup.kill", ""),
        ("memory.max", "max\n"),
        ("memory.swap.max", "max\n"),
        (
            "memory.events",
            "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
        ),
        ("pids.max", "max\n"),
        ("cpu.max", "max 100000\n"),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("{e}"));
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn put(p: &Path, text: &str) {
    std::fs::write(p, text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A delegated root holding the engine (pid 4242), as systemd leaves a
/// `Delegate=yes` service; the directories the kernel would make on mkdir
/// are laid out ahead.
fn service_root() -> (PathBuf, PathBuf) {
    let t = temp();
    let root = t.join("system.slice/crewlet.service");
    cgroup_dir(&root);
    put(&root.join("cgroup.procs"), "4242\n");
    cgroup_dir(&root.join(ENGINE_LEAF));
    cgroup_dir(&root.join(PARENT));
    (t, root)
}

#[test]
fn setup_moves_the_engine_to_a_leaf_and_enables_the_controllers() {
    let (t, root) = service_root();
    let host = Host::setup(&root, true, 4242).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(host.root(), root);
    // The engine went to its leaf: one pid per write, as the kernel wants.
    assert_eq!(read(&root.join(ENGINE_LEAF).join("cgroup.procs")), "4242");
    // Then the root and the sandbox's parent hand the controllers down.
    assert_eq!(
        read(&root.join("cgroup.subtree_control")),
        "+memory +pids +cpu"
    );
    assert_eq!(
        read(&root.join(PARENT).join("cgroup.subtree_control")),
        "+memory +pids +cpu"
    );
    // Nothing else was written: no limits on the engine's own cgroup.
    assert_eq!(read(&root.join("memory.max")), "max\n");
    assert_eq!(read(&root.join(PARENT).join("cgroup.procs")), "");
    let _ = std::fs::remove_dir_all(t);
}

#[test]
fn setup_refuses_what_cgroup_v2_would_refuse_and_says_how_to_delegate() {
    // Another process shares the engine's cgroup: it cannot enable
    // controllers for children, and the engine does not move strangers.
    let (t, root) = service_root();
    put(&root.join("cgroup.procs"), "4242\n17\n");
    let e = Host::setup(&root, true, 4242)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("other processes") && e.contains("17") && e.contains("Delegate=yes"),
        "{e}"
    );
    assert_eq!(read(&root.join("cgroup.subtree_control")), "");
    // A configured directory with processes in it is not emptied either.
    put(&root.join("cgroup.procs"), "17\n");
    let e = Host::setup(&root, false, 4242)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("holds processes (pids 17)"), "{e}");
    assert_eq!(read(&root.join(ENGINE_LEAF).join("cgroup.procs")), "4242");
    // Controllers the parent did not delegate are named.
    put(&root.join("cgroup.procs"), "");
    put(&root.join("cgroup.controllers"), "cpu io memory\n");
    let e = Host::setup(&root, false, 4242)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("controllers pids are not available"), "{e}");
    // Not a cgroup directory at all.
    let e = Host::setup(&t.join("nowhere"), false, 4242)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("not a usable cgroup v2 directory"), "{e}");
    let _ = std::fs::remove_dir_all(t);
}

#[test]
fn the_top_of_the_hierarchy_keeps_its_processes() {
    // The hierarchy's root (no cgroup.type) is exempt from the rule.
    let t = temp();
    cgroup_dir(&t);
    std::fs::remove_file(t.join("cgroup.type")).unwrap_or_else(|e| panic!("{e}"));
    put(&t.join("cgroup.procs"), "1\n4242\n");
    cgroup_dir(&t.join(PARENT));
    Host::setup(&t, true, 4242).unwrap_or_else(|e| panic!("{e}"));
    assert!(!t.join(ENGINE_LEAF).exists());
    assert_eq!(
        read(&t.join("cgroup.subtree_control")),
        "+memory +pids +cpu"
    );
    let _ = std::fs::remove_dir_all(t);
}

#[test]
fn a_box_gets_its_limits_in_the_v2_files() {
    let (t, root) = service_root();
    let host = Host::setup(&root, true, 4242).unwrap_or_else(|e| panic!("{e}"));
    let dir = root.join(PARENT).join("sbx-1");
    cgroup_dir(&dir);
    let limits = Limits {
        memory_mb: Some(64),
        pids: Some(32),
        cpus: Some(0.25),
    };
    let cg = host
        .make_box("sbx-1", &limits)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&dir.join("memory.max")), "67108864");
    assert_eq!(read(&dir.join("memory.swap.max")), "0");
    assert_eq!(read(&dir.join("pids.max")), "32");
    assert_eq!(read(&dir.join("cpu.max")), "25000 100000");
    // The box itself holds no process and hands no controller further down.
    assert_eq!(read(&dir.join("cgroup.procs")), "");
    assert_eq!(read(&dir.join("cgroup.subtree_control")), "");
    assert_eq!(cg.dir, dir);
    // Without swap accounting the kernel shows no memory.swap.max: none is made.
    let bare = root.join(PARENT).join("sbx-2");
    cgroup_dir(&bare);
    std::fs::remove_file(bare.join("memory.swap.max")).unwrap_or_else(|e| panic!("{e}"));
    host.make_box("sbx-2", &Limits::none())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!bare.join("memory.swap.max").exists());
    assert_eq!(read(&bare.join("memory.max")), "max\n");
    assert_eq!(read(&bare.join("cpu.max")), "max 100000\n");
    host.make_box(
        "sbx-2",
        &Limits {
            cpus: Some(4.0),
            ..Limits::none()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&bare.join("cpu.max")), "400000 100000");
    // A controller file the kernel does not show is an error, not a new file.
    let off = root.join(PARENT).join("sbx-3");
    std::fs::create_dir_all(&off).unwrap_or_else(|e| panic!("{e}"));
    assert!(host.make_box("sbx-3", &limits).is_err());
    assert!(!off.join("memory.max").exists());
    let _ = std::fs::remove_dir_all(t);
}

#[test]
fn commands_get_child_cgroups_and_pids_are_listed_from_cgroup_procs() {
    let t = temp();
    let cg = BoxCgroup { dir: t.clone() };
    let procs = cg.make_child("exec-1").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(procs, t.join("exec-1/cgroup.procs"));
    put(&procs, "10\n11\n");
    cg.make_child("run-2").unwrap_or_else(|e| panic!("{e}"));
    put(&t.join("run-2/cgroup.procs"), "12\n");
    put(&t.join("cgroup.procs"), "");
    assert_eq!(cg.pids(Some("exec-1")), [10, 11]);
    let mut all = cg.pids(None);
    all.sort_unstable();
    assert_eq!(all, [10, 11, 12]);
    // rmdir: a command's cgroup, then the box's.
    put(&procs, "");
    for f in ["exec-1/cgroup.procs", "run-2/cgroup.procs", "cgroup.procs"] {
        std::fs::remove_file(t.join(f)).unwrap_or_else(|e| panic!("{e}"));
    }
    cg.remove_child("exec-1");
    assert!(!t.join("exec-1").exists() && t.join("run-2").exists());
    cg.remove();
    assert!(!t.exists());
}

#[tokio::test]
async fn freezing_waits_for_the_kernel_to_report_frozen() {
    let t = temp();
    cgroup_dir(&t);
    let cg = BoxCgroup { dir: t.clone() };
    // The "kernel": once cgroup.freeze says 1, it reports frozen, later.
    let flipped = Arc::new(AtomicBool::new(false));
    let kernel = {
        let (t, flipped) = (t.clone(), flipped.clone());
        tokio::spawn(async move {
            while read(&t.join("cgroup.freeze")).trim() != "1" {
                tokio::task::yield_now().await;
            }
            // Every task stopped: flip the event.
            flipped.store(true, Ordering::SeqCst);
            put(&t.join("cgroup.events"), "populated 1\nfrozen 1\n");
        })
    };
    cg.freeze(true).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        flipped.load(Ordering::SeqCst),
        "freeze returned before the kernel said frozen"
    );
    kernel.await.unwrap_or_else(|e| panic!("{e}"));
    // Thawing writes 0 and waits for `frozen 0` the same way.
    let kernel = {
        let t = t.clone();
        tokio::spawn(async move {
            while read(&t.join("cgroup.freeze")).trim() != "0" {
                tokio::task::yield_now().await;
            }
            put(&t.join("cgroup.events"), "populated 1\nfrozen 0\n");
        })
    };
    cg.freeze(false).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&t.join("cgroup.events")), "populated 1\nfrozen 0\n");
    kernel.await.unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_dir_all(t);
}

#[tokio::test]
async fn kill_writes_cgroup_kill_and_waits_until_the_cgroup_is_empty() {
    let t = temp();
    cgroup_dir(&t);
    cgroup_dir(&t.join("exec-1"));
    // Pids that cannot exist: with cgroup.kill present no signal is sent,
    // so nothing on this host is touched.
    put(&t.join("exec-1/cgroup.procs"), "2147483600\n2147483601\n");
    let emptied = Arc::new(AtomicBool::new(false));
    let kernel = {
        let (t, emptied) = (t.clone(), emptied.clone());
        tokio::spawn(async move {
            while read(&t.join("exec-1/cgroup.kill")) != "1" {
                tokio::task::yield_now().await;
            }
            emptied.store(true, Ordering::SeqCst);
            put(&t.join("exec-1/cgroup.procs"), "");
        })
    };
    let cg = BoxCgroup { dir: t.clone() };
    cg.kill(Some("exec-1")).await;
    assert!(
        emptied.load(Ordering::SeqCst),
        "kill returned before the cgroup emptied"
    );
    // Only the command's cgroup was killed, not the box.
    assert_eq!(read(&t.join("cgroup.kill")), "");
    kernel.await.unwrap_or_else(|e| panic!("{e}"));
    // The whole box: the box's own cgroup.kill.
    cg.kill(None).await;
    assert_eq!(read(&t.join("cgroup.kill")), "1");
    let _ = std::fs::remove_dir_all(t);
}

#[test]
fn oom_kills_come_from_memory_events() {
    let t = temp();
    cgroup_dir(&t);
    let cg = BoxCgroup { dir: t.clone() };
    assert_eq!(cg.oom_kills(), 0);
    put(
        &t.join("memory.events"),
        "low 0\nhigh 0\nmax 14\noom 2\noom_kill 3\noom_group_kill 0\n",
    );
    assert_eq!(cg.oom_kills(), 3);
    std::fs::remove_file(t.join("memory.events")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cg.oom_kills(), 0);
    let _ = std::fs::remove_dir_all(t);
}

#[test]
fn the_engines_own_cgroup_comes_from_its_v2_line() {
    let mount = Path::new("/sys/fs/cgroup");
    let own = "0::/system.slice/crewlet.service\n";
    assert_eq!(
        own_dir(mount, own).ok(),
        Some(PathBuf::from("/sys/fs/cgroup/system.slice/crewlet.service"))
    );
    // Already moved to its leaf by an earlier backend of this process.
    let moved = "0::/system.slice/crewlet.service/crewlet-engine\n";
    assert_eq!(
        own_dir(mount, moved).ok(),
        Some(PathBuf::from("/sys/fs/cgroup/system.slice/crewlet.service"))
    );
    assert!(own_dir(mount, "4:memory:/x\n").is_err());
}

#[test]
fn box_json_keeps_either_version() {
    let v2: super::super::BoxCgroup = serde_json::from_str(r#"{"v2": "/sys/fs/cgroup/a/sbx-1"}"#)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        matches!(&v2, super::super::BoxCgroup::V2(c) if c.dir == Path::new("/sys/fs/cgroup/a/sbx-1"))
    );
    let text = serde_json::to_string(&v2).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(text, r#"{"v2":"/sys/fs/cgroup/a/sbx-1"}"#);
    // A box made by an engine from before v2 support still reads as v1.
    let v1: super::super::BoxCgroup = serde_json::from_str(
        r#"{"dirs": [["memory", "/sys/fs/cgroup/memory/crewlet-sandbox/sbx-1"]]}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(v1, super::super::BoxCgroup::V1(_)));
}
