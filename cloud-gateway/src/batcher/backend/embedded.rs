//! The default backend: the LLM in-process on ONNX Runtime, reusing the runtime of the edge.
//!
//! Each session keeps a KV cache (LRU-bounded by count). An escalation carries the session's
//! whole context; the cache already holds all of it but the delta sent since the last
//! escalation, so the work per escalation is a short prefill of that delta (see
//! docs/ARCHITECTURE.md).
//! Caches start small and grow, so memory follows the contexts actually seen.
//!
//! A request with a draft (protocol v5) runs its delta and its draft in the same batched pass,
//! keeps the logits of every draft position, and accepts draft tokens while the token the LLM
//! chooses there (greedy, or sampled in order with the request's seeded sampler) equals the
//! draft's ([`crate::dispatch::draft`], the rule every LLM path shares). The cache then holds
//! the whole draft; the next request of the session keeps only what its context shares
//! (`reusable_prefix`), which drops the rejected tail.

use common::sampling::Sampler;
use model_runtime::model_files::{ModelFiles, DEFAULT_LLM};
use model_runtime::{CausalLm, KvCache, LmOptions, RuntimeError};

use super::{Backend, LlmError, LlmRequest, LlmToken, ModelFacts};
use crate::dispatch::draft::verify_draft;
use crate::sessions::SessionKey;

/// Settings of the embedded backend.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// Model id or directory (see `ModelFiles::locate`).
    pub model: String,
    /// ONNX Runtime intra-op threads (0 = all cores).
    pub threads: usize,
    /// Longest context served.
    pub max_context: usize,
    /// Most sessions whose KV cache is kept; the least recently used is dropped beyond it.
    pub max_cached_sessions: usize,
}

impl Default for EmbeddedOptions {
    /// The CLI's defaults: the default LLM on every core, 4096-token contexts, 16 cached
    /// sessions.
    fn default() -> Self {
        Self { model: DEFAULT_LLM.into(), threads: 0, max_context: 4096, max_cached_sessions: 16 }
    }
}

struct CachedSession {
    key: SessionKey,
    cache: KvCache,
    last_used: u64,
}

/// The embedded ONNX Runtime LLM.
pub struct EmbeddedBackend {
    lm: CausalLm,
    sessions: Vec<CachedSession>,
    max_cached: usize,
    clock: u64,
}

impl EmbeddedBackend {
    /// Load the model.
    pub fn load(opts: &EmbeddedOptions) -> Result<Self, RuntimeError> {
        let files = ModelFiles::locate(&opts.model)?;
        let lm = CausalLm::load(files, &LmOptions { threads: opts.threads, max_context: opts.max_context, ..LmOptions::default() })?;
        Ok(Self { lm, sessions: Vec::new(), max_cached: opts.max_cached_sessions.max(1), clock: 0 })
    }

    /// Capacity for a context of `need` tokens: room to grow, bounded by the model limit.
    fn capacity_for(&self, need: usize) -> usize {
        (need + need / 2 + 64).next_power_of_two().clamp(256, self.lm.max_context())
    }

    /// Index of the session's cache, creating (and evicting) as needed. Caches used at or
    /// after `protect_from` (this batch) are never evicted.
    fn slot(&mut self, key: &SessionKey, need: usize, protect_from: u64) -> Result<usize, RuntimeError> {
        self.clock += 1;
        if let Some(i) = self.sessions.iter().position(|s| &s.key == key) {
            self.sessions[i].last_used = self.clock;
            if self.sessions[i].cache.capacity() < need {
                // Grow: a fresh, larger cache; the context is re-prefilled from the request.
                self.sessions[i].cache = self.lm.new_cache(Some(self.capacity_for(need)))?;
            }
            return Ok(i);
        }
        let cache = self.lm.new_cache(Some(self.capacity_for(need)))?;
        let entry = CachedSession { key: key.clone(), cache, last_used: self.clock };
        if self.sessions.len() >= self.max_cached {
            // Replace in place so the indices of this batch's other rows stay valid.
            let lru = self.sessions.iter().enumerate().filter(|(_, s)| s.last_used < protect_from).min_by_key(|(_, s)| s.last_used).map(|(i, _)| i);
            if let Some(lru) = lru {
                tracing::debug!(device = %self.sessions[lru].key.device, session = self.sessions[lru].key.session_id, "evicting KV cache");
                self.sessions[lru] = entry;
                return Ok(lru);
            }
        }
        self.sessions.push(entry);
        Ok(self.sessions.len() - 1)
    }

