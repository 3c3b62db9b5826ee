//! What the relay itself costs: `loadtest relay --bench`.
//!
//! Clients ping-pong UDP datagrams with an echo server on loopback (on a thread of its own, as
//! a gateway would be another process), one datagram in flight per client, closed loop or
//! paced, first straight to the echo server, then through a relay with the
//! chosen profile (`lan`, no impairment, isolates the relay's own cost), alternating. The
//! report gives round-trip percentiles of both paths, their difference, and the relay's CPU
//! per forwarded packet: the process's CPU time in the relayed phases minus the direct ones,
//! over the packets the relay forwarded (two per round trip). The same echo server and the
//! same clients serve as each other's baseline.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use tokio::net::UdpSocket;

use super::{Profile, Relay, RelayConfig, RelayStats};
use common::stats::{percentile, process_cpu_s};

/// A UDP echo server on its own thread, outside the async runtime that runs the relay (as a
/// gateway is another process): it sends every datagram back to its sender, and stops when
/// dropped.
pub struct EchoServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl EchoServer {
    /// Binds `addr` (port 0: any free port) and starts answering.
    pub fn start(addr: SocketAddr) -> anyhow::Result<EchoServer> {
        let socket = std::net::UdpSocket::bind(addr).with_context(|| format!("binding the echo server on {addr}"))?;
        // Large buffers: a thousand clients' datagrams may arrive at once (best effort: the
        // kernel caps them at net.core.rmem_max / wmem_max).
        let sock2 = socket2::SockRef::from(&socket);
        let _ = sock2.set_recv_buffer_size(4 << 20);
        let _ = sock2.set_send_buffer_size(4 << 20);
        socket.set_read_timeout(Some(Duration::from_millis(50)))?;
        let addr = socket.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::Builder::new().name("udp-echo".into()).spawn(move || {
            let mut buf = vec![0u8; 65_536];
            while !stopped.load(Ordering::Relaxed) {
                if let Ok((n, from)) = socket.recv_from(&mut buf) {
                    let _ = socket.send_to(&buf[..n], from);
                }
            }
        })?;
        Ok(EchoServer { addr, stop })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// How hard the benchmark pushes.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Concurrent clients (one socket each, as devices).
    pub clients: usize,
    /// Round trips per client per phase.
    pub rounds: usize,
    /// Datagram payload, bytes (at least 16).
    pub bytes: usize,
    /// Phases of each path, alternated.
    pub repeats: usize,
    /// A round trip not answered within this counts as lost.
    pub timeout: Duration,
    /// Each client starts a round trip this often (clients staggered evenly over it); zero:
    /// closed loop, the next as soon as the last is answered (the most the relay can forward).
    pub interval: Duration,
}

/// The round trips of one path.
#[derive(Debug, Clone, Serialize)]
pub struct PathFigures {
    /// Round trips answered.
    pub round_trips: usize,
    /// Round trips not answered within the timeout.
    pub lost: usize,
    /// Round-trip percentiles, microseconds.
    pub rtt_p50_us: f64,
    /// 90th percentile.
    pub rtt_p90_us: f64,
    /// 99th percentile.
    pub rtt_p99_us: f64,
    /// Answered round trips per second of wall time, all clients together.
    pub round_trips_per_s: f64,
    /// CPU seconds of the whole process (clients, echo server, and relay if any).
    pub cpu_s: f64,
}

/// `loadtest relay --bench`'s report.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// The profile the relay applied.
    pub profile: String,
    /// Concurrent clients.
    pub clients: usize,
    /// Round trips per client per phase.
    pub rounds: usize,
    /// Datagram payload, bytes.
    pub payload_bytes: usize,
    /// Phases of each path.
    pub repeats: usize,
    /// Interval between one client's round trips, ms (0: closed loop).
    pub interval_ms: f64,
    /// Straight to the echo server (the baseline).
    pub direct: PathFigures,
    /// Through the relay.
    pub relayed: PathFigures,
    /// Relayed minus direct round trip, p50, microseconds.
    pub added_p50_us: f64,
    /// Relayed minus direct round trip, p99, microseconds.
    pub added_p99_us: f64,
    /// The relay's CPU per forwarded packet, microseconds (relayed CPU minus direct CPU, over
    /// two packets per answered round trip).
    pub relay_cpu_us_per_packet: f64,
    /// Growth of the process's resident memory when the relay took on the clients, per client,
    /// KiB (user space only: the kernel's socket buffers are not in it).
    pub relay_rss_kib_per_client: f64,
    /// The relay's own counters.
    pub relay: RelayStats,
}

