//! vLLM's OpenAI-compatible server, driven by token ids through one of two endpoints
//! ([`VllmApi`]).
//!
//! The mapping follows vLLM's request and response models as its source and API reference
//! (docs.vllm.ai) define them, 2025–2026:
//! - [`VllmApi::Completions`]: `POST /v1/completions` (`CompletionRequest` in
//!   `vllm/entrypoints/openai/completion/protocol.py`) with `prompt` as a list of token ids,
//!   which vLLM takes as is (no BOS added). `return_token_ids: true` (vLLM ≥ 0.10.2, PR #22587)
//!   puts the generated ids in `choices[i].token_ids` and the prompt's in
//!   `choices[i].prompt_token_ids`; older servers ignore the field (vLLM logs and drops unknown
//!   fields), so `return_tokens_as_token_ids: true` is sent too: `logprobs.tokens` then reads
//!   `"token_id:123"`, from which the ids are recovered. `logprobs` (the number of top
//!   alternatives) is at least 1 so the chosen token's `token_logprobs` entry is always there.
//! - [`VllmApi::TokenGenerate`]: the token-in/token-out `POST /inference/v1/generate`
//!   (`GenerateRequest` / `GenerateResponse` in `vllm/entrypoints/serve/disagg/protocol.py`,
//!   served by `ServingTokens` in `serving.py`; in the API reference from v0.18): `token_ids`
//!   plus a `sampling_params` object that is vLLM's own `SamplingParams` (`max_tokens`,
//!   `temperature`, `top_p`, `top_k`, `seed`, `logprobs`, ...). The answer has
//!   `choices[i].token_ids`, `choices[i].logprobs.content[j]` (`{token: "token_id:N", logprob,
//!   top_logprobs}`) and, in recent versions, `usage`. Newer servers expose it only when asked
//!   (`VLLM_ENABLE_SCALE_OUT_ENDPOINTS=1`, later `vllm serve --enable-scale-out`), which is why
//!   [`VllmApi::from_openapi`] looks for it in the server's `/openapi.json`.
//! - Sampling: temperature 0 is greedy; `top_k` -1 is "no limit" (accepted by every version; 0
//!   too on recent ones); `seed` is an int64. The penalties and `min_p` are sent as neutral
//!   because vLLM fills unset parameters from the model's `generation_config.json` (Qwen2.5's
//!   sets `repetition_penalty: 1.05`, which changes even greedy tokens).
//! - `usage.prompt_tokens`; `usage.prompt_tokens_details.cached_tokens` only on a server started
//!   with `--enable-prompt-tokens-details` (null otherwise: unknown, not 0, so the pool's
//!   admission charges such a server every session's whole context).
//! - vLLM reports an unknown logprob as -9999.0 (its floor for -inf); that is read as "none".
//! - `GET /v1/models`: `data[0].id` (the served model name requests must carry) and
//!   `data[0].max_model_len`; no vocabulary size. `POST /tokenize`
//!   `{model, prompt, add_special_tokens}` → `{count, max_model_len, tokens}`.
//!
//! - Prompt choices (the router lab's teacher, [`PromptChoicesRequest`]): always
//!   `/v1/completions` (every server has it, whichever endpoint escalations use), the greedy
//!   next-token body plus `prompt_logprobs: 1` (2 with the runner-up). The answer's
//!   `choices[0].prompt_logprobs` has one entry per prompt token, the first null, each a map
//!   from token id (a JSON key) to `{logprob, rank, decoded_token}` holding the top ones and
//!   the prompt's own token at whatever rank it has: the choice is the rank-1 entry. vLLM
//!   caps the number at `--max-logprobs` (20 by default).
//!
//! - Draft check ([`DraftCheckRequest`], a greedy escalation with a draft): the same
//!   prompt-logprobs call for context + draft with `prompt_logprobs: 1`. `prompt_logprobs` is
//!   `PromptLogprobs = list[Optional[dict[int, Logprob]]]` (`vllm/logprobs.py`, `Logprob` being
//!   `{logprob, rank, decoded_token}`), its first entry None (`vllm/v1/engine/logprobs.py`:
//!   "logprob of first prompt token is None"): the rank-1 entry at each draft position is the
//!   LLM's choice there, and the generated token (`max_tokens: 1`) its token after the whole
//!   draft. Cost: vLLM V1 ignores the prefix cache for a request with prompt log-probabilities
//!   and "recompute[s] the prefill of full prompt" (docs.vllm.ai, V1 guide, "Prompt Logprobs
//!   with Prefix Caching"), and answers an entry per prompt token: a draft check prefills the
//!   whole context and the draft, where a plain escalation prefills the delta: one pass still,
//!   but one that grows with the context (and an answer of ~100 bytes per prompt token, read up
//!   to [`crate::client::MAX_CHOICES_RESPONSE_BYTES`]).
//!
//! vLLM is not run on the project's machines (no GPU): the tests below check the mapping against
//! the bodies vLLM's documentation and protocol models describe.

use serde_json::{json, Value};

use crate::prompt_choices::PromptChoicesDialect;
use crate::{aligned_positions, first_listed_model, parse_json, token_id, Dialect, DraftCheckRequest, EngineError, EngineKind, EngineModel, EngineReply, EngineToken, HttpCall, NextTokenRequest, PromptChoice, PromptChoicesRequest};

/// Where vLLM describes its routes; read once to choose a [`VllmApi`].
pub const OPENAPI_PATH: &str = "/openapi.json";
/// The OpenAI-compatible completions endpoint.
pub const COMPLETIONS_PATH: &str = "/v1/completions";
/// The token-in/token-out endpoint.
pub const GENERATE_PATH: &str = "/inference/v1/generate";

/// vLLM's floor for a log-probability (`max(logprob, -9999.0)` in its serving code).
const LOGPROB_FLOOR: f64 = -9999.0;

/// Which vLLM endpoint carries the next-token calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VllmApi {
    /// `POST /v1/completions` with a token-id prompt: every vLLM with an OpenAI server.
    #[default]
    Completions,
    /// `POST /inference/v1/generate`: token ids in and out, no text on either side.
    TokenGenerate,
}

impl VllmApi {
    /// [`VllmApi::TokenGenerate`] when the server's `/openapi.json` ([`OPENAPI_PATH`]) lists
    /// `/inference/v1/generate`, [`VllmApi::Completions`] otherwise.
    pub fn from_openapi(doc: &Value) -> Self {
        match doc.get("paths").and_then(Value::as_object) {
            Some(paths) if paths.contains_key(GENERATE_PATH) => Self::TokenGenerate,
            _ => Self::Completions,
        }
    }
}

/// The vLLM dialect: an endpoint and, optionally, the served model name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VllmDialect {
    api: VllmApi,
    model: Option<String>,
}

impl VllmDialect {
    /// Speak `api`, without a model name (vLLM then uses the one model it serves).
    pub fn new(api: VllmApi) -> Self {
        Self { api, model: None }
    }

