//! A model inside the engine: the `local` LLM provider.
//!
//! Owns: reading and checking a GGUF file ([`gguf`]), the llama forward pass
//! on quantized weights with a per-conversation key/value cache ([`model`]),
//! the model's own tokenizer ([`tokenizer`]) and chat template
//! ([`template`]), and the provider that serves completions from them.
//!
//! Does not own: fetching model files (`crewlet-models`), nor what a turn
//! does with a completion (`crewlet-turn`).

mod error;
pub mod gguf;
pub mod model;
mod qlinear;
pub mod template;
pub mod tokenizer;

pub use error::LocalModelError;
pub mod engine;
pub mod grammar;
pub mod prompt;

pub use engine::{GenerateOptions, Generated, LocalModel, StopReason};
pub mod provider;
mod signature;

pub use provider::{DEFAULT_MAX_TOKENS, LocalProvider, LocalSettings};
