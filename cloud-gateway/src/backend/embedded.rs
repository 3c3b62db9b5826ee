//! The default backend: the LLM in-process on ONNX Runtime, reusing the runtime of the edge.
//!
//! Each session keeps a KV cache (LRU-bounded by count). An escalation carries the session's
//! whole context; the cache already holds all of it but the delta sent since the last
//! escalation, so the work per escalation is a short prefill of that delta (see DESIGN §5).
//! Caches start small and grow, so memory follows the contexts actually seen.

use common::model_files::ModelFiles;
use common::runtime::{CausalLm, KvCache, LmOptions, RuntimeError};
use common::sampling::Sampler;

use super::{Backend, BackendError, BackendRequest, BackendToken, SessionKey};

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
    model_id: String,
}

impl EmbeddedBackend {
    /// Load the model.
    pub fn load(opts: &EmbeddedOptions) -> Result<Self, RuntimeError> {
        let files = ModelFiles::locate(&opts.model)?;
        let lm = CausalLm::load(files, &LmOptions { threads: opts.threads, max_context: opts.max_context })?;
        let model_id = lm.manifest().id.clone();
        Ok(Self { lm, sessions: Vec::new(), max_cached: opts.max_cached_sessions.max(1), clock: 0, model_id })
    }

    /// What the gateway announces and checks about this model.
    pub fn facts(&self) -> crate::server::ModelFacts {
        let m = self.lm.manifest();
        crate::server::ModelFacts {
            llm_id: m.id.clone(),
            tokenizer_fingerprint: m.tokenizer_fingerprint.clone(),
            vocab_size: m.vocab_size,
            max_context: self.lm.max_context(),
        }
    }

    /// Capacity for a context of `need` tokens: room to grow, bounded by the model limit.
    fn capacity_for(&self, need: usize) -> usize {
        (need + need / 2 + 64).next_power_of_two().clamp(256, self.lm.max_context())
    }

    /// Index of the session's cache, creating (and evicting) as needed.
    fn slot(&mut self, key: &SessionKey, need: usize) -> Result<usize, RuntimeError> {
        self.clock += 1;
        if let Some(i) = self.sessions.iter().position(|s| &s.key == key) {
            self.sessions[i].last_used = self.clock;
            if self.sessions[i].cache.capacity() < need {
                // Grow: a fresh, larger cache; the context is re-prefilled from the request.
                self.sessions[i].cache = self.lm.new_cache(Some(self.capacity_for(need)))?;
            }
            return Ok(i);
        }
        if self.sessions.len() >= self.max_cached {
            if let Some((lru, _)) = self.sessions.iter().enumerate().min_by_key(|(_, s)| s.last_used) {
                tracing::debug!(device = %self.sessions[lru].key.device, session = self.sessions[lru].key.session_id, "evicting KV cache");
                self.sessions.swap_remove(lru);
            }
        }
        let cache = self.lm.new_cache(Some(self.capacity_for(need)))?;
        self.sessions.push(CachedSession { key: key.clone(), cache, last_used: self.clock });
        Ok(self.sessions.len() - 1)
    }

    fn one(&mut self, req: &BackendRequest) -> Result<BackendToken, BackendError> {
        let ctx = &req.context[..];
        let max = self.lm.max_context();
        if ctx.is_empty() {
            return Err(BackendError::InvalidToken("empty context".into()));
        }
        if ctx.len() >= max {
            return Err(BackendError::ContextTooLong { len: ctx.len(), max: max - 1 });
        }
        let i = self.slot(&req.session, ctx.len() + 1).map_err(|e| BackendError::Failed(e.to_string()))?;
        let cache = &mut self.sessions[i].cache;
        let held = cache.tokens();
        let mut common = held.iter().zip(ctx).take_while(|(a, b)| a == b).count();
        if common == ctx.len() {
            // Everything is cached but the logits of the last position are not: recompute it.
            common -= 1;
        }
        cache.truncate(common);
        let out = self.lm.forward(cache, &ctx[common..]).map_err(|e| match e {
            RuntimeError::TokenOutOfRange { .. } => BackendError::InvalidToken(e.to_string()),
            other => BackendError::Failed(other.to_string()),
        });
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                // The cache may be partially written: drop it rather than trust it.
                self.sessions[i].cache.clear();
                return Err(e);
            }
        };
        let mut params = req.sampling;
        if let Some(seed) = params.seed.as_mut() {
            *seed = seed.wrapping_add(req.seq as u64);
        }
        let mut sampler = Sampler::new(params).map_err(|e| BackendError::Failed(e.to_string()))?;
        let s = sampler.sample(&out.logits).map_err(|e| BackendError::Failed(e.to_string()))?;
        Ok(BackendToken { token_id: s.token, logprob: s.logprob })
    }
}

impl Backend for EmbeddedBackend {
    fn name(&self) -> &str {
        "embedded"
    }
    fn model_id(&self) -> &str {
        &self.model_id
    }
    fn max_context(&self) -> usize {
        self.lm.max_context()
    }
    fn next_tokens(&mut self, batch: &[BackendRequest]) -> Vec<Result<BackendToken, BackendError>> {
        batch.iter().map(|r| self.one(r)).collect()
    }
    fn end_session(&mut self, session: &SessionKey) {
        self.sessions.retain(|s| &s.key != session);
    }
}

