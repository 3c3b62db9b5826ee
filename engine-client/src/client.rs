//! The I/O around a [`Dialect`]: one HTTP client per worker, with the time limit the
//! escalation has left and a bound on how much of a response is read.
//!
//! Cancellation is by dropping: the pool drops the future when the device stops waiting, which
//! closes the request's connection, and the engines named here stop the generation when their
//! client goes away.
//!
//! Traces: each next-token request is an `engine_request` span (under the pool's `backend`
//! span), and a sampled one carries a W3C `traceparent` header, so an engine that traces
//! (SGLang, vLLM with OpenTelemetry on) continues the same trace.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tracing::Instrument;

use crate::{Dialect, DraftCheckRequest, EngineError, EngineModel, EngineReply, EngineSpec, HttpCall, NextTokenRequest};

/// Largest engine response read, bytes: a one-token answer is a few hundred bytes, so anything
/// near this is a broken engine, not an answer.
pub const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// Largest prompt-choices response read, bytes: prompt log-probabilities take up to a few
/// hundred bytes per position (vLLM names every token), so a 32k-token sequence fits.
pub const MAX_CHOICES_RESPONSE_BYTES: usize = 64 << 20;

/// Talks to one engine worker.
#[derive(Debug, Clone)]
pub struct EngineClient {
    http: reqwest::Client,
    base: String,
    label: String,
    dialect: std::sync::Arc<dyn Dialect>,
}

impl EngineClient {
    /// A client for `spec` speaking `dialect`; its host name is resolved by each new
    /// connection.
    pub fn new(spec: &EngineSpec, dialect: std::sync::Arc<dyn Dialect>) -> Result<Self, EngineError> {
        let http = builder().build().map_err(|e| EngineError::Transport(format!("HTTP client: {e}")))?;
        Ok(Self { http, base: spec.url.clone(), label: spec.url.clone(), dialect })
    }

    /// A client for the one address `ip` of `spec`'s host (a worker found through DNS): the
    /// URL keeps its host name (the `Host` header, and the name an https engine's certificate
    /// is checked against) but every connection goes to `ip`, at the URL's port. Its
    /// [`label`](Self::label) is `scheme://ip:port`.
    pub fn pinned(spec: &EngineSpec, ip: IpAddr, dialect: std::sync::Arc<dyn Dialect>) -> Result<Self, EngineError> {
        let url = reqwest::Url::parse(&spec.url).map_err(|e| EngineError::Transport(format!("engine URL {}: {e}", spec.url)))?;
        let host = url.host_str().ok_or_else(|| EngineError::Transport(format!("engine URL {} has no host", spec.url)))?;
        let port = url.port_or_known_default().unwrap_or(80);
        let http = builder().resolve(host.trim_start_matches('[').trim_end_matches(']'), SocketAddr::new(ip, port)).build().map_err(|e| EngineError::Transport(format!("HTTP client: {e}")))?;
        Ok(Self { http, base: spec.url.clone(), label: pinned_label(url.scheme(), ip, port), dialect })
    }

    /// The worker's base URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// The worker's name in metrics, logs and rendezvous hashing: its base URL, or
    /// `scheme://ip:port` for a [pinned](Self::pinned) client.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The dialect this client speaks.
    pub fn dialect(&self) -> &dyn Dialect {
        self.dialect.as_ref()
    }

    /// Ask for the next token(s), giving up after `timeout`.
    pub async fn next_token(&self, request: &NextTokenRequest<'_>, timeout: Duration) -> Result<EngineReply, EngineError> {
        self.reply_to(&self.dialect.next_token_call(request), timeout, MAX_RESPONSE_BYTES, |body| self.dialect.parse_next_token(body)).await
    }

    /// Check a greedy draft in one request, giving up after `timeout`: the LLM's choices from
    /// the hard position on ([`Dialect::parse_draft_check`]), for the acceptance rule. Read
    /// up to [`MAX_CHOICES_RESPONSE_BYTES`]: vLLM answers an entry per prompt token.
    pub async fn check_draft(&self, request: &DraftCheckRequest<'_>, timeout: Duration) -> Result<EngineReply, EngineError> {
        self.reply_to(&self.dialect.draft_check_call(request), timeout, MAX_CHOICES_RESPONSE_BYTES, |body| self.dialect.parse_draft_check(request, body)).await
    }

