//! A trace-driven stand-in for the SLM: it replays recorded proposals (token and confidence
//! per position) without a model, so that the decode loop, the exchange and the gateway can be
//! exercised by thousands of simulated devices or by tests, at no model cost.

use common::sampling::DistributionStats;
use model_runtime::RuntimeError;

use super::slm::{Proposal, Slm};

/// One recorded position: the SLM's token and how sure it was.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TracePoint {
    /// The SLM's token at this position.
    pub token: u32,
    /// Its top probability (what the confidence router scores).
    pub top_prob: f32,
}

/// Replays a trace position by position, whatever tokens are pushed (a cloud token does not
/// change what the trace proposes next, as it would for a real model).
#[derive(Debug, Clone)]
pub struct TraceSlm {
    trace: Vec<TracePoint>,
    position: usize,
    capacity: usize,
    stop: Vec<u32>,
    /// Every token pushed, in order (what the device committed).
    pub pushed: Vec<u32>,
    /// How many times a proposal was computed (not served from the current position).
    pub proposals_computed: usize,
    computed_at: Option<usize>,
}

impl TraceSlm {
    /// Replay `trace`; `capacity` bounds the context (prompt included); `stop` ends generation.
    pub fn new(trace: Vec<TracePoint>, capacity: usize, stop: Vec<u32>) -> Self {
        Self { trace, position: 0, capacity, stop, pushed: Vec::new(), proposals_computed: 0, computed_at: None }
    }
}

impl Slm for TraceSlm {
    fn start(&mut self, prompt: &[u32]) -> Result<(), RuntimeError> {
        if prompt.is_empty() {
            return Err(RuntimeError::EmptyPrompt);
        }
        self.position = prompt.len();
        self.pushed.clear();
        self.computed_at = None;
        Ok(())
    }

    fn propose(&mut self) -> Result<Proposal<'_>, RuntimeError> {
        let i = self.pushed.len();
        let p = self.trace.get(i).copied().unwrap_or(TracePoint { token: self.stop.first().copied().unwrap_or(0), top_prob: 1.0 });
        if self.computed_at != Some(i) {
            self.proposals_computed += 1;
            self.computed_at = Some(i);
        }
        let stats = DistributionStats { argmax: p.token, top_prob: p.top_prob, entropy: 0.0, log_z: 0.0 };
        Ok(Proposal { token: p.token, stats, hidden: &[] })
    }

    fn push(&mut self, token: u32) {
        self.pushed.push(token);
        self.position += 1;
    }

    fn stop_tokens(&self) -> &[u32] {
        &self.stop
    }

    fn has_room(&self) -> bool {
        self.position < self.capacity
    }

    fn can_rewind(&self) -> bool {
        true
    }

    fn rewind(&mut self, len: usize) {
        let prompt = self.position - self.pushed.len();
        let keep = len.saturating_sub(prompt).min(self.pushed.len());
        self.position -= self.pushed.len() - keep;
        self.pushed.truncate(keep);
        self.computed_at = None;
    }
}
