//! The batcher's LLMs behind one small trait, so the batcher does not care which model runs.
//!
//! A backend is driven from one blocking worker thread, one batch at a time; it returns one
//! result per request, in request order. It also says what it serves ([`ModelFacts`]): the
//! gateway announces those facts in `Welcome` and checks devices against them, so they come
//! from the one component that knows the model rather than from configuration that could
//! disagree with it. External engines are not backends: they batch on their own and sit beside
//! the batcher as the other LLM path ([`crate::dispatch`]).

pub mod answers;
mod delay;
mod embedded;
mod record;
mod replay;

use std::sync::Arc;

pub use delay::DelayBackend;
pub use embedded::{EmbeddedBackend, EmbeddedOptions};
pub use record::{RecordError, RecordingBackend};
pub use replay::{ReplayBackend, ReplayCounts, ReplayError};

pub use crate::dispatch::{LlmError, LlmRequest, LlmToken, ModelFacts};
use crate::sessions::SessionKey;

/// Produces next tokens for batches of escalations: what the batcher drives (the embedded ONNX
/// LLM, or a test's stand-in), one batch at a time on a blocking thread.
pub trait Backend: Send + 'static {
    /// Short name for logs and metrics.
    fn name(&self) -> &str;
    /// What this backend serves; asked once, when the gateway starts.
    fn facts(&self) -> ModelFacts;
    /// Answer every request of the batch (same length and order as `batch`).
    fn next_tokens(&mut self, batch: &[LlmRequest]) -> Vec<Result<LlmToken, LlmError>>;
    /// Forget per-session state (the session ended or expired).
    fn end_session(&mut self, _session: &SessionKey) {}
    /// Bring the session's state to the first `upto` tokens of `request.context`, answering
    /// nothing: how the batcher splits a long prefill into steps of bounded cost. The default
    /// asks for the token after that prefix and discards it (right for any backend that
    /// reuses a session's prefix); a backend that sizes its state by the context overrides it.
    fn prefill(&mut self, request: &LlmRequest, upto: usize) -> Result<(), LlmError> {
        let upto = upto.min(request.context.len());
        let prefix = LlmRequest { context: Arc::from(&request.context[..upto]), draft: Arc::from([]), ..request.clone() };
        match self.next_tokens(std::slice::from_ref(&prefix)).pop() {
            Some(r) => r.map(|_| ()),
            None => Err(LlmError::Failed("backend returned no result".into())),
        }
    }
}

/// A boxed backend is one (so wrappers such as [`DelayBackend`] take whichever the flags chose).
impl Backend for Box<dyn Backend> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn facts(&self) -> ModelFacts {
        (**self).facts()
    }
    fn next_tokens(&mut self, batch: &[LlmRequest]) -> Vec<Result<LlmToken, LlmError>> {
        (**self).next_tokens(batch)
    }
    fn end_session(&mut self, session: &SessionKey) {
        (**self).end_session(session)
    }
    fn prefill(&mut self, request: &LlmRequest, upto: usize) -> Result<(), LlmError> {
        (**self).prefill(request, upto)
    }
}
