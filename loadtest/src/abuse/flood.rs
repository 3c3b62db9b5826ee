//! The `fair-flood` scenario of `loadtest abuse`: one device floods, 20 behave.
//!
//! One device (one identity, one connection from the attacker's address) runs 40 sessions,
//! each a 64-token `Full` then 16-token deltas, as fast as answers come (after `Busy` it waits
//! at most 100 ms, not the hint). Twenty well-behaved devices (from the probe's address), one
//! session each, send a 32-token `Full` then 5-token deltas, one at a time, 500 ms apart
//! (after `Busy`, the hint, 50 ms to 2 s, as the edge does), starting 50 ms apart (twenty
//! 32-token `Full`s at once are over a second of prefill at the simulated cost by themselves).
//! After `Busy` or `Expired` a device sends a delta (the gateway applied its sync), after a
//! failure a `Full`. The flood starts 1 s before them and lasts until they stop.
//!
//! On the engine path (`--engine`) the pause is sized to the engine instead: a CPU engine
//! answers a few escalations a second, and twenty devices 500 ms apart would ask several times
//! that by themselves, so no share of it could be served and the shares would say nothing.
//! Before the flood, four sessions of a calibrating device measure the engine's capacity in the
//! well-behaved shape (a warm `Full`, then 5-token deltas in closed loop for 5 s, 30 s
//! deadlines: escalations answered per second), and the well-behaved devices pause so that
//! together they offer `--fair-behaved-load` of it (half by default: their max-min fair share is
//! then all they ask, and the flood's is the other half), pausing at most so long that the
//! pause and a deadline stay a second within the gateway's session idle time. They also start
//! further apart: a lone 32-token `Full` is timed on the idle engine first, and they come so far
//! apart that their first `Full`s too offer that share of it ([`behaved_spacing`]). The flood is
//! unchanged: it asks as fast as it is answered, many times the capacity.
//!
//! While both run, each device's LLM tokens are counted from what it sees: an answered
//! escalation is served the tokens its context grew by since the device's previous escalation
//! (a `Full` sent again after a failure: all of it) plus the one generated; every escalation
//! sent is offered the same. A device's fair share
//! is max-min fair (water-filling) over the tokens all devices were served: a device that asks
//! for less than an equal split is owed all it asked for, the rest is split among the others.
//! The report gives each well-behaved device's served / fair share (the claim: at least 0.9),
//! the flood's share of all tokens, and what was lost (no answer, or an answer that is not a
//! token, `Busy` or `Expired`, the first few of them kept), and, on the engine path (`--engine
//! KIND=URL`: `deploy/bench/fair_flood.sh`), how often the gateway's breaker to the worker
//! opened. When nothing was served at all every fair share is 0 and the ratios read 1.0: read
//! them with `tokens_served`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::protocol::{ContextSync, Frame, TokenIds};
use serde::Serialize;
use serde_json::json;

use super::{breaker_opened, classify, escalate, http_get, labelled, metric, request, Answer, Run, Tally};

/// Well-behaved devices.
const BEHAVED: usize = 20;
/// The flooding device's sessions.
const FLOOD_SESSIONS: u64 = 40;
/// A well-behaved device's pause between escalations (on the engine path, at least this).
const THINK: Duration = Duration::from_millis(500);
/// Sessions measuring the engine's capacity (as many lanes).
const CALIBRATION_LANES: u64 = 4;
/// How long the capacity is measured, after each lane's warm `Full`.
const CALIBRATE: Duration = Duration::from_secs(5);
/// Deadline while the capacity is measured, ms.
const CALIBRATION_DEADLINE_MS: u32 = 30_000;
/// How far apart the well-behaved devices start on the embedded path (on the engine path,
/// at least this: [`behaved_spacing`]).
const START_SPACING: Duration = Duration::from_millis(50);
/// The flood's head start.
const HEAD_START: Duration = Duration::from_secs(1);
/// Odd answers (neither a token, `Busy` nor `Expired`) kept per session for the report.
const ODD_KEPT: usize = 3;

/// One device's shape of traffic.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// Tokens of the first `Full`.
    first: usize,
    /// Tokens each later escalation adds.
    delta: usize,
    /// Deadline per escalation, ms.
    deadline_ms: u32,
    /// Whether it honours `Busy`'s hint (else it waits at most 100 ms).
    honours_busy: bool,
    /// Pause after an answer other than `Busy`.
    think: Duration,
}

