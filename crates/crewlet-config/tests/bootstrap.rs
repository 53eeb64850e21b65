//! Tier A: validation of the file alone, and loading with `CREWLET_*`
//! environment overrides (through figment; `figment::Jail` serializes the
//! tests that set variables and restores the environment after each).

// figment::Jail's closures return figment::Error, which is large; not ours to shrink.
#![allow(clippy::result_large_err)]

use std::path::Path;

use crewlet_config::{Bootstrap, ConfigError, LogFormat, QueueKind, check_bootstrap};
use figment::Jail;

fn load(path: Option<&str>) -> Result<Bootstrap, ConfigError> {
    Bootstrap::load(path.map(Path::new))
}

/// Jail closures return figment errors; carry ours as text.
fn jailed(e: ConfigError) -> figment::Error {
    figment::Error::from(e.to_string())
}

#[test]
fn an_empty_file_is_the_embedded_default() {
    let b = check_bootstrap("config.yaml", "# nothing here\n").unwrap_or_default();
    assert_eq!(b, Bootstrap::default());
    assert!(b.providers.queue.is_none() && b.providers.database.is_none());
    assert_eq!((b.api.host.as_str(), b.api.port), ("127.0.0.1", 0));
    assert_eq!(b.api.auth.allow_anonymous_read, None);
    assert_eq!(b.observability.log_format, LogFormat::Auto);
}

#[test]
fn defaults_fill_a_pulsar_block() {
    let text =
        "providers:\n  queue:\n    url: pulsar://b:6650\n  database:\n    dsn: postgres://x\n";
    let b = check_bootstrap("config.yaml", text).unwrap_or_default();
    let q = b.providers.queue.unwrap_or_default();
    assert_eq!(q.kind, QueueKind::Pulsar);
    assert_eq!(
        (q.tenant.as_str(), q.namespace.as_str()),
        ("public", "default")
    );
    let db = b
        .providers
        .database
        .map(|d| (d.embedding_dim, d.max_connections));
    assert_eq!(db, Some((1536, 16)));
}

#[test]
fn file_rules_are_reported_together_with_lines() {
    let text = "\
debug: yes please
providers:
  queue:
    type: pulsar
  database: {}
api:
  port: 70000
  auth:
    tokens:
      - {id: ops, token: a}
      - {id: ops, token: b}
    allow_anonymus_read: false
observability:
  log_format: xml
";
    let problems = check_bootstrap("config.yaml", text)
        .err()
        .unwrap_or_default();
    let got: Vec<(Option<u32>, &str)> =
        problems.iter().map(|p| (p.line, p.path.as_str())).collect();
    assert_eq!(
        got,
        [
            (Some(1), "debug"),
            (Some(4), "providers.queue.url"),
            (Some(5), "providers.database"),
            (Some(7), "api.port"),
            (Some(11), "api.auth.tokens[1].id"),
            (Some(12), "api.auth.allow_anonymus_read"),
            (Some(14), "observability.log_format"),
        ],
        "{problems:#?}"
    );
    // Exact messages, compiler style.
    let text = "\
providers:
  queue:
    type: pulsar
api:
  auth:
    tokens:
      - {id: ops, token: a}
      - {id: ops, token: b}
";
    let problems = check_bootstrap("config.yaml", text)
        .err()
        .unwrap_or_default();
    let got: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        [
            "config.yaml:3:5: providers.queue.url: a pulsar queue needs `url` (pulsar://HOST:6650 or pulsar+ssl://HOST:6651)",
            "config.yaml:8:14: api.auth.tokens[1].id: token id `ops` is used twice",
        ]
    );
    let bad_scheme = "providers:\n  queue: {url: 'http://b:6650'}\n";
    let problems = check_bootstrap("config.yaml", bad_scheme)
        .err()
        .unwrap_or_default();
    assert!(
        problems[0].message.contains("must start with pulsar://"),
        "{problems:?}"
    );
}

