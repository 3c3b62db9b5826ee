//! `router-lab compare-teachers`: do the in-process ONNX LLM and an engine serving the same
//! LLM give the same teacher-forced labels?
//!
//! Labels made through `--llm-engine` are only interchangeable with in-process ones if both
//! teachers choose the same token at (nearly) every position. They cannot agree everywhere:
//! the ONNX model is int4 (`MatMulNBits`), the GGUF a llama.cpp Q4_K_M, different kernels and
//! accumulation orders, so where the LLM's two best tokens are nearly tied either may win.
//! This command runs both over the same reference chains of thought (exactly the sequences and
//! positions `labels` teacher-forces) and reports the share of positions that agree and, where
//! they differ, each side's log-probability margin between its best and second-best token: a
//! disagreement at a margin of a few hundredths of a nat is a near-tie, one at several nats
//! would be a bug.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use engine_client::{EngineSpec, PromptChoice};
use model_runtime::chat::render_user;
use model_runtime::model_files::{ModelFiles, DEFAULT_LLM};
use model_runtime::tokenizer::Tokenizer;
use model_runtime::{CausalLm, LmOptions};
use serde::Serialize;

use crate::cqa_args::read_dataset;
use crate::engine_llm::EngineLlm;
use crate::teacher::Teacher;

/// Options of `router-lab compare-teachers`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The in-process LLM: a model id under $DUET_HOME/models or a directory.
    #[arg(long, env = "DUET_LLM", default_value = DEFAULT_LLM)]
    pub llm: String,
    /// The engine serving the same LLM: KIND=URL (sglang, vllm or llamacpp).
    #[arg(long, env = "DUET_LLM_ENGINE")]
    pub llm_engine: EngineSpec,
    /// ONNX Runtime intra-op threads (0 = one per core).
    #[arg(long, env = "DUET_THREADS", default_value_t = 0)]
    pub threads: usize,
    /// Items with a reference chain of thought (`prompt` and `cot` fields).
    #[arg(long, default_value = "deploy/data/commonsense_qa/train_router.jsonl")]
    pub data: PathBuf,
    /// Skip the first N usable items.
    #[arg(long, default_value_t = 0)]
    pub offset: usize,
    /// Compare N items.
    #[arg(long, default_value_t = 30)]
    pub limit: usize,
    /// Items per in-process lockstep batch.
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
    /// Write every disagreement here (JSON lines).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write every item's sequence and both teachers' choices here (JSON lines: `id`,
    /// `tokens`, `first`, `in_process`, `engine`), e.g. for `deploy/eval/teachers_float.py`.
    #[arg(long)]
    pub choices: Option<PathBuf>,
}

/// One position where the teachers differ.
#[derive(Debug, Serialize)]
struct Disagreement {
    item: String,
    position: usize,
    in_process: u32,
    engine: u32,
    in_process_text: String,
    engine_text: String,
    /// In-process log-probability of its best minus its second-best token (nats).
    in_process_margin: Option<f32>,
    /// The engine's margin, likewise.
    engine_margin: Option<f32>,
    /// Whether each side's choice is the other's runner-up (a swap of the top two).
    swapped: bool,
}

