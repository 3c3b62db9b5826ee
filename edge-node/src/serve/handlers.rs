//! `POST /v1/chat/completions` and `POST /v1/completions`: read the body, check what the
//! server can do, queue one job per choice (one after another) and answer.
//!
//! A request's choices are queued one at a time, each once the one before has finished, so a
//! request that arrives meanwhile is served between two of them: another client waits for at
//! most one choice, not for all `n`. Within a choice there is no interleaving: the one model
//! and its KV cache serve one generation at a time, and switching mid-answer would throw away
//! the cache. What one choice, and one request in all, may generate is therefore bounded
//! instead (`--max-request-tokens`, 400 beyond it), which bounds both how long a request can
//! hold the device and how long another waits behind it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use common::sampling::{SamplingError, SamplingParams};
use edge_node::fleet::RoutingAsk;
use model_runtime::chat::render_turns;
use model_runtime::{fit_prompt, PromptPolicy};
use serde_json::Value;
use tokio::sync::mpsc;

use super::api::ErrorDetail;
use super::error::ApiError;
use super::state::AppState;
use super::logprobs::{self, chat_json, completion_json};
use super::request::{self, Params, Prompt};
use super::respond::{stream, Choice, Head, Kind};
use super::worker::{Event, Job, Mode, Scoring};
use edge_node::args::RateControlMode;
use edge_node::decode::RateControl;

/// Chat: the conversation through the chat template, one answer (or `n`).
pub async fn chat(State(s): State<Arc<AppState>>, body: Result<Json<Value>, JsonRejection>) -> Result<Response, ApiError> {
    let Json(body) = body.map_err(ApiError::from_rejection)?;
    let req = request::chat(body)?;
    let ids = s.tok.encode(&render_turns(&req.turns)).map_err(|e| ApiError::invalid(format!("tokenizing the prompt: {e}"), Some("messages")))?;
    let input = Input { ids, text: String::new() };
    answer(&s, vec![input], req.params, Kind::Chat, false).await
}

/// Text completion: each prompt continued (`n` times), with the prompt echoed when asked.
pub async fn completions(State(s): State<Arc<AppState>>, body: Result<Json<Value>, JsonRejection>) -> Result<Response, ApiError> {
    let Json(body) = body.map_err(ApiError::from_rejection)?;
    let req = request::completion(body)?;
    let mut inputs = Vec::with_capacity(req.prompts.len());
    for prompt in req.prompts {
        let input = match prompt {
            Prompt::Text(text) => Input { ids: s.tok.encode(&text).map_err(|e| ApiError::invalid(format!("tokenizing the prompt: {e}"), Some("prompt")))?, text },
            Prompt::Tokens(ids) => {
                let vocab = s.tok.vocab_size();
                if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
                    return Err(ApiError::invalid(format!("token id {bad} is outside the vocabulary (size {vocab})"), Some("prompt")));
                }
                Input { text: s.tok.decode(&ids).unwrap_or_default(), ids }
            }
        };
        inputs.push(input);
    }
    answer(&s, inputs, req.params, Kind::Text, req.echo).await
}

/// One prompt: its token ids and its text (for `echo`).
struct Input {
    ids: Vec<u32>,
    text: String,
}

/// What every job of one request shares.
struct Plan {
    max_tokens: usize,
    sampling: SamplingParams,
    mode: Mode,
    tau: f32,
    rate_control: Option<RateControl>,
    routing: RoutingAsk,
}

