//! The connection task: it connects, says `Hello`, publishes the live connection through a
//! watch channel, and when the connection drops it reconnects with exponential back-off and
//! jitter; which replica comes next is [`Failover`]'s decision, and a gateway's `GoAway` moves
//! it to another one (the module doc of [`super`] tells the whole story).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::exchange::edge::{hello, read_handshake, read_push, HandshakeAnswer, Push};
use common::exchange::failover::gateway_list;
use common::exchange::Failover;
use common::protocol::{decode_frame, encode_frame, Limits, DEFAULT_MAX_FRAME_BYTES, HARD_MAX_FRAME_BYTES, PROTOCOL_VERSION};
use rand::Rng;
use tokio::sync::watch;

use super::tls::{ClientIdentity, ClientTls};

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
    pub client_identity: Option<ClientIdentity>,
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
            idle_timeout: super::tls::DEFAULT_IDLE_TIMEOUT,
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
    /// Counts offers of a connection to the sessions (set when it is welcomed, or re-offered
    /// while the link moves); a new value means the gateway may have lost session contexts
    /// (another replica holds none). No two offers share one.
    pub generation: u64,
    /// The replica's address.
    pub addr: SocketAddr,
    /// The protocol version spoken on it: this device's, or an older gateway's.
    pub protocol_version: u16,
    /// Requests waiting for a reply on it: a drained replica's connection is closed once none is.
    in_flight: Arc<AtomicU64>,
    /// Its UDP endpoint (one per connection), waited on at [`Link::close`](super::Link::close)
    /// so the close is sent.
    endpoint: quinn::Endpoint,
}

/// A request counted in [`Connected::in_flight`] while it lives.
pub(super) struct InFlight(Arc<AtomicU64>);

impl InFlight {
    pub(super) fn new(connected: &Connected) -> Self {
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

/// The welcomed connections a [`Link::close`](super::Link::close) must close: without an explicit
/// close and a wait for the endpoint to send it, a process that exits right after dropping its
/// link leaves the gateway holding the connection until its idle timeout (a drain waits for it).
#[derive(Default)]
pub(super) struct OpenConnections(std::sync::Mutex<Vec<(quinn::Connection, quinn::Endpoint)>>);

impl OpenConnections {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(quinn::Connection, quinn::Endpoint)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remember `c` (and forget the connections already closed).
    fn add(&self, c: &Connected) {
        let mut open = self.lock();
        open.retain(|(conn, _)| conn.close_reason().is_none());
        open.push((c.conn.clone(), c.endpoint.clone()));
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
async fn connect(client: &quinn::ClientConfig, addr: SocketAddr, cfg: &LinkConfig) -> Result<Connected, Attempt> {
    match connect_once(client, addr, cfg, PROTOCOL_VERSION).await {
        Err(Attempt::Downgrade(version)) => match connect_once(client, addr, cfg, version).await {
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
async fn connect_once(client: &quinn::ClientConfig, addr: SocketAddr, cfg: &LinkConfig, version: u16) -> Result<Connected, Attempt> {
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
                Ok(Connected { conn, limits, generation: 0, addr, protocol_version: version, in_flight: Arc::default(), endpoint })
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


pub(super) async fn run_link(client: Arc<ClientTls>, cfg: LinkConfig, tx: watch::Sender<LinkState>, open: Arc<OpenConnections>) {
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
        let attempt = connect(&current, addr, &cfg);
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
            Ok(mut connected) => {
                open.add(&connected);
                // Numbered when it is welcomed, not when the attempt began: a drained replica
                // re-offered meanwhile took the next number, and two connections sharing one would
                // let the sessions assume the new replica holds what they sent the drained one.
                generation += 1;
                connected.generation = generation;
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

