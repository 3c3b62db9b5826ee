//! The HTTP surface: OpenAI's routes on top of the worker's queue.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router as HttpRouter};
use common::sampling::SamplingParams;
use metrics_exporter_prometheus::PrometheusHandle;
use model_runtime::chat::render;
use model_runtime::tokenizer::Tokenizer;
use model_runtime::{fit_prompt, PromptPolicy};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::api::{ChatRequest, CommonParams, CompletionRequest, DuetUsage, ErrorBody, ErrorDetail, Usage};
use super::worker::{Event, Job, Mode};
use edge_node::args::RateControlMode;
use edge_node::decode::{RateControl, TokenSource};
use edge_node::router_file::Calibration;

/// What every handler shares.
pub struct AppState {
    /// The worker's queue.
    pub jobs: mpsc::Sender<Job>,
    /// The SLM's tokenizer (prompts are tokenized here, off the worker).
    pub tok: Arc<Tokenizer>,
    /// The model id `/v1/models` lists.
    pub model_id: String,
    /// The SLM's context, prompt and answer together.
    pub max_context: usize,
    /// Default `max_tokens`.
    pub default_max_tokens: usize,
    /// Mode when a request does not say.
    pub default_mode: Mode,
    /// Threshold when a request gives neither `tau` nor `escalation_rate`.
    pub default_tau: f32,
    /// The rate controller such a request starts from (when the default is a rate).
    pub default_rate_control: Option<RateControl>,
    /// `--rate-control`: whether a requested rate is steered toward.
    pub rate_mode: RateControlMode,
    /// The router file's rate → tau table, if a trained router is loaded.
    pub calibration: Option<Calibration>,
    /// Whether a gateway is configured (routed and cloud modes need one).
    pub has_gateway: bool,
    /// The gateway's address and the link to it, for `/v1/duet/status`.
    pub gateway: Option<(String, edge_node::link::Link)>,
    /// The Prometheus text of `/metrics`.
    pub prometheus: Option<PrometheusHandle>,
    /// Numbers response ids.
    pub next_id: AtomicU64,
}

/// The routes.
pub fn routes(state: Arc<AppState>) -> HttpRouter {
    HttpRouter::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/v1/duet/status", get(status))
        .route("/", get(|| async { axum::response::Html(PLAYGROUND) }))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics_text))
        .with_state(state)
}

/// An OpenAI-style error response.
pub struct ApiError {
    status: StatusCode,
    detail: ErrorDetail,
}

impl ApiError {
    fn invalid(message: impl Into<String>, param: Option<&'static str>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, detail: ErrorDetail { message: message.into(), kind: "invalid_request_error", param, code: None } }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(ErrorBody { error: self.detail })).into_response()
    }
}

async fn metrics_text(State(s): State<Arc<AppState>>) -> Response {
    match &s.prometheus {
        Some(h) => h.render().into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "metrics recorder unavailable\n").into_response(),
    }
}

/// The web playground: prompt, mode, tau or rate, streamed answer with cloud tokens
/// highlighted. One self-contained page, no external resources.
const PLAYGROUND: &str = include_str!("playground.html");

async fn status(State(s): State<Arc<AppState>>) -> Json<Value> {
    let (gateway, connected, rtt_ms) = match &s.gateway {
        Some((addr, link)) => match link.view() {
            common::exchange::LinkView::Up { rtt, .. } => (Some(addr.clone()), true, Some(rtt.as_secs_f64() * 1e3)),
            common::exchange::LinkView::Down => (Some(addr.clone()), false, None),
        },
        None => (None, false, None),
    };
    Json(json!({"model": s.model_id, "gateway": gateway, "connected": connected, "rtt_ms": rtt_ms, "default_mode": s.default_mode, "default_tau": s.default_tau, "router": if s.calibration.is_some() { "trained" } else { "confidence" }}))
}

async fn models(State(s): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [{"id": s.model_id, "object": "model", "created": 0, "owned_by": "duet"}]}))
}

