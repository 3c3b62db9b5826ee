//! The `engine-overload` scenario of `loadtest abuse`: the gateway in front of a real engine
//! (`--engine KIND=URL`, e.g. a llama-server) offered three times what the engine answers, and
//! what the devices hear: tokens in time, `Busy` at once, or a deadline missed.
//!
//! 48 sessions over 8 devices (one connection each, from the attacker's address) each send a
//! 32-token `Full` first (deadline 30 s, 4 at a time). Then the engine's capacity is measured
//! in the same shape: for 5 s, 4 lanes send 5-token deltas in closed loop, each to the next
//! session in turn (so the engine's prefix cache serves them as it will under load), deadline
//! 30 s: capacity = escalations answered per second. Then, for the scenario's time, escalations
//! arrive at 3x that rate (open loop: a fixed interval, whatever the answers; after `Busy` a
//! session is free for the next arrival at once, where a real device would wait out the hint,
//! so the overload holds), each a 5-token delta of an idle session with the probe deadline
//! (`--probe-deadline-ms`); an arrival that finds no idle session is counted, not sent.
//!
//! The report counts every answer: a token within its deadline, `Busy` (and how soon it came),
//! `DeadlineExpired`, any answer that came later than the deadline (+ 50 ms), none; the share
//! of escalations that missed their deadline (expired, late or unanswered); the gateway's
//! refusals by reason, how often its circuit breaker to the worker opened, and its queue age
//! (`duet_gateway_queue_age_seconds`, sampled every 250 ms) while the overload lasts. Run it with the gateway's `--engine-admission=off`
//! (`--gateway-arg`) for the count bound alone, the baseline of
//! docs/src/benchmarks/fairness-overload.md ("Engine path under 3x overload").

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::protocol::{ContextSync, TokenIds};
use serde::Serialize;
use serde_json::json;

use super::{breaker_opened, classify, escalate, labelled, metric, request, Answer, Run, Tally};
use common::stats::percentile;

/// Sessions the arrivals are spread over.
const SESSIONS: usize = 48;
/// Devices (connections) the sessions belong to.
const DEVICES: usize = 8;
/// Concurrent escalations while the sessions are created and the capacity measured.
const LANES: usize = 4;
/// Tokens of a session's first escalation (`Full`).
const FIRST: usize = 32;
/// Tokens each later escalation adds (a `Delta`).
const DELTA: usize = 5;
/// How long the capacity is measured.
const CALIBRATE: Duration = Duration::from_secs(5);
/// Offered load, as a multiple of the measured capacity.
const OVERLOAD: f64 = 3.0;
/// Deadline while sessions are created and the capacity measured, ms.
const LONG_DEADLINE_MS: u32 = 30_000;

/// One simulated session.
struct Session {
    conn: quinn::Connection,
    id: u64,
    salt: u32,
    /// Its context's length.
    len: usize,
    /// What the gateway holds of it (after a token, `Busy` or `Expired`).
    held: Option<usize>,
    seq: u32,
}

impl Session {
    /// Escalate once with `deadline_ms`: its context grows by [`DELTA`] after the first; the
    /// answer, how long it took, and what an answer that is neither a token, `Busy` nor
    /// `Expired` said.
    async fn ask(&mut self, deadline_ms: u32) -> (Answer, Duration, Option<String>) {
        let salt = self.salt;
        let token = |i: u32| 300 + (i * 13 + salt) % 4000;
        let context = match self.held {
            Some(h) => ContextSync::Delta { base_len: h as u32, tokens: TokenIds((h as u32..self.len as u32).map(token).collect()) },
            None => ContextSync::Full { tokens: TokenIds((0..self.len as u32).map(token).collect()) },
        };
        let t = Instant::now();
        let reply = request(&self.conn, &escalate(self.id, self.seq, context, deadline_ms), Duration::from_millis(u64::from(deadline_ms) + 10_000)).await;
        let took = t.elapsed();
        self.seq += 1;
        let answer = classify(&reply);
        let odd = matches!(answer, Answer::OtherError | Answer::Silence).then(|| match &reply {
            Ok(frame) => format!("{frame:?}").chars().take(160).collect(),
            Err(e) => e.to_string(),
        });
        // After a failure the gateway may not hold the context: send it whole next time.
        self.held = matches!(answer, Answer::Token | Answer::Busy | Answer::Expired).then_some(self.len);
        if self.len > 3000 {
            (self.len, self.held) = (FIRST, None);
        } else {
            self.len += DELTA;
        }
        (answer, took, odd)
    }
}

