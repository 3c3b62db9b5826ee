//! A wrapper that adds a fixed service time to another backend: simulates a slow or remote
//! LLM (for fault tests, load tests and the deadline logic) without changing its answers.

use std::time::Duration;

use super::{Backend, BackendError, BackendRequest, BackendToken, ModelFacts};
use crate::sessions::SessionKey;

/// Adds `delay` before each batch of the inner backend.
pub struct DelayBackend<B> {
    inner: B,
    delay: Duration,
}

impl<B: Backend> DelayBackend<B> {
    /// Wrap `inner` so every batch takes at least `delay` longer.
    pub fn new(inner: B, delay: Duration) -> Self {
        Self { inner, delay }
    }
}

impl<B: Backend> Backend for DelayBackend<B> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn facts(&self) -> ModelFacts {
        self.inner.facts()
    }
    fn next_tokens(&mut self, batch: &[BackendRequest]) -> Vec<Result<BackendToken, BackendError>> {
        std::thread::sleep(self.delay);
        self.inner.next_tokens(batch)
    }
    fn end_session(&mut self, session: &SessionKey) {
        self.inner.end_session(session)
    }
}
