//! Fairness between devices over real QUIC on loopback (ARCHITECTURE.md, "Gateway"): while
//! one device floods the batcher's queue from many sessions, a light device's escalations are
//! all admitted and answered, and the flood is the one refused `Busy` for its share. Asserts
//! outcomes and counts, never latencies, so a loaded machine changes only how long it takes.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cloud_gateway::batcher::backend::{DelayBackend, EmbeddedBackend, EmbeddedOptions};
use cloud_gateway::config::BatcherConfig;
use common::protocol::{encode_frame, ContextSync, Frame, TokenIds, WireSampling};
use model_runtime::model_files::TINY_MODEL;
use support::*;

/// A connection past `Hello` as `device` (dev mode: the claimed id is the identity).
async fn hello(addr: SocketAddr, ca: &std::path::Path, device: &str) -> quinn::Connection {
    let conn = quic_connection(addr, ca).await;
    let frame = Frame::Hello { protocol_version: common::protocol::PROTOCOL_VERSION, device_id: device.into(), auth: String::new(), tokenizer_fingerprint: fingerprint(), slm_id: "test".into() };
    assert!(matches!(request(&conn, &frame).await, Some(Frame::Welcome { .. })));
    conn
}

/// Send `frame` on a new stream of `conn` and read its one-frame reply (`None` if the
/// connection failed).
async fn request(conn: &quinn::Connection, frame: &Frame) -> Option<Frame> {
    let (mut send, mut recv) = conn.open_bi().await.ok()?;
    send.write_all(&encode_frame(frame, 1 << 16).ok()?).await.ok()?;
    send.finish().ok()?;
    Some(read_reply(&mut recv).await)
}

fn escalate(session_id: u64, seq: u32) -> Frame {
    let tokens = TokenIds((0..8).map(|i| 100 + i + session_id as u32).collect());
    Frame::Escalate { session_id, seq, context: ContextSync::Full { tokens }, sampling: WireSampling::default(), deadline_ms: 10_000 }
}

/// The `reason="share"` series of the refusals counter on the side port.
async fn refused_for_share(http: SocketAddr) -> f64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(http).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out.lines().filter(|l| l.starts_with("duet_gateway_admission_refused_total") && l.contains("reason=\"share\"")).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_light_device_is_served_while_a_heavy_one_floods() {
    let dir = tempfile::tempdir().unwrap();
    // A queue of 16 places, batches of 4, 20 ms a batch: 24 sessions that escalate again as
    // soon as they are answered keep it full.
    let config = tuned(test_config(dir.path()), |c| c.batcher = BatcherConfig { max_batch: 4, max_wait: Duration::from_millis(2), queue_capacity: 16 });
    assert!(config.overload.fair_share.is_on(), "on by default");
    let options = EmbeddedOptions { model: TINY_MODEL.into(), threads: 1, max_context: 512, ..EmbeddedOptions::default() };
    let tiny = tokio::task::spawn_blocking(move || EmbeddedBackend::load(&options)).await.unwrap().expect("the tiny model (deploy/models/prepare slm tiny)");
    let gateway = cloud_gateway::Gateway::start(config, Box::new(DelayBackend::new(tiny, Duration::from_millis(20)))).await.unwrap();
    let (addr, http, ca) = (gateway.local_addr().unwrap(), gateway.http_addr.unwrap(), ca_cert(dir.path()));

    let heavy = hello(addr, &ca, "heavy").await;
    let stop = Arc::new(AtomicBool::new(false));
    let (heavy_tokens, heavy_busy) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut flood = Vec::new();
    for session in 1..=24u64 {
        let (conn, stop, tokens, busy) = (heavy.clone(), stop.clone(), heavy_tokens.clone(), heavy_busy.clone());
        flood.push(tokio::spawn(async move {
            let mut seq = 0;
            while !stop.load(Ordering::Relaxed) {
                match request(&conn, &escalate(session, seq)).await {
                    Some(Frame::Token { .. }) => tokens.fetch_add(1, Ordering::Relaxed),
                    Some(Frame::Busy { .. }) => busy.fetch_add(1, Ordering::Relaxed),
                    Some(_) => 0,
                    None => break,
                };
                seq += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }));
    }
    // The flood fills the queue until it is refused.
    let t = Instant::now();
    while heavy_busy.load(Ordering::Relaxed) == 0 {
        assert!(t.elapsed() < Duration::from_secs(60), "the flood never filled the queue");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The light device escalates ten times, one at a time, while the flood goes on.
    let light = hello(addr, &ca, "light").await;
    let mut answers = Vec::new();
    for seq in 0..10 {
        answers.push(request(&light, &escalate(1, seq)).await);
    }
    let flood_busy = heavy_busy.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for task in flood {
        let _ = task.await;
    }
    let tokens = answers.iter().filter(|a| matches!(a, Some(Frame::Token { .. }))).count();
    assert_eq!(tokens, 10, "every escalation of the light device is answered with a token: {answers:?}");
    assert!(flood_busy > 0 && heavy_tokens.load(Ordering::Relaxed) > 0, "the flood was served and refused meanwhile");
    assert!(refused_for_share(http).await >= 1.0, "the flood is refused for its share, not the light device for the queue");
    gateway.shutdown().await;
}
