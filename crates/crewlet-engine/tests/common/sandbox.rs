//! Shared by the sandbox end-to-end tests: a fake coding agent, a local
//! git remote, and whether the local sandbox works here.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the person (or manager) answers the fake agent's question with.
pub const ANSWER: &str = "Hello-Crewlet";

/// The fake coding agent: a shell script run inside the box. With no
/// answer in its brief it pushes a work-in-progress branch and asks; with
/// one it finishes the change, pushes and reports.
pub const FAKE_AGENT: &str = r#"#!/bin/sh
set -e
brief="$1"
cd /home/user/workspace
[ -d app ] || git clone -q /srv/remote.git app
cd app
git checkout -q -B feature/greeting origin/feature/greeting 2>/dev/null || git checkout -q -B feature/greeting
answer=$(printf '%s\n' "$brief" | sed -n 's/.*ANSWER: *\([A-Za-z-]*\).*/\1/p' | head -n 1)
if [ -z "$answer" ]; then
  printf 'greeting = "TODO"\n' > greeting.txt
  git add greeting.txt
  git commit -q -m "wip: greeting"
  git push -q origin feature/greeting
  crewlet-ask "Which greeting should the app show?" --to AUDIENCE
  exit 0
fi
printf 'greeting = "%s"\n' "$answer" > greeting.txt
git add greeting.txt
git commit -q -m "greeting: $answer"
git push -q -f origin feature/greeting
printf 'Set the greeting to %s on branch feature/greeting (pushed).\n' "$answer" > /home/user/.crewlet/findings.md
if [ -n "$CREWLET_MCP_CONFIG" ]; then
  printf 'MCP: %s\n' "$(tr -d ' \n' < "$CREWLET_MCP_CONFIG")" >> /home/user/.crewlet/findings.md
fi
echo '{"result": "done", "usage": {"input_tokens": 120, "output_tokens": 30}}'
"#;

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap_or_else(|e| panic!("git {args:?}: {e}"));
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A bare remote with one commit on `main`, and the fake agent's directory
/// (its question goes to `audience`).
pub fn fixtures(root: &Path, audience: &str) -> (PathBuf, PathBuf) {
    let remote = root.join("remote.git");
    let seed = root.join("seed");
    std::fs::create_dir_all(&seed).unwrap_or_else(|e| panic!("{e}"));
    git(
        root,
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            remote.to_str().unwrap_or_default(),
        ],
    );
    git(&seed, &["init", "-q", "-b", "main"]);
    std::fs::write(seed.join("README.md"), "app\n").unwrap_or_else(|e| panic!("{e}"));
    git(&seed, &["add", "README.md"]);
    git(&seed, &["commit", "-q", "-m", "init"]);
    git(
        &seed,
        &["push", "-q", remote.to_str().unwrap_or_default(), "main"],
    );
    let agent = root.join("agent");
    std::fs::create_dir_all(&agent).unwrap_or_else(|e| panic!("{e}"));
    executable(
        &agent.join("fake-coding-agent"),
        &FAKE_AGENT.replace("AUDIENCE", audience),
    );
    (remote, agent)
}

/// The local sandbox works here (bubblewrap and cgroups); a failure under CI.
pub async fn sandbox_available() -> bool {
    let probe = std::env::temp_dir().join(format!(
        "crewlet-sandbox-probe-{}",
        uuid::Uuid::now_v7().simple()
    ));
    let ok = crewlet_sandbox::testsuite::local_or_skip(&probe)
        .await
        .is_some();
    let _ = std::fs::remove_dir_all(&probe);
    ok
}

/// Writes an executable script.
pub fn executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// The `providers.sandbox` block (under `providers:`) of the sandbox e2e
/// companies: the local backend with the fake agent as the `command`
/// coding agent, its folder and the git remote mounted, and a setup step
/// that makes git commit as the seat.
pub fn sandbox_provider_yaml(root: &Path) -> String {
    format!(
        r#"  sandbox:
    type: local
    default_coding_agent: command
    command: ["/opt/fake-agent/fake-coding-agent"]
    poll_seconds: 0.05
    default_pause_ttl_seconds: 1800
    local:
      containment: bubblewrap
      state_dir: "{boxes}"
      network: none
      memory_mb: 512
      mounts: ["{agent}:/opt/fake-agent", "{remote}:/srv/remote.git:rw"]
    setup:
      - name: git-identity
        commands:
          - git config --global user.name "$CREWLET_AGENT_HANDLE"
          - git config --global user.email "$CREWLET_AGENT_EMAIL"
        brief: git commits as you.
"#,
        boxes = root.join("boxes").display(),
        agent = root.join("agent").display(),
        remote = root.join("remote.git").display(),
    )
}

/// The `mcp_servers` block: the fake tracker, with its merge request tool,
/// logging each call to `log`.
pub fn tracker_yaml(log: &Path) -> String {
    format!(
        r#"mcp_servers:
  - name: tracker
    transport: stdio
    shared: false
    command: "{bin}"
    env:
      FAKE_MCP_LOG: "{log}"
      FAKE_MCP_TRACKER_TOOLS: "1"
    startup_timeout_seconds: 30
"#,
        bin = super::fake_mcp_bin().display(),
        log = log.display(),
    )
}
