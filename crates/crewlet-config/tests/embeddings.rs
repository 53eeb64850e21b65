//! `providers.embeddings`: the width in effect per type, and the rules of
//! `type: local` (a fixed 384 and a model folder), located.

use crewlet_config::{
    EmbeddingsKind, Problem, check_company, check_company_report, interpolate_all,
};

fn company(embeddings: &str) -> String {
    format!(
        "name: Test Co
providers:
  llm:
    main: {{type: openai, model: m, api_keys: [k]}}
  embeddings:
{embeddings}
roles:
  - name: CEO
    handle: ceo
"
    )
}

fn errors(text: &str) -> Vec<Problem> {
    check_company("company.yaml", text)
        .err()
        .unwrap_or_default()
}

/// The embeddings warnings other than the "no effect yet" one.
fn warnings(text: &str) -> Vec<Problem> {
    check_company_report("company.yaml", text)
        .warnings
        .into_iter()
        .filter(|w| w.path.starts_with("providers.embeddings") && w.path != "providers.embeddings")
        .collect()
}

#[test]
fn the_width_defaults_per_type() {
    for (yaml, kind, width) in [
        ("    type: openai", EmbeddingsKind::Openai, 1536),
        (
            "    type: openai-compatible\n    base_url: http://127.0.0.1:9/v1\n    dimensions: 768",
            EmbeddingsKind::OpenaiCompatible,
            768,
        ),
        (
            "    type: local\n    path: /models/minilm",
            EmbeddingsKind::Local,
            384,
        ),
        (
            "    type: local\n    path: /models/minilm\n    dimensions: 384",
            EmbeddingsKind::Local,
            384,
        ),
    ] {
        let text = company(yaml);
        let (c, _) = check_company("company.yaml", &text).unwrap_or_else(|e| {
            panic!(
                "{yaml}: {:?}",
                e.iter().map(|p| p.to_string()).collect::<Vec<_>>()
            )
        });
        let e = c.providers.embeddings.expect("embeddings");
        assert_eq!((e.kind, e.dimensions()), (kind, width), "{yaml}");
    }
}

#[test]
fn local_with_another_width_is_refused_at_its_line() {
    let text = company("    type: local\n    path: /models/minilm\n    dimensions: 1536");
    let errors = errors(&text);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path, "providers.embeddings.dimensions");
    assert_eq!(errors[0].line, Some(8));
    assert!(errors[0].message.contains("384"), "{}", errors[0].message);
}

#[test]
fn local_without_a_path_uses_the_catalogue_model() {
    // No `path`: all-MiniLM-L6-v2 from the models cache (fetched on start).
    let text = company("    type: local");
    assert!(errors(&text).is_empty(), "{:?}", errors(&text));
    let text = company("    type: local\n    path: ' '");
    let errors = errors(&text);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path, "providers.embeddings.path");
}

#[test]
fn local_ignores_http_keys_with_a_warning() {
    let text = company(
        "    type: local\n    path: /models/minilm\n    base_url: http://127.0.0.1:9\n    api_key: k",
    );
    assert!(errors(&text).is_empty());
    let paths: Vec<String> = warnings(&text).into_iter().map(|w| w.path).collect();
    assert_eq!(
        paths,
        [
            "providers.embeddings.base_url",
            "providers.embeddings.api_key"
        ]
    );
}

#[test]
fn the_path_takes_variables() {
    let text = company("    type: local\n    path: ${MODEL_DIR}/minilm");
    let (c, _) = check_company("company.yaml", &text).expect("valid");
    let env = |name: &str| (name == "MODEL_DIR").then(|| "/opt/models".to_owned());
    let c = interpolate_all(&c, env).expect("expands");
    let e = c.providers.embeddings.expect("embeddings");
    assert_eq!(e.path.as_deref(), Some("/opt/models/minilm"));
    assert_eq!(e.dimensions, None);
    assert_eq!(e.dimensions(), 384);
}
