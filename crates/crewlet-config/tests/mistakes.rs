//! Every rule's error, located; and a file with many mistakes lists them all.

use crewlet_config::{Problem, check_company};

/// (line, path, message) of every problem, in file order.
fn problems(text: &str) -> Vec<(Option<u32>, String, String)> {
    match check_company("company.yaml", text) {
        Ok(_) => Vec::new(),
        Err(problems) => problems
            .into_iter()
            .map(|p| (p.line, p.path, p.message))
            .collect(),
    }
}

/// Asserts that the problems are exactly `expected` (line, path, message fragment).
fn assert_problems(text: &str, expected: &[(u32, &str, &str)]) {
    let got = problems(text);
    let show = |v: &[(Option<u32>, String, String)]| {
        v.iter()
            .map(|(l, p, m)| format!("  {}: {p}: {m}", l.unwrap_or(0)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(got.len(), expected.len(), "got:\n{}", show(&got));
    for ((line, path, message), (want_line, want_path, fragment)) in got.iter().zip(expected) {
        assert_eq!(
            (*line, path.as_str()),
            (Some(*want_line), *want_path),
            "got:\n{}",
            show(&got)
        );
        assert!(
            message.contains(fragment),
            "`{message}` lacks `{fragment}`; got:\n{}",
            show(&got)
        );
    }
}

const HEADER: &str = "name: Test Co
providers:
  llm:
    main: {type: openai, model: m, api_keys: [k]}
";

fn with_header(body: &str) -> String {
    format!("{HEADER}{body}")
}

#[test]
fn a_file_with_many_mistakes_lists_them_all_with_lines() {
    let text = "\
name: Mistakes Inc
providers:
  llm:
    main: {type: openai, model: m, api_keys: [k]}
roles:
  - name: Boss
    handle: Boss
    manages: [nobody]
units:
  - name: Eng
    lead: ghost
    roles:
      - name: Dev
        handle: dev
        llm: gtp
        favourite_color: blue
      - name: Dev Two
        handle: dev
    schedules:
      - name: standup
        cron: \"0 9 * *\"
        task: stand up
        target: everyone
  - name: Ops
    roles:
      - name: Night Watch
        kind: human
";
    assert_problems(
        text,
        &[
            (
                7,
                "roles[0].handle",
                "handle `Boss` must match [a-z0-9][a-z0-9-]*",
            ),
            (8, "roles[0].manages[0]", "`nobody` names no role"),
            (
                11,
                "units[0].lead",
                "lead `ghost` is not a role of unit `Eng` (its roles: dev, dev)",
            ),
            (
                15,
                "units[0].roles[0].llm",
                "LLM provider `gtp` is not defined in providers.llm (defined: main)",
            ),
            (
                16,
                "units[0].roles[0].favourite_color",
                "unknown key `favourite_color`",
            ),
            (
                18,
                "units[0].roles[1].handle",
                "handle `dev` is already used by the seat at units[0].roles[0]",
            ),
            (21, "units[0].schedules[0].cron", "has 4 fields; expected 5"),
            (
                23,
                "units[0].schedules[0].target",
                "expected one of `lead`, `each`, found `everyone`",
            ),
            (
                26,
                "units[1].roles[0]",
                "human seat `Night Watch` needs a `contact`",
            ),
        ],
    );
}

#[test]
fn problems_render_with_file_line_and_column() {
    let text = with_header("roles:\n  - name: A\n    colour: red\n");
    let err = check_company("company.yaml", &text)
        .err()
        .unwrap_or_default();
    let shown: Vec<String> = err.iter().map(Problem::to_string).collect();
    assert_eq!(
        shown,
        [
            "company.yaml:7:5: roles[0].colour: unknown key `colour`; expected one of: kind, name, handle, goal, backstory, responsibilities, behavioral_guidelines, manages, token_budget, llm, llm_plan, llm_execute, llm_review, llm_auxiliary, learning_enabled, mcp_env, mcp_servers, schedules, integrations, contact"
        ]
    );
}

#[test]
fn unknown_keys_are_reported_at_every_level() {
    let text = "\
name: X
mision: typo
providers:
  llm:
    main: {type: openai, model: m, api_keys: [k], temprature: 1}
turn_engine: {max_iterations: 2, max_iteration: 3}
integrations:
  github: {webhook_secrett: s}
units:
  - name: U
    colour: red
    children:
      - name: V
        roles:
          - name: W
            contact: {phone: 1}
            integrations:
              slack: {token: x}
";
    assert_problems(
        text,
        &[
            (2, "mision", "unknown key `mision`; did you mean `mission`?"),
            (
                5,
                "providers.llm.main.temprature",
                "did you mean `temperature`?",
            ),
            (
                6,
                "turn_engine.max_iteration",
                "did you mean `max_iterations`?",
            ),
            (
                8,
                "integrations.github.webhook_secrett",
                "did you mean `webhook_secret`?",
            ),
            (11, "units[0].colour", "unknown key `colour`"),
            (
                16,
                "units[0].children[0].roles[0].contact.phone",
                "unknown key `phone`",
            ),
            (
                18,
                "units[0].children[0].roles[0].integrations.slack.token",
                "unknown key `token`",
            ),
        ],
    );
}

#[test]
fn wrong_types_and_values_are_reported() {
    let body = "\
token_budget: lots
turn_engine: {max_iterations: 0}
roles:
  - name: A
    kind: robot
    responsibilities: do everything
    learning_enabled: maybe
";
    assert_problems(
        &with_header(body),
        &[
            (5, "token_budget", "expected a whole number, found `lots`"),
            (6, "turn_engine.max_iterations", "0 is below the minimum 1"),
            (
                9,
                "roles[0].kind",
                "expected one of `agent`, `human`, found `robot`",
            ),
            (
                10,
                "roles[0].responsibilities",
                "expected a list, found `do everything`",
            ),
            (
                11,
                "roles[0].learning_enabled",
                "expected true or false, found `maybe`",
            ),
        ],
    );
}

#[test]
fn missing_required_keys_are_named() {
    assert_problems(
        "mission: no name\n",
        &[(1, "", "missing required key `name`")],
    );
    assert_problems("", &[(1, "", "missing required key `name`")]);
    let body = "roles:\n  - handle: nameless\n";
    assert_problems(
        &with_header(body),
        &[(6, "roles[0]", "missing required key `name`")],
    );
}

#[test]
fn yaml_syntax_errors_and_duplicate_keys_are_located() {
    assert_problems(
        "name: a\nunits: [\n",
        &[(2, "units[0]", "invalid YAML: unclosed bracket")],
    );
    assert_problems(
        &with_header("mission: a\nmission: b\n"),
        &[(
            6,
            "mission",
            "duplicate key `mission` (first defined at line 5)",
        )],
    );
}

#[test]
fn bad_handles_are_refused_and_names_derive_handles() {
    let body =
        "roles:\n  - name: A\n    handle: -a\n  - name: B\n    handle: b_c\n  - name: 日本\n";
    assert_problems(
        &with_header(body),
        &[
            (7, "roles[0].handle", "handle `-a` must match"),
            (
                9,
                "roles[1].handle",
                "handle `b_c` must match [a-z0-9][a-z0-9-]* (lower case letters, digits, `-`); try `b-c`",
            ),
            (
                10,
                "roles[2].name",
                "cannot derive a handle from name `日本`; set `handle`",
            ),
        ],
    );
}

#[test]
fn duplicate_handles_are_refused_even_when_derived() {
    let body = "roles:\n  - name: Site Ops\n  - name: site-ops\n";
    assert_problems(
        &with_header(body),
        &[(
            7,
            "roles[1].name",
            "handle `site-ops` (derived from the name) is already used by the seat at roles[0]",
        )],
    );
}

#[test]
fn manages_must_name_something_unambiguous_and_once() {
    let body = "\
roles:
  - name: A
    manages: [Worker, ghost-unit, w2]
  - name: B
    manages: [w2]
units:
  - name: Team
    roles:
      - {name: Worker, handle: w1}
      - {name: Worker, handle: w2}
";
    assert_problems(
        &with_header(body),
        &[
            (
                7,
                "roles[0].manages[0]",
                "`Worker` is the name of 2 roles; use a handle: w1, w2",
            ),
            (
                7,
                "roles[0].manages[1]",
                "`ghost-unit` names no role (by handle or name) and no unit",
            ),
            (
                9,
                "roles[1].manages[0]",
                "`w2` is already managed by `a` (roles[0].manages[2]); a seat has one manager",
            ),
        ],
    );
}

#[test]
fn management_cycles_are_errors() {
    let body = "\
roles:
  - {name: A, handle: a, manages: [b]}
  - {name: B, handle: b, manages: [c]}
  - {name: C, handle: c, manages: [a]}
";
    assert_problems(
        &with_header(body),
        &[(
            8,
            "roles[2].manages[0]",
            "management cycle: a -> c -> b -> a (each seat reports to the next)",
        )],
    );
    // A seat managing itself is a cycle of one.
    let body = "roles:\n  - {name: A, handle: a, manages: [a]}\n";
    assert_problems(
        &with_header(body),
        &[(6, "roles[0].manages[0]", "`a` is this seat itself")],
    );
    // An implicit edge (lead of a unit) can close a cycle with an explicit one.
    let body = "\
units:
  - name: Top
    lead: boss
    roles:
      - {name: Boss, handle: boss}
    children:
      - name: Sub
        lead: sub-lead
        roles:
          - {name: Sub Lead, handle: sub-lead, manages: [boss]}
";
    assert_problems(
        &with_header(body),
        &[(
            14,
            "units[0].children[0].roles[0].manages[0]",
            "management cycle: ",
        )],
    );
}

#[test]
fn a_lead_must_be_one_of_the_units_own_roles() {
    let body = "\
roles:
  - {name: CEO, handle: ceo}
units:
  - name: Eng
    lead: ceo
    roles:
      - {name: Dev, handle: dev}
    children:
      - name: Empty
        lead: dev
";
    assert_problems(
        &with_header(body),
        &[
            (
                9,
                "units[0].lead",
                "lead `ceo` is not a role of unit `Eng` but of the org-wide roles",
            ),
            (
                14,
                "units[0].children[0].lead",
                "lead `dev` is not a role of unit `Empty` but of unit `Eng`",
            ),
        ],
    );
}

#[test]
fn human_seats_need_a_contact_and_run_nothing() {
    let body = "\
roles:
  - {name: A, kind: human}
  - name: B
    kind: human
    contact: {email: ''}
  - name: C
    kind: human
    contact: {slack_user_id: U1}
    schedules:
      - {name: s, cron: '* * * * *', task: t}
";
    assert_problems(
        &with_header(body),
        &[
            (6, "roles[0]", "human seat `A` needs a `contact`"),
            (
                9,
                "roles[1].contact",
                "human seat `B` needs a `contact` with at least one identity",
            ),
            (
                14,
                "roles[2].schedules",
                "human seat `C` never runs, so it cannot have schedules",
            ),
        ],
    );
}

#[test]
fn llm_references_must_exist_in_every_form() {
    let body = "\
roles:
  - name: A
    llm: [main, nope1]
    llm_plan: nope2
    llm_auxiliary: [nope3]
  - name: B
    llm: {default: main, review: [main, nope4], plann: main}
  - name: C
    llm: []
";
    assert_problems(
        &with_header(body),
        &[
            (7, "roles[0].llm[1]", "LLM provider `nope1` is not defined"),
            (8, "roles[0].llm_plan", "LLM provider `nope2`"),
            (9, "roles[0].llm_auxiliary[0]", "LLM provider `nope3`"),
            (11, "roles[1].llm.review[1]", "LLM provider `nope4`"),
            (
                11,
                "roles[1].llm.plann",
                "unknown key `plann`; did you mean `plan`?",
            ),
            (
                13,
                "roles[2].llm",
                "a fallback chain needs at least one provider",
            ),
        ],
    );
}

#[test]
fn providers_are_checked() {
    let text = "\
name: X
providers:
  llm:
    a: {type: openai-compatible, model: m}
    b: {type: anthropic, model: m}
    c: {type: openai, model: m, api_keys: [k], base_url: 'ftp://x'}
    d: {type: gemini, model: m}
roles:
  - name: A
";
    assert_problems(
        text,
        &[
            (
                4,
                "providers.llm.a.type",
                "provider `a` is openai-compatible and needs `base_url`",
            ),
            (
                5,
                "providers.llm.b.type",
                "provider `b` (anthropic) needs at least one entry in `api_keys`, e.g. `${ANTHROPIC_API_KEY}`",
            ),
            (
                6,
                "providers.llm.c.base_url",
                "`ftp://x` must start with http:// or https://",
            ),
            (
                7,
                "providers.llm.d.type",
                "expected one of `openai`, `anthropic`, `openai-compatible`, found `gemini`",
            ),
        ],
    );
    assert_problems(
        "name: X\nroles:\n  - name: A\n",
        &[(
            1,
            "providers.llm",
            "no LLM provider is configured but 1 agent seat needs one",
        )],
    );
}

#[test]
fn schedules_are_checked() {
    let body = "\
units:
  - name: U
    roles:
      - {name: H, kind: human, contact: {email: h@x}}
    schedules:
      - {name: a, cron: '61 * * * *', task: t, target: each}
      - {name: a, cron: '0 9 * * MON', task: t, timezone: 'Mars Base'}
  - name: V
    lead: h2
    roles:
      - {name: H2, kind: human, contact: {email: h@x}}
    schedules:
      - {name: b, cron: '0 9 * * *', task: t}
";
    assert_problems(
        &with_header(body),
        &[
            (
                10,
                "units[0].schedules[0].cron",
                "minute field `61` has `61` outside 0-59",
            ),
            (
                10,
                "units[0].schedules[0].target",
                "targets each agent seat of unit `U`, which has none",
            ),
            // `target` is not written, so it is located at the schedule itself.
            (
                11,
                "units[0].schedules[1].target",
                "targets the lead, but unit `U` has no lead",
            ),
            (
                11,
                "units[0].schedules[1].name",
                "schedule name `a` is already used",
            ),
            (
                11,
                "units[0].schedules[1].timezone",
                "time zone `Mars Base` is not an IANA name",
            ),
            (
                17,
                "units[1].schedules[0].target",
                "targets the lead of unit `V`, human seat `h2`, who never runs",
            ),
        ],
    );
}

#[test]
fn mcp_servers_are_checked() {
    let body = "\
mcp_servers:
  a: {transport: stdio}
  b: {transport: http, command: x}
  shared: {command: x}
  mine: {command: x, scope: per_role}
roles:
  - name: A
    mcp_servers: [shared, mine, nope]
";
    assert_problems(
        &with_header(body),
        &[
            (6, "mcp_servers.a", "stdio MCP server `a` needs `command`"),
            (7, "mcp_servers.b", "http MCP server `b` needs `url`"),
            (7, "mcp_servers.b.command", "`command` is for stdio servers"),
            (
                12,
                "roles[0].mcp_servers[0]",
                "MCP server `shared` is shared",
            ),
            (
                12,
                "roles[0].mcp_servers[2]",
                "MCP server `nope` is not defined in mcp_servers (defined: a, b, shared, mine)",
            ),
        ],
    );
}

#[test]
fn unit_names_are_unique() {
    let body = "units:\n  - name: A\n    children:\n      - name: A\n";
    assert_problems(
        &with_header(body),
        &[(
            8,
            "units[0].children[0].name",
            "unit name `A` is already used by the unit at units[0]",
        )],
    );
}

#[test]
fn validation_never_expands_variables() {
    // `${...}` stays as written whether or not the variable exists.
    let body = "roles:\n  - name: A\n    mcp_env: {TOKEN: '${CREWLET_SURELY_UNSET_VAR}'}\n";
    assert_eq!(problems(&with_header(body)), []);
}