    /// Make an escalation's `call` as an `engine_request` span and read its answer with `parse`
    /// (at least one token).
    async fn reply_to(&self, call: &HttpCall, timeout: Duration, limit: usize, parse: impl FnOnce(&[u8]) -> Result<EngineReply, EngineError>) -> Result<EngineReply, EngineError> {
        // Under the pool's `backend` span; none outside one (the start-up checks).
        let span = match tracing::Span::current().is_disabled() {
            true => tracing::Span::none(),
            false => tracing::info_span!(target: common::telemetry::TRACE_TARGET, "engine_request", otel.kind = "client", worker = %self.label, status = tracing::field::Empty),
        };
        let traceparent = common::trace::traceparent_header(&span);
        let result = self.call_limited(call, timeout, traceparent, limit).instrument(span.clone()).await;
        if !span.is_disabled() {
            span.record("status", result.as_ref().map_or_else(EngineError::label, |_| "ok"));
        }
        let reply = parse(&result?)?;
        if reply.tokens.is_empty() {
            return Err(EngineError::BadResponse("no generated token".into()));
        }
        Ok(reply)
    }

    /// Whether the engine says it can serve (its health path answers 2xx within `timeout`).
    pub async fn is_healthy(&self, timeout: Duration) -> bool {
        self.call(&HttpCall::get(self.dialect.health_path()), timeout).await.is_ok()
    }

    /// What the engine serves.
    pub async fn model_info(&self, timeout: Duration) -> Result<EngineModel, EngineError> {
        let body = self.call(&self.dialect.model_info_call(), timeout).await?;
        self.dialect.parse_model_info(&body)
    }

    /// The engine's token ids for `text`, if it can tokenize.
    pub async fn tokenize(&self, text: &str, timeout: Duration) -> Result<Option<Vec<u32>>, EngineError> {
        let Some(call) = self.dialect.tokenize_call(text) else { return Ok(None) };
        let body = self.call(&call, timeout).await?;
        self.dialect.parse_tokenize(&body).map(Some)
    }

    /// Make one call and return the body of a 2xx answer; anything else is a typed error.
    pub async fn call(&self, call: &HttpCall, timeout: Duration) -> Result<Vec<u8>, EngineError> {
        self.call_limited(call, timeout, None, MAX_RESPONSE_BYTES).await
    }

    /// [`Self::call`], reading up to `limit` bytes of the answer (a mapping whose answers are
    /// long, such as prompt log-probabilities, says how long).
    pub async fn call_with_limit(&self, call: &HttpCall, timeout: Duration, limit: usize) -> Result<Vec<u8>, EngineError> {
        self.call_limited(call, timeout, None, limit).await
    }

    /// [`Self::call`] with a W3C `traceparent` header when given, reading at most `limit`
    /// bytes of the answer.
    async fn call_limited(&self, call: &HttpCall, timeout: Duration, traceparent: Option<String>, limit: usize) -> Result<Vec<u8>, EngineError> {
        let url = format!("{}{}", self.base, call.path);
        let mut builder = match &call.body {
            Some(body) => self.http.post(url).json(body),
            None => self.http.get(url),
        };
        if let Some(tp) = traceparent {
            builder = builder.header("traceparent", tp);
        }
        let exchange = async {
            let mut response = builder.send().await.map_err(transport)?;
            let status = response.status();
            if let Some(len) = response.content_length() {
                if len as usize > limit {
                    return Err(EngineError::BadResponse(format!("response of {len} bytes exceeds {limit}")));
                }
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(transport)? {
                if body.len() + chunk.len() > limit {
                    return Err(EngineError::BadResponse(format!("response exceeds {limit} bytes")));
                }
                body.extend_from_slice(&chunk);
            }
            if !status.is_success() {
                return Err(status_error(status.as_u16(), &body));
            }
            Ok(body)
        };
        tokio::time::timeout(timeout, exchange).await.map_err(|_| EngineError::Timeout)?
    }
}

/// Connections are kept alive and reused: a request per escalation must not pay a TCP
/// handshake.
fn builder() -> reqwest::ClientBuilder {
    // https engines use rustls with the provider the QUIC side uses.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().pool_idle_timeout(Duration::from_secs(90)).pool_max_idle_per_host(256).tcp_nodelay(true).connect_timeout(Duration::from_secs(2))
}

/// `scheme://ip:port`, with an IPv6 address in brackets.
pub fn pinned_label(scheme: &str, ip: IpAddr, port: u16) -> String {
    format!("{scheme}://{}", SocketAddr::new(ip, port))
}

fn transport(e: reqwest::Error) -> EngineError {
    if e.is_timeout() {
        return EngineError::Timeout;
    }
    // The chain says why (connection refused, reset ...); the top error alone rarely does.
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        message = format!("{message}: {s}");
        source = s.source();
    }
    EngineError::Transport(message)
}

