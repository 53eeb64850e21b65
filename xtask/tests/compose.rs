//! Structural checks of the Docker deployment, without a Docker engine:
//! `deploy/docker-compose.yml`, `deploy/.env.example`, `deploy/config.yaml`
//! and the root `Dockerfile`.
//!
//! Each check is a function that returns the problems it finds, so the
//! positive tests below run them against the real files and the negative
//! tests prove, on small broken inputs, that they do report problems.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

// ---------------------------------------------------------------------------
// files

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

fn deploy_dir() -> PathBuf {
    repo_root().join("deploy")
}

fn read(rel: &str) -> String {
    let path = repo_root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn parse_yaml(text: &str, what: &str) -> Value {
    serde_saphyr::from_str::<Value>(text)
        .unwrap_or_else(|e| panic!("{what} is not valid YAML: {e}"))
}

fn compose() -> Value {
    parse_yaml(
        &read("deploy/docker-compose.yml"),
        "deploy/docker-compose.yml",
    )
}

fn assert_no_problems(what: &str, problems: Vec<String>) {
    assert!(
        problems.is_empty(),
        "{what}:\n  - {}",
        problems.join("\n  - ")
    );
}

// ---------------------------------------------------------------------------
// `${VAR}` scanner (Compose interpolation syntax)

#[derive(Debug, Clone, PartialEq, Eq)]
enum VarKind {
    /// `$VAR` or `${VAR}`: empty when unset (Compose warns).
    Plain,
    /// `${VAR:-d}`, `${VAR-d}`, `${VAR:+alt}`, `${VAR+alt}`: fine when unset.
    Defaulted,
    /// `${VAR:?err}`, `${VAR?err}`: Compose refuses to start when unset.
    Required,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct VarRef {
    name: String,
    kind: VarKind,
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every variable reference in one string, nested defaults included.
/// `$$` is Compose's escape for a literal `$` and references nothing.
fn scan_vars(text: &str) -> Result<Vec<VarRef>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut refs = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '$' {
            i += 1;
            continue;
        }
        match chars.get(i + 1) {
            Some('$') => i += 2,
            Some('{') => {
                let start = i + 2;
                let mut depth = 1;
                let mut j = start;
                while j < chars.len() {
                    match chars[j] {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                if depth != 0 {
                    return Err(format!("unterminated `${{` in {text:?}"));
                }
                let inner: String = chars[start..j].iter().collect();
                refs.extend(parse_braced(&inner, text)?);
                i = j + 1;
            }
            Some(&c) if is_name_start(c) => {
                let mut j = i + 1;
                while j < chars.len() && is_name_char(chars[j]) {
                    j += 1;
                }
                refs.push(VarRef {
                    name: chars[i + 1..j].iter().collect(),
                    kind: VarKind::Plain,
                });
                i = j;
            }
            _ => i += 1,
        }
    }
    Ok(refs)
}

fn parse_braced(inner: &str, whole: &str) -> Result<Vec<VarRef>, String> {
    let name_len = inner
        .char_indices()
        .find(|&(k, c)| !(is_name_char(c) && (k > 0 || is_name_start(c))))
        .map_or(inner.len(), |(k, _)| k);
    let name = &inner[..name_len];
    if name.is_empty() {
        return Err(format!("bad substitution `${{{inner}}}` in {whole:?}"));
    }
    let rest = &inner[name_len..];
    let (kind, tail) = if rest.is_empty() {
        (VarKind::Plain, "")
    } else if let Some(t) = rest.strip_prefix(":-").or_else(|| rest.strip_prefix('-')) {
        (VarKind::Defaulted, t)
    } else if let Some(t) = rest.strip_prefix(":+").or_else(|| rest.strip_prefix('+')) {
        (VarKind::Defaulted, t)
    } else if let Some(t) = rest.strip_prefix(":?").or_else(|| rest.strip_prefix('?')) {
        (VarKind::Required, t)
    } else {
        return Err(format!("bad substitution `${{{inner}}}` in {whole:?}"));
    };
    let mut refs = vec![VarRef {
        name: name.to_string(),
        kind,
    }];
    // A default or alternate value may itself reference variables.
    if matches!(refs[0].kind, VarKind::Defaulted) {
        refs.extend(scan_vars(tail)?);
    }
    Ok(refs)
}

/// What Compose makes of `text` when none of its variables is set: defaults
/// (`${VAR:-d}`, `${VAR-d}`) substituted, every other reference empty.
fn with_defaults(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '$' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        match chars.get(i + 1) {
            Some('$') => {
                out.push('$');
                i += 2;
            }
            Some('{') => {
                let mut depth = 1;
                let mut j = i + 2;
                while j < chars.len() && depth > 0 {
                    match chars[j] {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    j += 1;
                }
                let inner: String = chars[i + 2..j.saturating_sub(1).max(i + 2)]
                    .iter()
                    .collect();
                let name_len = inner
                    .find(|c: char| !is_name_char(c))
                    .unwrap_or(inner.len());
                let rest = &inner[name_len..];
                if let Some(d) = rest.strip_prefix(":-").or_else(|| rest.strip_prefix('-')) {
                    out.push_str(&with_defaults(d));
                }
                i = j;
            }
            Some(&c) if is_name_start(c) => {
                i += 1;
                while i < chars.len() && is_name_char(chars[i]) {
                    i += 1;
                }
            }
            _ => {
                out.push('$');
                i += 1;
            }
        }
    }
    out
}

/// Every string (keys and scalars) of a parsed YAML document, with its path.
fn strings(value: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::String(s) => out.push((path.to_string(), s.clone())),
        Value::Array(items) => {
            for (k, item) in items.iter().enumerate() {
                strings(item, &format!("{path}[{k}]"), out);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                let p = format!("{path}.{k}");
                out.push((p.clone(), k.clone()));
                strings(v, &p, out);
            }
        }
        _ => {}
    }
}

fn var_refs(doc: &Value) -> Result<Vec<(String, VarRef)>, String> {
    let mut all = Vec::new();
    strings(doc, "", &mut all);
    let mut refs = Vec::new();
    for (path, s) in all {
        for r in scan_vars(&s).map_err(|e| format!("{path}: {e}"))? {
            refs.push((path.clone(), r));
        }
    }
    Ok(refs)
}

// ---------------------------------------------------------------------------
// .env.example

#[derive(Debug, Default)]
struct EnvExample {
    /// `NAME=value` lines.
    active: BTreeSet<String>,
    /// `# NAME=value` lines: documented, left unset.
    commented: BTreeSet<String>,
}

fn parse_env_example(text: &str) -> EnvExample {
    let mut env = EnvExample::default();
    for line in text.lines() {
        let line = line.trim();
        let (body, commented) = match line.strip_prefix('#') {
            Some(b) => (b.trim_start(), true),
            None => (line, false),
        };
        let Some((name, _)) = body.split_once('=') else {
            continue;
        };
        let valid =
            name.chars().next().is_some_and(is_name_start) && name.chars().all(is_name_char);
        if !valid {
            continue;
        }
        if commented {
            env.commented.insert(name.to_string());
        } else {
            env.active.insert(name.to_string());
        }
    }
    env
}

// ---------------------------------------------------------------------------
// compose helpers

fn services(compose: &Value) -> &serde_json::Map<String, Value> {
    compose["services"]
        .as_object()
        .expect("compose file has a `services` mapping")
}

/// `environment` as a map; `None` is a pass-through key (`KEY:` or `- KEY`).
fn environment(service: &Value) -> BTreeMap<String, Option<String>> {
    let mut env = BTreeMap::new();
    match &service["environment"] {
        Value::Object(map) => {
            for (k, v) in map {
                let v = match v {
                    Value::Null => None,
                    Value::String(s) => Some(s.clone()),
                    other => Some(other.to_string()),
                };
                env.insert(k.clone(), v);
            }
        }
        Value::Array(items) => {
            for item in items.iter().filter_map(Value::as_str) {
                match item.split_once('=') {
                    Some((k, v)) => env.insert(k.to_string(), Some(v.to_string())),
                    None => env.insert(item.to_string(), None),
                };
            }
        }
        _ => {}
    }
    env
}

/// `depends_on` as `(service, condition)`; the short list form means started.
fn depends_on(service: &Value) -> Vec<(String, String)> {
    match &service["depends_on"] {
        Value::Array(items) => items
            .iter()
            .filter_map(Value::as_str)
            .map(|s| (s.to_string(), "service_started".to_string()))
            .collect(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                let cond = v["condition"].as_str().unwrap_or("service_started");
                (k.clone(), cond.to_string())
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Published {
    host_ip: String,
    host_port: String,
    container_port: String,
}

/// Published ports, short (`[ip:]host:container`) or long syntax, with
/// variable defaults applied.
fn published_ports(service: &Value) -> Vec<Published> {
    let mut out = Vec::new();
    for item in service["ports"].as_array().into_iter().flatten() {
        match item {
            Value::String(s) => {
                let parts: Vec<&str> = s.rsplitn(3, ':').collect();
                if parts.len() < 2 {
                    continue; // container port only: not published on a fixed host port
                }
                out.push(Published {
                    host_ip: parts.get(2).map(|ip| with_defaults(ip)).unwrap_or_default(),
                    host_port: with_defaults(parts[1]),
                    container_port: with_defaults(parts[0].split('/').next().unwrap_or_default()),
                });
            }
            Value::Object(map) => out.push(Published {
                host_ip: map
                    .get("host_ip")
                    .and_then(Value::as_str)
                    .map(with_defaults)
                    .unwrap_or_default(),
                host_port: match map.get("published") {
                    Some(Value::String(s)) => with_defaults(s),
                    Some(v) => v.to_string(),
                    None => String::new(),
                },
                container_port: match map.get("target") {
                    Some(Value::String(s)) => with_defaults(s),
                    Some(v) => v.to_string(),
                    None => String::new(),
                },
            }),
            _ => {}
        }
    }
    out
}

fn is_one_shot(name: &str, compose: &Value) -> bool {
    let svc = &services(compose)[name];
    let restart_no = svc["restart"].as_str().is_none_or(|r| r == "no");
    let awaited = services(compose).values().any(|other| {
        depends_on(other)
            .iter()
            .any(|(dep, cond)| dep == name && cond == "service_completed_successfully")
    });
    restart_no && awaited
}

fn has_healthcheck(service: &Value) -> bool {
    let hc = &service["healthcheck"];
    if hc.is_null() || hc["disable"].as_bool() == Some(true) {
        return false;
    }
    match &hc["test"] {
        Value::String(s) => !s.trim().is_empty(),
        Value::Array(items) => {
            matches!(
                items.first().and_then(Value::as_str),
                Some("CMD" | "CMD-SHELL")
            ) && items.len() >= 2
        }
        _ => false,
    }
}

fn profiles(service: &Value) -> BTreeSet<String> {
    service["profiles"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// Compose durations: `1h2m3s`, `10s`, `500ms`, `1.5s`.
fn is_duration(s: &str) -> bool {
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let unit = ["ms", "us", "ns", "h", "m", "s"]
            .into_iter()
            .find(|u| rest.starts_with(u));
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

// ---------------------------------------------------------------------------
// checks: each returns the problems it found

const TOP_LEVEL_KEYS: &[&str] = &[
    "services", "volumes", "networks", "configs", "secrets", "name", "include", "models",
];

#[rustfmt::skip]
const SERVICE_KEYS: &[&str] = &[
    "annotations", "attach", "blkio_config", "build", "cap_add", "cap_drop", "cgroup",
    "cgroup_parent", "command", "configs", "container_name", "cpu_count", "cpu_percent",
    "cpu_period", "cpu_quota", "cpu_rt_period", "cpu_rt_runtime", "cpu_shares", "cpus", "cpuset",
    "credential_spec", "depends_on", "deploy", "develop", "device_cgroup_rules", "devices", "dns",
    "dns_opt", "dns_search", "domainname", "entrypoint", "env_file", "environment", "expose",
    "extends", "external_links", "extra_hosts", "gpus", "group_add", "healthcheck", "hostname",
    "image", "init", "ipc", "isolation", "label_file", "labels", "links", "logging", "mac_address",
    "mem_limit", "mem_reservation", "mem_swappiness", "memswap_limit", "models", "network_mode",
    "networks", "oom_kill_disable", "oom_score_adj", "pid", "pids_limit", "platform", "ports",
    "post_start", "pre_stop", "privileged", "profiles", "provider", "pull_policy", "read_only",
    "restart", "runtime", "scale", "secrets", "security_opt", "shm_size", "stdin_open",
    "stop_grace_period", "stop_signal", "storage_opt", "sysctls", "tmpfs", "tty", "ulimits",
    "use_api_socket", "user", "userns_mode", "uts", "volumes", "volumes_from", "working_dir",
];

const HEALTHCHECK_KEYS: &[&str] = &[
    "test",
    "interval",
    "timeout",
    "retries",
    "start_period",
    "start_interval",
    "disable",
];

const CONDITIONS: &[&str] = &[
    "service_started",
    "service_healthy",
    "service_completed_successfully",
];

/// What `docker compose config` would refuse: unknown keys, a service with
/// neither image nor build, undeclared named volumes, missing files.
/// `base` is the directory relative paths are resolved against.
fn check_compose_structure(compose: &Value, base: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(top) = compose.as_object() else {
        return vec!["the compose file is not a mapping".into()];
    };
    for key in top.keys() {
        if key == "version" {
            problems.push("top-level `version` is obsolete in the Compose spec: remove it".into());
        } else if !TOP_LEVEL_KEYS.contains(&key.as_str()) && !key.starts_with("x-") {
            problems.push(format!("unknown top-level key `{key}`"));
        }
    }
    let Some(svcs) = compose["services"].as_object().filter(|m| !m.is_empty()) else {
        problems.push("no services".into());
        return problems;
    };
    let declared_volumes: BTreeSet<String> = compose["volumes"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let mut used_volumes = BTreeSet::new();

    for (name, svc) in svcs {
        let Some(map) = svc.as_object() else {
            problems.push(format!("service `{name}` is not a mapping"));
            continue;
        };
        for key in map.keys() {
            if !SERVICE_KEYS.contains(&key.as_str()) && !key.starts_with("x-") {
                problems.push(format!("service `{name}`: unknown key `{key}`"));
            }
        }
        if svc["image"].is_null() && svc["build"].is_null() {
            problems.push(format!("service `{name}` has neither `image` nor `build`"));
        }
        let build = &svc["build"];
        if !build.is_null() {
            let (context, dockerfile) = match build {
                Value::String(c) => (c.clone(), "Dockerfile".to_string()),
                _ => (
                    build["context"].as_str().unwrap_or(".").to_string(),
                    build["dockerfile"]
                        .as_str()
                        .unwrap_or("Dockerfile")
                        .to_string(),
                ),
            };
            let ctx = base.join(&context);
            if !ctx.is_dir() {
                problems.push(format!(
                    "service `{name}`: build context `{context}` is not a directory"
                ));
            } else if !ctx.join(&dockerfile).is_file() {
                problems.push(format!(
                    "service `{name}`: `{dockerfile}` not found in build context `{context}`"
                ));
            }
        }
        if let Some(hc) = svc["healthcheck"].as_object() {
            for (key, value) in hc {
                if !HEALTHCHECK_KEYS.contains(&key.as_str()) {
                    problems.push(format!("service `{name}`: unknown healthcheck key `{key}`"));
                }
                if matches!(
                    key.as_str(),
                    "interval" | "timeout" | "start_period" | "start_interval"
                ) && !value.as_str().is_some_and(is_duration)
                {
                    problems.push(format!(
                        "service `{name}`: healthcheck {key} {value} is not a duration"
                    ));
                }
            }
        }
        for item in svc["volumes"].as_array().into_iter().flatten() {
            let (kind, source) = match item {
                Value::String(s) => {
                    let source = s.split(':').next().unwrap_or_default().to_string();
                    let bind = source.starts_with(['.', '/', '~']) || source.contains('/');
                    (if bind { "bind" } else { "volume" }, source)
                }
                Value::Object(m) => (
                    m.get("type").and_then(Value::as_str).unwrap_or("volume"),
                    m.get("source")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                ),
                _ => continue,
            };
            match kind {
                "volume" if !source.is_empty() => {
                    if !declared_volumes.contains(&source) {
                        problems.push(format!("service `{name}` uses volume `{source}`, not declared under top-level `volumes`"));
                    }
                    used_volumes.insert(source);
                }
                "bind" if source.starts_with('.') && !base.join(&source).exists() => {
                    problems.push(format!(
                        "service `{name}` bind-mounts `{source}`, which does not exist"
                    ));
                }
                _ => {}
            }
        }
        for item in svc["env_file"].as_array().into_iter().flatten() {
            let (path, required) = match item {
                Value::String(p) => (p.clone(), true),
                Value::Object(m) => (
                    m.get("path")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    m.get("required").and_then(Value::as_bool).unwrap_or(true),
                ),
                _ => continue,
            };
            if required && !base.join(&path).is_file() {
                problems.push(format!(
                    "service `{name}`: required env_file `{path}` does not exist"
                ));
            }
        }
    }
    for unused in declared_volumes.difference(&used_volumes) {
        problems.push(format!(
            "volume `{unused}` is declared but no service uses it"
        ));
    }
    problems
}

/// `depends_on` names existing services, with a known condition that the
/// target can satisfy, and never from a default service into a profiled one
/// (Compose rejects that when the profile is off).
fn check_depends_on(compose: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let svcs = services(compose);
    for (name, svc) in svcs {
        for (dep, cond) in depends_on(svc) {
            let Some(target) = svcs.get(&dep) else {
                problems.push(format!(
                    "service `{name}` depends on unknown service `{dep}`"
                ));
                continue;
            };
            if !CONDITIONS.contains(&cond.as_str()) {
                problems.push(format!(
                    "service `{name}`: unknown depends_on condition `{cond}` for `{dep}`"
                ));
            }
            if cond == "service_healthy" && !has_healthcheck(target) {
                problems.push(format!("service `{name}` waits for `{dep}` to be healthy, but `{dep}` has no healthcheck"));
            }
            let (mine, theirs) = (profiles(svc), profiles(target));
            if !theirs.is_empty() && theirs.is_disjoint(&mine) {
                problems.push(format!(
                    "service `{name}` (profiles {mine:?}) depends on `{dep}`, which only runs under profiles {theirs:?}"
                ));
            }
        }
    }
    problems
}

/// Every long-running service has a healthcheck (one-shot jobs that others
/// await with `service_completed_successfully` are exempt).
fn check_healthchecks(compose: &Value) -> Vec<String> {
    services(compose)
        .iter()
        .filter(|(name, svc)| !has_healthcheck(svc) && !is_one_shot(name, compose))
        .map(|(name, _)| format!("service `{name}` has no healthcheck"))
        .collect()
}

/// Every variable the compose file reads is documented in `.env.example`:
/// required ones as active `NAME=` lines, the others at least commented.
/// Pass-through environment keys count as variables. No stale entries, and
/// no `CREWLET_*` names: that prefix is the engine's configuration namespace,
/// and a `.env` sourced into a shell must not feed it by accident.
fn check_env_coverage(compose: &Value, env_example: &str) -> Vec<String> {
    let env = parse_env_example(env_example);
    let mut problems = Vec::new();
    let refs = match var_refs(compose) {
        Ok(r) => r,
        Err(e) => return vec![e],
    };
    let mut referenced = BTreeSet::new();
    for (path, r) in &refs {
        referenced.insert(r.name.clone());
        let documented = env.active.contains(&r.name) || env.commented.contains(&r.name);
        match r.kind {
            VarKind::Defaulted if !documented => problems.push(format!(
                "{path}: `{}` is not documented in .env.example",
                r.name
            )),
            VarKind::Plain | VarKind::Required if !env.active.contains(&r.name) => {
                problems.push(format!(
                    "{path}: `{}` has no default and no active `{}=` line in .env.example",
                    r.name, r.name
                ))
            }
            _ => {}
        }
        if r.name.starts_with("CREWLET_") {
            problems.push(format!(
                "{path}: compose variable `{}` must not use the CREWLET_ prefix",
                r.name
            ));
        }
    }
    for (name, svc) in services(compose) {
        for (key, value) in environment(svc) {
            if value.is_none() {
                referenced.insert(key.clone());
                if !env.active.contains(&key) && !env.commented.contains(&key) {
                    problems.push(format!(
                        "service `{name}`: pass-through `{key}` is not documented in .env.example"
                    ));
                }
            }
        }
    }
    for stale in env.active.iter().chain(&env.commented) {
        if !referenced.contains(stale) {
            problems.push(format!(
                ".env.example documents `{stale}`, which the compose file never reads"
            ));
        }
    }
    problems
}

/// The broker settings this deployment depends on.
fn check_pulsar(compose: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let pulsar = &services(compose)["pulsar"];
    let env = environment(pulsar);
    let get = |k: &str| env.get(k).cloned().flatten();

    if get("PULSAR_MEM").as_deref() != Some("-Xms512m -Xmx1g -XX:MaxDirectMemorySize=512m") {
        problems.push(format!("pulsar PULSAR_MEM is {:?}", get("PULSAR_MEM")));
    }
    if pulsar["mem_limit"].as_str() != Some("2g") {
        problems.push(format!("pulsar mem_limit is {}", pulsar["mem_limit"]));
    }
    // SPEC section 13: seat inboxes are durable and must outlive a stopped
    // engine, so subscriptions never expire.
    if get("PULSAR_PREFIX_subscriptionExpirationTimeMinutes").as_deref() != Some("0") {
        problems.push(format!(
            "pulsar subscriptionExpirationTimeMinutes is {:?}, expected \"0\" (never expire)",
            get("PULSAR_PREFIX_subscriptionExpirationTimeMinutes")
        ));
    }
    // PULSAR_PREFIX_* only reach standalone.conf through apply-config-from-env.py.
    let command = match &pulsar["command"] {
        Value::Array(items) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" "),
        Value::String(s) => s.clone(),
        _ => String::new(),
    };
    match (command.find("apply-config-from-env.py conf/standalone.conf"), command.find("bin/pulsar standalone")) {
        (Some(apply), Some(start)) if apply < start => {}
        _ => problems.push(format!(
            "pulsar command must run apply-config-from-env.py on conf/standalone.conf before `bin/pulsar standalone`: {command:?}"
        )),
    }
    if !command.contains("-nfw") || !command.contains("-nss") {
        problems.push(
            "pulsar standalone should run without functions worker and stream storage (-nfw -nss)"
                .into(),
        );
    }
    // Containers reach the broker as `pulsar`; lookups must hand out that name.
    let advertised = get("PULSAR_PREFIX_advertisedAddress").map(|a| with_defaults(&a));
    if advertised.as_deref() != Some("pulsar") {
        problems.push(format!("pulsar advertisedAddress defaults to {advertised:?}, expected the service name `pulsar`"));
    }
    match pulsar["image"].as_str() {
        Some(image) if image.starts_with("apachepulsar/pulsar:") && !image.ends_with(":latest") => {
        }
        other => problems.push(format!(
            "pulsar image must be a pinned apachepulsar/pulsar tag, found {other:?}"
        )),
    }
    problems
}

fn check_dockerfile(text: &str) -> Vec<String> {
    // Join continuation lines, drop comments and the parser directive.
    let mut instructions: Vec<String> = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.starts_with('#') || trimmed.is_empty()) {
            continue;
        }
        if let Some(body) = trimmed.strip_suffix('\\') {
            current.push_str(body);
            current.push(' ');
        } else {
            current.push_str(trimmed);
            instructions.push(std::mem::take(&mut current));
        }
    }
    let keyword = |i: &str| {
        i.split_whitespace()
            .next()
            .unwrap_or_default()
            .to_ascii_uppercase()
    };
    let mut problems = Vec::new();

    let stages: Vec<usize> = instructions
        .iter()
        .enumerate()
        .filter(|(_, i)| keyword(i) == "FROM")
        .map(|(k, _)| k)
        .collect();
    if stages.len() < 2 {
        problems.push(format!(
            "expected a multi-stage build, found {} FROM",
            stages.len()
        ));
    }
    let final_stage = &instructions[stages.last().copied().unwrap_or(0)..];
    let user = final_stage.iter().rev().find(|i| keyword(i) == "USER");
    match user.and_then(|u| u.split_whitespace().nth(1)) {
        None => problems.push("the final stage sets no USER: the image would run as root".into()),
        Some(u) if matches!(u.split(':').next(), Some("root" | "0")) => {
            problems.push(format!("the final stage runs as `{u}`"))
        }
        Some(_) => {}
    }
    match final_stage.iter().find(|i| keyword(i) == "HEALTHCHECK") {
        None => problems.push("the final stage has no HEALTHCHECK".into()),
        Some(hc) if !hc.contains("/health") => {
            problems.push(format!("the HEALTHCHECK does not probe /health: {hc}"))
        }
        Some(hc) if hc.contains("CREWLET_") => problems.push(
            "the HEALTHCHECK reads a CREWLET_* variable, which the engine would take as config"
                .into(),
        ),
        Some(_) => {}
    }
    if !final_stage
        .iter()
        .any(|i| keyword(i) == "COPY" && i.contains("--from="))
    {
        problems.push("the final stage copies nothing from the build stage".into());
    }
    if !final_stage
        .iter()
        .any(|i| keyword(i) == "ENTRYPOINT" && i.contains("crewlet"))
    {
        problems.push("no ENTRYPOINT running crewlet".into());
    }
    if !instructions
        .iter()
        .any(|i| i.contains("apt-get install") && i.contains("cmake"))
    {
        problems.push(
            "the build stage does not install cmake (the pulsar crate builds its protoc with it)"
                .into(),
        );
    }
    if !instructions
        .iter()
        .any(|i| i.contains("cargo build") && i.contains("--locked") && i.contains("--release"))
    {
        problems.push("no `cargo build --release --locked`".into());
    }
    problems
}

/// The Tier A file mounted into the Crewlet containers matches the compose
/// services around it and carries no secret.
fn check_app_config(compose: &Value, config: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let queue = &config["providers"]["queue"];
    if queue["type"].as_str() != Some("pulsar") {
        problems.push(format!("providers.queue.type is {}", queue["type"]));
    }
    if queue["url"].as_str() != Some("pulsar://pulsar:6650") {
        problems.push(format!(
            "providers.queue.url is {}, expected pulsar://pulsar:6650",
            queue["url"]
        ));
    }
    if config["api"]["port"].as_u64() != Some(0) {
        problems.push(format!(
            "api.port is {}, expected 0 (split deployment)",
            config["api"]["port"]
        ));
    }
    if let Some(dsn) = config["providers"]["database"]["dsn"].as_str() {
        let userinfo = dsn
            .split_once("://")
            .and_then(|(_, rest)| rest.split_once('@'))
            .map(|(u, _)| u);
        if userinfo.is_some_and(|u| u.contains(':')) {
            problems.push("providers.database.dsn in config.yaml carries a password".into());
        }
    }
    for name in ["crewlet", "crewlet-api"] {
        let Some(svc) = services(compose).get(name) else {
            problems.push(format!("service `{name}` is missing"));
            continue;
        };
        if !profiles(svc).contains("app") {
            problems.push(format!(
                "service `{name}` should run only under the `app` profile"
            ));
        }
        let mounts_config = svc["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .any(|v| v.starts_with("./config.yaml:/etc/crewlet/config.yaml"));
        if !mounts_config {
            problems.push(format!(
                "service `{name}` does not mount ./config.yaml at /etc/crewlet/config.yaml"
            ));
        }
        let command: Vec<&str> = svc["command"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !command.contains(&"/etc/crewlet/config.yaml") {
            problems.push(format!(
                "service `{name}` command does not use /etc/crewlet/config.yaml: {command:?}"
            ));
        }
        match environment(svc).get("CREWLET_PROVIDERS__DATABASE__DSN") {
            Some(Some(dsn)) if dsn.contains("@postgres:5432/") => {}
            other => problems.push(format!(
                "service `{name}` CREWLET_PROVIDERS__DATABASE__DSN is {other:?}"
            )),
        }
    }
    problems
}

// ---------------------------------------------------------------------------
// the real files

#[test]
fn compose_has_the_expected_services() {
    let compose = compose();
    let names: BTreeSet<&str> = services(&compose).keys().map(String::as_str).collect();
    for expected in [
        "pulsar",
        "dekaf",
        "postgres",
        "pgweb",
        "crewlet",
        "crewlet-api",
    ] {
        assert!(
            names.contains(expected),
            "service `{expected}` missing; have {names:?}"
        );
    }
    // A plain `docker compose up` gives exactly the infrastructure.
    for infra in ["pulsar", "dekaf", "postgres", "pgweb"] {
        assert!(
            profiles(&services(&compose)[infra]).is_empty(),
            "`{infra}` must not be behind a profile"
        );
    }
}

#[test]
fn compose_publishes_the_documented_ports() {
    let compose = compose();
    let expected = [
        ("pulsar", "6650", "6650"),
        ("pulsar", "8080", "8080"),
        ("dekaf", "8090", "8090"),
        ("postgres", "5432", "5432"),
        ("pgweb", "8150", "8081"),
        ("crewlet-api", "8000", "8000"),
    ];
    for (svc, host, container) in expected {
        let ports = published_ports(&services(&compose)[svc]);
        assert!(
            ports
                .iter()
                .any(|p| p.host_port == host && p.container_port == container),
            "`{svc}` should publish {host}:{container}; has {ports:?}"
        );
    }
    let mut seen = BTreeMap::new();
    for (name, svc) in services(&compose) {
        for p in published_ports(svc) {
            if let Some(other) = seen.insert(p.host_port.clone(), name.clone()) {
                panic!(
                    "host port {} is published by both `{other}` and `{name}`",
                    p.host_port
                );
            }
            assert_eq!(
                p.host_ip, "127.0.0.1",
                "`{name}` port {} should default to loopback",
                p.host_port
            );
        }
    }
}

#[test]
fn compose_pulsar_is_capped_and_keeps_inboxes() {
    assert_no_problems("pulsar service", check_pulsar(&compose()));
}

#[test]
fn compose_dekaf_points_at_the_broker() {
    let compose = compose();
    let env = environment(&services(&compose)["dekaf"]);
    assert_eq!(
        env["DEKAF_PULSAR_WEB_URL"].as_deref(),
        Some("http://pulsar:8080")
    );
    assert_eq!(
        env["DEKAF_PULSAR_BROKER_URL"].as_deref(),
        Some("pulsar://pulsar:6650")
    );
    let base = env["DEKAF_PUBLIC_BASE_URL"].as_deref().map(with_defaults);
    assert_eq!(base.as_deref(), Some("http://localhost:8090"));
}

#[test]
fn compose_services_have_healthchecks() {
    assert_no_problems("healthchecks", check_healthchecks(&compose()));
}

#[test]
fn compose_depends_on_is_consistent() {
    assert_no_problems("depends_on", check_depends_on(&compose()));
}

#[test]
fn compose_is_structurally_valid() {
    assert_no_problems(
        "compose structure",
        check_compose_structure(&compose(), &deploy_dir()),
    );
}

#[test]
fn compose_variables_are_in_env_example() {
    assert_no_problems(
        "deploy/.env.example",
        check_env_coverage(&compose(), &read("deploy/.env.example")),
    );
}

#[test]
fn app_config_matches_compose_and_has_no_variables() {
    let config = parse_yaml(&read("deploy/config.yaml"), "deploy/config.yaml");
    assert_no_problems("deploy/config.yaml", check_app_config(&compose(), &config));
    // Secrets come from the compose environment, so the file reads no ${VAR};
    // if one is ever added it must be documented like the compose ones.
    let refs = var_refs(&config).expect("config.yaml interpolation is well formed");
    let env = parse_env_example(&read("deploy/.env.example"));
    for (path, r) in refs {
        assert!(
            env.active.contains(&r.name) || env.commented.contains(&r.name),
            "deploy/config.yaml{path}: `{}` is not in deploy/.env.example",
            r.name
        );
    }
}

#[test]
fn dockerfile_is_multi_stage_non_root_with_healthcheck() {
    assert_no_problems("Dockerfile", check_dockerfile(&read("Dockerfile")));
}

#[test]
fn dockerignore_keeps_build_output_and_secrets_out() {
    let ignore = read(".dockerignore");
    let lines: BTreeSet<&str> = ignore.lines().map(str::trim).collect();
    for needed in ["target/", ".git/", ".env"] {
        assert!(
            lines.contains(needed),
            ".dockerignore should list `{needed}`"
        );
    }
    assert!(
        !lines.contains("Cargo.lock"),
        "`cargo build --locked` needs Cargo.lock in the context"
    );
}

// ---------------------------------------------------------------------------
// the checks can fail

#[test]
fn scanner_reads_compose_interpolation() {
    let names = |s: &str| {
        scan_vars(s)
            .expect("well formed")
            .into_iter()
            .map(|r| (r.name, r.kind))
            .collect::<Vec<_>>()
    };
    assert_eq!(names("${A}"), [("A".into(), VarKind::Plain)]);
    assert_eq!(names("x $B y"), [("B".into(), VarKind::Plain)]);
    assert_eq!(
        names("${C:-1}${D-2}"),
        [
            ("C".into(), VarKind::Defaulted),
            ("D".into(), VarKind::Defaulted)
        ]
    );
    assert_eq!(
        names("${E:?set E}${F?x}"),
        [
            ("E".into(), VarKind::Required),
            ("F".into(), VarKind::Required)
        ]
    );
    assert_eq!(
        names("${G:-${H}}"),
        [
            ("G".into(), VarKind::Defaulted),
            ("H".into(), VarKind::Plain)
        ]
    );
    // `$$` is a literal dollar, not a reference.
    assert!(names("$${NOT_A_VAR} $$status").is_empty());
    assert!(names("costs 5$").is_empty());
}

#[test]
fn scanner_rejects_malformed_substitutions() {
    assert!(scan_vars("${}").is_err());
    assert!(scan_vars("${A").is_err());
    assert!(scan_vars("${A:x}").is_err());
    assert!(scan_vars("${1A}").is_err());
}

#[test]
fn env_coverage_reports_undocumented_and_stale_variables() {
    let compose = parse_yaml(
        r#"
services:
  app:
    image: x
    environment:
      PASSWORD: ${DB_PASSWORD:?required}
      URL: http://${HOST:-localhost}/${MISSING}
      TOKEN:
"#,
        "fixture",
    );
    let env_example = "# DB_PASSWORD=commented-out-is-not-enough\nHOST=localhost\nUNUSED=1\n";
    let problems = check_env_coverage(&compose, env_example).join("\n");
    assert!(
        problems.contains("`DB_PASSWORD` has no default"),
        "{problems}"
    );
    assert!(problems.contains("`MISSING` has no default"), "{problems}");
    assert!(problems.contains("pass-through `TOKEN`"), "{problems}");
    assert!(
        problems.contains("`UNUSED`, which the compose file never reads"),
        "{problems}"
    );
    assert!(!problems.contains("`HOST`"), "{problems}");
}

#[test]
fn structure_check_reports_what_compose_would_refuse() {
    let compose = parse_yaml(
        r#"
version: "3.9"
servcies: {}
services:
  a:
    volumes: ["data:/d", "./no-such-file:/x"]
    helthcheck: {}
  b:
    image: x
    depends_on:
      c: {condition: service_healthy}
      d: {condition: service_healthy}
      e: {condition: service_ready}
  d:
    image: x
  e:
    image: x
    profiles: [extra]
    healthcheck: {test: [CMD, "true"], interval: soon}
volumes:
  unused:
"#,
        "fixture",
    );
    let structure = check_compose_structure(&compose, &deploy_dir()).join("\n");
    for needle in [
        "`version` is obsolete",
        "unknown top-level key `servcies`",
        "`a` has neither `image` nor `build`",
        "unknown key `helthcheck`",
        "volume `data`, not declared",
        "`./no-such-file`, which does not exist",
        "interval \"soon\" is not a duration",
        "volume `unused` is declared but no service uses it",
    ] {
        assert!(
            structure.contains(needle),
            "missing {needle:?} in:\n{structure}"
        );
    }
    let deps = check_depends_on(&compose).join("\n");
    for needle in [
        "unknown service `c`",
        "`d` has no healthcheck",
        "condition `service_ready`",
        "only runs under profiles",
    ] {
        assert!(deps.contains(needle), "missing {needle:?} in:\n{deps}");
    }
    let health = check_healthchecks(&compose).join("\n");
    assert!(
        health.contains("`a` has no healthcheck") && health.contains("`b` has no healthcheck"),
        "{health}"
    );
}

#[test]
fn pulsar_check_reports_a_reaping_or_uncapped_broker() {
    let compose = parse_yaml(
        r#"
services:
  pulsar:
    image: apachepulsar/pulsar:latest
    command: bin/pulsar standalone
    environment:
      PULSAR_PREFIX_subscriptionExpirationTimeMinutes: "30"
"#,
        "fixture",
    );
    let problems = check_pulsar(&compose).join("\n");
    for needle in [
        "PULSAR_MEM",
        "mem_limit",
        "subscriptionExpirationTimeMinutes is Some(\"30\")",
        "apply-config-from-env.py",
        "advertisedAddress",
        "pinned",
    ] {
        assert!(
            problems.contains(needle),
            "missing {needle:?} in:\n{problems}"
        );
    }
}

#[test]
fn dockerfile_check_reports_a_single_stage_root_image() {
    let problems = check_dockerfile("FROM rust:1\nRUN cargo build\nCMD [\"crewlet\"]\n").join("\n");
    for needle in [
        "multi-stage",
        "no USER",
        "no HEALTHCHECK",
        "does not install cmake",
        "--locked",
    ] {
        assert!(
            problems.contains(needle),
            "missing {needle:?} in:\n{problems}"
        );
    }
    let root = check_dockerfile("FROM a AS b\nFROM c\nUSER root\nHEALTHCHECK CMD curl /health\n")
        .join("\n");
    assert!(root.contains("runs as `root`"), "{root}");
}

#[test]
fn defaults_are_applied_like_compose() {
    assert_eq!(with_defaults("${IP:-127.0.0.1}:8080"), "127.0.0.1:8080");
    assert_eq!(with_defaults("${A:?need a-b}x${B}y$C$$"), "xy$");
    assert_eq!(with_defaults("${A:-${B:-z}}"), "z");
}

#[test]
fn duration_parser_accepts_compose_durations_only() {
    for ok in ["10s", "1m30s", "500ms", "1.5s", "2h"] {
        assert!(is_duration(ok), "{ok}");
    }
    for bad in ["", "10", "s", "soon", "10 s"] {
        assert!(!is_duration(bad), "{bad}");
    }
}