    /// Validate a request, find its cache and cut it back to what it can reuse of the
    /// request's context; returns the cache index and the tokens still to run.
    fn prepare(&mut self, req: &LlmRequest, protect_from: u64) -> Result<(usize, Vec<u32>), LlmError> {
        let ctx = &req.context[..];
        let max = self.lm.max_context();
        if ctx.is_empty() {
            return Err(LlmError::InvalidToken("empty context".into()));
        }
        if ctx.len() >= max {
            return Err(LlmError::ContextTooLong { len: ctx.len(), max: Some(max - 1) });
        }
        let vocab = self.lm.manifest().vocab_size;
        if let Some(bad) = ctx.iter().find(|&&t| t as usize >= vocab) {
            return Err(LlmError::InvalidToken(format!("token id {bad} is outside the vocabulary ({vocab})")));
        }
        if let Some(bad) = req.draft.iter().find(|&&t| t as usize >= vocab) {
            return Err(LlmError::InvalidToken(format!("draft token id {bad} is outside the vocabulary ({vocab})")));
        }
        if ctx.len() + req.draft.len() >= max {
            return Err(LlmError::ContextTooLong { len: ctx.len() + req.draft.len(), max: Some(max - 1) });
        }
        let i = self.slot(&req.session, ctx.len() + req.draft.len() + 1, protect_from).map_err(|e| LlmError::Failed(e.to_string()))?;
        let cache = &mut self.sessions[i].cache;
        let keep = cache.reusable_prefix(ctx);
        cache.truncate(keep);
        Ok((i, ctx[keep..].to_vec()))
    }

    /// The request's sampler: its settings, the seed mixed with the seq.
    fn sampler(req: &LlmRequest) -> Result<Sampler, LlmError> {
        let mut params = req.sampling;
        if let Some(seed) = params.seed.as_mut() {
            *seed = seed.wrapping_add(req.seq as u64);
        }
        Sampler::new(params).map_err(|e| LlmError::Failed(e.to_string()))
    }

    fn sample(req: &LlmRequest, logits: &[f32]) -> Result<LlmToken, LlmError> {
        let s = Self::sampler(req)?.sample(logits).map_err(|e| LlmError::Failed(e.to_string()))?;
        Ok(LlmToken { token_id: s.token, logprob: s.logprob, accepted: 0 })
    }

    /// Check `req`'s draft against `logits` (one per draft position and one after the draft).
    fn verify(req: &LlmRequest, logits: &[Vec<f32>]) -> Result<LlmToken, LlmError> {
        let mut sampler = Self::sampler(req)?;
        verify_draft(&req.draft, logits.len(), |j| sampler.sample(&logits[j]).map(|s| (s.token, s.logprob)).map_err(|e| LlmError::Failed(e.to_string())))
    }

    /// A batch in which some request carries a draft: every row runs its delta and draft, the
    /// rows' last tokens in one batched call, with the logits of each draft position kept.
    fn next_tokens_drafted(&mut self, batch: &[LlmRequest]) -> Vec<Result<LlmToken, LlmError>> {
        let protect_from = self.clock + 1;
        let mut results: Vec<Option<Result<LlmToken, LlmError>>> = vec![None; batch.len()];
        let mut rows: Vec<(usize, usize, Vec<u32>)> = Vec::new(); // (request, cache, delta + draft)
        for (r, req) in batch.iter().enumerate() {
            let prepared = self.prepare(req, protect_from).map(|(i, mut run)| {
                run.extend_from_slice(&req.draft);
                (i, run)
            });
            match prepared {
                Ok((i, run)) if !rows.iter().any(|(_, j, _)| *j == i) => rows.push((r, i, run)),
                Ok((i, run)) => results[r] = Some(self.run_tail(i, &run, req.draft.len() + 1).and_then(|l| Self::verify(req, &l))),
                Err(e) => results[r] = Some(Err(e)),
            }
        }
        if rows.len() > 1 {
            let mut order: Vec<usize> = (0..rows.len()).collect();
            order.sort_by_key(|&k| rows[k].1);
            let mut caches = caches_in_order(&mut self.sessions, order.iter().map(|&k| rows[k].1));
            let runs: Vec<&[u32]> = order.iter().map(|&k| rows[k].2.as_slice()).collect();
            let tails: Vec<usize> = order.iter().map(|&k| batch[rows[k].0].draft.len() + 1).collect();
            match self.lm.forward_batch_tail(&mut caches, &runs, &tails) {
                Ok(outs) => {
                    for (&k, logits) in order.iter().zip(outs) {
                        let r = rows[k].0;
                        results[r] = Some(Self::verify(&batch[r], &logits));
                    }
                    rows.clear();
                }
                Err(e) => {
                    tracing::warn!("batched draft pass failed ({e}); retrying row by row");
                    for (r, _, _) in std::mem::take(&mut rows) {
                        let req = &batch[r];
                        let outcome = self.prepare(req, protect_from).and_then(|(j, mut run)| {
                            run.extend_from_slice(&req.draft);
                            self.run_tail(j, &run, req.draft.len() + 1)
                        });
                        results[r] = Some(outcome.and_then(|l| Self::verify(req, &l)));
                    }
                }
            }
        }
        for (r, i, run) in rows {
            let req = &batch[r];
            results[r] = Some(self.run_tail(i, &run, req.draft.len() + 1).and_then(|l| Self::verify(req, &l)));
        }
        results.into_iter().map(|o| o.unwrap_or_else(|| Err(LlmError::Failed("no result".into())))).collect()
    }

