//! llama.cpp's `llama-server`: a real OpenAI- and Anthropic-compatible model
//! server on loopback, for the HTTP providers' tests.
//!
//! The binary is built once, with CMake, from the llama.cpp that the PyPI
//! sdist of `llama-cpp-python` carries under `vendor/llama.cpp` (the sdist's
//! sha256 is checked against PyPI's JSON API), and kept as
//! [`Layout::llm_binary`], named by version: while it is there nothing is
//! fetched or built again. It serves SmolLM2-135M-Instruct (the GGUF that
//! `cargo xtask services up --only model` fetches) with a chat template that
//! offers tools (`--jinja`, [`CHAT_TEMPLATE`]), two API keys, `/metrics` and
//! `/slots`. The server runs
//! detached, logs to [`Layout::llm_log`] and is tracked through
//! [`Layout::llm_pid`]; it counts as up when `GET /health` answers 200, which
//! llama-server does only once the model is loaded.

use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use crewlet_models::{ModelStore, SMOLLM2_135M_INSTRUCT};
use serde_json::Value;

use super::config::{
    HOST, LLAMA_CMAKE_OPTIONS, LLAMA_CPP_PYTHON_PACKAGE, LLAMA_CPP_PYTHON_VERSION, LLM_API_KEYS,
    LLM_BOOT_TIMEOUT, LLM_CTX_SIZE, LLM_MODEL_ALIAS, LLM_PARALLEL, LLM_PORT, LLM_STOP_TIMEOUT,
    Layout, PYPI_JSON_URL, llm_addr, llm_url,
};
use super::process::{
    cmdline_contains, is_alive, log_tail, port_open, read_pidfile, remove_if_exists, signal,
};
use crate::{cmd, http};

const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a running build reports its progress.
const BUILD_REPORT_EVERY: Duration = Duration::from_secs(60);
/// The program name, also how its process is recognised.
const PROGRAM: &str = "llama-server";
/// SmolLM2's ChatML with tools: its own template offers none, and llama.cpp
/// then drops the tools of a request.
pub const CHAT_TEMPLATE: &str = include_str!("llm_chat_template.jinja");

/// What is on the machine right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No binary of the pinned version yet.
    NotBuilt,
    Stopped,
    /// Our server lives and `/health` answers 200 (the model is loaded).
    Running {
        pid: u32,
    },
    /// Our server lives but is not healthy (yet): loading, or stuck.
    Loading {
        pid: u32,
    },
    /// A healthy llama-server we did not start answers on [`LLM_PORT`].
    Unmanaged,
    /// Something that is not a healthy llama-server holds [`LLM_PORT`].
    PortBusy,
}

pub fn state(layout: &Layout) -> State {
    if let Some(pid) = managed_pid(layout) {
        return if healthy() {
            State::Running { pid }
        } else {
            State::Loading { pid }
        };
    }
    if healthy() {
        State::Unmanaged
    } else if port_open(LLM_PORT) {
        State::PortBusy
    } else if layout.llm_binary().is_file() {
        State::Stopped
    } else {
        State::NotBuilt
    }
}

/// The pid from the pid file when that process is alive and is our server.
fn managed_pid(layout: &Layout) -> Option<u32> {
    let pid = match read_pidfile(&layout.llm_pid()) {
        Ok(pid) => pid,
        Err(e) => {
            eprintln!("llm: ignoring {e:#}");
            None
        }
    };
    pid.filter(|&pid| is_alive(pid) && cmdline_contains(pid, PROGRAM))
}

/// Whether `GET /health` answers 200 with status ok: llama-server answers
/// 503 while it loads the model.
fn healthy() -> bool {
    http::get(&llm_addr(), "/health", PROBE_TIMEOUT)
        .is_ok_and(|r| r.status == 200 && r.body.contains("\"ok\""))
}

/// The GGUF the server loads (SmolLM2-135M-Instruct in `crewlet-models`'
/// cache); an error saying how to fetch it when absent.
pub fn model_file() -> Result<PathBuf> {
    let store = ModelStore::from_env();
    let model = &SMOLLM2_135M_INSTRUCT;
    match store.installed(model)? {
        Some(path) => Ok(path),
        None => bail!(
            "the model {} is missing; `cargo xtask services up --only model` (or `crewlet models \
             pull {}`) fetches it",
            store.path(model).display(),
            model.name
        ),
    }
}

