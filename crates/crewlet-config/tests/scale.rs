//! Files far larger than real ones still validate, and every problem still
//! has a line: a 10 000-seat management line, thousands of unknown keys,
//! time zones the scheduler would refuse, numbers beyond their field's type,
//! text that is not UTF-8. (`cargo xtask bench validate-scale` times them;
//! tests never assert on time.)

use crewlet_config::{
    Checked, Company, Problem, Tier, check_bytes, check_company, check_company_report,
};

const HEADER: &str = "name: Scale Co
providers:
  llm:
    main: {type: openai, model: m, api_keys: [k]}
";

/// `seats` org-wide roles, seat i managing seat i+1; `cycle` closes the
/// line (the last seat manages the first).
fn chain(seats: usize, cycle: bool) -> String {
    let mut text = format!("{HEADER}roles:\n");
    for i in 0..seats {
        text.push_str(&format!("  - name: Seat {i}\n    handle: s{i}\n"));
        if i + 1 < seats {
            text.push_str(&format!("    manages: [s{}]\n", i + 1));
        } else if cycle {
            text.push_str("    manages: [s0]\n");
        }
    }
    text
}

/// 1-based line of the first line of `text` equal to `wanted` (trimmed).
fn line_of(text: &str, wanted: &str) -> Option<u32> {
    text.lines()
        .position(|l| l.trim() == wanted)
        .and_then(|i| u32::try_from(i + 1).ok())
}

fn problems(text: &str) -> Vec<Problem> {
    check_company("company.yaml", text)
        .err()
        .unwrap_or_default()
}

#[test]
fn a_ten_thousand_seat_management_line_validates() {
    let text = chain(10_000, false);
    let (_, org) = match check_company("company.yaml", &text) {
        Ok(ok) => ok,
        Err(problems) => panic!("{:?}", problems.first()),
    };
    assert_eq!(org.seats().len(), 10_000);
    let last = org.seat("s9999").map(|s| &s.manager_chain);
    assert_eq!(last.map(|c| c.len()), Some(9_999));
    assert_eq!(last.and_then(|c| c.first()), Some("s9998"));
    assert_eq!(last.and_then(|c| c.last()), Some("s0"));
    assert!(org.seat("s0").is_some_and(|s| s.manager_chain.is_empty()));
    assert_eq!(
        org.seat("s3").map(|s| s.manager_chain.to_vec()),
        Some(vec!["s2".into(), "s1".into(), "s0".into()])
    );
    assert_eq!(
        org.seat("s9998").map(|s| s.reports.clone()),
        Some(vec!["s9999".to_owned()])
    );
}

#[test]
fn a_cycle_through_a_long_line_is_found_and_located() {
    let text = chain(10_000, true);
    // A cycle is a warning (the original engine accepts such a file).
    let report = check_company_report("company.yaml", &text);
    assert!(report.result.is_ok(), "{:?}", report.result.err());
    let problems = report.warnings;
    assert_eq!(problems.len(), 1, "{problems:?}");
    let p = &problems[0];
    assert_eq!(p.path, "roles[9999].manages[0]");
    assert_eq!(p.line, line_of(&text, "manages: [s0]"));
    assert!(p.line.is_some());
    assert!(
        p.message.starts_with(
            "management cycle: s0 -> s9999 -> s9998 -> s9997 -> s9996 -> s9995 -> s9994 -> s9993 -> s9992 -> s9991 -> ... 9981 more ... -> "
        ),
        "{}",
        p.message
    );
    assert!(
        p.message
            .contains("-> s2 -> s1 -> s0 (each seat reports to the next)"),
        "{}",
        p.message
    );
}

#[test]
fn thousands_of_unknown_keys_are_each_reported_at_their_line() {
    let mut text = format!("{HEADER}roles:\n  - name: CEO\n");
    let first = text.lines().count() + 1;
    for i in 0..20_000 {
        text.push_str(&format!("extra_key_{i}: {i}\n"));
    }
    let problems = problems(&text);
    assert_eq!(problems.len(), 20_000);
    for (i, p) in problems.iter().enumerate() {
        assert_eq!(p.line, u32::try_from(first + i).ok(), "{p}");
        assert_eq!(p.path, format!("extra_key_{i}"));
    }
    assert!(
        problems[0]
            .message
            .starts_with("unknown key `extra_key_0`; expected one of: name,"),
        "{}",
        problems[0].message
    );
}

#[test]
fn duplicate_keys_in_a_big_map_name_both_lines() {
    let mut text = format!("{HEADER}roles:\n  - name: CEO\n    mcp_env:\n      srv:\n");
    let first = text.lines().count() + 1;
    for i in 0..5_000 {
        text.push_str(&format!("        K{i}: v\n"));
    }
    text.push_str("        K10: again\n");
    let problems = problems(&text);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, "roles[0].mcp_env.srv.K10");
    assert_eq!(problems[0].line, line_of(&text, "K10: again"));
    assert!(
        problems[0]
            .message
            .contains(&format!("first defined at line {}", first + 10)),
        "{}",
        problems[0].message
    );
}