/// Runs the benchmark in the current runtime.
pub async fn run(profile: Profile, seed: u64, opts: &BenchOptions) -> anyhow::Result<BenchReport> {
    anyhow::ensure!(opts.clients > 0 && opts.rounds > 0 && opts.repeats > 0, "--bench-clients, --bench-rounds and --bench-repeats must be > 0");
    anyhow::ensure!(opts.bytes >= 16 && opts.bytes <= 65_000, "--bench-bytes must be 16 to 65000");
    let echo_server = EchoServer::start("127.0.0.1:0".parse()?)?;
    let echo = echo_server.local_addr();
    let relay = Relay::start(RelayConfig { seed, ..RelayConfig::new("127.0.0.1:0".parse()?, echo, profile.clone()) }).await?;
    // Warm-up of both paths (socket buffers, the relay's client table, which then holds every
    // client until the idle timeout: its growth is the relay's memory per client).
    // Each client keeps its socket (its source address) through every phase, as a device does.
    let (direct_clients, relayed_clients) = (clients(echo, opts.clients).await?, clients(relay.local_addr(), opts.clients).await?);
    let warm_up = BenchOptions { rounds: 20, ..opts.clone() };
    ping_pong(&direct_clients, &warm_up, 0).await?;
    let rss_before = process_rss_kib();
    ping_pong(&relayed_clients, &warm_up, 0).await?;
    let relay_rss_kib_per_client = (process_rss_kib() - rss_before) / opts.clients as f64;
    let (mut direct, mut relayed) = (Samples::default(), Samples::default());
    for phase in 1..=opts.repeats {
        let first_seq = (phase * opts.rounds.max(20)) as u64;
        direct.add(ping_pong(&direct_clients, opts, first_seq).await?);
        relayed.add(ping_pong(&relayed_clients, opts, first_seq).await?);
    }
    let stats = relay.stats();
    relay.shutdown().await;
    drop(echo_server);
    let (direct, relayed) = (direct.figures(), relayed.figures());
    let packets = 2.0 * relayed.round_trips as f64;
    Ok(BenchReport {
        profile: profile.name,
        clients: opts.clients,
        rounds: opts.rounds,
        payload_bytes: opts.bytes,
        repeats: opts.repeats,
        interval_ms: opts.interval.as_secs_f64() * 1e3,
        added_p50_us: relayed.rtt_p50_us - direct.rtt_p50_us,
        added_p99_us: relayed.rtt_p99_us - direct.rtt_p99_us,
        relay_cpu_us_per_packet: (relayed.cpu_s - direct.cpu_s) * 1e6 / packets.max(1.0),
        relay_rss_kib_per_client,
        direct,
        relayed,
        relay: stats,
    })
}

/// One phase's raw measurements.
struct Phase {
    rtts_us: Vec<f64>,
    lost: usize,
    wall_s: f64,
    cpu_s: f64,
}

/// The phases of one path, pooled.
#[derive(Default)]
struct Samples {
    rtts_us: Vec<f64>,
    lost: usize,
    wall_s: f64,
    cpu_s: f64,
}

impl Samples {
    fn add(&mut self, p: Phase) {
        self.rtts_us.extend(p.rtts_us);
        self.lost += p.lost;
        self.wall_s += p.wall_s;
        self.cpu_s += p.cpu_s;
    }

    fn figures(mut self) -> PathFigures {
        let n = self.rtts_us.len();
        PathFigures {
            round_trips: n,
            lost: self.lost,
            rtt_p50_us: percentile(&mut self.rtts_us, 0.5),
            rtt_p90_us: percentile(&mut self.rtts_us, 0.9),
            rtt_p99_us: percentile(&mut self.rtts_us, 0.99),
            round_trips_per_s: n as f64 / self.wall_s.max(1e-9),
            cpu_s: self.cpu_s,
        }
    }
}

/// `n` client sockets connected to `target`.
async fn clients(target: SocketAddr, n: usize) -> anyhow::Result<Vec<Arc<UdpSocket>>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let socket = UdpSocket::bind("127.0.0.1:0").await.context("binding a bench client")?;
        socket.connect(target).await?;
        out.push(Arc::new(socket));
    }
    Ok(out)
}

/// Every client does `opts.rounds` round trips, numbered from `first_seq`.
async fn ping_pong(sockets: &[Arc<UdpSocket>], opts: &BenchOptions, first_seq: u64) -> anyhow::Result<Phase> {
    let (cpu0, t0) = (process_cpu_s(), Instant::now());
    let mut tasks = Vec::with_capacity(sockets.len());
    for (c, socket) in sockets.iter().enumerate() {
        let socket = socket.clone();
        let (rounds, bytes, timeout, interval) = (opts.rounds, opts.bytes, opts.timeout, opts.interval);
        let start = Instant::now() + interval.mul_f64(c as f64 / opts.clients as f64);
        tasks.push(tokio::spawn(async move {
            let mut rtts = Vec::with_capacity(rounds);
            let mut lost = 0;
            let mut out = vec![0u8; bytes];
            let mut buf = vec![0u8; bytes + 1];
            out[..8].copy_from_slice(&(c as u64).to_le_bytes());
            for k in 0..rounds as u64 {
                if !interval.is_zero() {
                    tokio::time::sleep_until((start + interval * k as u32).into()).await;
                }
                let seq = first_seq + k;
                out[8..16].copy_from_slice(&seq.to_le_bytes());
                let sent = Instant::now();
                socket.send(&out).await?;
                let deadline = tokio::time::Instant::from_std(sent + timeout);
                loop {
                    match tokio::time::timeout_at(deadline, socket.recv(&mut buf)).await {
                        Err(_) => {
                            lost += 1;
                            break;
                        }
                        Ok(Err(e)) => return Err(anyhow::Error::from(e).context("bench client recv")),
                        // A late answer to an earlier round (or a duplicate): keep waiting.
                        Ok(Ok(n)) if n < 16 || buf[8..16] != out[8..16] => continue,
                        Ok(Ok(_)) => {
                            rtts.push(sent.elapsed().as_secs_f64() * 1e6);
                            break;
                        }
                    }
                }
            }
            anyhow::Ok((rtts, lost))
        }));
    }
    let (mut rtts_us, mut lost) = (Vec::new(), 0);
    for t in tasks {
        let (r, l) = t.await??;
        rtts_us.extend(r);
        lost += l;
    }
    Ok(Phase { rtts_us, lost, wall_s: t0.elapsed().as_secs_f64(), cpu_s: process_cpu_s() - cpu0 })
}

/// This process's resident memory, KiB (`VmRSS` of `/proc/self/status`; 0 where absent).
fn process_rss_kib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0.0)
}

