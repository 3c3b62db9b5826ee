//! The gateway's bounds under abuse and overload (ARCHITECTURE.md, "Gateway"), over real QUIC
//! on loopback (`loadtest abuse`'s scenarios, scaled down): each abuse is bounded while it
//! lasts, and once it stops the memory it held is given back and a well-behaved device is
//! served within its deadline.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cloud_gateway::batcher::backend::{DelayBackend, EmbeddedBackend, EmbeddedOptions};
use cloud_gateway::config::OverloadConfig;
use cloud_gateway::{Gateway, GatewayConfig};
use common::protocol::{ContextSync, ErrorCode, Frame, TokenIds, WireSampling};
use model_runtime::model_files::TINY_MODEL;
use support::*;

fn escalate(session_id: u64, seq: u32, tokens: Vec<u32>, deadline_ms: u32) -> Frame {
    Frame::Escalate { session_id, seq, context: ContextSync::Full { tokens: TokenIds(tokens) }, sampling: WireSampling::default(), deadline_ms }
}

/// The tiny model behind a backend that costs `per_batch` per call and `per_token` per token of
/// prefill (what a large model costs, without its weights).
async fn start_slow(config: GatewayConfig, per_batch: Duration, per_token: Duration) -> Gateway {
    let options = EmbeddedOptions { model: TINY_MODEL.into(), threads: 1, max_context: 512, ..EmbeddedOptions::default() };
    let tiny = tokio::task::spawn_blocking(move || EmbeddedBackend::load(&options)).await.unwrap().expect("the tiny model (deploy/models/prepare slm tiny)");
    Gateway::start(config, Box::new(DelayBackend::new(tiny, per_batch).with_token_delay(per_token))).await.unwrap()
}

