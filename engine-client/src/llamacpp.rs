//! llama.cpp's `llama-server`: `POST /completion` with the context as a token-id array.
//!
//! The mapping follows the server vendored by `llama-cpp-python` 0.3.36 (the one
//! `deploy/engines/llamacpp/build` builds and the test suite runs), whose README documents:
//! - a prompt given as an array of token ids is used as is (no BOS is added);
//! - `n_predict` tokens; greedy via `top_k: 1` (with `temperature: 0`);
//! - `return_tokens: true` fills `tokens` with the generated ids (otherwise it is empty);
//! - `n_probs > 0` adds `completion_probabilities` (`id`, `logprob`, `top_logprobs` per token);
//! - `cache_prompt: true` reuses the slot's KV cache for the common prefix (or one saved to the
//!   host-memory prompt cache, `--cache-ram`); `timings.cache_n` says how many prompt tokens
//!   came from it, `timings.prompt_n` how many it processed, `tokens_evaluated` how many the
//!   prompt had (builds before `cache_n`: cached = `tokens_evaluated` - `prompt_n`;
//!   `tokens_cached` is what the slot holds after the request, not what it found). The pool's
//!   admission counts a session's context as held only when these show it (`pool::admission`);
//! - `id_slot` pins a request to a slot; sent only when asked for, because the server already
//!   gives a request the idle slot whose cache shares the longest prefix with it;
//! - `GET /health` is 503 while the model loads and 200 when ready; `GET /v1/models` carries
//!   `meta.n_vocab` and `meta.n_ctx` (per slot); `POST /tokenize` `{content, add_special}`.
//!
//! The server checks every prompt id against its vocabulary and answers 400 otherwise.
//!
//! Prompt choices (the router lab's teacher, [`PromptChoicesRequest`]): llama-server returns
//! probabilities only for generated tokens, never for the prompt, so the LLM's choice at
//! position `i` is the greedy next-token call for `tokens[..i]` with `n_probs` 1 (2 with the
//! runner-up): one request per position, made in order and pinned to one slot (`id_slot`)
//! with `cache_prompt`, so each prefills the one token the previous request did not have on
//! the slot's cached prefix. A sequence of N positions costs N requests (N one-token steps, as
//! the in-process teacher's decode steps, plus an HTTP round trip each), where SGLang and vLLM
//! take one prefill. The first request of a sequence prefills its prefix afresh
//! (`cache_prompt: false`; the slot still keeps the result for the next request): llama.cpp's
//! CPU kernels are not batch-invariant, so a token's keys and values, and every choice after
//! them, differ by up to ~0.1 nat with how the prefix was split into prefills (measured on
//! the 1.5B Q4_K_M: one 119-token prefill against 5 cached + 114, a near-tie flipped), and
//! reusing whatever prefix the previous sequence left would make a sequence's choices depend on
//! which sequence came before it.
//!
//! Draft check ([`DraftCheckRequest`], a greedy escalation with a draft): with no prompt
//! probabilities, a draft is checked by asking for the greedy continuation of the context,
//! `n_predict` = the draft's length plus one, in one `/completion` request (`cache_prompt`, so
//! only the delta is prefilled, as for a plain escalation). Its tokens are the LLM's choices: the
//! first at the hard position, each next one given the tokens before it, which are the draft's
//! as long as they agree; the acceptance rule stops reading at the first disagreement. Cost:
//! draft length + 1 decode steps (one forward pass each, sequential) instead of the one pass a
//! prompt-logprob engine takes, and a draft rejected at its first token wastes all but the
//! first step; hence the length is capped at the draft the device sent (whose adaptive length
//! shortens after rejections), and a sampled escalation is not checked at all (its draft
//! answered with `accepted` 0): the continuation's tokens are the argmax, not the seeded draws
//! the device would get one position at a time. Decode steps and a prefill differ slightly in
//! their logits on llama.cpp's CPU kernels (above), so a near-tie may resolve otherwise than in
//! a plain escalation of the same context; every token answered is still the engine's own.

use common::sampling::SamplingParams;

use serde_json::{json, Value};