/// Sessions waiting for their next escalation, in turn.
type Idle = Arc<Mutex<VecDeque<Session>>>;

fn take(idle: &Idle) -> Option<Session> {
    idle.lock().unwrap_or_else(|p| p.into_inner()).pop_front()
}

fn put(idle: &Idle, s: Session) {
    idle.lock().unwrap_or_else(|p| p.into_inner()).push_back(s);
}

/// What one phase saw.
#[derive(Debug, Default, Clone, Serialize)]
struct Seen {
    answers: Tally,
    /// Tokens answered within their deadline.
    in_time: usize,
    token_ms: Vec<f64>,
    busy_ms: Vec<f64>,
    /// The first few answers that were neither a token, `Busy` nor `Expired`.
    odd: Vec<String>,
}

impl Seen {
    fn add(&mut self, (a, took, odd): (Answer, Duration, Option<String>), deadline_ms: u32) {
        self.answers.add(a, took, deadline_ms);
        if let Some(odd) = odd.filter(|_| self.odd.len() < 5) {
            self.odd.push(odd);
        }
        let ms = took.as_secs_f64() * 1e3;
        match a {
            Answer::Token => {
                self.token_ms.push(ms);
                if ms <= f64::from(deadline_ms) {
                    self.in_time += 1;
                }
            }
            Answer::Busy => self.busy_ms.push(ms),
            _ => {}
        }
    }
}

/// `LANES` tasks escalating from the sessions in turn with `deadline_ms` until `until` (each
/// session once, with `once`); what they saw.
async fn closed_loop(idle: &Idle, deadline_ms: u32, until: Instant, once: bool) -> Seen {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut lanes = Vec::new();
    for _ in 0..LANES {
        let (idle, seen) = (idle.clone(), seen.clone());
        lanes.push(tokio::spawn(async move {
            let mut done: Vec<Session> = Vec::new();
            while Instant::now() < until {
                let Some(mut s) = take(&idle) else { break };
                let answer = s.ask(deadline_ms).await;
                seen.lock().unwrap_or_else(|p| p.into_inner()).add(answer, deadline_ms);
                match once {
                    true => done.push(s),
                    false => put(&idle, s),
                }
            }
            done
        }));
    }
    for lane in lanes {
        for s in lane.await.unwrap_or_default() {
            put(idle, s);
        }
    }
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    seen
}

