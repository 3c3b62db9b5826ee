//! Handshake cost of device identity: connections per second (and latency, and CPU per
//! handshake) with mutual TLS (each device presents its fleet certificate, the gateway verifies
//! it and checks the deny list) against the shared-token handshake (dev mode), in the same run
//! against two gateways in this process.
//!
//! A handshake here is what a device pays to (re)connect: QUIC + TLS 1.3, then `Hello` →
//! `Welcome` on the first stream; the connection is closed once welcomed. Both ends run in this
//! process, so CPU per handshake is the device's and the gateway's together. The modes run in
//! alternating rounds so that a machine shared with other work slows them alike.
//!
//! Three modes: the shared token with full handshakes (what a gateway absorbs when a fleet
//! reconnects after a restart: no session to resume), the shared token with TLS session
//! resumption (the default, when a device reconnects to the replica it just left), and mutual
//! TLS, always full (the gateway never resumes under mTLS, so every connection's certificate is
//! checked for expiry and revocation).

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use cloud_gateway::config::{GatewayConfig, IdentityConfig};
use cloud_gateway::identity::ca::{init_ca, FleetCa};
use cloud_gateway::Gateway;
use common::protocol::{decode_frame, encode_frame, Frame, PROTOCOL_VERSION};
use edge_node::link::tls::ClientIdentity;
use model_runtime::model_files::{ModelFiles, DEFAULT_SLM};
use serde::Serialize;

use crate::fixed_backend::FixedCostBackend;
use common::stats::{percentile, process_cpu_s};

/// Options of `loadtest handshake`.
#[derive(Debug, Args)]
pub struct HandshakeArgs {
    /// Handshakes per mode (split over the rounds).
    #[arg(long, default_value_t = 2000)]
    pub connections: usize,
    /// Devices handshaking at once (each its own UDP socket and, with mTLS, its own
    /// certificate).
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Alternating rounds of each mode.
    #[arg(long, default_value_t = 4)]
    pub rounds: usize,
}

#[derive(Debug, Default, Serialize)]
struct ModeReport {
    mode: &'static str,
    handshakes: usize,
    failures: usize,
    seconds: f64,
    connections_per_s: f64,
    handshake_p50_ms: f64,
    handshake_p99_ms: f64,
    /// CPU time of this process (devices and gateway) per handshake.
    cpu_ms_per_handshake: f64,
}

#[derive(Serialize)]
struct Report {
    concurrency: usize,
    rounds: usize,
    shared_token: ModeReport,
    shared_token_resumed: ModeReport,
    mutual_tls: ModeReport,
    /// mTLS connections/s over shared-token (full handshake) connections/s.
    mtls_over_token_rate: f64,
    /// mTLS CPU per handshake over shared-token (full handshake) CPU per handshake.
    mtls_over_token_cpu: f64,
}

/// One mode's clients: a quinn client config per concurrent device, the auth token to send.
struct Mode {
    name: &'static str,
    addr: std::net::SocketAddr,
    clients: Vec<quinn::ClientConfig>,
    auth: String,
}

#[derive(Default)]
struct Tally {
    latencies_ms: Vec<f64>,
    failures: usize,
    seconds: f64,
    cpu_s: f64,
}

/// Run the measurement.
pub fn run(args: HandshakeArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(measure(args))
}