#[test]
fn time_zones_the_scheduler_refuses_are_refused_at_their_line() {
    for (zone, hint) in [
        ("Europe/Pariss", "; did you mean `Europe/Paris`?"),
        ("'+99:99'", ""),
        ("Mars/Olympus", ""),
    ] {
        let text = format!(
            "{HEADER}roles:\n  - name: CEO\n    schedules:\n      - name: digest\n        cron: 0 9 * * 1-5\n        task: write the digest\n        timezone: {zone}\n"
        );
        let problems = problems(&text);
        assert_eq!(problems.len(), 1, "{zone}: {problems:?}");
        let p = &problems[0];
        assert_eq!(p.path, "roles[0].schedules[0].timezone");
        assert_eq!(p.line, line_of(&text, &format!("timezone: {zone}")));
        assert!(
            p.message.starts_with(&format!(
                "time zone `{}` is not an IANA name",
                zone.trim_matches('\'')
            )),
            "{}",
            p.message
        );
        assert!(
            p.message.ends_with(&format!("`+02:00`{hint}")),
            "{}",
            p.message
        );
    }
    let ok = format!(
        "{HEADER}roles:\n  - name: CEO\n    schedules:\n      - {{name: a, cron: 0 9 * * *, task: t, timezone: America/Argentina/Buenos_Aires}}\n      - {{name: b, cron: 0 9 * * *, task: t, timezone: '-05:30'}}\n"
    );
    assert_eq!(problems(&ok), []);
}

#[test]
fn numbers_beyond_their_fields_type_are_reported_at_their_line() {
    let text = "name: Big Co
token_budget: 18446744073709551616
scheduling: {tick_seconds: 4294967296}
providers:
  llm:
    main: {type: openai, model: m, api_keys: [k], max_tokens: 99999999999999999999999999999999999999999}
roles:
  - name: CEO
    token_budget: 18446744073709551615
    schedules:
      - {name: a, cron: 0 9 * * *, task: t, timeout_seconds: -1}
";
    let got: Vec<(Option<u32>, String, String)> = problems(text)
        .into_iter()
        .map(|p| (p.line, p.path, p.message))
        .collect();
    let want = [
        (
            2,
            "token_budget",
            "18446744073709551616 is above the maximum 18446744073709551615",
        ),
        (
            3,
            "scheduling.tick_seconds",
            "4294967296 is above the maximum 4294967295",
        ),
        (
            6,
            "providers.llm.main.max_tokens",
            "a number beyond 2^127 is above the maximum 4294967295",
        ),
        (
            11,
            "roles[0].schedules[0].timeout_seconds",
            "-1 is below the minimum 1",
        ),
    ];
    assert_eq!(got.len(), want.len(), "{got:?}");
    for ((line, path, message), (want_line, want_path, want_message)) in got.iter().zip(want) {
        assert_eq!(
            (*line, path.as_str(), message.as_str()),
            (Some(want_line), want_path, want_message)
        );
    }
    // u64::MAX itself fits a u64.
    let fits = format!("{HEADER}token_budget: 18446744073709551615\n");
    match check_company("company.yaml", &fits) {
        Ok((company, _)) => assert_eq!(company.token_budget, u64::MAX),
        Err(problems) => panic!("{problems:?}"),
    }
}

#[test]
fn text_that_is_not_utf8_is_located_by_byte_offset_and_line() {
    let mut bytes = format!("{HEADER}mission: caf").into_bytes();
    let offset = bytes.len();
    bytes.extend_from_slice(b"\xE9 au lait\n");
    let checked = check_bytes("company.yaml", &bytes, Some(Tier::Company));
    assert!(matches!(checked, Checked::Company(Err(_), _)));
    let problems = checked.problems();
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].line, Some(5));
    assert_eq!(problems[0].column, Some(13));
    assert!(
        problems[0].message.contains(&format!(
            "byte 0xE9 at byte offset {offset} (line 5, column 13)"
        )),
        "{}",
        problems[0].message
    );
    // Undetected tier: the same problem, not a guess about the tier.
    let undetected = check_bytes("company.yaml", &bytes, None);
    assert_eq!(undetected.problems(), problems);

    let path = std::env::temp_dir().join(format!("crewlet-not-utf8-{}.yaml", std::process::id()));
    let written = std::fs::write(&path, &bytes);
    assert!(written.is_ok(), "{written:?}");
    let loaded = Company::load(&path);
    let _ = std::fs::remove_file(&path);
    let err = loaded.err();
    let located = err
        .as_ref()
        .map(|e| e.problems().to_vec())
        .unwrap_or_default();
    assert_eq!(located.len(), 1, "{err:?}");
    assert_eq!(located[0].line, Some(5));
}
