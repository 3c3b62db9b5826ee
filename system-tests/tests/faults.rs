//! Faults: the gateway dies, restarts, or is slow; the edge never stalls and recovers alone.
//! Tiny models on both sides keep these fast; the gateway runs as a separate process so it can
//! be killed.
//!
//! Nothing here waits a fixed time for something to have happened: a test waits for what it
//! can observe (the gateway's `/readyz`, its escalation counter on `/metrics`) under one
//! generous deadline, so a busy 2-core machine makes it slower, not wrong.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use common::protocol::{Frame, WireSampling, ContextSync, TokenIds};
use support::*;

fn edge_args<'a>(port: &'a str, ca: &'a str, tokens: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "generate", "--model", TINY, "--prompt", "hello there", "--max-new-tokens", tokens, "--json", "--gateway", port, "--ca-cert", ca, "--tau", "1",
    ];
    v.extend_from_slice(extra);
    v
}

/// How long anything here may take to become observable (model loads on a busy machine).
const PATIENCE: Duration = Duration::from_secs(90);

/// A gateway process on QUIC `port` with its HTTP side port on `http` (to watch it).
fn observed_gateway(port: u16, http: u16, cert: &Path, key: &Path, extra: &[&str]) -> GatewayProcess {
    let child = std::process::Command::new(gateway_exe())
        .args([
            format!("--listen=127.0.0.1:{port}"),
            format!("--http-listen=127.0.0.1:{http}"),
            format!("--tls-cert={}", cert.display()),
            format!("--tls-key={}", key.display()),
            format!("--model={TINY}"),
            "--threads=1".into(),
            "--max-context=4096".into(),
            "--log=warn".into(),
        ])
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("spawn cloud-gateway");
    GatewayProcess::from_child(child)
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `GET path` on the side port: (status, body), `None` while nothing answers.
fn http_get(http: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", http)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, text.split_once("\r\n\r\n").map_or(String::new(), |(_, body)| body.to_string())))
}

/// Escalations the gateway received so far (0 before it answers).
fn escalations(http: u16) -> f64 {
    let page = http_get(http, "/metrics").map(|(_, body)| body).unwrap_or_default();
    page.lines().find_map(|l| l.strip_prefix("duet_gateway_escalations_received_total ")?.trim().parse().ok()).unwrap_or(0.0)
}

/// Wait until `done` holds, polling every 20 ms, at most [`PATIENCE`].
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < until, "waited {PATIENCE:?} for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until the gateway on side port `http` says it is ready.
fn wait_ready(http: u16) {
    wait_until("the gateway's /readyz", || http_get(http, "/readyz").is_some_and(|(status, _)| status == 200));
}

#[test]
fn gateway_killed_mid_generation_edge_finishes_locally() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = cert_pair(dir.path());
    let (port, http) = (free_udp_port(), free_tcp_port());
    let mut gw = observed_gateway(port, http, &cert, &key, &["--backend-delay-ms=15"]);
    wait_ready(http);
    let addr = format!("127.0.0.1:{port}");
    let ca = cert.to_str().unwrap().to_string();
    // Killed once it has served a part of the 400 tokens (the edge is mid-generation).
    let killer = std::thread::spawn(move || {
        wait_until("the gateway serving 50 escalations", || escalations(http) >= 50.0);
        gw.kill();
    });
    let (v, elapsed) = edge_json(&edge_args(&addr, &ca, "400", &["--deadline-max-ms", "300", "--connect-wait-ms", "5000"]));
    killer.join().unwrap();
    assert_eq!(v["tokens"], 400, "{v}");
    assert!(v["cloud_tokens"].as_u64().unwrap() > 0, "cloud served before the kill: {v}");
    assert!(v["fallbacks"].as_u64().unwrap() > 0, "fallbacks after the kill: {v}");
    assert!(v["token_latency_ms_p99"].as_f64().unwrap() < 1000.0, "no token waits past the deadline: {v}");
    assert!(elapsed < Duration::from_secs(60), "took {elapsed:?}");
}

