//! Opening a GGUF file and checking it is a model this crate can run, before
//! any weight is read: the magic, the header, that every tensor fits in the
//! file, the architecture and the tensor types.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value};

use crate::LocalModelError;

/// The architectures whose weights [`crate::model`] knows how to run.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &["llama"];

/// A GGUF file whose header was read and checked.
pub struct GgufFile {
    pub(crate) path: PathBuf,
    pub(crate) content: Content,
    pub(crate) reader: BufReader<File>,
    /// Bytes on disk.
    pub size: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("size", &self.size)
            .field("tensors", &self.content.tensor_infos.len())
            .finish()
    }
}

impl GgufFile {
    /// Opens `path` and checks its header. Reads only the header (a few MB
    /// for the vocabulary), never the weights.
    pub fn open(path: &Path) -> Result<Self, LocalModelError> {
        let file = File::open(path).map_err(|e| LocalModelError::io(path, e))?;
        let size = file
            .metadata()
            .map_err(|e| LocalModelError::io(path, e))?
            .len();
        let mut reader = BufReader::new(file);
        let mut magic = [0u8; 4];
        std::io::Read::read_exact(&mut reader, &mut magic).map_err(|_| {
            LocalModelError::NotGguf {
                path: path.to_path_buf(),
                detail: format!("{size} bytes, too short for a GGUF header"),
            }
        })?;
        if &magic != b"GGUF" {
            return Err(LocalModelError::NotGguf {
                path: path.to_path_buf(),
                detail: format!("it starts with {magic:02x?}, a GGUF file starts with `GGUF`"),
            });
        }
        reader
            .seek(SeekFrom::Start(0))
            .map_err(|e| LocalModelError::io(path, e))?;
        let content = Content::read(&mut reader).map_err(|e| header_error(path, size, e))?;
        let gguf = Self {
            path: path.to_path_buf(),
            content,
            reader,
            size,
        };
        gguf.check_tensors_fit()?;
        gguf.check_architecture()?;
        Ok(gguf)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn metadata(&self) -> &HashMap<String, Value> {
        &self.content.metadata
    }

    /// The model's architecture (`general.architecture`).
    pub fn architecture(&self) -> &str {
        self.string("general.architecture").unwrap_or("")
    }

    /// A metadata string, if present and a string.
    pub fn string(&self, key: &str) -> Option<&str> {
        self.metadata()
            .get(key)
            .and_then(|v| v.to_string().ok())
            .map(String::as_str)
    }

    /// A metadata number (any integer type).
    pub fn uint(&self, key: &str) -> Option<u64> {
        let v = self.metadata().get(key)?;
        v.to_u64()
            .ok()
            .or_else(|| v.to_u32().ok().map(u64::from))
            .or_else(|| v.to_i32().ok().and_then(|n| u64::try_from(n).ok()))
            .or_else(|| v.to_u16().ok().map(u64::from))
            .or_else(|| v.to_u8().ok().map(u64::from))
    }

    pub fn float(&self, key: &str) -> Option<f32> {
        let v = self.metadata().get(key)?;
        v.to_f32()
            .ok()
            .or_else(|| v.to_f64().ok().map(|f| f as f32))
    }

    pub(crate) fn required_uint(&self, key: &str) -> Result<usize, LocalModelError> {
        self.uint(key)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| LocalModelError::Metadata {
                path: self.path.clone(),
                key: key.to_owned(),
            })
    }

    /// The model's own context length (`<arch>.context_length`).
    pub fn context_length(&self) -> Option<usize> {
        self.uint(&format!("{}.context_length", self.architecture()))
            .and_then(|n| usize::try_from(n).ok())
    }

    fn check_tensors_fit(&self) -> Result<(), LocalModelError> {
        let mut needed = self.content.tensor_data_offset;
        for (name, info) in &self.content.tensor_infos {
            let elems = info.shape.elem_count();
            let block = info.ggml_dtype.block_size();
            if block == 0 || !elems.is_multiple_of(block) {
                return Err(LocalModelError::Unsupported {
                    path: self.path.clone(),
                    detail: format!(
                        "tensor `{name}` has {elems} elements, not a whole number of {:?} blocks",
                        info.ggml_dtype
                    ),
                });
            }
            let bytes = (elems / block * info.ggml_dtype.type_size()) as u64;
            let end = self
                .content
                .tensor_data_offset
                .saturating_add(info.offset)
                .saturating_add(bytes);
            needed = needed.max(end);
        }
        if needed > self.size {
            return Err(LocalModelError::Truncated {
                path: self.path.clone(),
                detail: format!(
                    "its tensors need {needed} bytes, the file has {} (a cut download? pull it again)",
                    self.size
                ),
            });
        }
        if self.content.tensor_infos.is_empty() {
            return Err(LocalModelError::NotGguf {
                path: self.path.clone(),
                detail: "it holds no tensors".into(),
            });
        }
        Ok(())
    }

    fn check_architecture(&self) -> Result<(), LocalModelError> {
        let arch = self.architecture();
        if arch.is_empty() {
            return Err(LocalModelError::Metadata {
                path: self.path.clone(),
                key: "general.architecture".into(),
            });
        }
        if !SUPPORTED_ARCHITECTURES.contains(&arch) {
            return Err(LocalModelError::UnsupportedArchitecture {
                path: self.path.clone(),
                found: arch.to_owned(),
                supported: "llama (SmolLM, Llama 2/3, TinyLlama and their fine-tunes)",
            });
        }
        Ok(())
    }
}

/// Sorts a header that candle could not read into truncated, unsupported or
/// not a model.
fn header_error(path: &Path, size: u64, e: candle_core::Error) -> LocalModelError {
    let text = e.to_string();
    let lower = text.to_ascii_lowercase();
    if lower.contains("remaining") || lower.contains("unexpected end") || lower.contains("eof") {
        LocalModelError::Truncated {
            path: path.to_path_buf(),
            detail: format!("the header ends early ({size} bytes): {text}"),
        }
    } else if lower.contains("dtype") || lower.contains("type") {
        LocalModelError::Unsupported {
            path: path.to_path_buf(),
            detail: format!("a tensor type or value this build cannot read: {text}"),
        }
    } else {
        LocalModelError::NotGguf {
            path: path.to_path_buf(),
            detail: text,
        }
    }
}
