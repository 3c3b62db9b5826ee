//! SGLang's native API: `POST /generate` with `input_ids`, answered with `output_ids`.
//!
//! The mapping follows SGLang v0.5.x as documented on docs.sglang.io (the "SGLang Native APIs"
//! and "Sampling Parameters" pages, 2025–2026) and the code they point to
//! (`io_struct.py::GenerateReqInput`, `sampling_params.py::SamplingParams`,
//! `tokenizer_manager.py`, which builds the answer):
//! - the request carries `input_ids` and no `text`, so a server started with
//!   `--skip-tokenizer-init` serves it too (it then answers without `text`);
//! - `sampling_params`: `max_new_tokens`; `temperature` (0 = greedy), `top_p`, `top_k` (-1 = no
//!   limit), `min_p`; the penalties are sent as neutral because SGLang fills every unset
//!   parameter from the model's `generation_config.json` (`--sampling-defaults model`, the
//!   default), and Qwen2.5's sets `repetition_penalty: 1.05`, which changes even greedy tokens;
//! - `sampling_params.sampling_seed` (added with deterministic inference, Sept. 2025) makes a
//!   sampled token reproducible on a server started with `--enable-deterministic-inference`;
//!   servers that predate it refuse unknown sampling parameters, hence
//!   [`SglangDialect::without_seed`];
//! - `return_logprob: true` with `logprob_start_len: -1` adds
//!   `meta_info.output_token_logprobs`, one `[logprob, token_id, text-or-null]` per generated
//!   token, and nothing for the prompt (prompt logprobs would make SGLang recompute cached
//!   tokens); `top_logprobs_num` adds `output_top_logprobs`;
//! - the answer has `output_ids` (the generated ids, the EOS id included when generation stopped
//!   on it) and `meta_info` with `prompt_tokens`, `completion_tokens` and `cached_tokens`
//!   (radix-cache hits); `text` only when the server has its tokenizer;
//! - `GET /get_model_info` gives `model_path`, `tokenizer_path` and `is_generation`, but no
//!   vocabulary size or context length. Servers from 2026 log it as deprecated in favour of
//!   `/model_info` (same body); `/get_model_info` is used because every 0.4/0.5 server has it;
//! - `POST /tokenize` `{prompt, add_special_tokens}` → `{tokens, count, max_model_len}` works
//!   only on a server that loaded its tokenizer.
//!
//! - prompt choices (the router lab's teacher, [`PromptChoicesRequest`]): the next-token call
//!   for the whole sequence with `logprob_start_len: 0` and `top_logprobs_num` 1 or 2 adds
//!   `meta_info.input_top_logprobs`, one list per prompt position of `[logprob, token_id,
//!   text-or-null]` best first, whose first entry (nothing predicts the first token) is null;
//!   the one generated token is not used. SGLang recomputes the logits of every position from
//!   `logprob_start_len` on, cached or not: a teacher's request, never an escalation's.
//! - draft check ([`DraftCheckRequest`], a greedy escalation with a draft): the same call for
//!   context + draft with `top_logprobs_num: 1` and `logprob_start_len` one before the hard
//!   position. The "Sampling Parameters" page documents `logprob_start_len` as "the start
//!   location in the prompt for returning logprobs"; the answer's `input_top_logprobs`
//!   (`scheduler_output_processor_mixin.py`, `_process_input_top_logprobs`) then has one entry
//!   per prompt token from that location on, the first null (the logits before it are not
//!   computed) and the last prompt token's dropped (they predict the output): so it starts one
//!   early to include the hard position's choice. 0.3/0.4-era servers omit the null and are
//!   read aligned on the end. The best entry at each draft position is the LLM's choice there,
//!   and the generated token (`max_new_tokens: 1`) its token after the whole draft. Cost: SGLang
//!   caps its radix-cache match at `logprob_start_len` (`Req.init_next_round_input`), so the
//!   request prefills the delta (as a plain escalation does, at least the hard position's
//!   predecessor) and the draft: one pass, the draft's length more tokens.
//!
//! SGLang is not run on the project's machines (no GPU): the tests below check the mapping
//! against the bodies the documentation prints.

use serde_json::{json, Value};

use crate::prompt_choices::PromptChoicesDialect;
use crate::{aligned_positions, parse_json, token_id, Dialect, DraftCheckRequest, EngineError, EngineKind, EngineModel, EngineReply, EngineToken, HttpCall, NextTokenRequest, PromptChoice, PromptChoicesRequest};

/// Path of the next-token call.
pub const GENERATE_PATH: &str = "/generate";
/// Path of the model description (see the module doc for why not `/model_info`).
pub const MODEL_INFO_PATH: &str = "/get_model_info";
/// Path of the tokenizer endpoint.
pub const TOKENIZE_PATH: &str = "/tokenize";

/// SGLang's largest `top_k` (`TOP_K_ALL` in `sampling_params.py`, the whole vocabulary).
const TOP_K_ALL: usize = 1 << 30;

/// The SGLang native-API dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SglangDialect {
    send_seed: bool,
    tokenizer: bool,
}

impl Default for SglangDialect {
    fn default() -> Self {
        Self::new()
    }
}

impl SglangDialect {
    /// For a current server with its tokenizer: seeds are sent, `/tokenize` is offered.
    pub const fn new() -> Self {
        Self { send_seed: true, tokenizer: true }
    }

    /// For a server older than `sampling_seed` (it refuses unknown sampling parameters with
    /// HTTP 400). Sampled tokens are then not reproducible when a retry moves to another worker.
    pub const fn without_seed(self) -> Self {
        Self { send_seed: false, ..self }
    }

    /// For a server started with `--skip-tokenizer-init`: no `/tokenize`.
    pub const fn without_tokenizer(self) -> Self {
        Self { tokenizer: false, ..self }
    }
}

