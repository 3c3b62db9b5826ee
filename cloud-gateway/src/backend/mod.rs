//! LLM backends behind one small trait, so the batcher does not care where tokens come from.
//!
//! A backend is driven from one blocking worker thread, one batch at a time; it returns one
//! result per request, in request order.

mod delay;
mod embedded;

use std::sync::Arc;

pub use delay::DelayBackend;
pub use embedded::{EmbeddedBackend, EmbeddedOptions};

use common::sampling::SamplingParams;

/// Identifies one session of one device across the gateway.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    /// The device, as authenticated at `Hello`.
    pub device: Arc<str>,
    /// The device's own session id.
    pub session_id: u64,
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
    ContextTooLong { len: usize, max: usize },
    /// A token id is not in the LLM's vocabulary.
    #[error("invalid token in context: {0}")]
    InvalidToken(String),
    /// The model failed.
    #[error("backend failure: {0}")]
    Failed(String),
}

/// Produces next tokens for batches of escalations.
pub trait Backend: Send + 'static {
    /// Short name for logs and metrics.
    fn name(&self) -> &str;
    /// Model id announced to devices in `Welcome`.
    fn model_id(&self) -> &str;
    /// Largest context accepted.
    fn max_context(&self) -> usize;
    /// Answer every request of the batch (same length and order as `batch`).
    fn next_tokens(&mut self, batch: &[BackendRequest]) -> Vec<Result<BackendToken, BackendError>>;
    /// Forget per-session state (the session ended or expired).
    fn end_session(&mut self, _session: &SessionKey) {}
}
