//! Where `gateway-latency --trace-sample` sends the gateway's spans: an OTLP/HTTP endpoint in
//! this process that decodes each export (opentelemetry-proto's types) and counts what came,
//! so that the measured cost of tracing includes a real exporter talking to a real receiver,
//! and the report can say how many escalations were traced.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{header, StatusCode};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use prost::Message;

/// What the sink received.
#[derive(Debug, Default, Clone)]
pub struct Received {
    /// Export requests.
    pub requests: usize,
    /// Their protobuf bytes.
    pub bytes: usize,
    /// Spans, by name.
    pub spans: HashMap<String, usize>,
    /// Time spent decoding and counting them, s (the receiver's work, not the sender's).
    pub decode_s: f64,
}

/// A running sink (stops when dropped).
pub struct OtlpSink {
    addr: SocketAddr,
    received: Arc<Mutex<Received>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OtlpSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl OtlpSink {
    /// Listen on a free loopback port (call inside a tokio runtime).
    pub async fn start() -> anyhow::Result<Self> {
        let received: Arc<Mutex<Received>> = Arc::default();
        let r = received.clone();
        let export = move |body: Bytes| {
            let received = r.clone();
            async move {
                let answer = |status, body| (status, [(header::CONTENT_TYPE, "application/x-protobuf")], body);
                let len = body.len();
                let started = std::time::Instant::now();
                let Ok(request) = ExportTraceServiceRequest::decode(body) else { return answer(StatusCode::BAD_REQUEST, Vec::new()) };
                let mut r = received.lock().unwrap_or_else(|e| e.into_inner());
                r.requests += 1;
                r.bytes += len;
                for span in request.resource_spans.iter().flat_map(|rs| &rs.scope_spans).flat_map(|ss| &ss.spans) {
                    *r.spans.entry(span.name.clone()).or_default() += 1;
                }
                r.decode_s += started.elapsed().as_secs_f64();
                answer(StatusCode::OK, ExportTraceServiceResponse::default().encode_to_vec())
            }
        };
        let app = axum::Router::new().route("/v1/traces", axum::routing::post(export));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, received, task })
    }

    /// The base URL for the exporter.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What came so far.
    pub fn received(&self) -> Received {
        self.received.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