impl Dialect for SglangDialect {
    fn kind(&self) -> EngineKind {
        EngineKind::Sglang
    }

    fn next_token_call(&self, r: &NextTokenRequest<'_>) -> HttpCall {
        let s = r.sampling;
        let mut params = json!({
            "max_new_tokens": r.max_new_tokens.max(1),
            // Neutral, so the model's generation_config.json cannot change the distribution.
            "repetition_penalty": 1.0,
            "frequency_penalty": 0.0,
            "presence_penalty": 0.0,
            "min_p": 0.0,
        });
        if s.is_greedy() {
            params["temperature"] = json!(0.0);
            params["top_p"] = json!(1.0);
            params["top_k"] = json!(-1);
        } else {
            params["temperature"] = json!(s.temperature);
            params["top_p"] = json!(s.top_p);
            params["top_k"] = json!(if s.top_k == 0 { -1 } else { s.top_k.min(TOP_K_ALL) as i64 });
            if let (true, Some(seed)) = (self.send_seed, r.seed) {
                // SGLang keeps seeds in an int64 tensor: drop the sign bit.
                params["sampling_seed"] = json!(seed & i64::MAX as u64);
            }
        }
        let mut body = json!({
            "input_ids": r.context,
            "sampling_params": params,
            "return_logprob": true,
            "logprob_start_len": -1,
            "stream": false,
        });
        if r.top_logprobs > 0 {
            body["top_logprobs_num"] = json!(r.top_logprobs);
        }
        HttpCall::post(GENERATE_PATH, body)
    }

    fn parse_next_token(&self, body: &[u8]) -> Result<EngineReply, EngineError> {
        let v = parse_json(body)?;
        let answer = v.as_object().ok_or_else(|| bad("the /generate answer is not a JSON object"))?;
        if let Some(error) = answer.get("error") {
            return Err(bad(format!("SGLang reported an error: {}", clip(error))));
        }
        let meta = answer.get("meta_info").filter(|m| m.is_object()).ok_or_else(|| missing("meta_info"))?;
        let logprobs = meta.get("output_token_logprobs").and_then(Value::as_array);

        let mut ids: Vec<u32> = match answer.get("output_ids") {
            Some(Value::Array(ids)) if !ids.is_empty() => ids.iter().map(token_id).collect::<Result<_, _>>()?,
            None | Some(Value::Null) | Some(Value::Array(_)) => match logprobs {
                // No ids (or none listed): the logprob entries carry them too.
                Some(entries) if !entries.is_empty() => entries
                    .iter()
                    .map(|e| e.get(1).map_or(Err(missing("meta_info.output_token_logprobs[][1]")), token_id))
                    .collect::<Result<_, _>>()?,
                _ => return Err(no_token(meta)),
            },
            Some(other) => return Err(bad(format!("`output_ids` is not a list: {}", clip(other)))),
        };
        // Some 0.4/0.5 builds put the detokenizer's window (the prompt's last tokens) before the
        // generated ids; `completion_tokens` says how many of them were generated.
        if let Some(generated) = count(meta.get("completion_tokens")) {
            let generated = generated as usize;
            if generated == 0 {
                return Err(no_token(meta));
            }
            if generated < ids.len() {
                ids.drain(..ids.len() - generated);
            }
        }
        let n = ids.len();
        let tokens = ids.iter().enumerate().map(|(i, &id)| EngineToken { id, logprob: aligned_logprob(logprobs, n, i, id) }).collect();
        Ok(EngineReply { tokens, prompt_tokens: count(meta.get("prompt_tokens")), cached_tokens: count(meta.get("cached_tokens")) })
    }

    /// `/health`, not `/health_generate`: the latter pushes a one-token generation through the
    /// scheduler, so on a loaded worker it queues behind real work and would time out exactly
    /// when the worker is busiest; the pool probes often. A worker whose generation is broken
    /// shows up anyway through its failed escalations (the circuit breaker).
    fn health_path(&self) -> &'static str {
        "/health"
    }

    fn model_info_call(&self) -> HttpCall {
        HttpCall::get(MODEL_INFO_PATH)
    }

    fn parse_model_info(&self, body: &[u8]) -> Result<EngineModel, EngineError> {
        let v = parse_json(body)?;
        let id = v.get("model_path").and_then(Value::as_str).ok_or_else(|| missing("model_path"))?;
        if v.get("is_generation").and_then(Value::as_bool) == Some(false) {
            return Err(bad(format!("SGLang serves `{id}` as an embedding or reward model (`is_generation: false`); it cannot generate")));
        }
        Ok(EngineModel { id: id.to_string(), vocab_size: None, max_context: None })
    }

    fn tokenize_call(&self, text: &str) -> Option<HttpCall> {
        self.tokenizer.then(|| HttpCall::post(TOKENIZE_PATH, json!({ "prompt": text, "add_special_tokens": false })))
    }

    fn parse_tokenize(&self, body: &[u8]) -> Result<Vec<u32>, EngineError> {
        let v = parse_json(body)?;
        v.get("tokens").and_then(Value::as_array).ok_or_else(|| missing("tokens"))?.iter().map(token_id).collect()
    }

    /// From the token before the hard position: SGLang lists no choice at `logprob_start_len`
    /// itself (see the module doc), and caps its radix-cache match there.
    fn draft_check_call(&self, r: &DraftCheckRequest<'_>) -> HttpCall {
        self.prompt_logprobs_call(&r.sequence(), 1, r.context.len().saturating_sub(1))
    }

    fn parse_draft_check(&self, r: &DraftCheckRequest<'_>, body: &[u8]) -> Result<EngineReply, EngineError> {
        let sequence = r.sequence();
        let choices = self.choices_in(&r.prompt_choices(&sequence), body)?;
        let next = self.parse_next_token(body)?;
        // The generated token: the LLM's after the whole draft (the bonus).
        let bonus = *next.tokens.first().ok_or_else(|| missing("output_ids"))?;
        let tokens = choices.iter().map(|c| c.best).chain(std::iter::once(bonus)).collect();
        Ok(EngineReply { tokens, ..next })
    }
}

