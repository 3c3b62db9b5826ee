//! Request bodies read field by field, so that a wrong type names its parameter, and every
//! OpenAI parameter this server does not implement is refused (400 with `param`) instead of
//! ignored. Fields that change nothing here (`model`, `user`, `metadata`, ...) and unknown
//! fields are ignored, as OpenAI-compatible servers do.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::api::{DuetParams, Stop};
use super::error::{kind, ApiError};
use super::messages;
use model_runtime::chat::Turn;

/// Most choices one request may ask for (prompts × `n`): they run one after another.
pub const MAX_CHOICES: usize = 64;
/// Most alternatives per position (`top_logprobs` on chat, OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;
/// Most alternatives per position (`logprobs` on completions, OpenAI's limit).
pub const MAX_COMPLETION_LOGPROBS: usize = 5;

/// What both endpoints take, checked.
#[derive(Debug, Default)]
pub struct Params {
    /// `max_tokens` or `max_completion_tokens`.
    pub max_tokens: Option<usize>,
    /// Sampling temperature (OpenAI's default 1).
    pub temperature: Option<f32>,
    /// Nucleus mass.
    pub top_p: Option<f32>,
    /// Reproducible sampling (choice `i` of `n` uses `seed + i`).
    pub seed: Option<u64>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// Server-sent events.
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with `usage` and no choices.
    pub include_usage: bool,
    /// Answers per prompt.
    pub n: usize,
    /// Logprobs asked for: `Some(k)` = the chosen token's and the `k` likeliest.
    pub logprobs: Option<usize>,
    /// Duet's routing controls.
    pub duet: DuetParams,
}

/// `POST /v1/chat/completions`, read.
#[derive(Debug)]
pub struct ChatRequest {
    /// The conversation, in the chat template's terms.
    pub turns: Vec<Turn>,
    /// The rest.
    pub params: Params,
}

/// One prompt of `/v1/completions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// Text, tokenized here.
    Text(String),
    /// Token ids, used as they are (what evaluation harnesses send).
    Tokens(Vec<u32>),
}

/// `POST /v1/completions`, read.
#[derive(Debug)]
pub struct CompletionRequest {
    /// One choice (or `n`) per prompt.
    pub prompts: Vec<Prompt>,
    /// Return the prompt before the answer (with its logprobs, when asked).
    pub echo: bool,
    /// The rest.
    pub params: Params,
}

/// Which endpoint a body is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completions,
}

/// Read a chat body.
pub fn chat(body: Value) -> Result<ChatRequest, ApiError> {
    let mut map = object(body)?;
    refuse_unsupported(&map, Endpoint::Chat)?;
    let turns = messages::turns(map.remove("messages").unwrap_or(Value::Null))?;
    let mut params = common(&mut map)?;
    let logprobs = take::<bool>(&mut map, "logprobs")?.unwrap_or(false);
    let top = take::<usize>(&mut map, "top_logprobs")?;
    params.logprobs = match (logprobs, top) {
        (_, Some(k)) if k > MAX_TOP_LOGPROBS => return Err(ApiError::invalid(format!("`top_logprobs` is at most {MAX_TOP_LOGPROBS}"), Some("top_logprobs"))),
        (false, Some(k)) if k > 0 => return Err(ApiError::invalid("`top_logprobs` needs `logprobs: true`", Some("top_logprobs"))),
        (true, k) => Some(k.unwrap_or(0)),
        (false, _) => None,
    };
    check_streaming(&params, 1)?;
    Ok(ChatRequest { turns, params })
}

/// Read a completions body.
pub fn completion(body: Value) -> Result<CompletionRequest, ApiError> {
    let mut map = object(body)?;
    refuse_unsupported(&map, Endpoint::Completions)?;
    let prompts = prompts(map.remove("prompt").unwrap_or(Value::Null))?;
    let mut params = common(&mut map)?;
    params.logprobs = take::<usize>(&mut map, "logprobs")?;
    if params.logprobs.is_some_and(|k| k > MAX_COMPLETION_LOGPROBS) {
        return Err(ApiError::invalid(format!("`logprobs` is at most {MAX_COMPLETION_LOGPROBS}"), Some("logprobs")));
    }
    let echo = take::<bool>(&mut map, "echo")?.unwrap_or(false);
    check_streaming(&params, prompts.len())?;
    if echo && params.stream {
        return Err(ApiError::unsupported("echo", "only without `stream`"));
    }
    Ok(CompletionRequest { prompts, echo, params })
}

fn object(body: Value) -> Result<Map<String, Value>, ApiError> {
    match body {
        Value::Object(map) => Ok(map),
        other => Err(ApiError::invalid(format!("the body must be a JSON object, not {}", kind(&other)), None)),
    }
}

/// Remove and read one field; `null` is absent; a wrong type is a 400 naming the field.
pub fn take<T: DeserializeOwned>(map: &mut Map<String, Value>, key: &str) -> Result<Option<T>, ApiError> {
    match map.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v).map(Some).map_err(|e| ApiError::invalid(format!("`{key}`: {e}"), Some(key))),
    }
}

