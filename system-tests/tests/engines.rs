//! The gateway in front of a real external engine: llama.cpp's `llama-server` (built from
//! source by `deploy/engines/llamacpp/build`) serving the same 1.5B LLM, over real QUIC.
//!
//! What the engine answers is checked against the engine itself, asked directly for the same
//! token ids: the gateway must add nothing and lose nothing, even while workers crash, hang or
//! answer garbage.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cloud_gateway::engine::connect::{connect, connect_with, expected_vocabulary, tokenizer_path};
use cloud_gateway::engine::discovery::FixedResolver;
use cloud_gateway::engine::pool::breaker::{BreakerConfig, BreakerState};
use cloud_gateway::engine::pool::health::HealthConfig;
use cloud_gateway::engine::pool::PoolConfig;
use cloud_gateway::engine::EngineSpec;
use cloud_gateway::Gateway;
use common::protocol::{ContextTracker, ErrorCode, Frame, WireSampling};
use edge_node::link::Link;
use support::engines::{Fault, FaultProxy, LlamaServer};
use support::*;

const PROMPT: &str = "What is the capital of France? Answer in one sentence.";

/// The tests of this file run one at a time: each starts llama-server processes that would
/// otherwise share the two cores with another test's and make its timings meaningless.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Pool settings for tests: quick health checks and a breaker that reacts within a test.
fn pool_config(engines: Vec<EngineSpec>) -> PoolConfig {
    PoolConfig {
        engines,
        breaker: BreakerConfig { failure_threshold: 2, open_for: Duration::from_millis(500), ..BreakerConfig::default() },
        // Generous timeout: on 2 shared cores a busy engine's /health can take a while.
        health: HealthConfig { interval: Duration::from_millis(250), timeout: Duration::from_secs(1), ..HealthConfig::default() },
        ..PoolConfig::default()
    }
}

/// A gateway in this process over `engines`, checked against the LLM's tokenizer, once every
/// one of them is in the pool (the gateway itself serves from the first that passes).
async fn gateway_over(dir: &std::path::Path, pool: PoolConfig) -> Gateway {
    let expected = expected_vocabulary(&tokenizer_path(LLM)).unwrap();
    let n = pool.engines.len();
    let (pool, facts) = connect(pool, &expected, Duration::from_secs(60)).await.unwrap();
    assert!(pool.wait_for_workers(n, Duration::from_secs(60)).await, "every engine joins the pool");
    Gateway::start_with_engines(test_config(dir), pool, facts).await.unwrap()
}

fn breaker_states(gw: &Gateway) -> Vec<BreakerState> {
    let pool = gw.engine_pool().expect("an engine gateway");
    pool.workers().iter().map(|w| w.breaker_state(Instant::now())).collect()
}

fn generate(addr: String, ca: String, tau: &str, n: &str) -> serde_json::Value {
    edge_json(&[
        "generate", "--chat", "--prompt", PROMPT, "--max-new-tokens", n, "--json", "--gateway", &addr, "--ca-cert", &ca, "--tau", tau,
        "--deadline-min-ms", "60000", "--deadline-max-ms", "60000",
    ])
    .0
}