async fn measure(args: HandshakeArgs) -> anyhow::Result<()> {
    let concurrency = args.concurrency.max(1);
    let rounds = args.rounds.max(1);
    let dir = tempfile::tempdir()?;
    let (base, server_cert) = crate::loopback::loopback_config(dir.path())?;
    let slm = ModelFiles::locate(DEFAULT_SLM)?.manifest;
    let fingerprint = slm.tokenizer_fingerprint.clone();
    let ca_dir = dir.path().join("ca");
    let ca_cert = init_ca(&ca_dir, "Bench fleet CA", 1)?;
    // A deny list with entries, so the mTLS path pays for its lookup.
    let revoked = dir.path().join("revoked.txt");
    let entries: String = (0..1000).map(|i| format!("revoked-device-{i}\n")).collect();
    std::fs::write(&revoked, entries)?;
    let gateway = |mut config: GatewayConfig, identity: IdentityConfig| {
        let backend = Box::new(FixedCostBackend::new(Duration::ZERO, &slm));
        config.transport.max_connections = 100_000;
        Gateway::start(GatewayConfig { identity, ..config }, backend)
    };
    let token_gw = gateway(base.clone(), IdentityConfig { auth_token: Some("bench-shared-token".into()), ..IdentityConfig::default() }).await?;
    let mtls_gw = gateway(base, IdentityConfig { client_ca: Some(ca_cert), revoked_file: Some(revoked), ..IdentityConfig::default() }).await?;

    let ca = FleetCa::load(&ca_dir)?;
    let keep_alive = Duration::from_secs(5);
    // The edge's own TLS set-up, with session resumption off unless asked for.
    let client = |identity: Option<&ClientIdentity>, resume: bool| -> anyhow::Result<quinn::ClientConfig> {
        let mut tls = edge_node::link::tls::client_tls(Some(&server_cert), false, identity)?;
        if !resume {
            tls.resumption = quinn::rustls::client::Resumption::disabled();
        }
        edge_node::link::tls::quic_client_config(tls, edge_node::link::tls::QuicTimers { keep_alive, idle_timeout: edge_node::link::tls::DEFAULT_IDLE_TIMEOUT })
    };
    let mut mtls_clients = Vec::new();
    for d in 0..concurrency {
        let issued = ca.issue(&format!("bench-device-{d}"), 1)?;
        let (cert, key) = ca.write(&issued, &dir.path().join(format!("device-{d}")))?;
        mtls_clients.push(client(Some(&ClientIdentity { cert, key }), false)?);
    }
    // One config per device, so each resumes only its own sessions.
    let token_full = (0..concurrency).map(|_| client(None, false)).collect::<anyhow::Result<Vec<_>>>()?;
    let token_resumed = (0..concurrency).map(|_| client(None, true)).collect::<anyhow::Result<Vec<_>>>()?;
    let token_addr = token_gw.local_addr()?;
    let auth = "bench-shared-token".to_string();
    let modes = [
        Arc::new(Mode { name: "shared_token", addr: token_addr, clients: token_full, auth: auth.clone() }),
        Arc::new(Mode { name: "shared_token_resumed", addr: token_addr, clients: token_resumed, auth }),
        Arc::new(Mode { name: "mutual_tls", addr: mtls_gw.local_addr()?, clients: mtls_clients, auth: String::new() }),
    ];
    let fingerprint = Arc::new(fingerprint);
    // Warm up both (first handshakes pay for lazy initialisation).
    for mode in &modes {
        round(mode.clone(), fingerprint.clone(), concurrency, concurrency).await;
    }
    let per_round = args.connections.div_ceil(rounds);
    let mut tallies = [Tally::default(), Tally::default(), Tally::default()];
    for _ in 0..rounds {
        for (mode, tally) in modes.iter().zip(tallies.iter_mut()) {
            let cpu = process_cpu_s();
            let t = Instant::now();
            let (lat, failures) = round(mode.clone(), fingerprint.clone(), per_round, concurrency).await;
            tally.seconds += t.elapsed().as_secs_f64();
            tally.cpu_s += process_cpu_s() - cpu;
            tally.latencies_ms.extend(lat);
            tally.failures += failures;
        }
    }
    let [token, resumed, mtls] = tallies;
    let token = summarise(modes[0].name, token);
    let resumed = summarise(modes[1].name, resumed);
    let mtls = summarise(modes[2].name, mtls);
    let report = Report {
        concurrency,
        rounds,
        mtls_over_token_rate: mtls.connections_per_s / token.connections_per_s.max(f64::MIN_POSITIVE),
        mtls_over_token_cpu: mtls.cpu_ms_per_handshake / token.cpu_ms_per_handshake.max(f64::MIN_POSITIVE),
        shared_token: token,
        shared_token_resumed: resumed,
        mutual_tls: mtls,
    };
    println!("{}", serde_json::to_string_pretty(&report)?);
    token_gw.shutdown().await;
    mtls_gw.shutdown().await;
    Ok(())
}

fn summarise(mode: &'static str, mut t: Tally) -> ModeReport {
    let n = t.latencies_ms.len();
    ModeReport {
        mode,
        handshakes: n,
        failures: t.failures,
        seconds: t.seconds,
        connections_per_s: n as f64 / t.seconds.max(f64::MIN_POSITIVE),
        handshake_p50_ms: percentile(&mut t.latencies_ms, 0.50),
        handshake_p99_ms: percentile(&mut t.latencies_ms, 0.99),
        cpu_ms_per_handshake: t.cpu_s * 1e3 / n.max(1) as f64,
    }
}

/// `total` handshakes by `concurrency` devices at once; their latencies (ms) and failures.
async fn round(mode: Arc<Mode>, fingerprint: Arc<String>, total: usize, concurrency: usize) -> (Vec<f64>, usize) {
    let mut tasks = Vec::new();
    for d in 0..concurrency {
        let n = total / concurrency + usize::from(d < total % concurrency);
        let (mode, fingerprint) = (mode.clone(), fingerprint.clone());
        tasks.push(tokio::spawn(async move {
            let mut endpoint = match quinn::Endpoint::client("127.0.0.1:0".parse().expect("an address")) {
                Ok(e) => e,
                Err(_) => return (Vec::new(), n),
            };
            endpoint.set_default_client_config(mode.clients[d].clone());
            let hello = Frame::Hello { protocol_version: PROTOCOL_VERSION, device_id: format!("bench-device-{d}"), auth: mode.auth.clone(), tokenizer_fingerprint: (*fingerprint).clone(), slm_id: "handshake-bench".into() };
            let mut lat = Vec::with_capacity(n);
            let mut failures = 0;
            for _ in 0..n {
                let t = Instant::now();
                match handshake(&endpoint, mode.addr, &hello).await {
                    Ok(conn) => {
                        lat.push(t.elapsed().as_secs_f64() * 1e3);
                        conn.close(0u32.into(), b"bench done");
                    }
                    Err(e) => {
                        tracing::debug!("{} handshake failed: {e}", mode.name);
                        failures += 1;
                    }
                }
            }
            (lat, failures)
        }));
    }
    let (mut lat, mut failures) = (Vec::new(), 0);
    for t in tasks {
        if let Ok((l, f)) = t.await {
            lat.extend(l);
            failures += f;
        }
    }
    (lat, failures)
}

/// Connect, say `Hello`, read `Welcome`.
async fn handshake(endpoint: &quinn::Endpoint, addr: std::net::SocketAddr, hello: &Frame) -> anyhow::Result<quinn::Connection> {
    let conn = endpoint.connect(addr, "localhost")?.await?;
    let (mut send, mut recv) = conn.open_bi().await?;
    send.write_all(&encode_frame(hello, 1 << 16)?).await?;
    send.finish()?;
    let reply = decode_frame(&recv.read_to_end(1 << 16).await?, 1 << 16)?;
    anyhow::ensure!(matches!(reply, Frame::Welcome { .. }), "not welcomed: {reply:?}");
    Ok(conn)
}
