//! Start-up of an engine pool: speak to every worker in its dialect and refuse any worker that
//! serves another vocabulary (each worker: `engine_client::connect`), serve as soon as one
//! worker has passed (the rest join as they pass, [`super::discovery`]), and measure a first
//! service time.

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use engine_client::connect::{expected_vocabulary, tokenizer_path};

use super::discovery::{Discovery, Resolve, SystemResolver};
use super::pool::admission::DEFAULT_START;
use super::pool::{EnginePool, PoolConfig};
use super::verify::ExpectedVocabulary;
use super::NextTokenRequest;
use crate::dispatch::admission::CostModel;
use crate::dispatch::ModelFacts;

/// Context length assumed for engines that do not report theirs.
pub const DEFAULT_ENGINE_CONTEXT: usize = 4096;

/// Connect to the engines of `config` through the system resolver: see [`connect_with`].
pub async fn connect(config: PoolConfig, expected: &ExpectedVocabulary, wait: Duration) -> anyhow::Result<(EnginePool, ModelFacts)> {
    connect_with(config, expected, wait, Arc::new(SystemResolver)).await
}

/// Check the engines of `config` against `expected` (`dns+` entries: every address `resolver`
/// gives for their name), waiting up to `wait` for engines still loading, and return the pool
/// as soon as **one** worker has passed, with the facts devices will be told (that worker's
/// model). The other workers join the pool as their checks pass; discovered names are resolved
/// again every `config.resolve_interval` ([`Discovery`]). Fails when no worker passes within
/// `wait`, or every one was refused (another vocabulary, ...), naming each and why.
pub async fn connect_with(config: PoolConfig, expected: &ExpectedVocabulary, wait: Duration, resolver: Arc<dyn Resolve>) -> anyhow::Result<(EnginePool, ModelFacts)> {
    let mut discovery = Discovery::new(config.engines.clone(), resolver, expected.clone(), wait, config.resolve_interval, config.refused_retry);
    let (client, rank, model) = discovery.start(wait).await?;
    tracing::info!(worker = client.label(), model = %model.id, vocab = ?model.vocab_size, context = ?model.max_context, "engine verified: serving (other workers join as their checks pass)");
    let vocab_size = model.vocab_size.unwrap_or(expected.vocab_size);
    let facts = ModelFacts {
        llm_id: model.id.rsplit('/').next().unwrap_or(&model.id).to_string(),
        tokenizer_fingerprint: expected.fingerprint.clone(),
        vocab_size,
        max_context: model.max_context.unwrap_or(DEFAULT_ENGINE_CONTEXT),
    };
    let mut pool = EnginePool::with_worker(config, client, rank, vocab_size);
    pool.set_service_ms(warm_up(&pool).await);
    let task = tokio::spawn(discovery.run(Arc::downgrade(pool.members()), facts.clone()));
    pool.attach_discovery(task.abort_handle());
    Ok((pool, facts))
}

/// A one-token request on the first worker, for the service time devices are first told;
/// 0 (the first real escalations then report) if it fails or takes longer than
/// [`WARM_UP_LIMIT`]. Bounded so that a gateway restarting while engines are saturated (its
/// request queued behind the other replicas') starts in time: every worker once, 30 s each, kept
/// a restarted replica from opening its ports for most of a minute under load.
///
/// Then, within the same limit, a prompt of [`WARM_UP_PREFILL`] new tokens: the time per token
/// of prefill beyond the first request's is where the workers' cost models start
/// ([`EnginePool::set_start`], for admission by cost) until their requests teach them.
async fn warm_up(pool: &EnginePool) -> u32 {
    let sampling = Default::default();
    let request = NextTokenRequest { context: &[0], sampling: &sampling, seed: None, max_new_tokens: 1, top_logprobs: 0, slot: None };
    let Some(w) = pool.workers().first().cloned() else { return 0 };
    let t = Instant::now();
    let one_ms = match w.client().next_token(&request, WARM_UP_LIMIT).await {
        Ok(_) => t.elapsed().as_secs_f64() * 1e3,
        Err(e) => {
            tracing::warn!(worker = w.label(), error = %e, "engine warm-up request failed or was slow: the first escalations will measure the service time");
            return 0;
        }
    };
    let prompt: Vec<u32> = (0..WARM_UP_PREFILL as u32).map(|i| 100 + i).collect();
    let long = NextTokenRequest { context: &prompt, ..request };
    let t = Instant::now();
    let token_ms = match w.client().next_token(&long, WARM_UP_LIMIT.saturating_sub(Duration::from_secs_f64(one_ms / 1e3))).await {
        Ok(_) => (t.elapsed().as_secs_f64() * 1e3 - one_ms).max(0.0) / (WARM_UP_PREFILL - 1) as f64,
        Err(_) => DEFAULT_START.token_ms,
    };
    pool.set_start(CostModel { batch_ms: one_ms, token_ms });
    tracing::debug!(worker = w.label(), one_ms, token_ms, "engine warm-up: the cost model's start");
    one_ms.round().clamp(1.0, f64::from(u32::MAX)) as u32
}

/// Tokens of the warm-up's prefill, from which the time per token of prefill starts.
const WARM_UP_PREFILL: usize = 32;

/// Longest warm-up request at start-up.
pub const WARM_UP_LIMIT: Duration = Duration::from_secs(2);
