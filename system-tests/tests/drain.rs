//! Graceful drain and failover between gateway replicas: SIGTERM (or `POST /drain`) moves
//! devices to another replica with `GoAway`, loses no token and exits within the grace period;
//! old (v1) devices are still served and simply closed at the end; the admin endpoint is
//! protected.
//!
//! The first test runs two real gateway processes on the 1.5B LLM (a tiny random-weights model
//! would do for the plumbing, but its near-uniform logits make a `Full` prefill and an
//! incremental decode disagree on the argmax, so "the same tokens" is only meaningful with a
//! real model); the rest use the tiny model, in-process where no process has to exit.

mod support;
#[path = "support/replicas.rs"]
mod replicas;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::protocol::{decode_frame, encode_frame, ContextSync, Frame, WireSampling, DEFAULT_MAX_FRAME_BYTES};
use edge_node::link::LinkState;
use replicas::{post_drain, Replica};
use support::*;

/// A prompt the 1.5B answers at length (so the drain lands mid-generation).
const PROMPT: &str = "def is_prime(n):\n    \"\"\"Return True if n is a prime number.\"\"\"\n";
const GRACE_SECS: u64 = 10;

/// `edge-node generate` with every token escalated, greedy, long deadlines, the tiny model as
/// the SLM (so a fallback, which would take its token, cannot go unnoticed).
fn routed(gateways: &str, ca: &Path) -> serde_json::Value {
    let ca = ca.to_str().unwrap();
    let args = [
        "generate", "--model", TINY, "--threads", "1", "--prompt", PROMPT, "--max-new-tokens", "48", "--json", "--gateway", gateways, "--ca-cert", ca,
        "--tau", "1", "--deadline-min-ms", "20000", "--deadline-max-ms", "20000", "--connect-wait-ms", "20000",
    ];
    edge_json(&args).0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_the_replica_an_edge_uses_mid_generation_moves_it_to_the_other_with_the_same_tokens() {
    cloud_gateway::transport::tls::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = cert_pair(dir.path());
    let grace = format!("--drain-grace-secs={GRACE_SECS}");
    let mut replicas = [Replica::start("replica-a", &cert, &key, LLM, &[&grace]), Replica::start("replica-b", &cert, &key, LLM, &[&grace])];
    for r in &replicas {
        wait_for_gateway(r.addr().parse().unwrap(), &cert, Duration::from_secs(180)).await;
    }
    // What one gateway gives.
    let single = tokio::task::spawn_blocking({
        let (addr, ca) = (replicas[1].addr(), cert.clone());
        move || routed(&addr, &ca)
    })
    .await
    .unwrap();
    assert_eq!(single["cloud_tokens"], single["tokens"], "{single}");
    let before: Vec<f64> = escalations_of(&replicas).await;

    // The same generation with both replicas; the one it picked is drained mid-stream.
    let list = format!("{},{}", replicas[0].addr(), replicas[1].addr());
    let edge = tokio::task::spawn_blocking({
        let ca = cert.clone();
        move || routed(&list, &ca)
    });
    let victim = loop {
        let now: Vec<f64> = escalations_of(&replicas).await;
        if let Some(i) = (0..2).find(|&i| now[i] - before[i] >= 8.0) {
            break i;
        }
        assert!(!edge.is_finished(), "the edge finished before any replica served 8 escalations");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let served_before_drain = escalations(&replicas[victim]).await - before[victim];
    let terminated = Instant::now();
    replicas[victim].terminate();
    let v = edge.await.unwrap();
    let (status, exited) = tokio::task::block_in_place(|| replicas[victim].wait_exit(Duration::from_secs(GRACE_SECS + 5))).expect("the drained replica exits");
    let after: Vec<f64> = escalations_of(&replicas).await;
    let survivor = 1 - victim;

    assert!(status.success(), "the drained replica exits 0: {status:?}");
    let took = exited - terminated;
    assert!(took < Duration::from_secs(GRACE_SECS), "exited {took:?} after SIGTERM, grace {GRACE_SECS} s");
    assert!(after[survivor] - before[survivor] > 0.0, "the other replica took over: {before:?} -> {after:?}");
    assert_eq!(v["fallbacks"], 0, "no fallback (so no escalation waited past its deadline): {v}");
    assert_eq!(v["cloud_tokens"], v["tokens"], "{v}");
    assert!(v["full_syncs"].as_u64().unwrap() >= 2, "the new replica was resynced with Full: {v}");
    assert_eq!(v["context_missing"], 0, "the move costs no ContextMissing round trip: {v}");
    assert_eq!(ids(&v), ids(&single), "failover: {} / single gateway: {}", v["text"], single["text"]);
    eprintln!(
        "drained replica served {served_before_drain} escalations, exited {:.0} ms after SIGTERM; edge: {} tokens, token latency p99 {:.0} ms, escalation p99 {:.0} ms (single gateway: {:.0} / {:.0} ms)",
        took.as_secs_f64() * 1e3,
        v["tokens"],
        v["token_latency_ms_p99"].as_f64().unwrap(),
        v["escalation_latency_ms_p99"].as_f64().unwrap(),
        single["token_latency_ms_p99"].as_f64().unwrap(),
        single["escalation_latency_ms_p99"].as_f64().unwrap(),
    );
}

/// Escalations each replica received so far (0 for one that is gone).
async fn escalations_of(replicas: &[Replica; 2]) -> Vec<f64> {
    vec![escalations(&replicas[0]).await, escalations(&replicas[1]).await]
}

async fn escalations(r: &Replica) -> f64 {
    match reqwest::get(format!("http://127.0.0.1:{}/metrics", r.http)).await {
        Ok(resp) => replicas::metric_in(&resp.text().await.unwrap_or_default(), "duet_gateway_escalations_received_total").unwrap_or(0.0),
        Err(_) => 0.0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_needs_the_admin_token_and_readyz_turns_503_until_the_process_exits_0() {
    cloud_gateway::transport::tls::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = cert_pair(dir.path());
    let mut r = Replica::start("admin", &cert, &key, TINY, &["--admin-token=sesame", "--drain-grace-secs=4"]);
    wait_for_gateway(r.addr().parse().unwrap(), &cert, Duration::from_secs(60)).await;
    // A device that stays connected (it has nowhere else to go), so the drain lasts.
    let device = raw_link(r.addr().parse().unwrap(), &cert, "stays", "");
    device.wait_up(Duration::from_secs(5)).await.expect("device up");
    assert_eq!(r.get("/readyz").await.0, 200);
    assert_eq!(r.metric("duet_gateway_draining").await, Some(0.0));

    let (status, body) = r.post_drain(None).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(r.post_drain(Some("guess")).await.0, 401);
    assert_eq!(r.get("/readyz").await.0, 200, "a refused /drain drains nothing");

    let started = Instant::now();
    let (status, body) = r.post_drain(Some("sesame")).await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = r.get("/readyz").await;
    assert_eq!(status, 503);
    assert!(body.starts_with("draining"), "readiness says why: {body}");
    assert_eq!(r.get("/healthz").await.0, 200, "still alive: an orchestrator must not kill it");
    assert_eq!(r.metric("duet_gateway_draining").await, Some(1.0));
    let told = Instant::now();
    while r.metric("duet_gateway_goaways_sent_total").await != Some(1.0) {
        assert!(told.elapsed() < Duration::from_secs(1), "the connected device is sent one GoAway");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(r.post_drain(Some("sesame")).await.1.contains("already draining"));
    // New devices are refused.
    let late = raw_link(r.addr().parse().unwrap(), &cert, "late", "");
    assert!(late.wait_up(Duration::from_millis(500)).await.is_none(), "a draining gateway takes no new device");

    let (status, exited) = tokio::task::block_in_place(|| r.wait_exit(Duration::from_secs(8))).expect("exits");
    assert!(status.success(), "{status:?}");
    assert!(exited - started < Duration::from_secs(4), "within the grace period: {:?}", exited - started);
    drop(device);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_admin_token_drain_is_refused_outright() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(dir.path(), TINY).await;
    let http = gw.http_addr.unwrap().port();
    for token in [None, Some(""), Some("anything")] {
        let (status, body) = post_drain(http, token).await;
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("--admin-token"), "{body}");
    }
    assert!(gw.shared.draining().is_none());
    gw.shutdown().await;
}

/// A raw QUIC device that says `Hello` in `version`.
async fn raw_device(addr: SocketAddr, ca: &Path, version: u16, id: &str) -> quinn::Connection {
    let client = edge_node::tls::client_config(Some(ca), false, Duration::from_secs(1)).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(client);
    let conn = endpoint.connect(addr, "localhost").unwrap().await.unwrap();
    let hello = Frame::Hello { protocol_version: version, device_id: id.into(), auth: String::new(), tokenizer_fingerprint: fingerprint(), slm_id: "raw".into() };
    let reply = ask(&conn, &hello).await;
    assert!(matches!(reply, Frame::Welcome { .. }), "v{version} device welcomed: {reply:?}");
    conn
}

/// One frame on a new stream, its one-frame answer.
async fn ask(conn: &quinn::Connection, frame: &Frame) -> Frame {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(&encode_frame(frame, DEFAULT_MAX_FRAME_BYTES).unwrap()).await.unwrap();
    send.finish().unwrap();
    decode_frame(&recv.read_to_end(DEFAULT_MAX_FRAME_BYTES + 4).await.unwrap(), DEFAULT_MAX_FRAME_BYTES).unwrap()
}

fn escalate(seq: u32, tokens: Vec<u32>) -> Frame {
    Frame::Escalate { session_id: 1, seq, context: ContextSync::Full { tokens: tokens.into() }, sampling: WireSampling::default(), deadline_ms: 5000 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_device_is_served_through_the_drain_and_closed_at_its_end_while_v2_gets_go_away() {
    let dir = tempfile::tempdir().unwrap();
    let grace = Duration::from_secs(3);
    let config = cloud_gateway::GatewayConfig { drain_grace: grace, drain_redirect: Some("gw-b.example:4433".into()), ..test_config(dir.path()) };
    // Every backend call takes 600 ms, so work can be in flight across the drain's phases.
    let gw = start_gateway_with(config, TINY, Duration::from_millis(600)).await;
    let (addr, ca) = (gw.local_addr().unwrap(), dir.path().join("cert.pem"));
    let old = raw_device(addr, &ca, 1, "old-device").await;
    let new = raw_device(addr, &ca, 2, "new-device").await;

    let started = Instant::now();
    assert!(gw.drain());
    assert!(!gw.drain(), "a second drain keeps the first's timeline");
    let drain = gw.shared.draining().unwrap();
    // The v2 device is told to go, and where.
    let mut push = tokio::time::timeout(Duration::from_secs(2), new.accept_uni()).await.expect("GoAway in time").unwrap();
    let go_away = decode_frame(&push.read_to_end(1024).await.unwrap(), 1024).unwrap();
    assert_eq!(go_away, Frame::GoAway { redirect: Some("gw-b.example:4433".into()) });
    // The v1 device gets nothing it cannot decode, and is still served.
    assert!(tokio::time::timeout(Duration::from_millis(200), old.accept_uni()).await.is_err(), "no stream pushed to a v1 device");
    assert!(matches!(ask(&old, &escalate(0, vec![1, 2, 3])).await, Frame::Token { seq: 0, .. }));
    // New devices are refused.
    let client = edge_node::tls::client_config(Some(&ca), false, Duration::from_secs(1)).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(client);
    assert!(endpoint.connect(addr, "localhost").unwrap().await.is_err(), "refused while draining");
    // Work taken just before the admission window ends is answered; work after it is Busy.
    tokio::time::sleep_until((drain.admit_until() - Duration::from_millis(300)).into()).await;
    let taken = tokio::spawn({
        let old = old.clone();
        async move { ask(&old, &escalate(1, vec![1, 2, 3, 4])).await }
    });
    tokio::time::sleep_until((drain.admit_until() + Duration::from_millis(20)).into()).await;
    let asked = Instant::now();
    assert!(matches!(ask(&old, &escalate(2, vec![1, 2, 3, 4, 5])).await, Frame::Busy { seq: 2, .. }));
    assert!(asked.elapsed() < Duration::from_millis(300), "Busy at once");
    assert!(matches!(taken.await.unwrap(), Frame::Token { seq: 1, .. }), "in-flight work finishes");
    // Then the connections are closed, with the drain's code, within the grace period.
    tokio::time::timeout(grace, gw.drained()).await.expect("drained within the grace period");
    assert!(started.elapsed() < grace, "{:?}", started.elapsed());
    let closed = tokio::time::timeout(Duration::from_secs(1), old.closed()).await.expect("the v1 device is closed");
    assert!(matches!(closed, quinn::ConnectionError::ApplicationClosed(ref c) if c.error_code == quinn::VarInt::from_u32(cloud_gateway::drain::CLOSE_DRAINED)), "{closed:?}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_moves_to_the_other_replica_at_once_and_the_drained_one_finishes_early() {
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(dir.path());
    let ca = dir.path().join("cert.pem");
    // Backend calls take 300 ms: an escalation is surely in flight when the drain starts.
    let delay = Duration::from_millis(300);
    let gws = [start_gateway_with(config.clone(), TINY, delay).await, start_gateway_with(config, TINY, delay).await];
    let addrs = [gws[0].local_addr().unwrap(), gws[1].local_addr().unwrap()];
    let link = edge_node::link::Link::start(edge_node::link::LinkConfig {
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(500),
        ..edge_node::link::LinkConfig::new(format!("{},{}", addrs[0], addrs[1]), Some(ca.clone()), "mover", fingerprint())
    })
    .unwrap();
    let first = link.wait_up(Duration::from_secs(5)).await.expect("up");
    let victim = addrs.iter().position(|a| *a == first.addr).expect("one of the two");
    // An escalation in flight when the drain starts is still answered.
    let in_flight = tokio::spawn({
        let link = link.clone();
        async move { link.request(&escalate(0, vec![5; 64]), Instant::now() + Duration::from_secs(5)).await.map(|(f, c)| (f, c.generation)) }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    gws[victim].drain();
    // Once the device heard GoAway, a request waits for the other replica instead of failing.
    while matches!(link.state(), LinkState::Up(c) if c.generation == 1) {
        assert!(started.elapsed() < Duration::from_secs(1), "GoAway reaches the device");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (pong, on) = link.request(&Frame::Ping { nonce: 9 }, Instant::now() + Duration::from_secs(3)).await.expect("answered by the other replica");
    let moved = started.elapsed();
    assert_eq!(pong, Frame::Pong { nonce: 9 });
    assert_eq!((on.addr, on.generation), (addrs[1 - victim], 2));
    let (answer, generation) = in_flight.await.unwrap().expect("the in-flight escalation is answered");
    assert!(matches!(answer, Frame::Token { seq: 0, .. }), "{answer:?}");
    assert_eq!(generation, 1, "by the drained replica, on the old connection");
    assert!(matches!(link.state(), LinkState::Up(c) if c.addr == addrs[1 - victim]));
    // The device left, so the drained replica does not wait out its grace period.
    tokio::time::timeout(Duration::from_secs(2), gws[victim].drained()).await.expect("drained once its only device left");
    eprintln!("moved in {:.1} ms, drained in {:.1} ms", moved.as_secs_f64() * 1e3, started.elapsed().as_secs_f64() * 1e3);
    for gw in gws {
        gw.shutdown().await;
    }
}