/// Builds the server once, then starts it and waits until it serves the
/// model; a no-op when it already runs.
pub fn up(layout: &Layout) -> Result<()> {
    match state(layout) {
        State::Running { pid } if started_as_now(layout, pid) => {
            println!("llm: already running (pid {pid})");
            print_endpoints(layout);
            return Ok(());
        }
        State::Running { pid } => {
            println!(
                "llm: pid {pid} runs with other arguments or another chat template; restarting it"
            );
            down(layout)?;
        }
        State::Loading { pid } => {
            println!("llm: pid {pid} is loading the model; waiting for it");
            wait_until_healthy(layout, None)?;
            println!("llm: running (pid {pid})");
            print_endpoints(layout);
            return Ok(());
        }
        State::Unmanaged => {
            println!(
                "llm: a llama-server not started by xtask answers at {} (no live pid in {}); \
                 using it",
                llm_url(),
                layout.llm_pid().display()
            );
            print_endpoints(layout);
            return Ok(());
        }
        State::PortBusy => bail!(
            "{HOST}:{LLM_PORT} is taken by a process that is not a healthy llama-server; free it \
             first"
        ),
        State::NotBuilt | State::Stopped => {}
    }
    let model = model_file()?;
    let binary = ensure_binary(layout)?;
    write_keys(layout)?;
    fs::write(layout.llm_chat_template(), CHAT_TEMPLATE)
        .with_context(|| format!("cannot write {}", layout.llm_chat_template().display()))?;
    let started = Instant::now();
    let mut child = spawn(layout, &binary, &model)?;
    println!(
        "llm: started pid {}; waiting for the model to load (up to {} s)",
        child.id(),
        LLM_BOOT_TIMEOUT.as_secs()
    );
    wait_until_healthy(layout, Some(&mut child))?;
    println!("llm: ready in {:.1} s", started.elapsed().as_secs_f64());
    print_endpoints(layout);
    Ok(())
}

