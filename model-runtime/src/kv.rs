//! The attention state a model runs against: one sequence's KV cache bound in place
//! ([`KvCache`]) and the batch workspace that gathers several of them for one call
//! ([`BatchWorkspace`]).
//!
//! Why apart from the model: these are the memory a step reads and writes; the model
//! ([`crate::CausalLm`]) makes and runs them, and the batched step (`batch`) moves rows between
//! them, so both use this module and it uses neither.

use ort::session::IoBinding;

/// Per layer: (key, value) base pointers of ORT-owned KV buffers.
pub(crate) type KvPointers = Vec<(*mut f32, *mut f32)>;

/// Per-sequence attention state: KV buffers bound in place to the session.
pub struct KvCache {
    pub(crate) binding: IoBinding,
    pub(crate) tokens: Vec<u32>,
    pub(crate) capacity: usize,
    /// Per layer: (key, value) base pointers of the `[1, kv_heads, capacity, head]` buffers,
    /// owned by ORT and kept alive by `binding`; used to gather/scatter for batched calls.
    pub(crate) layers: KvPointers,
}

// SAFETY: the raw pointers address buffers owned by `binding`'s held values, which move with
// the cache; a cache is only used through `&mut` (one thread at a time).
unsafe impl Send for KvCache {}

impl std::fmt::Debug for KvCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvCache").field("len", &self.tokens.len()).field("capacity", &self.capacity).finish()
    }
}

impl KvCache {
    /// Tokens whose keys and values are cached.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Most tokens this cache can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The cached token ids, in order.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Forget everything after the first `len` tokens (the buffers are overwritten on the next step).
    pub fn truncate(&mut self, len: usize) {
        self.tokens.truncate(len);
    }

    /// Start over with an empty context.
    pub fn clear(&mut self) {
        self.tokens.clear();
    }

    /// How much of the cache can serve `context`: the longest common prefix of the cached
    /// tokens and `context`, leaving at least the last token of `context` to run (its logits
    /// are not cached). Truncate to it and run the rest: the one rule every cache reuse
    /// follows (a session's next escalation at the gateway, the device's next turn, an
    /// evaluation moving between runs).
    pub fn reusable_prefix(&self, context: &[u32]) -> usize {
        let common = self.tokens.iter().zip(context).take_while(|(a, b)| a == b).count();
        common.min(context.len().saturating_sub(1))
    }

    pub(crate) fn layer_ptrs(&self, layer: usize) -> (*mut f32, *mut f32) {
        self.layers[layer]
    }

    pub(crate) fn push_tokens(&mut self, tokens: &[u32]) {
        self.tokens.extend_from_slice(tokens);
    }
}

/// A reusable `[rows, kv_heads, capacity, head]` KV workspace bound in place.
pub(crate) struct BatchWorkspace {
    pub(crate) rows: usize,
    pub(crate) capacity: usize,
    pub(crate) binding: ort::session::IoBinding,
    /// Per layer: (key, value) base pointers into ORT-owned memory kept alive by `binding`.
    pub(crate) layers: KvPointers,
}

// SAFETY: the pointers address buffers owned by `binding`'s held values, which move with it;
// the workspace is used by one thread at a time (`&mut`).
unsafe impl Send for BatchWorkspace {}

