//! The HTTP side port: Prometheus `/metrics`, liveness `/healthz`, readiness `/readyz`, and
//! the operator's `POST /drain`.
//!
//! Separate from QUIC so that an orchestrator (Kubernetes probes, Prometheus) can watch the
//! gateway with plain HTTP; readiness turns false when the LLM path cannot take work (the
//! batcher stopped, saturated or stalled; no engine worker with room), so a load balancer
//! sends new devices elsewhere before they would get `Busy`, and at once when a drain starts
//! (liveness stays true: a draining gateway must not be killed).
//! `POST /drain` starts the same drain as SIGTERM; it needs `Authorization: Bearer <admin
//! token>` and is refused outright when no admin token is configured (the side port is often
//! reachable by more than the operator).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::http::{header, HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::response::{IntoResponse, Response};
use axum::{extract::State, Router};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::state::Shared;

static PROMETHEUS: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Bucket bounds of every `*_seconds` histogram, 0.5 ms to 30 s (the longest deadline): real
/// histograms rather than client-side quantiles, so an operator can aggregate them across
/// replicas and workers.
const LATENCY_BUCKETS: &[f64] = &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// Install the process-wide Prometheus recorder (once; later calls reuse it): the `metrics`
/// macros all over the gateway record into it. `None` if another recorder was installed.
pub fn prometheus() -> Option<&'static PrometheusHandle> {
    PROMETHEUS
        .get_or_init(|| match PrometheusBuilder::new().set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS).and_then(|b| b.install_recorder()) {
            Ok(h) => Some(h),
            Err(e) => {
                tracing::warn!("metrics recorder not installed: {e}");
                None
            }
        })
        .as_ref()
}

async fn metrics_text() -> (StatusCode, String) {
    match prometheus() {
        Some(h) => (StatusCode::OK, h.render()),
        None => (StatusCode::SERVICE_UNAVAILABLE, "metrics recorder unavailable\n".into()),
    }
}

async fn readyz(State(shared): State<Arc<Shared>>) -> (StatusCode, String) {
    if let Some(drain) = shared.draining() {
        let left = drain.deadline().saturating_duration_since(Instant::now());
        let connections = shared.connections.load(Ordering::Relaxed);
        return (StatusCode::SERVICE_UNAVAILABLE, format!("draining: {connections} devices still connected, exiting within {:.1} s\n", left.as_secs_f64()));
    }
    match shared.llm.not_ready() {
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        None => (StatusCode::OK, "ready\n".into()),
    }
}

/// `POST /drain`: start a graceful drain, as SIGTERM does (idempotent).
async fn drain(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let Some(expected) = shared.admin_token.as_deref() else {
        metrics::counter!("duet_gateway_admin_refused_total").increment(1);
        let why = "no admin token is configured (--admin-token / DUET_ADMIN_TOKEN): /drain is off; send SIGTERM instead\n";
        return (StatusCode::FORBIDDEN, why).into_response();
    };
    let presented = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer ")).unwrap_or("");
    if !common::exchange::constant_time_eq(presented.as_bytes(), expected.as_bytes()) {
        metrics::counter!("duet_gateway_admin_refused_total").increment(1);
        let why = "a valid admin token is required: Authorization: Bearer <token>\n";
        return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], why).into_response();
    }
    let started = shared.start_drain(Instant::now());
    let left = shared.draining().map_or(0.0, |d| d.deadline().saturating_duration_since(Instant::now()).as_secs_f64());
    let what = if started { "draining" } else { "already draining" };
    (StatusCode::ACCEPTED, format!("{what}: exiting within {left:.1} s\n")).into_response()
}

/// Bind and serve; returns the bound address (port 0 picks one) and the server task.
pub async fn serve(addr: SocketAddr, shared: Arc<Shared>) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    prometheus();
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/drain", post(drain))
        .with_state(shared);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("HTTP side port stopped: {e}");
        }
    });
    Ok((bound, task))
}