use crate::prompt_choices::PromptChoicesDialect;
use crate::{first_listed_model, parse_json, token_id, Dialect, DraftCheckRequest, EngineError, EngineKind, EngineModel, EngineReply, EngineToken, HttpCall, NextTokenRequest, PromptChoice, PromptChoicesRequest};

/// The `llama-server` dialect.
#[derive(Debug, Clone, Copy, Default)]
pub struct LlamaCppDialect;

impl Dialect for LlamaCppDialect {
    fn kind(&self) -> EngineKind {
        EngineKind::LlamaCpp
    }

    fn next_token_call(&self, r: &NextTokenRequest<'_>) -> HttpCall {
        let s = r.sampling;
        let mut body = json!({
            "prompt": r.context,
            "n_predict": r.max_new_tokens.max(1),
            "cache_prompt": true,
            "return_tokens": true,
            // Always at least the chosen token's log-probability.
            "n_probs": r.top_logprobs.max(1),
            "stream": false,
            // Only the fields read back: the default body repeats the prompt and all settings.
            "response_fields": ["tokens", "completion_probabilities", "tokens_evaluated", "timings"],
        });
        // Penalties would make the answer depend on more than the context and the seed.
        body["repeat_penalty"] = json!(1.0);
        body["min_p"] = json!(0.0);
        if s.is_greedy() {
            body["temperature"] = json!(0.0);
            body["top_k"] = json!(1);
        } else {
            body["temperature"] = json!(s.temperature);
            body["top_k"] = json!(s.top_k);
            body["top_p"] = json!(s.top_p);
        }
        if let Some(seed) = r.seed {
            // llama.cpp takes a u32 seed (0xFFFFFFFF = random); fold the 64-bit one.
            body["seed"] = json!(((seed >> 32) ^ seed) as u32 & 0x7fff_ffff);
        }
        if let Some(slot) = r.slot {
            body["id_slot"] = json!(slot);
        }
        HttpCall::post("/completion", body)
    }

    fn parse_next_token(&self, body: &[u8]) -> Result<EngineReply, EngineError> {
        let v = parse_json(body)?;
        let probs = v.get("completion_probabilities").and_then(Value::as_array);
        let ids: Vec<u32> = match v.get("tokens").and_then(Value::as_array) {
            Some(tokens) if !tokens.is_empty() => tokens.iter().map(token_id).collect::<Result<_, _>>()?,
            _ => match probs {
                Some(p) if !p.is_empty() => p.iter().map(|e| e.get("id").map_or(Err(missing("completion_probabilities[].id")), token_id)).collect::<Result<_, _>>()?,
                _ => return Err(EngineError::BadResponse("no generated token (`tokens` and `completion_probabilities` empty or absent)".into())),
            },
        };
        let tokens = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| {
                let logprob = probs.and_then(|p| p.get(i)).filter(|e| e.get("id").and_then(Value::as_u64) == Some(u64::from(id))).and_then(|e| e.get("logprob")).and_then(Value::as_f64).map(|l| l as f32);
                EngineToken { id, logprob }
            })
            .collect();
        let count = |v: Option<&Value>| v.and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok());
        let timings = v.get("timings");
        let processed = count(timings.and_then(|t| t.get("prompt_n")));
        let evaluated = count(v.get("tokens_evaluated"));
        // Builds before `cache_n` say only how many prompt tokens they processed of how many.
        let cached = count(timings.and_then(|t| t.get("cache_n"))).or_else(|| evaluated?.checked_sub(processed?));
        let prompt = evaluated.or_else(|| Some(processed? + cached.unwrap_or(0)));
        Ok(EngineReply { tokens, prompt_tokens: prompt, cached_tokens: cached })
    }

    fn health_path(&self) -> &'static str {
        "/health"
    }

    fn model_info_call(&self) -> HttpCall {
        HttpCall::get("/v1/models")
    }

    fn parse_model_info(&self, body: &[u8]) -> Result<EngineModel, EngineError> {
        let v = parse_json(body)?;
        let (model, id) = first_listed_model(&v, "llama-server")?;
        let id = id.to_string();
        let meta = model.get("meta");
        let size = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok());
        Ok(EngineModel { id, vocab_size: size("n_vocab"), max_context: size("n_ctx") })
    }

    fn tokenize_call(&self, text: &str) -> Option<HttpCall> {
        Some(HttpCall::post("/tokenize", json!({ "content": text, "add_special": false, "parse_special": false })))
    }

    fn parse_tokenize(&self, body: &[u8]) -> Result<Vec<u32>, EngineError> {
        let v = parse_json(body)?;
        v.get("tokens").and_then(Value::as_array).ok_or_else(|| missing("tokens"))?.iter().map(token_id).collect()
    }

    /// The greedy continuation of the context, as long as the draft plus one (see the module
    /// doc for what it costs).
    fn draft_check_call(&self, r: &DraftCheckRequest<'_>) -> HttpCall {
        let greedy = SamplingParams::default();
        let n = u32::try_from(r.draft.len()).unwrap_or(u32::MAX - 1) + 1;
        self.next_token_call(&NextTokenRequest { context: r.context, sampling: &greedy, seed: None, max_new_tokens: n, top_logprobs: 1, slot: r.slot })
    }

    /// Its tokens in order are the LLM's choices: each given the context and the tokens before
    /// it, which are the draft's for as long as they agree with it (all the rule reads).
    fn parse_draft_check(&self, r: &DraftCheckRequest<'_>, body: &[u8]) -> Result<EngineReply, EngineError> {
        let mut reply = self.parse_next_token(body)?;
        reply.tokens.truncate(r.draft.len() + 1);
        Ok(reply)
    }
}

