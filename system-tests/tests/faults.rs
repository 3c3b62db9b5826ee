//! Faults: the gateway dies, restarts, or is slow; the edge never stalls and recovers alone.
//! Tiny models on both sides keep these fast; the gateway runs as a separate process so it can
//! be killed.

mod support;

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

#[test]
fn gateway_killed_mid_generation_edge_finishes_locally() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = cert_pair(dir.path());
    let port = free_udp_port();
    let mut gw = spawn_gateway_process(port, &cert, &key, TINY, &["--backend-delay-ms=15"]);
    let addr = format!("127.0.0.1:{port}");
    let ca = cert.to_str().unwrap().to_string();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(2500));
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
    let port = free_udp_port();
    let mut gw = spawn_gateway_process(port, &cert, &key, TINY, &["--backend-delay-ms=2"]);
    let addr = format!("127.0.0.1:{port}");
    let ca = cert.to_str().unwrap().to_string();
    let (c2, k2) = (cert.clone(), key.clone());
    let restarter = std::thread::spawn(move || {
        // Well into the ~30 s generation, and after the edge has connected even when it is
        // slow to start (the other tests of this file load models at the same time: under
        // load, at 1.5 s the edge sometimes first reached the restarted gateway).
        std::thread::sleep(Duration::from_millis(5000));
        gw.kill();
        std::thread::sleep(Duration::from_millis(200));
        spawn_gateway_process(port, &c2, &k2, TINY, &["--backend-delay-ms=2"])
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
    let port = free_udp_port();
    let _gw = spawn_gateway_process(port, &cert, &key, TINY, &["--backend-delay-ms=3000"]);
    let addr = format!("127.0.0.1:{port}");
    let ca = cert.to_str().unwrap().to_string();
    // The gateway's start-up warms its backend up, which takes the backend's delay (or more):
    // the edge waits long enough to start with a connection.
    let (v, elapsed) = edge_json(&edge_args(&addr, &ca, "40", &["--deadline-max-ms", "200", "--connect-wait-ms", "15000"]));
    assert_eq!(v["tokens"], 40);
    assert_eq!(v["cloud_tokens"], 0, "{v}");
    // Either the deadline passes, or the gateway, knowing its backend takes 3 s, answers Busy
    // at once (and the device then stays local-only for the Busy's retry_after).
    let refused = v["fallback_timeout"].as_u64().unwrap() + v["fallback_busy"].as_u64().unwrap();
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
