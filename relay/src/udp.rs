//! The relay's tokio shell: sockets, tasks and timers around the impairment model.
//!
//! One task owns the listening socket: it reads datagrams from devices and hands each to its
//! client's task through a bounded inbox, creating the client (its upstream socket, connected
//! to the gateway, and its two [`Link`]s) on its first packet. One task per client owns the
//! rest: it feeds device packets to the up link and gateway packets (read from its upstream
//! socket) to the down link, sends what the links release, and sleeps on one timer until the
//! next release or its idle timeout. Per-client tasks keep the hot path free of shared locks
//! (the only shared state is the statistics, atomics added once per wake-up) and spread over
//! the runtime's threads.
//!
//! Reading uses readiness then `try_recv` into one buffer per thread, draining what is queued,
//! so a thousand idle clients hold no 64 KiB receive buffers and a burst costs one wake-up.
//! Timers are tokio's, with a millisecond granularity: a release is late by under 1 ms.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use super::impair::{DirectionStats, Link};
use super::{RelayConfig, RelayStats};

/// Largest UDP payload.
const MAX_DATAGRAM: usize = 65_536;
/// Datagrams read per wake-up before giving other tasks a turn.
const READ_BATCH: usize = 64;

thread_local! {
    /// Receive buffer of the client tasks running on this thread (used between awaits only).
    static RECV_BUF: RefCell<Vec<u8>> = RefCell::new(vec![0; MAX_DATAGRAM]);
}

/// A running relay. Dropping it stops it too (without waiting); [`Relay::shutdown`] waits.
pub struct Relay {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Relay {
    /// Binds `config.listen` and starts forwarding to `config.upstream` (nothing is sent
    /// upstream until a device sends). Must be called inside a tokio runtime.
    pub async fn start(config: RelayConfig) -> anyhow::Result<Relay> {
        let socket = bind_udp(config.listen, config.socket_buffer_bytes).with_context(|| format!("binding the relay's listen address {}", config.listen))?;
        let local_addr = socket.local_addr()?;
        let shared = Arc::new(Shared::new(config.profile.name.clone()));
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(listen(Arc::new(socket), config, shared.clone(), stopped));
        tracing::info!(%local_addr, "relay listening");
        Ok(Relay { local_addr, shared, stop: Some(stop), task: Some(task) })
    }

    /// The address devices should send to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The instant the relay started: blackouts are scheduled from it, and
    /// [`RelayStats::elapsed_s`] counts from it.
    pub fn epoch(&self) -> Instant {
        self.shared.started
    }

    /// Counters so far (a consistent-enough snapshot: each counter is read once).
    pub fn stats(&self) -> RelayStats {
        self.shared.snapshot()
    }

    /// Stops forwarding, closes every socket and waits for the tasks to end.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A UDP socket on `addr` asking the kernel for `buffer` bytes of receive and send buffer: the
/// relay's listening socket, which a thousand devices share.
fn bind_udp(addr: SocketAddr, buffer: usize) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // Best effort: the kernel caps (or refuses) sizes beyond its maxima.
    let _ = socket.set_recv_buffer_size(buffer);
    let _ = socket.set_send_buffer_size(buffer);
    socket.bind(&addr.into())?;
    socket.set_nonblocking(true)?;
    UdpSocket::from_std(socket.into())
}

/// A client's socket towards the gateway (any free port, connected so that only the gateway's
/// packets reach it).
fn bind_upstream(upstream: SocketAddr) -> std::io::Result<UdpSocket> {
    let any: SocketAddr = if upstream.is_ipv4() { (Ipv4Addr::UNSPECIFIED, 0).into() } else { (Ipv6Addr::UNSPECIFIED, 0).into() };
    let socket = std::net::UdpSocket::bind(any)?;
    socket.connect(upstream)?;
    socket.set_nonblocking(true)?;
    UdpSocket::from_std(socket)
}

/// Counters shared by the tasks.
struct Shared {
    profile: String,
    started: Instant,
    up: AtomicDirection,
    down: AtomicDirection,
    clients: AtomicU64,
    clients_total: AtomicU64,
    clients_expired: AtomicU64,
    clients_refused: AtomicU64,
}

impl Shared {
    fn new(profile: String) -> Self {
        Self {
            profile,
            started: Instant::now(),
            up: AtomicDirection::default(),
            down: AtomicDirection::default(),
            clients: AtomicU64::new(0),
            clients_total: AtomicU64::new(0),
            clients_expired: AtomicU64::new(0),
            clients_refused: AtomicU64::new(0),
        }
    }

