//! The handle every user of the link holds ([`Link`]): it starts the connection task (and the
//! certificate watcher), sends requests on the live connection, one stream per frame, probes a
//! gateway that went silent, and closes the connections when the device leaves.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::exchange::failover::gateway_list;
use common::exchange::LinkView;
use common::protocol::{accepts_trace_context, attach_trace_context, decode_frame, encode_frame, Frame, TraceContext, DEFAULT_MAX_FRAME_BYTES};
use rand::Rng;
use tokio::sync::watch;

use super::connection::{run_link, Connected, InFlight, LinkConfig, LinkState, OpenConnections, KEEP_ALIVE};
use super::tls::{ClientIdentity, ClientTls};

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

/// How long [`Link::close`] waits for its connections' closes to be sent and acknowledged.
const CLOSE_WAIT: Duration = Duration::from_secs(1);
/// QUIC application close code of a device that leaves (its process ends).
pub const CLOSE_LEAVING: u32 = 0;

impl Link {
    /// Start the link task; it connects in the background.
    pub fn start(config: LinkConfig) -> anyhow::Result<Self> {
        let build = {
            let (ca_cert, insecure) = (config.ca_cert.clone(), config.insecure);
            let timers = super::tls::QuicTimers { keep_alive: KEEP_ALIVE, idle_timeout: config.idle_timeout };
            move |identity: Option<&ClientIdentity>| super::tls::client_config_with_identity(ca_cert.as_deref(), insecure, timers, identity)
        };
        let client = Arc::new(ClientTls::new(build(config.client_identity.as_ref())?));
        anyhow::ensure!(!gateway_list(&config.gateway).is_empty(), "no gateway address in `{}`", config.gateway);
        let mut tasks = Vec::new();
        if let Some(identity) = config.client_identity.clone() {
            let watch = super::rotation::WatchConfig { poll: config.cert_poll, on_sighup: config.reload_on_sighup };
            if let Some(task) = super::rotation::spawn(identity, client.clone(), watch, move |id| build(Some(id))) {
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

/// Wait until every endpoint in `endpoints` is idle (its connections' closes sent).
async fn futures_wait_idle(endpoints: Vec<quinn::Endpoint>) {
    for endpoint in endpoints {
        endpoint.wait_idle().await;
    }
}
