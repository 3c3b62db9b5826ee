//! Batched forward passes across independent sequences, each with its own [`KvCache`].
//!
//! The graph takes one `[batch, kv_heads, len, head]` KV tensor per layer, so the rows' caches
//! are gathered into a batch workspace (allocated once, reused), the model runs once, and only
//! the genuinely new positions are scattered back.
//!
//! The batched call itself is a decode step: one token per row (ONNX Runtime's CPU
//! GroupQueryAttention refuses several tokens per row with a past at batch > 1). Rows with
//! longer deltas prefill all but their last token alone first. `run_padded` also supports
//! several tokens per row by left-padding shorter rows with their own history (re-feeding the
//! last cached tokens at their own positions rewrites identical keys and values), for runtimes
//! whose attention kernel accepts it.

use ort::value::Tensor;

use super::causal_lm::{ort_err, CausalLm, StepOutput};
use crate::kv::{BatchWorkspace, KvCache};
use super::RuntimeError;

impl CausalLm {
    fn workspace(&mut self, rows: usize, need: usize) -> Result<&mut BatchWorkspace, RuntimeError> {
        let fits = self.workspace.as_ref().is_some_and(|w| w.rows == rows && w.capacity >= need);
        if !fits {
            let m = self.manifest().clone();
            let capacity = need.next_power_of_two().clamp(64, self.max_context());
            self.workspace = None; // free the old one first
            let (binding, layers) = self.bind_kv([rows, m.num_kv_heads, capacity, m.head_size])?;
            self.workspace = Some(BatchWorkspace { rows, capacity, binding, layers });
        }
        self.workspace.as_mut().ok_or_else(|| RuntimeError::Interface("batch workspace".into()))
    }

    /// Append `tokens[r]` to `caches[r]` for every row and return each row's logits and hidden
    /// state for its last token. The last tokens of all rows go through the model in one
    /// batched call; ONNX Runtime's CPU attention takes several tokens per row only at batch 1,
    /// so any earlier tokens of a row are prefilled for that row alone first. On error a cache
    /// may hold that prefix (its token list always matches its keys and values).
    pub fn forward_batch(&mut self, caches: &mut [&mut KvCache], tokens: &[&[u32]]) -> Result<Vec<StepOutput>, RuntimeError> {
        if caches.len() != tokens.len() {
            return Err(RuntimeError::Interface("forward_batch: caches and tokens differ in length".into()));
        }
        if caches.len() == 1 {
            return Ok(vec![self.forward(caches[0], tokens[0])?]);
        }
        self.check_rows(caches, tokens)?;
        let mut last = Vec::with_capacity(tokens.len());
        for (r, t) in tokens.iter().enumerate() {
            let (prefix, tail) = t.split_at(t.len() - 1);
            if !prefix.is_empty() {
                self.forward(caches[r], prefix)?;
            }
            last.push(tail);
        }
        let rows: Vec<usize> = (0..caches.len()).collect();
        self.run_padded(caches, &last, &rows, 1)
    }

    /// Every row's tokens non-empty, in the vocabulary and within its cache: checked before any
    /// row runs, so a bad row fails the batch without touching a cache.
    fn check_rows(&self, caches: &[&mut KvCache], tokens: &[&[u32]]) -> Result<(), RuntimeError> {
        let vocab_size = self.manifest().vocab_size;
        for (cache, t) in caches.iter().zip(tokens) {
            if t.is_empty() {
                return Err(RuntimeError::EmptyInput);
            }
            if let Some(&bad) = t.iter().find(|&&x| x as usize >= vocab_size) {
                return Err(RuntimeError::TokenOutOfRange { token: bad, vocab_size });
            }
            let total = cache.len() + t.len();
            if total > cache.capacity() {
                return Err(RuntimeError::ContextFull { needed: total, capacity: cache.capacity() });
            }
        }
        Ok(())
    }

    /// [`CausalLm::forward_batch`] returning, for each row, the logits of its last `tails[r]`
    /// positions (at least 1, at most its token count), in order: draft checking for many
    /// sessions in one batched pass. Each row's earlier tokens run alone first (with all the
    /// logits it needs but the last), then every row's last token in one batched call. Rows
    /// with a tail of 1 cost what they cost in `forward_batch`.
    pub fn forward_batch_tail(&mut self, caches: &mut [&mut KvCache], tokens: &[&[u32]], tails: &[usize]) -> Result<Vec<Vec<Vec<f32>>>, RuntimeError> {
        if caches.len() != tokens.len() || tails.len() != tokens.len() {
            return Err(RuntimeError::Interface("forward_batch_tail: caches, tokens and tails differ in length".into()));
        }
        if caches.len() == 1 {
            return Ok(vec![self.forward_tail(caches[0], tokens[0], tails[0])?]);
        }
        self.check_rows(caches, tokens)?;
        let mut heads: Vec<Vec<Vec<f32>>> = Vec::with_capacity(tokens.len());
        let mut last = Vec::with_capacity(tokens.len());
        for (r, t) in tokens.iter().enumerate() {
            let (prefix, tail) = t.split_at(t.len() - 1);
            let want = tails[r].clamp(1, t.len()) - 1;
            let head = match (prefix.is_empty(), want) {
                (true, _) => Vec::new(),
                (false, 0) => {
                    self.forward(caches[r], prefix)?;
                    Vec::new()
                }
                (false, w) => self.forward_tail(caches[r], prefix, w)?,
            };
            heads.push(head);
            last.push(tail);
        }
        let rows: Vec<usize> = (0..caches.len()).collect();
        let outs = self.run_padded(caches, &last, &rows, 1)?;
        Ok(heads.into_iter().zip(outs).map(|(mut head, out)| {
            head.push(out.logits);
            head
        }).collect())
    }

