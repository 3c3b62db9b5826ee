//! The ONNX causal-LM runtime shared by the device's SLM, the gateway's embedded LLM and the
//! router lab: prefill, in-place KV-cache decode steps (logits + the final hidden state the
//! router reads), batched steps across sessions, the tokenizer and the prepared model files.
//!
//! It is its own crate so that what both ends of the wire must agree on (`duet-common`) does
//! not link ONNX Runtime: the gateway with an external engine, the fuzz targets and the load
//! tester's simulated devices need none of this.

mod batch;
mod causal_lm;
pub mod chat;
pub mod detokenize;
pub mod env;
pub mod huge_pages;
mod kv;
pub mod model_files;
mod prompt;
pub mod tokenizer;

pub use causal_lm::{CausalLm, LmOptions, StepOutput};
pub use kv::KvCache;
pub use prompt::{fit_prompt, PromptPolicy};

use common::sampling::SamplingError;
use model_files::ModelFilesError;
use tokenizer::TokenizerError;

/// Everything that can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// ONNX Runtime could not be loaded or initialised.
    #[error("{0}")]
    Environment(String),
    /// Model files are missing or unreadable.
    #[error(transparent)]
    Files(#[from] ModelFilesError),
    /// The tokenizer failed.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// Sampling settings are invalid.
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    /// An ONNX Runtime call failed.
    #[error("ONNX Runtime, {context}: {message}")]
    Ort { context: &'static str, message: String },
    /// The graph lacks an input or output this runtime needs.
    #[error("model interface: {0}")]
    Interface(String),
    /// A forward pass was asked for no tokens.
    #[error("no input tokens")]
    EmptyInput,
    /// A token id is outside the vocabulary.
    #[error("token id {token} is outside the vocabulary (size {vocab_size})")]
    TokenOutOfRange { token: u32, vocab_size: usize },
    /// The context would exceed the cache's capacity.
    #[error("context of {needed} tokens exceeds the KV cache capacity of {capacity}")]
    ContextFull { needed: usize, capacity: usize },
    /// The prompt was empty.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// The prompt does not fit and truncation was not allowed.
    #[error("the prompt has {tokens} tokens but at most {limit} fit (context {context}); shorten it, raise --max-context, or pass --truncate to keep its last {limit} tokens")]
    PromptTooLong { tokens: usize, limit: usize, context: usize },
}
