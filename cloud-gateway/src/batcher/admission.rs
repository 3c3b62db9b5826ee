//! Admission by estimated cost, and readiness, as plain functions of figures passed in (time
//! included), so the rules are unit-tested without a runtime: [`decide`] takes one
//! [`Snapshot`] (what is admitted, the escalation's session's prefill state, the cost model,
//! `now` and the deadline) and returns a [`Decision`]; the batcher's handle only reads the
//! snapshot and applies the decision.
//!
//! The count bound (`queue_capacity`) alone let a queue of slow work hold every escalation
//! until its deadline passed: devices waited out their deadlines instead of hearing `Busy`.
//! Here each escalation is admitted only if the work queued ahead of it, plus its own
//! prefill, is estimated to finish before its deadline ([`admit`]), with a [`CostModel`]
//! learned from the batches the backend ran: a fixed time per batch plus a time per token of
//! prefill. A refusal says how long the queue ahead should take to clear (`retry_after_ms`).
//! The cost model, the test against the deadline and the hint are the seam's
//! ([`crate::dispatch::admission`]): the engine pool refuses by the same rule.
//!
//! Work a device has already paid for is not refused: an escalation's own cost is only the
//! part of its context that neither the backend holds nor its session's earlier admitted work
//! (its prompt's pre-sync, typically) will compute ([`cost`]), and that earlier work is not
//! held against it ([`others`]): the device's deadline already allows for the prefill it sent
//! (ARCHITECTURE.md, "Deadlines"). Without this, a device's first hard token, asked while the
//! gateway still prefilled the same session's prompt, was refused for the prompt's cost twice
//! over, and a CommonsenseQA answer got no cloud token at all.
//!
//! Between devices (with fair sharing on, [`Snapshot::device`]), admission follows the fair
//! cut ([`crate::dispatch::fair`]): an escalation waits for its own device's other work in
//! full but for each other device's only up to as much as its own device has admitted plus
//! its own cost ([`fair_ahead`], fair queueing's bound), so a light device's escalation is
//! admitted behind a flood that would refuse it oldest-first; and once the queue is half full,
//! a device that holds its share of the places (`capacity / devices`, and alone all but an
//! eighth) is refused `Busy` first
//! ([`over_share`]), so a flood cannot take the places a light device would need.
//!
//! [`not_ready`] is what `/readyz` says about the batcher: not ready while it has been
//! saturated (refusing work, not caught up since) for longer than a grace period, or while
//! one batch has been running for too long (a stalled backend); ready again once it has
//! caught up and batches complete.
#![cfg_attr(not(test), deny(clippy::disallowed_methods))]

use std::time::{Duration, Instant};

pub use crate::dispatch::admission::{retry_after_ms, CostModel};
use crate::dispatch::admission::within_deadline;
use crate::dispatch::BusyReason;

/// What is queued or running when an escalation asks to be admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ahead {
    /// Escalations admitted and not yet answered.
    pub rows: usize,
    /// Tokens of prefill of those that fit one batch's cost cap.
    pub tokens: usize,
    /// Escalations among `rows` that do not fit one batch (they run in steps).
    pub long_rows: usize,
    /// Their tokens of prefill.
    pub long_tokens: usize,
    /// Whether sessions wait to be warmed (a warming step may be running).
    pub warming: bool,
}

impl Ahead {
    /// Both amounts of work together.
    pub fn plus(self, o: Ahead) -> Ahead {
        Ahead {
            rows: self.rows + o.rows,
            tokens: self.tokens + o.tokens,
            long_rows: self.long_rows + o.long_rows,
            long_tokens: self.long_tokens + o.long_tokens,
            warming: self.warming || o.warming,
        }
    }

    /// This work without `o` (counts never go below zero; `warming` is kept).
    pub fn minus(self, o: Ahead) -> Ahead {
        Ahead {
            rows: self.rows.saturating_sub(o.rows),
            tokens: self.tokens.saturating_sub(o.tokens),
            long_rows: self.long_rows.saturating_sub(o.long_rows),
            long_tokens: self.long_tokens.saturating_sub(o.long_tokens),
            warming: self.warming,
        }
    }

    /// The work an admitted escalation of `cost` tokens adds, given the cut's cost cap.
    pub fn of(cost: usize, cut: Cut) -> Ahead {
        if cost <= cut.max_batch_tokens {
            Ahead { rows: 1, tokens: cost, ..Ahead::default() }
        } else {
            Ahead { rows: 1, long_rows: 1, long_tokens: cost, ..Ahead::default() }
        }
    }
}