    fn run_padded(&mut self, caches: &mut [&mut KvCache], tokens: &[&[u32]], rows: &[usize], n_max: usize) -> Result<Vec<StepOutput>, RuntimeError> {
        let m = self.manifest().clone();
        let b = rows.len();
        // Effective past of each row: its cached length minus the history re-fed as padding.
        let starts: Vec<usize> = rows.iter().map(|&r| caches[r].len() + tokens[r].len() - n_max).collect();
        let total_max = starts.iter().map(|s| s + n_max).max().unwrap_or(n_max);
        let mut ids = Vec::with_capacity(b * n_max);
        let mut mask = vec![0i64; b * total_max];
        for (i, &r) in rows.iter().enumerate() {
            let pad = n_max - tokens[r].len();
            let history = caches[r].tokens();
            ids.extend(history[history.len() - pad..].iter().map(|&t| t as i64));
            ids.extend(tokens[r].iter().map(|&t| t as i64));
            mask[i * total_max..i * total_max + starts[i] + n_max].fill(1);
        }
        let (kv_heads, head) = (m.num_kv_heads, m.head_size);
        let cpu = self.cpu.clone();
        let ws = self.workspace(b, total_max)?;
        let ws_cap = ws.capacity;
        // Gather: each row's first `start` cached positions into its workspace row.
        for (layer, &(wk, wv)) in ws.layers.iter().enumerate() {
            for (i, &r) in rows.iter().enumerate() {
                let (ck, cv) = caches[r].layer_ptrs(layer);
                let cap = caches[r].capacity();
                for h in 0..kv_heads {
                    let n = starts[i] * head;
                    // SAFETY: both buffers hold [.., kv_heads, capacity, head] f32s; `starts[i]`
                    // is within both capacities; the regions do not overlap (distinct buffers).
                    unsafe {
                        std::ptr::copy_nonoverlapping(ck.add(h * cap * head), wk.add((i * kv_heads + h) * ws_cap * head), n);
                        std::ptr::copy_nonoverlapping(cv.add(h * cap * head), wv.add((i * kv_heads + h) * ws_cap * head), n);
                    }
                }
            }
        }
        let ids = Tensor::from_array(([b, n_max], ids)).map_err(ort_err("input_ids"))?;
        let mask = Tensor::from_array(([b, total_max], mask)).map_err(ort_err("attention_mask"))?;
        ws.binding.bind_input("input_ids", &ids).map_err(ort_err("binding input_ids"))?;
        ws.binding.bind_input("attention_mask", &mask).map_err(ort_err("binding attention_mask"))?;
        ws.binding.bind_output_to_device("logits", &cpu).map_err(ort_err("binding logits"))?;
        ws.binding.bind_output_to_device("hidden_states", &cpu).map_err(ort_err("binding hidden states"))?;
        let ws_ptr: *mut BatchWorkspace = ws;
        // SAFETY: `ws` lives in `self.workspace`, which `run_binding` does not touch; the
        // session and the workspace are distinct fields borrowed for the duration of the call.
        let ws = unsafe { &mut *ws_ptr };
        let outputs = self.session.run_binding(&ws.binding).map_err(ort_err("running the batch"))?;
        let (shape, logits) = outputs["logits"].try_extract_tensor::<f32>().map_err(ort_err("reading logits"))?;
        let vocab = *shape.last().unwrap_or(&0) as usize;
        let (hshape, hidden) = outputs["hidden_states"].try_extract_tensor::<f32>().map_err(ort_err("reading hidden states"))?;
        let width = *hshape.last().unwrap_or(&0) as usize;
        if vocab == 0 || logits.len() % (b * vocab) != 0 || width == 0 || hidden.len() != b * n_max * width {
            return Err(RuntimeError::Interface(format!("batch outputs have shapes {shape:?} and {hshape:?}")));
        }
        let per_row_logits = logits.len() / b;
        let mut results = Vec::with_capacity(b);
        for i in 0..b {
            let lrow = &logits[i * per_row_logits..(i + 1) * per_row_logits];
            let hrow = &hidden[(i * n_max + n_max - 1) * width..(i * n_max + n_max) * width];
            results.push(StepOutput { logits: lrow[lrow.len() - vocab..].to_vec(), hidden: hrow.to_vec() });
        }
        drop(outputs);
        // Scatter: only each row's new positions go back into its cache.
        for (layer, &(wk, wv)) in ws.layers.iter().enumerate() {
            for (i, &r) in rows.iter().enumerate() {
                let (ck, cv) = caches[r].layer_ptrs(layer);
                let cap = caches[r].capacity();
                let past = caches[r].len();
                let n = tokens[r].len() * head;
                for h in 0..kv_heads {
                    // SAFETY: positions past..past+len fit the cache (checked above) and the
                    // workspace (total_max <= ws_cap).
                    unsafe {
                        std::ptr::copy_nonoverlapping(wk.add(((i * kv_heads + h) * ws_cap + past) * head), ck.add((h * cap + past) * head), n);
                        std::ptr::copy_nonoverlapping(wv.add(((i * kv_heads + h) * ws_cap + past) * head), cv.add((h * cap + past) * head), n);
                    }
                }
            }
        }
        for &r in rows {
            caches[r].push_tokens(tokens[r]);
        }
        self.advise_grown_memory();
        Ok(results)
    }
}
