//! The device's link to the gateway: a task that owns the QUIC connection.
//!
//! It connects, says `Hello`, publishes the live connection through a watch channel, and when
//! the connection drops it reconnects with exponential back-off and jitter, without the user
//! doing anything. Escalations never wait for a connection: if the link is down they fail at
//! once and the decode loop takes the SLM's token. What to send and what replies mean is
//! decided by the exchange ([`common::exchange`]); the link carries bytes, one request stream
//! per frame.
//!
//! Several replicas: the gateway setting is a list (`a:4433,b:4433`), and each name is resolved
//! again before every attempt, so a DNS name with several records is a list too. Which address
//! comes next, and how long to wait first, is [`Failover`]'s decision: a random first pick,
//! the next address at once after a failure, back-off only after a whole round. Every attempt
//! uses a fresh UDP socket, so a load balancer keyed on the source port (a Kubernetes UDP
//! Service's conntrack entry) sees a new flow and may pick another replica.
//!
//! Graceful drain: a gateway that drains pushes `GoAway` on a stream it opens. The link then
//! publishes [`LinkState::Moving`]: the session sees the next connection's generation (so its
//! next escalation is a `Full` sync), requests wait for the new connection within their own
//! deadline instead of falling back, and answers in flight on the old connection still arrive
//! (it closes when the last of them has). The link reconnects at once to the `GoAway`'s
//! redirect or to another address; if no other replica takes it, it goes on using the drained
//! one (which serves until its drain stops taking work) and keeps trying.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::exchange::edge::{hello, read_handshake, read_push, HandshakeAnswer, Push};
use common::exchange::failover::gateway_list;
use common::exchange::{Failover, LinkView};
use common::protocol::{accepts_trace_context, attach_trace_context, decode_frame, encode_frame, Frame, Limits, TraceContext, DEFAULT_MAX_FRAME_BYTES, HARD_MAX_FRAME_BYTES, PROTOCOL_VERSION};
use rand::Rng;
use tokio::sync::watch;

/// How to reach and authenticate to the gateway.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// Gateway address (`host:port`), or several separated by commas (replicas to fail over
    /// between); each name may resolve to several addresses.
    pub gateway: String,
    /// TLS server name to verify.
    pub server_name: String,
    /// Trusted certificate (PEM) for the gateway.
    pub ca_cert: Option<PathBuf>,
    /// Skip TLS verification (development only).
    pub insecure: bool,
    /// This device's certificate and key, for a gateway that requires mutual TLS (there the
    /// certificate, not `device_id`, says who the device is).
    pub client_identity: Option<crate::tls::ClientIdentity>,
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
    /// Longest reconnect delay: what a device may lose after its gateway is back (2 s).
    pub backoff_max: Duration,
    /// How often the client certificate and key files are checked for a rotation (zero: never
    /// polled); the next connection uses the new pair.
    pub cert_poll: Duration,
    /// Also reload the client certificate on SIGHUP (a long-running `serve`; a one-shot command
    /// keeps SIGHUP's default of ending the process).
    pub reload_on_sighup: bool,
    /// How long a silent connection lives before QUIC closes it (keep-alives go every
    /// [`KEEP_ALIVE`]).
    pub idle_timeout: Duration,
}

/// Interval between QUIC keep-alives on the link's connection.
pub const KEEP_ALIVE: Duration = Duration::from_secs(2);

