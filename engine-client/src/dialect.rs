//! The mapping between Duet's requests and one engine's HTTP API, as pure functions (no I/O),
//! so that each engine's mapping is tested field by field against its documented bodies
//! without a server; and the JSON helpers the dialects share.

use std::fmt;

use crate::{DraftCheckRequest, EngineError, EngineKind, EngineModel, EngineReply, HttpCall, NextTokenRequest};

/// The mapping between Duet's requests and one engine's HTTP API: pure functions, no I/O.
pub trait Dialect: Send + Sync + fmt::Debug {
    /// Which engine this speaks to.
    fn kind(&self) -> EngineKind;
    /// The call that asks for the next token(s).
    fn next_token_call(&self, request: &NextTokenRequest<'_>) -> HttpCall;
    /// Read the answer to [`Dialect::next_token_call`] (a 2xx body; errors are mapped by the
    /// client before this is called).
    fn parse_next_token(&self, body: &[u8]) -> Result<EngineReply, EngineError>;
    /// Path that answers 200 when the engine can serve.
    fn health_path(&self) -> &'static str;
    /// The call that describes the served model.
    fn model_info_call(&self) -> HttpCall;
    /// Read [`Dialect::model_info_call`]'s answer.
    fn parse_model_info(&self, body: &[u8]) -> Result<EngineModel, EngineError>;
    /// The call that tokenizes `text` without special tokens, if the engine offers one
    /// (a server started without a tokenizer does not).
    fn tokenize_call(&self, text: &str) -> Option<HttpCall>;
    /// Read [`Dialect::tokenize_call`]'s answer.
    fn parse_tokenize(&self, body: &[u8]) -> Result<Vec<u32>, EngineError>;
    /// The one call that checks a greedy draft (what it costs is in each dialect's module).
    fn draft_check_call(&self, request: &DraftCheckRequest<'_>) -> HttpCall;
    /// Read its answer (a 2xx body): [`EngineReply::tokens`] are the LLM's greedy choices at
    /// the hard position and after each draft token, in order, at least one and at most the
    /// draft's length plus one. A choice after the first that differs from the draft may be
    /// conditioned on the engine's own tokens rather than the draft's: the acceptance rule
    /// never reads it.
    fn parse_draft_check(&self, request: &DraftCheckRequest<'_>, body: &[u8]) -> Result<EngineReply, EngineError>;
}

/// A prompt-logprob list aligned on the sequence: entry `i` is position `i` when the list has
/// one entry per token (the first one null), and a list one shorter (no leading null) is
/// aligned on its end. The entries of `positions`, or an error naming the engine.
pub(crate) fn aligned_positions<'a>(entries: &'a [serde_json::Value], tokens: usize, positions: std::ops::Range<usize>, engine: &str) -> Result<&'a [serde_json::Value], EngineError> {
    let offset = tokens.checked_sub(entries.len()).filter(|&o| o <= positions.start);
    match offset {
        Some(o) => Ok(&entries[positions.start - o..positions.end - o]),
        None => Err(EngineError::BadResponse(format!("{engine} returned {} prompt logprob entries for {tokens} tokens, positions {positions:?} wanted", entries.len()))),
    }
}

/// Parse a JSON body, with an error that names the engine's API.
pub(crate) fn parse_json(body: &[u8]) -> Result<serde_json::Value, EngineError> {
    serde_json::from_slice(body).map_err(|e| {
        let head = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
        EngineError::BadResponse(format!("not JSON ({e}): {head:?}"))
    })
}

/// The first model of an OpenAI-style `GET /v1/models` list (`data[0]`) and its `id`, as
/// llama-server and vLLM answer it.
pub(crate) fn first_listed_model<'a>(v: &'a serde_json::Value, engine: &str) -> Result<(&'a serde_json::Value, &'a str), EngineError> {
    let missing = |field: &str| EngineError::BadResponse(format!("{engine} model list lacks `{field}`"));
    let model = v.get("data").and_then(serde_json::Value::as_array).and_then(|d| d.first()).ok_or_else(|| missing("data[0]"))?;
    let id = model.get("id").and_then(serde_json::Value::as_str).ok_or_else(|| missing("data[0].id"))?;
    Ok((model, id))
}

/// A JSON number as a token id, refusing negatives, fractions and ids beyond u32.
pub(crate) fn token_id(v: &serde_json::Value) -> Result<u32, EngineError> {
    v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(|| EngineError::BadResponse(format!("token id {v} is not a u32")))
}