/// Run the scenario.
pub(super) async fn engine_overload(run: &Run) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(!run.args.engines.is_empty(), "engine-overload needs an engine: --engine KIND=URL (e.g. llamacpp=http://127.0.0.1:8090)");
    let deadline_ms = run.args.probe_deadline_ms;
    let idle: Idle = Arc::default();
    let mut conns = Vec::new();
    for d in 0..DEVICES {
        conns.push(run.attacker.connect(&format!("overload-{d}")).await?);
    }
    for i in 0..SESSIONS {
        let conn = conns[i % DEVICES].clone();
        put(&idle, Session { conn, id: 1 + (i / DEVICES) as u64, salt: i as u32 * 7919, len: FIRST, held: None, seq: 0 });
    }
    let t = Instant::now();
    let created = closed_loop(&idle, LONG_DEADLINE_MS, Instant::now() + Duration::from_secs(600), true).await;
    let created_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let calibration = closed_loop(&idle, LONG_DEADLINE_MS, t + CALIBRATE, false).await;
    let calibration_s = t.elapsed().as_secs_f64();
    let capacity = calibration.answers.token as f64 / calibration_s.max(1e-3);
    anyhow::ensure!(capacity > 0.0, "the engine answered nothing while its capacity was measured: {:?}", calibration.answers);
    let refused = |reason| labelled(run.gw.http, "duet_gateway_admission_refused_total", reason);
    let opened = || breaker_opened(run.gw.http);
    let before = [refused("cost").await, refused("capacity").await, refused("share").await, metric(run.gw.http, "duet_gateway_escalations_expired_total").await, opened().await];
    let (overload, sent, not_sent, ages, secs) = open_loop(run, &idle, capacity * OVERLOAD, deadline_ms).await;
    let after = [refused("cost").await, refused("capacity").await, refused("share").await, metric(run.gw.http, "duet_gateway_escalations_expired_total").await, opened().await];
    for c in &conns {
        c.close(0u32.into(), b"done");
    }
    let mut s = overload.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let a = &s.answers;
    let missed = a.expired + a.late + a.no_answer;
    let escalations = a.token + a.busy + a.expired + a.other_error + a.no_answer;
    let mut age_samples = ages.clone();
    let probe_after = run.after(0.0, None, Duration::from_secs(20)).await;
    Ok(json!({
        "engines": run.args.engines, "sessions": SESSIONS, "devices": DEVICES, "deadline_ms": deadline_ms,
        "sessions_created": { "secs": created_s, "answers": created.answers, "odd_answers": created.odd },
        "capacity": { "escalations_per_s": capacity, "lanes": LANES, "secs": calibration_s, "answers": calibration.answers.clone(), "odd_answers": calibration.odd.clone(),
            "p50_ms": percentile(&mut calibration.token_ms.clone(), 0.5) },
        "offered": { "per_s": sent as f64 / secs, "times_capacity": sent as f64 / secs / capacity, "sent": sent, "not_sent_no_idle_session": not_sent, "secs": secs },
        "answers": a.clone(),
        "odd_answers": s.odd.clone(),
        "tokens_in_time": s.in_time,
        "missed_deadline": missed,
        "missed_deadline_share": missed as f64 / escalations.max(1) as f64,
        "busy_ms": { "p50": percentile(&mut s.busy_ms, 0.5), "max": s.busy_ms.iter().copied().fold(0.0, f64::max) },
        "token_ms": { "p50": percentile(&mut s.token_ms, 0.5), "p99": percentile(&mut s.token_ms, 0.99) },
        "refused_at_gateway": { "cost": after[0] - before[0], "capacity": after[1] - before[1], "share": after[2] - before[2] },
        "expired_at_gateway": after[3] - before[3],
        "breaker_opened": after[4] - before[4],
        "queue_age_s": { "max": ages.iter().copied().fold(0.0, f64::max), "p50": percentile(&mut age_samples, 0.5), "samples": ages.len() },
        "after": probe_after,
    }))
}

/// Escalations arriving at `rate` per second for the scenario's time, each to an idle session
/// with `deadline_ms`, while the gateway's queue age is sampled; what they saw, how many were
/// sent and not sent, the queue ages, and the seconds it ran.
async fn open_loop(run: &Run, idle: &Idle, rate: f64, deadline_ms: u32) -> (Arc<Mutex<Seen>>, usize, usize, Vec<f64>, f64) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop_at = Instant::now() + Duration::from_secs(run.args.scenario_secs);
    let http = run.gw.http;
    let ages = tokio::spawn(async move {
        let mut ages = Vec::new();
        while Instant::now() < stop_at {
            ages.push(metric(http, "duet_gateway_queue_age_seconds").await);
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        ages
    });
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.01)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let (mut sent, mut not_sent) = (0, 0);
    let mut tasks = Vec::new();
    while Instant::now() < stop_at {
        tick.tick().await;
        let Some(mut s) = take(idle) else {
            not_sent += 1;
            continue;
        };
        sent += 1;
        let (idle, seen) = (idle.clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            let answer = s.ask(deadline_ms).await;
            seen.lock().unwrap_or_else(|p| p.into_inner()).add(answer, deadline_ms);
            put(&idle, s);
        }));
    }
    let secs = started.elapsed().as_secs_f64();
    for t in tasks {
        let _ = t.await;
    }
    (seen, sent, not_sent, ages.await.unwrap_or_default(), secs)
}
