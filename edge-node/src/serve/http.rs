//! The HTTP surface: OpenAI's routes on top of the worker's queue.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router as HttpRouter};
use metrics_exporter_prometheus::PrometheusHandle;
use model_runtime::tokenizer::Tokenizer;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::handlers::{chat, completions};
use super::worker::{Job, Mode};
use edge_node::args::RateControlMode;
use edge_node::decode::RateControl;
use edge_node::routing::router_file::Calibration;

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
    /// Tokens one request may generate at most, all its choices together.
    pub max_request_tokens: usize,
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

/// Largest request body: far beyond any prompt the device's context holds (413 past it, as
/// OpenAI and proxies answer).
pub const BODY_LIMIT: usize = 2 * 1024 * 1024;

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
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
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