/// One session's prefill state, as the batcher knows it: what the backend has computed and
/// what the session's own admitted work (queued or running) will bring it to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionWork {
    /// Tokens of the session's context the backend has computed (as far as the batcher knows).
    pub computed: usize,
    /// Context length the session's admitted work reaches (0 when none is admitted).
    pub covered: usize,
    /// The session's admitted work not answered yet, in the terms admission weighs.
    pub pending: Ahead,
}

/// Tokens of prefill a new escalation with a context of `len` tokens costs, for a session whose
/// backend state holds `computed` tokens and whose admitted work reaches `covered`: the rest of
/// its context, at least one (a context shorter than both is a new one: all of it).
pub fn cost(len: usize, computed: usize, covered: usize) -> usize {
    let done = computed.max(covered);
    if done <= len { (len - done).max(1) } else { len.max(1) }
}

/// The work ahead of a new escalation that admission weighs: everything admitted (`all`) but
/// the escalation's own session's work (`own`), which its device's deadline already covers.
pub fn others(all: Ahead, own: Ahead) -> Ahead {
    all.minus(own)
}

/// The escalation's device's admitted work (its sessions together) and how many devices have
/// work admitted, for fair sharing between devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceWork {
    /// The device's admitted work not answered yet.
    pub own: Ahead,
    /// Devices with work admitted (the escalation's own among them if `own` is not empty).
    pub devices: usize,
}

impl DeviceWork {
    /// Devices other than the escalation's with work admitted.
    fn others(self) -> usize {
        self.devices.saturating_sub(usize::from(self.own.rows > 0))
    }
}

/// The work ahead of a new escalation of `cost` when the cut shares fairly between devices:
/// its own device's other sessions' work in full (a device's work goes oldest first), and of
/// the other devices' work at most, for each, the escalation's device's admitted work plus
/// its cost (fair queueing's bound: no other device is served more than this one before it).
/// Its own session's work (`own_session`) is left out as in [`others`]. A device whose counter
/// is ahead of the others' waits longer than this says; one back from idle is lifted to them.
pub fn fair_ahead(all: Ahead, own_session: Ahead, device: DeviceWork, cost: usize) -> Ahead {
    let n = device.others();
    let other_devices = all.minus(device.own);
    let rows = n.saturating_mul(device.own.rows + 1);
    let tokens = n.saturating_mul(device.own.tokens + device.own.long_tokens + cost);
    let capped = Ahead {
        rows: other_devices.rows.min(rows),
        tokens: other_devices.tokens.min(tokens),
        long_rows: other_devices.long_rows.min(rows),
        long_tokens: other_devices.long_tokens.min(tokens),
        warming: all.warming,
    };
    capped.plus(device.own.minus(own_session))
}

/// Whether a device holding `device.own` is over its share of a queue of `capacity` places
/// holding `all`: the queue is at least half full and the device holds `capacity / devices`
/// places or more (counting itself among the devices).
pub fn over_share(all: Ahead, device: DeviceWork, capacity: usize) -> bool {
    crate::dispatch::fair::over_share(device.own.rows, device.others(), all.rows, capacity)
}

/// How batches are cut, as far as the estimate needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// Most escalations per batch.
    pub max_batch: usize,
    /// Most tokens of prefill per batch.
    pub max_batch_tokens: usize,
}

/// Admit an escalation of `cost` tokens of prefill with `left` until its deadline, behind
/// `ahead`; `Err(retry_after_ms)` when the estimate says it would miss its deadline.
///
/// The estimate follows the cut ([`super::queue::PendingQueue::cut`]): an escalation that fits
/// one batch waits for the other such escalations ahead and for one step of a long prefill at
/// most, while a long one runs in steps with what the short ones leave. An idle gateway admits
/// any escalation whose own prefill fits its deadline (its batch's fixed time is not held
/// against it: devices' deadlines already allow for the service time).
pub fn admit(model: &CostModel, cut: Cut, ahead: Ahead, cost: usize, left: Duration) -> Result<(), u32> {
    let cap = cut.max_batch_tokens.max(1);
    let (queued_ms, own_ms) = if cost <= cap {
        // A step of a long prefill (or of warming) may be running; with long prefills
        // queued, its own batch is filled up with their steps too.
        let step = if ahead.long_rows > 0 || ahead.warming { cap } else { 0 };
        let own = if ahead.long_rows > 0 { cap } else { cost.saturating_sub(1) };
        let short_rows = ahead.rows.saturating_sub(ahead.long_rows);
        (model.estimate_ms(short_rows, ahead.tokens + step, cut.max_batch), own as f64 * model.token_ms)
    } else {
        let steps = cost.div_ceil(cap);
        (model.estimate_ms(ahead.rows, ahead.tokens + ahead.long_tokens, cut.max_batch), steps as f64 * model.batch_ms + cost as f64 * model.token_ms)
    };
    within_deadline(queued_ms, own_ms, left)
}

