//! The HTTP surface: OpenAI's routes on top of the worker's queue.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router as HttpRouter};
use serde_json::{json, Value};

use super::api::BODY_LIMIT;
use super::handlers::{chat, completions};
use super::state::AppState;

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