/// The router lab's teacher ([`PromptChoicesDialect`]), on the same parsers as the draft check.
impl PromptChoicesDialect for SglangDialect {
    fn prompt_choices_calls(&self, r: &PromptChoicesRequest<'_>) -> Vec<HttpCall> {
        if r.positions().is_empty() {
            return Vec::new();
        }
        vec![self.prompt_logprobs_call(r.tokens, r.top_n(), 0)]
    }

    fn parse_prompt_choices(&self, r: &PromptChoicesRequest<'_>, bodies: &[Vec<u8>]) -> Result<Vec<PromptChoice>, EngineError> {
        let positions = r.positions();
        let [body] = bodies else {
            return if positions.is_empty() { Ok(Vec::new()) } else { Err(bad(format!("expected one /generate answer, got {}", bodies.len()))) };
        };
        self.choices_in(r, body)
    }
}

impl SglangDialect {
    /// The greedy one-token call for `tokens` with the top `top_n` log-probabilities of every
    /// prompt position from `start` (`logprob_start_len`) on: the prompt choices of the router
    /// lab's teacher (from 0) and of a draft check (from the hard position's predecessor).
    fn prompt_logprobs_call(&self, tokens: &[u32], top_n: u32, start: usize) -> HttpCall {
        let greedy = common::sampling::SamplingParams::default();
        let next = NextTokenRequest { context: tokens, sampling: &greedy, seed: None, max_new_tokens: 1, top_logprobs: top_n, slot: None };
        let mut call = self.next_token_call(&next);
        if let Some(body) = call.body.as_mut() {
            body["logprob_start_len"] = json!(start);
        }
        call
    }

    /// The choices at `r`'s positions in one `/generate` answer's `meta_info.input_top_logprobs`.
    fn choices_in(&self, r: &PromptChoicesRequest<'_>, body: &[u8]) -> Result<Vec<PromptChoice>, EngineError> {
        let positions = r.positions();
        let v = parse_json(body)?;
        if let Some(error) = v.get("error") {
            return Err(bad(format!("SGLang reported an error: {}", clip(error))));
        }
        let meta = v.get("meta_info").filter(|m| m.is_object()).ok_or_else(|| missing("meta_info"))?;
        let entries = meta.get("input_top_logprobs").and_then(Value::as_array).ok_or_else(|| missing("meta_info.input_top_logprobs (a server that predates top_logprobs_num?)"))?;
        aligned_positions(entries, r.tokens.len(), positions.clone(), "SGLang")?
            .iter()
            .zip(positions)
            .map(|(entry, at)| {
                let candidates = entry.as_array().ok_or_else(|| bad(format!("meta_info.input_top_logprobs at position {at} is {}", clip(entry))))?.iter().map(top_entry).collect::<Result<Vec<_>, _>>()?;
                PromptChoice::from_candidates(&candidates, r.runner_up).ok_or_else(|| bad(format!("no top logprob at position {at}")))
            })
            .collect()
    }
}

/// One `[logprob, token_id, text-or-null]` entry of a top-logprobs list.
fn top_entry(e: &Value) -> Result<EngineToken, EngineError> {
    let id = e.get(1).map_or(Err(missing("a top logprob's token id")), token_id)?;
    let logprob = e.get(0).and_then(Value::as_f64).map(|l| l as f32);
    Ok(EngineToken { id, logprob })
}

/// The logprob of generated token `i` (of `n`) with id `id`: the entries are aligned on the last
/// token, and one whose id differs is not used.
fn aligned_logprob(entries: Option<&Vec<Value>>, n: usize, i: usize, id: u32) -> Option<f32> {
    let entry = entries?.get((entries?.len() + i).checked_sub(n)?)?.as_array()?;
    if entry.get(1)?.as_u64()? != u64::from(id) {
        return None;
    }
    entry.first()?.as_f64().map(|l| l as f32)
}

/// A count from `meta_info`, when it is a u32 (it only feeds metrics).
fn count(v: Option<&Value>) -> Option<u32> {
    v.and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok())
}

/// No generated token; names the abort when SGLang says it aborted.
fn no_token(meta: &Value) -> EngineError {
    let reason = meta.get("finish_reason");
    match reason.and_then(|r| r.get("type")).and_then(Value::as_str) {
        Some("abort") => bad(format!("SGLang aborted the request: {}", reason.and_then(|r| r.get("message")).map_or_else(|| "no message".into(), clip))),
        _ => bad("SGLang generated no token (`output_ids` and `meta_info.output_token_logprobs` empty or absent)"),
    }
}

fn missing(field: &str) -> EngineError {
    bad(format!("SGLang answer lacks `{field}`"))
}

fn bad(message: impl Into<String>) -> EngineError {
    EngineError::BadResponse(message.into())
}