    /// Name the served model in every request (`data[0].id` of `/v1/models`); needed when the
    /// server serves several names (`--served-model-name a b`) or checks the name.
    pub fn with_model(self, model: impl Into<String>) -> Self {
        Self { model: Some(model.into()), ..self }
    }

    /// The endpoint in use.
    pub fn api(&self) -> VllmApi {
        self.api
    }

    /// The served model name, when set.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }
}

/// The sampling fields both endpoints share (same names in `CompletionRequest` and vLLM's
/// `SamplingParams`).
fn sampling(r: &NextTokenRequest<'_>) -> serde_json::Map<String, Value> {
    let s = r.sampling;
    let mut m = serde_json::Map::new();
    m.insert("max_tokens".into(), json!(r.max_new_tokens.max(1)));
    if s.is_greedy() {
        m.insert("temperature".into(), json!(0.0));
        m.insert("top_p".into(), json!(1.0));
        m.insert("top_k".into(), json!(-1));
    } else {
        m.insert("temperature".into(), json!(s.temperature));
        m.insert("top_p".into(), json!(s.top_p));
        m.insert("top_k".into(), json!(if s.top_k == 0 { -1 } else { i64::try_from(s.top_k).unwrap_or(i64::MAX) }));
        if let Some(seed) = r.seed {
            m.insert("seed".into(), json!(seed & i64::MAX as u64));
        }
    }
    m.insert("min_p".into(), json!(0.0));
    m.insert("repetition_penalty".into(), json!(1.0));
    m.insert("presence_penalty".into(), json!(0.0));
    m.insert("frequency_penalty".into(), json!(0.0));
    m.insert("logprobs".into(), json!(r.top_logprobs.max(1)));
    m
}

impl Dialect for VllmDialect {
    fn kind(&self) -> EngineKind {
        EngineKind::Vllm
    }

    fn next_token_call(&self, r: &NextTokenRequest<'_>) -> HttpCall {
        let mut body = serde_json::Map::new();
        if let Some(model) = &self.model {
            body.insert("model".into(), json!(model));
        }
        match self.api {
            VllmApi::Completions => {
                body.insert("prompt".into(), json!(r.context));
                body.extend(sampling(r));
                body.insert("return_token_ids".into(), json!(true));
                body.insert("return_tokens_as_token_ids".into(), json!(true));
                body.insert("stream".into(), json!(false));
                HttpCall::post(COMPLETIONS_PATH, Value::Object(body))
            }
            VllmApi::TokenGenerate => {
                body.insert("token_ids".into(), json!(r.context));
                body.insert("sampling_params".into(), Value::Object(sampling(r)));
                body.insert("stream".into(), json!(false));
                HttpCall::post(GENERATE_PATH, Value::Object(body))
            }
        }
    }

    fn parse_next_token(&self, body: &[u8]) -> Result<EngineReply, EngineError> {
        let v = parse_json(body)?;
        if let Some(error) = v.get("error").filter(|e| !e.is_null()) {
            return Err(bad(format!("vLLM reported an error: {}", clip(error))));
        }
        if v.get("object").and_then(Value::as_str) == Some("error") {
            return Err(bad(format!("vLLM reported an error: {}", v.get("message").map_or_else(|| clip(&v), clip))));
        }
        let choice = v.get("choices").and_then(Value::as_array).and_then(|c| c.first()).ok_or_else(|| missing("choices[0]"))?;
        let (ids, logprobs) = match self.api {
            VllmApi::Completions => completion_tokens(choice)?,
            VllmApi::TokenGenerate => generate_tokens(choice)?,
        };
        let tokens = ids.into_iter().zip(logprobs).map(|(id, logprob)| EngineToken { id, logprob }).collect();
        let usage = v.get("usage");
        let count = |v: Option<&Value>| v.and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok());
        Ok(EngineReply {
            tokens,
            prompt_tokens: count(usage.and_then(|u| u.get("prompt_tokens"))),
            cached_tokens: count(usage.and_then(|u| u.get("prompt_tokens_details")).and_then(|d| d.get("cached_tokens"))),
        })
    }

    fn health_path(&self) -> &'static str {
        "/health"
    }

    fn model_info_call(&self) -> HttpCall {
        HttpCall::get("/v1/models")
    }

    fn parse_model_info(&self, body: &[u8]) -> Result<EngineModel, EngineError> {
        let v = parse_json(body)?;
        let (model, id) = first_listed_model(&v, "vLLM")?;
        let max_context = model.get("max_model_len").and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok());
        Ok(EngineModel { id: id.to_string(), vocab_size: None, max_context })
    }

    fn tokenize_call(&self, text: &str) -> Option<HttpCall> {
        let mut body = json!({ "prompt": text, "add_special_tokens": false });
        if let Some(model) = &self.model {
            body["model"] = json!(model);
        }
        Some(HttpCall::post("/tokenize", body))
    }

    fn parse_tokenize(&self, body: &[u8]) -> Result<Vec<u32>, EngineError> {
        let v = parse_json(body)?;
        v.get("tokens").and_then(Value::as_array).ok_or_else(|| missing("tokens"))?.iter().map(token_id).collect()
    }

    fn draft_check_call(&self, r: &DraftCheckRequest<'_>) -> HttpCall {
        self.prompt_logprobs_call(&r.sequence(), 1)
    }

    fn parse_draft_check(&self, r: &DraftCheckRequest<'_>, body: &[u8]) -> Result<EngineReply, EngineError> {
        let sequence = r.sequence();
        let choices = choices_in(&r.prompt_choices(&sequence), body)?;
        // The call went to /v1/completions whichever endpoint escalations use.
        let next = Self::new(VllmApi::Completions).parse_next_token(body)?;
        // The generated token: the LLM's after the whole draft (the bonus).
        let bonus = *next.tokens.first().ok_or_else(|| missing("choices[0].token_ids"))?;
        let tokens = choices.iter().map(|c| c.best).chain(std::iter::once(bonus)).collect();
        Ok(EngineReply { tokens, ..next })
    }
}

/// The router lab's teacher ([`PromptChoicesDialect`]), on the same parsers as the draft check.
impl PromptChoicesDialect for VllmDialect {
    fn prompt_choices_calls(&self, r: &PromptChoicesRequest<'_>) -> Vec<HttpCall> {
        if r.positions().is_empty() {
            return Vec::new();
        }
        vec![self.prompt_logprobs_call(r.tokens, r.top_n())]
    }

    fn parse_prompt_choices(&self, r: &PromptChoicesRequest<'_>, bodies: &[Vec<u8>]) -> Result<Vec<PromptChoice>, EngineError> {
        let positions = r.positions();
        let [body] = bodies else {
            return if positions.is_empty() { Ok(Vec::new()) } else { Err(bad(format!("expected one /v1/completions answer, got {}", bodies.len()))) };
        };
        choices_in(r, body)
    }
}

