//! One engine worker made ready to use: the devices' tokenizer found, the worker's dialect picked
//! (vLLM's depends on what the server offers), and the start-up checks passed
//! ([`crate::verify`]). The gateway's pool connects each of its workers this way; the router
//! lab its one teacher.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use model_runtime::model_files::duet_home;
use model_runtime::tokenizer::Tokenizer;

use crate::client::EngineClient;
use crate::llamacpp::LlamaCppDialect;
use crate::prompt_choices::{both, ChoicesClient, PromptChoicesDialect};
use crate::sglang::SglangDialect;
use crate::verify::{verify_engine, ExpectedVocabulary, PROBE_TEXT};
use crate::vllm::{VllmApi, VllmDialect, OPENAPI_PATH};
use crate::{Dialect, EngineError, EngineKind, EngineModel, EngineSpec, HttpCall};

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

/// One engine at `spec`'s URL, outside any pool (the router lab's teacher): the same dialect
/// choice and start-up checks a gateway's worker passes (healthy within `wait`, the devices'
/// vocabulary), without discovery; with the prompt-choices mapping of its dialect.
pub async fn connect_single(spec: &EngineSpec, expected: &ExpectedVocabulary, wait: Duration) -> anyhow::Result<(ChoicesClient, EngineModel)> {
    if spec.discover {
        anyhow::bail!("engine {spec}: one worker is needed here, not dns+ discovery");
    }
    let (client, model, choices) = connect_dialects(spec, None, expected, wait).await?;
    Ok((ChoicesClient::new(client, choices), model))
}

/// One worker of a pool (`pin`: the address of a discovered one): the right dialect, then the
/// checks.
pub async fn connect_worker(spec: &EngineSpec, pin: Option<IpAddr>, expected: &ExpectedVocabulary, wait: Duration) -> anyhow::Result<(EngineClient, EngineModel)> {
    let (client, model, _) = connect_dialects(spec, pin, expected, wait).await?;
    Ok((client, model))
}

/// The worker's client, its model, and its dialect's prompt-choices mapping.
async fn connect_dialects(spec: &EngineSpec, pin: Option<IpAddr>, expected: &ExpectedVocabulary, wait: Duration) -> anyhow::Result<(EngineClient, EngineModel, Arc<dyn PromptChoicesDialect>)> {
    let (dialect, choices) = match spec.kind {
        EngineKind::LlamaCpp => both(LlamaCppDialect),
        EngineKind::Sglang => both(SglangDialect::new()),
        EngineKind::Vllm => both(VllmDialect::new(VllmApi::Completions)),
    };
    let client = client_for(spec, pin, dialect)?;
    let model = verify_engine(&client, expected, wait).await?;
    if spec.kind != EngineKind::Vllm {
        return Ok((client, model, choices));
    }
    // vLLM: name the served model in requests, and use token-in/token-out where offered.
    let api = match client.call(&HttpCall::get(OPENAPI_PATH), Duration::from_secs(10)).await {
        Ok(body) => serde_json::from_slice(&body).map(|doc| VllmApi::from_openapi(&doc)).unwrap_or(VllmApi::Completions),
        Err(_) => VllmApi::Completions,
    };
    let (dialect, choices) = both(VllmDialect::new(api).with_model(&model.id));
    Ok((client_for(spec, pin, dialect)?, model, choices))
}

fn client_for(spec: &EngineSpec, pin: Option<IpAddr>, dialect: Arc<dyn Dialect>) -> Result<EngineClient, EngineError> {
    match pin {
        Some(ip) => EngineClient::pinned(spec, ip, dialect),
        None => EngineClient::new(spec, dialect),
    }
}