/// The router lab's teacher ([`PromptChoicesDialect`]), on the same parsers as the draft check.
impl PromptChoicesDialect for LlamaCppDialect {
    fn prompt_choices_calls(&self, r: &PromptChoicesRequest<'_>) -> Vec<HttpCall> {
        let greedy = SamplingParams::default();
        let mut calls: Vec<HttpCall> = r
            .positions()
            .map(|at| self.next_token_call(&NextTokenRequest { context: &r.tokens[..at], sampling: &greedy, seed: None, max_new_tokens: 1, top_logprobs: r.top_n(), slot: r.slot }))
            .collect();
        // The prefix from scratch, whatever the slot holds (see the module doc).
        if let Some(body) = calls.first_mut().and_then(|c| c.body.as_mut()) {
            body["cache_prompt"] = json!(false);
        }
        calls
    }

    fn parse_prompt_choices(&self, r: &PromptChoicesRequest<'_>, bodies: &[Vec<u8>]) -> Result<Vec<PromptChoice>, EngineError> {
        if bodies.len() != r.positions().len() {
            return Err(EngineError::BadResponse(format!("{} /completion answers for {} positions", bodies.len(), r.positions().len())));
        }
        bodies.iter().map(|body| self.parse_choice(body, r.runner_up)).collect()
    }
}

impl LlamaCppDialect {
    /// One per-position answer: the generated (greedy) token, and the best other entry of its
    /// `top_logprobs` as the runner-up.
    fn parse_choice(&self, body: &[u8], runner_up: bool) -> Result<PromptChoice, EngineError> {
        let best = *self.parse_next_token(body)?.tokens.first().ok_or_else(|| missing("tokens"))?;
        if !runner_up {
            return Ok(PromptChoice { best, runner_up: None });
        }
        let v = parse_json(body)?;
        let top = v.pointer("/completion_probabilities/0/top_logprobs").and_then(Value::as_array).ok_or_else(|| missing("completion_probabilities[0].top_logprobs"))?;
        let mut others = Vec::with_capacity(top.len());
        for e in top {
            let id = e.get("id").map_or(Err(missing("top_logprobs[].id")), token_id)?;
            others.push(EngineToken { id, logprob: e.get("logprob").and_then(Value::as_f64).map(|l| l as f32) });
        }
        let second = PromptChoice::from_candidates(&others, true).and_then(|c| if c.best.id == best.id { c.runner_up } else { Some(c.best) });
        Ok(PromptChoice { best, runner_up: second })
    }
}