    /// [`Self::run_one`] keeping the logits of the last `k` positions.
    fn run_tail(&mut self, i: usize, run: &[u32], k: usize) -> Result<Vec<Vec<f32>>, LlmError> {
        self.lm.forward_tail(&mut self.sessions[i].cache, run, k).map_err(|e| {
            self.sessions[i].cache.clear();
            match e {
                RuntimeError::TokenOutOfRange { .. } => LlmError::InvalidToken(e.to_string()),
                other => LlmError::Failed(other.to_string()),
            }
        })
    }

    fn run_one(&mut self, i: usize, delta: &[u32]) -> Result<Vec<f32>, LlmError> {
        match self.lm.forward(&mut self.sessions[i].cache, delta) {
            Ok(out) => Ok(out.logits),
            Err(e) => {
                // The cache may be partially written: drop it rather than trust it.
                self.sessions[i].cache.clear();
                Err(match e {
                    RuntimeError::TokenOutOfRange { .. } => LlmError::InvalidToken(e.to_string()),
                    other => LlmError::Failed(other.to_string()),
                })
            }
        }
    }
}

impl Backend for EmbeddedBackend {
    fn name(&self) -> &str {
        "embedded"
    }
    fn facts(&self) -> ModelFacts {
        ModelFacts::of_manifest(self.lm.manifest(), self.lm.max_context())
    }
    fn next_tokens(&mut self, batch: &[LlmRequest]) -> Vec<Result<LlmToken, LlmError>> {
        if batch.iter().any(|r| !r.draft.is_empty()) {
            return self.next_tokens_drafted(batch);
        }
        let protect_from = self.clock + 1;
        let mut results: Vec<Option<Result<LlmToken, LlmError>>> = vec![None; batch.len()];
        let mut rows: Vec<(usize, usize, Vec<u32>)> = Vec::new(); // (request, cache, delta)
        for (r, req) in batch.iter().enumerate() {
            match self.prepare(req, protect_from) {
                Ok((i, delta)) if !rows.iter().any(|(_, j, _)| *j == i) => rows.push((r, i, delta)),
                Ok((i, delta)) => {
                    // Same session twice in one batch (the batcher avoids it): run in order.
                    results[r] = Some(self.run_one(i, &delta).and_then(|l| Self::sample(req, &l)));
                }
                Err(e) => results[r] = Some(Err(e)),
            }
        }
        if rows.len() > 1 {
            let mut order: Vec<usize> = (0..rows.len()).collect();
            order.sort_by_key(|&k| rows[k].1);
            let mut caches = caches_in_order(&mut self.sessions, order.iter().map(|&k| rows[k].1));
            let deltas: Vec<&[u32]> = order.iter().map(|&k| rows[k].2.as_slice()).collect();
            match self.lm.forward_batch(&mut caches, &deltas) {
                Ok(outs) => {
                    for (&k, out) in order.iter().zip(outs) {
                        let r = rows[k].0;
                        results[r] = Some(Self::sample(&batch[r], &out.logits));
                    }
                    rows.clear();
                }
                Err(e) => {
                    // Isolate the failure: re-run each row alone from a consistent cache.
                    tracing::warn!("batched forward failed ({e}); retrying row by row");
                    for (r, i, _) in &rows {
                        let req = &batch[*r];
                        let prepared = self.prepare(req, protect_from);
                        results[*r] = Some(prepared.and_then(|(j, d)| {
                            debug_assert_eq!(j, *i);
                            self.run_one(j, &d)
                        }).and_then(|l| Self::sample(req, &l)));
                    }
                    rows.clear();
                }
            }
        }
        for (r, i, delta) in rows {
            results[r] = Some(self.run_one(i, &delta).and_then(|l| Self::sample(&batch[r], &l)));
        }
        results.into_iter().map(|o| o.unwrap_or_else(|| Err(LlmError::Failed("no result".into())))).collect()
    }
    fn end_session(&mut self, session: &SessionKey) {
        self.sessions.retain(|s| &s.key != session);
    }
    /// The session's cache is sized for its whole context at the first step (a cache grown
    /// later would be re-prefilled from the start in one call, past the batcher's cost cap).
    fn prefill(&mut self, request: &LlmRequest, upto: usize) -> Result<(), LlmError> {
        let protect_from = self.clock + 1;
        let (i, delta) = self.prepare(request, protect_from)?;
        let keep = request.context.len() - delta.len();
        let upto = upto.min(request.context.len());
        if keep < upto {
            self.run_one(i, &request.context[keep..upto])?;
        }
        Ok(())
    }
}

/// The caches at `indices` (ascending, distinct), borrowed together for one batched pass.
fn caches_in_order(sessions: &mut [CachedSession], indices: impl Iterator<Item = usize>) -> Vec<&mut KvCache> {
    let mut wanted = indices.peekable();
    let mut caches = Vec::new();
    for (idx, s) in sessions.iter_mut().enumerate() {
        if wanted.peek() == Some(&idx) {
            caches.push(&mut s.cache);
            wanted.next();
        }
    }
    caches
}