/// Everything admission weighs for one escalation, read at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Snapshot {
    /// When the escalation asks to be admitted.
    pub now: Instant,
    /// When its device stops waiting.
    pub deadline: Instant,
    /// Tokens of its context.
    pub context_len: usize,
    /// Its session's prefill state (computed, covered by the session's admitted work).
    pub session: SessionWork,
    /// Everything admitted and not answered yet (its own session's work included).
    pub all: Ahead,
    /// The backend's speed as learned so far.
    pub model: CostModel,
    /// How batches are cut.
    pub cut: Cut,
    /// Most escalations admitted at once.
    pub capacity: usize,
    /// Smoothed backend time per batch, ms (the least a full queue takes to move).
    pub service_ms: u32,
    /// The escalation's device's admitted work, with fair sharing between devices on (`None`:
    /// off, every other session's work counts as ahead of it).
    pub device: Option<DeviceWork>,
}

/// What admission decides for one escalation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Admit it: it costs `cost` tokens of prefill and adds `work` to what is ahead.
    Admit {
        /// Tokens of prefill it costs (at least 1).
        cost: usize,
        /// What it adds to the work ahead of later escalations.
        work: Ahead,
    },
    /// Refuse it with `Busy`.
    Refuse(Refusal),
}

/// Why and for how long an escalation is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The device's wait before escalating again, ms.
    pub retry_after_ms: u32,
    /// Why.
    pub reason: BusyReason,
    /// Refused for its own cost: warm its session's context from this many computed tokens,
    /// so that its next escalation costs only its delta.
    pub warm_from: Option<usize>,
}

/// Admit or refuse the escalation `s` describes: refused when the work ahead of it (other
/// sessions' only: [`others`], or with fair sharing what the fair cut puts ahead of it:
/// [`fair_ahead`]) and its own cost ([`cost`]) would miss its deadline ([`admit`]), when every
/// place is taken ([`full`]), or, with fair sharing, when its device is over its share of a
/// contended queue ([`over_share`]).
pub fn decide(s: &Snapshot) -> Decision {
    let cost = cost(s.context_len, s.session.computed, s.session.covered);
    let ahead = match s.device {
        Some(device) => fair_ahead(s.all, s.session.pending, device, cost),
        None => others(s.all, s.session.pending),
    };
    if let Err(retry_after_ms) = admit(&s.model, s.cut, ahead, cost, s.deadline.saturating_duration_since(s.now)) {
        let warm_from = Some(s.context_len.saturating_sub(cost));
        return Decision::Refuse(Refusal { retry_after_ms, reason: BusyReason::Cost, warm_from });
    }
    if s.all.rows >= s.capacity {
        return Decision::Refuse(full(s));
    }
    if let Some(device) = s.device.filter(|d| over_share(s.all, *d, s.capacity)) {
        // Back once its own work has gone through, at which the others are served as fast.
        let own = device.own;
        let ms = s.model.estimate_ms(own.rows, own.tokens + own.long_tokens, s.cut.max_batch).max(f64::from(s.service_ms));
        return Decision::Refuse(Refusal { retry_after_ms: retry_after_ms(ms), reason: BusyReason::Share, warm_from: None });
    }
    Decision::Admit { cost, work: Ahead::of(cost, s.cut) }
}

/// The refusal of an escalation that finds every place taken: come back once the queue ahead
/// has drained (at least one service time).
pub fn full(s: &Snapshot) -> Refusal {
    let all = s.all;
    let drain_ms = s.model.estimate_ms(all.rows, all.tokens + all.long_tokens, s.cut.max_batch).max(f64::from(s.service_ms));
    Refusal { retry_after_ms: retry_after_ms(drain_ms), reason: BusyReason::Capacity, warm_from: None }
}

/// When the batcher stops being ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadinessPolicy {
    /// Saturated (refusing work and not caught up since) for longer than this: not ready.
    pub saturated_for: Duration,
    /// One batch running for longer than this: the backend is stalled, not ready.
    pub stalled_after: Duration,
}