/// Run it.
pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    let files = ModelFiles::locate(&args.llm)?;
    let tok = Tokenizer::load(&files.tokenizer, Some(&files.manifest.tokenizer_fingerprint))?;
    let mut engine = EngineLlm::connect(&args.llm_engine, &files.tokenizer)?;
    let mut lm = CausalLm::load(files, &LmOptions { threads: args.threads, max_context: 4096, ..LmOptions::default() })?;
    let end = *lm.stop_tokens().first().context("the LLM has no stop token")?;
    let items: Vec<_> = read_dataset(&args.data, None)?.into_iter().filter(|i| i.prompt.is_some() && i.cot.is_some()).skip(args.offset).take(args.limit).collect();
    let mut rows = Vec::with_capacity(items.len());
    for item in &items {
        let (Some(p), Some(cot)) = (&item.prompt, &item.cot) else { continue };
        let prompt = tok.encode(&render_user(p))?;
        let first = prompt.len();
        let mut tokens = prompt;
        tokens.extend(tok.encode(cot)?);
        tokens.push(end);
        rows.push((item.id.clone(), tokens, first));
    }
    eprintln!("compare-teachers: {} items, in-process {} vs {}", rows.len(), Teacher::id(&lm), engine.id());
    let mut dump = args.choices.as_ref().map(|p| std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))).transpose()?;
    let (mut positions, mut disagreements, mut secs) = (0usize, Vec::new(), [0f64; 2]);
    for chunk in rows.chunks(args.batch.max(1)) {
        let teacher_rows: Vec<(&[u32], usize)> = chunk.iter().map(|(_, t, f)| (t.as_slice(), *f)).collect();
        let t0 = Instant::now();
        let ours = lm.choices(&teacher_rows, true)?;
        secs[0] += t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let theirs = engine.choices(&teacher_rows, true)?;
        secs[1] += t1.elapsed().as_secs_f64();
        for ((id, tokens, first), (a, b)) in chunk.iter().zip(ours.iter().zip(&theirs)) {
            anyhow::ensure!(a.len() == b.len(), "{id}: {} in-process choices, {} from the engine", a.len(), b.len());
            if let Some(f) = dump.as_mut() {
                let ids = |c: &[PromptChoice]| c.iter().map(|c| c.best.id).collect::<Vec<_>>();
                let line = serde_json::json!({"id": id, "tokens": tokens, "first": first, "in_process": ids(a), "engine": ids(b)});
                writeln!(f, "{line}")?;
            }
            positions += a.len();
            for (k, (x, y)) in a.iter().zip(b).enumerate().filter(|(_, (x, y))| x.best.id != y.best.id) {
                disagreements.push(disagreement(&tok, id, first + k, x, y)?);
            }
        }
        eprintln!("compare-teachers: {positions} positions, {} disagreements ({:.0} s in-process, {:.0} s engine)", disagreements.len(), secs[0], secs[1]);
    }
    if let Some(path) = &args.out {
        let mut f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        for d in &disagreements {
            writeln!(f, "{}", serde_json::to_string(d)?)?;
        }
    }
    println!("{}", serde_json::to_string_pretty(&summary(rows.len(), positions, &disagreements, secs, &args, engine.id()))?);
    Ok(())
}

fn disagreement(tok: &Tokenizer, item: &str, position: usize, ours: &PromptChoice, theirs: &PromptChoice) -> anyhow::Result<Disagreement> {
    let margin = |c: &PromptChoice| Some(c.best.logprob? - c.runner_up?.logprob?);
    let swapped = ours.runner_up.map(|t| t.id) == Some(theirs.best.id) && theirs.runner_up.map(|t| t.id) == Some(ours.best.id);
    Ok(Disagreement {
        item: item.to_string(),
        position,
        in_process: ours.best.id,
        engine: theirs.best.id,
        in_process_text: tok.decode(&[ours.best.id])?,
        engine_text: tok.decode(&[theirs.best.id])?,
        in_process_margin: margin(ours),
        engine_margin: margin(theirs),
        swapped,
    })
}

/// Margin bounds (nats) of the histogram buckets.
const BUCKETS: [f32; 6] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0];

fn summary(items: usize, positions: usize, d: &[Disagreement], secs: [f64; 2], args: &CompareArgs, engine: &str) -> serde_json::Value {
    let histogram = |pick: fn(&Disagreement) -> Option<f32>| {
        let mut counts = vec![0usize; BUCKETS.len() + 2];
        for m in d.iter().map(pick) {
            let slot = m.map_or(BUCKETS.len() + 1, |m| BUCKETS.iter().position(|&b| m < b).unwrap_or(BUCKETS.len()));
            counts[slot] += 1;
        }
        let mut names: Vec<String> = BUCKETS.iter().map(|b| format!("<{b}")).collect();
        names.push(format!(">={}", BUCKETS[BUCKETS.len() - 1]));
        names.push("unknown".into());
        serde_json::Value::Object(names.into_iter().zip(counts).map(|(n, c)| (n, c.into())).collect())
    };
    let mut ours: Vec<f32> = d.iter().filter_map(|x| x.in_process_margin).collect();
    ours.sort_by(f32::total_cmp);
    let quantile = |q: f64| ours.get(((ours.len() as f64 - 1.0) * q).round() as usize).copied();
    serde_json::json!({
        "data": args.data.display().to_string(),
        "offset": args.offset,
        "items": items,
        "in_process": args.llm,
        "engine": engine,
        "positions": positions,
        "agree": positions - d.len(),
        "agreement": if positions == 0 { 1.0 } else { (positions - d.len()) as f64 / positions as f64 },
        "disagreements": d.len(),
        "swapped_top_two": d.iter().filter(|x| x.swapped).count(),
        "in_process_margin_nats": { "median": quantile(0.5), "p90": quantile(0.9), "max": ours.last() },
        "in_process_margin_histogram": histogram(|x| x.in_process_margin),
        "engine_margin_histogram": histogram(|x| x.engine_margin),
        "seconds": { "in_process": secs[0], "engine": secs[1] },
    })
}