/// A JSON value shortened for an error message.
fn clip(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    s.chars().take(120).collect()
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

    fn body(dialect: SglangDialect, r: &NextTokenRequest<'_>) -> Value {
        let call = dialect.next_token_call(r);
        assert_eq!(call.path, "/generate");
        call.body.expect("a POST")
    }

    fn approx(v: &Value, want: f64) -> bool {
        v.as_f64().is_some_and(|x| (x - want).abs() < 1e-6)
    }

    #[test]
    fn a_greedy_request_sends_input_ids_for_one_token_and_no_text() {
        let greedy = SamplingParams::default();
        let b = body(SglangDialect::new(), &NextTokenRequest { seed: Some(7), slot: Some(2), ..request(&[151644, 872, 198], &greedy) });
        assert_eq!(b["input_ids"], json!([151644, 872, 198]));
        assert!(b.get("text").is_none(), "servers with --skip-tokenizer-init take ids only");
        let p = &b["sampling_params"];
        assert_eq!(p["max_new_tokens"], 1);
        assert!(approx(&p["temperature"], 0.0) && approx(&p["top_p"], 1.0));
        assert_eq!(p["top_k"], -1);
        assert!(approx(&p["repetition_penalty"], 1.0) && approx(&p["min_p"], 0.0));
        assert!(approx(&p["frequency_penalty"], 0.0) && approx(&p["presence_penalty"], 0.0));
        assert!(p.get("sampling_seed").is_none(), "greedy needs no seed");
        assert_eq!((b["return_logprob"].clone(), b["logprob_start_len"].clone(), b["stream"].clone()), (json!(true), json!(-1), json!(false)));
        assert!(b.get("top_logprobs_num").is_none());
        assert!(b.get("id_slot").is_none() && b.get("slot").is_none(), "slots are llama.cpp's");
    }

    #[test]
    fn top_k_one_is_greedy_too() {
        let s = SamplingParams { temperature: 0.8, top_k: 1, top_p: 0.9, seed: None };
        let p = body(SglangDialect::new(), &NextTokenRequest { seed: Some(3), ..request(&[1], &s) })["sampling_params"].clone();
        assert!(approx(&p["temperature"], 0.0));
        assert!(p.get("sampling_seed").is_none());
    }

    #[test]
    fn a_sampled_request_carries_its_settings_and_an_int64_seed() {
        let s = SamplingParams { temperature: 0.7, top_k: 40, top_p: 0.9, seed: None };
        let p = body(SglangDialect::new(), &NextTokenRequest { seed: Some(u64::MAX), ..request(&[1, 2], &s) })["sampling_params"].clone();
        assert!(approx(&p["temperature"], 0.7) && approx(&p["top_p"], 0.9));
        assert_eq!(p["top_k"], 40);
        assert_eq!(p["sampling_seed"].as_u64(), Some(i64::MAX as u64));
        let p = body(SglangDialect::new(), &NextTokenRequest { seed: Some(42), ..request(&[1], &SamplingParams { top_k: 0, ..s }) })["sampling_params"].clone();
        assert_eq!((p["top_k"].clone(), p["sampling_seed"].clone()), (json!(-1), json!(42)), "top_k 0 means no limit, -1 in SGLang");
        let p = body(SglangDialect::new(), &request(&[1], &SamplingParams { top_k: usize::MAX, ..s }))["sampling_params"].clone();
        assert_eq!(p["top_k"], 1 << 30);
        assert!(p.get("sampling_seed").is_none(), "no seed given, none sent");
    }

    #[test]
    fn an_old_server_gets_no_seed_field() {
        let s = SamplingParams { temperature: 1.0, top_k: 0, top_p: 1.0, seed: None };
        let p = body(SglangDialect::new().without_seed(), &NextTokenRequest { seed: Some(9), ..request(&[1], &s) })["sampling_params"].clone();
        assert!(p.get("sampling_seed").is_none());
    }

    #[test]
    fn a_lookahead_with_top_logprobs_asks_for_them() {
        let greedy = SamplingParams::default();
        let b = body(SglangDialect::new(), &NextTokenRequest { max_new_tokens: 4, top_logprobs: 5, ..request(&[1], &greedy) });
        assert_eq!(b["sampling_params"]["max_new_tokens"], 4);
        assert_eq!(b["top_logprobs_num"], 5);
        let b = body(SglangDialect::new(), &NextTokenRequest { max_new_tokens: 0, ..request(&[1], &greedy) });
        assert_eq!(b["sampling_params"]["max_new_tokens"], 1, "never ask for nothing");
    }

    // The `/generate` answer printed by docs.sglang.io "Sending Requests" (send_request.ipynb),
    // section "Using Native Generation APIs" (executed notebook, 2026, qwen2.5-0.5b-instruct,
    // `{"text": "The capital of France is", "sampling_params": {"temperature": 0,
    // "max_new_tokens": 32}}`). The page prints the Python dict; here it is the JSON the server
    // sent (quotes doubled, None → null), otherwise verbatim.
    const DOCS_GENERATE: &str = r#"{"text": " Paris. It is the largest city in Europe and the second largest city in the world. It is located in the south of France, on the banks of the", "output_ids": [12095, 13, 1084, 374, 279, 7772, 3283, 304, 4505, 323, 279, 2086, 7772, 3283, 304, 279, 1879, 13, 1084, 374, 7407, 304, 279, 9806, 315, 9625, 11, 389, 279, 13959, 315, 279], "meta_info": {"id": "ddbf6892b03c4d618e932ec6ded3ca1d", "finish_reason": {"type": "length", "length": 32}, "prompt_tokens": 5, "weight_version": "default", "num_retractions": 0, "reasoning_tokens": 0, "completion_tokens": 32, "cached_tokens": 2, "cached_tokens_details": {"device": 2, "host": 0}, "dp_rank": null, "e2e_latency": 0.2704918598756194, "response_sent_to_client_ts": 1781064066.0164914}}"#;

    #[test]
    fn the_documented_generate_answer_yields_its_ids_and_cache_figures() {
        let r = SglangDialect::new().parse_next_token(DOCS_GENERATE.as_bytes()).unwrap();
        assert_eq!(r.tokens.len(), 32);
        assert_eq!(r.tokens[0], EngineToken { id: 12095, logprob: None });
        assert_eq!(r.tokens[31].id, 279);
        assert_eq!((r.prompt_tokens, r.cached_tokens), (Some(5), Some(2)));
    }

    // docs.sglang.io "Structured Outputs", JSON-schema example over the native `/generate`
    // (executed notebook, 2026; a Llama 3.1 model, whose end-of-turn id is 128009), written as
    // JSON: the answer ends with the EOS id that stopped it (`finish_reason.matched`), which the
    // gateway needs like any other token.
    const DOCS_GENERATE_EOS: &str = r#"{"text": "{\"name\": \"Paris\", \"population\": 2147000}", "output_ids": [5018, 609, 794, 330, 60704, 498, 330, 45541, 794, 220, 11584, 7007, 15, 92, 128009], "meta_info": {"id": "b2c6d22be1274cde8294db55ce963f66", "finish_reason": {"type": "stop", "matched": 128009}, "prompt_tokens": 50, "weight_version": "default", "num_retractions": 0, "reasoning_tokens": 0, "completion_tokens": 15, "cached_tokens": 1, "cached_tokens_details": {"device": 1, "host": 0}, "dp_rank": null, "e2e_latency": 0.36320794839411974, "response_sent_to_client_ts": 1780366071.247658}}"#;

    #[test]
    fn the_eos_that_stopped_generation_is_returned() {
        let r = SglangDialect::new().parse_next_token(DOCS_GENERATE_EOS.as_bytes()).unwrap();
        assert_eq!(r.tokens.last().map(|t| t.id), Some(128009));
        assert_eq!((r.tokens.len(), r.prompt_tokens, r.cached_tokens), (15, Some(50), Some(1)));
    }

    // The answer to what this dialect sends, on a `--skip-tokenizer-init` server: no `text`
    // (`tokenizer_manager.py` builds `{"output_ids", "meta_info"}` for token-id output), with
    // `return_logprob` (`output_token_logprobs` as `[logprob, id, null]`, text null because the
    // server cannot detokenize) and `top_logprobs_num: 2`. Shape from the code; values composed.
    const SKIP_TOKENIZER_LOOKAHEAD: &str = r#"{"output_ids": [12095, 13], "meta_info": {"id": "a1", "finish_reason": {"type": "length", "length": 2}, "prompt_tokens": 1204, "weight_version": "default", "num_retractions": 0, "input_token_logprobs": [], "output_token_logprobs": [[-0.0031, 12095, null], [-0.4716, 13, null]], "output_token_logprobs_length": 2, "input_top_logprobs": [], "output_top_logprobs": [[[-0.0031, 12095, null], [-6.2, 279, null]], [[-0.4716, 13, null], [-1.1, 11, null]]], "reasoning_tokens": 0, "completion_tokens": 2, "cached_tokens": 1200, "e2e_latency": 0.031}}"#;

    #[test]
    fn a_tokenizerless_lookahead_yields_ids_with_their_logprobs() {
        let r = SglangDialect::new().parse_next_token(SKIP_TOKENIZER_LOOKAHEAD.as_bytes()).unwrap();
        assert_eq!(r.tokens, vec![EngineToken { id: 12095, logprob: Some(-0.0031) }, EngineToken { id: 13, logprob: Some(-0.4716) }]);
        assert_eq!((r.prompt_tokens, r.cached_tokens), (Some(1204), Some(1200)));
    }

    // An `Engine.generate` result with `return_logprob` as printed in a public project's notes
    // (SGLang ~v0.5, text mode, `max_new_tokens: 1`): `output_ids` holds the detokenizer's
    // five-token window of the prompt before the one generated id, which
    // `completion_tokens` and `output_token_logprobs` give as 5338.
    const OUTPUT_IDS_WITH_WINDOW: &str = r#"{"text": "First", "output_ids": [3491, 3019, 553, 3019, 382, 5338], "meta_info": {"id": "80704614f4674319b5da35d79a2a2a18", "finish_reason": {"type": "length", "length": 1}, "prompt_tokens": 184, "weight_version": "default", "input_token_logprobs": [[null, 382, null]], "output_token_logprobs": [[-0.014046513475477695, 5338, null]], "completion_tokens": 1, "cached_tokens": 158, "e2e_latency": 0.019438505172729492}}"#;

    #[test]
    fn only_the_generated_ids_are_taken_when_output_ids_carries_a_prompt_window() {
        let r = SglangDialect::new().parse_next_token(OUTPUT_IDS_WITH_WINDOW.as_bytes()).unwrap();
        assert_eq!(r.tokens, vec![EngineToken { id: 5338, logprob: Some(-0.014_046_513_5) }]);
        assert_eq!((r.prompt_tokens, r.cached_tokens), (Some(184), Some(158)));
    }

    #[test]
    fn a_radix_cache_miss_is_reported_as_zero_cached_not_as_unknown() {
        let miss = DOCS_GENERATE.replace(r#""cached_tokens": 2, "cached_tokens_details": {"device": 2, "host": 0}"#, r#""cached_tokens": 0, "cached_tokens_details": {"device": 0, "host": 0}"#);
        assert_ne!(miss, DOCS_GENERATE);
        assert_eq!(SglangDialect::new().parse_next_token(miss.as_bytes()).unwrap().cached_tokens, Some(0));
    }

    #[test]
    fn ids_come_from_the_logprobs_when_output_ids_is_absent_and_mismatched_logprobs_are_dropped() {
        let r = SglangDialect::new().parse_next_token(br#"{"meta_info":{"output_token_logprobs":[[-0.5,7,null],[-0.25,9,"x"]]}}"#).unwrap();
        assert_eq!(r.tokens, vec![EngineToken { id: 7, logprob: Some(-0.5) }, EngineToken { id: 9, logprob: Some(-0.25) }]);
        assert_eq!((r.prompt_tokens, r.cached_tokens), (None, None));
        let r = SglangDialect::new().parse_next_token(br#"{"output_ids":[8],"meta_info":{"output_token_logprobs":[[-0.5,7,null]]}}"#).unwrap();
        assert_eq!(r.tokens, vec![EngineToken { id: 8, logprob: None }], "a logprob of another token is not this one's");
    }

    #[test]
    fn garbage_is_a_typed_error_not_a_panic() {
        let bodies = [
            "",
            "<html>502 Bad Gateway</html>",
            "null",
            "[]",
            r#"[{"output_ids":[1],"meta_info":{}}]"#,
            "{}",
            r#"{"output_ids":[1]}"#,
            r#"{"output_ids":[1],"meta_info":null}"#,
            r#"{"output_ids":[],"meta_info":{}}"#,
            r#"{"output_ids":[],"meta_info":{"output_token_logprobs":[]}}"#,
            r#"{"output_ids":[-1],"meta_info":{}}"#,
            r#"{"output_ids":[1.5],"meta_info":{}}"#,
            r#"{"output_ids":[4294967296],"meta_info":{}}"#,
            r#"{"output_ids":["12"],"meta_info":{}}"#,
            r#"{"output_ids":"12","meta_info":{}}"#,
            r#"{"output_ids":[1],"meta_info":{"completion_tokens":0}}"#,
            r#"{"meta_info":{"output_token_logprobs":[[-0.1]]}}"#,
            r#"{"meta_info":{"output_token_logprobs":[[-0.1,-3,null]]}}"#,
            r#"{"error":{"message":"boom"}}"#,
        ];
        for b in bodies {
            assert!(matches!(SglangDialect::new().parse_next_token(b.as_bytes()), Err(EngineError::BadResponse(_))), "{b}");
        }
    }

    #[test]
    fn an_abort_is_named_in_the_error() {
        let b = br#"{"output_ids":[],"meta_info":{"finish_reason":{"type":"abort","message":"memory pool full"},"completion_tokens":0}}"#;
        match SglangDialect::new().parse_next_token(b) {
            Err(EngineError::BadResponse(m)) => assert!(m.contains("aborted") && m.contains("memory pool full"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    // `GET /get_model_info` as printed by docs.sglang.io "SGLang Native APIs" (executed notebook,
    // 2026, qwen/qwen2.5-0.5b-instruct), Python dict written as JSON.
    const DOCS_MODEL_INFO: &str = r#"{"model_path": "qwen/qwen2.5-0.5b-instruct", "tokenizer_path": "qwen/qwen2.5-0.5b-instruct", "is_generation": true, "preferred_sampling_params": null, "weight_version": "default", "has_image_understanding": false, "has_audio_understanding": false, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}"#;

    #[test]
    fn model_info_reads_the_documented_body() {
        let d = SglangDialect::new();
        assert_eq!(d.model_info_call(), HttpCall::get("/get_model_info"));
        let m = d.parse_model_info(DOCS_MODEL_INFO.as_bytes()).unwrap();
        assert_eq!(m, EngineModel { id: "qwen/qwen2.5-0.5b-instruct".into(), vocab_size: None, max_context: None });
        // The 0.4-era body (before weight_version and the modality flags) reads the same.
        let old = br#"{"model_path":"Qwen/Qwen2.5-32B-Instruct","tokenizer_path":"Qwen/Qwen2.5-32B-Instruct","is_generation":true}"#;
        assert_eq!(d.parse_model_info(old).unwrap().id, "Qwen/Qwen2.5-32B-Instruct");
        for b in ["{}", "[]", "x", r#"{"model_path":3}"#, r#"{"model_path":"gte","is_generation":false}"#] {
            assert!(matches!(d.parse_model_info(b.as_bytes()), Err(EngineError::BadResponse(_))), "{b}");
        }
        assert_eq!(d.health_path(), "/health");
        assert_eq!(d.kind(), EngineKind::Sglang);
    }

    // `/tokenize` from docs.sglang.io "SGLang Native APIs", "Tokenize/Detokenize Example": the
    // notebook prints the ids of "SGLang provides efficient tokenization endpoints." and reads
    // `count` and `max_model_len` from the same body (their values are not printed; 9 is the
    // ids' count and 32768 Qwen2.5-0.5B's context).
    const DOCS_TOKENIZE: &str = r#"{"tokens": [50, 3825, 524, 5707, 11050, 3950, 2022, 36342, 13], "count": 9, "max_model_len": 32768}"#;

    #[test]
    fn tokenize_is_offered_only_with_a_tokenizer_and_reads_the_documented_body() {
        let call = SglangDialect::new().tokenize_call("SGLang provides efficient tokenization endpoints.").unwrap();
        assert_eq!(call.path, "/tokenize");
        let b = call.body.unwrap();
        assert_eq!((b["prompt"].clone(), b["add_special_tokens"].clone()), (json!("SGLang provides efficient tokenization endpoints."), json!(false)));
        assert!(SglangDialect::new().without_tokenizer().tokenize_call("x").is_none());
        assert_eq!(SglangDialect::new().parse_tokenize(DOCS_TOKENIZE.as_bytes()).unwrap(), vec![50, 3825, 524, 5707, 11050, 3950, 2022, 36342, 13]);
        for b in ["{}", r#"{"tokens":[-1]}"#, r#"{"tokens":"1"}"#, "nope"] {
            assert!(matches!(SglangDialect::new().parse_tokenize(b.as_bytes()), Err(EngineError::BadResponse(_))), "{b}");
        }
    }

    fn choices_request(runner_up: bool) -> PromptChoicesRequest<'static> {
        PromptChoicesRequest { tokens: &[151644, 872, 198, 3838, 374], first: 3, runner_up, slot: Some(0) }
    }

    #[test]
    fn prompt_choices_are_one_greedy_request_for_the_top_logprobs_of_every_prompt_position() {
        let calls = SglangDialect::new().prompt_choices_calls(&choices_request(true));
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].path, "/generate");
        let b = calls[0].body.clone().unwrap();
        assert_eq!(b["input_ids"], json!([151644, 872, 198, 3838, 374]));
        assert_eq!((b["return_logprob"].clone(), b["logprob_start_len"].clone(), b["top_logprobs_num"].clone()), (json!(true), json!(0), json!(2)));
        let p = &b["sampling_params"];
        assert_eq!((p["max_new_tokens"].clone(), p["top_k"].clone()), (json!(1), json!(-1)));
        assert!(approx(&p["temperature"], 0.0) && approx(&p["repetition_penalty"], 1.0), "greedy, no penalty: {p}");
        assert!(b.get("id_slot").is_none(), "slots are llama.cpp's");
        let b = SglangDialect::new().prompt_choices_calls(&choices_request(false))[0].body.clone().unwrap();
        assert_eq!(b["top_logprobs_num"], 1, "the best token alone");
        let nothing = PromptChoicesRequest { first: 5, ..choices_request(false) };
        assert!(SglangDialect::new().prompt_choices_calls(&nothing).is_empty(), "no position, no request");
        assert_eq!(SglangDialect::new().parse_prompt_choices(&nothing, &[]).unwrap(), vec![]);
    }

    // The answer to that request in the shape `tokenizer_manager.py` builds with
    // `return_logprob`, `logprob_start_len: 0` and `top_logprobs_num: 2` on a server without
    // `return_text_in_logprobs`: `input_token_logprobs` has one `[logprob, id, null]` per prompt
    // token (the first logprob null), `input_top_logprobs` one best-first list per position (the
    // first null), then the generated token's. Values composed.
    const PROMPT_TOP_LOGPROBS: &str = r#"{"output_ids": [13], "meta_info": {"id": "c0ffee", "finish_reason": {"type": "length", "length": 1}, "prompt_tokens": 5, "weight_version": "default", "completion_tokens": 1, "cached_tokens": 0,
        "input_token_logprobs": [[null, 151644, null], [-9.1, 872, null], [-0.02, 198, null], [-2.4, 3838, null], [-0.4, 374, null]],
        "output_token_logprobs": [[-0.8, 13, null]],
        "input_top_logprobs": [null, [[-0.9, 8948, null], [-1.3, 872, null]], [[-0.02, 198, null], [-4.6, 271, null]], [[-2.1, 40, null], [-2.4, 3838, null]], [[-0.4, 374, null], [-1.2, 525, null]]],
        "output_top_logprobs": [[[-0.8, 13, null], [-1.1, 30, null]]]}}"#;

    #[test]
    fn prompt_choices_read_the_best_and_runner_up_at_each_position_asked_for() {
        let r = choices_request(true);
        let choices = SglangDialect::new().parse_prompt_choices(&r, &[PROMPT_TOP_LOGPROBS.as_bytes().to_vec()]).unwrap();
        assert_eq!(
            choices,
            vec![
                PromptChoice { best: EngineToken { id: 40, logprob: Some(-2.1) }, runner_up: Some(EngineToken { id: 3838, logprob: Some(-2.4) }) },
                PromptChoice { best: EngineToken { id: 374, logprob: Some(-0.4) }, runner_up: Some(EngineToken { id: 525, logprob: Some(-1.2) }) },
            ]
        );
        let from_one = PromptChoicesRequest { first: 0, runner_up: false, ..r };
        let all = SglangDialect::new().parse_prompt_choices(&from_one, &[PROMPT_TOP_LOGPROBS.as_bytes().to_vec()]).unwrap();
        assert_eq!(all.iter().map(|c| c.best.id).collect::<Vec<_>>(), vec![8948, 198, 40, 374], "position 0 has no choice");
        assert!(all.iter().all(|c| c.runner_up.is_none()), "not asked for");
    }

    #[test]
    fn a_prompt_logprob_list_without_its_leading_null_is_aligned_on_its_end() {
        let body = br#"{"meta_info": {"input_top_logprobs": [[[-0.9, 8948, null]], [[-0.02, 198, null]], [[-2.1, 40, null]], [[-0.4, 374, null]]]}}"#;
        let choices = SglangDialect::new().parse_prompt_choices(&choices_request(false), &[body.to_vec()]).unwrap();
        assert_eq!(choices.iter().map(|c| c.best.id).collect::<Vec<_>>(), vec![40, 374]);
    }

    #[test]
    fn a_prompt_choices_answer_that_lacks_positions_is_a_typed_error() {
        let r = choices_request(true);
        for body in [
            r#"{"output_ids": [13], "meta_info": {"output_token_logprobs": [[-0.8, 13, null]]}}"#,
            r#"{"meta_info": {"input_top_logprobs": [[[-0.4, 374, null]]]}}"#,
            r#"{"meta_info": {"input_top_logprobs": [null, null, null, null, [[-0.4, 374, null]]]}}"#,
            r#"{"meta_info": {"input_top_logprobs": [null, [], [], [], []]}}"#,
            r#"{"meta_info": {"input_top_logprobs": [null, [], [], [[-2.1, -40, null]], [[-0.4, 374, null]]]}}"#,
            r#"{"error": {"message": "logprob_start_len is out of range"}}"#,
            "nope",
        ] {
            assert!(matches!(SglangDialect::new().parse_prompt_choices(&r, &[body.as_bytes().to_vec()]), Err(EngineError::BadResponse(_))), "{body}");
        }
        assert!(SglangDialect::new().parse_prompt_choices(&r, &[]).is_err(), "no answer for positions asked");
    }

    const DRAFT_CONTEXT: &[u32] = &[151644, 872, 198];

    fn draft_request(draft: &'static [u32]) -> DraftCheckRequest<'static> {
        DraftCheckRequest { context: DRAFT_CONTEXT, draft, slot: None }
    }

    #[test]
    fn a_draft_check_is_one_greedy_request_for_the_prompt_logprobs_from_just_before_the_hard_position() {
        let call = SglangDialect::new().draft_check_call(&draft_request(&[3838, 374]));
        assert_eq!(call.path, "/generate");
        let b = call.body.unwrap();
        assert_eq!(b["input_ids"], json!([151644, 872, 198, 3838, 374]), "context and draft");
        assert_eq!((b["return_logprob"].clone(), b["logprob_start_len"].clone(), b["top_logprobs_num"].clone()), (json!(true), json!(2), json!(1)));
        let p = &b["sampling_params"];
        assert_eq!((p["max_new_tokens"].clone(), p["top_k"].clone()), (json!(1), json!(-1)), "one generated token: the bonus");
        assert!(approx(&p["temperature"], 0.0) && approx(&p["repetition_penalty"], 1.0), "greedy, no penalty: {p}");
    }

    /// The answer to that request, in the shape `scheduler_output_processor_mixin.py` builds for
    /// `logprob_start_len: 2` and `top_logprobs_num: 1` (values composed): `input_top_logprobs`
    /// has one entry per prompt token from position 2 on, null at 2 (nothing computed predicts
    /// it), then the best at positions 3 and 4; the generated token is the choice after them.
    fn draft_answer(at3: u32, at4: u32, generated: u32) -> Vec<u8> {
        format!(
            r#"{{"output_ids": [{generated}], "meta_info": {{"id": "d1", "finish_reason": {{"type": "length", "length": 1}}, "prompt_tokens": 5, "weight_version": "default", "completion_tokens": 1, "cached_tokens": 2,
            "input_token_logprobs": [[null, 198, null], [-2.4, 3838, null], [-0.4, 374, null]],
            "output_token_logprobs": [[-0.8, {generated}, null]],
            "input_top_logprobs": [null, [[-0.3, {at3}, null]], [[-0.2, {at4}, null]]],
            "output_top_logprobs": [[[-0.8, {generated}, null]]]}}}}"#
        )
        .into_bytes()
    }

    fn verdict(draft: &'static [u32], body: &[u8]) -> (u32, u32, f32) {
        let reply = SglangDialect::new().parse_draft_check(&draft_request(draft), body).unwrap();
        let t = reply.verdict(draft).unwrap();
        (t.accepted, t.token_id, t.logprob)
    }

    #[test]
    fn a_draft_the_llm_agrees_with_is_accepted_whole_with_the_generated_token_as_the_bonus() {
        let body = draft_answer(3838, 374, 13);
        let reply = SglangDialect::new().parse_draft_check(&draft_request(&[3838, 374]), &body).unwrap();
        assert_eq!(reply.tokens.iter().map(|t| t.id).collect::<Vec<_>>(), vec![3838, 374, 13]);
        assert_eq!((reply.prompt_tokens, reply.cached_tokens), (Some(5), Some(2)));
        assert_eq!(verdict(&[3838, 374], &body), (2, 13, -0.8));
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
    fn a_draft_answer_without_the_leading_null_of_older_servers_reads_the_same() {
        let body = br#"{"output_ids": [13], "meta_info": {"completion_tokens": 1, "output_token_logprobs": [[-0.8, 13, null]], "input_top_logprobs": [[[-0.3, 3838, null]], [[-0.2, 374, null]]]}}"#;
        assert_eq!(verdict(&[3838, 374], body), (2, 13, -0.8));
    }

    #[test]
    fn a_draft_answer_that_lacks_positions_or_the_generated_token_is_a_typed_error() {
        let r = draft_request(&[3838, 374]);
        for body in [
            r#"{"output_ids": [13], "meta_info": {"output_token_logprobs": [[-0.8, 13, null]]}}"#,
            r#"{"output_ids": [13], "meta_info": {"input_top_logprobs": [[[-0.2, 374, null]]]}}"#,
            r#"{"output_ids": [], "meta_info": {"input_top_logprobs": [null, [[-0.3, 3838, null]], [[-0.2, 374, null]]]}}"#,
            r#"{"error": {"message": "logprob_start_len is out of range"}}"#,
            "nope",
        ] {
            assert!(matches!(SglangDialect::new().parse_draft_check(&r, body.as_bytes()), Err(EngineError::BadResponse(_))), "{body}");
        }
    }

    /// The fields this dialect reads, for [`crate::testing::jsonish`].
    const FIELDS: &[&str] = &["output_ids", "meta_info", "output_token_logprobs", "input_top_logprobs", "completion_tokens", "prompt_tokens", "cached_tokens", "finish_reason", "type", "message", "error"];

    proptest! {
        #[test]
        fn parsing_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = SglangDialect::new().parse_next_token(&bytes);
            let _ = SglangDialect::new().parse_model_info(&bytes);
            let _ = SglangDialect::new().parse_tokenize(&bytes);
        }

        #[test]
        fn parsing_never_panics_on_json(v in crate::testing::jsonish(FIELDS)) {
            let bytes = serde_json::to_vec(&v).unwrap();
            if let Ok(reply) = SglangDialect::new().parse_next_token(&bytes) {
                prop_assert!(!reply.tokens.is_empty());
            }
            let r = PromptChoicesRequest { tokens: &[1, 2, 3], first: 1, runner_up: true, slot: None };
            if let Ok(choices) = SglangDialect::new().parse_prompt_choices(&r, std::slice::from_ref(&bytes)) {
                prop_assert_eq!(choices.len(), 2);
            }
            let d = DraftCheckRequest { context: &[1], draft: &[2, 3], slot: None };
            if let Ok(reply) = SglangDialect::new().parse_draft_check(&d, &bytes) {
                prop_assert_eq!(reply.tokens.len(), 3);
            }
        }
    }
}