impl LinkConfig {
    /// A device `device_id` reaching `gateway` (trusting `ca_cert`) with the tokenizer whose
    /// fingerprint is given; the rest at the defaults a device on loopback or a LAN wants (TLS
    /// name `localhost`, no shared secret, reconnect back-off from 100 ms up to 2 s).
    pub fn new(gateway: impl Into<String>, ca_cert: Option<PathBuf>, device_id: impl Into<String>, tokenizer_fingerprint: impl Into<String>) -> Self {
        Self {
            gateway: gateway.into(),
            server_name: "localhost".into(),
            ca_cert,
            insecure: false,
            client_identity: None,
            device_id: device_id.into(),
            auth_token: String::new(),
            tokenizer_fingerprint: tokenizer_fingerprint.into(),
            slm_id: String::new(),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(2),
            cert_poll: Duration::from_secs(2),
            reload_on_sighup: false,
            idle_timeout: crate::tls::DEFAULT_IDLE_TIMEOUT,
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
    /// Counts welcomed connections; a new value means the gateway may have lost session
    /// contexts (another replica holds none).
    pub generation: u64,
    /// The replica's address.
    pub addr: SocketAddr,
    /// The protocol version spoken on it: this device's, or an older gateway's.
    pub protocol_version: u16,
    /// Requests waiting for a reply on it: a drained replica's connection is closed once none is.
    in_flight: Arc<AtomicU64>,
    /// Its UDP endpoint (one per connection), waited on at [`Link::close`] so the close is sent.
    endpoint: quinn::Endpoint,
}

/// A request counted in [`Connected::in_flight`] while it lives.
struct InFlight(Arc<AtomicU64>);

impl InFlight {
    fn new(connected: &Connected) -> Self {
        connected.in_flight.fetch_add(1, Ordering::Relaxed);
        Self(connected.in_flight.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
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
    /// The gateway behind this (still open) connection is draining (`GoAway`): reconnecting
    /// elsewhere. New requests wait for the next connection, within their deadline.
    Moving(Connected),
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
    /// A liveness probe is in flight: every silent fallback asks for one, one at a time runs.
    probing: Arc<AtomicBool>,
    /// Every welcomed connection not known closed: the live one and a drained one still kept.
    open: Arc<OpenConnections>,
    tasks: Arc<LinkTask>,
    client: Arc<ClientTls>,
}

/// The link's background tasks (the connection loop, the certificate watcher), stopped when
/// the last handle goes or at [`Link::close`].
struct LinkTask(Vec<tokio::task::JoinHandle<()>>);

impl LinkTask {
    fn abort(&self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl Drop for LinkTask {
    fn drop(&mut self) {
        self.abort();
    }
}

/// The welcomed connections a [`Link::close`] must close: without an explicit close and a wait
/// for the endpoint to send it, a process that exits right after dropping its link leaves the
/// gateway holding the connection until its idle timeout (a drain waits for it).
#[derive(Default)]
struct OpenConnections(std::sync::Mutex<Vec<(quinn::Connection, quinn::Endpoint)>>);

impl OpenConnections {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(quinn::Connection, quinn::Endpoint)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remember `c` (and forget the connections already closed).
    fn add(&self, c: &Connected) {
        let mut open = self.lock();
        open.retain(|(conn, _)| conn.close_reason().is_none());
        open.push((c.conn.clone(), c.endpoint.clone()));
    }
}

/// How long [`Link::close`] waits for its connections' closes to be sent and acknowledged.
const CLOSE_WAIT: Duration = Duration::from_secs(1);
/// QUIC application close code of a device that leaves (its process ends).
pub const CLOSE_LEAVING: u32 = 0;

impl Link {
    /// Start the link task; it connects in the background.
    pub fn start(config: LinkConfig) -> anyhow::Result<Self> {
        let build = {
            let (ca_cert, insecure) = (config.ca_cert.clone(), config.insecure);
            let timers = crate::tls::QuicTimers { keep_alive: KEEP_ALIVE, idle_timeout: config.idle_timeout };
            move |identity: Option<&crate::tls::ClientIdentity>| crate::tls::client_config_with_identity(ca_cert.as_deref(), insecure, timers, identity)
        };
        let client = Arc::new(ClientTls::new(build(config.client_identity.as_ref())?));
        anyhow::ensure!(!gateway_list(&config.gateway).is_empty(), "no gateway address in `{}`", config.gateway);
        let mut tasks = Vec::new();
        if let Some(identity) = config.client_identity.clone() {
            let watch = crate::rotation::WatchConfig { poll: config.cert_poll, on_sighup: config.reload_on_sighup };
            if let Some(task) = crate::rotation::spawn(identity, client.clone(), watch, move |id| build(Some(id))) {
                tasks.push(task);
            }
        }
        let (tx, rx) = watch::channel(LinkState::Connecting);
        let open = Arc::new(OpenConnections::default());
        tasks.push(tokio::spawn(run_link(client.clone(), config, tx, open.clone())));
        Ok(Self { state: rx, counters: Arc::new(LinkCounters::default()), probing: Arc::default(), open, tasks: Arc::new(LinkTask(tasks)), client })
    }

    /// How many rotated client certificates were loaded since the link started (each is used
    /// from the next connection on).
    pub fn certificate_reloads(&self) -> u64 {
        self.client.replaced()
    }

    /// Run `work`, then [`Self::close`] the link whatever `work` returned: a one-shot command's
    /// session followed by its exit.
    pub async fn close_after<T>(&self, work: impl std::future::Future<Output = T>) -> T {
        let out = work.await;
        self.close().await;
        out
    }

    /// Leave: stop reconnecting, close every connection (the live one and a drained replica's
    /// still kept) with [`CLOSE_LEAVING`], and wait up to a second until the closes are sent.
    /// Call it before the process exits: dropping the link only queues the close, and a runtime
    /// shut down right after never sends it, so the gateway would hold the connection (and a
    /// draining one would wait) until its idle timeout.
    pub async fn close(&self) {
        self.tasks.abort();
        let open = std::mem::take(&mut *self.open.lock());
        for (conn, _) in &open {
            conn.close(CLOSE_LEAVING.into(), b"device leaving");
        }
        let idle = futures_wait_idle(open.iter().map(|(_, e)| e.clone()).collect());
        if tokio::time::timeout(CLOSE_WAIT, idle).await.is_err() {
            tracing::debug!("the gateway did not acknowledge the close within {CLOSE_WAIT:?}");
        }
    }

    /// The current state.
    pub fn state(&self) -> LinkState {
        self.state.borrow().clone()
    }

    /// The link as the exchange sees it when it decides. While moving to another replica it
    /// is already the next connection: what the session sends next is a `Full` sync for it.
    pub fn view(&self) -> LinkView {
        match &*self.state.borrow() {
            LinkState::Up(c) => LinkView::Up { generation: c.generation, rtt: c.conn.rtt(), max_frame_bytes: c.max_frame_bytes() },
            LinkState::Moving(c) => LinkView::Up { generation: c.generation + 1, rtt: c.conn.rtt(), max_frame_bytes: c.max_frame_bytes() },
            _ => LinkView::Down,
        }
    }

    /// The connection to send a request on: the live one, or while moving, the next one as
    /// soon as it is welcomed (no later than `deadline`).
    async fn connection_for(&self, deadline: Instant) -> Result<Connected, LinkError> {
        let mut rx = self.state.clone();
        let wait = async {
            loop {
                let moving = match &*rx.borrow_and_update() {
                    LinkState::Up(c) => return Ok(c.clone()),
                    LinkState::Moving(_) => true,
                    _ => false,
                };
                if !moving || rx.changed().await.is_err() {
                    return Err(LinkError::Down);
                }
            }
        };
        tokio::time::timeout_at(deadline.into(), wait).await.unwrap_or(Err(LinkError::Down))
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
        let connected = self.connection_for(deadline).await?;
        let bytes = encode_frame(frame, connected.max_frame_bytes()).map_err(|e| LinkError::BadReply(e.to_string()))?;
        let reply = self.exchange(&connected, &bytes, deadline).await?;
        Ok((reply, connected))
    }

    /// Send one encoded frame (from the exchange) on its own stream and wait for the reply
    /// until `deadline`.
    pub async fn request_bytes(&self, bytes: &[u8], deadline: Instant) -> Result<Frame, LinkError> {
        let connected = self.connection_for(deadline).await?;
        self.exchange(&connected, bytes, deadline).await
    }

    /// [`Self::request_bytes`] for an encoded `Escalate`, with `trace` (its span's trace context)
    /// behind it when the connection's gateway accepts one (v3) and it fits the gateway's frame
    /// limit; otherwise the frame goes as it is. Returns the reply and the bytes sent.
    pub async fn request_escalation(&self, bytes: &[u8], trace: Option<&TraceContext>, deadline: Instant) -> (Result<Frame, LinkError>, usize) {
        let connected = match self.connection_for(deadline).await {
            Ok(c) => c,
            Err(e) => return (Err(e), 0),
        };
        let mut traced = None;
        if let Some(tc) = trace.filter(|_| accepts_trace_context(connected.protocol_version)) {
            let mut with = bytes.to_vec();
            if attach_trace_context(&mut with, tc, connected.max_frame_bytes()).is_ok() {
                traced = Some(with);
            }
        }
        let bytes = traced.as_deref().unwrap_or(bytes);
        (self.exchange(&connected, bytes, deadline).await, bytes.len())
    }

    async fn exchange(&self, connected: &Connected, bytes: &[u8], deadline: Instant) -> Result<Frame, LinkError> {
        let _in_flight = InFlight::new(connected);
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
    /// LLM, so a slow backend does not count); if no `Pong` comes within `timeout` *and* the
    /// gateway sent nothing at all meanwhile, close the connection so the link reconnects at
    /// once. A gateway killed without closing its connections is otherwise noticed only at the
    /// QUIC idle timeout; one that still sends (acknowledgements, other answers) is slow, not
    /// gone, and a reconnect would only add a handshake and a `Full` resync to its load.
    /// At most one probe runs at a time; asking while one runs does nothing.
    pub fn probe(&self, timeout: Duration) {
        let LinkState::Up(c) = self.state() else { return };
        if self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let link = self.clone();
        tokio::spawn(async move {
            let _done = ProbeDone(link.probing.clone());
            let nonce = rand::rng().random::<u64>();
            let heard_before = c.conn.stats().udp_rx.datagrams;
            match link.request(&Frame::Ping { nonce }, Instant::now() + timeout).await {
                Ok((Frame::Pong { nonce: n }, _)) if n == nonce => {}
                _ if c.conn.stats().udp_rx.datagrams > heard_before => {
                    tracing::debug!("gateway slow to answer a ping, but not silent: keeping the connection");
                }
                other => {
                    tracing::warn!(?other, "gateway silent for {timeout:?}; reconnecting");
                    c.conn.close(2u32.into(), b"unresponsive");
                }
            }
        });
    }
}

/// Clears the link's probe flag when the probe ends, however it ends.
struct ProbeDone(Arc<AtomicBool>);

impl Drop for ProbeDone {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The QUIC client configuration new connections use, replaced when the device certificate is
/// rotated ([`crate::rotation`]); a connection keeps the one it was made with.
pub struct ClientTls(std::sync::RwLock<quinn::ClientConfig>, AtomicU64);

impl ClientTls {
    /// A cell holding `config`.
    pub fn new(config: quinn::ClientConfig) -> Self {
        Self(std::sync::RwLock::new(config), AtomicU64::new(0))
    }

    /// How many times the configuration was replaced (a rotated certificate loaded).
    pub fn replaced(&self) -> u64 {
        self.1.load(Ordering::Relaxed)
    }

    /// The configuration for the next connection.
    pub fn current(&self) -> quinn::ClientConfig {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Use `config` from the next connection on.
    pub fn replace(&self, config: quinn::ClientConfig) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = config;
        self.1.fetch_add(1, Ordering::Relaxed);
    }
}

/// Longest frame a gateway pushes (a `GoAway`), and how long reading it may take.
const PUSH_MAX_BYTES: usize = 1024;
const PUSH_READ_WAIT: Duration = Duration::from_secs(2);
/// After a `GoAway`, how long new requests wait for the next connection before the link falls
/// back to the drained one (which still serves) while it keeps trying.
const MOVE_PATIENCE: Duration = Duration::from_secs(1);

/// Every address the gateway setting's entries resolve to now, in order (names that do not
/// resolve are skipped, and logged).
async fn resolve_all(entries: &[String]) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for entry in entries {
        match tokio::net::lookup_host(entry.as_str()).await {
            Ok(addrs) => out.extend(addrs.filter(|a| !out.contains(a)).collect::<Vec<_>>()),
            Err(e) => tracing::debug!("resolving {entry}: {e}"),
        }
    }
    out
}

/// Why an attempt did not give a connection.
enum Attempt {
    /// Unreachable, timed out, refused at the QUIC level (a draining gateway): try the next.
    Failed(String),
    /// Refused in the handshake (credential, tokenizer, version): every replica would say so.
    Refused(String),
    /// An older gateway: say `Hello` again in its version.
    Downgrade(u16),
}

/// A client endpoint on a fresh UDP socket of `addr`'s family.
fn client_endpoint(client: &quinn::ClientConfig, addr: SocketAddr) -> Result<quinn::Endpoint, Attempt> {
    let bind: SocketAddr = if addr.is_ipv6() { (Ipv6Addr::UNSPECIFIED, 0).into() } else { (Ipv4Addr::UNSPECIFIED, 0).into() };
    let mut endpoint = quinn::Endpoint::client(bind).map_err(|e| Attempt::Failed(format!("binding a UDP socket: {e}")))?;
    endpoint.set_default_client_config(client.clone());
    Ok(endpoint)
}

/// Connect to `addr` and handshake, in this device's protocol version or, if the gateway is
/// older, in its version.
async fn connect(client: &quinn::ClientConfig, addr: SocketAddr, cfg: &LinkConfig, generation: u64) -> Result<Connected, Attempt> {
    match connect_once(client, addr, cfg, PROTOCOL_VERSION, generation).await {
        Err(Attempt::Downgrade(version)) => match connect_once(client, addr, cfg, version, generation).await {
            Err(Attempt::Downgrade(v)) => Err(Attempt::Failed(format!("the gateway asked for protocol version {v} twice"))),
            other => other,
        },
        other => other,
    }
}

/// How long one connection attempt may take. Short, because an attempt begun during a
/// blackout retransmits its Initial at ever longer intervals (QUIC's probe timeout doubles):
/// a fresh attempt after a short back-off reaches a gateway back from a blackout sooner than
/// the old attempt's next retransmission would.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Connect and handshake once.
async fn connect_once(client: &quinn::ClientConfig, addr: SocketAddr, cfg: &LinkConfig, version: u16, generation: u64) -> Result<Connected, Attempt> {
    let endpoint = client_endpoint(client, addr)?;
    let connecting = endpoint.connect(addr, &cfg.server_name).map_err(|e| Attempt::Failed(e.to_string()))?;
    let conn = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
        .await
        .map_err(|_| Attempt::Failed("connect timed out".to_string()))?
        .map_err(|e| refused_certificate(&e).map_or_else(|| Attempt::Failed(e.to_string()), Attempt::Refused))?;
    let hello = hello(version, &cfg.device_id, &cfg.auth_token, &cfg.tokenizer_fingerprint, &cfg.slm_id);
    let exchange = async {
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
        let bytes = encode_frame(&hello, DEFAULT_MAX_FRAME_BYTES).map_err(|e| e.to_string())?;
        send.write_all(&bytes).await.map_err(|e| e.to_string())?;
        send.finish().map_err(|e| e.to_string())?;
        let reply = recv.read_to_end(DEFAULT_MAX_FRAME_BYTES + 4).await.map_err(|e| e.to_string())?;
        decode_frame(&reply, DEFAULT_MAX_FRAME_BYTES).map_err(|e| e.to_string())
    };
    match tokio::time::timeout(Duration::from_secs(5), exchange).await {
        Err(_) => Err(Attempt::Failed("handshake timed out".into())),
        Ok(Err(e)) => {
            // Under mutual TLS the gateway's verdict on this device's certificate arrives just
            // after the client's side of the TLS handshake ended: a refusal closes the connection
            // with a TLS alert, which says why better than the failed stream does.
            let closed = tokio::time::timeout(Duration::from_millis(500), conn.closed()).await.ok();
            match closed.as_ref().and_then(refused_certificate) {
                Some(why) => Err(Attempt::Refused(why)),
                None => Err(Attempt::Failed(format!("handshake: {e}"))),
            }
        }
        Ok(Ok(reply)) => match read_handshake(reply, &cfg.tokenizer_fingerprint) {
            HandshakeAnswer::Welcome { gateway_id, llm_id, limits } => {
                tracing::info!(%gateway_id, %llm_id, %addr, version, rtt_ms = conn.rtt().as_millis() as u64, "connected to the gateway");
                Ok(Connected { conn, limits, generation, addr, protocol_version: version, in_flight: Arc::default(), endpoint })
            }
            HandshakeAnswer::Downgrade { version } => Err(Attempt::Downgrade(version)),
            HandshakeAnswer::Refused(why) => Err(Attempt::Refused(why)),
            HandshakeAnswer::Unexpected(why) => Err(Attempt::Failed(why)),
        },
    }
}

/// What a TLS alert closing the connection says about this device's certificate, if it is one
/// the gateway sends for a refused client certificate (RFC 8446 §6: alert codes 42, 44, 45,
/// 48, 116, carried as QUIC crypto errors 0x100 + alert).
fn refused_certificate(e: &quinn::ConnectionError) -> Option<String> {
    let code = match e {
        quinn::ConnectionError::ConnectionClosed(c) => u64::from(c.error_code),
        quinn::ConnectionError::TransportError(t) => u64::from(t.code),
        _ => return None,
    };
    let why = match code.checked_sub(0x100)? {
        42 => "bad certificate",
        44 => "certificate revoked (by the gateway's deny list or the fleet CA's CRL)",
        45 => "certificate expired",
        48 => "certificate not issued by a CA the gateway trusts",
        116 => "certificate required (start with --client-cert and --client-key)",
        _ => return None,
    };
    Some(format!("the gateway refused this device's TLS client certificate: {why}"))
}

/// How a welcomed connection ended.
enum Ended {
    /// Closed or lost.
    Lost(String),
    /// The gateway is draining: go (to `redirect` if given).
    GoAway(Option<String>),
}

/// Wait until the connection ends, or its gateway pushes `GoAway`.
async fn watch_connection(conn: &quinn::Connection) -> Ended {
    loop {
        let mut recv = tokio::select! {
            reason = conn.closed() => return Ended::Lost(reason.to_string()),
            uni = conn.accept_uni() => match uni {
                Ok(recv) => recv,
                Err(e) => return Ended::Lost(e.to_string()),
            },
        };
        let frame = match tokio::time::timeout(PUSH_READ_WAIT, recv.read_to_end(PUSH_MAX_BYTES + 4)).await {
            Ok(Ok(bytes)) => decode_frame(&bytes, PUSH_MAX_BYTES),
            Ok(Err(e)) => {
                tracing::debug!("reading a pushed frame: {e}");
                continue;
            }
            Err(_) => continue,
        };
        match read_push(frame) {
            Push::GoAway { redirect } => return Ended::GoAway(redirect),
            Push::Ignored(why) => tracing::debug!("{why}"),
        }
    }
}

/// While there is no new connection, offer the drained replica's (it serves until its drain
/// stops taking work), else publish `otherwise`. Offered again after a `Moving`, it is the
/// generation that `Moving` announced: what the sessions sent meanwhile went to it, and the
/// next replica will be a generation after it (so they resync with `Full` there).
fn offer_previous(tx: &watch::Sender<LinkState>, previous: &mut Option<Connected>, generation: &mut u64, otherwise: LinkState) {
    let Some(mut p) = previous.take().filter(|p| p.conn.close_reason().is_none()) else {
        tx.send_replace(otherwise);
        return;
    };
    let offered = matches!(&*tx.borrow(), LinkState::Up(c) if c.conn.stable_id() == p.conn.stable_id());
    if !offered {
        *generation += 1;
        p.generation = *generation;
        tx.send_replace(LinkState::Up(p.clone()));
    }
    *previous = Some(p);
}

/// Wait until every endpoint in `endpoints` is idle (its connections' closes sent).
async fn futures_wait_idle(endpoints: Vec<quinn::Endpoint>) {
    for endpoint in endpoints {
        endpoint.wait_idle().await;
    }
}

async fn run_link(client: Arc<ClientTls>, cfg: LinkConfig, tx: watch::Sender<LinkState>, open: Arc<OpenConnections>) {
    let entries = gateway_list(&cfg.gateway);
    let mut failover = Failover::new(cfg.backoff_min, cfg.backoff_max, rand::rng().random::<u32>() as usize);
    let mut generation = 0u64;
    // The connection of a replica that sent GoAway, kept until another one is welcomed.
    let mut previous: Option<Connected> = None;
    loop {
        let mut candidates = match failover.take_redirect() {
            Some(redirect) => resolve_all(&[redirect]).await,
            None => Vec::new(),
        };
        if candidates.is_empty() {
            candidates = resolve_all(&entries).await;
        }
        let Some(addr) = failover.pick(&candidates) else {
            tracing::debug!("no address of {} resolves", cfg.gateway);
            let wait = failover.failed(1);
            offer_previous(&tx, &mut previous, &mut generation, LinkState::Connecting);
            sleep_jittered(wait).await;
            continue;
        };
        // The device certificate in force now: a rotated one is used from the next connection on.
        let current = client.current();
        let attempt = connect(&current, addr, &cfg, generation + 1);
        tokio::pin!(attempt);
        let result = if matches!(&*tx.borrow(), LinkState::Moving(_)) {
            tokio::select! {
                r = &mut attempt => r,
                _ = tokio::time::sleep(MOVE_PATIENCE) => {
                    // Slow to move: meanwhile, serve on the drained replica.
                    offer_previous(&tx, &mut previous, &mut generation, LinkState::Connecting);
                    attempt.await
                }
            }
        } else {
            attempt.await
        };
        let wait = match result {
            Ok(connected) => {
                open.add(&connected);
                generation += 1;
                failover.connected();
                if let Some(drained) = previous.take() {
                    tokio::spawn(close_when_answered(drained));
                }
                let conn = connected.conn.clone();
                if tx.send(LinkState::Up(connected.clone())).is_err() {
                    return;
                }
                match watch_connection(&conn).await {
                    Ended::Lost(reason) => {
                        tracing::warn!(%addr, "gateway connection lost: {reason}; reconnecting");
                        tx.send_replace(LinkState::Connecting);
                        failover.lost(addr)
                    }
                    Ended::GoAway(redirect) => {
                        tracing::info!(%addr, ?redirect, "the gateway is draining (GoAway): moving to another replica");
                        previous = Some(connected.clone());
                        tx.send_replace(LinkState::Moving(connected));
                        failover.go_away(addr, redirect)
                    }
                }
            }
            Err(Attempt::Refused(why)) => {
                tracing::error!(%addr, "gateway refused this device: {why}");
                offer_previous(&tx, &mut previous, &mut generation, LinkState::Rejected(why));
                failover.refused(candidates.len())
            }
            Err(Attempt::Failed(why)) => {
                tracing::debug!(%addr, "connecting: {why}");
                offer_previous(&tx, &mut previous, &mut generation, LinkState::Connecting);
                failover.failed(candidates.len())
            }
            Err(Attempt::Downgrade(version)) => {
                tracing::debug!(%addr, version, "connecting: asked to downgrade twice");
                offer_previous(&tx, &mut previous, &mut generation, LinkState::Connecting);
                failover.failed(candidates.len())
            }
        };
        if tx.is_closed() {
            return;
        }
        match previous.clone() {
            // While a drained replica still serves, retry without hurry but notice its close.
            Some(p) if !wait.is_zero() => {
                tokio::select! {
                    _ = sleep_jittered(wait) => {}
                    _ = p.conn.closed() => {
                        previous = None;
                        if matches!(&*tx.borrow(), LinkState::Up(c) if c.conn.stable_id() == p.conn.stable_id()) {
                            tx.send_replace(LinkState::Connecting);
                        }
                    }
                }
            }
            _ => sleep_jittered(wait).await,
        }
    }
}

/// Close a drained replica's connection once the requests sent on it have their answers (or
/// could no longer be waiting for one), so that its drain ends early.
async fn close_when_answered(drained: Connected) {
    let give_up = Instant::now() + Duration::from_millis(u64::from(common::protocol::MAX_DEADLINE_MS));
    while drained.in_flight.load(Ordering::Relaxed) > 0 && Instant::now() < give_up {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            _ = drained.conn.closed() => return,
        }
    }
    drained.conn.close(0u32.into(), b"moved to another replica");
}

/// Sleep `wait` times a random factor in [0.5, 1.5), so a fleet does not reconnect in step.
async fn sleep_jittered(wait: Duration) {
    if wait.is_zero() {
        return;
    }
    let jitter = rand::rng().random_range(0.5..1.5);
    tokio::time::sleep(wait.mul_f64(jitter)).await;
}

pub use common::exchange::next_session_id;
