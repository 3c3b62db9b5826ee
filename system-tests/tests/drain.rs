//! Graceful drain and failover between gateway replicas: SIGTERM (or `POST /drain`) moves
//! devices to another replica with `GoAway`, loses no token and exits within the grace period;
//! old (v1) devices are still served and simply closed at the end; the admin endpoint is
//! protected.
//!
//! "The same tokens as one gateway" is checked exactly with a backend whose token is a fixed
//! function of the context; with the real 1.5B (two gateway processes, SIGTERM) it is checked up
//! to the move, because a real model's prefill of the resync's `Full` and its one-token steps
//! round differently and can flip a near-tie afterwards (as after any gateway restart). The rest
//! use the tiny model, in-process where no process has to exit.

mod support;
#[path = "support/replicas.rs"]
mod replicas;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::protocol::{decode_frame, ContextSync, Frame, WireSampling};
use edge_node::link::LinkState;
use replicas::{post_drain, Replica};
use support::raw::{ask, raw_device};
use support::*;

/// A prompt the 1.5B answers at length (so the drain lands mid-generation).
const PROMPT: &str = "def is_prime(n):\n    \"\"\"Return True if n is a prime number.\"\"\"\n";
const GRACE_SECS: u64 = 10;

/// `edge-node generate` with every token escalated, greedy, long deadlines, the tiny model as
/// the SLM (so a fallback, which would take its token, cannot go unnoticed).
fn routed(gateways: &str, ca: &Path, tokens: usize) -> serde_json::Value {
    let (ca, tokens) = (ca.to_str().unwrap(), tokens.to_string());
    let args = [
        "generate", "--model", TINY, "--threads", "1", "--prompt", PROMPT, "--max-new-tokens", &tokens, "--json", "--gateway", gateways, "--ca-cert", ca,
        "--tau", "1", "--deadline-min-ms", "20000", "--deadline-max-ms", "20000", "--connect-wait-ms", "20000",
    ];
    edge_json(&args).0
}

