//! A real OTLP trace receiver for tests: OTLP/HTTP with protobuf bodies (`POST /v1/traces`,
//! the protocol and port-4318 path the binaries' exporters speak), decoded with
//! `opentelemetry-proto`'s types, which are generated from the official protobuf definitions.
//! No package registry reachable here ships an OpenTelemetry Collector or Jaeger binary, so the
//! tests run this one in-process and read back every span it received.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{header, HeaderMap, StatusCode};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;

/// One span as received, with its service's name.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// `service.name` of the exporting process.
    pub service: String,
    /// Span name.
    pub name: String,
    /// Trace id, hex.
    pub trace_id: String,
    /// Span id, hex.
    pub span_id: String,
    /// Parent span id, hex; empty for a root.
    pub parent_span_id: String,
    /// OTLP span kind (1 internal, 2 server, 3 client).
    pub kind: i32,
    /// Start and end, ns since the epoch.
    pub start_ns: u64,
    /// End, ns since the epoch.
    pub end_ns: u64,
    /// Attributes, values as text.
    pub attributes: HashMap<String, String>,
}

impl ReceivedSpan {
    /// An attribute's value as text.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    /// An attribute's value as a number.
    pub fn num(&self, key: &str) -> Option<f64> {
        self.attr(key)?.parse().ok()
    }
}

/// OTLP span kinds.
pub const KIND_SERVER: i32 = 2;
/// OTLP span kinds.
pub const KIND_CLIENT: i32 = 3;

/// The receiver: an HTTP server on a loopback port, keeping every span it is sent.
pub struct OtlpReceiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    requests: Arc<Mutex<usize>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attributes(kvs: &[KeyValue]) -> HashMap<String, String> {
    kvs.iter().map(|kv| (kv.key.clone(), text(kv.value.as_ref().and_then(|v| v.value.as_ref())))).collect()
}

/// Decode one export request into its spans.
fn spans_of(request: &ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for rs in &request.resource_spans {
        let resource = rs.resource.as_ref().map(|r| attributes(&r.attributes)).unwrap_or_default();
        let service = resource.get("service.name").cloned().unwrap_or_default();
        for ss in &rs.scope_spans {
            for s in &ss.spans {
                out.push(ReceivedSpan {
                    service: service.clone(),
                    name: s.name.clone(),
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: hex(&s.parent_span_id),
                    kind: s.kind,
                    start_ns: s.start_time_unix_nano,
                    end_ns: s.end_time_unix_nano,
                    attributes: attributes(&s.attributes),
                });
            }
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl OtlpReceiver {
    /// Start on a free loopback port.
    pub async fn start() -> Self {
        let spans: Arc<Mutex<Vec<ReceivedSpan>>> = Arc::default();
        let requests: Arc<Mutex<usize>> = Arc::default();
        let (s, r) = (spans.clone(), requests.clone());
        let export = move |headers: HeaderMap, body: Bytes| {
            let (spans, requests) = (s.clone(), r.clone());
            async move {
                let protobuf = headers.get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/x-protobuf"));
                let answer = |status, body| (status, [(header::CONTENT_TYPE, "application/x-protobuf")], body);
                if !protobuf {
                    return answer(StatusCode::UNSUPPORTED_MEDIA_TYPE, Vec::new());
                }
                let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                    return answer(StatusCode::BAD_REQUEST, Vec::new());
                };
                spans.lock().unwrap().extend(spans_of(&request));
                *requests.lock().unwrap() += 1;
                answer(StatusCode::OK, ExportTraceServiceResponse::default().encode_to_vec())
            }
        };
        let app = axum::Router::new().route("/v1/traces", axum::routing::post(export));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, spans, requests, task }
    }

    /// The base URL to give as `--otlp-endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap().clone()
    }

    /// Export requests received so far.
    pub fn requests(&self) -> usize {
        *self.requests.lock().unwrap()
    }

    /// Wait until `done` holds for the spans received (or `timeout` passes); returns them.
    pub async fn wait_for(&self, timeout: Duration, done: impl Fn(&[ReceivedSpan]) -> bool) -> Vec<ReceivedSpan> {
        let until = Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if done(&spans) || Instant::now() >= until {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
