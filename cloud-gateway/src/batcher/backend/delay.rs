//! A wrapper that adds service time to another backend: simulates a slow or remote LLM (for
//! fault tests, load tests, the deadline logic and the overload bounds) without changing its
//! answers. The time is a fixed cost per batch plus, optionally, a cost per token of prefill
//! (the tokens of a session's context it has not seen yet), so that a long `Full` costs what
//! it would cost a real model, and a cost per draft token checked (the draft runs in the same
//! pass as the prefill). Over a [`super::ReplayBackend`] this is the latency model of a
//! projection: per escalation `a + b·prefilled tokens + c·draft tokens`.

use std::collections::HashMap;
use std::time::Duration;

use super::{Backend, LlmError, LlmRequest, LlmToken, ModelFacts};
use crate::sessions::SessionKey;

/// Most sessions whose seen length is remembered; beyond it the memory is reset (every session
/// then costs its whole context once more), so a flood of sessions cannot grow it.
const MAX_TRACKED_SESSIONS: usize = 65_536;

/// Adds `delay` before each batch of the inner backend, `per_token` for each token of
/// prefill and `per_draft_token` for each draft token.
pub struct DelayBackend<B> {
    inner: B,
    delay: Duration,
    per_token: Duration,
    per_draft_token: Duration,
    /// Tokens of each session's context already "computed".
    seen: HashMap<SessionKey, usize>,
}

impl<B: Backend> DelayBackend<B> {
    /// Wrap `inner` so every batch takes at least `delay` longer.
    pub fn new(inner: B, delay: Duration) -> Self {
        Self { inner, delay, per_token: Duration::ZERO, per_draft_token: Duration::ZERO, seen: HashMap::new() }
    }

    /// Also charge `per_token` for every token of a session's context not seen before (a
    /// context that is not an extension of the last one costs all of its tokens).
    pub fn with_token_delay(mut self, per_token: Duration) -> Self {
        self.per_token = per_token;
        self
    }

    /// Also charge `per_draft_token` for every draft token a request asks to check.
    pub fn with_draft_token_delay(mut self, per_draft_token: Duration) -> Self {
        self.per_draft_token = per_draft_token;
        self
    }

    /// The service time of `batch`: the fixed cost, its prefill and its draft tokens
    /// (remembering the sessions' new lengths).
    fn batch_time(&mut self, batch: &[LlmRequest]) -> Duration {
        let tokens: usize = if self.per_token.is_zero() { 0 } else { batch.iter().map(|r| self.advance(&r.session, r.context.len())).sum() };
        let drafts: usize = batch.iter().map(|r| r.draft.len()).sum();
        self.delay + times(self.per_token, tokens) + times(self.per_draft_token, drafts)
    }

    /// Tokens of prefill to bring `session` to `len` tokens, remembering that it is there.
    fn advance(&mut self, session: &SessionKey, len: usize) -> usize {
        if self.seen.len() >= MAX_TRACKED_SESSIONS && !self.seen.contains_key(session) {
            self.seen.clear();
        }
        let seen = self.seen.entry(session.clone()).or_insert(0);
        let new = if *seen <= len { len - *seen } else { len };
        *seen = len;
        new
    }

}

fn times(each: Duration, n: usize) -> Duration {
    each.saturating_mul(u32::try_from(n).unwrap_or(u32::MAX))
}

fn sleep(t: Duration) {
    if !t.is_zero() {
        std::thread::sleep(t);
    }
}

impl<B: Backend> Backend for DelayBackend<B> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn facts(&self) -> ModelFacts {
        self.inner.facts()
    }
    fn next_tokens(&mut self, batch: &[LlmRequest]) -> Vec<Result<LlmToken, LlmError>> {
        sleep(self.batch_time(batch));
        self.inner.next_tokens(batch)
    }
    fn end_session(&mut self, session: &SessionKey) {
        self.seen.remove(session);
        self.inner.end_session(session)
    }
    fn prefill(&mut self, request: &LlmRequest, upto: usize) -> Result<(), LlmError> {
        let tokens = if self.per_token.is_zero() { 0 } else { self.advance(&request.session, upto.min(request.context.len())) };
        sleep(times(self.per_token, tokens));
        self.inner.prefill(request, upto)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    struct Echo;
    impl Backend for Echo {
        fn name(&self) -> &str {
            "echo"
        }
        fn facts(&self) -> ModelFacts {
            ModelFacts { llm_id: "echo".into(), tokenizer_fingerprint: String::new(), vocab_size: 10, max_context: 100 }
        }
        fn next_tokens(&mut self, batch: &[LlmRequest]) -> Vec<Result<LlmToken, LlmError>> {
            batch.iter().map(|_| Ok(LlmToken { token_id: 1, logprob: 0.0, accepted: 0 })).collect()
        }
    }

    #[test]
    fn prefill_is_charged_once_per_new_token() {
        let mut b = DelayBackend::new(Echo, Duration::ZERO).with_token_delay(Duration::from_micros(1));
        let s = SessionKey { device: Arc::from("d"), session_id: 1 };
        assert_eq!(b.advance(&s, 10), 10);
        assert_eq!(b.advance(&s, 12), 2, "an extension costs its new tokens");
        assert_eq!(b.advance(&s, 5), 5, "a shorter context is a new one");
        b.end_session(&s);
        assert_eq!(b.advance(&s, 5), 5, "an ended session starts over");
    }

    #[test]
    fn an_escalation_costs_the_fixed_time_its_prefill_and_its_draft() {
        let us = Duration::from_micros;
        let mut b = DelayBackend::new(Echo, us(20_000)).with_token_delay(us(100)).with_draft_token_delay(us(50));
        let s = SessionKey { device: Arc::from("d"), session_id: 1 };
        let req = |len: usize, draft: usize| LlmRequest {
            session: s.clone(),
            context: (0..len as u32).collect(),
            sampling: Default::default(),
            seq: 0,
            draft: (0..draft as u32).collect(),
        };
        assert_eq!(b.batch_time(&[req(10, 0)]), us(20_000 + 10 * 100), "a plain escalation: a + b·10");
        assert_eq!(b.batch_time(&[req(14, 6)]), us(20_000 + 4 * 100 + 6 * 50), "a + b·4 new + c·6 draft");
        let other = SessionKey { device: Arc::from("e"), session_id: 1 };
        let two = [req(16, 2), LlmRequest { session: other, ..req(3, 0) }];
        assert_eq!(b.batch_time(&two), us(20_000 + (2 + 3) * 100 + 2 * 50), "one fixed cost per batch");
    }
}