/// What one session saw.
#[derive(Debug, Default, Clone, Serialize)]
struct Seen {
    offered_tokens: u64,
    served_tokens: u64,
    answers: Tally,
    /// The first few answers that were neither a token, `Busy` nor `Expired`.
    odd: Vec<String>,
}

/// One session escalating with `shape` until `stop_at`; tokens count only between `from` and
/// `stop_at` (answers to escalations sent in that window).
async fn session(conn: quinn::Connection, session_id: u64, salt: u32, shape: Shape, from: Instant, stop_at: Instant, flood_served: Option<Arc<AtomicU64>>) -> Seen {
    let mut seen = Seen::default();
    let mut held: Option<usize> = None;
    let mut len = shape.first;
    let mut sent_len = 0usize;
    let mut seq = 0u32;
    let token = |i: u32| 300 + (i * 13 + salt) % 4000;
    while Instant::now() < stop_at {
        if len > 3500 {
            // A long conversation starts over (a new context) rather than reach the limit.
            (len, held, sent_len) = (shape.first, None, 0);
        }
        let context = match held {
            Some(h) => ContextSync::Delta { base_len: h as u32, tokens: TokenIds((h as u32..len as u32).map(token).collect()) },
            None => ContextSync::Full { tokens: TokenIds((0..len as u32).map(token).collect()) },
        };
        let tokens = (len - sent_len.min(len)) as u64 + 1;
        sent_len = len;
        let counted = Instant::now() >= from;
        let t = Instant::now();
        let reply = request(&conn, &escalate(session_id, seq, context, shape.deadline_ms), Duration::from_millis(u64::from(shape.deadline_ms) + 10_000)).await;
        seq += 1;
        let answer = classify(&reply);
        if counted {
            if matches!(answer, Answer::OtherError | Answer::Silence) && seen.odd.len() < ODD_KEPT {
                seen.odd.push(match &reply {
                    Ok(frame) => format!("{frame:?}").chars().take(160).collect(),
                    Err(e) => e.to_string(),
                });
            }
            seen.offered_tokens += tokens;
            seen.answers.add(answer, t.elapsed(), shape.deadline_ms);
            if answer == Answer::Token {
                seen.served_tokens += tokens;
                if let Some(f) = &flood_served {
                    f.fetch_add(tokens, Ordering::Relaxed);
                }
            }
        }
        held = matches!(answer, Answer::Token | Answer::Busy | Answer::Expired).then_some(len);
        if held.is_none() {
            sent_len = 0;
        }
        len += shape.delta;
        let pause = match reply {
            Ok(Frame::Busy { retry_after_ms, .. }) if shape.honours_busy => Duration::from_millis(u64::from(retry_after_ms).clamp(50, 2000)),
            Ok(Frame::Busy { retry_after_ms, .. }) => Duration::from_millis(u64::from(retry_after_ms).min(100)),
            _ => shape.think,
        };
        tokio::time::sleep(pause).await;
    }
    seen
}

/// Max-min fair shares of `capacity` tokens among devices asking for `demands`.
fn water_fill(demands: &[u64], capacity: u64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by_key(|&i| demands[i]);
    let mut fair = vec![0.0; demands.len()];
    let mut left = capacity as f64;
    for (k, &i) in order.iter().enumerate() {
        let level = left / (order.len() - k) as f64;
        fair[i] = (demands[i] as f64).min(level);
        left -= fair[i];
    }
    fair
}

/// One well-behaved device's result.
#[derive(Debug, Serialize)]
struct Behaved {
    device: String,
    offered_tokens: u64,
    served_tokens: u64,
    fair_share_tokens: f64,
    of_fair_share: f64,
    answers: Tally,
}

/// The engine's capacity in the well-behaved shape: escalations answered per second by
/// [`CALIBRATION_LANES`] sessions in closed loop, and LLM tokens served per second; and how
/// long one well-behaved `Full` takes on the idle engine.
#[derive(Debug, Serialize)]
struct Capacity {
    escalations_per_s: f64,
    tokens_per_s: f64,
    answers: Tally,
    full_ms: f64,
}

