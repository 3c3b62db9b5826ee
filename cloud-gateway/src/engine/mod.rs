//! External LLM engines behind the gateway: SGLang, vLLM and llama.cpp's `llama-server`.
//!
//! Engines batch continuously on their own, so the gateway does not cut batches for them: each
//! escalation becomes one HTTP request, many in flight at once, cancelled when the device stops
//! waiting. Engines with a prefix cache then prefill only the delta the device sent since its
//! last escalation, provided the session keeps going to the same worker ([`pool`]).
//!
//! How each engine is spoken to (the dialects, the HTTP client, the start-up checks) is the
//! `engine_client` crate, shared with the router lab; it is re-exported here under the names the
//! gateway has always used. What is the gateway's own: the pool of workers and its admission
//! ([`pool`]), finding workers through DNS ([`discovery`]), connecting a pool and measuring a
//! first service time ([`connect`]), and reading an engine's answer as a verdict
//! ([`Verdict`]): the one acceptance rule ([`crate::dispatch::draft`]) the embedded backend
//! applies too.

pub mod connect;
pub mod discovery;
pub mod pool;

pub use engine_client::{client, llamacpp, sglang, verify, vllm};
pub use engine_client::{Dialect, DraftCheckRequest, EngineError, EngineKind, EngineModel, EngineReply, EngineSpec, EngineToken, HttpCall, NextTokenRequest};

use crate::dispatch::draft::accept_prefix;
use crate::dispatch::LlmToken;

/// An engine's answer read as every LLM path gives it.
pub trait Verdict {
    /// The one acceptance rule ([`crate::dispatch::draft::accept_prefix`]) over the reply's
    /// tokens read as the LLM's choices from the hard position on, with `draft` the draft the
    /// engine checked (empty for a plain next-token request: its first token, nothing
    /// accepted). Dialects always ask for log-probabilities; one the engine omits reads as 0
    /// (the protocol refuses NaN).
    fn verdict(&self, draft: &[u32]) -> Result<LlmToken, EngineError>;
}

impl Verdict for EngineReply {
    fn verdict(&self, draft: &[u32]) -> Result<LlmToken, EngineError> {
        let choices: Vec<(u32, f32)> = self.tokens.iter().map(|t| (t.id, t.logprob.filter(|l| l.is_finite()).unwrap_or(0.0))).collect();
        accept_prefix(&choices, draft).ok_or_else(|| EngineError::BadResponse("no generated token".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_reply_is_its_first_token_with_nothing_accepted_and_a_missing_logprob_reads_as_zero() {
        let reply = EngineReply { tokens: vec![EngineToken { id: 7, logprob: None }, EngineToken { id: 8, logprob: Some(-0.5) }], ..EngineReply::default() };
        assert_eq!(reply.verdict(&[]).unwrap(), LlmToken { token_id: 7, logprob: 0.0, accepted: 0 });
        assert_eq!(reply.verdict(&[7]).unwrap(), LlmToken { token_id: 8, logprob: -0.5, accepted: 1 }, "a checked draft: the rule over the choices");
        assert!(matches!(EngineReply::default().verdict(&[]), Err(EngineError::BadResponse(_))));
    }
}