impl VllmDialect {
    /// The greedy one-token `/v1/completions` call for `tokens` with the top `top_n`
    /// log-probabilities at every prompt position (`prompt_logprobs`), on either API: the
    /// prompt choices of the router lab's teacher and of a draft check.
    fn prompt_logprobs_call(&self, tokens: &[u32], top_n: u32) -> HttpCall {
        let greedy = common::sampling::SamplingParams::default();
        let next = NextTokenRequest { context: tokens, sampling: &greedy, seed: None, max_new_tokens: 1, top_logprobs: 1, slot: None };
        let completions = Self { api: VllmApi::Completions, model: self.model.clone() };
        let mut call = completions.next_token_call(&next);
        if let Some(body) = call.body.as_mut() {
            body["prompt_logprobs"] = json!(top_n);
        }
        call
    }
}

/// The choices at `r`'s positions in one `/v1/completions` answer's `choices[0].prompt_logprobs`.
fn choices_in(r: &PromptChoicesRequest<'_>, body: &[u8]) -> Result<Vec<PromptChoice>, EngineError> {
    let positions = r.positions();
    let v = parse_json(body)?;
    if let Some(error) = v.get("error").filter(|e| !e.is_null()) {
        return Err(bad(format!("vLLM reported an error: {}", clip(error))));
    }
    let choice = v.get("choices").and_then(Value::as_array).and_then(|c| c.first()).ok_or_else(|| missing("choices[0]"))?;
    let entries = choice.get("prompt_logprobs").and_then(Value::as_array).ok_or_else(|| missing("choices[0].prompt_logprobs"))?;
    aligned_positions(entries, r.tokens.len(), positions.clone(), "vLLM")?.iter().zip(positions).map(|(entry, at)| ranked_choice(entry, at, r.runner_up)).collect()
}

/// The choice at one position of `prompt_logprobs`: the rank-1 entry (and the rank-2 one); by
/// log-probability when the server gives no ranks.
fn ranked_choice(entry: &Value, at: usize, runner_up: bool) -> Result<PromptChoice, EngineError> {
    let map = entry.as_object().ok_or_else(|| bad(format!("choices[0].prompt_logprobs at position {at} is {}", clip(entry))))?;
    let mut candidates = Vec::with_capacity(map.len());
    for (key, value) in map {
        let id = key.parse::<u32>().map_err(|_| bad(format!("prompt_logprobs key {key:?} at position {at} is not a token id")))?;
        let rank = value.get("rank").and_then(Value::as_u64);
        candidates.push((rank, EngineToken { id, logprob: value.get("logprob").and_then(logprob) }));
    }
    let ranked = |n: u64| candidates.iter().find(|(rank, _)| *rank == Some(n)).map(|&(_, t)| t);
    if let Some(best) = ranked(1) {
        return Ok(PromptChoice { best, runner_up: ranked(2).filter(|_| runner_up) });
    }
    let tokens: Vec<EngineToken> = candidates.iter().map(|&(_, t)| t).collect();
    PromptChoice::from_candidates(&tokens, runner_up).ok_or_else(|| bad(format!("choices[0].prompt_logprobs at position {at} is empty")))
}

/// Ids and logprobs of a `/v1/completions` choice: `token_ids` when present, else the
/// `"token_id:N"` strings of `logprobs.tokens`; logprobs from `logprobs.token_logprobs`.
fn completion_tokens(choice: &Value) -> Result<(Vec<u32>, Vec<Option<f32>>), EngineError> {
    let lp = choice.get("logprobs").filter(|l| !l.is_null());
    let lp_tokens = lp.and_then(|l| l.get("tokens")).and_then(Value::as_array);
    let lp_values = lp.and_then(|l| l.get("token_logprobs")).and_then(Value::as_array);
    let ids: Vec<u32> = match choice.get("token_ids") {
        Some(Value::Array(ids)) if !ids.is_empty() => ids.iter().map(token_id).collect::<Result<_, _>>()?,
        None | Some(Value::Null) | Some(Value::Array(_)) => match lp_tokens {
            Some(tokens) if !tokens.is_empty() => tokens.iter().map(id_of_token_string).collect::<Result<_, _>>()?,
            _ => return Err(bad("vLLM generated no token (`choices[0].token_ids` and `choices[0].logprobs.tokens` empty or absent)")),
        },
        Some(other) => return Err(bad(format!("`choices[0].token_ids` is not a list: {}", clip(other)))),
    };
    let logprobs = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            let values = lp_values.filter(|v| v.len() == ids.len())?;
            if let Some(tokens) = lp_tokens {
                // With `return_tokens_as_token_ids` the entry names its token: it must be this one.
                if tokens.get(i).and_then(Value::as_str).and_then(parse_token_string) != Some(id) {
                    return None;
                }
            }
            logprob(values.get(i)?)
        })
        .collect();
    Ok((ids, logprobs))
}

/// Ids and logprobs of an `/inference/v1/generate` choice: `token_ids` when present, else the
/// `"token_id:N"` of `logprobs.content[].token`; logprobs from `logprobs.content[].logprob`.
fn generate_tokens(choice: &Value) -> Result<(Vec<u32>, Vec<Option<f32>>), EngineError> {
    let content = choice.get("logprobs").filter(|l| !l.is_null()).and_then(|l| l.get("content")).and_then(Value::as_array);
    let ids: Vec<u32> = match choice.get("token_ids") {
        Some(Value::Array(ids)) if !ids.is_empty() => ids.iter().map(token_id).collect::<Result<_, _>>()?,
        None | Some(Value::Null) | Some(Value::Array(_)) => match content {
            Some(entries) if !entries.is_empty() => {
                entries.iter().map(|e| e.get("token").map_or(Err(missing("choices[0].logprobs.content[].token")), id_of_token_string)).collect::<Result<_, _>>()?
            }
            _ => return Err(bad("vLLM generated no token (`choices[0].token_ids` and `choices[0].logprobs.content` empty or absent)")),
        },
        Some(other) => return Err(bad(format!("`choices[0].token_ids` is not a list: {}", clip(other)))),
    };
    let logprobs = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            let entry = content.filter(|c| c.len() == ids.len())?.get(i)?;
            if entry.get("token").and_then(Value::as_str).and_then(parse_token_string) != Some(id) {
                return None;
            }
            logprob(entry.get("logprob")?)
        })
        .collect();
    Ok((ids, logprobs))
}

/// A logprob value; null and vLLM's -9999.0 floor mean none.
fn logprob(v: &Value) -> Option<f32> {
    v.as_f64().filter(|&l| l > LOGPROB_FLOOR).map(|l| l as f32)
}

/// The id in `"token_id:N"` (`return_tokens_as_token_ids`).
fn parse_token_string(s: &str) -> Option<u32> {
    s.strip_prefix("token_id:")?.parse().ok()
}

fn id_of_token_string(v: &Value) -> Result<u32, EngineError> {
    v.as_str().and_then(parse_token_string).ok_or_else(|| {
        bad(format!("logprob token {} is not `token_id:N` (does this vLLM support return_tokens_as_token_ids?)", clip(v)))
    })
}

