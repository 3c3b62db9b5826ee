//! The device's link to the gateway: a task that owns the QUIC connection.
//!
//! It connects, says `Hello`, publishes the live connection through a watch channel, and when
//! the connection drops it reconnects with exponential back-off and jitter, without the user
//! doing anything. Escalations never wait for a connection: if the link is down they fail at
//! once and the decode loop takes the SLM's token. What to send and what replies mean is
//! decided by the exchange ([`common::exchange`]); the link carries bytes, one request stream
//! per frame.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use common::exchange::edge::{hello, read_handshake, HandshakeAnswer};
use common::exchange::LinkView;
use common::protocol::{decode_frame, encode_frame, Frame, Limits, DEFAULT_MAX_FRAME_BYTES, HARD_MAX_FRAME_BYTES};
use rand::Rng;
use tokio::sync::watch;

/// How to reach and authenticate to the gateway.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// Gateway address (`host:port`).
    pub gateway: String,
    /// TLS server name to verify.
    pub server_name: String,
    /// Trusted certificate (PEM) for the gateway.
    pub ca_cert: Option<PathBuf>,
    /// Skip TLS verification (development only).
    pub insecure: bool,
    /// This device's id.
    pub device_id: String,
    /// Shared secret for `Hello`.
    pub auth_token: String,
    /// Fingerprint of the SLM's tokenizer.
    pub tokenizer_fingerprint: String,
    /// SLM id, for the gateway's logs.
    pub slm_id: String,
    /// First reconnect delay; doubles up to `backoff_max`, with jitter.
    pub backoff_min: Duration,
    /// Longest reconnect delay.
    pub backoff_max: Duration,
}

impl LinkConfig {
    /// A device `device_id` reaching `gateway` (trusting `ca_cert`) with the tokenizer whose
    /// fingerprint is given; the rest at the defaults a device on loopback or a LAN wants (TLS
    /// name `localhost`, no shared secret, reconnect back-off from 100 ms up to 5 s).
    pub fn new(gateway: impl Into<String>, ca_cert: Option<PathBuf>, device_id: impl Into<String>, tokenizer_fingerprint: impl Into<String>) -> Self {
        Self {
            gateway: gateway.into(),
            server_name: "localhost".into(),
            ca_cert,
            insecure: false,
            device_id: device_id.into(),
            auth_token: String::new(),
            tokenizer_fingerprint: tokenizer_fingerprint.into(),
            slm_id: String::new(),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
        }
    }
}

/// A live, welcomed connection.
#[derive(Debug, Clone)]
pub struct Connected {
    /// The QUIC connection.
    pub conn: quinn::Connection,
    /// Limits from `Welcome`.
    pub limits: Limits,
    /// Counts connections; a new value means the gateway may have lost session contexts.
    pub generation: u64,
}

impl Connected {
    /// Largest frame payload the gateway accepts on this connection.
    pub fn max_frame_bytes(&self) -> usize {
        usize::try_from(self.limits.max_frame_bytes).unwrap_or(usize::MAX).min(HARD_MAX_FRAME_BYTES)
    }
}

/// What the link is doing.
#[derive(Debug, Clone)]
pub enum LinkState {
    /// Trying to (re)connect.
    Connecting,
    /// Ready for escalations.
    Up(Connected),
    /// The gateway refused this device (wrong token, tokenizer or version); retried slowly.
    Rejected(String),
    /// Stopped for good.
    Closed,
}

/// Why an escalation got no answer from the cloud.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// No live connection right now.
    #[error("link down")]
    Down,
    /// The deadline passed.
    #[error("deadline passed")]
    Timeout,
    /// Transport failure mid-request.
    #[error("transport: {0}")]
    Transport(String),
    /// The reply could not be decoded.
    #[error("bad reply: {0}")]
    BadReply(String),
}

/// Byte counters (frame bytes, length prefix included).
#[derive(Debug, Default)]
pub struct LinkCounters {
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
}

impl LinkCounters {
    /// Frame bytes sent in requests so far.
    pub fn sent(&self) -> u64 {
        self.bytes_sent.load(Ordering::Relaxed)
    }

    /// Frame bytes received in replies so far.
    pub fn received(&self) -> u64 {
        self.bytes_received.load(Ordering::Relaxed)
    }
}

/// Handle to the link task.
#[derive(Clone)]
pub struct Link {
    state: watch::Receiver<LinkState>,
    counters: Arc<LinkCounters>,
    _task: Arc<LinkTask>,
}

