//! Command-line and environment configuration of the gateway (every flag has a `DUET_*` twin).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use common::model_files::{duet_home, DEFAULT_LLM};

use crate::backend::{Backend, DelayBackend, EmbeddedBackend, EmbeddedOptions};
use crate::batcher::BatcherConfig;
use crate::server::{GatewayConfig, ModelFacts};
use crate::tls::CertSource;

/// Duet cloud gateway: batches escalated tokens from many devices into the LLM.
#[derive(Debug, Clone, Parser)]
#[command(name = "cloud-gateway", version, about)]
pub struct GatewayArgs {
    /// UDP address for QUIC.
    #[arg(long, env = "DUET_LISTEN", default_value = "127.0.0.1:4433")]
    pub listen: SocketAddr,
    /// TCP address of the HTTP side port (/metrics, /healthz, /readyz); "off" disables it.
    #[arg(long, env = "DUET_HTTP_LISTEN", default_value = "127.0.0.1:9464")]
    pub http_listen: String,
    /// TLS certificate chain (PEM). Without it a self-signed certificate is generated.
    #[arg(long, env = "DUET_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, env = "DUET_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Where to write the self-signed certificate (PEM) for devices' --ca-cert.
    #[arg(long, env = "DUET_WRITE_CERT")]
    pub write_cert: Option<PathBuf>,
    /// Shared secret devices must present; unset accepts any device (development only).
    #[arg(long, env = "DUET_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// Gateway name announced to devices.
    #[arg(long, env = "DUET_GATEWAY_ID", default_value = "duet-gateway")]
    pub gateway_id: String,
    /// LLM for the embedded backend: prepared model id or directory.
    #[arg(long, env = "DUET_LLM_MODEL", default_value = DEFAULT_LLM)]
    pub model: String,
    /// ONNX Runtime intra-op threads (0 = all cores).
    #[arg(long, env = "DUET_THREADS", default_value_t = 0)]
    pub threads: usize,
    /// Longest session context, tokens.
    #[arg(long, env = "DUET_MAX_CONTEXT", default_value_t = 4096)]
    pub max_context: usize,
    /// Sessions whose LLM KV cache is kept (LRU).
    #[arg(long, env = "DUET_KV_CACHE_SESSIONS", default_value_t = 16)]
    pub kv_cache_sessions: usize,
    /// Most escalations per backend call.
    #[arg(long, env = "DUET_MAX_BATCH", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_batch: u32,
    /// Longest wait for a batch to fill, milliseconds.
    #[arg(long, env = "DUET_MAX_WAIT_MS", default_value_t = 3)]
    pub max_wait_ms: u64,
    /// Escalations queued or running before new ones get `Busy`.
    #[arg(long, env = "DUET_QUEUE_CAPACITY", default_value_t = 256)]
    pub queue_capacity: usize,
    /// Largest accepted frame, bytes.
    #[arg(long, env = "DUET_MAX_FRAME_BYTES", default_value_t = common::protocol::DEFAULT_MAX_FRAME_BYTES)]
    pub max_frame_bytes: usize,
    /// Sessions one device may hold.
    #[arg(long, env = "DUET_MAX_SESSIONS_PER_DEVICE", default_value_t = 64)]
    pub max_sessions_per_device: usize,
    /// Connected devices at most.
    #[arg(long, env = "DUET_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,
    /// Idle seconds after which a session is dropped.
    #[arg(long, env = "DUET_SESSION_IDLE_SECS", default_value_t = 300)]
    pub session_idle_secs: u64,
    /// Extra service time added to every backend call, ms (simulates a slow or remote LLM).
    #[arg(long, env = "DUET_BACKEND_DELAY_MS", default_value_t = 0)]
    pub backend_delay_ms: u64,
    /// Log filter (tracing EnvFilter syntax).
    #[arg(long, env = "DUET_LOG", default_value = "info")]
    pub log: String,
}

impl GatewayArgs {
    /// The gateway configuration these flags describe.
    pub fn gateway_config(&self) -> anyhow::Result<GatewayConfig> {
        let http_listen = match self.http_listen.as_str() {
            "off" | "" => None,
            s => Some(s.parse().map_err(|e| anyhow::anyhow!("--http-listen `{s}`: {e}"))?),
        };
        let cert = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => CertSource::Files { cert: cert.clone(), key: key.clone() },
            _ => CertSource::SelfSigned {
                names: vec!["localhost".into(), "127.0.0.1".into()],
                write_to: Some(self.write_cert.clone().unwrap_or_else(|| duet_home().join("gateway-cert.pem"))),
            },
        };
        anyhow::ensure!(self.queue_capacity > 0, "--queue-capacity must be > 0");
        Ok(GatewayConfig {
            listen: self.listen,
            http_listen,
            cert,
            auth_token: self.auth_token.clone().filter(|t| !t.is_empty()),
            gateway_id: self.gateway_id.clone(),
            max_frame_bytes: self.max_frame_bytes.clamp(1024, common::protocol::HARD_MAX_FRAME_BYTES),
            max_sessions_per_device: self.max_sessions_per_device.max(1),
            max_connections: self.max_connections.max(1),
            session_idle: Duration::from_secs(self.session_idle_secs.max(1)),
            idle_timeout: Duration::from_secs(30),
            batcher: BatcherConfig {
                max_batch: self.max_batch as usize,
                max_wait: Duration::from_millis(self.max_wait_ms),
                queue_capacity: self.queue_capacity,
            },
        })
    }

    /// Load the embedded backend these flags describe.
    pub fn load_backend(&self) -> anyhow::Result<(Box<dyn Backend>, ModelFacts)> {
        let emb = EmbeddedBackend::load(&EmbeddedOptions {
            model: self.model.clone(),
            threads: self.threads,
            max_context: self.max_context,
            max_cached_sessions: self.kv_cache_sessions,
        })?;
        let facts = emb.facts();
        let backend: Box<dyn Backend> = if self.backend_delay_ms > 0 {
            Box::new(DelayBackend::new(emb, Duration::from_millis(self.backend_delay_ms)))
        } else {
            Box::new(emb)
        };
        Ok((backend, facts))
    }
}