/// Stops the server: SIGTERM, then SIGKILL after [`LLM_STOP_TIMEOUT`].
pub fn down(layout: &Layout) -> Result<()> {
    let Some(pid) = managed_pid(layout) else {
        if healthy() {
            println!(
                "llm: a llama-server not started by xtask answers at {}; left alone",
                llm_url()
            );
        } else {
            println!("llm: not running");
        }
        return remove_if_exists(&layout.llm_pid());
    };
    let started = Instant::now();
    signal(pid, "TERM")?;
    while is_alive(pid) && started.elapsed() < LLM_STOP_TIMEOUT {
        std::thread::sleep(Duration::from_millis(100));
    }
    if is_alive(pid) {
        println!(
            "llm: pid {pid} still alive after {} s; sending SIGKILL",
            LLM_STOP_TIMEOUT.as_secs()
        );
        signal(pid, "KILL")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while is_alive(pid) {
            if Instant::now() > deadline {
                bail!("pid {pid} survives SIGKILL");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    remove_if_exists(&layout.llm_pid())?;
    println!(
        "llm: stopped (was pid {pid}) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Prints one line about the server.
pub fn status(layout: &Layout) {
    match state(layout) {
        State::Running { pid } => println!("llm: running (pid {pid}) at {}", llm_url()),
        State::Loading { pid } => {
            println!("llm: pid {pid} is alive but {HOST}:{LLM_PORT}/health is not ok yet")
        }
        State::Unmanaged => println!(
            "llm: a llama-server not started by xtask answers at {}",
            llm_url()
        ),
        State::PortBusy => {
            println!("llm: stopped, but {HOST}:{LLM_PORT} is taken by another process")
        }
        State::Stopped => println!("llm: stopped (binary {})", layout.llm_binary().display()),
        State::NotBuilt => println!("llm: not built"),
    }
}

fn print_endpoints(layout: &Layout) {
    println!("  openai:   {}  (model {LLM_MODEL_ALIAS})", llm_url());
    println!("  messages: http://{}/v1/messages", llm_addr());
    println!(
        "  api keys: {} keys in {}",
        LLM_API_KEYS.len(),
        layout.llm_keys().display()
    );
    println!("  log:      {}", layout.llm_log().display());
}

/// The installed binary of the pinned version: built (and fetched) only
/// when it is not there. A finished build in the build tree (one started by
/// hand, or cut between link and install) is installed without rebuilding.
fn ensure_binary(layout: &Layout) -> Result<PathBuf> {
    let binary = layout.llm_binary();
    if binary.is_file() {
        return Ok(binary);
    }
    if !layout.llm_built_binary().is_file() {
        if !layout.llm_src().join("CMakeLists.txt").is_file() {
            fetch_sources(layout)?;
        }
        build(layout)?;
    }
    install(layout)?;
    Ok(binary)
}

/// Downloads the sdist (sha256 checked against PyPI's) and unpacks its
/// `vendor/llama.cpp` into [`Layout::llm_src`].
fn fetch_sources(layout: &Layout) -> Result<()> {
    let (url, sha256) = sdist_source()?;
    let sdist = layout.llm_sdist();
    if !(sdist.is_file() && file_sha256(&sdist)? == sha256) {
        download(&url, &sha256, &sdist)?;
    }
    let src = layout.llm_src();
    let parent = src.parent().context("the sources folder has no parent")?;
    let unpack = parent.join(format!(".unpack-{LLAMA_CPP_PYTHON_VERSION}"));
    for stale in [&unpack, &src] {
        remove_if_exists(stale)?;
    }
    fs::create_dir_all(&unpack).with_context(|| format!("cannot create {}", unpack.display()))?;
    let inner = format!("llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp");
    println!("llm: unpacking {inner} from {}", sdist.display());
    cmd::output(
        Command::new("tar")
            .arg("-xzf")
            .arg(&sdist)
            .arg("-C")
            .arg(&unpack)
            .arg(&inner),
    )
    .context("cannot unpack the llama.cpp sources")?;
    let unpacked = unpack.join(&inner);
    if !unpacked.join("CMakeLists.txt").is_file() {
        bail!("{} holds no llama.cpp sources", sdist.display());
    }
    fs::rename(&unpacked, &src)
        .with_context(|| format!("cannot move {} to {}", unpacked.display(), src.display()))?;
    remove_if_exists(&unpack)?;
    // The sources are what we keep; the archive can be fetched again.
    remove_if_exists(&sdist)
}

/// The sdist's download URL and sha256, from PyPI's JSON API: the release's
/// own document, else the project's (some mirrors serve only that one).
fn sdist_source() -> Result<(String, String)> {
    let release =
        format!("{PYPI_JSON_URL}/{LLAMA_CPP_PYTHON_PACKAGE}/{LLAMA_CPP_PYTHON_VERSION}/json");
    let project = format!("{PYPI_JSON_URL}/{LLAMA_CPP_PYTHON_PACKAGE}/json");
    let from_release = fetch_json(&release)
        .and_then(|v| pick_sdist(v.get("urls"), &release).context("it lists no sdist"));
    match from_release {
        Ok(found) => Ok(found),
        Err(e) => {
            let why = e.root_cause().to_string();
            let why = why.lines().last().unwrap_or_default().trim();
            println!("llm: no sdist from {release} ({why}); trying {project}");
            let v = fetch_json(&project)?;
            pick_sdist(v.pointer(&format!("/releases/{LLAMA_CPP_PYTHON_VERSION}")), &project)
                .with_context(|| {
                    format!(
                        "{project} lists no sdist of {LLAMA_CPP_PYTHON_PACKAGE}=={LLAMA_CPP_PYTHON_VERSION}"
                    )
                })
        }
    }
}

fn fetch_json(url: &str) -> Result<Value> {
    let text = cmd::output(Command::new(curl()?).args([
        "-fsSL",
        "--retry",
        "3",
        "--connect-timeout",
        "30",
        url,
    ]))
    .with_context(|| format!("cannot fetch {url}"))?;
    serde_json::from_str(&text).with_context(|| format!("{url} did not answer JSON"))
}

/// The `(url, sha256)` of the sdist among `files` (a PyPI file list), its
/// URL resolved against `base` (mirrors give relative ones).
fn pick_sdist(files: Option<&Value>, base: &str) -> Option<(String, String)> {
    files?.as_array()?.iter().find_map(|f| {
        if f.get("packagetype")?.as_str()? != "sdist" {
            return None;
        }
        let url = f.get("url")?.as_str()?;
        let sha = f.pointer("/digests/sha256")?.as_str()?;
        let valid = sha.len() == 64 && sha.chars().all(|c| c.is_ascii_hexdigit());
        valid.then(|| (resolve_url(base, url), sha.to_ascii_lowercase()))
    })
}

/// `rel` resolved against the document at `base` (`..` and `.` segments
/// handled; absolute URLs and paths kept).
fn resolve_url(base: &str, rel: &str) -> String {
    if rel.contains("://") {
        return rel.to_owned();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("https", base));
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if let Some(absolute) = rel.strip_prefix('/') {
        return format!("{scheme}://{host}/{absolute}");
    }
    let mut segments: Vec<&str> = path.split('/').collect();
    segments.pop(); // the document itself
    for part in rel.split('/') {
        match part {
            ".." => {
                segments.pop();
            }
            "." | "" => {}
            p => segments.push(p),
        }
    }
    format!("{scheme}://{host}/{}", segments.join("/"))
}

/// Downloads `url` to `dest` through a `.partial` file renamed only once its
/// sha256 matches.
fn download(url: &str, sha256: &str, dest: &Path) -> Result<()> {
    let dir = dest.parent().context("download target has no parent")?;
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let partial = dest.with_extension("gz.partial");
    remove_if_exists(&partial)?;
    println!("llm: downloading {url}");
    let started = Instant::now();
    cmd::run(
        Command::new(curl()?)
            .args(["-fsSL", "--retry", "3", "--connect-timeout", "30", "-o"])
            .arg(&partial)
            .arg(url),
    )
    .with_context(|| format!("cannot download {url}"))?;
    let got = file_sha256(&partial)?;
    if got != sha256 {
        remove_if_exists(&partial)?;
        bail!("{url} has sha256 {got}, but PyPI lists {sha256}; nothing was kept");
    }
    fs::rename(&partial, dest)
        .with_context(|| format!("cannot rename {} to {}", partial.display(), dest.display()))?;
    println!(
        "llm: {} verified ({:.0} s)",
        dest.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn curl() -> Result<PathBuf> {
    cmd::which("curl").context("`curl` is needed to download the llama.cpp sources")
}

/// The lower-case hex sha256 of `path` (`sha256sum`, coreutils).
fn file_sha256(path: &Path) -> Result<String> {
    let out = cmd::output(Command::new("sha256sum").arg(path))?;
    out.split_whitespace()
        .next()
        .map(str::to_ascii_lowercase)
        .with_context(|| format!("sha256sum printed nothing for {}", path.display()))
}

/// Configures and builds the `llama-server` target (15-25 min on 2 cores),
/// its output in `build.log`, a progress line every minute.
fn build(layout: &Layout) -> Result<()> {
    let cmake = cmd::which("cmake").context("`cmake` (and a C++ compiler) builds llama-server")?;
    let src = layout.llm_src();
    let build = layout.llm_build();
    let log_path = layout.llm_dir().join("build.log");
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "llm: building llama-server from {} with {jobs} jobs (15-25 min on 2 cores, once); log: {}",
        src.display(),
        log_path.display()
    );
    let started = Instant::now();
    let log =
        File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut configure = Command::new(&cmake);
    configure
        .arg("-S")
        .arg(&src)
        .arg("-B")
        .arg(&build)
        .args(LLAMA_CMAKE_OPTIONS);
    run_logged(&mut configure, &log, &log_path, started)?;
    let mut compile = Command::new(&cmake);
    compile
        .arg("--build")
        .arg(&build)
        .args(["--target", PROGRAM, "-j", &jobs.to_string()]);
    run_logged(&mut compile, &log, &log_path, started)?;
    if !layout.llm_built_binary().is_file() {
        bail!(
            "the build finished but left no {}\n{}",
            layout.llm_built_binary().display(),
            log_tail(&log_path, 30)
        );
    }
    println!("llm: built in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Runs `command` with its output appended to `log`, printing the build's
/// last progress line every [`BUILD_REPORT_EVERY`].
fn run_logged(command: &mut Command, log: &File, log_path: &Path, started: Instant) -> Result<()> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log.try_clone()?)
        .spawn()
        .with_context(|| format!("cannot start `{}`", cmd::describe(command)))?;
    let mut next_report = Instant::now() + BUILD_REPORT_EVERY;
    loop {
        if let Some(status) = child.try_wait().context("cannot poll the build")? {
            if status.success() {
                return Ok(());
            }
            bail!(
                "`{}` failed with {status}\n{}",
                cmd::describe(command),
                log_tail(log_path, 40)
            );
        }
        if Instant::now() >= next_report {
            let progress = build_progress(log_path).unwrap_or_else(|| "configuring".to_owned());
            println!(
                "llm: {:.0} min: {progress}",
                started.elapsed().as_secs_f64() / 60.0
            );
            next_report += BUILD_REPORT_EVERY;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The last `[ NN%] ...` line of the build log.
fn build_progress(log: &Path) -> Option<String> {
    let text = fs::read_to_string(log).ok()?;
    text.lines()
        .rev()
        .find(|l| l.starts_with('[') && l.contains("%]"))
        .map(str::to_owned)
}

/// Copies the built binary to [`Layout::llm_binary`] (through a temporary
/// name, so a cut copy is never taken for an install), checks that it runs,
/// then drops the sources and build tree (about 0.5 GB): the binary is
/// static and the name of its version says it is built.
fn install(layout: &Layout) -> Result<()> {
    let built = layout.llm_built_binary();
    let binary = layout.llm_binary();
    let dir = binary.parent().context("the binary path has no parent")?;
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let partial = binary.with_extension("partial");
    fs::copy(&built, &partial)
        .with_context(|| format!("cannot copy {} to {}", built.display(), partial.display()))?;
    fs::set_permissions(&partial, fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot chmod 755 {}", partial.display()))?;
    let version = Command::new(&partial)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", partial.display()))?;
    if !version.status.success() {
        bail!(
            "{} --version failed ({}): {}",
            partial.display(),
            version.status,
            String::from_utf8_lossy(&version.stderr)
        );
    }
    fs::rename(&partial, &binary).with_context(|| {
        format!(
            "cannot rename {} to {}",
            partial.display(),
            binary.display()
        )
    })?;
    println!("llm: installed {}", binary.display());
    remove_if_exists(&layout.llm_src())
}

/// The keys file `--api-key-file` reads (owner-only).
fn write_keys(layout: &Layout) -> Result<()> {
    let path = layout.llm_keys();
    let mut text = LLM_API_KEYS.join("\n");
    text.push('\n');
    fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot chmod 600 {}", path.display()))
}

/// Whether the running server `pid` has the arguments and chat template
/// this xtask would start it with (an older xtask may have started it).
fn started_as_now(layout: &Layout, pid: u32) -> bool {
    let Ok(model) = model_file() else {
        return true; // cannot tell; leave it running
    };
    let Ok(raw) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return true;
    };
    let args: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .skip(1)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let template = fs::read_to_string(layout.llm_chat_template()).unwrap_or_default();
    args == server_args(&model, &layout.llm_keys(), &layout.llm_chat_template())
        && template == CHAT_TEMPLATE
}

/// The server's arguments.
pub fn server_args(model: &Path, keys: &Path, template: &Path) -> Vec<String> {
    let mut args = vec!["--model".to_owned(), model.display().to_string()];
    for (flag, value) in [
        ("--alias", LLM_MODEL_ALIAS.to_owned()),
        ("--host", HOST.to_owned()),
        ("--port", LLM_PORT.to_string()),
        ("--ctx-size", LLM_CTX_SIZE.to_string()),
        ("--parallel", LLM_PARALLEL.to_string()),
        ("--api-key-file", keys.display().to_string()),
        ("--chat-template-file", template.display().to_string()),
    ] {
        args.push(flag.to_owned());
        args.push(value);
    }
    // jinja templates (tool calls), one KV pool for all slots, counters for
    // tests, no browser UI
    for flag in [
        "--jinja",
        "--kv-unified",
        "--metrics",
        "--slots",
        "--no-webui",
    ] {
        args.push(flag.to_owned());
    }
    args
}

/// Starts the server in its own session (it outlives us), output to the log.
fn spawn(layout: &Layout, binary: &Path, model: &Path) -> Result<Child> {
    let log_path = layout.llm_log();
    if log_path.exists() {
        let previous = log_path.with_extension("log.1");
        fs::rename(&log_path, &previous)
            .with_context(|| format!("cannot rotate {}", log_path.display()))?;
    }
    let log =
        File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
    let log_err = log
        .try_clone()
        .with_context(|| format!("cannot reopen {}", log_path.display()))?;
    // `setsid` execs the server in place, so the pid we get is the server's.
    let mut server = Command::new("setsid");
    server
        .arg(binary)
        .args(server_args(
            model,
            &layout.llm_keys(),
            &layout.llm_chat_template(),
        ))
        .current_dir(layout.llm_dir())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    let child = server
        .spawn()
        .with_context(|| format!("cannot start `{}`", cmd::describe(&server)))?;
    fs::write(layout.llm_pid(), format!("{}\n", child.id()))
        .with_context(|| format!("cannot write {}", layout.llm_pid().display()))?;
    Ok(child)
}

/// Waits until `/health` answers 200. With `child`, a server that exits
/// while loading fails at once with its log.
fn wait_until_healthy(layout: &Layout, mut child: Option<&mut Child>) -> Result<()> {
    let deadline = Instant::now() + LLM_BOOT_TIMEOUT;
    loop {
        if let Some(c) = child.as_deref_mut() {
            if let Some(exit) = c.try_wait().context("cannot poll llama-server")? {
                remove_if_exists(&layout.llm_pid())?;
                bail!(
                    "llama-server exited while loading ({exit})\n{}",
                    log_tail(&layout.llm_log(), 40)
                );
            }
        } else if managed_pid(layout).is_none() {
            bail!(
                "llama-server exited while loading\n{}",
                log_tail(&layout.llm_log(), 40)
            );
        }
        if healthy() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "llama-server did not become healthy at http://{}/health within {} s\n{}",
                llm_addr(),
                LLM_BOOT_TIMEOUT.as_secs(),
                log_tail(&layout.llm_log(), 40)
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn relative_mirror_urls_resolve_against_the_json_document() {
        let base = "https://pypi.org/pypi/llama-cpp-python/json";
        assert_eq!(
            resolve_url(base, "../../packages/packages/ec/e9/x.tar.gz"),
            "https://pypi.org/packages/packages/ec/e9/x.tar.gz"
        );
        assert_eq!(
            resolve_url(base, "https://files.pythonhosted.org/packages/x.tar.gz"),
            "https://files.pythonhosted.org/packages/x.tar.gz"
        );
        assert_eq!(
            resolve_url(base, "/a/b.tar.gz"),
            "https://pypi.org/a/b.tar.gz"
        );
    }

    #[test]
    fn the_sdist_is_picked_among_wheels_and_needs_a_sha256() {
        let base = "https://pypi.org/pypi/p/1/json";
        let sha = "ab".repeat(32);
        let files = json!([
            {"packagetype": "bdist_wheel", "url": "w.whl", "digests": {"sha256": sha}},
            {"packagetype": "sdist", "url": "https://h/s.tar.gz", "digests": {"sha256": sha.to_uppercase()}},
        ]);
        assert_eq!(
            pick_sdist(Some(&files), base),
            Some(("https://h/s.tar.gz".to_owned(), sha.clone()))
        );
        let unsigned =
            json!([{"packagetype": "sdist", "url": "s.tar.gz", "digests": {"sha256": "x"}}]);
        assert_eq!(pick_sdist(Some(&unsigned), base), None);
        assert_eq!(pick_sdist(None, base), None);
    }

    #[test]
    fn server_serves_with_template_keys_and_counters_on_loopback() {
        let args = server_args(
            Path::new("/m/model.gguf"),
            Path::new("/k"),
            Path::new("/t.jinja"),
        );
        let joined = args.join(" ");
        for part in [
            "--model /m/model.gguf",
            "--host 127.0.0.1",
            &format!("--port {LLM_PORT}"),
            "--ctx-size 8192",
            "--api-key-file /k",
            "--chat-template-file /t.jinja",
            "--jinja",
            "--metrics",
            "--slots",
        ] {
            assert!(joined.contains(part), "{part} missing from {joined}");
        }
        assert!(LLM_API_KEYS.len() >= 2, "the key pool tests need two keys");
    }

    #[test]
    fn the_chat_template_offers_tools_in_chatml() {
        for part in [
            "<|im_start|>",
            "<|im_end|>",
            "tools",
            "tool_calls",
            "tojson",
            "tool_response",
        ] {
            assert!(CHAT_TEMPLATE.contains(part), "{part}");
        }
    }

    #[test]
    fn layout_keys_the_binary_by_version() {
        let l = Layout::new("/srv/x");
        assert_eq!(
            l.llm_binary(),
            Path::new("/srv/x/llm/bin/llama-server-0.3.36")
        );
        assert_eq!(
            l.llm_built_binary(),
            Path::new("/srv/x/llm/src/llama.cpp-0.3.36/build/bin/llama-server")
        );
    }
}
