//! Start-up of an engine pool: find the devices' tokenizer, speak to every worker in its
//! dialect, refuse any worker that serves another vocabulary, and measure a first service time.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use model_runtime::model_files::duet_home;
use model_runtime::tokenizer::Tokenizer;

use super::client::EngineClient;
use super::llamacpp::LlamaCppDialect;
use super::pool::{EnginePool, PoolConfig};
use super::sglang::SglangDialect;
use super::verify::{verify_engine, ExpectedVocabulary, PROBE_TEXT};
use super::vllm::{VllmApi, VllmDialect, OPENAPI_PATH};
use super::{Dialect, EngineKind, EngineModel, EngineSpec, HttpCall, NextTokenRequest};
use crate::backend::ModelFacts;

/// Context length assumed for engines that do not report theirs.
pub const DEFAULT_ENGINE_CONTEXT: usize = 4096;

/// Where the devices' tokenizer is: a `tokenizer.json`, a directory holding one, or a prepared
/// model id under `$DUET_HOME/models`.
pub fn tokenizer_path(spec: &str) -> PathBuf {
    let p = Path::new(spec);
    if p.is_file() {
        return p.to_path_buf();
    }
    let dir = if p.is_dir() || spec.contains('/') { p.to_path_buf() } else { duet_home().join("models").join(spec) };
    dir.join("tokenizer.json")
}

/// What engines are checked against, from the devices' tokenizer file.
pub fn expected_vocabulary(tokenizer_json: &Path) -> anyhow::Result<ExpectedVocabulary> {
    let tokenizer = Tokenizer::load(tokenizer_json, None).with_context(|| format!("loading the devices' tokenizer {} (prepare the model, or pass --engine-tokenizer)", tokenizer_json.display()))?;
    let probe_ids = tokenizer.encode(PROBE_TEXT)?;
    Ok(ExpectedVocabulary { fingerprint: tokenizer.fingerprint().to_string(), vocab_size: tokenizer.vocab_size(), probe_ids })
}

/// Connect to every engine of `config`, check each against `expected` (waiting up to `wait`
/// for engines still loading), and return the pool with the facts devices will be told.
pub async fn connect(config: PoolConfig, expected: &ExpectedVocabulary, wait: Duration) -> anyhow::Result<(EnginePool, ModelFacts)> {
    anyhow::ensure!(!config.engines.is_empty(), "no engine given (--engine KIND=URL)");
    let checks = config.engines.iter().map(|spec| {
        let spec = spec.clone();
        let expected = expected.clone();
        tokio::spawn(async move { connect_one(&spec, &expected, wait).await })
    });
    let mut clients = Vec::new();
    let mut models = Vec::new();
    for (spec, check) in config.engines.iter().zip(checks.collect::<Vec<_>>()) {
        let (client, model) = check.await.with_context(|| format!("checking {spec}"))??;
        tracing::info!(engine = %spec, model = %model.id, vocab = ?model.vocab_size, context = ?model.max_context, "engine verified");
        clients.push(client);
        models.push(model);
    }
    let vocab_size = models.iter().filter_map(|m| m.vocab_size).min().unwrap_or(expected.vocab_size);
    let facts = ModelFacts {
        llm_id: models[0].id.rsplit('/').next().unwrap_or(&models[0].id).to_string(),
        tokenizer_fingerprint: expected.fingerprint.clone(),
        vocab_size,
        max_context: models.iter().filter_map(|m| m.max_context).min().unwrap_or(DEFAULT_ENGINE_CONTEXT),
    };
    let pool = EnginePool::new(config, clients, vocab_size);
    pool.set_service_ms(warm_up(&pool).await);
    Ok((pool, facts))
}

/// One worker: the right dialect (vLLM's depends on what the server offers), then the checks.
async fn connect_one(spec: &EngineSpec, expected: &ExpectedVocabulary, wait: Duration) -> anyhow::Result<(EngineClient, EngineModel)> {
    let dialect: Arc<dyn Dialect> = match spec.kind {
        EngineKind::LlamaCpp => Arc::new(LlamaCppDialect),
        EngineKind::Sglang => Arc::new(SglangDialect::new()),
        EngineKind::Vllm => Arc::new(VllmDialect::new(VllmApi::Completions)),
    };
    let client = EngineClient::new(spec, dialect)?;
    let model = verify_engine(&client, expected, wait).await?;
    if spec.kind != EngineKind::Vllm {
        return Ok((client, model));
    }
    // vLLM: name the served model in requests, and use token-in/token-out where offered.
    let api = match client.call(&HttpCall::get(OPENAPI_PATH), Duration::from_secs(10)).await {
        Ok(body) => serde_json::from_slice(&body).map(|doc| VllmApi::from_openapi(&doc)).unwrap_or(VllmApi::Completions),
        Err(_) => VllmApi::Completions,
    };
    let dialect = Arc::new(VllmDialect::new(api).with_model(&model.id));
    Ok((EngineClient::new(spec, dialect)?, model))
}

/// A one-token request on every worker; returns the slowest time in ms (so devices' first
/// deadlines are not too short), or 0 if every worker failed it (the first real escalations
/// then report).
async fn warm_up(pool: &EnginePool) -> u32 {
    let sampling = Default::default();
    let request = NextTokenRequest { context: &[0], sampling: &sampling, seed: None, max_new_tokens: 1, top_logprobs: 0, slot: None };
    let mut slowest = 0u32;
    for w in pool.workers() {
        let t = Instant::now();
        match w.client().next_token(&request, Duration::from_secs(30)).await {
            Ok(_) => slowest = slowest.max(t.elapsed().as_millis().clamp(1, u128::from(u32::MAX)) as u32),
            Err(e) => tracing::warn!(worker = w.label(), error = %e, "engine warm-up request failed"),
        }
    }
    slowest
}
