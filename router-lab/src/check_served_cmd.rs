//! `router-lab check-served`: do the texts a served run committed equal the position-by-position
//! reference?
//!
//! A served run with drafts (`eval --gateway --draft adaptive`) commits, per escalation, the
//! draft tokens the gateway's LLM accepted and its token after them, all from one batched pass
//! over the session's cached context. The reference is the loop that asks the LLM about one
//! position at a time. Both are greedy, so the served text equals the reference's exactly when
//! every token the LLM chose or accepted is the LLM's choice given the tokens before it, and
//! every other token the SLM's ([`crate::served_check`]). This command computes both models'
//! choices at every answer position of the run's `served-tokens.jsonl` by teacher forcing
//! (a prefill of the prompt, then one decode step per position, one item at a time: a
//! separate code path from the gateway's) and judges each position. Where two kernels may sum
//! in another order a near-tie can go either way; those are counted apart with their margin.
//!
//! Writes `served-check.json` (the totals) and `served-check-differences.jsonl` (every position
//! that is not a plain agreement) into the run's directory, prints the totals, and exits with an
//! error when a position differs beyond a near-tie.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use model_runtime::model_files::{ModelFiles, DEFAULT_LLM};
use model_runtime::{CausalLm, LmOptions};

use crate::served_check::{check_item, Totals};
use crate::served_tokens;
use crate::teacher::Teacher;

/// Options of `router-lab check-served`.
#[derive(Debug, Args)]
pub struct CheckServedArgs {
    /// A served run's output directory (`router-lab eval --gateway --out DIR`).
    #[arg(long, env = "DUET_CHECK_RUN")]
    pub run: PathBuf,
    /// The LLM the gateway served: a model id under $DUET_HOME/models or a directory.
    #[arg(long, env = "DUET_LLM", default_value = DEFAULT_LLM)]
    pub llm: String,
    /// The SLM (default: the run's, from its config.json).
    #[arg(long, env = "DUET_SLM")]
    pub slm: Option<String>,
    /// ONNX Runtime intra-op threads per model (0 = one per core).
    #[arg(long, env = "DUET_THREADS", default_value_t = 0)]
    pub threads: usize,
    /// Check only the first N items.
    #[arg(long, env = "DUET_LIMIT")]
    pub limit: Option<usize>,
    /// A served token that is the model's second choice within this many nats of its first
    /// counts as a near-tie, not a difference.
    #[arg(long, env = "DUET_TIE_NATS", default_value_t = 0.05)]
    pub tie_nats: f32,
}

/// Run it.
pub fn run(args: CheckServedArgs) -> anyhow::Result<()> {
    let mut items = served_tokens::read(&args.run.join(served_tokens::FILE))?;
    if let Some(n) = args.limit {
        items.truncate(n);
    }
    if items.is_empty() {
        bail!("{} holds no items", args.run.join(served_tokens::FILE).display());
    }
    let slm_id = match &args.slm {
        Some(s) => s.clone(),
        None => run_slm(&args.run)?,
    };
    let opts = LmOptions { threads: args.threads, max_context: 4096, ..LmOptions::default() };
    let mut slm = CausalLm::load(ModelFiles::locate(&slm_id)?, &opts)?;
    let mut llm = CausalLm::load(ModelFiles::locate(&args.llm)?, &opts)?;
    eprintln!("check-served: {} items of {}, SLM {}, LLM {}", items.len(), args.run.display(), Teacher::id(&slm), Teacher::id(&llm));
    let diff_path = args.run.join("served-check-differences.jsonl");
    let mut diffs = std::fs::File::create(&diff_path).with_context(|| format!("creating {}", diff_path.display()))?;
    let mut totals = Totals::default();
    let started = Instant::now();
    for (n, item) in items.iter().enumerate() {
        let mut sequence = item.prompt.clone();
        sequence.extend_from_slice(&item.tokens);
        let row = [(sequence.as_slice(), item.prompt.len())];
        let llm_choices = llm.choices(&row, true)?.pop().unwrap_or_default();
        let slm_choices = slm.choices(&row, true)?.pop().unwrap_or_default();
        let check = check_item(item, &llm_choices, &slm_choices, args.tie_nats)?;
        for d in &check.differences {
            writeln!(diffs, "{}", serde_json::to_string(d)?)?;
        }
        totals.add(&check);
        if (n + 1) % 10 == 0 || n + 1 == items.len() {
            eprintln!("check-served: {} items, {} equal, LLM positions {} ({} differ) [{:.0} s]", totals.items, totals.items_equal, totals.llm.judged, totals.llm.differ, started.elapsed().as_secs_f64());
        }
    }
    let summary = serde_json::json!({
        "run": args.run.display().to_string(),
        "slm": slm_id,
        "llm": args.llm,
        "tie_nats": args.tie_nats,
        "totals": totals,
        "seconds": started.elapsed().as_secs_f64(),
    });
    let text = serde_json::to_string_pretty(&summary)?;
    std::fs::write(args.run.join("served-check.json"), &text)?;
    println!("{text}");
    if totals.llm.differ + totals.slm.differ > 0 {
        bail!("{} positions differ from the reference beyond a near-tie (listed in {})", totals.llm.differ + totals.slm.differ, diff_path.display());
    }
    Ok(())
}

/// The SLM a served run used (its config.json's `slm`).
fn run_slm(run: &std::path::Path) -> anyhow::Result<String> {
    let path = run.join("config.json");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?).with_context(|| format!("parsing {}", path.display()))?;
    config["slm"].as_str().map(str::to_string).with_context(|| format!("{} names no slm; pass --slm", path.display()))
}
