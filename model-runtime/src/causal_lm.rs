//! A causal language model on ONNX Runtime with an in-place KV cache.
//!
//! The graphs come from onnxruntime-genai's model builder: `GroupQueryAttention` layers whose
//! `past_key_values.*` inputs and `present.*` outputs may share one buffer. Each [`KvCache`]
//! allocates that buffer once at its full capacity and binds it as both input and output, so a
//! decode step writes one new position in place and never copies the cache; positions come
//! from the attention mask length. This keeps the time per token flat as the context grows.

use ort::memory::{AllocationDevice, AllocatorType, MemoryInfo, MemoryType};
use ort::session::{builder::GraphOptimizationLevel, IoBinding, Session};
use ort::value::Tensor;

use super::{env::environment, RuntimeError};
use crate::kv::{BatchWorkspace, KvCache, KvPointers};
use crate::model_files::{ModelFiles, ModelManifest};

/// Runtime settings for one model.
#[derive(Debug, Clone)]
pub struct LmOptions {
    /// Intra-op threads (0 = one per available core).
    pub threads: usize,
    /// Largest context (prompt + generated tokens) a cache can hold; bounded by the model's own.
    pub max_context: usize,
    /// Back the weights with transparent huge pages once loaded ([`crate::huge_pages`]):
    /// faster decoding where the kernel allows them; off only to measure the difference.
    pub huge_pages: bool,
}

impl Default for LmOptions {
    fn default() -> Self {
        Self { threads: 0, max_context: 4096, huge_pages: true }
    }
}

/// What one forward pass yields for the last position.
#[derive(Debug, Clone, Default)]
pub struct StepOutput {
    /// Next-token logits (vocabulary wide).
    pub logits: Vec<f32>,
    /// Final hidden state (after the last norm): the router's input.
    pub hidden: Vec<f32>,
}

/// A loaded model: one ONNX Runtime session, reused for every cache and step.
pub struct CausalLm {
    pub(crate) session: Session,
    files: ModelFiles,
    has_position_ids: bool,
    stop_tokens: Vec<u32>,
    max_context: usize,
    pub(crate) cpu: MemoryInfo<'static>,
    pub(crate) workspace: Option<BatchWorkspace>,
    /// When memory allocated since the load is advised too; `None` with huge pages off.
    regrowth: Option<std::sync::Arc<crate::huge_pages::Regrowth>>,
}

impl std::fmt::Debug for CausalLm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CausalLm").field("model", &self.files.manifest.id).field("dir", &self.files.dir).finish()
    }
}

pub(crate) fn ort_err(context: &'static str) -> impl FnOnce(ort::Error) -> RuntimeError {
    move |e| RuntimeError::Ort { context, message: e.to_string() }
}

