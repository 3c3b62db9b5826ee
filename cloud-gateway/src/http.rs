//! The HTTP side port: Prometheus `/metrics`, liveness `/healthz`, readiness `/readyz`, and
//! the operator's `POST /drain`. `/metrics` sets the queue age
//! (`duet_gateway_queue_age_seconds`, [`crate::dispatch::waiting`]) as it is scraped.
//!
//! Separate from QUIC so that an orchestrator (Kubernetes probes, Prometheus) can watch the
//! gateway with plain HTTP; readiness turns false when the LLM path cannot take work (the
//! batcher stopped, saturated or stalled; no engine worker with room), so a load balancer
//! sends new devices elsewhere before they would get `Busy`, and at once when a drain starts
//! (liveness stays true: a draining gateway must not be killed).
//! `POST /drain` starts the same drain as SIGTERM; it needs `Authorization: Bearer <admin
//! token>` and is refused outright when no admin token is configured (the side port is often
//! reachable by more than the operator).
//! `GET /v1/fleet` lists the devices connected (SLM, bundle version, escalations, fallbacks,
//! last seen), a bounded page at a time (`?limit=N&after=DEVICE`); it needs `Authorization:
//! Bearer <operator token>` (`--operator-token-file`): no device data without it.

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

async fn metrics_text(State(shared): State<Arc<Shared>>) -> (StatusCode, String) {
    // Read at scrape time: set only as escalations come and go, it would stand still while the
    // oldest one waits.
    metrics::gauge!("duet_gateway_queue_age_seconds").set(shared.llm.queue_age().as_secs_f64());
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

/// Query of `GET /v1/fleet`.
#[derive(Debug, Default, PartialEq)]
struct FleetQuery {
    /// Devices per page (at most [`crate::fleet::MAX_PAGE`]).
    limit: Option<usize>,
    /// The last device of the previous page (its `next`).
    after: Option<String>,
}

/// Percent-decode a query value (`+` is a space); `None` if it is not UTF-8 after decoding.
fn percent_decode(v: &str) -> Option<String> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

impl FleetQuery {
    /// `limit=N&after=ID`, other keys ignored; a bad value is an error to show the caller.
    fn parse(raw: Option<&str>) -> Result<Self, String> {
        let mut q = Self::default();
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(v).ok_or_else(|| format!("`{k}` is not percent-encoded UTF-8"))?;
            match k {
                "limit" => q.limit = Some(v.parse().map_err(|_| format!("limit `{v}` is not a number"))?),
                "after" => q.after = Some(v),
                _ => {}
            }
        }
        Ok(q)
    }
}

/// `GET /v1/fleet`: one page of the devices connected, for the operator only.
async fn fleet(State(shared): State<Arc<Shared>>, headers: HeaderMap, axum::extract::RawQuery(raw): axum::extract::RawQuery) -> Response {
    let Some(expected) = shared.fleet.operator_token.as_deref() else {
        metrics::counter!("duet_gateway_admin_refused_total").increment(1);
        let why = "no operator token is configured (--operator-token-file / DUET_OPERATOR_TOKEN_FILE): /v1/fleet is off\n";
        return (StatusCode::FORBIDDEN, why).into_response();
    };
    let presented = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer ")).unwrap_or("");
    if !common::exchange::constant_time_eq(presented.as_bytes(), expected.as_bytes()) {
        metrics::counter!("duet_gateway_admin_refused_total").increment(1);
        let why = "a valid operator token is required: Authorization: Bearer <token>\n";
        return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], why).into_response();
    }
    let query = match FleetQuery::parse(raw.as_deref()) {
        Ok(q) => q,
        Err(why) => return (StatusCode::BAD_REQUEST, format!("{why}\n")).into_response(),
    };
    let devices = shared.fleet.devices();
    let total = devices.len();
    let (page, next) = crate::fleet::page(devices, query.after.as_deref(), query.limit.unwrap_or(crate::fleet::DEFAULT_PAGE));
    let body = serde_json::json!({ "total": total, "devices": page, "next": next });
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// Bind and serve; returns the bound address (port 0 picks one) and the server task.
pub async fn serve(addr: SocketAddr, shared: Arc<Shared>) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    prometheus();
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/drain", post(drain))
        .route("/v1/fleet", get(fleet))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleet_query_takes_a_limit_and_a_percent_encoded_cursor() {
        assert_eq!(FleetQuery::parse(None), Ok(FleetQuery::default()));
        let q = FleetQuery::parse(Some("limit=20&after=dev%2F7+a&x=1")).unwrap();
        assert_eq!((q.limit, q.after.as_deref()), (Some(20), Some("dev/7 a")));
        assert!(FleetQuery::parse(Some("limit=many")).is_err());
        assert!(FleetQuery::parse(Some("after=%zz")).is_err());
        assert!(FleetQuery::parse(Some("after=%4")).is_err());
        assert!(FleetQuery::parse(Some("after=%ff")).is_err(), "not UTF-8");
    }
}