async fn answer(s: &Arc<AppState>, inputs: Vec<Input>, p: Params, kind: Kind, echo: bool) -> Result<Response, ApiError> {
    let plan = plan(s, &p)?;
    let param = if kind == Kind::Chat { "messages" } else { "prompt" };
    for input in &inputs {
        fit_prompt(&input.ids, s.max_context, PromptPolicy::Reject).map_err(|e| ApiError {
            status: StatusCode::BAD_REQUEST,
            detail: ErrorDetail { message: e.to_string(), kind: "invalid_request_error", param: Some(param.into()), code: Some("context_length_exceeded") },
        })?;
    }
    let budgets = budget(s, &inputs, &p, plan.max_tokens)?;
    let head = Head {
        id: format!("{}-{}", if kind == Kind::Chat { "chatcmpl" } else { "cmpl" }, s.next_id.fetch_add(1, Ordering::Relaxed)),
        created: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        model: s.model_id.clone(),
        kind,
        prompt_tokens: inputs.iter().map(|i| i.ids.len()).sum(),
        mode: plan.mode,
        tau: match plan.mode {
            Mode::Local => 0.0,
            Mode::Routed => plan.tau,
            Mode::Cloud => 1.0,
        },
        include_usage: p.include_usage,
    };
    let scoring = p.logprobs.map(|top| Scoring { top, echo });
    if p.stream {
        let rx = submit(s, &plan, &inputs[0].ids, budgets[0], p.stop.clone(), p.seed, None)?;
        return Ok(stream(head, rx).into_response());
    }
    let mut choices = Vec::with_capacity(inputs.len() * p.n);
    for (input, &max_tokens) in inputs.iter().zip(&budgets) {
        for i in 0..p.n {
            let seed = p.seed.map(|seed| seed.wrapping_add(i as u64));
            let rx = submit(s, &plan, &input.ids, max_tokens, p.stop.clone(), seed, scoring)?;
            choices.push(collect(s, rx, input, kind, echo).await?);
        }
    }
    Ok(Json(head.whole(&choices)).into_response())
}

/// The sampling and routing every job of the request uses.
fn plan(s: &AppState, p: &Params) -> Result<Plan, ApiError> {
    let max_tokens = p.max_tokens.unwrap_or(s.default_max_tokens);
    if max_tokens == 0 {
        return Err(ApiError::invalid("`max_tokens` must be at least 1", Some("max_tokens")));
    }
    let sampling = SamplingParams { temperature: p.temperature.unwrap_or(1.0), top_k: 0, top_p: p.top_p.unwrap_or(1.0), seed: p.seed };
    sampling.validate().map_err(|e| {
        let param = match e {
            SamplingError::TopP(_) => "top_p",
            _ => "temperature",
        };
        ApiError::invalid(e.to_string(), Some(param))
    })?;
    if p.stop.len() > 4 {
        return Err(ApiError::invalid("at most 4 stop sequences", Some("stop")));
    }
    let mode = p.duet.mode.unwrap_or(s.default_mode);
    if mode != Mode::Local && !s.has_gateway {
        return Err(ApiError::invalid("this server has no gateway (--gateway): only `local` mode is available", Some("duet.mode")));
    }
    let routing = match (p.duet.tau, p.duet.escalation_rate) {
        (Some(t), _) => RoutingAsk::Tau(t),
        (None, Some(r)) => RoutingAsk::Rate(r),
        (None, None) => RoutingAsk::Default,
    };
    let (tau, rate_control) = match (p.duet.tau, p.duet.escalation_rate) {
        (Some(_), Some(_)) => return Err(ApiError::invalid("give `duet.tau` or `duet.escalation_rate`, not both", Some("duet"))),
        (Some(t), None) if (0.0..=1.0).contains(&t) => (t, None),
        (Some(t), None) => return Err(ApiError::invalid(format!("`duet.tau` {t} is outside [0, 1]"), Some("duet.tau"))),
        (None, Some(rate)) => match &s.calibration {
            Some(c) => {
                let invalid = |e: &dyn std::fmt::Display| ApiError::invalid(e.to_string(), Some("duet.escalation_rate"));
                let tau = c.tau_for_rate(rate).map_err(|e| invalid(&e))?;
                let control = match s.rate_mode {
                    RateControlMode::Off => None,
                    RateControlMode::Session | RateControlMode::Carry => RateControl::for_target(c, rate).map_err(|e| invalid(&e))?,
                };
                (tau, control)
            }
            None => return Err(ApiError::invalid("`duet.escalation_rate` needs a trained router file on the server (--router FILE)", Some("duet.escalation_rate"))),
        },
        (None, None) => (s.default_tau, s.default_rate_control),
    };
    Ok(Plan { max_tokens, sampling, mode, tau, rate_control, routing })
}