#[test]
fn environment_overrides_nested_keys() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "config.yaml",
            "api:\n  port: 8000\nproviders:\n  database:\n    dsn: postgres://file\n",
        )?;
        jail.set_env("CREWLET_PROVIDERS__DATABASE__DSN", "postgres://env");
        jail.set_env("CREWLET_API__PORT", "9000");
        jail.set_env("CREWLET_DEBUG", "true");
        jail.set_env("CREWLET_OBSERVABILITY__LOG_FORMAT", "json");
        // Text that looks like a number stays text where the key is a string.
        jail.set_env("CREWLET_OBSERVABILITY__SERVICE_NAME", "12345");
        // Not configuration: other tools' CREWLET_* variables are ignored.
        jail.set_env("CREWLET_UPDATE_DOCS", "1");
        let b = load(Some("config.yaml")).map_err(jailed)?;
        assert_eq!(
            b.providers.database.map(|d| d.dsn).as_deref(),
            Some("postgres://env")
        );
        assert_eq!(b.api.port, 9000);
        assert!(b.debug);
        assert_eq!(b.observability.log_format, LogFormat::Json);
        assert_eq!(b.observability.service_name, "12345");
        Ok(())
    });
}

#[test]
fn environment_alone_can_configure_the_queue() {
    Jail::expect_with(|jail| {
        jail.set_env("CREWLET_PROVIDERS__QUEUE__URL", "pulsar://broker:6650");
        jail.set_env("CREWLET_PROVIDERS__QUEUE__TENANT", "acme");
        let b = load(None).map_err(jailed)?;
        let q = b.providers.queue.unwrap_or_default();
        assert_eq!(
            (q.kind, q.url.as_deref()),
            (QueueKind::Pulsar, Some("pulsar://broker:6650"))
        );
        assert_eq!(q.tenant, "acme");
        Ok(())
    });
}

#[test]
fn bad_environment_values_name_the_variable() {
    Jail::expect_with(|jail| {
        jail.create_file("config.yaml", "api:\n  port: 8000\n")?;
        jail.set_env("CREWLET_API__PORT", "eighty");
        let err = load(Some("config.yaml"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("CREWLET_API__PORT"), "{err}");
        assert!(err.contains("environment"), "{err}");
        Ok(())
    });
    Jail::expect_with(|jail| {
        jail.set_env("CREWLET_API__PROT", "1");
        let err = load(None).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("CREWLET_API__PROT"), "{err}");
        assert!(err.contains("prot"), "{err}");
        Ok(())
    });
}

#[test]
fn file_problems_keep_their_lines_when_loading() {
    Jail::expect_with(|jail| {
        jail.create_file("config.yaml", "debug: false\napi:\n  prot: 1\n")?;
        let err = load(Some("config.yaml")).err();
        let problems = err.as_ref().map(ConfigError::problems).unwrap_or_default();
        assert_eq!(problems.len(), 1);
        assert_eq!(
            (problems[0].line, problems[0].path.as_str()),
            (Some(3), "api.prot")
        );
        assert!(problems[0].message.contains("did you mean `port`?"));
        Ok(())
    });
    let missing = load(Some("/nonexistent/crewlet/config.yaml")).err();
    assert!(
        matches!(missing, Some(ConfigError::Read { .. })),
        "{missing:?}"
    );
}

