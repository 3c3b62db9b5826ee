//! Options shared by the offline CommonsenseQA commands (labels, evaluation): which SLM and
//! LLM to load (the LLM in-process, or the one an engine serves), and which dataset file to
//! read.

use anyhow::bail;
use clap::Args;
use engine_client::EngineSpec;
use model_runtime::model_files::{ModelFiles, DEFAULT_LLM, DEFAULT_SLM};
use model_runtime::tokenizer::Tokenizer;
use model_runtime::{CausalLm, LmOptions};

use crate::cqa::{read_items, Item};
use crate::engine_llm::EngineLlm;
use crate::teacher::Llm;

/// The SLM/LLM pair.
#[derive(Debug, Clone, Args)]
pub struct PairArgs {
    /// The small model (edge side): a model id under $DUET_HOME/models or a directory.
    #[arg(long, env = "DUET_SLM", default_value = DEFAULT_SLM)]
    pub slm: String,
    /// The large model (cloud side).
    #[arg(long, env = "DUET_LLM", default_value = DEFAULT_LLM)]
    pub llm: String,
    /// ONNX Runtime intra-op threads per model (0 = one per core).
    #[arg(long, env = "DUET_THREADS", default_value_t = 0)]
    pub threads: usize,
    /// Use the LLM an engine serves instead of the in-process --llm: KIND=URL with KIND one of
    /// sglang, vllm, llamacpp (e.g. llamacpp=http://127.0.0.1:8080). It must serve the SLM's
    /// vocabulary (checked at start, as the gateway checks its engines).
    #[arg(long, env = "DUET_LLM_ENGINE")]
    pub llm_engine: Option<EngineSpec>,
}

/// Both models, loaded; they must share one tokenizer (token ids are the routing currency).
pub struct Pair {
    pub slm: CausalLm,
    pub llm: Llm,
    pub tok: Tokenizer,
}

impl PairArgs {
    /// Load both models and check that their tokenizers agree.
    pub fn load(&self, max_context: usize) -> anyhow::Result<Pair> {
        let opts = LmOptions { threads: self.threads, max_context, ..LmOptions::default() };
        let slm_files = ModelFiles::locate(&self.slm)?;
        if let Some(spec) = &self.llm_engine {
            let llm = Llm::Engine(EngineLlm::connect(spec, &slm_files.tokenizer)?);
            let tok = Tokenizer::load(&slm_files.tokenizer, Some(&slm_files.manifest.tokenizer_fingerprint))?;
            return Ok(Pair { slm: CausalLm::load(slm_files, &opts)?, llm, tok });
        }
        let llm_files = ModelFiles::locate(&self.llm)?;
        if slm_files.manifest.tokenizer_fingerprint != llm_files.manifest.tokenizer_fingerprint {
            bail!(
                "{} and {} have different tokenizers ({} vs {}); token-level routing needs one vocabulary",
                slm_files.manifest.id,
                llm_files.manifest.id,
                slm_files.manifest.tokenizer_fingerprint,
                llm_files.manifest.tokenizer_fingerprint
            );
        }
        let tok = Tokenizer::load(&slm_files.tokenizer, Some(&slm_files.manifest.tokenizer_fingerprint))?;
        Ok(Pair { slm: CausalLm::load(slm_files, &opts)?, llm: Llm::InProcess(Box::new(CausalLm::load(llm_files, &opts)?)), tok })
    }
}

/// Read a dataset, printing each line that does not parse (with its number) and going on.
pub fn read_dataset(path: &std::path::Path, limit: Option<usize>) -> anyhow::Result<Vec<Item>> {
    let (mut items, errors) = read_items(path).map_err(|e| anyhow::anyhow!("dataset {}: {e}", path.display()))?;
    for e in &errors {
        eprintln!("warning: {}: skipping {e}", path.display());
    }
    if let Some(n) = limit {
        items.truncate(n);
    }
    if items.is_empty() {
        bail!("dataset {} has no usable items", path.display());
    }
    Ok(items)
}

/// A progress bar on stderr (hidden when stderr is not a terminal, so logs stay clean).
pub fn progress(total: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    let style = indicatif::ProgressStyle::with_template("{msg:>10} [{elapsed_precise}] {bar:40} {pos}/{len} items, eta {eta} {prefix}")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(what.to_string());
    bar
}
