//! The gateway as a whole: QUIC listener, session store, batcher, expiry, HTTP side port.

use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::backend::Backend;
use crate::batcher::{spawn_batcher, BatchQueue, BatcherConfig};
use crate::connection::serve_connection;
use crate::session_store::SessionStore;
use crate::tls::{server_config, CertSource};

/// Everything needed to run a gateway.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// UDP address of the QUIC listener.
    pub listen: SocketAddr,
    /// TCP address of the HTTP side port (`/metrics`, `/healthz`, `/readyz`); `None` = off.
    pub http_listen: Option<SocketAddr>,
    /// TLS certificate source.
    pub cert: CertSource,
    /// Shared secret devices present in `Hello`; `None` accepts any (development only).
    pub auth_token: Option<String>,
    /// Name announced in `Welcome`.
    pub gateway_id: String,
    /// Largest accepted frame payload.
    pub max_frame_bytes: usize,
    /// Most sessions one device may hold.
    pub max_sessions_per_device: usize,
    /// Most connected devices.
    pub max_connections: usize,
    /// Sessions idle this long are dropped.
    pub session_idle: Duration,
    /// QUIC idle timeout (devices keep alive below it).
    pub idle_timeout: Duration,
    /// Batching.
    pub batcher: BatcherConfig,
}

/// Fixed facts every connection needs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub auth_token: Option<String>,
    pub gateway_id: String,
    pub llm_id: String,
    pub tokenizer_fingerprint: String,
    pub vocab_size: usize,
    pub max_frame_bytes: usize,
    pub max_context: usize,
    pub max_sessions_per_device: usize,
}

/// State shared by all connection actors.
pub struct Shared {
    pub config: ServeConfig,
    pub store: Arc<SessionStore>,
    pub queue: BatchQueue,
    pub connections: AtomicUsize,
}

/// A running gateway.
pub struct Gateway {
    /// The QUIC endpoint (its local address is the one devices dial).
    pub endpoint: quinn::Endpoint,
    /// Shared state, for tests and the HTTP port.
    pub shared: Arc<Shared>,
    /// Bound address of the HTTP side port, if any.
    pub http_addr: Option<SocketAddr>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What the backend tells the gateway about its model.
#[derive(Debug, Clone)]
pub struct ModelFacts {
    pub llm_id: String,
    pub tokenizer_fingerprint: String,
    pub vocab_size: usize,
    pub max_context: usize,
}

impl Gateway {
    /// Start serving. Returns once the listener is bound.
    pub async fn start(config: GatewayConfig, backend: Box<dyn Backend>, facts: ModelFacts) -> anyhow::Result<Self> {
        let server = server_config(&config.cert, config.idle_timeout)?;
        let endpoint = quinn::Endpoint::server(server, config.listen).with_context(|| format!("binding QUIC on {}", config.listen))?;
        let queue = spawn_batcher(backend, config.batcher).await?;
        let store = Arc::new(SessionStore::new(facts.max_context.saturating_sub(1), config.max_sessions_per_device));
        let shared = Arc::new(Shared {
            config: ServeConfig {
                auth_token: config.auth_token.clone(),
                gateway_id: config.gateway_id.clone(),
                llm_id: facts.llm_id.clone(),
                tokenizer_fingerprint: facts.tokenizer_fingerprint.clone(),
                vocab_size: facts.vocab_size,
                max_frame_bytes: config.max_frame_bytes,
                max_context: facts.max_context.saturating_sub(1),
                max_sessions_per_device: config.max_sessions_per_device,
            },
            store: store.clone(),
            queue: queue.clone(),
            connections: AtomicUsize::new(0),
        });
        let mut tasks = Vec::new();
        let ep = endpoint.clone();
        let sh = shared.clone();
        let max_conn = config.max_connections;
        tasks.push(tokio::spawn(async move {
            while let Some(incoming) = ep.accept().await {
                if sh.connections.load(std::sync::atomic::Ordering::Relaxed) >= max_conn {
                    metrics::counter!("duet_gateway_connections_refused_total").increment(1);
                    incoming.refuse();
                    continue;
                }
                tokio::spawn(serve_connection(incoming, sh.clone()));
            }
        }));
        let idle = config.session_idle;
        let q = queue.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval((idle / 4).max(Duration::from_millis(100)));
            loop {
                tick.tick().await;
                for key in store.expire_idle(Instant::now(), idle) {
                    q.end_session(key);
                }
            }
        }));
        let http_addr = match config.http_listen {
            Some(addr) => {
                let (bound, task) = crate::http::serve(addr, shared.clone()).await?;
                tasks.push(task);
                Some(bound)
            }
            None => None,
        };
        tracing::info!(quic = %endpoint.local_addr()?, http = ?http_addr, llm = %facts.llm_id, "gateway listening");
        Ok(Self { endpoint, shared, http_addr, tasks })
    }

    /// Local QUIC address.
    pub fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.endpoint.local_addr()?)
    }

    /// Stop accepting, close every connection and stop the batcher.
    pub async fn shutdown(self) {
        self.endpoint.close(0u32.into(), b"gateway shutting down");
        for t in &self.tasks {
            t.abort();
        }
        self.shared.queue.actor().stop(None);
        self.endpoint.wait_idle().await;
    }
}