async fn chat(State(s): State<Arc<AppState>>, body: Result<Json<ChatRequest>, JsonRejection>) -> Result<Response, ApiError> {
    let Json(req) = body.map_err(|e| ApiError::invalid(e.body_text(), None))?;
    if req.messages.is_empty() {
        return Err(ApiError::invalid("`messages` must hold at least one message", Some("messages")));
    }
    let text = render(&req.messages);
    start(&s, &text, req.common, Kind::Chat).await
}

async fn completions(State(s): State<Arc<AppState>>, body: Result<Json<CompletionRequest>, JsonRejection>) -> Result<Response, ApiError> {
    let Json(req) = body.map_err(|e| ApiError::invalid(e.body_text(), None))?;
    if req.prompt.is_empty() {
        return Err(ApiError::invalid("`prompt` is empty", Some("prompt")));
    }
    start(&s, &req.prompt, req.common, Kind::Text).await
}

/// Which endpoint a response is shaped for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Text,
}

/// Validate, enqueue, and answer (a stream, or one body at the end).
async fn start(s: &Arc<AppState>, text: &str, p: CommonParams, kind: Kind) -> Result<Response, ApiError> {
    let ids = s.tok.encode(text).map_err(|e| ApiError::invalid(format!("tokenizing the prompt: {e}"), None))?;
    let (prompt, _) = fit_prompt(&ids, s.max_context, PromptPolicy::Reject).map_err(|e| ApiError {
        status: StatusCode::BAD_REQUEST,
        detail: ErrorDetail { message: e.to_string(), kind: "invalid_request_error", param: Some("messages"), code: Some("context_length_exceeded") },
    })?;
    let room = s.max_context - prompt.len();
    let max_tokens = p.max_completion_tokens.or(p.max_tokens).unwrap_or(s.default_max_tokens);
    if max_tokens == 0 {
        return Err(ApiError::invalid("`max_tokens` must be at least 1", Some("max_tokens")));
    }
    let sampling = SamplingParams { temperature: p.temperature.unwrap_or(1.0), top_k: 0, top_p: p.top_p.unwrap_or(1.0), seed: p.seed };
    sampling.validate().map_err(|e| ApiError::invalid(e.to_string(), Some("temperature")))?;
    let mode = p.duet.mode.unwrap_or(s.default_mode);
    if mode != Mode::Local && !s.has_gateway {
        return Err(ApiError::invalid("this server has no gateway (--gateway): only `local` mode is available", Some("duet.mode")));
    }
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
    let stops = p.stop.map(|s| s.into_vec()).unwrap_or_default();
    if stops.len() > 4 {
        return Err(ApiError::invalid("at most 4 stop sequences", Some("stop")));
    }
    let (events, mut rx) = mpsc::unbounded_channel();
    let job = Job { prompt: prompt.to_vec(), max_tokens: max_tokens.min(room), sampling, stops, mode, tau, rate_control, events };
    if s.jobs.try_send(job).is_err() {
        metrics::counter!("duet_edge_serve_requests_rejected_total").increment(1);
        return Err(ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            detail: ErrorDetail { message: "the device is busy with other requests; retry shortly".into(), kind: "rate_limit_error", param: None, code: None },
        });
    }
    metrics::gauge!("duet_edge_serve_queue_depth").set((s.jobs.max_capacity() - s.jobs.capacity()) as f64);
    let head = Head {
        id: format!("{}-{}", if kind == Kind::Chat { "chatcmpl" } else { "cmpl" }, s.next_id.fetch_add(1, Ordering::Relaxed)),
        created: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        model: s.model_id.clone(),
        kind,
        prompt_tokens: prompt.len(),
        mode,
        tau: match mode {
            Mode::Local => 0.0,
            Mode::Routed => tau,
            Mode::Cloud => 1.0,
        },
    };
    if p.stream {
        return Ok(stream(head, rx).into_response());
    }
    let mut text = String::new();
    while let Some(event) = rx.recv().await {
        match event {
            Event::Text { text: t, .. } => text.push_str(&t),
            Event::Done { finish_reason, stats } => return Ok(Json(head.whole(&text, finish_reason, &stats)).into_response()),
            Event::Failed(e) => return Err(server_error(e)),
        }
    }
    Err(server_error("the generation ended without an answer".into()))
}