/// Wait (5 s at most) until `done`.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < Duration::from_secs(5), "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `GET path` on the side port: (status, body).
async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, out.split("\r\n\r\n").nth(1).unwrap_or("").to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_frames_are_bounded_per_connection_reset_after_the_read_timeout_and_freed() {
    let dir = tempfile::tempdir().unwrap();
    let overload = OverloadConfig { stream_read_timeout: Duration::from_millis(500), max_buffered_bytes_per_connection: 200_000, ..OverloadConfig::default() };
    let gw = support::start_gateway(GatewayConfig { overload, ..test_config(dir.path()) }).await;
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));
    let attacker = client_on("127.0.0.1:0", &ca);
    let conn = hello(&attacker, addr, "pinner").await;
    // Ten streams each announce a 60,000-byte frame, send 30,000 bytes of it, and stall.
    let mut streams = Vec::new();
    for _ in 0..10 {
        let (mut send, recv) = conn.open_bi().await.unwrap();
        let mut partial = 60_000u32.to_le_bytes().to_vec();
        partial.extend(std::iter::repeat_n(0u8, 30_000));
        send.write_all(&partial).await.unwrap();
        streams.push((send, recv));
    }
    let budget = gw.shared.buffers.clone();
    eventually("the partial frames are held", || budget.total() > 100_000).await;
    assert!(budget.total() <= 200_000, "held {} bytes, more than the connection's budget", budget.total());
    // After the read timeout every stalled stream is given up and its bytes freed.
    eventually("the stalled streams are freed", || budget.total() == 0).await;
    for (_, mut recv) in streams {
        let r = tokio::time::timeout(Duration::from_secs(5), recv.read_to_end(1024)).await.unwrap();
        assert!(r.is_err(), "a given-up stream is reset, not answered: {r:?}");
    }
    // The same connection, and another device, are served at once.
    assert!(matches!(request(&conn, &escalate(1, 0, vec![5, 6], 5000)).await, Frame::Token { .. }));
    let device = client_on("127.0.0.1:0", &ca);
    let honest = hello(&device, addr, "honest").await;
    assert!(matches!(request(&honest, &escalate(1, 0, vec![5, 6], 5000)).await, Frame::Token { .. }));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invented_ids_at_the_session_bound_evict_their_own_sessions_and_a_new_device_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let overload = OverloadConfig { max_sessions: 4, ..OverloadConfig::default() };
    let gw = support::start_gateway(GatewayConfig { overload, ..test_config(dir.path()) }).await;
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));
    // A well-behaved device from its own address holds a session.
    let honest = hello(&client_on("127.0.0.2:0", &ca), addr, "well-behaved").await;
    assert!(matches!(request(&honest, &escalate(1, 0, vec![5, 6], 5000)).await, Frame::Token { .. }));
    // A flood of invented ids from one address: every escalation is served, none refused for
    // the total, and the store stays at its bound.
    let flood = client_on("127.0.0.1:0", &ca);
    for i in 0..8 {
        let conn = hello(&flood, addr, &format!("invented-{i}")).await;
        let reply = request(&conn, &escalate(1, 0, vec![5; 50], 5000)).await;
        assert!(matches!(reply, Frame::Token { .. }), "{reply:?}");
        assert!(gw.shared.store.len() <= 4, "{} sessions held", gw.shared.store.len());
    }
    // The flood evicted its own sessions: the well-behaved one still grows by a delta.
    let delta = Frame::Escalate { session_id: 1, seq: 1, context: ContextSync::Delta { base_len: 2, tokens: TokenIds(vec![7]) }, sampling: WireSampling::default(), deadline_ms: 5000 };
    assert!(matches!(request(&honest, &delta).await, Frame::Token { .. }));
    // A device never seen before is served at once.
    let newcomer = hello(&client_on("127.0.0.3:0", &ca), addr, "new-device").await;
    assert!(matches!(request(&newcomer, &escalate(1, 0, vec![5, 6], 5000)).await, Frame::Token { .. }));
    assert!(gw.shared.store.len() <= 4);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_take_every_connection_and_its_places_free_when_it_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let overload = OverloadConfig { max_connections_per_source: 3, ..OverloadConfig::default() };
    let gw = support::start_gateway(GatewayConfig { overload, ..test_config(dir.path()) }).await;
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));
    let flood = client_on("127.0.0.1:0", &ca);
    let mut idle = Vec::new();
    for i in 0..3 {
        idle.push(hello(&flood, addr, &format!("idle-{i}")).await);
    }
    let fourth = flood.connect(addr, "localhost").unwrap().await;
    assert!(fourth.is_err(), "a fourth connection from the same address is refused");
    // Another address is served meanwhile (loopback answers for all of 127/8).
    let device = client_on("127.0.0.2:0", &ca);
    let honest = hello(&device, addr, "honest").await;
    assert!(matches!(request(&honest, &escalate(1, 0, vec![5, 6], 5000)).await, Frame::Token { .. }));
    // The flood leaves: its address may connect again.
    for c in idle {
        c.close(0u32.into(), b"bye");
    }
    let sources = gw.shared.sources.clone();
    eventually("the flood's places are freed", || sources.count("127.0.0.1".parse().unwrap()) == 0).await;
    let back = hello(&flood, addr, "back").await;
    assert!(matches!(request(&back, &Frame::Ping { nonce: 1 }).await, Frame::Pong { nonce: 1 }));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_full_runs_in_steps_so_a_short_escalation_is_served_within_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    // 2 ms per token of prefill: a 400-token Full costs 0.8 s, a step of 32 tokens 64 ms.
    let overload = OverloadConfig { max_batch_tokens: 32, ..OverloadConfig::default() };
    let gw = start_slow(GatewayConfig { overload, ..test_config(dir.path()) }, Duration::ZERO, Duration::from_millis(2)).await;
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));
    let endpoint = client_on("127.0.0.1:0", &ca);
    let heavy = hello(&endpoint, addr, "heavy").await;
    let light = hello(&endpoint, addr, "light").await;
    let long = tokio::spawn({
        let heavy = heavy.clone();
        async move { request(&heavy, &escalate(1, 0, vec![7; 400], 30_000)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    for session in 1..=3 {
        let t = Instant::now();
        let reply = request(&light, &escalate(session, 0, vec![5, 6], 400)).await;
        assert!(matches!(reply, Frame::Token { .. }), "{reply:?}");
        assert!(t.elapsed() < Duration::from_millis(400), "served in {:?}, behind a 0.8 s prefill", t.elapsed());
    }
    assert!(matches!(long.await.unwrap(), Frame::Token { .. }), "the long one is answered too");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_hard_token_behind_its_own_prompt_presync_is_served_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    // 8 ms per token of prefill: the 300-token prompt's pre-sync takes 2.4 s in 32-token steps.
    let gw = start_slow(test_config(dir.path()), Duration::ZERO, Duration::from_millis(8)).await;
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));
    let endpoint = client_on("127.0.0.1:0", &ca);
    let device = hello(&endpoint, addr, "demo").await;
    let presync = tokio::spawn({
        let device = device.clone();
        async move { request(&device, &escalate(1, 0, vec![7; 300], 30_000)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Four tokens later the session's first hard token, with a deadline that covers the rest of
    // its own pre-sync (as the device's does). Weighed against its own pre-sync as well, it was
    // refused: 2.4 s ahead plus its whole context again.
    let t = Instant::now();
    let delta = ContextSync::Delta { base_len: 300, tokens: TokenIds(vec![8, 9, 10, 11]) };
    let hard = Frame::Escalate { session_id: 1, seq: 1, context: delta, sampling: WireSampling::default(), deadline_ms: 3_500 };
    let reply = request(&device, &hard).await;
    assert!(matches!(reply, Frame::Token { seq: 1, .. }), "the hard token gets the LLM's token: {reply:?}");
    assert!(t.elapsed() < Duration::from_millis(3_500), "within its deadline: {:?}", t.elapsed());
    assert!(matches!(presync.await.unwrap(), Frame::Token { seq: 0, .. }), "the pre-sync is answered too");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_no_deadline_allows_is_busy_at_once_and_a_stalled_backend_answers_on_time_and_is_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let overload = OverloadConfig { ready_stalled_after: Duration::from_millis(300), ..OverloadConfig::default() };
    // 5 ms per token of prefill, and every call takes 1.2 s.
    let gw = start_slow(GatewayConfig { overload, ..test_config(dir.path()) }, Duration::from_millis(1200), Duration::from_millis(5)).await;
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));
    let http = gw.http_addr.unwrap();
    assert_eq!(http_get(http, "/readyz").await.0, 200);
    let endpoint = client_on("127.0.0.1:0", &ca);
    let conn = hello(&endpoint, addr, "device").await;
    // 500 tokens at 5 ms each cannot fit 1 s: Busy at once, with a retry hint.
    let t = Instant::now();
    let reply = request(&conn, &escalate(1, 0, vec![7; 500], 1000)).await;
    assert!(matches!(reply, Frame::Busy { retry_after_ms, .. } if retry_after_ms >= 1000), "{reply:?}");
    assert!(t.elapsed() < Duration::from_millis(500), "Busy took {:?}", t.elapsed());
    // A call that runs long: readiness says so while it runs.
    let first = tokio::spawn({
        let conn = conn.clone();
        async move { request(&conn, &escalate(2, 0, vec![5, 6], 10_000)).await }
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (status, why) = http_get(http, "/readyz").await;
    assert_eq!(status, 503, "{why}");
    assert!(why.contains("stalled"), "{why}");
    // Behind it, a short deadline is answered by its deadline (Busy or expired), never late.
    let t = Instant::now();
    let reply = request(&conn, &escalate(3, 0, vec![5, 6], 200)).await;
    let took = t.elapsed();
    assert!(matches!(reply, Frame::Busy { .. } | Frame::Error { code: ErrorCode::DeadlineExpired, .. }), "{reply:?}");
    assert!(took < Duration::from_millis(450), "answered after {took:?} for a 200 ms deadline");
    assert!(matches!(first.await.unwrap(), Frame::Token { .. }));
    // The backend completes its calls again: ready.
    let shared = Arc::clone(&gw.shared);
    eventually("ready again", || shared.llm.not_ready().is_none()).await;
    assert_eq!(http_get(http, "/readyz").await.0, 200);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_holds_at_most_the_stream_limit_open_and_gets_more_once_they_end() {
    use cloud_gateway::transport::tls::MAX_STREAMS_PER_DEVICE;
    let dir = tempfile::tempdir().unwrap();
    let overload = OverloadConfig { stream_read_timeout: Duration::from_millis(500), ..OverloadConfig::default() };
    let gw = support::start_gateway(GatewayConfig { overload, ..test_config(dir.path()) }).await;
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));
    let endpoint = client_on("127.0.0.1:0", &ca);
    let conn = hello(&endpoint, addr, "many-streams").await;
    // Streams that send a byte of a frame and stay open, until the gateway grants no more.
    let mut open = Vec::new();
    while let Ok(opened) = tokio::time::timeout(Duration::from_millis(300), conn.open_bi()).await {
        let (mut send, recv) = opened.unwrap();
        send.write_all(&[1]).await.unwrap();
        open.push((send, recv));
        assert!(open.len() <= MAX_STREAMS_PER_DEVICE as usize, "more streams open than the limit");
    }
    // The Hello's stream may still count while its close is acknowledged.
    assert!(open.len() >= MAX_STREAMS_PER_DEVICE as usize - 1, "only {} streams opened", open.len());
    // The gateway gives up on them after its read timeout (stops and resets them); once the
    // device lets go of its halves too, streams are granted again.
    let budget = gw.shared.buffers.clone();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(budget.total(), 0, "given up: nothing held");
    drop(open);
    let reply = tokio::time::timeout(Duration::from_secs(5), request(&conn, &Frame::Ping { nonce: 9 })).await.expect("streams freed");
    assert!(matches!(reply, Frame::Pong { nonce: 9 }));
    gw.shutdown().await;
}
