//! `edge-node bench`: prefill time, decode speed and its growth with context, peak memory.
//!
//! docs/src/benchmarks/device-decode.md quotes this command; `deploy/bench/slm_decode.sh` runs
//! it next to the onnxruntime-genai baseline on the same model files.

use std::time::Instant;

use clap::Args;
use model_runtime::{CausalLm, KvCache};
use common::sampling::argmax;
use serde::Serialize;

use edge_node::args::ModelArgs;
use crate::proc_stats::peak_rss_mib;

/// Options of `edge-node bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt length for the prefill measurement.
    #[arg(long, default_value_t = 256)]
    pub prefill_tokens: usize,
    /// Decode steps timed at each context length.
    #[arg(long, default_value_t = 64)]
    pub decode_tokens: usize,
    /// Context lengths at which decode is timed (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "128,1024")]
    pub contexts: Vec<usize>,
    /// Repetitions (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Also time a trained router's scoring (features + MLP), the per-token work it adds to an
    /// SLM step, and report it as a share of the step at the smallest context: `default` (the
    /// router shipped for this SLM) or a router file, as `generate --router` takes.
    #[arg(long, env = "DUET_ROUTER")]
    pub router: Option<String>,
}

#[derive(Serialize)]
struct RouterCost {
    file: String,
    /// Median time of one scoring call (distribution stats are computed by the decode loop
    /// anyway, so this is only the MLP and feature assembly).
    score_us: f64,
    /// The same with the distribution statistics (top probability, entropy) included.
    score_with_stats_us: f64,
    /// score_with_stats_us over one SLM decode step at the smallest context.
    share_of_step: f64,
}

#[derive(Serialize)]
struct DecodeAt {
    context: usize,
    ms_per_token: f64,
    tokens_per_s: f64,
    /// Every repetition's ms/token, in order: their spread is this process's own noise, to set
    /// against the spread between processes (deploy/bench/slm_decode.sh prints both).
    runs_ms_per_token: Vec<f64>,
}

#[derive(Serialize)]
struct Report {
    model: String,
    precision: String,
    threads: usize,
    prefill_tokens: usize,
    prefill_ms: f64,
    /// Every repetition's prefill time, in order.
    prefill_runs_ms: Vec<f64>,
    decode: Vec<DecodeAt>,
    /// ms/token at the largest context over ms/token at the smallest.
    context_growth_ratio: f64,
    peak_rss_mib: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    router: Option<RouterCost>,
}

/// Median microseconds of router scoring on real SLM outputs.
fn time_router(which: &str, lm: &mut CausalLm, tok: &model_runtime::tokenizer::Tokenizer, cache: &mut KvCache, step_ms: f64) -> anyhow::Result<RouterCost> {
    let (model, name) = edge_node::args::trained_router(which, lm.manifest(), tok.fingerprint())?
        .ok_or_else(|| anyhow::anyhow!("--router {which}: no trained router to time for {}", lm.manifest().id))?;
    let mut router = edge_node::routing::router::MlpRouter::from_model(model);
    cache.clear();
    let out = lm.forward(cache, &filler(tok, 64)?)?;
    let dist = common::sampling::distribution_stats(&out.logits)?;
    let input = edge_node::routing::router::RouterInput { hidden: &out.hidden, stats: &dist };
    use edge_node::routing::router::Router;
    let n = 2000;
    let mut sink = 0.0f32;
    let (mut plain, mut with_stats) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..n {
            sink += router.confidence(std::hint::black_box(&input));
        }
        plain.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
        let t = Instant::now();
        for _ in 0..n / 10 {
            let d = common::sampling::distribution_stats(std::hint::black_box(&out.logits))?;
            sink += router.confidence(&edge_node::routing::router::RouterInput { hidden: &out.hidden, stats: &d });
        }
        with_stats.push(t.elapsed().as_secs_f64() * 1e6 / (n / 10) as f64);
    }
    std::hint::black_box(sink);
    let with = median(with_stats);
    Ok(RouterCost { file: name, score_us: median(plain), score_with_stats_us: with, share_of_step: with / 1e3 / step_ms })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Realistic token ids: the tokenizer's encoding of varied text, repeated to length.