struct LinkTask(tokio::task::JoinHandle<()>);

impl Drop for LinkTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Link {
    /// Start the link task; it connects in the background.
    pub fn start(config: LinkConfig) -> anyhow::Result<Self> {
        let client = crate::tls::client_config(config.ca_cert.as_deref(), config.insecure, Duration::from_secs(2))?;
        let mut endpoint = quinn::Endpoint::client("0.0.0.0:0".parse().context("bind address")?).context("binding the QUIC client socket")?;
        endpoint.set_default_client_config(client);
        let (tx, rx) = watch::channel(LinkState::Connecting);
        let task = tokio::spawn(run_link(endpoint, config, tx));
        Ok(Self { state: rx, counters: Arc::new(LinkCounters::default()), _task: Arc::new(LinkTask(task)) })
    }

    /// The current state.
    pub fn state(&self) -> LinkState {
        self.state.borrow().clone()
    }

    /// The link as the exchange sees it when it decides.
    pub fn view(&self) -> LinkView {
        match &*self.state.borrow() {
            LinkState::Up(c) => LinkView::Up { generation: c.generation, rtt: c.conn.rtt(), max_frame_bytes: c.max_frame_bytes() },
            _ => LinkView::Down,
        }
    }

    /// Wait until the link is up or `timeout` passes.
    pub async fn wait_up(&self, timeout: Duration) -> Option<Connected> {
        let mut rx = self.state.clone();
        let fut = async {
            loop {
                if let LinkState::Up(c) = rx.borrow_and_update().clone() {
                    return Some(c);
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        };
        tokio::time::timeout(timeout, fut).await.ok().flatten()
    }

    /// Byte counters.
    pub fn counters(&self) -> &LinkCounters {
        &self.counters
    }

    /// Send one request frame on its own stream and wait for the one-frame reply until
    /// `deadline`. Dropping the streams at the deadline tells the gateway to cancel the work.
    pub async fn request(&self, frame: &Frame, deadline: Instant) -> Result<(Frame, Connected), LinkError> {
        let LinkState::Up(connected) = self.state() else { return Err(LinkError::Down) };
        let bytes = encode_frame(frame, connected.max_frame_bytes()).map_err(|e| LinkError::BadReply(e.to_string()))?;
        let reply = self.exchange(&connected, &bytes, deadline).await?;
        Ok((reply, connected))
    }

    /// Send one encoded frame (from the exchange) on its own stream and wait for the reply
    /// until `deadline`.
    pub async fn request_bytes(&self, bytes: &[u8], deadline: Instant) -> Result<Frame, LinkError> {
        let LinkState::Up(connected) = self.state() else { return Err(LinkError::Down) };
        self.exchange(&connected, bytes, deadline).await
    }

    async fn exchange(&self, connected: &Connected, bytes: &[u8], deadline: Instant) -> Result<Frame, LinkError> {
        let conn = connected.conn.clone();
        // Replies are small; the gateway's own limit bounds what it may send.
        let max = DEFAULT_MAX_FRAME_BYTES.max(connected.max_frame_bytes());
        let counters = self.counters.clone();
        let work = async move {
            let (mut send, mut recv) = conn.open_bi().await.map_err(|e| LinkError::Transport(e.to_string()))?;
            send.write_all(bytes).await.map_err(|e| LinkError::Transport(e.to_string()))?;
            send.finish().map_err(|e| LinkError::Transport(e.to_string()))?;
            counters.bytes_sent.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            let reply = recv.read_to_end(max + 4).await.map_err(|e| LinkError::Transport(e.to_string()))?;
            counters.bytes_received.fetch_add(reply.len() as u64, Ordering::Relaxed);
            decode_frame(&reply, max).map_err(|e| LinkError::BadReply(e.to_string()))
        };
        match tokio::time::timeout_at(deadline.into(), work).await {
            Ok(result) => result,
            Err(_) => Err(LinkError::Timeout),
        }
    }
}

impl Link {
    /// Check in the background that the gateway still answers (a `Ping`, served without the
    /// LLM, so a slow backend does not count); if it does not within `timeout`, close the
    /// connection so the link reconnects at once. A gateway killed without closing its
    /// connections is otherwise noticed only at the QUIC idle timeout.
    pub fn probe(&self, timeout: Duration) {
        let link = self.clone();
        tokio::spawn(async move {
            let LinkState::Up(c) = link.state() else { return };
            let nonce = rand::rng().random::<u64>();
            match link.request(&Frame::Ping { nonce }, Instant::now() + timeout).await {
                Ok((Frame::Pong { nonce: n }, _)) if n == nonce => {}
                other => {
                    tracing::warn!(?other, "gateway did not answer a ping; reconnecting");
                    c.conn.close(2u32.into(), b"unresponsive");
                }
            }
        });
    }
}

async fn resolve(addr: &str) -> anyhow::Result<SocketAddr> {
    tokio::net::lookup_host(addr).await.with_context(|| format!("resolving {addr}"))?.next().with_context(|| format!("{addr} resolves to nothing"))
}

/// Connect and handshake once.
async fn connect_once(endpoint: &quinn::Endpoint, cfg: &LinkConfig, generation: u64) -> Result<Connected, (bool, String)> {
    let addr = resolve(&cfg.gateway).await.map_err(|e| (false, e.to_string()))?;
    let connecting = endpoint.connect(addr, &cfg.server_name).map_err(|e| (false, e.to_string()))?;
    let conn = tokio::time::timeout(Duration::from_secs(5), connecting)
        .await
        .map_err(|_| (false, "connect timed out".to_string()))?
        .map_err(|e| (false, e.to_string()))?;
    let hello = hello(common::protocol::PROTOCOL_VERSION, &cfg.device_id, &cfg.auth_token, &cfg.tokenizer_fingerprint, &cfg.slm_id);
    let exchange = async {
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
        let bytes = encode_frame(&hello, DEFAULT_MAX_FRAME_BYTES).map_err(|e| e.to_string())?;
        send.write_all(&bytes).await.map_err(|e| e.to_string())?;
        send.finish().map_err(|e| e.to_string())?;
        let reply = recv.read_to_end(DEFAULT_MAX_FRAME_BYTES + 4).await.map_err(|e| e.to_string())?;
        decode_frame(&reply, DEFAULT_MAX_FRAME_BYTES).map_err(|e| e.to_string())
    };
    match tokio::time::timeout(Duration::from_secs(5), exchange).await {
        Err(_) => Err((false, "handshake timed out".into())),
        Ok(Err(e)) => Err((false, format!("handshake: {e}"))),
        Ok(Ok(reply)) => match read_handshake(reply, &cfg.tokenizer_fingerprint) {
            HandshakeAnswer::Welcome { gateway_id, llm_id, limits } => {
                tracing::info!(%gateway_id, %llm_id, rtt_ms = conn.rtt().as_millis() as u64, "connected to the gateway");
                Ok(Connected { conn, limits, generation })
            }
            HandshakeAnswer::Refused(why) => Err((true, why)),
            HandshakeAnswer::Unexpected(why) => Err((false, why)),
            HandshakeAnswer::Downgrade { version } => Err((false, format!("the gateway speaks protocol version {version}"))),
        },
    }
}

async fn run_link(endpoint: quinn::Endpoint, cfg: LinkConfig, tx: watch::Sender<LinkState>) {
    let mut backoff = cfg.backoff_min;
    let mut generation = 0u64;
    loop {
        generation += 1;
        match connect_once(&endpoint, &cfg, generation).await {
            Ok(connected) => {
                backoff = cfg.backoff_min;
                let conn = connected.conn.clone();
                if tx.send(LinkState::Up(connected)).is_err() {
                    return;
                }
                let reason = conn.closed().await;
                tracing::warn!("gateway connection lost: {reason}; reconnecting");
                let _ = tx.send(LinkState::Connecting);
            }
            Err((rejected, why)) => {
                if rejected {
                    tracing::error!("gateway refused this device: {why}");
                    let _ = tx.send(LinkState::Rejected(why));
                    backoff = cfg.backoff_max;
                } else {
                    tracing::debug!("connecting to {}: {why}", cfg.gateway);
                }
            }
        }
        if tx.is_closed() {
            return;
        }
        let jitter = rand::rng().random_range(0.5..1.5);
        tokio::time::sleep(backoff.mul_f64(jitter)).await;
        backoff = (backoff * 2).min(cfg.backoff_max);
    }
}

/// Next session id of this device. Small on purpose: bincode spends 1 byte on values below
/// 251 and 9 on a random u64, and session ids ride in every escalation.
pub fn next_session_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