#[test]
fn gateway_restarted_edge_reconnects_and_resyncs() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = cert_pair(dir.path());
    let (port, http) = (free_udp_port(), free_tcp_port());
    let mut gw = observed_gateway(port, http, &cert, &key, &["--backend-delay-ms=2"]);
    wait_ready(http);
    let addr = format!("127.0.0.1:{port}");
    let ca = cert.to_str().unwrap().to_string();
    let (c2, k2) = (cert.clone(), key.clone());
    let restarter = std::thread::spawn(move || {
        // Once the edge is connected and served (however slow it was to start), well before
        // the end of its 3000 tokens; then a 200 ms outage.
        wait_until("the first gateway serving 100 escalations", || escalations(http) >= 100.0);
        gw.kill();
        std::thread::sleep(Duration::from_millis(200));
        observed_gateway(port, free_tcp_port(), &c2, &k2, &["--backend-delay-ms=2"])
    });
    let (v, _) = edge_json(&edge_args(&addr, &ca, "3000", &["--deadline-max-ms", "300", "--connect-wait-ms", "5000"]));
    let _gw2 = restarter.join().unwrap();
    let sources: Vec<&str> = v["sources"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let first_fallback = sources.iter().position(|s| *s == "fallback").expect("the restart causes fallbacks");
    assert!(sources[first_fallback..].contains(&"cloud"), "cloud tokens again after the restart: {v}");
    assert!(v["full_syncs"].as_u64().unwrap() >= 2, "the new gateway got the whole context again: {v}");
}

#[test]
fn slow_backend_falls_back_within_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = cert_pair(dir.path());
    let (port, http) = (free_udp_port(), free_tcp_port());
    let _gw = observed_gateway(port, http, &cert, &key, &["--backend-delay-ms=3000"]);
    // The gateway's start-up warms its backend up, which takes the backend's delay (or more).
    wait_ready(http);
    let addr = format!("127.0.0.1:{port}");
    let ca = cert.to_str().unwrap().to_string();
    let (v, elapsed) = edge_json(&edge_args(&addr, &ca, "40", &["--deadline-max-ms", "200", "--connect-wait-ms", "15000"]));
    assert_eq!(v["tokens"], 40);
    assert_eq!(v["cloud_tokens"], 0, "{v}");
    // Either the deadline passes, or the gateway, knowing its backend takes 3 s, answers Busy
    // at once (and the device then stays local-only for the Busy's retry_after), or it drops
    // the queued escalation at its deadline and says so (`DeadlineExpired`, counted as an
    // error), which on a loaded machine can reach the device before its own timer fires.
    let refused = ["fallback_timeout", "fallback_busy", "fallback_error"].iter().map(|k| v[*k].as_u64().unwrap()).sum::<u64>();
    assert!(refused >= 1, "{v}");
    assert_eq!(v["fallbacks"], 40, "{v}");
    assert!(v["token_latency_ms_p99"].as_f64().unwrap() < 600.0, "{v}");
    assert!(elapsed < Duration::from_secs(30), "took {elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_answers_busy_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.batcher.queue_capacity = 1;
    config.batcher.max_batch = 1;
    let gw = start_gateway_with(config, TINY, Duration::from_millis(800)).await;
    let addr = gw.local_addr().unwrap();
    let link = raw_link(addr, &dir.path().join("cert.pem"), "busy-device", "");
    link.wait_up(Duration::from_secs(5)).await.unwrap();
    let mut handles = Vec::new();
    for s in 0..4u64 {
        let link = link.clone();
        handles.push(tokio::spawn(async move {
            let frame = Frame::Escalate {
                session_id: s,
                seq: 0,
                context: ContextSync::Full { tokens: TokenIds(vec![1, 2, 3]) },
                sampling: WireSampling::default(),
                deadline_ms: 5000,
            };
            let t = Instant::now();
            let (reply, _) = link.request(&frame, Instant::now() + Duration::from_secs(5)).await.unwrap();
            (reply, t.elapsed())
        }));
    }
    let mut busy = 0;
    let mut tokens = 0;
    for h in handles {
        let (reply, took) = h.await.unwrap();
        match reply {
            Frame::Busy { retry_after_ms, .. } => {
                busy += 1;
                assert!(retry_after_ms > 0);
                assert!(took < Duration::from_millis(400), "Busy must come at once, took {took:?}");
            }
            Frame::Token { .. } => tokens += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(busy >= 2 && tokens >= 1, "busy {busy}, tokens {tokens}");
    gw.shutdown().await;
}
