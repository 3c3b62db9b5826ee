//! The small model as the decode loop sees it: a proposal for the next position, and the
//! token that was finally chosen there.

use common::sampling::{distribution_stats, DistributionStats, Sampler, SamplingParams};
use model_runtime::{CausalLm, KvCache, RuntimeError, StepOutput};

/// What the SLM proposes for the next position: its own token and what the router scores.
#[derive(Debug, Clone, Copy)]
pub struct Proposal<'a> {
    /// The SLM's (sampled) token.
    pub token: u32,
    /// Statistics of its next-token distribution.
    pub stats: DistributionStats,
    /// Its final hidden state at this position.
    pub hidden: &'a [f32],
}

/// A small model driven one position at a time. `propose` is called only when the loop needs
/// the SLM's view (so an always-escalating run never computes it unless the cloud fails), and
/// as often as the loop likes per position; `push` moves to the next position.
pub trait Slm {
    /// Start a new sequence at `prompt`.
    fn start(&mut self, prompt: &[u32]) -> Result<(), RuntimeError>;
    /// The proposal for the next position of the current sequence.
    fn propose(&mut self) -> Result<Proposal<'_>, RuntimeError>;
    /// Append the token chosen for the next position.
    fn push(&mut self, token: u32);
    /// Tokens that end generation.
    fn stop_tokens(&self) -> &[u32];
    /// Whether one more token fits the context.
    fn has_room(&self) -> bool;
    /// Wait as long as the next step would take on the device, for a stand-in that replays
    /// recorded timings without computing (the fleet simulator); a real model computes in
    /// `start`/`propose` and waits for nothing here.
    fn pace(&mut self) -> impl std::future::Future<Output = ()> + Send {
        async {}
    }
    /// Whether [`Slm::rewind`] works: the loop speculates past an escalated token only then.
    fn can_rewind(&self) -> bool {
        false
    }
    /// Forget every token after the first `len` of the sequence (prompt included), as if they
    /// had never been pushed: the cloud answered another token at position `len`. The next
    /// call is a `push`.
    fn rewind(&mut self, _len: usize) {}
}

/// The ONNX model with its KV cache and sampler: the device's SLM.
pub struct OnnxSlm<'a> {
    lm: &'a mut CausalLm,
    cache: &'a mut KvCache,
    sampler: Sampler,
    params: SamplingParams,
    step: StepOutput,
    /// Chosen tokens not yet run through the model.
    pending: Vec<u32>,
    /// The proposal at the current position, once computed (sampling draws only once).
    current: Option<(u32, DistributionStats)>,
    stop: Vec<u32>,
}

impl<'a> OnnxSlm<'a> {
    /// The model `lm` over `cache`, choosing its tokens with `sampling`.
    pub fn new(lm: &'a mut CausalLm, cache: &'a mut KvCache, sampling: SamplingParams) -> Result<Self, RuntimeError> {
        let stop = lm.stop_tokens().to_vec();
        Ok(Self { lm, cache, sampler: Sampler::new(sampling)?, params: sampling, step: StepOutput::default(), pending: Vec::new(), current: None, stop })
    }

    /// The cache (holding the context run so far).
    pub fn cache(&self) -> &KvCache {
        self.cache
    }
}

/// Run model work on the current thread, telling a multi-threaded tokio runtime first so that
/// its other tasks (the link, timers) move to another worker meanwhile.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

impl Slm for OnnxSlm<'_> {
    fn start(&mut self, prompt: &[u32]) -> Result<(), RuntimeError> {
        if prompt.is_empty() {
            return Err(RuntimeError::EmptyPrompt);
        }
        // A new sequence restarts the sampler too, so a seeded run is reproducible per sequence.
        self.sampler = Sampler::new(self.params)?;
        self.current = None;
        self.pending.clear();
        // Reuse the cached prefix this prompt shares with the last sequence (a multi-turn chat,
        // a roll-out from a position of the previous answer): only the rest is prefilled.
        let keep = self.cache.reusable_prefix(prompt);
        self.cache.truncate(keep);
        let (lm, cache, step) = (&mut *self.lm, &mut *self.cache, &mut self.step);
        blocking(|| lm.forward_into(cache, &prompt[keep..], step))
    }

    fn propose(&mut self) -> Result<Proposal<'_>, RuntimeError> {
        if !self.pending.is_empty() {
            let (lm, cache, step, pending) = (&mut *self.lm, &mut *self.cache, &mut self.step, &self.pending);
            blocking(|| lm.forward_into(cache, pending, step))?;
            self.pending.clear();
            self.current = None;
        }
        let (token, stats) = match self.current {
            Some(c) => c,
            None => {
                let stats = distribution_stats(&self.step.logits)?;
                let token = self.sampler.sample_with_stats(&self.step.logits, &stats)?.token;
                self.current = Some((token, stats));
                (token, stats)
            }
        };
        Ok(Proposal { token, stats, hidden: &self.step.hidden })
    }

    fn push(&mut self, token: u32) {
        self.pending.push(token);
        self.current = None;
    }

    fn stop_tokens(&self) -> &[u32] {
        &self.stop
    }

    fn has_room(&self) -> bool {
        self.cache.len() + self.pending.len() < self.cache.capacity()
    }

    fn can_rewind(&self) -> bool {
        true
    }

    fn rewind(&mut self, len: usize) {
        // The KV cache keeps positions [0, len): the rest is overwritten by the next forward.
        if len <= self.cache.len() {
            self.cache.truncate(len);
            self.pending.clear();
        } else {
            self.pending.truncate(len - self.cache.len());
        }
        self.current = None;
    }
}