fn server_error(message: String) -> ApiError {
    ApiError { status: StatusCode::INTERNAL_SERVER_ERROR, detail: ErrorDetail { message, kind: "server_error", param: None, code: None } }
}

/// What every body or chunk of one response repeats.
struct Head {
    id: String,
    created: u64,
    model: String,
    kind: Kind,
    prompt_tokens: usize,
    mode: Mode,
    tau: f32,
}

impl Head {
    fn usage(&self, stats: &edge_node::decode::DecodeStats) -> (Usage, DuetUsage) {
        let usage = Usage { prompt_tokens: self.prompt_tokens, completion_tokens: stats.tokens, total_tokens: self.prompt_tokens + stats.tokens };
        let duet = DuetUsage {
            mode: self.mode,
            tau: self.tau,
            rate_control: stats.rate_control.map(|c| c.report()),
            routing: stats.routing,
            tokens_per_s: stats.tokens_per_s,
        };
        (usage, duet)
    }

    /// The non-streamed body.
    fn whole(&self, text: &str, finish_reason: &str, stats: &edge_node::decode::DecodeStats) -> Value {
        let (usage, duet) = self.usage(stats);
        let choice = match self.kind {
            Kind::Chat => json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason, "logprobs": null}),
            Kind::Text => json!({"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": null}),
        };
        let object = if self.kind == Kind::Chat { "chat.completion" } else { "text_completion" };
        json!({"id": self.id, "object": object, "created": self.created, "model": self.model, "choices": [choice], "usage": usage, "duet": duet})
    }

    /// One streamed chunk: a text piece with its source, or the end with `finish_reason`.
    fn chunk(&self, text: Option<&str>, source: Option<TokenSource>, finish: Option<(&str, &edge_node::decode::DecodeStats)>) -> Value {
        let finish_reason = finish.map(|(f, _)| f);
        let choice = match self.kind {
            Kind::Chat => {
                let delta = match text {
                    Some(t) => json!({"content": t}),
                    None if finish.is_none() => json!({"role": "assistant", "content": ""}),
                    None => json!({}),
                };
                json!({"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": null})
            }
            Kind::Text => json!({"index": 0, "text": text.unwrap_or(""), "finish_reason": finish_reason, "logprobs": null}),
        };
        let object = if self.kind == Kind::Chat { "chat.completion.chunk" } else { "text_completion" };
        let mut v = json!({"id": self.id, "object": object, "created": self.created, "model": self.model, "choices": [choice]});
        if let Some(source) = source {
            v["duet"] = json!({"source": source});
        }
        if let Some((_, stats)) = finish {
            let (usage, duet) = self.usage(stats);
            v["usage"] = json!(usage);
            v["duet"] = json!(duet);
        }
        v
    }
}

/// The events of a job as server-sent events; dropping the stream (the client left) closes the
/// job's channel, which stops its generation.
fn stream(head: Head, rx: mpsc::UnboundedReceiver<Event>) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    enum Phase {
        Start,
        Running,
        Over,
    }
    let state = (head, rx, Phase::Start);
    let events = futures_util::stream::unfold(state, |(head, mut rx, phase)| async move {
        let data = match phase {
            Phase::Over => return None,
            Phase::Start if head.kind == Kind::Chat => return Some((Ok(SseEvent::default().data(head.chunk(None, None, None).to_string())), (head, rx, Phase::Running))),
            _ => match rx.recv().await {
                Some(Event::Text { text, source }) => head.chunk(Some(&text), Some(source), None).to_string(),
                Some(Event::Done { finish_reason, stats }) => {
                    let last = head.chunk(None, None, Some((finish_reason, &stats))).to_string();
                    return Some((Ok(SseEvent::default().data(last)), (head, rx, Phase::Over)));
                }
                Some(Event::Failed(e)) => json!({"error": {"message": e, "type": "server_error"}}).to_string(),
                None => return None,
            },
        };
        Some((Ok(SseEvent::default().data(data)), (head, rx, Phase::Running)))
    });
    let done = futures_util::stream::once(async { Ok(SseEvent::default().data("[DONE]")) });
    Sse::new(futures_util::StreamExt::chain(events, done))
}