impl CausalLm {
    /// Load a prepared model and check that its graph has the interface this runtime drives.
    pub fn load(files: ModelFiles, opts: &LmOptions) -> Result<Self, RuntimeError> {
        let env = environment()?;
        let threads = if opts.threads == 0 { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) } else { opts.threads };
        let configure = || -> Result<ort::session::builder::SessionBuilder, ort::Error> {
            Ok(Session::builder(env)?
                .with_optimization_level(GraphOptimizationLevel::Level3)?
                .with_intra_threads(threads)?
                .with_inter_threads(1)?)
        };
        let session = configure()
            .map_err(|e| RuntimeError::Ort { context: "configuring the session", message: e.to_string() })?
            .commit_from_file(&files.onnx)
            .map_err(|e| RuntimeError::Ort { context: "loading the model", message: format!("{}: {e}", files.onnx.display()) })?;
        let m = &files.manifest;
        let inputs: Vec<&str> = session.inputs().iter().map(|o| o.name()).collect();
        let outputs: Vec<&str> = session.outputs().iter().map(|o| o.name()).collect();
        let mut need_in = vec!["input_ids".to_string(), "attention_mask".to_string()];
        let mut need_out = vec!["logits".to_string(), "hidden_states".to_string()];
        for i in 0..m.num_layers {
            for kv in ["key", "value"] {
                need_in.push(format!("past_key_values.{i}.{kv}"));
                need_out.push(format!("present.{i}.{kv}"));
            }
        }
        for n in &need_in {
            if !inputs.contains(&n.as_str()) {
                return Err(RuntimeError::Interface(format!("{} has no input `{n}`; re-run deploy/models/prepare", files.onnx.display())));
            }
        }
        for n in &need_out {
            if !outputs.contains(&n.as_str()) {
                return Err(RuntimeError::Interface(format!(
                    "{} has no output `{n}` (the router needs `hidden_states`); re-run deploy/models/prepare",
                    files.onnx.display()
                )));
            }
        }
        let has_position_ids = inputs.contains(&"position_ids");
        let mut stop_tokens = m.eos_token_ids.clone();
        for t in [151643u32, 151645] {
            // <|endoftext|> and <|im_end|> end a Qwen turn whether or not the manifest lists both.
            if (t as usize) < m.vocab_size && !stop_tokens.contains(&t) && m.vocab_size == 151936 {
                stop_tokens.push(t);
            }
        }
        let max_context = opts.max_context.min(m.context_length).max(2);
        let cpu = MemoryInfo::new(AllocationDevice::CPU, 0, AllocatorType::Device, MemoryType::Default).map_err(ort_err("cpu memory info"))?;
        let huge = if opts.huge_pages { crate::huge_pages::back_with_huge_pages() } else { Default::default() };
        tracing::info!(model = %m.id, precision = %m.precision, threads, max_context, huge_pages_mib = huge.advised >> 20, collapsed_mib = huge.collapsed >> 20, "model loaded");
        let regrowth = opts.huge_pages.then(|| std::sync::Arc::new(crate::huge_pages::Regrowth::after_pass(crate::huge_pages::resident_bytes().unwrap_or(0))));
        Ok(Self { session, files, has_position_ids, stop_tokens, max_context, cpu, workspace: None, regrowth })
    }

    /// Advise memory allocated since the last pass onto huge pages once the process has grown
    /// enough for it to matter (new KV buffers, the arena's buffers for a longer run): a
    /// statm read here, and rarely a pass on a thread of its own, so that the kernel's
    /// compaction never delays a step ([`crate::huge_pages::Regrowth`]).
    pub(crate) fn advise_grown_memory(&self) {
        let Some(regrowth) = &self.regrowth else { return };
        let Some(resident) = crate::huge_pages::resident_bytes() else { return };
        if !regrowth.start_if_due(resident) {
            return;
        }
        let pass = std::sync::Arc::clone(regrowth);
        let spawned = std::thread::Builder::new().name("duet-huge-pages".into()).spawn(move || {
            let started = std::time::Instant::now();
            let done = crate::huge_pages::back_with_huge_pages();
            pass.finished();
            let ms = started.elapsed().as_secs_f64() * 1e3;
            tracing::debug!(resident_mib = resident >> 20, huge_pages_mib = done.advised >> 20, collapsed_mib = done.collapsed >> 20, ms, "grown memory advised");
        });
        if spawned.is_err() {
            regrowth.finished();
        }
    }

    /// Wait up to `limit` for a running huge-page pass to finish: a benchmark's warm-up ends
    /// here, so that no timed run shares the cores with the kernel's compaction.
    pub fn wait_for_huge_pages(&self, limit: std::time::Duration) {
        let Some(regrowth) = &self.regrowth else { return };
        let started = std::time::Instant::now();
        while regrowth.running() && started.elapsed() < limit {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// What the preparation step recorded about this model.
    pub fn manifest(&self) -> &ModelManifest {
        &self.files.manifest
    }

    /// Files the model was loaded from.
    pub fn files(&self) -> &ModelFiles {
        &self.files
    }

    /// Tokens that end generation (EOS and end-of-turn).
    pub fn stop_tokens(&self) -> &[u32] {
        &self.stop_tokens
    }

    /// The context limit of caches made by [`CausalLm::new_cache`].
    pub fn max_context(&self) -> usize {
        self.max_context
    }

    /// Allocate a KV cache of `capacity` tokens (default: the model's `max_context`).
    ///
    /// Memory: layers x 2 x kv_heads x capacity x head_size x 4 bytes, allocated now, once.
    pub fn new_cache(&self, capacity: Option<usize>) -> Result<KvCache, RuntimeError> {
        let m = &self.files.manifest;
        let capacity = capacity.unwrap_or(self.max_context).clamp(2, m.context_length);
        let (binding, layers) = self.bind_kv([1, m.num_kv_heads, capacity, m.head_size])?;
        Ok(KvCache { binding, tokens: Vec::with_capacity(capacity), capacity, layers })
    }

    /// Allocate zeroed KV buffers of `shape` for every layer and bind each as both the past
    /// input and the present output (in place); returns the binding and the buffers' pointers.
    pub(crate) fn bind_kv(&self, shape: [usize; 4]) -> Result<(IoBinding, KvPointers), RuntimeError> {
        let m = &self.files.manifest;
        let mut binding = self.session.create_binding().map_err(ort_err("creating an I/O binding"))?;
        let mut layers = Vec::with_capacity(m.num_layers);
        for i in 0..m.num_layers {
            let mut ptrs = [std::ptr::null_mut(); 2];
            for (j, kv) in ["key", "value"].into_iter().enumerate() {
                let mut t = Tensor::<f32>::new(self.session.allocator(), shape).map_err(ort_err("allocating a KV buffer"))?;
                let (_, data) = t.extract_tensor_mut();
                data.fill(0.0);
                ptrs[j] = data.as_mut_ptr();
                binding.bind_input(format!("past_key_values.{i}.{kv}"), &t).map_err(ort_err("binding a KV buffer"))?;
                binding.bind_output(format!("present.{i}.{kv}"), t).map_err(ort_err("binding a KV buffer"))?;
            }
            layers.push((ptrs[0], ptrs[1]));
        }
        self.advise_grown_memory();
        Ok((binding, layers))
    }

    /// Append `tokens` to the cached context and return logits and hidden state for the last one.
    ///
    /// One token is a decode step; several are a prefill. On error the cache is unchanged.
    pub fn forward(&mut self, cache: &mut KvCache, tokens: &[u32]) -> Result<StepOutput, RuntimeError> {
        let mut out = StepOutput::default();
        self.forward_into(cache, tokens, &mut out)?;
        Ok(out)
    }

    /// Check `tokens` against the vocabulary and the cache's room, and bind them (ids, mask,
    /// positions) as the next step's inputs: what every single-sequence step starts with.
    fn bind_inputs(&self, cache: &mut KvCache, tokens: &[u32]) -> Result<(), RuntimeError> {
        let m = &self.files.manifest;
        if tokens.is_empty() {
            return Err(RuntimeError::EmptyInput);
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= m.vocab_size) {
            return Err(RuntimeError::TokenOutOfRange { token: bad, vocab_size: m.vocab_size });
        }
        let past = cache.tokens.len();
        let total = past + tokens.len();
        if total > cache.capacity {
            return Err(RuntimeError::ContextFull { needed: total, capacity: cache.capacity });
        }
        let n = tokens.len();
        let ids = Tensor::from_array(([1usize, n], tokens.iter().map(|&t| t as i64).collect::<Vec<_>>())).map_err(ort_err("input_ids"))?;
        let mask = Tensor::from_array(([1usize, total], vec![1i64; total])).map_err(ort_err("attention_mask"))?;
        cache.binding.bind_input("input_ids", &ids).map_err(ort_err("binding input_ids"))?;
        cache.binding.bind_input("attention_mask", &mask).map_err(ort_err("binding attention_mask"))?;
        if self.has_position_ids {
            let pos = Tensor::from_array(([1usize, n], (past as i64..total as i64).collect::<Vec<_>>())).map_err(ort_err("position_ids"))?;
            cache.binding.bind_input("position_ids", &pos).map_err(ort_err("binding position_ids"))?;
        }
        Ok(())
    }

    /// Append `tokens` to the cached context and return the logits of its last `k` positions
    /// (`1..=tokens.len()`), in order: what checking a draft needs (the logits after each
    /// draft token), where [`CausalLm::forward`] keeps only the last. One pass when the graph
    /// emits every position's logits; otherwise the last `k - 1` tokens are stepped one by one.
    /// On error the cache may hold a prefix of `tokens` (its token list matches its keys).
    pub fn forward_tail(&mut self, cache: &mut KvCache, tokens: &[u32], k: usize) -> Result<Vec<Vec<f32>>, RuntimeError> {
        let k = k.clamp(1, tokens.len().max(1));
        self.bind_inputs(cache, tokens)?;
        let n = tokens.len();
        cache.binding.bind_output_to_device("logits", &self.cpu).map_err(ort_err("binding logits"))?;
        cache.binding.bind_output_to_device("hidden_states", &self.cpu).map_err(ort_err("binding hidden states"))?;
        let outputs = self.session.run_binding(&cache.binding).map_err(ort_err("running the model"))?;
        let (shape, logits) = outputs["logits"].try_extract_tensor::<f32>().map_err(ort_err("reading logits"))?;
        let vocab = *shape.last().unwrap_or(&0) as usize;
        if vocab == 0 || logits.len() < vocab {
            return Err(RuntimeError::Interface(format!("logits have shape {shape:?}")));
        }
        let positions = logits.len() / vocab;
        if positions >= n {
            // Every position's logits: take the last k.
            let tail = &logits[logits.len() - k * vocab..];
            let out = tail.chunks_exact(vocab).map(<[f32]>::to_vec).collect();
            drop(outputs);
            cache.tokens.extend_from_slice(tokens);
            self.advise_grown_memory();
            return Ok(out);
        }
        // Only the last position's: undo this run and redo the tail one token at a time.
        drop(outputs);
        let mut out = Vec::with_capacity(k);
        let split = n - k + 1;
        out.push(self.forward(cache, &tokens[..split])?.logits);
        for &t in &tokens[split..] {
            out.push(self.forward(cache, &[t])?.logits);
        }
        Ok(out)
    }

    /// [`CausalLm::forward`] into reusable buffers (no allocation per step once they are sized).
    pub fn forward_into(&mut self, cache: &mut KvCache, tokens: &[u32], out: &mut StepOutput) -> Result<(), RuntimeError> {
        self.bind_inputs(cache, tokens)?;
        // Output shapes change with the number of input tokens, so ORT allocates them per run;
        // re-binding drops the previous run's buffers (a bound buffer would be reused as is).
        cache.binding.bind_output_to_device("logits", &self.cpu).map_err(ort_err("binding logits"))?;
        cache.binding.bind_output_to_device("hidden_states", &self.cpu).map_err(ort_err("binding hidden states"))?;
        let outputs = self.session.run_binding(&cache.binding).map_err(ort_err("running the model"))?;
        let (shape, logits) = outputs["logits"].try_extract_tensor::<f32>().map_err(ort_err("reading logits"))?;
        let vocab = *shape.last().unwrap_or(&0) as usize;
        if vocab == 0 || logits.len() < vocab {
            return Err(RuntimeError::Interface(format!("logits have shape {shape:?}")));
        }
        out.logits.clear();
        out.logits.extend_from_slice(&logits[logits.len() - vocab..]);
        let (shape, hidden) = outputs["hidden_states"].try_extract_tensor::<f32>().map_err(ort_err("reading hidden states"))?;
        let width = *shape.last().unwrap_or(&0) as usize;
        if width == 0 || hidden.len() < width {
            return Err(RuntimeError::Interface(format!("hidden_states have shape {shape:?}")));
        }
        out.hidden.clear();
        out.hidden.extend_from_slice(&hidden[hidden.len() - width..]);
        drop(outputs);
        cache.tokens.extend_from_slice(tokens);
        if tokens.len() > 1 {
            // A prefill may have grown the arena; a decode step reuses what the last one freed.
            self.advise_grown_memory();
        }
        Ok(())
    }
}
