//! Command-line options shared by every subcommand that loads a model.

use clap::Args;
use common::model_files::{ModelFiles, DEFAULT_SLM};
use common::runtime::{CausalLm, LmOptions};
use common::tokenizer::Tokenizer;

/// Which model to load and how to run it.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// Model id prepared under $DUET_HOME/models, or a model directory.
    #[arg(long, env = "DUET_MODEL", default_value = DEFAULT_SLM)]
    pub model: String,
    /// ONNX Runtime intra-op threads (0 = one per core).
    #[arg(long, env = "DUET_THREADS", default_value_t = 0)]
    pub threads: usize,
    /// Largest context (prompt + generated tokens); sizes the KV cache.
    #[arg(long, env = "DUET_MAX_CONTEXT", default_value_t = 4096, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(16..=131072))]
    pub max_context: usize,
}

impl ModelArgs {
    /// Load the model and its tokenizer (checked against the recorded fingerprint).
    pub fn load(&self) -> anyhow::Result<(CausalLm, Tokenizer)> {
        let files = ModelFiles::locate(&self.model)?;
        let tok = Tokenizer::load(&files.tokenizer, Some(&files.manifest.tokenizer_fingerprint))?;
        let lm = CausalLm::load(files, &LmOptions { threads: self.threads, max_context: self.max_context })?;
        Ok((lm, tok))
    }
}
