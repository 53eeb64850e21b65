use super::*;

fn tree(text: &str) -> Node {
    let parsed = parse(text);
    assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    parsed.root.unwrap_or(Node {
        kind: NodeKind::Scalar(Scalar {
            text: String::new(),
            plain: true,
        }),
        loc: Loc { line: 0, column: 0 },
    })
}

#[test]
fn paths_display_and_parse_back() {
    let p = YamlPath::root()
        .key("units")
        .index(0)
        .key("roles")
        .index(2)
        .key("handle");
    assert_eq!(p.to_string(), "units[0].roles[2].handle");
    assert_eq!(YamlPath::parse("units[0].roles[2].handle"), Some(p));
    assert_eq!(
        YamlPath::root().key("llm").key("gpt 4").to_string(),
        "llm[\"gpt 4\"]"
    );
    assert_eq!(YamlPath::parse(""), Some(YamlPath::root()));
}

#[test]
fn nodes_know_their_lines_and_columns() {
    let root = tree("name: Acme\nunits:\n  - name: Eng\n    roles:\n      - name: CTO\n");
    let p = YamlPath::parse("units[0].roles[0].name").unwrap_or_default();
    assert_eq!(
        root.locate(&p),
        Loc {
            line: 5,
            column: 15
        }
    );
    // A path that goes past the document stops at the deepest node.
    let missing = YamlPath::parse("units[0].roles[0].handle").unwrap_or_default();
    assert_eq!(root.locate(&missing).line, 5);
}

#[test]
fn scalars_remember_whether_they_were_quoted() {
    let root = tree("a: 12\nb: '12'\nc: !!str 12\nd:\n");
    let plain = |k: &str| match root.get(k).map(|n| &n.kind) {
        Some(NodeKind::Scalar(s)) => s.plain,
        _ => false,
    };
    assert!(plain("a"));
    assert!(!plain("b"));
    assert!(!plain("c"));
    assert!(plain("d"));
}

#[test]
fn duplicate_keys_are_reported_with_both_lines() {
    let parsed = parse("name: a\nmission: x\nname: b\n");
    assert_eq!(parsed.problems.len(), 1);
    let p = &parsed.problems[0];
    assert_eq!(p.loc.line, 3);
    assert!(
        p.message.contains("first defined at line 1"),
        "{}",
        p.message
    );
}

#[test]
fn anchors_aliases_and_merge_keys_resolve() {
    let root = tree(
        "base: &b\n  type: openai\n  model: m\nllm:\n  x:\n    <<: *b\n    model: n\n  y: *b\n",
    );
    let x = root.at(&YamlPath::parse("llm.x").unwrap_or_default());
    let keys: Vec<&str> = match x.map(|n| &n.kind) {
        Some(NodeKind::Map(e)) => e.iter().map(|e| e.key.as_str()).collect(),
        _ => vec![],
    };
    assert_eq!(keys, ["model", "type"]);
    assert!(
        root.at(&YamlPath::parse("llm.y.type").unwrap_or_default())
            .is_some()
    );
}

#[test]
fn syntax_errors_are_located() {
    let parsed = parse("name: a\nunits: [\n");
    assert!(parsed.root.is_none());
    assert_eq!(parsed.problems.len(), 1);
    assert!(parsed.problems[0].message.starts_with("invalid YAML"));
    assert!(parsed.problems[0].loc.line >= 2);
}

#[test]
fn a_second_document_is_refused() {
    let parsed = parse("name: a\n---\nname: b\n");
    assert_eq!(parsed.problems.len(), 1);
    assert_eq!(parsed.problems[0].loc.line, 2);
}

#[test]
fn alias_bombs_are_capped() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..9 {
        let prev = i - 1;
        text.push_str(&format!(
            "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
        ));
    }
    let parsed = parse(&text);
    assert!(parsed.root.is_none());
    assert!(parsed.problems[0].message.contains("more than"));
}