fn filler(tok: &model_runtime::tokenizer::Tokenizer, n: usize) -> anyhow::Result<Vec<u32>> {
    let base = tok.encode(
        "The quick brown fox jumps over the lazy dog. def fibonacci(n):\n    if n < 2:\n        return n\n    \
         return fibonacci(n - 1) + fibonacci(n - 2)\nPack my box with five dozen liquor jugs; 0123456789.\n",
    )?;
    Ok(base.iter().copied().cycle().take(n).collect())
}

fn time_decode(lm: &mut CausalLm, cache: &mut KvCache, context: &[u32], steps: usize) -> anyhow::Result<f64> {
    cache.clear();
    let mut out = lm.forward(cache, context)?;
    let t = Instant::now();
    for _ in 0..steps {
        let next = argmax(&out.logits).map(|(i, _)| i).unwrap_or(0);
        lm.forward_into(cache, &[next], &mut out)?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e3 / steps as f64)
}

/// Run the command; prints one JSON report.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.repeat > 0 && args.decode_tokens > 0, "--repeat and --decode-tokens must be > 0");
    anyhow::ensure!(!args.contexts.is_empty(), "--contexts needs at least one length");
    let need = args.contexts.iter().copied().max().unwrap_or(0).max(args.prefill_tokens) + args.decode_tokens + 1;
    let mut model = args.model.clone();
    model.max_context = model.max_context.max(need);
    let (mut lm, tok) = model.load()?;
    let mut cache = lm.new_cache(Some(need))?;
    // Warm-up: first runs allocate and pack weights, and the first run of each input length
    // plans and allocates its memory (ONNX Runtime's memory patterns; the huge-page pass for
    // memory new to the process, left to finish). genai_baseline.py warms up the same lengths.
    let warm = filler(&tok, 32)?;
    time_decode(&mut lm, &mut cache, &warm, 4)?;
    for &n in std::iter::once(&args.prefill_tokens).chain(&args.contexts) {
        cache.clear();
        lm.forward(&mut cache, &filler(&tok, n.max(1))?)?;
    }
    lm.wait_for_huge_pages(std::time::Duration::from_secs(5));

    let prompt = filler(&tok, args.prefill_tokens)?;
    let mut prefill = Vec::new();
    for _ in 0..args.repeat {
        cache.clear();
        let t = Instant::now();
        lm.forward(&mut cache, &prompt)?;
        prefill.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut decode = Vec::new();
    for &ctx in &args.contexts {
        let context = filler(&tok, ctx.max(1))?;
        let mut runs = Vec::new();
        for _ in 0..args.repeat {
            runs.push(time_decode(&mut lm, &mut cache, &context, args.decode_tokens)?);
        }
        let ms = median(runs.clone());
        decode.push(DecodeAt { context: ctx, ms_per_token: ms, tokens_per_s: 1e3 / ms, runs_ms_per_token: runs });
    }
    let first = decode.first().map(|d| d.ms_per_token).unwrap_or(1.0);
    let router = match &args.router {
        Some(p) => Some(time_router(p, &mut lm, &tok, &mut cache, first)?),
        None => None,
    };
    let last = decode.last().map(|d| d.ms_per_token).unwrap_or(1.0);
    let threads = if args.model.threads == 0 { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) } else { args.model.threads };
    let report = Report {
        model: lm.manifest().id.clone(),
        precision: lm.manifest().precision.clone(),
        threads,
        prefill_tokens: args.prefill_tokens,
        prefill_ms: median(prefill.clone()),
        prefill_runs_ms: prefill,
        decode,
        context_growth_ratio: last / first,
        peak_rss_mib: peak_rss_mib(),
        router,
    };
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
