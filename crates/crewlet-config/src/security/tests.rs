use super::*;
use crate::yaml::YamlPath;

fn company(yaml: &str) -> Company {
    Company::from_yaml("t", yaml).unwrap_or_else(|e| panic!("{e}"))
}

fn messages(s: &Security, yaml: &str) -> Vec<String> {
    s.company_problems("company.yaml", Some(yaml), &company(yaml))
        .iter()
        .map(ToString::to_string)
        .collect()
}

const SHELL: &str =
    "name: T\nmcp_servers:\n  - name: x\n    command: /bin/sh\n    args: [-c, id]\n";

#[test]
fn commands_must_be_listed_exactly() {
    let s = Security {
        mcp_commands: vec!["npx".into(), "/usr/local/bin/srv".into()],
        ..Security::default()
    };
    assert!(s.allows_command("npx"));
    assert!(s.allows_command("/usr/local/bin/srv"));
    for refused in [
        "/tmp/x/npx",
        "./npx",
        "srv",
        "/usr/local/bin/../bin/srv",
        "sh",
    ] {
        assert!(!s.allows_command(refused), "{refused}");
    }
    let found = messages(&s, SHELL);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("company.yaml:4:14: mcp_servers[0].command:")
            && found[0].contains("`/bin/sh`")
            && found[0].contains("security.mcp_commands"),
        "{found:?}"
    );
    let any = Security {
        allow_any_mcp_command: true,
        ..Security::default()
    };
    assert!(messages(&any, SHELL).is_empty());
}

#[test]
fn loader_variables_are_refused_for_stdio_servers() {
    let s = Security {
        mcp_commands: vec!["srv".into()],
        ..Security::default()
    };
    let yaml = "name: T\nmcp_servers:\n  - name: x\n    shared: false\n    command: srv\n    env: {LD_PRELOAD: /tmp/x.so, OK: '1'}\nroles:\n  - name: A\n    handle: a\n    mcp_env: {x: {NODE_OPTIONS: --require /tmp/x.js}}\nunits:\n  - name: U\n    mcp_env: {x: {Path: /tmp}}\n";
    let found = messages(&s, yaml);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(
        found[0].contains("mcp_servers[0].env.LD_PRELOAD"),
        "{found:?}"
    );
    assert!(
        found[1].contains("roles[0].mcp_env.x.NODE_OPTIONS"),
        "{found:?}"
    );
    assert!(found[2].contains("units[0].mcp_env.x.Path"), "{found:?}");
}

#[test]
fn variables_outside_the_allowlist_are_named_with_their_path() {
    let s = Security::default();
    let yaml = "name: T\nproviders:\n  llm:\n    main:\n      type: openai\n      model: m\n      api_keys: [\"${OPENAI_API_KEY}\", \"${CREWLET_CO_KEY2}\", \"${PULSAR_TOKEN}\"]\nmcp_servers:\n  - name: h\n    transport: http\n    url: https://mcp.example.com/${DATABASE_URL}\n";
    let found = messages(&s, yaml);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].contains("providers.llm.main.api_keys[2]") && found[0].contains("`PULSAR_TOKEN`"),
        "{found:?}"
    );
    assert!(
        found[1].contains("mcp_servers[0].url") && found[1].contains("`DATABASE_URL`"),
        "{found:?}"
    );
    let env = CompanyEnv::default();
    assert!(env.allows("OPENAI_API_KEY") && env.allows("CREWLET_CO_X"));
    assert!(!env.allows("CREWLET_PROVIDERS__DATABASE__DSN") && !env.allows("HOME"));
}

#[test]
fn the_company_lookup_hides_everything_else() {
    let s = Security::default();
    let lookup = s.company_lookup(Arc::new(|name: &str| Some(format!("value-of-{name}"))));
    assert_eq!(
        lookup("OPENAI_API_KEY").as_deref(),
        Some("value-of-OPENAI_API_KEY")
    );
    assert_eq!(
        lookup("CREWLET_CO_GH").as_deref(),
        Some("value-of-CREWLET_CO_GH")
    );
    assert_eq!(lookup("ACME_OPS_API_TOKEN"), None);
    assert_eq!(lookup("PATH"), None);
}