/// Measure [`Capacity`] from a device of its own (see the module docs).
async fn calibrate(run: &Run) -> anyhow::Result<Capacity> {
    let conn = run.device.connect("calibrating-device").await?;
    let shape = Shape { first: 32, delta: 5, deadline_ms: CALIBRATION_DEADLINE_MS, honours_busy: true, think: Duration::ZERO };
    // One `Full` alone first: what a well-behaved device's first escalation costs the engine.
    let context = ContextSync::Full { tokens: TokenIds((0..shape.first as u32).map(|i| 300 + (i * 13 + 1999) % 4000).collect()) };
    let t = Instant::now();
    let reply = request(&conn, &escalate(CALIBRATION_LANES + 1, 0, context, CALIBRATION_DEADLINE_MS), Duration::from_millis(u64::from(CALIBRATION_DEADLINE_MS))).await;
    anyhow::ensure!(classify(&reply) == Answer::Token, "the engine did not answer a lone 32-token Full in {CALIBRATION_DEADLINE_MS} ms: {reply:?}");
    let full_ms = t.elapsed().as_secs_f64() * 1e3;
    // Each lane's first escalation (its `Full`) goes before `from`: only warm deltas count.
    let from = Instant::now() + Duration::from_secs(2);
    let stop_at = from + CALIBRATE;
    let lanes: Vec<_> = (0..CALIBRATION_LANES).map(|s| tokio::spawn(session(conn.clone(), s + 1, 2000 + s as u32, shape, from, stop_at, None))).collect();
    let (mut answers, mut tokens) = (Tally::default(), 0u64);
    for lane in lanes {
        let seen = lane.await?;
        merge(&mut answers, &seen.answers);
        tokens += seen.served_tokens;
    }
    conn.close(0u32.into(), b"calibrated");
    let secs = CALIBRATE.as_secs_f64();
    Ok(Capacity { escalations_per_s: answers.token as f64 / secs, tokens_per_s: tokens as f64 / secs, answers, full_ms })
}

/// The well-behaved devices' pause for them to offer `load` of `capacity` escalations per
/// second together: at least [`THINK`], at most `longest` (a session idle longer than the
/// gateway's idle time is dropped, and its next delta finds nothing).
fn behaved_think(capacity: f64, load: f64, longest: Duration) -> Duration {
    let longest = longest.max(THINK).as_secs_f64();
    let rate = capacity * load / BEHAVED as f64;
    if !(rate.is_finite() && rate > 0.0) {
        return Duration::from_secs_f64(longest);
    }
    Duration::from_secs_f64((1.0 / rate).clamp(THINK.as_secs_f64(), longest))
}

/// How far apart the well-behaved devices start: their first escalations are `Full`s, each
/// `full_ms` of the idle engine's time, and so that these too offer at most `load` of it they
/// come `full_ms / load` apart (at least [`START_SPACING`], as on the embedded path; at most so
/// far apart that all have started within the first half of a run of `secs`). Twenty devices
/// starting within a second ask a CPU engine for many times what it prefills in a deadline,
/// flood or no flood, and a device whose first `Full` goes unanswered has lost most of what
/// it asks in a run: that burst would decide the shares, not the flood.
fn behaved_spacing(full_ms: f64, load: f64, secs: u64) -> Duration {
    let most = Duration::from_secs(secs).as_secs_f64() / 2.0 / BEHAVED as f64;
    let spacing = full_ms / 1e3 / load;
    if !(spacing.is_finite() && spacing > 0.0) {
        return START_SPACING;
    }
    Duration::from_secs_f64(spacing.min(most).max(START_SPACING.as_secs_f64()))
}