/// Exactly what one gateway gives, across a drain mid-generation: two in-process replicas whose
/// backend's token is a fixed function of the context (so any lost, repeated or reordered token
/// changes every later one), the real edge binary on both, the one it uses drained after 40
/// tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_mid_generation_moves_the_edge_without_losing_or_reordering_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(dir.path());
    let ca = dir.path().join("cert.pem");
    let start = |backend: replicas::HashBackend| cloud_gateway::Gateway::start(config.clone(), Box::new(backend));
    let backends = [replicas::HashBackend::new(TINY, Duration::from_millis(10)), replicas::HashBackend::new(TINY, Duration::from_millis(10))];
    let answered = [backends[0].answered.clone(), backends[1].answered.clone()];
    let [a, b] = backends;
    let gws = [start(a).await.unwrap(), start(b).await.unwrap()];
    let addrs = [gws[0].local_addr().unwrap().to_string(), gws[1].local_addr().unwrap().to_string()];
    let single = tokio::task::spawn_blocking({
        let (addr, ca) = (addrs[1].clone(), ca.clone());
        move || routed(&addr, &ca, 160)
    })
    .await
    .unwrap();
    let before = [answered[0].load(Ordering::Relaxed), answered[1].load(Ordering::Relaxed)];
    let edge = tokio::task::spawn_blocking({
        let (list, ca) = (format!("{},{}", addrs[0], addrs[1]), ca.clone());
        move || routed(&list, &ca, 160)
    });
    let victim = loop {
        if let Some(i) = (0..2).find(|&i| answered[i].load(Ordering::Relaxed) - before[i] >= 40) {
            break i;
        }
        assert!(!edge.is_finished(), "the edge finished before it was 40 tokens in");
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    assert!(gws[victim].drain());
    let v = edge.await.unwrap();
    // The edge closes the drained connection once its answers are in, and every connection it
    // still has before its process exits (also the one the single-gateway run above left on
    // replica 1): the drained replica never waits for a QUIC idle timeout (10 s).
    tokio::time::timeout(Duration::from_secs(5), gws[victim].drained()).await.expect("the drained replica finished early: its device left");
    let moved_at = 160 - (answered[1 - victim].load(Ordering::Relaxed) - before[1 - victim]);

    let vocab = model_runtime::model_files::ModelFiles::locate(TINY).unwrap().manifest.vocab_size;
    let prompt: Vec<u32> = v["prompt_token_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    let mut context = prompt;
    for (i, &t) in ids(&v).iter().enumerate() {
        assert_eq!(t as u32, replicas::HashBackend::token(&context, vocab), "token {i} is the backend's answer for exactly its context");
        context.push(t as u32);
    }
    assert_eq!(ids(&v), ids(&single), "the same tokens as one gateway");
    assert!((30..150).contains(&moved_at), "moved mid-generation, after token {moved_at}");
    assert_eq!(v["fallbacks"], 0, "{v}");
    assert_eq!(v["full_syncs"].as_u64().unwrap() - v["context_missing"].as_u64().unwrap(), 2, "the prompt and one resync on the new replica: {v}");
    for gw in gws {
        gw.shutdown().await;
    }
}

/// Two real gateway processes on the 1.5B: SIGTERM the one the edge uses mid-generation. The
/// edge goes on on the other without a fallback (so no token waited past its deadline), the
/// drained process exits 0 within its grace period, the tokens are a single gateway's up to the
/// move and, after it, exactly the 1.5B's greedy continuation of what the new replica was sent.
/// (Not always the single gateway's: the new replica prefills the resync's `Full` in one pass,
/// which rounds differently from the one-token steps that reached the same position and can flip
/// a near-tie; with this prompt it does, at token 12, after any restart or failover alike.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_on_the_replica_an_edge_uses_moves_it_to_the_other_and_exits_0_within_the_grace_period() {
    cloud_gateway::transport::tls::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = cert_pair(dir.path());
    let grace = format!("--drain-grace-secs={GRACE_SECS}");
    let load = Duration::from_secs(180);
    // One pass for the resync's Full, as the 1.5B's own generate below prefills it (the default
    // cost cap per batch would prefill it in 32-token steps, which round differently).
    let one_pass = "--max-batch-tokens=4096";
    let mut replicas = [
        Replica::start_ready("replica-a", &cert, &key, LLM, &[&grace, one_pass], load).await,
        Replica::start_ready("replica-b", &cert, &key, LLM, &[&grace, one_pass], load).await,
    ];
    // What one gateway gives.
    let single = tokio::task::spawn_blocking({
        let (addr, ca) = (replicas[1].addr(), cert.clone());
        move || routed(&addr, &ca, TOKENS)
    })
    .await
    .unwrap();
    assert_eq!(single["cloud_tokens"], single["tokens"], "{single}");
    let before = escalations_of(&replicas).await;

    // The same generation with both replicas; the one it picked is drained mid-stream.
    let list = format!("{},{}", replicas[0].addr(), replicas[1].addr());
    let edge = tokio::task::spawn_blocking({
        let ca = cert.clone();
        move || routed(&list, &ca, TOKENS)
    });
    let victim = loop {
        let now = escalations_of(&replicas).await;
        if let Some(i) = (0..2).find(|&i| now[i] - before[i] >= 8.0) {
            break i;
        }
        assert!(!edge.is_finished(), "the edge finished before any replica served 8 escalations");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let terminated = Instant::now();
    replicas[victim].terminate();
    let exit = replicas[victim].watch_exit(Duration::from_secs(GRACE_SECS + 5));
    let v = edge.await.unwrap();
    let (status, exited) = exit.join().unwrap().expect("the drained replica exits");
    let survivor = 1 - victim;
    let after_survivor = escalations(&replicas[survivor]).await;
    // The survivor answered every token from the move on, and the resync of the context: sent
    // ahead of the first of them when its prefill exceeds a token's deadline (`syncs_ahead`),
    // else as that token's Full. A delta prepared for the drained replica just as the link
    // moved reaches the survivor, which answers ContextMissing, and the edge resends it Full:
    // two frames for one token.
    let resent = v["context_missing"].as_u64().unwrap_or(0) as usize + v["syncs_ahead"].as_u64().unwrap_or(0) as usize;
    let moved_at = TOKENS - ((after_survivor - before[survivor]) as usize).saturating_sub(resent);

    assert!(status.success(), "the drained replica exits 0: {status:?}");
    let took = exited - terminated;
    assert!(took < Duration::from_secs(GRACE_SECS), "exited {took:?} after SIGTERM, grace {GRACE_SECS} s");
    assert!((7..TOKENS).contains(&moved_at), "moved mid-generation, after token {moved_at}");
    assert_eq!(v["fallbacks"], 0, "no fallback (so no escalation waited past its deadline): {v}");
    assert_eq!(v["cloud_tokens"], v["tokens"], "{v}");
    assert_eq!(v["full_syncs"].as_u64().unwrap() - v["context_missing"].as_u64().unwrap(), 2, "the prompt and one resync on the new replica: {v}");
    assert_eq!(ids(&v)[..moved_at], ids(&single)[..moved_at], "failover: {} / single gateway: {}", v["text"], single["text"]);
    // After the move: what the 1.5B itself continues from the prompt and the tokens sent in the
    // resync, prefilled in one pass as the new replica did.
    let sent: String = v["pieces"].as_array().unwrap()[..moved_at].iter().map(|p| p["text"].as_str().unwrap()).collect();
    let resynced_prompt = format!("{PROMPT}{sent}");
    let rest = (TOKENS - moved_at).to_string();
    let llm = tokio::task::spawn_blocking(move || edge_json(&["generate", "--model", LLM, "--threads", "1", "--prompt", &resynced_prompt, "--max-new-tokens", &rest, "--json"]).0).await.unwrap();
    let prompt_ids = |x: &serde_json::Value| -> Vec<u64> { x["prompt_token_ids"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect() };
    let resync_ids: Vec<u64> = prompt_ids(&v).into_iter().chain(ids(&v)[..moved_at].iter().copied()).collect();
    if prompt_ids(&llm) == resync_ids {
        let syncs = format!("moved at {moved_at}, full syncs {}, context missing {}, syncs ahead {}", v["full_syncs"], v["context_missing"], v["syncs_ahead"]);
        assert_eq!(ids(&v)[moved_at..], ids(&llm)[..], "after the move ({syncs}): {} / the 1.5B from the resynced context: {}", v["text"], llm["text"]);
    } else {
        eprintln!("the text up to the move tokenizes differently: the tokens after it are not compared");
    }
    let stall = v["token_ms"].as_array().unwrap().iter().skip(1).map(|x| x.as_f64().unwrap()).fold(0.0, f64::max);
    eprintln!(
        "moved after token {moved_at}; drained replica exited {:.0} ms after SIGTERM; longest token after the first {stall:.0} ms (the new replica's Full prefill); \
         token latency p50 {:.0} ms (single gateway {:.0} ms); all {TOKENS} tokens equal to the single gateway's: {}",
        took.as_secs_f64() * 1e3,
        v["token_latency_ms_p50"].as_f64().unwrap(),
        single["token_latency_ms_p50"].as_f64().unwrap(),
        ids(&v) == ids(&single),
    );
}

/// Tokens generated by the process test.
const TOKENS: usize = 48;

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
    let mut r = Replica::start_ready("admin", &cert, &key, TINY, &["--admin-token=sesame", "--drain-grace-secs=4"], Duration::from_secs(60)).await;
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

fn escalate(seq: u32, tokens: Vec<u32>) -> Frame {
    Frame::Escalate { session_id: 1, seq, context: ContextSync::Full { tokens: tokens.into() }, sampling: WireSampling::default(), deadline_ms: 5000 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_device_is_served_through_the_drain_and_closed_at_its_end_while_v2_gets_go_away() {
    let dir = tempfile::tempdir().unwrap();
    let grace = Duration::from_secs(3);
    let drain = cloud_gateway::config::DrainConfig { grace, redirect: Some("gw-b.example:4433".into()), ..Default::default() };
    let config = cloud_gateway::GatewayConfig { drain, ..test_config(dir.path()) };
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
    let client = edge_node::link::tls::client_config(Some(&ca), false, Duration::from_secs(1)).unwrap();
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

/// `edge-node serve` stopped the way services are stopped (SIGTERM from `kill`, systemd or
/// Kubernetes) exits 0 and closes its gateway connection on the way out, so the gateway frees
/// it at once instead of after its idle timeout; a drain would otherwise wait that long for a
/// device that is already gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_service_stopped_by_sigterm_closes_its_gateway_connection_on_the_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(dir.path(), TINY).await;
    let (addr, ca) = (gw.local_addr().unwrap().to_string(), dir.path().join("cert.pem"));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut serve = GatewayProcess::from_child(
        Command::new(bin("edge-node"))
            .args(["serve", "--model", TINY, "--threads", "1", "--listen", &format!("127.0.0.1:{port}"), "--gateway", &addr])
            .args(["--ca-cert", ca.to_str().unwrap(), "--tau", "1", "--deadline-min-ms", "20000", "--deadline-max-ms", "20000"])
            .env_remove("DUET_MODEL")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let url = format!("http://127.0.0.1:{port}/v1/completions");
    let started = Instant::now();
    let answer = loop {
        let body = serde_json::json!({"model": TINY, "prompt": "hi", "max_tokens": 2});
        match reqwest::Client::new().post(&url).json(&body).send().await {
            Ok(resp) => break resp.json::<serde_json::Value>().await.unwrap(),
            Err(_) => assert!(started.elapsed() < Duration::from_secs(30), "serve did not come up"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(answer["choices"][0]["text"].is_string(), "{answer}");
    assert_eq!(gw.shared.connections.load(Ordering::Relaxed), 1, "routed through the gateway");

    let status = Command::new("kill").args(["-TERM", &serve.id().to_string()]).status().unwrap();
    assert!(status.success());
    let status = tokio::task::block_in_place(|| serve.wait_exit(Duration::from_secs(5))).expect("serve exits within 5 s of SIGTERM");
    assert!(status.success(), "a graceful stop, not death by signal: {status:?}");
    let stopped = Instant::now();
    while gw.shared.connections.load(Ordering::Relaxed) != 0 {
        assert!(stopped.elapsed() < Duration::from_secs(2), "the gateway frees the connection long before its idle timeout");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    gw.shutdown().await;
}