#[test]
fn hosts_match_exactly_or_by_subdomain() {
    let s = Security {
        outbound_hosts: vec![
            "api.openai.com".into(),
            "*.anthropic.com".into(),
            "127.0.0.1".into(),
        ],
        ..Security::default()
    };
    for ok in [
        "api.openai.com",
        "API.OpenAI.com.",
        "api.anthropic.com",
        "a.b.anthropic.com",
        "127.0.0.1",
    ] {
        assert!(s.allows_host(ok), "{ok}");
    }
    for refused in [
        "anthropic.com",
        "evilanthropic.com",
        "api.openai.com.evil.com",
        "evil.com",
        "127.0.0.2",
    ] {
        assert!(!s.allows_host(refused), "{refused}");
    }
    assert!(Security::default().allows_host("anything.example"));
}

#[test]
fn provider_and_mcp_hosts_are_checked_with_the_real_url_parser() {
    let s = Security {
        outbound_hosts: vec!["api.openai.com".into(), "mcp.example.com".into()],
        ..Security::default()
    };
    let yaml = "name: T\nproviders:\n  llm:\n    a:\n      type: openai\n      model: m\n      api_keys: [k]\n    b:\n      type: openai\n      model: m\n      api_keys: [k]\n      base_url: https://api.openai.com@evil.example/v1\n    c:\n      type: anthropic\n      model: m\n      api_keys: [k]\n    d:\n      type: openai-compatible\n      model: m\n      base_url: \"https://evil.example\\\\@api.openai.com/v1\"\nmcp_servers:\n  - name: h\n    transport: http\n    url: https://mcp.example.com/mcp\n";
    let found = messages(&s, yaml);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(
        found[0].contains("providers.llm.b.base_url") && found[0].contains("`evil.example`"),
        "{found:?}"
    );
    assert!(
        found[1].contains("providers.llm.c.type") && found[1].contains("`api.anthropic.com`"),
        "{found:?}"
    );
    assert!(
        found[2].contains("providers.llm.d.base_url") && found[2].contains("`evil.example`"),
        "{found:?}"
    );
}

#[test]
fn the_examples_pass_their_own_security_block() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    for (config, company_file) in [
        ("acme/config.yaml", "acme/company.yaml"),
        ("quickstart/config.yaml", "quickstart/company.yaml"),
    ] {
        let read = |rel: &str| std::fs::read_to_string(root.join(rel)).unwrap_or_default();
        let bootstrap = crate::check_bootstrap(config, &read(config))
            .unwrap_or_else(|p| panic!("{config}: {p:?}"));
        let text = read(company_file);
        let company = company(&text);
        let problems = bootstrap
            .security
            .company_problems(company_file, Some(&text), &company);
        assert!(problems.is_empty(), "{company_file}: {problems:#?}");
    }
}

#[test]
fn the_block_itself_is_checked() {
    let s = Security {
        mcp_commands: vec![" npx".into()],
        company_env: CompanyEnv {
            names: vec![],
            prefixes: vec![String::new()],
        },
        outbound_hosts: vec![
            "https://x.com".into(),
            "x.com:443".into(),
            "*.ok.com".into(),
            "a.b".into(),
        ],
        ..Security::default()
    };
    let found = s.findings_of_block(&YamlPath::root().key("security"));
    let paths: Vec<String> = found.iter().map(|f| f.path.to_string()).collect();
    assert_eq!(
        paths,
        [
            "security.mcp_commands[0]",
            "security.company_env.prefixes[0]",
            "security.outbound_hosts[0]",
            "security.outbound_hosts[1]"
        ]
    );
}
