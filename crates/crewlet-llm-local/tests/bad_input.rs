//! Model files that are not a model this crate can run: each is refused at
//! load with the error of its kind, naming the file, never a panic.

mod common;

use std::path::{Path, PathBuf};

use common::{require_local_model, temp_dir};
use crewlet_llm_local::{LocalModel, LocalModelError};

fn load_err(path: &Path) -> LocalModelError {
    match LocalModel::load(path, None, 1) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => {
            let message = e.to_string();
            eprintln!("{message}");
            assert!(
                message.contains(&path.display().to_string()),
                "the error does not name the file: {message}"
            );
            e
        }
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write the test file");
    path
}

/// A GGUF string: u64 length, then the bytes.
fn gguf_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A well-formed GGUF v3 file of architecture `arch` holding one F32
/// tensor of 4 values.
fn tiny_gguf(arch: &str) -> Vec<u8> {
    const GGUF_TYPE_STRING: u32 = 8;
    const GGML_TYPE_F32: u32 = 0;
    const ALIGNMENT: usize = 32;
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&1u64.to_le_bytes()); // tensors
    out.extend_from_slice(&1u64.to_le_bytes()); // metadata entries
    gguf_str(&mut out, "general.architecture");
    out.extend_from_slice(&GGUF_TYPE_STRING.to_le_bytes());
    gguf_str(&mut out, arch);
    gguf_str(&mut out, "weights");
    out.extend_from_slice(&1u32.to_le_bytes()); // dimensions
    out.extend_from_slice(&4u64.to_le_bytes());
    out.extend_from_slice(&GGML_TYPE_F32.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes()); // offset in the data
    out.resize(out.len().next_multiple_of(ALIGNMENT), 0);
    for v in [1.0f32, 2.0, 3.0, 4.0] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

#[test]
fn a_text_file_is_not_a_gguf_model() {
    let dir = temp_dir("text");
    let path = write(&dir, "notes.gguf", b"# My notes\nThis is not a model.\n");
    let err = load_err(&path);
    assert!(matches!(err, LocalModelError::NotGguf { .. }), "{err:?}");
    assert!(err.to_string().contains("GGUF"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_empty_file_is_not_a_gguf_model() {
    let dir = temp_dir("empty");
    let path = write(&dir, "empty.gguf", b"");
    let err = load_err(&path);
    assert!(matches!(err, LocalModelError::NotGguf { .. }), "{err:?}");
    assert!(err.to_string().contains("0 bytes"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_file_cannot_be_read() {
    let dir = temp_dir("missing");
    let err = load_err(&dir.join("absent.gguf"));
    assert!(matches!(err, LocalModelError::Io { .. }), "{err:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn another_architecture_is_refused_by_name() {
    let dir = temp_dir("gpt2");
    let path = write(&dir, "gpt2.gguf", &tiny_gguf("gpt2"));
    let err = load_err(&path);
    match &err {
        LocalModelError::UnsupportedArchitecture { found, .. } => assert_eq!(found, "gpt2"),
        other => panic!("expected an unsupported architecture, got {other:?}"),
    }
    assert!(err.to_string().contains("llama"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_llama_file_without_its_metadata_names_the_missing_key() {
    // The header passes every check; the model's shape is not there.
    let dir = temp_dir("bare-llama");
    let path = write(&dir, "bare.gguf", &tiny_gguf("llama"));
    let err = load_err(&path);
    assert!(
        matches!(
            err,
            LocalModelError::Metadata { .. } | LocalModelError::Tokenizer { .. }
        ),
        "{err:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_truncated_copy_of_the_real_model_is_refused_as_truncated() {
    let Some(model) = require_local_model() else {
        return;
    };
    let bytes = std::fs::read(&model).expect("read the model");
    let dir = temp_dir("truncated");
    for cut in [5 << 20, bytes.len() - 1, 100] {
        let path = write(&dir, &format!("cut-{cut}.gguf"), &bytes[..cut]);
        let err = load_err(&path);
        assert!(
            matches!(err, LocalModelError::Truncated { .. }),
            "cut at {cut}: {err:?}"
        );
        assert!(err.to_string().contains("truncated"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