    fn snapshot(&self) -> RelayStats {
        RelayStats {
            profile: self.profile.clone(),
            elapsed_s: self.started.elapsed().as_secs_f64(),
            up: self.up.load(),
            down: self.down.load(),
            clients: self.clients.load(Ordering::Relaxed),
            clients_total: self.clients_total.load(Ordering::Relaxed),
            clients_expired: self.clients_expired.load(Ordering::Relaxed),
            clients_refused: self.clients_refused.load(Ordering::Relaxed),
        }
    }
}

/// [`DirectionStats`] as atomics.
#[derive(Default)]
struct AtomicDirection([AtomicU64; 11]);

impl AtomicDirection {
    fn add(&self, delta: &DirectionStats) {
        for (a, d) in self.0.iter().zip(delta.to_array()) {
            if d != 0 {
                a.fetch_add(d, Ordering::Relaxed);
            }
        }
    }

    fn load(&self) -> DirectionStats {
        DirectionStats::from_array(std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed)))
    }
}

/// A packet the listener could not hand to a client (counted up: in, and dropped as overflow).
fn count_overflow(shared: &Shared, len: usize) {
    let mut d = DirectionStats { packets_in: 1, bytes_in: len as u64, ..DirectionStats::default() };
    d.dropped.overflow = 1;
    shared.up.add(&d);
}

/// The listening socket's task: routes each device datagram to its client's task.
async fn listen(socket: Arc<UdpSocket>, config: RelayConfig, shared: Arc<Shared>, mut stop: oneshot::Receiver<()>) {
    let mut clients: HashMap<SocketAddr, mpsc::Sender<Vec<u8>>> = HashMap::new();
    let mut tasks = JoinSet::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    // Blackouts are scheduled from the relay's start, the zero of its `elapsed_s`.
    let epoch = shared.started;
    let mut next_index = 0u64;
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => break,
            ready = socket.readable() => {
                if let Err(e) = ready {
                    tracing::warn!("relay listening socket failed: {e}");
                    break;
                }
            }
        }
        for _ in 0..READ_BATCH {
            let (n, from) = match socket.try_recv_from(&mut buf) {
                Ok(x) => x,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // E.g. an ICMP error for an earlier send to a device that has gone.
                    tracing::debug!("relay recv: {e}");
                    continue;
                }
            };
            if clients.get(&from).is_none_or(|tx| tx.is_closed()) {
                if clients.len() >= config.max_clients {
                    clients.retain(|_, tx| !tx.is_closed());
                }
                if clients.len() >= config.max_clients {
                    shared.clients_refused.fetch_add(1, Ordering::Relaxed);
                    count_overflow(&shared, n);
                    continue;
                }
                let upstream = match bind_upstream(config.upstream) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!("relay: no upstream socket for {from}: {e}");
                        count_overflow(&shared, n);
                        continue;
                    }
                };
                let (tx, rx) = mpsc::channel(config.client_inbox.max(1));
                let (up_seed, down_seed) = (mix(config.seed, 2 * next_index), mix(config.seed, 2 * next_index + 1));
                next_index += 1;
                let client = Client {
                    from,
                    listener: socket.clone(),
                    upstream,
                    inbox: rx,
                    up: Link::new(&config.profile.up, epoch, up_seed, config.max_line_bytes),
                    down: Link::new(&config.profile.down, epoch, down_seed, config.max_line_bytes),
                    shared: shared.clone(),
                    idle: config.idle_timeout,
                };
                shared.clients.fetch_add(1, Ordering::Relaxed);
                shared.clients_total.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%from, "relay: new client");
                while tasks.try_join_next().is_some() {}
                tasks.spawn(client.run());
                clients.insert(from, tx);
            }
            if clients[&from].try_send(buf[..n].to_vec()).is_err() {
                count_overflow(&shared, n);
            }
        }
    }
    drop(clients);
    tasks.shutdown().await;
}

