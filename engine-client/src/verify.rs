//! The start-up check: an engine must serve the vocabulary the devices tokenize with.
//!
//! Only token ids cross the network, so an engine with another tokenizer would answer every
//! escalation with tokens that mean something else: refused at start-up, with an error that
//! says which engine and why, instead of generating nonsense. The devices' tokenizer is the
//! one the gateway announces in `Welcome` (its fingerprint); an engine is checked against it by
//! what the engine can tell: its vocabulary size, and its own tokenization of a probe text
//! (engines started without a tokenizer cannot tokenize; then only the size is checked, and the
//! log says so).

use std::time::Duration;

use crate::client::EngineClient;
use crate::{EngineError, EngineModel};

/// Text whose tokenization tells tokenizers apart: words, digits, code, accents, CJK and emoji
/// (no special-token markers: engines differ in whether they parse those in text).
pub const PROBE_TEXT: &str = "Duet routes hard tokens: def f(x):\n\treturn x ** 2  # 12345 héllo 世界 🙂";

/// What the devices' tokenizer says, to check engines against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedVocabulary {
    /// Fingerprint announced to devices.
    pub fingerprint: String,
    /// Tokens in the tokenizer (an engine's embedding table may be padded beyond it).
    pub vocab_size: usize,
    /// The tokenizer's ids for [`PROBE_TEXT`] (no special tokens added).
    pub probe_ids: Vec<u32>,
}

/// Why an engine was refused at start-up.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// It did not become healthy in time.
    #[error("engine {url} is not healthy after {waited:?} (is it running and has its model loaded?)")]
    NotHealthy {
        /// The worker.
        url: String,
        /// How long the gateway waited.
        waited: Duration,
    },
    /// It could not describe its model.
    #[error("engine {url}: reading its model info failed: {source}")]
    ModelInfo {
        /// The worker.
        url: String,
        /// Why.
        source: EngineError,
    },
    /// Its vocabulary is smaller than the devices' tokenizer.
    #[error("engine {url} ({model}) has a vocabulary of {engine} tokens, but the devices' tokenizer (fingerprint {fingerprint}) has {devices}: it serves a different model family")]
    VocabularyTooSmall {
        /// The worker.
        url: String,
        /// Its model.
        model: String,
        /// Its vocabulary size.
        engine: usize,
        /// The devices' vocabulary size.
        devices: usize,
        /// The devices' tokenizer fingerprint (shortened).
        fingerprint: String,
    },
    /// It tokenizes the probe text differently.
    #[error("engine {url} ({model}) tokenizes differently from the devices' tokenizer (fingerprint {fingerprint}): probe text gave {engine_len} ids, first difference at position {at} (engine {engine_id:?}, devices {device_id:?}); it serves a different tokenizer and its token ids would mean other words")]
    TokenizerMismatch {
        /// The worker.
        url: String,
        /// Its model.
        model: String,
        /// The devices' tokenizer fingerprint (shortened).
        fingerprint: String,
        /// Ids the engine gave.
        engine_len: usize,
        /// First differing position.
        at: usize,
        /// The engine's id there.
        engine_id: Option<u32>,
        /// The devices' id there.
        device_id: Option<u32>,
    },
    /// The tokenize call failed.
    #[error("engine {url}: tokenizing the probe text failed: {source}")]
    Tokenize {
        /// The worker.
        url: String,
        /// Why.
        source: EngineError,
    },
}

/// Wait for `client` to be healthy (engines answer 503 while loading), then check its model
/// against `expected`. Returns what the engine said about its model.
pub async fn verify_engine(client: &EngineClient, expected: &ExpectedVocabulary, wait: Duration) -> Result<EngineModel, VerifyError> {
    let url = client.label().to_string();
    let started = std::time::Instant::now();
    while !client.is_healthy(Duration::from_secs(2)).await {
        if started.elapsed() >= wait {
            return Err(VerifyError::NotHealthy { url, waited: wait });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let model = client.model_info(Duration::from_secs(10)).await.map_err(|source| VerifyError::ModelInfo { url: url.clone(), source })?;
    let short = expected.fingerprint.chars().take(12).collect::<String>();
    if let Some(engine) = model.vocab_size {
        if engine < expected.vocab_size {
            return Err(VerifyError::VocabularyTooSmall { url, model: model.id, engine, devices: expected.vocab_size, fingerprint: short });
        }
    }
    match client.tokenize(PROBE_TEXT, Duration::from_secs(10)).await {
        Ok(Some(ids)) => compare_probe(&ids, expected).map_err(|(at, engine_id, device_id)| VerifyError::TokenizerMismatch {
            url: url.clone(),
            model: model.id.clone(),
            fingerprint: short,
            engine_len: ids.len(),
            at,
            engine_id,
            device_id,
        })?,
        Ok(None) => tracing::warn!(%url, model = %model.id, "the engine cannot tokenize (started without a tokenizer?): only its vocabulary size was checked against the devices' tokenizer"),
        Err(source) => return Err(VerifyError::Tokenize { url, source }),
    }
    Ok(model)
}

/// `Ok` when the engine's probe ids equal the devices'; otherwise the first differing position
/// and the ids there.
fn compare_probe(engine: &[u32], expected: &ExpectedVocabulary) -> Result<(), (usize, Option<u32>, Option<u32>)> {
    if engine == expected.probe_ids.as_slice() {
        return Ok(());
    }
    let at = engine.iter().zip(&expected.probe_ids).take_while(|(a, b)| a == b).count();
    Err((at, engine.get(at).copied(), expected.probe_ids.get(at).copied()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_difference_in_the_probe_is_reported() {
        let expected = ExpectedVocabulary { fingerprint: "f".into(), vocab_size: 10, probe_ids: vec![1, 2, 3] };
        assert_eq!(compare_probe(&[1, 2, 3], &expected), Ok(()));
        assert_eq!(compare_probe(&[1, 5, 3], &expected), Err((1, Some(5), Some(2))));
        assert_eq!(compare_probe(&[1, 2], &expected), Err((2, None, Some(3))));
    }
}