/// Run the scenario.
pub(super) async fn fair_flood(run: &Run) -> anyhow::Result<serde_json::Value> {
    let deadline_ms = run.args.probe_deadline_ms;
    let secs = run.args.scenario_secs;
    let capacity = match run.args.engines.is_empty() {
        true => None,
        false => Some(calibrate(run).await?),
    };
    // A pause and a deadline within the gateway's session idle time, with a second to spare.
    let longest = Duration::from_secs(super::SESSION_IDLE_SECS).saturating_sub(Duration::from_millis(u64::from(deadline_ms) + 1000));
    let think = capacity.as_ref().map_or(THINK, |c| behaved_think(c.escalations_per_s, run.args.fair_behaved_load, longest));
    let spacing = capacity.as_ref().map_or(START_SPACING, |c| behaved_spacing(c.full_ms, run.args.fair_behaved_load, secs));
    let refused = |reason: &'static str| async move { labelled(run.gw.http, "duet_gateway_admission_refused_total", reason).await };
    let (share_before, reserved_before) = (refused("share").await, refused("reserved").await);
    let (cost_before, capacity_before) = (refused("cost").await, refused("capacity").await);
    let opened_before = breaker_opened(run.gw.http).await;
    let start = Instant::now();
    let from = start + HEAD_START;
    let stop_at = from + Duration::from_secs(secs);
    // The flood: one device, one connection, many sessions.
    let flood_conn = run.attacker.connect("flood-device").await?;
    let flood_shape = Shape { first: 64, delta: 16, deadline_ms, honours_busy: false, think: Duration::from_millis(5) };
    let flood_served = Arc::new(AtomicU64::new(0));
    let mut flood = Vec::new();
    for s in 0..FLOOD_SESSIONS {
        flood.push(tokio::spawn(session(flood_conn.clone(), s + 1, s as u32, flood_shape, from, stop_at, Some(flood_served.clone()))));
    }
    tokio::time::sleep(HEAD_START).await;
    // The well-behaved devices.
    let behaved_shape = Shape { first: 32, delta: 5, deadline_ms, honours_busy: true, think };
    let mut behaved = Vec::new();
    let mut conns = Vec::new();
    for d in 0..BEHAVED {
        let conn = run.device.connect(&format!("behaved-{d}")).await?;
        conns.push(conn.clone());
        let start_at = tokio::time::Instant::now() + spacing * d as u32;
        behaved.push(tokio::spawn(async move {
            tokio::time::sleep_until(start_at).await;
            session(conn, 1, 1000 + d as u32, behaved_shape, from, stop_at, None).await
        }));
    }
    // The devices holding work while both run: waiting in the batcher's fair queue, or in
    // flight on the engine path (a gateway serves one path, the other's gauge stays 0).
    let backlogged = Arc::new(Mutex::new(Vec::<f64>::new()));
    while Instant::now() < stop_at {
        let b = metric(run.gw.http, "duet_gateway_fair_backlogged_devices").await + metric(run.gw.http, "duet_gateway_engine_share_devices_in_flight").await;
        backlogged.lock().unwrap_or_else(|p| p.into_inner()).push(b);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut flood_seen = Seen::default();
    for t in flood {
        let s = t.await?;
        flood_seen.offered_tokens += s.offered_tokens;
        flood_seen.served_tokens += s.served_tokens;
        merge(&mut flood_seen.answers, &s.answers);
        flood_seen.odd.extend(s.odd.into_iter().take(ODD_KEPT.saturating_sub(flood_seen.odd.len())));
    }
    let mut seen = Vec::new();
    for t in behaved {
        seen.push(t.await?);
    }
    flood_conn.close(0u32.into(), b"done");
    for c in &conns {
        c.close(0u32.into(), b"done");
    }
    // Fair shares over everything served while both ran.
    let mut demands: Vec<u64> = seen.iter().map(|s| s.offered_tokens).collect();
    demands.push(flood_seen.offered_tokens);
    let total: u64 = seen.iter().map(|s| s.served_tokens).sum::<u64>() + flood_seen.served_tokens;
    let fair = water_fill(&demands, total);
    let devices: Vec<Behaved> = seen
        .iter()
        .enumerate()
        .map(|(d, s)| Behaved {
            device: format!("behaved-{d}"),
            offered_tokens: s.offered_tokens,
            served_tokens: s.served_tokens,
            fair_share_tokens: fair[d],
            of_fair_share: if fair[d] > 0.0 { s.served_tokens as f64 / fair[d] } else { 1.0 },
            answers: s.answers.clone(),
        })
        .collect();
    let ratios: Vec<f64> = devices.iter().map(|d| d.of_fair_share).collect();
    let min_ratio = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let lost: usize = seen.iter().chain(std::iter::once(&flood_seen)).map(|s| s.answers.no_answer + s.answers.other_error).sum();
    let backlogged = backlogged.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let after = run.after(0.0, None, Duration::from_secs(20)).await;
    let ready = http_get(run.gw.http, "/readyz").await.map(|(s, _)| s == 200).unwrap_or(false);
    let behaved_offered: u64 = seen.iter().map(|s| s.offered_tokens).sum();
    Ok(json!({
        "behaved_devices": BEHAVED, "flood_sessions": FLOOD_SESSIONS, "secs": secs,
        "capacity": capacity, "behaved_think_ms": think.as_millis() as u64, "behaved_start_spacing_ms": spacing.as_millis() as u64,
        "offered_tokens_per_s": { "behaved": behaved_offered as f64 / secs as f64, "flood": flood_seen.offered_tokens as f64 / secs as f64 },
        "tokens_served": total,
        "flood": { "offered_tokens": flood_seen.offered_tokens, "served_tokens": flood_seen.served_tokens,
            "share_of_tokens": flood_seen.served_tokens as f64 / total.max(1) as f64, "fair_share_tokens": fair[BEHAVED], "answers": flood_seen.answers, "odd_answers": flood_seen.odd },
        "behaved_share_of_tokens": (total - flood_seen.served_tokens) as f64 / total.max(1) as f64,
        "behaved_of_fair_share_min": min_ratio,
        "behaved_of_fair_share_median": median(&ratios),
        "behaved_at_least_0_9": ratios.iter().filter(|&&r| r >= 0.9).count(),
        "lost": lost,
        "behaved_odd_answers": seen.iter().flat_map(|s| s.odd.iter()).take(ODD_KEPT).collect::<Vec<_>>(),
        "refused": { "share": refused("share").await - share_before, "reserved": refused("reserved").await - reserved_before, "cost": refused("cost").await - cost_before, "capacity": refused("capacity").await - capacity_before },
        "engine_breaker_opened": breaker_opened(run.gw.http).await - opened_before,
        "fair_backlogged_devices_max": backlogged.iter().copied().fold(0.0, f64::max),
        "ready_after": ready,
        "devices": devices,
        "after": after,
    }))
}

fn merge(into: &mut Tally, t: &Tally) {
    into.token += t.token;
    into.busy += t.busy;
    into.expired += t.expired;
    into.other_error += t.other_error;
    into.no_answer += t.no_answer;
    into.late += t.late;
    into.latest_after_deadline_ms = into.latest_after_deadline_ms.max(t.latest_after_deadline_ms);
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::{behaved_spacing, behaved_think, water_fill, START_SPACING, THINK};
    use std::time::Duration;

    #[test]
    fn the_behaved_devices_pause_so_that_together_they_offer_the_asked_share_of_the_capacity() {
        let idle = Duration::from_secs(8);
        // 8 escalations a second, half of it for 20 devices: one each every 5 s.
        assert_eq!(behaved_think(8.0, 0.5, idle), Duration::from_secs(5));
        assert_eq!(behaved_think(1_000.0, 0.5, idle), THINK, "never faster than on the embedded path");
        assert_eq!(behaved_think(4.0, 0.5, idle), idle, "never so slow that the gateway drops the session between escalations");
        assert_eq!(behaved_think(0.0, 0.5, idle), idle, "an engine that answered nothing");
    }

    #[test]
    fn the_behaved_devices_start_so_far_apart_that_their_first_fulls_offer_the_asked_share_of_the_engine() {
        // A `Full` of 700 ms, half the engine: one every 1.4 s.
        assert_eq!(behaved_spacing(700.0, 0.5, 120), Duration::from_millis(1400));
        assert_eq!(behaved_spacing(1.0, 0.5, 120), START_SPACING, "never closer than on the embedded path");
        assert_eq!(behaved_spacing(5_000.0, 0.5, 40), Duration::from_secs(1), "all started within the first half of the run");
        assert_eq!(behaved_spacing(f64::NAN, 0.5, 40), START_SPACING);
    }

    #[test]
    fn a_device_asking_less_than_an_equal_split_is_owed_all_it_asked() {
        let fair = water_fill(&[10, 10, 1000], 120);
        assert_eq!(fair, vec![10.0, 10.0, 100.0]);
        let fair = water_fill(&[100, 100], 100);
        assert_eq!(fair, vec![50.0, 50.0]);
    }
}