/// Each prompt's `max_tokens`, checked. A value the request gives must fit in the context beside
/// the prompt (400 `context_length_exceeded` naming the room, as OpenAI answers), never cut
/// silently; the server's default is cut to the room instead, and an answer that reaches it
/// says `finish_reason: "length"`. All the choices together (prompts × `n`) may generate at
/// most `--max-request-tokens`: one request cannot hold the device for longer than that.
fn budget(s: &AppState, inputs: &[Input], p: &Params, max_tokens: usize) -> Result<Vec<usize>, ApiError> {
    let mut budgets = Vec::with_capacity(inputs.len());
    for input in inputs {
        let room = s.max_context.saturating_sub(input.ids.len());
        if p.max_tokens.is_some() && max_tokens > room {
            let message = format!("`max_tokens` {max_tokens} does not fit: the prompt takes {} of the model's {}-token context, which leaves {room}; ask for at most {room}", input.ids.len(), s.max_context);
            return Err(ApiError { status: StatusCode::BAD_REQUEST, detail: ErrorDetail { message, kind: "invalid_request_error", param: Some("max_tokens".into()), code: Some("context_length_exceeded") } });
        }
        budgets.push(max_tokens.min(room));
    }
    let total = budgets.iter().map(|b| b.saturating_mul(p.n)).fold(0, usize::saturating_add);
    let limit = s.max_request_tokens;
    if total <= limit {
        return Ok(budgets);
    }
    let asked = if p.max_tokens.is_some() { format!("`max_tokens` {max_tokens}") } else { format!("`max_tokens` {max_tokens} (the server's default)") };
    Err(match (p.n, inputs.len()) {
        (1, 1) => ApiError::invalid(format!("{asked} is over this server's limit of {limit} generated tokens per request (--max-request-tokens)"), Some("max_tokens")),
        (n, prompts) => ApiError::invalid(
            format!("this request may generate {total} tokens ({prompts} prompt(s) × `n` {n} × {asked}), over this server's limit of {limit} per request (--max-request-tokens): lower `n` or `max_tokens`"),
            Some(if n > 1 { "n" } else { "prompt" }),
        ),
    })
}

/// Queue one generation of at most `max_tokens`; 429 at once when the queue is full.
fn submit(s: &AppState, plan: &Plan, prompt: &[u32], max_tokens: usize, stops: Vec<String>, seed: Option<u64>, scoring: Option<Scoring>) -> Result<mpsc::UnboundedReceiver<Event>, ApiError> {
    let (events, rx) = mpsc::unbounded_channel();
    let sampling = SamplingParams { seed, ..plan.sampling };
    let job = Job { prompt: prompt.to_vec(), max_tokens, sampling, stops, mode: plan.mode, tau: plan.tau, rate_control: plan.rate_control, routing: plan.routing, scoring, events };
    if s.jobs.try_send(job).is_err() {
        metrics::counter!("duet_edge_serve_requests_rejected_total").increment(1);
        return Err(ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            detail: ErrorDetail { message: "the device is busy with other requests; retry shortly".into(), kind: "rate_limit_error", param: None, code: None },
        });
    }
    metrics::gauge!("duet_edge_serve_queue_depth").set((s.jobs.max_capacity() - s.jobs.capacity()) as f64);
    Ok(rx)
}

/// Wait for one job's whole answer and shape its logprobs for the endpoint.
async fn collect(s: &AppState, mut rx: mpsc::UnboundedReceiver<Event>, input: &Input, kind: Kind, echo: bool) -> Result<Choice, ApiError> {
    let mut text = if echo { input.text.clone() } else { String::new() };
    while let Some(event) = rx.recv().await {
        match event {
            Event::Text { text: t, .. } => text.push_str(&t),
            Event::Done { finish_reason, stats, scored } => {
                let logprobs = match (scored, kind) {
                    (None, _) => Value::Null,
                    (Some(sc), Kind::Chat) => chat_json(&sc.answer),
                    (Some(sc), Kind::Text) => {
                        let mut items = Vec::new();
                        if echo {
                            let first = input.ids.first().map(|&id| logprobs::token_text(&s.tok, id).0).unwrap_or_default();
                            items.push((first, None));
                            items.extend(sc.prompt.into_iter().map(|t| (t.token.clone(), Some(t))));
                        }
                        items.extend(sc.answer.into_iter().map(|t| (t.token.clone(), Some(t))));
                        completion_json(&items)
                    }
                };
                return Ok(Choice { text, finish_reason, stats, logprobs });
            }
            Event::Failed(e) => return Err(ApiError::server(e)),
        }
    }
    Err(ApiError::server("the generation ended without an answer".into()))
}
