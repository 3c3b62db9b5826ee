//! What a connection and an LLM path agree on, whichever path it is: the request (a session's
//! whole token context), the token or failure that answers it, the immediate refusal (`Busy`)
//! and the facts of the model served.
//!
//! Both paths speak only these types, so a device is told the same thing for the same event
//! whether the batcher or an engine produced it ([`Outcome::to_wire`] is the one mapping).

use std::sync::Arc;

use common::exchange::gateway::EscalationOutcome;
use common::sampling::SamplingParams;
use model_runtime::model_files::ModelManifest;

use crate::sessions::SessionKey;

/// What an LLM path tells the gateway about its model: announced to devices, and the bounds
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
    /// Longest context the LLM accepts, tokens (a session may hold one fewer: the token asked
    /// for must fit too).
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

/// One escalation as an LLM path sees it: the session's whole token context, whose next token
/// is wanted.
#[derive(Debug, Clone)]
pub struct LlmRequest {
    /// Whose context this is (lets a path keep per-session state: a KV cache, a sticky worker).
    pub session: SessionKey,
    /// All tokens of the session so far; the answer is the token after the last one.
    pub context: Arc<[u32]>,
    /// How to choose the token.
    pub sampling: SamplingParams,
    /// The escalation's sequence number (mixes into the seed for sampled decoding).
    pub seq: u32,
    /// A draft to check (protocol v5), empty for none: the SLM's tokens from the position asked
    /// for on. A path that checks it answers how many it accepts ([`LlmToken::accepted`]) and
    /// its token after them; one that does not answers the token at the position asked for,
    /// with `accepted` 0 (correct, just no gain).
    pub draft: Arc<[u32]>,
}

impl LlmRequest {
    /// Tokens the LLM runs for this request at most: the context and the draft. What the cost
    /// cap and admission count.
    pub fn run_len(&self) -> usize {
        self.context.len() + self.draft.len()
    }
}

/// The LLM's answer to one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LlmToken {
    /// Chosen token.
    pub token_id: u32,
    /// Its log-probability under the LLM.
    pub logprob: f32,
    /// Draft tokens accepted before it (0 without a draft): `token_id` is the LLM's token at
    /// the position after them.
    pub accepted: u32,
}

/// Why the LLM could not answer one request (the device is told the message).
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum LlmError {
    /// The context is longer than the LLM accepts.
    #[error("context of {len} tokens exceeds {}", limit_words(*.max))]
    ContextTooLong {
        /// Tokens in the request's context.
        len: usize,
        /// Most tokens a context may hold, when the LLM says (an engine that refuses a
        /// context may not say its limit).
        max: Option<usize>,
    },
    /// A token id is not in the LLM's vocabulary.
    #[error("invalid token in context: {0}")]
    InvalidToken(String),
    /// The model or the engine failed.
    #[error("LLM failure: {0}")]
    Failed(String),
}

fn limit_words(max: Option<usize>) -> String {
    match max {
        Some(max) => format!("the LLM's limit of {max}"),
        None => "the LLM's context limit".into(),
    }
}

/// What became of one admitted escalation (the connection turns it into a frame).
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The LLM's token, and how long the LLM took for it.
    Token {
        /// The answer.
        token: LlmToken,
        /// LLM time (the batcher: its whole batch; an engine: the request), ms.
        llm_ms: u32,
    },
    /// The LLM refused or failed this request.
    Failed(LlmError),
    /// Its deadline passed before it was answered.
    Expired,
    /// The device ended the session before it could run (e.g. an unneeded prompt pre-sync):
    /// dropped so that it does not delay the device's next session.
    SessionEnded,
}

impl Outcome {
    /// What the outcome means on the wire: the one mapping from either path to what a device
    /// sees.
    pub fn to_wire(self) -> EscalationOutcome {
        match self {
            Self::Token { token, llm_ms } => EscalationOutcome::Token { token_id: token.token_id, logprob: token.logprob, llm_ms },
            Self::Expired => EscalationOutcome::Expired,
            Self::SessionEnded => EscalationOutcome::SessionEnded,
            Self::Failed(e) => {
                let message = e.to_string();
                match e {
                    LlmError::ContextTooLong { .. } => EscalationOutcome::ContextTooLong(message),
                    LlmError::InvalidToken(_) => EscalationOutcome::InvalidToken(message),
                    LlmError::Failed(_) => EscalationOutcome::BackendFailed(message),
                }
            }
        }
    }
}

/// An escalation refused at once: nothing has room for it before its deadline. The device
/// uses its SLM's token and stays local-only for `retry_after_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy {
    /// Suggested wait before escalating again, ms.
    pub retry_after_ms: u32,
    /// Why (a metric label; the device is told only the wait).
    pub reason: BusyReason,
}

/// Why an escalation was refused with `Busy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusyReason {
    /// The work ahead and its own prefill would not finish before its deadline.
    Cost,
    /// Every place is taken (the batcher's queue capacity, every engine worker's requests in
    /// flight).
    Capacity,
    /// The path is contended and the device already holds its fair share of it (other
    /// devices' work is admitted first).
    Share,
    /// Devices refused earlier wait for the room their retries need, and this escalation would
    /// take it (the engine path's line, `engine::pool::share`).
    Reserved,
    /// The gateway is draining and past the window in which it takes work.
    Draining,
    /// The LLM path has stopped.
    Stopped,
}

impl BusyReason {
    /// The label of `duet_gateway_admission_refused_total`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Cost => "cost",
            Self::Capacity => "capacity",
            Self::Share => "share",
            Self::Reserved => "reserved",
            Self::Draining => "draining",
            Self::Stopped => "stopped",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_too_long_says_the_limit_only_when_the_llm_gave_one() {
        let known = Outcome::Failed(LlmError::ContextTooLong { len: 5000, max: Some(4095) }).to_wire();
        assert_eq!(known, EscalationOutcome::ContextTooLong("context of 5000 tokens exceeds the LLM's limit of 4095".into()));
        let unknown = Outcome::Failed(LlmError::ContextTooLong { len: 5000, max: None }).to_wire();
        assert_eq!(unknown, EscalationOutcome::ContextTooLong("context of 5000 tokens exceeds the LLM's context limit".into()));
    }
}