#[test]
fn references_expand_when_loading_but_not_when_validating() {
    let text = "api:\n  auth:\n    tokens:\n      - {id: ops, token: '${OPS_TOKEN}'}\n";
    let checked = check_bootstrap("config.yaml", text).unwrap_or_default();
    assert_eq!(checked.api.auth.tokens[0].token, "${OPS_TOKEN}");
    Jail::expect_with(|jail| {
        jail.create_file("config.yaml", text)?;
        jail.set_env("OPS_TOKEN", "s3cret");
        let b = load(Some("config.yaml")).map_err(jailed)?;
        assert_eq!(b.api.auth.tokens[0].token, "s3cret");
        Ok(())
    });
    Jail::expect_with(|jail| {
        jail.create_file("config.yaml", text)?;
        let err = load(Some("config.yaml"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            err,
            "environment variable `OPS_TOKEN` is not set (referenced at api.auth.tokens[0].token)"
        );
        Ok(())
    });
}

#[test]
fn validation_reads_no_environment() {
    Jail::expect_with(|jail| {
        jail.set_env("CREWLET_API__PORT", "not a port");
        let b =
            check_bootstrap("config.yaml", "api:\n  port: 8000\n").map_err(|p| format!("{p:?}"))?;
        assert_eq!(b.api.port, 8000);
        Ok(())
    });
}

#[test]
fn anonymous_reads_on_a_public_bind_need_the_value_that_names_the_risk() {
    use crewlet_config::{AnonymousAccess, AnonymousRead};
    let problem = |text: &str| {
        check_bootstrap("config.yaml", text)
            .err()
            .unwrap_or_default()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    };
    // `true` on 0.0.0.0: refused, at the line of the value.
    let got = problem("api:\n  host: 0.0.0.0\n  auth:\n    allow_anonymous_read: true\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("config.yaml:4:") && got[0].contains("anyone_on_the_network"),
        "{got:?}"
    );
    // Content to anonymous readers on a public bind: refused, with its line.
    let got = problem(
        "api:\n  host: 10.0.0.5\n  port: 8000\n  auth:\n    allow_anonymous_read: content\n",
    );
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("config.yaml:5:") && got[0].contains("read:content"),
        "{got:?}"
    );
    // A value that is none of the four names them all.
    let got = problem("api:\n  auth:\n    allow_anonymous_read: yes\n");
    assert!(
        got.len() == 1 && got[0].contains("`true`, `false`, `anyone_on_the_network`, `content`"),
        "{got:?}"
    );
    // The explicit opt-in, `false`, loopback `true` and loopback `content` are fine.
    for (text, want) in [
        (
            "api:\n  host: 0.0.0.0\n  auth:\n    allow_anonymous_read: anyone_on_the_network\n",
            AnonymousAccess::Metadata,
        ),
        (
            "api:\n  host: 0.0.0.0\n  auth:\n    allow_anonymous_read: false\n",
            AnonymousAccess::None,
        ),
        ("api:\n  host: 0.0.0.0\n", AnonymousAccess::None),
        ("api:\n  host: 127.0.0.1\n", AnonymousAccess::Metadata),
        (
            "api:\n  host: ::1\n  auth:\n    allow_anonymous_read: true\n",
            AnonymousAccess::Metadata,
        ),
        (
            "api:\n  host: localhost\n  auth:\n    allow_anonymous_read: content\n",
            AnonymousAccess::Content,
        ),
    ] {
        let b = check_bootstrap("config.yaml", text).unwrap_or_else(|p| panic!("{text}: {p:?}"));
        assert_eq!(b.api.auth.anonymous_access(&b.api.host), Ok(want), "{text}");
    }
    // A listener chosen at start (`--host`) is checked the same way.
    let auth = crewlet_config::ApiAuth {
        allow_anonymous_read: Some(AnonymousRead::Loopback),
        ..Default::default()
    };
    assert!(auth.anonymous_access("192.168.1.4").is_err());
    assert_eq!(
        auth.anonymous_access("[::1]"),
        Ok(AnonymousAccess::Metadata)
    );
}

#[test]
fn scopes_nest_and_an_unscoped_token_keeps_every_power() {
    use crewlet_config::{ApiToken, Scope};
    let admin = ApiToken::new("a", "t").with_scopes([Scope::Admin]);
    let operate = ApiToken::new("o", "t").with_scopes([Scope::Operate]);
    let content = ApiToken::new("c", "t").with_scopes([Scope::ReadContent]);
    let read = ApiToken::new("r", "t").with_scopes([Scope::Read]);
    let unscoped = ApiToken::new("u", "t");
    for s in Scope::ALL {
        assert!(admin.grants(s), "admin grants {s}");
        assert!(unscoped.grants(s), "unset scopes grant {s}");
    }
    assert!(operate.grants(Scope::ReadContent) && operate.grants(Scope::Read));
    assert!(!operate.grants(Scope::Admin));
    assert!(content.grants(Scope::Read) && !content.grants(Scope::Operate));
    assert!(read.grants(Scope::Read) && !read.grants(Scope::ReadContent));
    let parsed = check_bootstrap(
        "config.yaml",
        "api:\n  auth:\n    tokens:\n      - {id: dash, token: x, scopes: ['read:content']}\n",
    )
    .unwrap_or_else(|p| panic!("{p:?}"));
    assert_eq!(
        parsed.api.auth.tokens[0].scopes.as_deref(),
        Some(&[Scope::ReadContent][..])
    );
}
