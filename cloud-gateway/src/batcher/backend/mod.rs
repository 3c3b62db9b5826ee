//! LLM backends behind one small trait, so the batcher does not care where tokens come from.
//!
//! A backend is driven from one blocking worker thread, one batch at a time; it returns one
//! result per request, in request order. It also says what it serves ([`ModelFacts`]): the
//! gateway announces those facts in `Welcome` and checks devices against them, so they come
//! from the one component that knows the model rather than from configuration that could
//! disagree with it.

mod delay;
mod embedded;

use std::sync::Arc;

pub use delay::DelayBackend;
pub use embedded::{EmbeddedBackend, EmbeddedOptions};

use common::sampling::SamplingParams;
use model_runtime::model_files::ModelManifest;

use crate::sessions::SessionKey;

/// What a backend tells the gateway about its model: announced to devices, and the bounds
/// every escalation is checked against before it reaches the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFacts {
    /// The LLM's id, announced in `Welcome`.
    pub llm_id: String,
    /// Fingerprint of the LLM's tokenizer; a device whose SLM tokenizes differently is refused
    /// at `Hello`, because token ids would mean different things at both ends.
    pub tokenizer_fingerprint: String,
    /// Vocabulary size: token ids at or above it are refused before they reach the model.
    pub vocab_size: usize,
    /// Longest context the backend accepts, tokens (a session may hold one fewer: the token
    /// asked for must fit too).
    pub max_context: usize,
}

impl ModelFacts {
    /// The facts of a prepared model (what `deploy/models/prepare` recorded in its manifest),
    /// served with contexts of up to `max_context` tokens.
    pub fn of_manifest(manifest: &ModelManifest, max_context: usize) -> Self {
        Self {
            llm_id: manifest.id.clone(),
            tokenizer_fingerprint: manifest.tokenizer_fingerprint.clone(),
            vocab_size: manifest.vocab_size,
            max_context,
        }
    }
}

/// One escalation as the backend sees it: the session's whole token context, whose next token
/// is wanted.
#[derive(Debug, Clone)]
pub struct BackendRequest {
    /// Whose context this is (lets a backend keep per-session state such as a KV cache).
    pub session: SessionKey,
    /// All tokens of the session so far; the answer is the token after the last one.
    pub context: Arc<[u32]>,
    /// How to choose the token.
    pub sampling: SamplingParams,
    /// The escalation's sequence number (mixes into the seed for sampled decoding).
    pub seq: u32,
}

/// The backend's answer for one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackendToken {
    /// Chosen token.
    pub token_id: u32,
    /// Its log-probability under the LLM.
    pub logprob: f32,
}

/// Why a backend could not answer one request.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum BackendError {
    /// The context is longer than the backend accepts.
    #[error("context of {len} tokens exceeds the backend's limit of {max}")]
    ContextTooLong {
        /// Tokens in the request's context.
        len: usize,
        /// Most tokens a context may hold.
        max: usize,
    },
    /// A token id is not in the LLM's vocabulary.
    #[error("invalid token in context: {0}")]
    InvalidToken(String),
    /// The model failed.
    #[error("backend failure: {0}")]
    Failed(String),
}

/// Produces next tokens for batches of escalations: the one seam between the gateway and
/// whatever runs the LLM (in-process ONNX Runtime today, an external engine later).
pub trait Backend: Send + 'static {
    /// Short name for logs and metrics.
    fn name(&self) -> &str;
    /// What this backend serves; asked once, when the gateway starts.
    fn facts(&self) -> ModelFacts;
    /// Answer every request of the batch (same length and order as `batch`).
    fn next_tokens(&mut self, batch: &[BackendRequest]) -> Vec<Result<BackendToken, BackendError>>;
    /// Forget per-session state (the session ended or expired).
    fn end_session(&mut self, _session: &SessionKey) {}
    /// Bring the session's state to the first `upto` tokens of `request.context`, answering
    /// nothing: how the batcher splits a long prefill into steps of bounded cost. The default
    /// asks for the token after that prefix and discards it (right for any backend that
    /// reuses a session's prefix); a backend that sizes its state by the context overrides it.
    fn prefill(&mut self, request: &BackendRequest, upto: usize) -> Result<(), BackendError> {
        let upto = upto.min(request.context.len());
        let prefix = BackendRequest { context: Arc::from(&request.context[..upto]), ..request.clone() };
        match self.next_tokens(std::slice::from_ref(&prefix)).pop() {
            Some(r) => r.map(|_| ()),
            None => Err(BackendError::Failed("backend returned no result".into())),
        }
    }
}