/// An HTTP error answer as a typed error. Engines say "too long" in different words; those
/// that do are refusals of the request, not failures of the worker.
fn status_error(status: u16, body: &[u8]) -> EngineError {
    let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
    let lower = text.to_ascii_lowercase();
    let too_long = ["exceed", "context size", "context length", "too long", "maximum context"].iter().any(|w| lower.contains(w));
    if status == 400 && too_long {
        return EngineError::ContextTooLong { len: 0 };
    }
    EngineError::Status { status, message: text }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_that_says_the_context_is_too_long_refuses_the_request_without_blaming_the_worker() {
        let e = status_error(400, br#"{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}}"#);
        assert!(matches!(e, EngineError::ContextTooLong { .. }));
        assert!(!e.counts_against_worker());
        let e = status_error(500, b"boom");
        assert_eq!(e, EngineError::Status { status: 500, message: "boom".into() });
        assert!(e.is_retryable());
    }

    /// An engine that records each request's `traceparent` header and answers nonsense.
    async fn recording_engine() -> (EngineSpec, std::sync::Arc<std::sync::Mutex<Vec<Option<String>>>>) {
        let seen: std::sync::Arc<std::sync::Mutex<Vec<Option<String>>>> = Default::default();
        let s = seen.clone();
        let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
            let s = s.clone();
            async move {
                s.lock().unwrap().push(headers.get("traceparent").and_then(|v| v.to_str().ok()).map(String::from));
                "{}"
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let spec = format!("llamacpp=http://{}", listener.local_addr().unwrap()).parse().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (spec, seen)
    }

    #[tokio::test]
    async fn a_traced_engine_request_sends_its_traceparent_and_an_untraced_one_sends_none() {
        use opentelemetry::trace::TracerProvider as _;
        use tracing::instrument::WithSubscriber;
        use tracing_subscriber::layer::SubscriberExt;

        let (spec, seen) = recording_engine().await;
        let client = EngineClient::new(&spec, std::sync::Arc::new(crate::llamacpp::LlamaCppDialect)).unwrap();
        let sampling = common::sampling::SamplingParams::default();
        let request = NextTokenRequest { context: &[1, 2, 3], sampling: &sampling, seed: None, max_new_tokens: 1, top_logprobs: 0, slot: None };
        let timeout = Duration::from_secs(5);
        // Tracing off: no header (the nonsense answer is a parse error either way).
        assert!(client.next_token(&request, timeout).await.is_err());
        // Under an escalation's `backend` span, traced and sampled.
        let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
        let subscriber = tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        async {
            let backend = tracing::info_span!(target: common::telemetry::TRACE_TARGET, "backend");
            let _ = client.next_token(&request, timeout).instrument(backend).await;
        }
        .with_subscriber(subscriber)
        .await;
        provider.force_flush().unwrap();
        let spans = exporter.get_finished_spans().unwrap();
        let call = spans.iter().find(|s| s.name == "engine_request").expect("an engine_request span");
        let backend = spans.iter().find(|s| s.name == "backend").unwrap();
        assert_eq!(call.parent_span_id, backend.span_context.span_id());
        let expected = format!("00-{}-{}-01", call.span_context.trace_id(), call.span_context.span_id());
        assert_eq!(*seen.lock().unwrap(), vec![None, Some(expected)]);
    }

    #[test]
    fn a_pinned_client_is_labelled_by_its_address_and_keeps_the_name_in_its_url() {
        let spec: EngineSpec = "llamacpp=http://llama.duet.svc:8080".parse().unwrap();
        let dialect = std::sync::Arc::new(crate::llamacpp::LlamaCppDialect);
        let v4 = EngineClient::pinned(&spec, "10.0.0.5".parse().unwrap(), dialect.clone()).unwrap();
        assert_eq!((v4.url(), v4.label()), ("http://llama.duet.svc:8080", "http://10.0.0.5:8080"));
        let v6 = EngineClient::pinned(&spec, "fd00::7".parse().unwrap(), dialect.clone()).unwrap();
        assert_eq!(v6.label(), "http://[fd00::7]:8080");
        let https: EngineSpec = "sglang=https://gpu.example".parse().unwrap();
        assert_eq!(EngineClient::pinned(&https, "10.0.0.9".parse().unwrap(), dialect).unwrap().label(), "https://10.0.0.9:443");
    }
}