fn missing(field: &str) -> EngineError {
    bad(format!("vLLM answer lacks `{field}`"))
}

fn bad(message: impl Into<String>) -> EngineError {
    EngineError::BadResponse(message.into())
}

/// A JSON value shortened for an error message.
fn clip(v: &Value) -> String {
    v.to_string().chars().take(120).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::AcceptanceRule;
    use common::sampling::SamplingParams;
    use proptest::prelude::*;

    fn request<'a>(context: &'a [u32], sampling: &'a SamplingParams) -> NextTokenRequest<'a> {
        NextTokenRequest { context, sampling, seed: None, max_new_tokens: 1, top_logprobs: 0, slot: None }
    }

    fn completions() -> VllmDialect {
        VllmDialect::new(VllmApi::Completions).with_model("Qwen/Qwen2.5-32B-Instruct")
    }

    fn generate() -> VllmDialect {
        VllmDialect::new(VllmApi::TokenGenerate).with_model("Qwen/Qwen2.5-32B-Instruct")
    }

    fn approx(v: &Value, want: f64) -> bool {
        v.as_f64().is_some_and(|x| (x - want).abs() < 1e-6)
    }

    /// The sampling fields, wherever the endpoint puts them.
    fn sampling_of(d: &VllmDialect, r: &NextTokenRequest<'_>) -> Value {
        let b = d.next_token_call(r).body.expect("a POST");
        match d.api() {
            VllmApi::Completions => b,
            VllmApi::TokenGenerate => b["sampling_params"].clone(),
        }
    }

    #[test]
    fn a_greedy_completions_request_sends_the_ids_as_the_prompt() {
        let greedy = SamplingParams::default();
        let call = completions().next_token_call(&NextTokenRequest { seed: Some(5), slot: Some(1), ..request(&[151644, 872, 198], &greedy) });
        assert_eq!(call.path, "/v1/completions");
        let b = call.body.unwrap();
        assert_eq!(b["model"], "Qwen/Qwen2.5-32B-Instruct");
        assert_eq!(b["prompt"], json!([151644, 872, 198]));
        assert_eq!(b["max_tokens"], 1);
        assert!(approx(&b["temperature"], 0.0) && approx(&b["top_p"], 1.0));
        assert_eq!(b["top_k"], -1);
        assert!(approx(&b["min_p"], 0.0) && approx(&b["repetition_penalty"], 1.0));
        assert!(approx(&b["presence_penalty"], 0.0) && approx(&b["frequency_penalty"], 0.0));
        assert_eq!(b["logprobs"], 1, "at least the chosen token's logprob");
        assert_eq!((b["return_token_ids"].clone(), b["return_tokens_as_token_ids"].clone(), b["stream"].clone()), (json!(true), json!(true), json!(false)));
        assert!(b.get("seed").is_none(), "greedy needs no seed");
        assert!(b.get("id_slot").is_none() && b.get("token_ids").is_none());
        let b = VllmDialect::new(VllmApi::Completions).next_token_call(&request(&[1], &greedy)).body.unwrap();
        assert!(b.get("model").is_none(), "no model name set, none sent");
    }

    #[test]
    fn a_greedy_generate_request_sends_token_ids_and_sampling_params() {
        let greedy = SamplingParams::default();
        let call = generate().next_token_call(&request(&[151644, 872, 198], &greedy));
        assert_eq!(call.path, "/inference/v1/generate");
        let b = call.body.unwrap();
        assert_eq!((b["model"].clone(), b["token_ids"].clone(), b["stream"].clone()), (json!("Qwen/Qwen2.5-32B-Instruct"), json!([151644, 872, 198]), json!(false)));
        assert!(b.get("prompt").is_none() && b.get("return_token_ids").is_none());
        let p = &b["sampling_params"];
        assert_eq!((p["max_tokens"].clone(), p["top_k"].clone(), p["logprobs"].clone()), (json!(1), json!(-1), json!(1)));
        assert!(approx(&p["temperature"], 0.0) && approx(&p["repetition_penalty"], 1.0));
        assert!(p.get("seed").is_none());
    }

    #[test]
    fn a_sampled_request_carries_its_settings_and_an_int64_seed_on_both_endpoints() {
        let s = SamplingParams { temperature: 0.7, top_k: 40, top_p: 0.9, seed: None };
        for d in [completions(), generate()] {
            let p = sampling_of(&d, &NextTokenRequest { seed: Some(u64::MAX), ..request(&[1, 2], &s) });
            assert!(approx(&p["temperature"], 0.7) && approx(&p["top_p"], 0.9), "{p}");
            assert_eq!(p["top_k"], 40);
            assert_eq!(p["seed"].as_u64(), Some(i64::MAX as u64), "vLLM takes an int64 seed");
            let p = sampling_of(&d, &NextTokenRequest { seed: Some(42), ..request(&[1], &SamplingParams { top_k: 0, ..s }) });
            assert_eq!((p["top_k"].clone(), p["seed"].clone()), (json!(-1), json!(42)));
            let p = sampling_of(&d, &request(&[1], &s));
            assert!(p.get("seed").is_none());
        }
    }

    #[test]
    fn a_lookahead_with_top_logprobs_asks_for_them() {
        let greedy = SamplingParams::default();
        for d in [completions(), generate()] {
            let p = sampling_of(&d, &NextTokenRequest { max_new_tokens: 4, top_logprobs: 5, ..request(&[1], &greedy) });
            assert_eq!((p["max_tokens"].clone(), p["logprobs"].clone()), (json!(4), json!(5)));
            let p = sampling_of(&d, &NextTokenRequest { max_new_tokens: 0, ..request(&[1], &greedy) });
            assert_eq!(p["max_tokens"], 1);
        }
    }

    #[test]
    fn the_api_is_chosen_from_the_servers_openapi_document() {
        let with = json!({"openapi": "3.1.0", "info": {"title": "FastAPI", "version": "0.1.0"}, "paths": {
            "/health": {"get": {}}, "/v1/completions": {"post": {}}, "/inference/v1/generate": {"post": {"summary": "Generate"}}}});
        assert_eq!(VllmApi::from_openapi(&with), VllmApi::TokenGenerate);
        let without = json!({"openapi": "3.1.0", "paths": {"/health": {"get": {}}, "/v1/completions": {"post": {}}}});
        assert_eq!(VllmApi::from_openapi(&without), VllmApi::Completions);
        for junk in [json!(null), json!([]), json!({"paths": []}), json!({"paths": "/inference/v1/generate"})] {
            assert_eq!(VllmApi::from_openapi(&junk), VllmApi::Completions, "{junk}");
        }
        assert_eq!(OPENAPI_PATH, "/openapi.json");
        assert_eq!(VllmDialect::default().api(), VllmApi::Completions);
        assert_eq!(generate().model(), Some("Qwen/Qwen2.5-32B-Instruct"));
    }

    // A vLLM `/v1/completions` answer as printed by a public deployment tutorial (a server from
    // December 2025 by its `created`; `"max_tokens": 7`), verbatim: no token ids or logprobs were asked for, so the
    // dialect finds no token in it.
    const TUTORIAL_COMPLETION: &str = r#"{"id":"cmpl-f266de8ae5f64e14a2f3fa53560e4fbf","object":"text_completion","created":1765026778,"model":"mini-llama-demo","choices":[{"index":0,"text":" city that has a unique blend of","logprobs":null,"finish_reason":"length","stop_reason":null,"prompt_logprobs":null}],"usage":{"prompt_tokens":5,"total_tokens":12,"completion_tokens":7,"prompt_tokens_details":null},"kv_transfer_params":null}"#;

    #[test]
    fn an_answer_without_ids_is_refused() {
        assert!(matches!(completions().parse_next_token(TUTORIAL_COMPLETION.as_bytes()), Err(EngineError::BadResponse(_))));
    }

    // The same answer with what this dialect asks for, in the fields `CompletionResponseChoice`
    // and `CompletionLogProbs` define (vllm/entrypoints/openai/completion/protocol.py):
    // `token_ids` and `prompt_token_ids` per choice (`return_token_ids`), `logprobs.tokens` as
    // `token_id:N` (`return_tokens_as_token_ids`), `logprobs: 1` alternatives, and the cache hit
    // of `--enable-prompt-tokens-details`. Ids are Qwen2.5's for " Paris." after 5 prompt tokens.
    const COMPLETION_WITH_IDS: &str = r#"{"id":"cmpl-f266de8ae5f64e14a2f3fa53560e4fbf","object":"text_completion","created":1765026778,"model":"Qwen/Qwen2.5-32B-Instruct","choices":[{"index":0,"text":" Paris.","logprobs":{"text_offset":[0,6],"token_logprobs":[-0.0123,-0.9871],"tokens":["token_id:12095","token_id:13"],"top_logprobs":[{"token_id:12095":-0.0123},{"token_id:13":-0.9871}]},"finish_reason":"length","stop_reason":null,"token_ids":[12095,13],"prompt_logprobs":null,"prompt_token_ids":[785,6722,315,9625,374]}],"service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":5,"total_tokens":7,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":3}},"kv_transfer_params":null}"#;

    #[test]
    fn a_completion_yields_its_ids_logprobs_and_cache_figures() {
        let r = completions().parse_next_token(COMPLETION_WITH_IDS.as_bytes()).unwrap();
        assert_eq!(r.tokens, vec![EngineToken { id: 12095, logprob: Some(-0.0123) }, EngineToken { id: 13, logprob: Some(-0.9871) }]);
        assert_eq!((r.prompt_tokens, r.cached_tokens), (Some(5), Some(3)));
    }

    // An older server (before `return_token_ids`) ignores that field: the ids come from the
    // `token_id:N` logprob tokens. `token_logprobs` may hold null where vLLM has no value; the
    // usage block predates `prompt_tokens_details`.
    const COMPLETION_WITHOUT_TOKEN_IDS: &str = r#"{"id":"cmpl-1","object":"text_completion","created":1733000000,"model":"Qwen/Qwen2.5-32B-Instruct","choices":[{"index":0,"text":" Paris.","logprobs":{"text_offset":[0,6],"token_logprobs":[-0.0123,null],"tokens":["token_id:12095","token_id:13"],"top_logprobs":[{"token_id:12095":-0.0123},null]},"finish_reason":"length","stop_reason":null,"prompt_logprobs":null}],"usage":{"prompt_tokens":5,"total_tokens":7,"completion_tokens":2}}"#;

    #[test]
    fn a_server_without_prompt_tokens_details_reports_the_cache_hit_as_unknown_not_as_a_miss() {
        let details_null = COMPLETION_WITH_IDS.replace(r#""prompt_tokens_details":{"cached_tokens":3}"#, r#""prompt_tokens_details":null"#);
        let r = completions().parse_next_token(details_null.as_bytes()).unwrap();
        assert_eq!((r.prompt_tokens, r.cached_tokens), (Some(5), None));
        let miss = COMPLETION_WITH_IDS.replace(r#""cached_tokens":3"#, r#""cached_tokens":0"#);
        assert_eq!(completions().parse_next_token(miss.as_bytes()).unwrap().cached_tokens, Some(0));
    }

    #[test]
    fn ids_come_from_the_logprob_tokens_on_an_older_server() {
        let r = completions().parse_next_token(COMPLETION_WITHOUT_TOKEN_IDS.as_bytes()).unwrap();
        assert_eq!(r.tokens, vec![EngineToken { id: 12095, logprob: Some(-0.0123) }, EngineToken { id: 13, logprob: None }]);
        assert_eq!((r.prompt_tokens, r.cached_tokens), (Some(5), None));
    }

    #[test]
    fn a_logprob_is_only_taken_for_its_own_token() {
        let b = br#"{"choices":[{"token_ids":[7],"logprobs":{"tokens":["token_id:8"],"token_logprobs":[-0.5]}}]}"#;
        assert_eq!(completions().parse_next_token(b).unwrap().tokens, vec![EngineToken { id: 7, logprob: None }]);
        let b = br#"{"choices":[{"token_ids":[7,8],"logprobs":{"tokens":["token_id:7"],"token_logprobs":[-0.5]}}]}"#;
        assert!(completions().parse_next_token(b).unwrap().tokens.iter().all(|t| t.logprob.is_none()), "misaligned lists give none");
        let b = br#"{"choices":[{"token_ids":[7],"logprobs":{"tokens":["token_id:7"],"token_logprobs":[-9999.0]}}]}"#;
        assert_eq!(completions().parse_next_token(b).unwrap().tokens[0].logprob, None, "vLLM's floor is no value");
    }

    // `/inference/v1/generate` as `ServingTokens.serve_tokens_full_generator` builds it
    // (vllm/entrypoints/serve/disagg/serving.py and protocol.py: `GenerateResponse` with
    // `choices[].token_ids`, `choices[].logprobs.content[]` from `_create_tokens_logprobs`, and
    // `usage`); values composed for a two-token lookahead with `logprobs: 1`.
    const GENERATE_ANSWER: &str = r#"{"request_id":"generate-tokens-9f2c","id":"generate-tokens-9f2c","created":1770000000,"model":"Qwen/Qwen2.5-32B-Instruct","choices":[{"index":0,"logprobs":{"content":[{"token":"token_id:12095","logprob":-0.0123,"bytes":null,"top_logprobs":[{"token":"token_id:12095","logprob":-0.0123,"bytes":null}]},{"token":"token_id:13","logprob":-0.9871,"bytes":null,"top_logprobs":[{"token":"token_id:13","logprob":-0.9871,"bytes":null}]}]},"finish_reason":"length","token_ids":[12095,13],"routed_experts":null}],"usage":{"prompt_tokens":1204,"total_tokens":1206,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1200}},"prompt_logprobs":null,"kv_transfer_params":null}"#;

    #[test]
    fn a_generate_answer_yields_its_ids_logprobs_and_usage() {
        let r = generate().parse_next_token(GENERATE_ANSWER.as_bytes()).unwrap();
        assert_eq!(r.tokens, vec![EngineToken { id: 12095, logprob: Some(-0.0123) }, EngineToken { id: 13, logprob: Some(-0.9871) }]);
        assert_eq!((r.prompt_tokens, r.cached_tokens), (Some(1204), Some(1200)));
    }

    // The first release's `GenerateResponse` (protocol.py before `usage` was added): request_id,
    // choices and prompt_logprobs only. A content entry without a value for its token carries
    // vLLM's default logprob, -9999.0.
    const GENERATE_ANSWER_FIRST_RELEASE: &str = r#"{"request_id":"4b1d","choices":[{"index":0,"logprobs":{"content":[{"token":"token_id:12095","logprob":-9999.0,"bytes":null,"top_logprobs":[]}]},"finish_reason":"length","token_ids":[12095]}],"prompt_logprobs":null,"kv_transfer_params":null}"#;

    #[test]
    fn the_first_generate_release_parses_without_usage() {
        let r = generate().parse_next_token(GENERATE_ANSWER_FIRST_RELEASE.as_bytes()).unwrap();
        assert_eq!(r, EngineReply { tokens: vec![EngineToken { id: 12095, logprob: None }], prompt_tokens: None, cached_tokens: None });
        let ids_from_content = br#"{"choices":[{"index":0,"logprobs":{"content":[{"token":"token_id:42","logprob":-0.25}]},"token_ids":null}]}"#;
        assert_eq!(generate().parse_next_token(ids_from_content).unwrap().tokens, vec![EngineToken { id: 42, logprob: Some(-0.25) }]);
    }

    #[test]
    fn garbage_is_a_typed_error_not_a_panic() {
        let bodies = [
            "",
            "<html>502 Bad Gateway</html>",
            "null",
            "[]",
            "{}",
            r#"{"choices":[]}"#,
            r#"{"choices":{}}"#,
            r#"{"choices":[{"token_ids":[]}]}"#,
            r#"{"choices":[{"token_ids":[-1]}]}"#,
            r#"{"choices":[{"token_ids":[1.5]}]}"#,
            r#"{"choices":[{"token_ids":[4294967296]}]}"#,
            r#"{"choices":[{"token_ids":"1"}]}"#,
            r#"{"choices":[{"token_ids":null,"logprobs":null}]}"#,
            r#"{"choices":[{"logprobs":{"tokens":[" Paris"],"token_logprobs":[-0.1]}}]}"#,
            r#"{"choices":[{"logprobs":{"tokens":["token_id:-3"],"token_logprobs":[-0.1]}}]}"#,
            r#"{"choices":[{"logprobs":{"tokens":[7],"token_logprobs":[-0.1]}}]}"#,
            r#"{"choices":[{"logprobs":{"content":[{"logprob":-0.1}]}}]}"#,
            r#"{"object":"error","message":"This model's maximum context length is 32768 tokens.","type":"BadRequestError","param":null,"code":400}"#,
            r#"{"error":{"message":"boom","type":"InternalServerError","code":500}}"#,
        ];
        for d in [completions(), generate()] {
            for b in bodies {
                assert!(matches!(d.parse_next_token(b.as_bytes()), Err(EngineError::BadResponse(_))), "{:?} {b}", d.api());
            }
        }
    }

    // `GET /v1/models` of a vLLM server as a vendor's API manual prints it (fields of vLLM's
    // `ModelCard`: id, object, created, owned_by "vllm", root, parent, max_model_len,
    // permission), verbatim.
    const MODELS: &str = r#"{
  "data": [
    {
      "created": 1756885796,
      "id": "seongil-dn/bge-m3-3800_steps_v2_234",
      "max_model_len": 1024,
      "object": "model",
      "owned_by": "vllm",
      "parent": null,
      "permission": [
        {
          "allow_create_engine": false,
          "allow_fine_tuning": false,
          "allow_logprobs": true,
          "allow_sampling": true,
          "allow_search_indices": false,
          "allow_view": true,
          "created": 1756885796,
          "group": null,
          "id": "modelperm-cb01ad02375f4989a5730d7e103b03ab",
          "is_blocking": false,
          "object": "model_permission",
          "organization": "*"
        }
      ],
      "root": "seongil-dn/bge-m3-3800_steps_v2_234"
    }
  ],
  "object": "list"
}"#;

    // The list in vLLM's own API reference example (docs: "Models" endpoint), which leaves out
    // max_model_len.
    const MODELS_DOC_EXAMPLE: &str = r#"{"object": "list", "data": [{"id": "facebook/opt-125m", "object": "model", "created": 1677610602, "owned_by": "vllm", "root": "facebook/opt-125m", "parent": null}]}"#;

    #[test]
    fn model_info_reads_the_documented_bodies() {
        let d = completions();
        assert_eq!(d.model_info_call(), HttpCall::get("/v1/models"));
        assert_eq!(d.parse_model_info(MODELS.as_bytes()).unwrap(), EngineModel { id: "seongil-dn/bge-m3-3800_steps_v2_234".into(), vocab_size: None, max_context: Some(1024) });
        assert_eq!(d.parse_model_info(MODELS_DOC_EXAMPLE.as_bytes()).unwrap(), EngineModel { id: "facebook/opt-125m".into(), vocab_size: None, max_context: None });
        for b in ["{}", r#"{"data":[]}"#, r#"{"data":[{"object":"model"}]}"#, r#"{"data":{"id":"x"}}"#, "x"] {
            assert!(matches!(d.parse_model_info(b.as_bytes()), Err(EngineError::BadResponse(_))), "{b}");
        }
        assert_eq!((d.health_path(), d.kind()), ("/health", EngineKind::Vllm));
    }

    // `POST /tokenize` answers with vLLM's `TokenizeResponse` (count, max_model_len, tokens,
    // token_strs when asked); ids are Qwen2.5's for "Hello, world!".
    const TOKENIZE: &str = r#"{"count":4,"max_model_len":32768,"tokens":[9707,11,1879,0],"token_strs":null}"#;

    #[test]
    fn tokenize_sends_the_text_without_special_tokens_and_reads_the_ids() {
        let call = completions().tokenize_call("Hello, world!").unwrap();
        assert_eq!(call.path, "/tokenize");
        let b = call.body.unwrap();
        assert_eq!(b, json!({"model": "Qwen/Qwen2.5-32B-Instruct", "prompt": "Hello, world!", "add_special_tokens": false}));
        assert!(VllmDialect::new(VllmApi::TokenGenerate).tokenize_call("x").unwrap().body.unwrap().get("model").is_none());
        assert_eq!(completions().parse_tokenize(TOKENIZE.as_bytes()).unwrap(), vec![9707, 11, 1879, 0]);
        for b in ["{}", r#"{"tokens":[1.5]}"#, r#"{"tokens":null}"#, "<html>"] {
            assert!(matches!(completions().parse_tokenize(b.as_bytes()), Err(EngineError::BadResponse(_))), "{b}");
        }
    }

    fn choices_request(runner_up: bool) -> PromptChoicesRequest<'static> {
        PromptChoicesRequest { tokens: &[151644, 872, 198, 3838, 374], first: 3, runner_up, slot: Some(0) }
    }

    #[test]
    fn prompt_choices_are_one_greedy_completions_request_with_prompt_logprobs_on_either_api() {
        for d in [completions(), generate()] {
            let calls = d.prompt_choices_calls(&choices_request(true));
            assert_eq!(calls.len(), 1);
            assert_eq!(calls[0].path, "/v1/completions", "prompt logprobs come from the completions endpoint");
            let b = calls[0].body.clone().unwrap();
            assert_eq!((b["model"].clone(), b["prompt"].clone()), (json!("Qwen/Qwen2.5-32B-Instruct"), json!([151644, 872, 198, 3838, 374])));
            assert_eq!((b["prompt_logprobs"].clone(), b["max_tokens"].clone(), b["top_k"].clone()), (json!(2), json!(1), json!(-1)));
            assert!(approx(&b["temperature"], 0.0) && approx(&b["repetition_penalty"], 1.0), "greedy, no penalty: {b}");
            assert!(b.get("id_slot").is_none() && b.get("sampling_params").is_none());
        }
        assert_eq!(completions().prompt_choices_calls(&choices_request(false))[0].body.as_ref().unwrap()["prompt_logprobs"], 1);
        let nothing = PromptChoicesRequest { first: 9, ..choices_request(false) };
        assert!(completions().prompt_choices_calls(&nothing).is_empty());
    }

    // The answer to that request in the fields of `CompletionResponseChoice`
    // (vllm/entrypoints/openai/completion/protocol.py): `prompt_logprobs` is
    // `list[dict[int, Logprob] | None]`, one entry per prompt token, the first None; each map
    // (token id keys, as JSON writes them) holds the top `prompt_logprobs` tokens and the
    // prompt's own token with its `rank`. Values composed; position 3's own token (3838) is the
    // runner-up, position 4's (374) the best.
    const PROMPT_LOGPROBS: &str = r#"{"id":"cmpl-7","object":"text_completion","created":1765026778,"model":"Qwen/Qwen2.5-32B-Instruct","choices":[{"index":0,"text":".","logprobs":{"text_offset":[0],"token_logprobs":[-0.8],"tokens":["token_id:13"],"top_logprobs":[{"token_id:13":-0.8}]},"finish_reason":"length","stop_reason":null,"token_ids":[13],
        "prompt_logprobs":[null,
            {"872":{"logprob":-1.3,"rank":2,"decoded_token":"user"},"8948":{"logprob":-0.9,"rank":1,"decoded_token":"system"}},
            {"198":{"logprob":-0.02,"rank":1,"decoded_token":"\n"},"271":{"logprob":-4.6,"rank":2,"decoded_token":"\n\n"}},
            {"40":{"logprob":-2.1,"rank":1,"decoded_token":"I"},"3838":{"logprob":-2.4,"rank":2,"decoded_token":"What"}},
            {"374":{"logprob":-0.4,"rank":1,"decoded_token":" is"},"525":{"logprob":-1.2,"rank":2,"decoded_token":" are"},"99":{"logprob":-9999.0,"rank":80000,"decoded_token":"x"}}],
        "prompt_token_ids":[151644,872,198,3838,374]}],"usage":{"prompt_tokens":5,"total_tokens":6,"completion_tokens":1,"prompt_tokens_details":null}}"#;

    #[test]
    fn prompt_choices_take_the_rank_one_entry_and_the_rank_two_runner_up() {
        let choices = completions().parse_prompt_choices(&choices_request(true), &[PROMPT_LOGPROBS.as_bytes().to_vec()]).unwrap();
        assert_eq!(
            choices,
            vec![
                PromptChoice { best: EngineToken { id: 40, logprob: Some(-2.1) }, runner_up: Some(EngineToken { id: 3838, logprob: Some(-2.4) }) },
                PromptChoice { best: EngineToken { id: 374, logprob: Some(-0.4) }, runner_up: Some(EngineToken { id: 525, logprob: Some(-1.2) }) },
            ]
        );
        let all = completions().parse_prompt_choices(&PromptChoicesRequest { first: 0, runner_up: false, ..choices_request(false) }, &[PROMPT_LOGPROBS.as_bytes().to_vec()]).unwrap();
        assert_eq!(all.iter().map(|c| c.best.id).collect::<Vec<_>>(), vec![8948, 198, 40, 374]);
        assert!(all.iter().all(|c| c.runner_up.is_none()), "not asked for");
    }

    #[test]
    fn with_one_prompt_logprob_the_prompts_own_token_is_not_taken_for_the_runner_up() {
        // prompt_logprobs: 1 gives the best and the prompt's token, here at rank 7.
        let body = br#"{"choices":[{"prompt_logprobs":[null,{"5":{"logprob":-0.1,"rank":1},"6":{"logprob":-3.0,"rank":7}}]}]}"#;
        let r = PromptChoicesRequest { tokens: &[1, 6], first: 1, runner_up: true, slot: None };
        assert_eq!(completions().parse_prompt_choices(&r, &[body.to_vec()]).unwrap(), vec![PromptChoice { best: EngineToken { id: 5, logprob: Some(-0.1) }, runner_up: None }]);
        // A server without ranks: by log-probability.
        let body = br#"{"choices":[{"prompt_logprobs":[null,{"6":{"logprob":-3.0},"5":{"logprob":-0.1}}]}]}"#;
        assert_eq!(completions().parse_prompt_choices(&r, &[body.to_vec()]).unwrap()[0].best.id, 5);
    }

    #[test]
    fn a_prompt_choices_answer_that_lacks_positions_is_a_typed_error() {
        let r = choices_request(true);
        for body in [
            TUTORIAL_COMPLETION,
            r#"{"choices":[{"prompt_logprobs":[null,{}, {}, {}, {"374":{"logprob":-0.4,"rank":1}}]}]}"#,
            r#"{"choices":[{"prompt_logprobs":[null, null, null, null, {"374":{"logprob":-0.4,"rank":1}}]}]}"#,
            r#"{"choices":[{"prompt_logprobs":[{"374":{"logprob":-0.4,"rank":1}}]}]}"#,
            r#"{"choices":[{"prompt_logprobs":[null, {}, {}, {"x":{"logprob":-0.4,"rank":1}}, {"374":{"logprob":-0.4,"rank":1}}]}]}"#,
            r#"{"object":"error","message":"Requested prompt logprobs of 2, which is greater than max allowed: 0","type":"BadRequestError","code":400,"error":{"message":"x"}}"#,
            "{}",
        ] {
            assert!(matches!(completions().parse_prompt_choices(&r, &[body.as_bytes().to_vec()]), Err(EngineError::BadResponse(_))), "{body}");
        }
    }

    fn draft_request(draft: &'static [u32]) -> DraftCheckRequest<'static> {
        DraftCheckRequest { context: &[151644, 872, 198], draft, slot: None }
    }

    #[test]
    fn a_draft_check_is_one_greedy_completions_request_with_one_prompt_logprob_on_either_api() {
        for d in [completions(), generate()] {
            let call = d.draft_check_call(&draft_request(&[3838, 374]));
            assert_eq!(call.path, "/v1/completions", "prompt logprobs come from the completions endpoint");
            let b = call.body.unwrap();
            assert_eq!((b["model"].clone(), b["prompt"].clone()), (json!("Qwen/Qwen2.5-32B-Instruct"), json!([151644, 872, 198, 3838, 374])), "context and draft");
            assert_eq!((b["prompt_logprobs"].clone(), b["max_tokens"].clone(), b["logprobs"].clone()), (json!(1), json!(1), json!(1)));
            assert!(approx(&b["temperature"], 0.0) && approx(&b["repetition_penalty"], 1.0), "greedy, no penalty: {b}");
        }
    }

    /// The answer to that request in the fields of `CompletionResponseChoice`, `prompt_logprobs`
    /// as `vllm/logprobs.py` types it (one `{token id: {logprob, rank, decoded_token}}` per
    /// prompt token, the first None; the prompt's own token listed with its rank beside the
    /// rank-1 one), `return_token_ids` on. Values composed.
    fn draft_answer(at3: u32, at4: u32, generated: u32) -> Vec<u8> {
        let entry = |best: u32, own: u32, lp: f64| {
            if best == own {
                format!(r#"{{"{best}":{{"logprob":{lp},"rank":1,"decoded_token":"token_id:{best}"}}}}"#)
            } else {
                format!(r#"{{"{best}":{{"logprob":{lp},"rank":1,"decoded_token":"token_id:{best}"}},"{own}":{{"logprob":-3.5,"rank":4,"decoded_token":"token_id:{own}"}}}}"#)
            }
        };
        format!(
            r#"{{"id":"cmpl-d","object":"text_completion","created":1765026778,"model":"Qwen/Qwen2.5-32B-Instruct","choices":[{{"index":0,"text":"","logprobs":{{"text_offset":[0],"token_logprobs":[-0.8],"tokens":["token_id:{generated}"],"top_logprobs":[{{"token_id:{generated}":-0.8}}]}},"finish_reason":"length","stop_reason":null,"token_ids":[{generated}],
            "prompt_logprobs":[null,{},{},{},{}],"prompt_token_ids":[151644,872,198,3838,374]}}],"usage":{{"prompt_tokens":5,"total_tokens":6,"completion_tokens":1,"prompt_tokens_details":{{"cached_tokens":0}}}}}}"#,
            entry(872, 872, -1.0),
            entry(198, 198, -0.02),
            entry(at3, 3838, -0.3),
            entry(at4, 374, -0.2),
        )
        .into_bytes()
    }

    fn verdict(draft: &'static [u32], body: &[u8]) -> (u32, u32, f32) {
        let reply = generate().parse_draft_check(&draft_request(draft), body).unwrap();
        let t = reply.verdict(draft).unwrap();
        (t.accepted, t.token_id, t.logprob)
    }

    #[test]
    fn a_draft_the_llm_agrees_with_is_accepted_whole_with_the_generated_token_as_the_bonus() {
        let body = draft_answer(3838, 374, 13);
        let reply = completions().parse_draft_check(&draft_request(&[3838, 374]), &body).unwrap();
        assert_eq!(reply.tokens.iter().map(|t| t.id).collect::<Vec<_>>(), vec![3838, 374, 13]);
        assert_eq!((reply.prompt_tokens, reply.cached_tokens), (Some(5), Some(0)));
        assert_eq!(verdict(&[3838, 374], &body), (2, 13, -0.8), "read as a completions answer on the generate API too");
    }

    #[test]
    fn a_draft_rejected_at_its_first_token_gets_the_llms_token_at_the_hard_position() {
        assert_eq!(verdict(&[3838, 374], &draft_answer(40, 374, 13)), (0, 40, -0.3));
    }

    #[test]
    fn a_draft_rejected_in_the_middle_keeps_its_agreed_prefix_and_gets_the_correction() {
        assert_eq!(verdict(&[3838, 374], &draft_answer(3838, 525, 13)), (1, 525, -0.2));
    }

    #[test]
    fn a_draft_answer_that_lacks_positions_or_the_generated_token_is_a_typed_error() {
        let r = draft_request(&[3838, 374]);
        for body in [
            TUTORIAL_COMPLETION,
            r#"{"choices":[{"token_ids":[13],"prompt_logprobs":[null, null, null, null, {"374":{"logprob":-0.4,"rank":1}}]}]}"#,
            r#"{"choices":[{"token_ids":[],"prompt_logprobs":[null, {}, {}, {"3838":{"logprob":-0.3,"rank":1}}, {"374":{"logprob":-0.4,"rank":1}}]}]}"#,
            r#"{"object":"error","message":"Requested prompt logprobs of 1, which is greater than max allowed: 0","type":"BadRequestError","code":400,"error":{"message":"x"}}"#,
            "{}",
        ] {
            assert!(matches!(completions().parse_draft_check(&r, body.as_bytes()), Err(EngineError::BadResponse(_))), "{body}");
        }
    }

    /// The fields this dialect reads, for [`crate::testing::jsonish`].
    const FIELDS: &[&str] = &["choices", "token_ids", "logprobs", "tokens", "token_logprobs", "content", "token", "logprob", "usage", "prompt_tokens", "prompt_tokens_details", "cached_tokens", "error", "prompt_logprobs", "rank"];

    proptest! {
        #[test]
        fn parsing_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            for d in [completions(), generate()] {
                let _ = d.parse_next_token(&bytes);
                let _ = d.parse_model_info(&bytes);
                let _ = d.parse_tokenize(&bytes);
            }
        }

        #[test]
        fn parsing_never_panics_on_json(v in crate::testing::jsonish(FIELDS)) {
            let bytes = serde_json::to_vec(&v).unwrap();
            for d in [completions(), generate()] {
                if let Ok(reply) = d.parse_next_token(&bytes) {
                    prop_assert!(!reply.tokens.is_empty());
                }
            }
            let r = PromptChoicesRequest { tokens: &[1, 2, 3], first: 1, runner_up: true, slot: None };
            if let Ok(choices) = completions().parse_prompt_choices(&r, std::slice::from_ref(&bytes)) {
                prop_assert_eq!(choices.len(), 2);
            }
            let d = DraftCheckRequest { context: &[1], draft: &[2, 3], slot: None };
            if let Ok(reply) = completions().parse_draft_check(&d, &bytes) {
                prop_assert_eq!(reply.tokens.len(), 3);
            }
            let _ = VllmApi::from_openapi(&v);
        }
    }
}