fn common(map: &mut Map<String, Value>) -> Result<Params, ApiError> {
    let max_completion_tokens = take::<usize>(map, "max_completion_tokens")?;
    let max_tokens = take::<usize>(map, "max_tokens")?;
    let n = take::<usize>(map, "n")?.unwrap_or(1);
    if n == 0 || n > MAX_CHOICES {
        return Err(ApiError::invalid(format!("`n` must be between 1 and {MAX_CHOICES}"), Some("n")));
    }
    if let Some(best_of) = take::<usize>(map, "best_of")? {
        if best_of != n {
            return Err(ApiError::unsupported("best_of", "every generated choice is returned (give `n` alone)"));
        }
    }
    let stream_options = take::<Map<String, Value>>(map, "stream_options")?.unwrap_or_default();
    let include_usage = match stream_options.get("include_usage") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(ApiError::invalid(format!("`stream_options.include_usage` must be a boolean, not {}", kind(other)), Some("stream_options.include_usage"))),
    };
    let duet = take::<DuetParams>(map, "duet")?.unwrap_or_default();
    Ok(Params {
        max_tokens: max_completion_tokens.or(max_tokens),
        temperature: take(map, "temperature")?,
        top_p: take(map, "top_p")?,
        seed: take(map, "seed")?,
        stop: take::<Stop>(map, "stop")?.map(Stop::into_vec).unwrap_or_default(),
        stream: take(map, "stream")?.unwrap_or(false),
        include_usage,
        n,
        logprobs: None,
        duet,
    })
}

/// Several choices, or logprobs, are returned only in a whole body.
fn check_streaming(p: &Params, prompts: usize) -> Result<(), ApiError> {
    if !p.stream {
        return Ok(());
    }
    if p.n > 1 {
        return Err(ApiError::unsupported("n", "several choices are generated one after another, so only without `stream`"));
    }
    if prompts > 1 {
        return Err(ApiError::unsupported("prompt", "a list of prompts is answered only without `stream`"));
    }
    if p.logprobs.is_some() {
        return Err(ApiError::unsupported("logprobs", "logprobs are computed after the answer, so only without `stream`"));
    }
    Ok(())
}

/// `prompt`: a string, a list of strings, a list of token ids, or a list of such lists.
fn prompts(v: Value) -> Result<Vec<Prompt>, ApiError> {
    let bad = |what: &str| ApiError::invalid(format!("`prompt` must be a string, a list of strings, a list of token ids or a list of such lists; {what}"), Some("prompt"));
    let list = match v {
        Value::String(s) => vec![Prompt::Text(s)],
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_number) => vec![Prompt::Tokens(token_ids(&items).ok_or_else(|| bad("a token id is not a non-negative integer"))?)],
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::String(s) => Ok(Prompt::Text(s)),
                Value::Array(ids) => token_ids(&ids).map(Prompt::Tokens).ok_or_else(|| bad("a token id is not a non-negative integer")),
                other => Err(bad(&format!("got a list holding {}", kind(&other)))),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Value::Null => return Err(ApiError::invalid("`prompt` is required", Some("prompt"))),
        other => return Err(bad(&format!("got {}", kind(&other)))),
    };
    if list.is_empty() || list.len() > MAX_CHOICES {
        return Err(ApiError::invalid(format!("`prompt` must hold between 1 and {MAX_CHOICES} prompts"), Some("prompt")));
    }
    if list.iter().any(|p| matches!(p, Prompt::Text(t) if t.is_empty()) || matches!(p, Prompt::Tokens(t) if t.is_empty())) {
        return Err(ApiError::invalid("`prompt` is empty", Some("prompt")));
    }
    Ok(list)
}

fn token_ids(items: &[Value]) -> Option<Vec<u32>> {
    items.iter().map(|v| v.as_u64().and_then(|id| u32::try_from(id).ok())).collect()
}

/// OpenAI parameters that would change the answer and that this server does not implement:
/// refused when set to anything but their no-op value.
fn refuse_unsupported(map: &Map<String, Value>, endpoint: Endpoint) -> Result<(), ApiError> {
    const NO_TOOLS: &str = "tool definitions are not offered to the model and its tool calls are not parsed (tool calls and results in `messages` are fine)";
    // A parameter's name, why it is refused, and whether a value is its no-op.
    type Unsupported = (&'static str, &'static str, fn(&Value) -> bool);
    let refused: &[Unsupported] = &[
        ("tools", NO_TOOLS, is_empty),
        ("functions", NO_TOOLS, is_empty),
        ("tool_choice", NO_TOOLS, |v| is_empty(v) || v == "none" || v == "auto"),
        ("function_call", NO_TOOLS, |v| is_empty(v) || v == "none" || v == "auto"),
        ("response_format", "no constrained decoding (JSON mode, JSON schema) on the device; ask for JSON in the prompt instead", |v| is_empty(v) || v.get("type").is_some_and(|t| t == "text")),
        ("logit_bias", "the sampler takes no per-token bias", is_empty),
        ("frequency_penalty", "the sampler has no repetition penalties", is_zero),
        ("presence_penalty", "the sampler has no repetition penalties", is_zero),
        ("audio", "the device's model reads and writes text only", is_empty),
        ("modalities", "the device's model reads and writes text only", |v| is_empty(v) || *v == serde_json::json!(["text"])),
        ("prediction", "no predicted outputs", is_empty),
        ("web_search_options", "the device does not search the web", is_empty),
        ("reasoning_effort", "the model does not reason in a separate channel", is_empty),
        ("suffix", "no fill-in-the-middle through this parameter", is_empty),
        ("store", "this server stores no completions", |v| is_empty(v) || *v == Value::Bool(false)),
    ];
    for (name, why, allowed) in refused {
        let applies = !matches!((endpoint, *name), (Endpoint::Chat, "suffix"));
        if let Some(v) = map.get(*name).filter(|_| applies) {
            if !allowed(v) {
                return Err(ApiError::unsupported(name, why));
            }
        }
    }
    Ok(())
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Number(_) => false,
    }
}

fn is_zero(v: &Value) -> bool {
    v.is_null() || v.as_f64() == Some(0.0)
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