fn ids(v: &serde_json::Value, key: &str) -> Vec<u32> {
    v[key].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_llama_server_every_token_escalated_equals_the_engines_own_greedy_completion() {
    let _serial = SERIAL.lock().await;
    let engine = LlamaServer::start(2).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_over(dir.path(), pool_config(vec![engine.spec()])).await;
    let addr = gw.local_addr().unwrap().to_string();
    let ca = dir.path().join("cert.pem").to_str().unwrap().to_string();
    let routed = tokio::task::spawn_blocking(move || generate(addr, ca, "1", "16")).await.unwrap();
    assert_eq!(routed["escalated"], routed["tokens"], "{routed}");
    assert_eq!(routed["cloud_tokens"], routed["tokens"], "no fallback expected: {routed}");
    let generated = ids(&routed, "token_ids");
    let direct = engine.greedy(&ids(&routed, "prompt_token_ids"), generated.len() as u32).await;
    assert_eq!(generated, direct, "through the gateway: {}", routed["text"]);
    assert!(routed["text"].as_str().unwrap().contains("Paris"), "{}", routed["text"]);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_llama_server_no_token_escalated_equals_the_slms_own_output() {
    let _serial = SERIAL.lock().await;
    let engine = LlamaServer::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_over(dir.path(), pool_config(vec![engine.spec()])).await;
    let addr = gw.local_addr().unwrap().to_string();
    let ca = dir.path().join("cert.pem").to_str().unwrap().to_string();
    let routed = tokio::task::spawn_blocking(move || generate(addr, ca, "0", "16")).await.unwrap();
    let local = tokio::task::spawn_blocking(|| edge_json(&["generate", "--chat", "--prompt", PROMPT, "--max-new-tokens", "16", "--json"]).0).await.unwrap();
    assert_eq!(routed["escalated"], 0);
    assert_eq!(ids(&routed, "token_ids"), ids(&local, "token_ids"));
    gw.shutdown().await;
}

/// One escalation log: (session, context sent, token answered).
type Answered = Vec<(u64, Vec<u32>, u32)>;

/// Sessions with the ids in `sessions` on one link, `steps` escalations each with a few local tokens between
/// them; every reply must be a token for its own seq. `between` runs after each session's step
/// `at` (e.g. to kill a worker).
async fn run_sessions(link: Arc<Link>, sessions: std::ops::Range<u64>, steps: usize, deadline: Duration) -> Answered {
    let mut tasks = Vec::new();
    for s in sessions {
        let link = link.clone();
        tasks.push(tokio::spawn(async move {
            let mut tracker = ContextTracker::new();
            // Short real-looking contexts: a chat header and a few distinct tokens.
            let mut context: Vec<u32> = vec![151644, 872, 198, 3838 + s as u32, 374, 220, 16 + s as u32, 10, 220, 17, 30, 151645, 198, 151644, 77091, 198];
            let mut log = Vec::new();
            for step in 0..steps {
                for j in 0..(step % 3) {
                    context.push(1000 + (s as u32) * 7 + j as u32);
                }
                let sync = tracker.sync_for(&context);
                let frame = Frame::Escalate { session_id: s, seq: sync.seq, context: sync.context, sampling: WireSampling::default(), deadline_ms: deadline.as_millis() as u32 };
                let (reply, _) = link.request(&frame, Instant::now() + deadline + Duration::from_secs(5)).await.expect("reply");
                match reply {
                    Frame::Token { session_id, seq, token_id, .. } => {
                        assert_eq!((session_id, seq), (s, sync.seq), "reply for another escalation");
                        tracker.acknowledge(seq);
                        log.push((s, context.clone(), token_id));
                        context.push(token_id);
                    }
                    other => panic!("session {s} step {step}: unexpected reply {other:?}"),
                }
            }
            log
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

/// Every answer is the engine's greedy token for exactly that context. llama.cpp's int4 kernels
/// give slightly different logits for the same context evaluated in different batch shapes
/// (delta on a cached prefix in a batch with other slots, vs. whole prompt alone), so a
/// near-tie may flip: tolerated within 0.45 nat when the answer is among the engine's top 3, and
/// counted (a flat distribution flipped by 0.38 nat once, top-1 at -2.34: a 10 % token). A token
/// from another session's context would not be a near-tie.
async fn check_answers(engine: &LlamaServer, answered: &Answered) {
    let mut near_ties = 0;
    for (session, context, token) in answered {
        let top = engine.top(context, 3).await;
        if top[0].0 != *token {
            let mine = top.iter().find(|(id, _)| id == token).unwrap_or_else(|| panic!("session {session}: token {token} not in the engine's top 3 {top:?}"));
            assert!(top[0].1 - mine.1 < 0.45, "session {session}: token {token} vs the engine's {top:?}");
            near_ties += 1;
        }
    }
    assert!(near_ties * 5 <= answered.len(), "{near_ties} near-ties of {}", answered.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sessions_through_an_engine_get_their_own_tokens_in_order() {
    let _serial = SERIAL.lock().await;
    let engine = LlamaServer::start(4).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_over(dir.path(), pool_config(vec![engine.spec()])).await;
    let link = Arc::new(raw_link(gw.local_addr().unwrap(), &dir.path().join("cert.pem"), "device-a", ""));
    assert!(link.wait_up(Duration::from_secs(10)).await.is_some());
    let answered = run_sessions(link, 0..6, 6, Duration::from_secs(30)).await;
    assert_eq!(answered.len(), 36);
    check_answers(&engine, &answered).await;
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_moves_its_sessions_to_the_other_and_its_breaker_recovers_after_restart() {
    let _serial = SERIAL.lock().await;
    let mut a = LlamaServer::start(2).await;
    let b = LlamaServer::start(2).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_over(dir.path(), pool_config(vec![a.spec(), b.spec()])).await;
    let link = Arc::new(raw_link(gw.local_addr().unwrap(), &dir.path().join("cert.pem"), "device-a", ""));
    assert!(link.wait_up(Duration::from_secs(10)).await.is_some());
    let run = tokio::spawn(run_sessions(link.clone(), 0..6, 8, Duration::from_secs(30)));
    tokio::time::sleep(Duration::from_secs(3)).await;
    a.kill();
    let answered = run.await.unwrap();
    assert_eq!(answered.len(), 48, "every escalation answered, none lost");
    check_answers(&b, &answered).await;
    // The dead worker is out: its breaker opened (or health took it out first).
    let mut next = 100;
    a.restart().await;
    let t = Instant::now();
    loop {
        let _ = run_sessions(link.clone(), next..next + 4, 1, Duration::from_secs(30)).await;
        next += 4;
        if breaker_states(&gw)[0] == BreakerState::Closed {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "worker A never came back: {:?}", breaker_states(&gw));
    }
    let metrics = reqwest::get(format!("http://{}/metrics", gw.http_addr.unwrap())).await.unwrap().text().await.unwrap();
    let url_a = a.url();
    let line = |prefix: &str, has: &str| metrics.lines().any(|l| l.starts_with(prefix) && l.contains(&url_a) && l.contains(has));
    // A request in flight to A when it died fails over as a transport error; with none in
    // flight (a loaded machine can run every session's step on B at that moment) the health
    // check takes A out before any request fails. Either way nothing was lost (48 answered
    // above), and A served before it died and after it came back.
    assert!(line("duet_gateway_engine_requests_total", "outcome=\"ok\""), "{metrics}");
    assert!(line("duet_gateway_engine_latency_seconds_bucket", "le=\"0.5\""), "latency is a histogram: {metrics}");
    // Whichever noticed the dead worker first (its breaker, or the health check, which then
    // keeps requests off it so the breaker may never open), a breaker that opened came back
    // through half-open to closed.
    if line("duet_gateway_engine_breaker_transitions_total", "to=\"open\"") {
        for to in ["half_open", "closed"] {
            assert!(line("duet_gateway_engine_breaker_transitions_total", &format!("to=\"{to}\"")), "opened, but no transition to {to}: {metrics}");
        }
    }
    gw.shutdown().await;
}

/// `metric{worker="LABEL",...} VALUE` summed over the lines that also contain `has`.
fn metric_for(metrics: &str, name: &str, label: &str, has: &str) -> f64 {
    let worker = format!("worker=\"{label}\"");
    metrics.lines().filter(|l| l.starts_with(name) && l.contains(&worker) && l.contains(has)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

async fn scrape(gw: &Gateway) -> String {
    reqwest::get(format!("http://{}/metrics", gw.http_addr.unwrap())).await.unwrap().text().await.unwrap()
}

async fn wait_for_labels(gw: &Gateway, want: &[String]) {
    let pool = gw.engine_pool().expect("an engine gateway");
    let t = Instant::now();
    loop {
        let labels: Vec<String> = pool.workers().iter().map(|w| w.label().to_string()).collect();
        if labels == want {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "workers {labels:?}, waiting for {want:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_two_engines_makes_two_workers_and_one_that_leaves_dns_is_drained_without_losing_a_request() {
    let _serial = SERIAL.lock().await;
    // Two pods behind a headless Service: one port, two addresses.
    let port = LlamaServer::free_port();
    let a = LlamaServer::start_at("127.0.0.1".parse().unwrap(), port, 2).await;
    let b = LlamaServer::start_at("127.0.0.2".parse().unwrap(), port, 2).await;
    let (label_a, label_b) = (a.url(), b.url());
    // At first the name lists A and a pod that does not answer (still scheduled): the gateway
    // serves once A has passed, and reports the other as being verified.
    let resolver = Arc::new(FixedResolver::default());
    resolver.set("llama.test", vec![a.host(), "127.0.0.3".parse().unwrap()]);
    let mut config = pool_config(vec![format!("llamacpp=dns+http://llama.test:{port}").parse().unwrap()]);
    config.resolve_interval = Duration::from_millis(200);
    let expected = expected_vocabulary(&tokenizer_path(LLM)).unwrap();
    let started = Instant::now();
    let (pool, facts) = connect_with(config, &expected, Duration::from_secs(60), resolver.clone()).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(30), "served without waiting for the silent address: {:?}", started.elapsed());
    let labels: Vec<String> = pool.workers().iter().map(|w| w.label().to_string()).collect();
    assert_eq!(labels, std::slice::from_ref(&label_a));
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start_with_engines(test_config(dir.path()), pool, facts).await.unwrap();
    let m = scrape(&gw).await;
    assert!(m.contains("duet_gateway_engine_workers{state=\"verifying\"} 1"), "{m}");
    assert!(reqwest::get(format!("http://{}/readyz", gw.http_addr.unwrap())).await.unwrap().status().is_success());

    // The name now lists A and B: the silent address's check is cancelled, B is verified and
    // joins.
    resolver.set("llama.test", vec![a.host(), b.host()]);
    wait_for_labels(&gw, &[label_a.clone(), label_b.clone()]).await;
    let link = Arc::new(raw_link(gw.local_addr().unwrap(), &dir.path().join("cert.pem"), "device-a", ""));
    assert!(link.wait_up(Duration::from_secs(10)).await.is_some());
    let answered = run_sessions(link.clone(), 0..8, 3, Duration::from_secs(30)).await;
    assert_eq!(answered.len(), 24);
    check_answers(&a, &answered).await;
    let m = scrape(&gw).await;
    let ok = |m: &str, label: &str| metric_for(m, "duet_gateway_engine_requests_total", label, "outcome=\"ok\"");
    assert!(ok(&m, &label_a) > 0.0 && ok(&m, &label_b) > 0.0, "both pods get sessions: A {} B {}", ok(&m, &label_a), ok(&m, &label_b));
    assert!(m.contains("duet_gateway_engine_workers{state=\"serving\"} 2"), "{m}");

    // B leaves DNS while sessions run: it is drained (its requests in flight finish), its
    // sessions move to A, none is lost.
    let run = tokio::spawn(run_sessions(link.clone(), 100..106, 4, Duration::from_secs(30)));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    resolver.set("llama.test", vec![a.host()]);
    wait_for_labels(&gw, std::slice::from_ref(&label_a)).await;
    let answered = run.await.unwrap();
    assert_eq!(answered.len(), 24, "every escalation answered across the removal");
    check_answers(&a, &answered).await;
    let before = ok(&scrape(&gw).await, &label_b);
    let answered = run_sessions(link.clone(), 200..206, 2, Duration::from_secs(30)).await;
    assert_eq!(answered.len(), 12);
    let m = scrape(&gw).await;
    assert_eq!(ok(&m, &label_b), before, "a removed worker gets no new request");
    assert_eq!(metric_for(&m, "duet_gateway_engine_member", &label_b, ""), 0.0, "{m}");
    assert_eq!(metric_for(&m, "duet_gateway_engine_in_flight", &label_b, ""), 0.0, "its requests finished");
    assert!(m.contains("duet_gateway_engine_workers{state=\"serving\"} 1"), "{m}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_worker_is_failed_over_within_the_deadline() {
    let _serial = SERIAL.lock().await;
    let a = LlamaServer::start(2).await;
    let b = LlamaServer::start(2).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_over(dir.path(), pool_config(vec![a.spec(), b.spec()])).await;
    let link = Arc::new(raw_link(gw.local_addr().unwrap(), &dir.path().join("cert.pem"), "device-a", ""));
    assert!(link.wait_up(Duration::from_secs(10)).await.is_some());
    a.signal("STOP");
    let started = Instant::now();
    let answered = run_sessions(link, 0..6, 2, Duration::from_secs(20)).await;
    assert_eq!(answered.len(), 12, "every escalation answered within its deadline");
    assert!(started.elapsed() < Duration::from_secs(60));
    check_answers(&b, &answered).await;
    a.signal("CONT");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_answering_500s_garbage_or_foreign_tokens_gets_typed_errors_and_the_gateway_keeps_serving() {
    let _serial = SERIAL.lock().await;
    let engine = LlamaServer::start(2).await;
    let proxy = FaultProxy::start(engine.url()).await;
    let dir = tempfile::tempdir().unwrap();
    // A breaker that stays closed, so that each fault reaches the engine (breaking is tested
    // with two workers).
    let mut pool = pool_config(vec![proxy.spec()]);
    pool.breaker.failure_threshold = 100;
    let gw = gateway_over(dir.path(), pool).await;
    let link = raw_link(gw.local_addr().unwrap(), &dir.path().join("cert.pem"), "device-a", "");
    assert!(link.wait_up(Duration::from_secs(10)).await.is_some());
    let context = vec![151644, 872, 198, 3838, 374, 220, 16, 10, 220, 17, 30, 151645, 198, 151644, 77091, 198];
    for (i, fault) in [Fault::Http500, Fault::Garbage, Fault::BadToken].into_iter().enumerate() {
        proxy.set(fault);
        let session_id = i as u64;
        let frame = Frame::Escalate { session_id, seq: 1, context: common::protocol::ContextSync::Full { tokens: context.clone().into() }, sampling: WireSampling::default(), deadline_ms: 3000 };
        let (reply, _) = link.request(&frame, Instant::now() + Duration::from_secs(10)).await.expect("a reply, not silence");
        match reply {
            Frame::Error { code, message, .. } => {
                assert!(matches!(code, ErrorCode::BackendFailed | ErrorCode::DeadlineExpired), "{fault:?}: {code:?} {message}");
            }
            other => panic!("{fault:?}: expected a typed error, got {other:?}"),
        }
    }
    // The same gateway serves again as soon as the worker does.
    proxy.set(Fault::None);
    tokio::time::sleep(Duration::from_millis(800)).await; // the breaker's pause
    let t = Instant::now();
    let token = loop {
        let frame = Frame::Escalate { session_id: 9, seq: 1, context: common::protocol::ContextSync::Full { tokens: context.clone().into() }, sampling: WireSampling::default(), deadline_ms: 20_000 };
        match link.request(&frame, Instant::now() + Duration::from_secs(30)).await.expect("reply").0 {
            Frame::Token { token_id, .. } => break token_id,
            other => assert!(t.elapsed() < Duration::from_secs(20), "still failing: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(token, engine.greedy(&context, 1).await[0]);
    gw.shutdown().await;
}

/// One `EscalateDraft` (greedy, a fresh session with the whole context) on a v5 link: the
/// `Verified` answer's accepted count and token.
async fn check_draft(link: &edge_node::link::Link, session_id: u64, context: &[u32], draft: &[u32]) -> (u32, u32) {
    let frame = Frame::EscalateDraft {
        session_id,
        seq: 1,
        context: common::protocol::ContextSync::Full { tokens: context.to_vec().into() },
        draft: draft.to_vec().into(),
        sampling: WireSampling::default(),
        deadline_ms: 30_000,
    };
    match link.request(&frame, Instant::now() + Duration::from_secs(40)).await.expect("reply").0 {
        Frame::Verified { session_id: sid, accepted, token_id, .. } => {
            assert_eq!(sid, session_id);
            (accepted, token_id)
        }
        other => panic!("expected Verified, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_llama_server_a_draft_of_its_own_greedy_continuation_is_accepted_whole_and_a_corrupted_one_is_corrected_where_it_leaves_it() {
    let _serial = SERIAL.lock().await;
    // One slot: every request below finds the context cached on it.
    let engine = LlamaServer::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_over(dir.path(), pool_config(vec![engine.spec()])).await;
    let link = raw_link(gw.local_addr().unwrap(), &dir.path().join("cert.pem"), "device-a", "");
    assert!(link.wait_up(Duration::from_secs(10)).await.is_some());
    let context = engine.client().tokenize("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", Duration::from_secs(30)).await.unwrap().unwrap();
    // The engine's own continuation, asked directly. The second asking runs on the slot state a
    // check of the same context finds (the whole prompt cached, its last token evaluated again);
    // the first prefilled the prompt in one batch, and llama.cpp's CPU kernels are not
    // batch-invariant, so a near-tie could differ there.
    let _ = engine.greedy(&context, 7).await;
    let own = engine.greedy(&context, 7).await;
    assert_eq!(own.len(), 7, "a continuation long enough for a draft of 6 and its bonus: {own:?}");
    let draft = &own[..6];
    assert_eq!(check_draft(&link, 1, &context, draft).await, (6, own[6]), "all accepted, and the engine's next token as the bonus");
    let other = |t: u32| if t == 13 { 11 } else { 13 };
    let mut corrupted = draft.to_vec();
    corrupted[3] = other(corrupted[3]);
    assert_eq!(check_draft(&link, 2, &context, &corrupted).await, (3, own[3]), "accepted up to the corruption, the engine's token there");
    let mut corrupted = draft.to_vec();
    corrupted[0] = other(corrupted[0]);
    assert_eq!(check_draft(&link, 3, &context, &corrupted).await, (0, own[0]), "rejected at once: the engine's token at the hard position");
    let m = scrape(&gw).await;
    let url = engine.url();
    assert_eq!(metric_for(&m, "duet_gateway_engine_draft_tokens_total", &url, "kind=\"checked\""), 18.0, "{m}");
    assert_eq!(metric_for(&m, "duet_gateway_engine_draft_tokens_total", &url, "kind=\"accepted\""), 9.0, "{m}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_its_in_flight_bound_every_worker_full_means_busy_at_once_and_the_bound_frees_again() {
    let _serial = SERIAL.lock().await;
    let engine = LlamaServer::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let mut pool = pool_config(vec![engine.spec()]);
    pool.max_in_flight_per_worker = 1;
    let gw = gateway_over(dir.path(), pool).await;
    let link = Arc::new(raw_link(gw.local_addr().unwrap(), &dir.path().join("cert.pem"), "device-a", ""));
    assert!(link.wait_up(Duration::from_secs(10)).await.is_some());
    let escalate = |session_id: u64| {
        let link = link.clone();
        let context: Vec<u32> = (0..200).map(|i| 1000 + i * 7 + session_id as u32).collect();
        tokio::spawn(async move {
            let frame = Frame::Escalate { session_id, seq: 1, context: common::protocol::ContextSync::Full { tokens: context.into() }, sampling: WireSampling::default(), deadline_ms: 30_000 };
            let started = Instant::now();
            let reply = link.request(&frame, Instant::now() + Duration::from_secs(40)).await.expect("reply").0;
            (reply, started.elapsed())
        })
    };
    let first = escalate(0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (second, waited) = escalate(1).await.unwrap();
    assert!(matches!(second, Frame::Busy { .. }), "{second:?}");
    assert!(waited < Duration::from_secs(1), "Busy comes at once, not after a wait: {waited:?}");
    assert!(matches!(first.await.unwrap().0, Frame::Token { .. }));
    let pool = gw.engine_pool().expect("an engine gateway");
    assert_eq!(pool.in_flight(), 0);
    assert!(matches!(escalate(2).await.unwrap().0, Frame::Token { .. }), "the slot is free again");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_with_another_vocabulary_is_refused_at_start_up_by_name() {
    let _serial = SERIAL.lock().await;
    let engine = LlamaServer::start(1).await;
    // Devices whose tokenizer differs from the engine's (one probe id and the fingerprint).
    let mut expected = expected_vocabulary(&tokenizer_path(LLM)).unwrap();
    expected.probe_ids[3] += 1;
    expected.fingerprint = "0123456789abcdef".into();
    let err = match connect(pool_config(vec![engine.spec()]), &expected, Duration::from_secs(30)).await {
        Ok(_) => panic!("a mismatched engine was accepted"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains(&engine.url()) && err.contains("tokenizes differently") && err.contains("0123456789ab"), "{err}");
}

#[test]
fn the_example_gateway_config_is_accepted_and_a_typo_is_refused_by_name() {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/gateway/gateway.toml");
    let out = std::process::Command::new(gateway_exe()).args(["--config", example.to_str().unwrap(), "--check"]).env("RUST_BACKTRACE", "0").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("llamacpp=http://127.0.0.1:8081") || text.contains("http://127.0.0.1:8081"), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("gateway.toml");
    std::fs::write(&typo, "max-bacth = 4\n").unwrap();
    let out = std::process::Command::new(gateway_exe()).args(["--config", typo.to_str().unwrap(), "--check"]).env("RUST_BACKTRACE", "0").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("unknown key `max-bacth`"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_process_exports_each_engine_workers_gauges_from_its_first_scrape() {
    // The process, not the library: its recorder must be in place before the pool connects, or
    // the gauges set as each worker joins are lost and the dashboard's worker panel stays empty.
    let _serial = SERIAL.lock().await;
    let engine = LlamaServer::start(1).await;
    let http = LlamaServer::free_port();
    let mut gateway = std::process::Command::new(gateway_exe())
        .args(["--listen", "127.0.0.1:0", "--http-listen", &format!("127.0.0.1:{http}"), "--log", "warn", "--engine", &format!("llamacpp={}", engine.url())])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let metrics = loop {
        if let Ok(r) = reqwest::get(format!("http://127.0.0.1:{http}/metrics")).await {
            break r.text().await.unwrap();
        }
        assert!(t.elapsed() < Duration::from_secs(120), "the gateway's side port never answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    gateway.kill().unwrap();
    gateway.wait().unwrap();
    let label = engine.url();
    for (name, want) in [("duet_gateway_engine_member", 1.0), ("duet_gateway_engine_healthy", 1.0), ("duet_gateway_engine_breaker_state", 0.0)] {
        let line = metrics.lines().find(|l| l.starts_with(name) && l.contains(&format!("worker=\"{label}\"")));
        assert!(line.is_some(), "{name} for {label} missing from:\n{metrics}");
        assert_eq!(metric_for(&metrics, name, &label, ""), want, "{name}");
    }
}
