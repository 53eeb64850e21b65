use super::*;
use crate::yaml;

fn run(schema: Value, text: &str) -> (Option<Value>, Vec<String>) {
    let parsed = yaml::parse(text);
    let root = parsed.root.unwrap_or(Node {
        kind: NodeKind::Map(Vec::new()),
        loc: yaml::Loc { line: 1, column: 1 },
    });
    let mut walk = Walk::new(&schema);
    let v = walk.run(&root);
    let msgs = walk
        .problems
        .iter()
        .map(|p| format!("{}@{}: {}", p.path, p.loc.line, p.message))
        .collect();
    (v, msgs)
}

fn object_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "port": {"type": "integer", "minimum": 0, "maximum": 65535},
            "ratio": {"type": ["number", "null"]},
            "on": {"type": "boolean"},
            "kind": {"oneOf": [{"const": "a", "type": "string"}, {"const": "b", "type": "string"}]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "env": {"type": "object", "additionalProperties": {"type": "string"}},
            "llm": {"anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"type": "string"}},
                {"type": "object", "additionalProperties": false,
                 "properties": {"plan": {"type": "string"}}}
            ]}
        }
    })
}

#[test]
fn plain_scalars_are_typed_by_the_schema() {
    let (v, problems) = run(
        object_schema(),
        "name: 007\nport: 0x1F\nratio: 1.5\non: true\ntags: [1, yes]\n",
    );
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        v,
        Some(serde_json::json!({
            "name": "007", "port": 31, "ratio": 1.5, "on": true, "tags": ["1", "yes"]
        }))
    );
}

#[test]
fn every_problem_is_reported_once_with_its_line() {
    let text = "nme: x\nport: 70000\nratio: lots\nkind: c\nllm: {plann: y}\nenv: {A: [1]}\n";
    let (v, problems) = run(object_schema(), text);
    assert_eq!(v, None, "name is missing, so the object is incomplete");
    assert_eq!(
        problems,
        [
            "nme@1: unknown key `nme`; did you mean `name`?",
            "port@2: 70000 is above the maximum 65535",
            "ratio@3: expected a number, found `lots`",
            "kind@4: expected one of `a`, `b`, found `c`",
            "llm.plann@5: unknown key `plann`; did you mean `plan`?",
            "env.A@6: expected a string, found a list",
            "@1: missing required key `name`",
        ]
    );
}

#[test]
fn quoted_numbers_are_strings_and_nulls_need_null() {
    let (_, problems) = run(object_schema(), "name: ''\nport: '80'\nratio:\non: 1\n");
    assert_eq!(
        problems,
        [
            "name@1: must not be empty",
            "port@2: expected a whole number, found `80`",
            "on@4: expected true or false, found `1`",
        ]
    );
}

#[test]
fn unions_pick_the_branch_for_the_node_kind() {
    let (v, problems) = run(object_schema(), "name: n\nllm: [a, b]\n");
    assert!(problems.is_empty());
    assert_eq!(
        v.and_then(|v| v.get("llm").cloned()),
        Some(serde_json::json!(["a", "b"]))
    );
    let (_, problems) = run(object_schema(), "name: n\nllm: 3\n");
    assert!(
        problems.is_empty(),
        "a plain 3 is also a string: {problems:?}"
    );
}
