//! Admission on the engine path against a live engine: one llama-server worker (the 0.5B GGUF,
//! one thread, two slots; built by deploy/engines/llamacpp/build, started by the system tests'
//! harness) offered a burst of long escalations it cannot all answer before their deadline.
//! With admission by cost (the default) those it cannot answer in time hear `Busy` at once,
//! long before their deadline; with the count bound alone (`--engine-admission=off`) they are
//! sent and answered `DeadlineExpired` when the deadline passes.
//!
//! Outcomes are asserted, not timings finer than the deadline, so a busy machine changes how
//! many are refused, not the verdict: every escalation is answered, the refusals are `Busy`,
//! each within half its deadline, and at most an eighth of the burst (those admitted at the
//! edge of the estimate) waits out its deadline, against at least half without admission.

mod support;

#[allow(dead_code)]
#[path = "../../system-tests/tests/support/engines.rs"]
mod engines;

use std::time::{Duration, Instant};

use cloud_gateway::engine::connect::{connect, expected_vocabulary, tokenizer_path};
use cloud_gateway::engine::pool::PoolConfig;
use cloud_gateway::Gateway;
use common::protocol::{ContextSync, ErrorCode, Frame, TokenIds, WireSampling};
use engines::LlamaServer;
use support::*;

/// The GGUF the harness serves ([`engines::llm_gguf`]) and whose tokenizer the devices use: the
/// small one, quick to load.
const LLM: &str = "qwen2.5-coder-0.5b-instruct";
/// Escalations in the burst.
const BURST: usize = 32;
/// Tokens of each (a `Full`: distinct tokens, so the engine's prefix cache holds none).
const TOKENS: usize = 48;
/// Their deadline.
const DEADLINE: Duration = Duration::from_millis(2000);
/// Devices the burst comes from.
const DEVICES: usize = 4;

/// What the burst heard.
#[derive(Debug, Default)]
struct Heard {
    tokens: usize,
    busy: usize,
    expired: usize,
    /// Any other answer, or none.
    other: Vec<String>,
    /// The slowest `Busy`.
    busy_max: Duration,
}

fn full(session: u64, deadline: Duration) -> Frame {
    let tokens = (0..TOKENS as u64).map(|i| 1000 + ((session * 131 + i * 7) % 20_000) as u32).collect();
    Frame::Escalate { session_id: session, seq: 0, context: ContextSync::Full { tokens: TokenIds(tokens) }, sampling: WireSampling::default(), deadline_ms: deadline.as_millis() as u32 }
}

/// A gateway over `engine` (admission by cost or not), a few long escalations one after the
/// other with a long deadline (the worker's cost model learns from them), then the burst at
/// once; what the burst heard.
async fn burst(engine: &LlamaServer, by_cost: bool) -> Heard {
    let dir = tempfile::tempdir().unwrap();
    let expected = expected_vocabulary(&tokenizer_path(LLM)).unwrap();
    let pool = PoolConfig { engines: vec![engine.spec()], admit_by_cost: by_cost, ..PoolConfig::default() };
    let (pool, facts) = connect(pool, &expected, Duration::from_secs(60)).await.unwrap();
    let gw = Gateway::start_with_engines(test_config(dir.path()), pool, facts.clone()).await.unwrap();
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));
    let devices: Vec<_> = (0..DEVICES).map(|d| link_with(addr, &ca, &format!("device-{d}"), "", &facts.tokenizer_fingerprint)).collect();
    for (i, d) in devices.iter().enumerate() {
        d.wait_up(Duration::from_secs(10)).await.expect("the device connects");
        let answer = d.request(&full(1000 + i as u64, Duration::from_secs(30)), Instant::now() + Duration::from_secs(40)).await.unwrap().0;
        assert!(matches!(answer, Frame::Token { .. }), "one at a time, the worker answers: {answer:?}");
    }
    let asks = (0..BURST).map(|i| {
        let device = devices[i % DEVICES].clone();
        async move {
            let t = Instant::now();
            let answer = device.request(&full(i as u64 + 1, DEADLINE), Instant::now() + DEADLINE + Duration::from_secs(10)).await;
            (answer.map(|(frame, _)| frame), t.elapsed())
        }
    });
    let tasks: Vec<_> = asks.map(tokio::spawn).collect();
    let mut heard = Heard::default();
    for task in tasks {
        match task.await.unwrap() {
            (Ok(Frame::Token { .. }), _) => heard.tokens += 1,
            (Ok(Frame::Busy { .. }), took) => {
                heard.busy += 1;
                heard.busy_max = heard.busy_max.max(took);
            }
            (Ok(Frame::Error { code: ErrorCode::DeadlineExpired, .. }), _) => heard.expired += 1,
            (other, _) => heard.other.push(format!("{other:?}")),
        }
    }
    gw.shutdown().await;
    heard
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overloaded_engine_worker_refuses_busy_before_the_deadline_where_the_count_bound_let_it_time_out() {
    let engine = LlamaServer::start(2).await;
    let with = burst(&engine, true).await;
    assert!(with.other.is_empty(), "every escalation is answered with a token, Busy or DeadlineExpired: {with:?}");
    assert!(with.busy >= BURST / 2, "the worker cannot answer most of the burst in time: {with:?}");
    assert!(with.busy_max < DEADLINE / 2, "Busy comes at once, not at the deadline: {with:?}");
    assert!(with.expired <= BURST / 8, "at most the edge of the estimate waits out its deadline: {with:?}");
    assert!(with.tokens >= 1, "the worker keeps answering what fits: {with:?}");
    let without = burst(&engine, false).await;
    eprintln!("with admission by cost: {with:?}\nby count alone: {without:?}");
    assert!(without.expired >= BURST / 2, "by count alone the burst is sent and times out: {without:?}");
    assert!(with.expired < without.expired, "{with:?} against {without:?}");
}
