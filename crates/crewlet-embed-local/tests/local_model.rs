//! The local embedder against the real all-MiniLM-L6-v2 weights (skipped
//! without them outside CI; `cargo xtask services up` fetches them).

use std::path::Path;
use std::sync::Arc;

use crewlet_embed_local::{DIMENSIONS, LocalEmbedder, LocalEmbedderOptions};
use crewlet_llm::{Embedder, LlmError};
use crewlet_test_support::services::require_embed_model;

fn load(dir: &Path, batch_size: usize) -> LocalEmbedder {
    let options = LocalEmbedderOptions {
        batch_size,
        // two threads, as on the CI machine
        threads: 2,
        ..LocalEmbedderOptions::default()
    };
    LocalEmbedder::load(dir, options).expect("the model loads")
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[tokio::test]
async fn the_reference_sentence_gives_the_published_vector() -> Result<(), LlmError> {
    let Some(dir) = require_embed_model() else {
        return Ok(());
    };
    let embedder = load(&dir, 32);
    assert_eq!(embedder.dimensions(), DIMENSIONS);
    let v = embedder
        .embed(&["This is an example sentence".to_owned()])
        .await?;
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].len(), 384);
    // sentence-transformers' published output starts
    // 0.067657, 0.063496, 0.048713, 0.079305, 0.037448
    for (got, want) in v[0].iter().zip([0.067657f32, 0.063496, 0.048713]) {
        assert!((got - want).abs() < 1e-3, "{:?}", &v[0][..5]);
    }
    let norm = v[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    Ok(())
}

#[tokio::test]
async fn a_batch_of_different_lengths_equals_each_text_alone() -> Result<(), LlmError> {
    let Some(dir) = require_embed_model() else {
        return Ok(());
    };
    // batches of 3: the short texts are padded next to the long ones
    let embedder = load(&dir, 3);
    let long = "The quarterly billing migration moved every customer invoice to the new ledger, \
        and the finance team asked engineering to double-check rounding on the euro accounts \
        before the auditors arrive next week. "
        .repeat(4);
    let texts = vec![
        "ok".to_owned(),
        long.clone(),
        "Deployed the billing service to staging.".to_owned(),
        String::new(),
        "Customer asked about the refund policy for annual plans.".to_owned(),
    ];
    let together = embedder.embed(&texts).await?;
    assert_eq!(together.len(), texts.len());
    for (text, batched) in texts.iter().zip(&together) {
        let alone = embedder.embed(std::slice::from_ref(text)).await?;
        let diff = batched
            .iter()
            .zip(&alone[0])
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            diff < 1e-4,
            "`{text:.30}`: batched and alone differ by {diff}"
        );
    }
    // related texts are closer than unrelated ones
    let deploy = &together[2];
    let again = embedder
        .embed(&["We deployed the billing service to the staging cluster.".to_owned()])
        .await?;
    assert!(cosine(deploy, &again[0]) > cosine(deploy, &together[4]));
    Ok(())
}

#[tokio::test]
async fn empty_input_gives_an_empty_result() -> Result<(), LlmError> {
    let Some(dir) = require_embed_model() else {
        return Ok(());
    };
    let embedder = load(&dir, 32);
    assert!(embedder.embed(&[]).await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_share_one_model() -> Result<(), LlmError> {
    let Some(dir) = require_embed_model() else {
        return Ok(());
    };
    let embedder: Arc<dyn Embedder> = Arc::new(load(&dir, 8));
    let text = "The nightly report failed because the warehouse was locked.".to_owned();
    let expected = embedder.embed(std::slice::from_ref(&text)).await?;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let embedder = Arc::clone(&embedder);
        let texts = vec![text.clone(); 5];
        tasks.push(tokio::spawn(async move { embedder.embed(&texts).await }));
    }
    for task in tasks {
        let vectors = task.await.expect("the task runs")?;
        for v in vectors {
            assert!(cosine(&v, &expected[0]) > 0.9999);
        }
    }
    Ok(())
}

#[test]
fn a_missing_folder_is_a_clear_error() {
    let dir = Path::new("/nonexistent/crewlet/all-minilm");
    let err = LocalEmbedder::load(dir, LocalEmbedderOptions::default())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("/nonexistent/crewlet/all-minilm"), "{err}");
    assert!(err.contains("cargo xtask services up"), "{err}");
}

#[test]
fn a_folder_without_weights_names_the_missing_file() {
    let dir = std::env::temp_dir().join(format!("crewlet-embed-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("config.json"), "{}").expect("write");
    std::fs::write(dir.join("tokenizer.json"), "{}").expect("write");
    let err = LocalEmbedder::load(&dir, LocalEmbedderOptions::default())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(err.contains("model.safetensors"), "{err}");
    assert!(err.contains(&dir.display().to_string()), "{err}");
}
