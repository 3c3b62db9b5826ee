//! Batching gain of the embedded backend: B sessions escalate together, each asking for the
//! next token after a short delta, for several steps; tokens/s at each B against B = 1.

use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use cloud_gateway::batcher::backend::{Backend, LlmRequest, EmbeddedBackend, EmbeddedOptions};
use cloud_gateway::sessions::SessionKey;
use common::sampling::SamplingParams;
use model_runtime::model_files::DEFAULT_LLM;
use serde::Serialize;

/// Options of `loadtest batching`.
#[derive(Debug, Args)]
pub struct BatchingArgs {
    /// LLM model id or directory.
    #[arg(long, default_value = DEFAULT_LLM)]
    pub model: String,
    /// Batch sizes to measure (the first is the baseline).
    #[arg(long, value_delimiter = ',', default_value = "1,8,16")]
    pub batches: Vec<usize>,
    /// Context each session starts with.
    #[arg(long, default_value_t = 128)]
    pub context: usize,
    /// New tokens each escalation carries (1 = every token escalated; ~14 = 7 % escalation).
    #[arg(long, value_delimiter = ',', default_value = "1,14")]
    pub deltas: Vec<usize>,
    /// Timed escalation rounds per configuration.
    #[arg(long, default_value_t = 6)]
    pub steps: usize,
    /// ONNX Runtime threads (0 = all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
}

#[derive(Serialize)]
struct Point {
    delta: usize,
    batch: usize,
    tokens_per_s: f64,
    ms_per_batch: f64,
    gain_vs_batch1: f64,
}

/// Run the measurement.
pub fn run(args: BatchingArgs) -> anyhow::Result<()> {
    let max_b = args.batches.iter().copied().max().unwrap_or(1);
    let mut backend = EmbeddedBackend::load(&EmbeddedOptions {
        model: args.model.clone(),
        threads: args.threads,
        max_context: (args.context + (args.steps + 2) * args.deltas.iter().copied().max().unwrap_or(1) + 64).next_power_of_two(),
        max_cached_sessions: max_b,
    })?;
    let mut points = Vec::new();
    for &delta in &args.deltas {
        let mut base = None;
        for &b in &args.batches {
            let device: Arc<str> = Arc::from(format!("bench-{delta}-{b}"));
            let mut contexts: Vec<Vec<u32>> = (0..b).map(|s| (0..args.context).map(|i| (100 + 7 * i + 131 * s) as u32 % 150_000).collect()).collect();
            let req = |s: usize, ctx: &Vec<u32>, seq: u32| LlmRequest {
                session: SessionKey { device: device.clone(), session_id: s as u64 },
                context: Arc::from(ctx.as_slice()),
                sampling: SamplingParams::default(),
                seq,
                draft: Arc::from([]),
            };
            // Warm-up: prefill every session's context (not timed).
            let warm: Vec<_> = contexts.iter().enumerate().map(|(s, c)| req(s, c, 0)).collect();
            for r in warm.chunks(1) {
                backend.next_tokens(r);
            }
            let t = Instant::now();
            for step in 0..args.steps {
                for (s, c) in contexts.iter_mut().enumerate() {
                    for j in 0..delta {
                        c.push((500 + 3 * step + 11 * j + s) as u32);
                    }
                }
                let batch: Vec<_> = contexts.iter().enumerate().map(|(s, c)| req(s, c, step as u32 + 1)).collect();
                for r in backend.next_tokens(&batch) {
                    r?;
                }
            }
            let secs = t.elapsed().as_secs_f64();
            let tps = (b * args.steps) as f64 / secs;
            let base_tps = *base.get_or_insert(tps);
            points.push(Point { delta, batch: b, tokens_per_s: tps, ms_per_batch: secs * 1e3 / args.steps as f64, gain_vs_batch1: tps / base_tps });
            eprintln!("delta {delta} batch {b}: {tps:.2} tokens/s ({:.2}x)", tps / base_tps);
        }
    }
    println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "model": args.model, "context": args.context, "steps": args.steps, "points": points }))?);
    Ok(())
}