/// SplitMix64 of `seed + k`: independent-looking seeds for each client and direction.
fn mix(seed: u64, k: u64) -> u64 {
    let mut z = seed.wrapping_add(k.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One device's state: its upstream socket and its two links.
struct Client {
    from: SocketAddr,
    listener: Arc<UdpSocket>,
    upstream: UdpSocket,
    inbox: mpsc::Receiver<Vec<u8>>,
    up: Link<Vec<u8>>,
    down: Link<Vec<u8>>,
    shared: Arc<Shared>,
    idle: Duration,
}

impl Client {
    async fn run(mut self) {
        let timer = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(timer);
        let mut armed: Option<Instant> = None;
        let mut last_activity = Instant::now();
        let (mut published_up, mut published_down) = (DirectionStats::default(), DirectionStats::default());
        loop {
            let next = match (self.up.poll_timeout(), self.down.poll_timeout()) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b).unwrap_or(last_activity + self.idle),
            };
            if armed != Some(next) {
                timer.as_mut().reset(tokio::time::Instant::from_std(next));
                armed = Some(next);
            }
            tokio::select! {
                packet = self.inbox.recv() => {
                    let Some(packet) = packet else { break };
                    let now = Instant::now();
                    self.up.on_packet(now, packet);
                    for _ in 1..READ_BATCH {
                        match self.inbox.try_recv() {
                            Ok(packet) => { self.up.on_packet(now, packet); }
                            Err(_) => break,
                        }
                    }
                    last_activity = now;
                }
                ready = self.upstream.readable() => {
                    if let Err(e) = ready {
                        tracing::warn!(from = %self.from, "relay upstream socket failed: {e}");
                        break;
                    }
                    let now = Instant::now();
                    let (upstream, down) = (&self.upstream, &mut self.down);
                    RECV_BUF.with_borrow_mut(|buf| {
                        for _ in 0..READ_BATCH {
                            match upstream.try_recv(buf) {
                                Ok(n) => { down.on_packet(now, buf[..n].to_vec()); }
                                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                                // ICMP port unreachable: the gateway is not (yet) there.
                                Err(e) => { tracing::debug!("relay upstream recv: {e}"); break; }
                            }
                        }
                    });
                    last_activity = now;
                }
                () = &mut timer => {
                    armed = None;
                    if self.up.is_empty() && self.down.is_empty() && last_activity.elapsed() >= self.idle {
                        self.shared.clients_expired.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(from = %self.from, "relay: client idle, forgotten");
                        break;
                    }
                }
            }
            let now = Instant::now();
            while let Some(packet) = self.up.poll_transmit(now) {
                if let Err(e) = self.upstream.send(&packet).await {
                    tracing::debug!("relay send upstream: {e}");
                }
            }
            while let Some(packet) = self.down.poll_transmit(now) {
                if let Err(e) = self.listener.send_to(&packet, self.from).await {
                    tracing::debug!("relay send to {}: {e}", self.from);
                }
            }
            self.shared.up.add(&self.up.stats().since(&published_up));
            self.shared.down.add(&self.down.stats().since(&published_down));
            (published_up, published_down) = (*self.up.stats(), *self.down.stats());
        }
        self.shared.up.add(&self.up.stats().since(&published_up));
        self.shared.down.add(&self.down.stats().since(&published_down));
        self.shared.clients.fetch_sub(1, Ordering::Relaxed);
    }
}