impl Default for ReadinessPolicy {
    fn default() -> Self {
        Self { saturated_for: Duration::from_secs(2), stalled_after: Duration::from_secs(15) }
    }
}

/// The batcher's load, as `/readyz` sees it (times in ms since the batcher started).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Load {
    /// Now.
    pub now_ms: u64,
    /// Since when work has been refused without the queue catching up since, if it has.
    pub saturated_since_ms: Option<u64>,
    /// Since when the batch now running has run, if one runs.
    pub batch_since_ms: Option<u64>,
}

/// Why the batcher is not ready, if it is not.
pub fn not_ready(policy: &ReadinessPolicy, load: Load) -> Option<String> {
    if let Some(since) = load.batch_since_ms {
        let running = load.now_ms.saturating_sub(since);
        if running > policy.stalled_after.as_millis() as u64 {
            return Some(format!("backend stalled: one batch has run for {:.1} s", running as f64 / 1e3));
        }
    }
    if let Some(since) = load.saturated_since_ms {
        let saturated = load.now_ms.saturating_sub(since);
        if saturated > policy.saturated_for.as_millis() as u64 {
            return Some(format!("saturated: refusing work for {:.1} s", saturated as f64 / 1e3));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn learned() -> CostModel {
        let mut m = CostModel { batch_ms: 0.0, token_ms: 0.0 };
        m.observe(16, 16, 60.0); // sixteen one-token escalations
        m.observe(1, 201, 60.0 + 200.0 * 18.0); // one 200-token prefill
        m
    }

    #[test]
    fn the_cost_model_learns_batch_time_and_prefill_time_apart() {
        let m = learned();
        assert_eq!(m.batch_ms, 60.0);
        assert!((m.token_ms - 18.0).abs() < 1e-9, "{m:?}");
        assert_eq!(m.estimate_ms(0, 0, 16), 0.0);
        assert_eq!(m.estimate_ms(17, 17, 16), 120.0, "two batches of one-token escalations");
        let mut m2 = m;
        m2.observe(0, 0, 1e9);
        m2.observe(1, 1, f64::NAN);
        assert_eq!(m2, m, "nonsense observations are ignored");
    }

    const CUT: Cut = Cut { max_batch: 16, max_batch_tokens: 128 };

    #[test]
    fn a_long_full_is_busy_at_once_instead_of_expiring() {
        let m = learned();
        let idle = Ahead::default();
        // 4,095 tokens at 18 ms each is 74 s: no deadline allows it.
        let retry = admit(&m, CUT, idle, 4095, 30_000 * MS).unwrap_err();
        assert_eq!(retry, 30_000);
        assert!(admit(&m, CUT, idle, 100, 2_000 * MS).is_ok(), "100 tokens take 1.8 s");
        // 300 tokens: three steps of 60 ms and 5.4 s of prefill.
        assert!(admit(&m, CUT, idle, 300, 5_000 * MS).is_err());
        assert!(admit(&m, CUT, idle, 300, 5_700 * MS).is_ok());
    }

    #[test]
    fn behind_a_long_queue_a_short_escalation_is_busy_with_the_queues_drain_time() {
        let m = learned();
        let queue = Ahead { rows: 160, tokens: 160, ..Ahead::default() };
        assert_eq!(admit(&m, CUT, queue, 1, 500 * MS), Err(600), "ten batches of 60 ms ahead");
        assert!(admit(&m, CUT, queue, 1, 700 * MS).is_ok());
        assert!(admit(&m, CUT, Ahead::default(), 1, Duration::ZERO).is_ok(), "an idle gateway admits a short escalation");
    }

    #[test]
    fn a_short_escalation_waits_for_one_step_of_a_long_prefill_not_all_of_it() {
        let m = learned();
        let behind_long = Ahead { rows: 1, tokens: 0, long_rows: 1, long_tokens: 4000, warming: false };
        // The step running (60 ms + 128 x 18 ms = 2.36 s) and its own batch, filled up with the
        // next step (2.3 s): 4.7 s, not 72 s.
        assert!(admit(&m, CUT, behind_long, 1, 4_700 * MS).is_ok());
        assert_eq!(admit(&m, CUT, behind_long, 1, 4_000 * MS), Err(2364));
        // Behind warming only, its own batch is its own.
        let behind_warming = Ahead { warming: true, ..Ahead::default() };
        assert!(admit(&m, CUT, behind_warming, 1, 2_400 * MS).is_ok());
        // Another long one waits for all of it.
        assert!(admit(&m, CUT, behind_long, 200, 30_000 * MS).is_err());
    }

    #[test]
    fn a_first_hard_token_behind_its_own_prompts_presync_is_admitted_for_its_delta() {
        // The demo's case: a 130-token prompt pre-sync queued (a long prefill at a cap of 128),
        // then the session's first hard token, 4 tokens later, with a 3 s deadline.
        let m = learned();
        let presync = Ahead::of(130, CUT);
        let all = presync;
        // Counted as before (the whole context again, behind its own pre-sync): 4.7 s.
        let old_cost = 134;
        assert!(admit(&m, CUT, all, old_cost, 3_000 * MS).is_err(), "the old estimate refused it");
        // Now: it costs its delta, and its own pre-sync is not held against it.
        let cost = cost(134, 0, 130);
        assert_eq!(cost, 4);
        assert!(admit(&m, CUT, others(all, presync), cost, 3_000 * MS).is_ok());
    }

    #[test]
    fn another_sessions_presync_still_counts_against_a_deadline() {
        let m = learned();
        let theirs = Ahead::of(4_000, CUT);
        let mine = Ahead::of(4, CUT);
        let all = theirs.plus(mine);
        // Behind a step of their long prefill (2.36 s) plus its own batch filled by the next.
        assert!(admit(&m, CUT, others(all, mine), 4, 3_000 * MS).is_err());
        assert!(admit(&m, CUT, others(all, mine), 4, 5_000 * MS).is_ok());
    }

    #[test]
    fn an_escalation_costs_what_neither_the_backend_nor_its_sessions_work_computes() {
        assert_eq!(cost(134, 0, 0), 134, "a new session: all of it");
        assert_eq!(cost(134, 100, 0), 34);
        assert_eq!(cost(134, 100, 130), 4, "its pre-sync will compute 130");
        assert_eq!(cost(130, 130, 0), 1, "at least one");
        assert_eq!(cost(20, 130, 0), 20, "a shorter context is a new one");
        let a = Ahead { rows: 3, tokens: 10, long_rows: 1, long_tokens: 500, warming: true };
        assert_eq!(others(a, a), Ahead { warming: true, ..Ahead::default() });
        assert_eq!(others(Ahead::default(), a), Ahead::default(), "never below zero");
    }

    /// A snapshot at `now` of an escalation of `len` tokens with `left_ms` to its deadline,
    /// on an idle gateway with the learned model.
    fn snapshot(now: Instant, len: usize, left_ms: u32) -> Snapshot {
        Snapshot {
            now,
            deadline: now + left_ms * MS,
            context_len: len,
            session: SessionWork::default(),
            all: Ahead::default(),
            model: learned(),
            cut: CUT,
            capacity: 256,
            service_ms: 60,
            device: None,
        }
    }

    #[test]
    fn a_light_device_behind_a_flood_is_admitted_when_devices_share_fairly() {
        let t0 = Instant::now();
        // One device has 200 one-token escalations admitted (13 batches: 0.78 s); a light
        // device with nothing admitted asks with a 500 ms deadline.
        let flood = Ahead { rows: 200, tokens: 200, ..Ahead::default() };
        let oldest_first = Snapshot { all: flood, ..snapshot(t0, 1, 500) };
        assert!(matches!(decide(&oldest_first), Decision::Refuse(Refusal { reason: BusyReason::Cost, .. })), "oldest first, it waits for all of it");
        let light = DeviceWork { own: Ahead::default(), devices: 1 };
        let fair = Snapshot { device: Some(light), ..oldest_first };
        assert_eq!(fair_ahead(flood, Ahead::default(), light, 1), Ahead { rows: 1, tokens: 1, ..Ahead::default() }, "one of the flood's rows ahead");
        assert!(matches!(decide(&fair), Decision::Admit { .. }));
        // The flooding device itself, asking again: its own 200 are ahead of it.
        let heavy = DeviceWork { own: flood, devices: 1 };
        let Decision::Refuse(r) = decide(&Snapshot { device: Some(heavy), ..oldest_first }) else { panic!("admitted") };
        assert_eq!(r.reason, BusyReason::Cost);
    }

    #[test]
    fn busy_falls_on_the_device_over_its_share_of_a_contended_queue_first() {
        let t0 = Instant::now();
        // 150 of 256 places taken: 140 by one device, 10 by ten others.
        let all = Ahead { rows: 150, tokens: 150, ..Ahead::default() };
        let heavy = DeviceWork { own: Ahead { rows: 140, tokens: 140, ..Ahead::default() }, devices: 11 };
        let light = DeviceWork { own: Ahead { rows: 1, tokens: 1, ..Ahead::default() }, devices: 11 };
        let s = Snapshot { all, ..snapshot(t0, 1, 30_000) };
        let Decision::Refuse(r) = decide(&Snapshot { device: Some(heavy), ..s }) else { panic!("admitted") };
        assert_eq!((r.reason, r.warm_from), (BusyReason::Share, None));
        assert!(matches!(decide(&Snapshot { device: Some(light), ..s }), Decision::Admit { .. }), "a light device's share leaves room");
        assert!(!over_share(Ahead { rows: 100, ..all }, heavy, 256), "below half full, no device is over its share: work-conserving");
        assert!(!over_share(all, DeviceWork { devices: 1, ..heavy }, 256), "alone, its share is all but an eighth of the places");
    }

    #[test]
    fn a_decision_depends_on_the_time_left_at_now_not_on_the_clock() {
        let t0 = Instant::now();
        let s = snapshot(t0, 100, 2_000);
        assert_eq!(decide(&s), Decision::Admit { cost: 100, work: Ahead { rows: 1, tokens: 100, ..Ahead::default() } });
        // The same escalation asked 500 ms later has 1.5 s left: 100 tokens take 1.8 s.
        let late = Snapshot { now: t0 + 500 * MS, ..s };
        let Decision::Refuse(r) = decide(&late) else { panic!("admitted") };
        assert_eq!((r.reason, r.warm_from), (BusyReason::Cost, Some(0)), "refused for its cost, its context warmed from scratch");
        assert_eq!(r.retry_after_ms, 1_782, "its own prefill's estimate");
    }

    #[test]
    fn a_decision_admits_a_first_hard_token_behind_its_own_presync_and_warms_a_refused_one_from_what_is_covered() {
        let t0 = Instant::now();
        let presync = Ahead::of(130, CUT);
        let own = SessionWork { computed: 0, covered: 130, pending: presync };
        let s = Snapshot { session: own, all: presync, ..snapshot(t0, 134, 3_000) };
        assert_eq!(decide(&s), Decision::Admit { cost: 4, work: Ahead::of(4, CUT) });
        // Behind another session's long prefill instead, with too short a deadline.
        let theirs = Ahead::of(4_000, CUT);
        let s = Snapshot { all: presync.plus(theirs), ..s };
        let Decision::Refuse(r) = decide(&Snapshot { deadline: t0 + 1_000 * MS, ..s }) else { panic!("admitted") };
        assert_eq!(r.warm_from, Some(130), "what its pre-sync computes is not warmed again");
    }

    #[test]
    fn a_decision_refuses_a_full_queue_with_its_drain_time() {
        let t0 = Instant::now();
        let full_queue = Ahead { rows: 256, tokens: 256, ..Ahead::default() };
        let s = Snapshot { all: full_queue, ..snapshot(t0, 1, 30_000) };
        let Decision::Refuse(r) = decide(&s) else { panic!("admitted") };
        assert_eq!((r.reason, r.warm_from), (BusyReason::Capacity, None));
        assert_eq!(r.retry_after_ms, 960, "sixteen batches of 60 ms");
        assert_eq!(full(&Snapshot { all: Ahead::default(), ..s }).retry_after_ms, 60, "at least one service time");
    }

    #[test]
    fn readiness_turns_false_when_saturated_or_stalled_too_long_and_back() {
        let p = ReadinessPolicy { saturated_for: 2_000 * MS, stalled_after: 10_000 * MS };
        assert_eq!(not_ready(&p, Load { now_ms: 50_000, ..Load::default() }), None);
        let saturated = Load { now_ms: 10_000, saturated_since_ms: Some(9_000), batch_since_ms: Some(9_990) };
        assert_eq!(not_ready(&p, saturated), None, "a second of saturation is within the grace");
        let saturated = Load { now_ms: 11_500, ..saturated };
        assert!(not_ready(&p, saturated).unwrap().starts_with("saturated"));
        let stalled = Load { now_ms: 30_000, saturated_since_ms: None, batch_since_ms: Some(15_000) };
        assert!(not_ready(&p, stalled).unwrap().starts_with("backend stalled"));
        let recovered = Load { now_ms: 30_100, saturated_since_ms: None, batch_since_ms: Some(30_050) };
        assert_eq!(not_ready(&p, recovered), None, "batches complete again, caught up");
    }
}