fn missing(field: &str) -> EngineError {
    EngineError::BadResponse(format!("llama-server response lacks `{field}`"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::AcceptanceRule;
    use common::sampling::SamplingParams;

    fn request<'a>(context: &'a [u32], sampling: &'a SamplingParams) -> NextTokenRequest<'a> {
        NextTokenRequest { context, sampling, seed: None, max_new_tokens: 1, top_logprobs: 0, slot: None }
    }

    #[test]
    fn a_greedy_request_sends_token_ids_for_one_token_with_the_prompt_cache_on() {
        let greedy = SamplingParams::default();
        let call = LlamaCppDialect.next_token_call(&NextTokenRequest { slot: Some(3), ..request(&[151644, 872, 198], &greedy) });
        assert_eq!(call.path, "/completion");
        let b = call.body.unwrap();
        assert_eq!(b["prompt"], json!([151644, 872, 198]));
        assert_eq!(b["n_predict"], 1);
        assert_eq!((b["top_k"].clone(), b["temperature"].clone()), (json!(1), json!(0.0)));
        assert_eq!((b["cache_prompt"].clone(), b["return_tokens"].clone(), b["stream"].clone()), (json!(true), json!(true), json!(false)));
        assert_eq!(b["n_probs"], 1);
        assert_eq!(b["id_slot"], 3);
        assert!(b.get("seed").is_none());
    }

    #[test]
    fn a_sampled_request_carries_its_settings_and_a_seed_llama_cpp_accepts() {
        let s = SamplingParams { temperature: 0.7, top_k: 40, top_p: 0.9, seed: Some(1) };
        let b = LlamaCppDialect.next_token_call(&NextTokenRequest { seed: Some(u64::MAX), max_new_tokens: 4, top_logprobs: 5, ..request(&[1], &s) }).body.unwrap();
        assert_eq!((b["top_k"].clone(), b["n_predict"].clone(), b["n_probs"].clone()), (json!(40), json!(4), json!(5)));
        assert!((b["temperature"].as_f64().unwrap() - 0.7).abs() < 1e-6);
        let seed = b["seed"].as_u64().unwrap();
        assert!(seed < 0x8000_0000, "never the 'random' sentinel 0xFFFFFFFF");
    }

    /// A `/completion` answer, verbatim, from the llama-server `deploy/engines/llamacpp/build`
    /// builds (Qwen2.5-Coder-1.5B-Instruct Q4_K_M, this dialect's request for a 10-token
    /// context whose first 9 tokens the slot had cached).
    const COMPLETION: &str = r#"{"tokens":[0],"completion_probabilities":[{"id":0,"token":"!","bytes":[33],"logprob":-0.00539773516356945,"top_logprobs":[{"id":0,"token":"!","bytes":[33],"logprob":-0.00539773516356945}]}],"tokens_evaluated":10,"timings":{"cache_n":9,"prompt_n":1,"prompt_ms":92.065,"prompt_per_token_ms":92.065,"prompt_per_second":10.861891055232716,"predicted_n":1,"predicted_ms":0.001,"predicted_per_token_ms":0.0,"predicted_per_second":0.0}}"#;

    #[test]
    fn a_completion_yields_its_token_logprob_and_cache_figures() {
        let r = LlamaCppDialect.parse_next_token(COMPLETION.as_bytes()).unwrap();
        assert_eq!(r.tokens, vec![EngineToken { id: 0, logprob: Some(-0.005_397_735) }]);
        assert_eq!((r.prompt_tokens, r.cached_tokens), (Some(10), Some(9)));
    }

    #[test]
    fn the_full_default_body_of_the_readme_parses_too() {
        // Shape of the README's non-streaming example (fields not read are ignored).
        let body = r#"{"index":0,"content":" Paris","tokens":[12095],"id_slot":0,"stop":true,"model":"qwen","tokens_predicted":1,"tokens_evaluated":7,
            "generation_settings":{"n_predict":1},"prompt":"","has_new_line":false,"truncated":false,"stop_type":"limit","stopping_word":"","tokens_cached":7,
            "timings":{"cache_n":0,"prompt_n":7,"prompt_ms":10.5,"predicted_n":1}}"#;
        let r = LlamaCppDialect.parse_next_token(body.as_bytes()).unwrap();
        assert_eq!(r.tokens, vec![EngineToken { id: 12095, logprob: None }]);
        assert_eq!((r.prompt_tokens, r.cached_tokens), (Some(7), Some(0)));
    }

    #[test]
    fn a_build_without_cache_n_tells_the_cached_prompt_tokens_by_what_it_processed_and_a_body_without_timings_tells_none() {
        // `tokens_cached` is the slot's length after the request (prompt and generated): not read.
        let older = r#"{"tokens":[12095],"tokens_evaluated":2016,"tokens_cached":2017,"timings":{"prompt_n":16,"prompt_ms":400.0,"predicted_n":1}}"#;
        let r = LlamaCppDialect.parse_next_token(older.as_bytes()).unwrap();
        assert_eq!((r.prompt_tokens, r.cached_tokens), (Some(2016), Some(2000)));
        let miss = r#"{"tokens":[12095],"tokens_evaluated":2016,"timings":{"cache_n":0,"prompt_n":2016}}"#;
        assert_eq!(LlamaCppDialect.parse_next_token(miss.as_bytes()).unwrap().cached_tokens, Some(0), "a prompt it could not find cached");
        let bare = r#"{"tokens":[12095],"tokens_cached":2017}"#;
        let r = LlamaCppDialect.parse_next_token(bare.as_bytes()).unwrap();
        assert_eq!((r.prompt_tokens, r.cached_tokens), (None, None), "nothing said: nothing counted on");
    }

    #[test]
    fn garbage_is_a_typed_error_not_a_panic() {
        for body in ["", "<html>502</html>", "{}", r#"{"tokens":[]}"#, r#"{"tokens":[-1]}"#, r#"{"tokens":[1.5]}"#, r#"{"tokens":[4294967296]}"#, r#"{"tokens":"x"}"#, r#"{"completion_probabilities":[{"token":"a"}]}"#] {
            assert!(matches!(LlamaCppDialect.parse_next_token(body.as_bytes()), Err(EngineError::BadResponse(_))), "{body}");
        }
    }

    #[test]
    fn prompt_choices_are_one_greedy_request_per_position_on_the_pinned_slot_extending_its_cache() {
        let r = PromptChoicesRequest { tokens: &[151644, 872, 198, 3838, 374], first: 3, runner_up: true, slot: Some(0) };
        let calls = LlamaCppDialect.prompt_choices_calls(&r);
        assert_eq!(calls.len(), 2, "one per position: 3 and 4");
        for (i, (call, prefix)) in calls.iter().zip([json!([151644, 872, 198]), json!([151644, 872, 198, 3838])]).enumerate() {
            assert_eq!(call.path, "/completion");
            let b = call.body.as_ref().unwrap();
            assert_eq!(b["prompt"], prefix, "the tokens before the position");
            assert_eq!((b["n_predict"].clone(), b["top_k"].clone(), b["temperature"].clone()), (json!(1), json!(1), json!(0.0)));
            assert_eq!((b["id_slot"].clone(), b["n_probs"].clone()), (json!(0), json!(2)));
            assert_eq!(b["cache_prompt"], i > 0, "the prefix afresh, then one cached token more per request");
            assert_eq!(b["repeat_penalty"], 1.0);
        }
        let one = LlamaCppDialect.prompt_choices_calls(&PromptChoicesRequest { runner_up: false, slot: None, ..r });
        assert_eq!(one[0].body.as_ref().unwrap()["n_probs"], 1);
        assert!(one[0].body.as_ref().unwrap().get("id_slot").is_none(), "no slot asked, none pinned");
        assert_eq!(LlamaCppDialect.prompt_choices_calls(&PromptChoicesRequest { first: 0, ..r }).len(), 4, "position 0 has no choice");
        assert!(LlamaCppDialect.prompt_choices_calls(&PromptChoicesRequest { first: 5, ..r }).is_empty());
    }

    /// A `/completion` answer with `n_probs: 2`, composed in the shape of [`COMPLETION`].
    const COMPLETION_TOP2: &str = r#"{"tokens":[3838],"completion_probabilities":[{"id":3838,"token":"What","bytes":[87,104,97,116],"logprob":-0.61,"top_logprobs":[{"id":3838,"token":"What","bytes":[87,104,97,116],"logprob":-0.61},{"id":40,"token":"I","bytes":[73],"logprob":-1.02}]}],"tokens_evaluated":4,"timings":{"cache_n":3,"prompt_n":1}}"#;

    #[test]
    fn prompt_choices_read_each_answer_in_order_with_its_runner_up() {
        let r = PromptChoicesRequest { tokens: &[151644, 872, 198, 3838, 374], first: 3, runner_up: true, slot: Some(0) };
        let bodies = vec![COMPLETION_TOP2.as_bytes().to_vec(), COMPLETION.as_bytes().to_vec()];
        let choices = LlamaCppDialect.parse_prompt_choices(&r, &bodies).unwrap();
        assert_eq!(choices[0], PromptChoice { best: EngineToken { id: 3838, logprob: Some(-0.61) }, runner_up: Some(EngineToken { id: 40, logprob: Some(-1.02) }) });
        assert_eq!(choices[1], PromptChoice { best: EngineToken { id: 0, logprob: Some(-0.005_397_735) }, runner_up: None }, "n_probs 1 lists the best alone");
        let without = LlamaCppDialect.parse_prompt_choices(&PromptChoicesRequest { runner_up: false, ..r }, &bodies).unwrap();
        assert!(without.iter().all(|c| c.runner_up.is_none()));
        assert!(LlamaCppDialect.parse_prompt_choices(&r, &bodies[..1]).is_err(), "an answer per position");
        let broken = vec![COMPLETION_TOP2.as_bytes().to_vec(), br#"{"tokens":[]}"#.to_vec()];
        assert!(matches!(LlamaCppDialect.parse_prompt_choices(&r, &broken), Err(EngineError::BadResponse(_))));
        let no_top = vec![br#"{"tokens":[5]}"#.to_vec(), COMPLETION.as_bytes().to_vec()];
        assert!(LlamaCppDialect.parse_prompt_choices(&r, &no_top).is_err(), "a runner-up asked for needs top_logprobs");
    }

    fn draft_request(draft: &'static [u32]) -> DraftCheckRequest<'static> {
        DraftCheckRequest { context: &[151644, 872, 198], draft, slot: None }
    }

    #[test]
    fn a_draft_check_asks_for_the_greedy_continuation_as_long_as_the_draft_plus_one_on_the_cached_prompt() {
        let call = LlamaCppDialect.draft_check_call(&draft_request(&[3838, 374, 279]));
        assert_eq!(call.path, "/completion");
        let b = call.body.unwrap();
        assert_eq!(b["prompt"], json!([151644, 872, 198]), "the context alone: the engine writes its own continuation");
        assert_eq!(b["n_predict"], 4, "the draft's length plus the bonus, never more");
        assert_eq!((b["top_k"].clone(), b["temperature"].clone(), b["repeat_penalty"].clone()), (json!(1), json!(0.0), json!(1.0)), "greedy");
        assert_eq!((b["cache_prompt"].clone(), b["return_tokens"].clone(), b["n_probs"].clone()), (json!(true), json!(true), json!(1)));
        assert!(b.get("seed").is_none() && b.get("id_slot").is_none());
        let pinned = LlamaCppDialect.draft_check_call(&DraftCheckRequest { slot: Some(2), ..draft_request(&[1]) }).body.unwrap();
        assert_eq!((pinned["id_slot"].clone(), pinned["n_predict"].clone()), (json!(2), json!(2)));
    }

    /// A three-token answer in the shape of [`COMPLETION`] (values composed).
    fn continuation(tokens: [u32; 3]) -> Vec<u8> {
        let probs: Vec<String> = tokens.iter().enumerate().map(|(i, t)| format!(r#"{{"id":{t},"token":"t","bytes":[116],"logprob":-0.{i}5,"top_logprobs":[{{"id":{t},"token":"t","bytes":[116],"logprob":-0.{i}5}}]}}"#)).collect();
        format!(r#"{{"tokens":[{},{},{}],"completion_probabilities":[{}],"tokens_evaluated":3,"timings":{{"cache_n":2,"prompt_n":1,"predicted_n":3}}}}"#, tokens[0], tokens[1], tokens[2], probs.join(",")).into_bytes()
    }

    fn verdict(draft: &'static [u32], body: &[u8]) -> (u32, u32, f32) {
        let reply = LlamaCppDialect.parse_draft_check(&draft_request(draft), body).unwrap();
        let t = reply.verdict(draft).unwrap();
        (t.accepted, t.token_id, t.logprob)
    }

    #[test]
    fn a_draft_equal_to_the_greedy_continuation_is_accepted_whole_with_its_next_token_as_the_bonus() {
        let body = continuation([3838, 374, 279]);
        let reply = LlamaCppDialect.parse_draft_check(&draft_request(&[3838, 374]), &body).unwrap();
        assert_eq!(reply.tokens.iter().map(|t| t.id).collect::<Vec<_>>(), vec![3838, 374, 279]);
        assert_eq!((reply.prompt_tokens, reply.cached_tokens), (Some(3), Some(2)));
        assert_eq!(verdict(&[3838, 374], &body), (2, 279, -0.25));
    }

    #[test]
    fn a_draft_that_leaves_the_continuation_is_accepted_up_to_there_with_the_engines_token_as_the_correction() {
        assert_eq!(verdict(&[40, 374], &continuation([3838, 374, 279])), (0, 3838, -0.05), "rejected at the hard position");
        assert_eq!(verdict(&[3838, 40], &continuation([3838, 374, 279])), (1, 374, -0.15), "rejected in the middle");
    }

    #[test]
    fn a_continuation_longer_than_asked_is_cut_and_one_that_stopped_early_accepts_no_further() {
        let reply = LlamaCppDialect.parse_draft_check(&draft_request(&[3838]), &continuation([3838, 374, 279])).unwrap();
        assert_eq!(reply.tokens.len(), 2, "the draft plus one");
        // Generation stopped (an end-of-generation token) after one token of the three asked for.
        let stopped = br#"{"tokens":[3838],"completion_probabilities":[{"id":3838,"logprob":-0.1,"top_logprobs":[]}]}"#;
        assert_eq!(verdict(&[3838, 374], stopped), (0, 3838, -0.1), "the token at the hard position, nothing claimed past it");
        assert!(matches!(LlamaCppDialect.parse_draft_check(&draft_request(&[1]), br#"{"tokens":[]}"#), Err(EngineError::BadResponse(_))));
    }

    /// The fields this dialect reads, for [`crate::testing::jsonish`].
    const FIELDS: &[&str] = &["tokens", "completion_probabilities", "id", "logprob", "tokens_evaluated", "timings", "cache_n", "prompt_n", "data", "meta", "n_vocab", "n_ctx"];

    proptest::proptest! {
        #[test]
        fn parsing_never_panics_on_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = LlamaCppDialect.parse_next_token(&bytes);
            let _ = LlamaCppDialect.parse_model_info(&bytes);
            let _ = LlamaCppDialect.parse_tokenize(&bytes);
        }

        #[test]
        fn parsing_never_panics_on_json_and_never_returns_no_token(v in crate::testing::jsonish(FIELDS)) {
            let bytes = serde_json::to_vec(&v).unwrap();
            if let Ok(reply) = LlamaCppDialect.parse_next_token(&bytes) {
                proptest::prop_assert!(!reply.tokens.is_empty());
            }
            let _ = LlamaCppDialect.parse_model_info(&bytes);
            let _ = LlamaCppDialect.parse_tokenize(&bytes);
        }
    }

    #[test]
    fn model_info_and_tokenize_read_the_documented_bodies() {
        let models = r#"{"models":[{"name":"q","model":"q"}],"object":"list","data":[{"id":"qwen2.5-coder-1.5b-instruct.gguf","object":"model","created":1,"owned_by":"llamacpp",
            "meta":{"vocab_type":2,"n_vocab":151936,"n_ctx":4096,"n_ctx_train":32768,"n_embd":1536,"n_params":1543714304,"size":1117320736}}]}"#;
        let m = LlamaCppDialect.parse_model_info(models.as_bytes()).unwrap();
        assert_eq!(m, EngineModel { id: "qwen2.5-coder-1.5b-instruct.gguf".into(), vocab_size: Some(151936), max_context: Some(4096) });
        assert!(LlamaCppDialect.parse_model_info(br#"{"data":[]}"#).is_err());
        let call = LlamaCppDialect.tokenize_call("Hello").unwrap();
        assert_eq!((call.path.as_str(), call.body.unwrap()["add_special"].clone()), ("/tokenize", json!(false)));
        assert_eq!(LlamaCppDialect.parse_tokenize(br#"{"tokens":[9707,11]}"#).unwrap(), vec![9707, 11]);
    }
}
