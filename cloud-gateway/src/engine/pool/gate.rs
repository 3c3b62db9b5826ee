//! The engine pool's admission gate: every rule that decides whether an escalation is sent,
//! and to which worker, with all the state those rules read and write in one place.
//!
//! An admission reads three things that change with every admission: the devices' shares of
//! the workers' time ([`WorkShare`]), what each worker's answers showed of each session's
//! context in its prefix cache (so an escalation is charged its delta, [`admission::cost`]),
//! and each worker's admitted work ([`admission::Load`], read by the shell into a
//! [`WorkerNow`] per worker). Decisions taken one by one must each see the ones before them,
//! or two escalations both fit the room one of them leaves. So the share and the sessions
//! live here, in one value that the pool's shell holds behind one lock; the shell reads the
//! workers' loads and reserves the admitted request in its worker's load while it holds that
//! lock, and nothing else decides admission.
//!
//! The order of the rules ([`Gate::admit`]):
//! 1. with fair sharing (and admission by cost: the tokens that fit a deadline are the cost
//!    model's), the device's share of the open workers' budget ([`WorkShare::admit`]);
//!    refused for what devices waiting longer reserve, it waits in line itself;
//! 2. the workers' room and the escalation's cost before its deadline
//!    ([`admission::decide_with`]); while other devices are active an idle worker gives no
//!    slack for a long prefill (its moment is theirs as much), and a device owed room by a
//!    device served far more is judged without the estimate's margin (the room kept for it
//!    was kept with the margin counted); refused for cost with the line on, it waits in line.
//!
//! Pure: the request, the workers' figures, the deadline and `now` are passed in, and the
//! decision is returned; the shell (`super::EnginePool::admit`) reads the clock and the
//! workers, publishes the gauges and sends the request.
#![cfg_attr(not(test), deny(clippy::disallowed_methods))]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::admission::{self, Ahead, CacheSeen, Offer};
use super::pick::PickPolicy;
use super::share::{self, Refused, WorkShare};
use crate::dispatch::admission::{retry_after_ms, CostModel};
use crate::dispatch::{Busy, BusyReason};
use crate::sessions::SessionKey;

/// Sessions remembered at most for their last worker (the gateway's session store holds
/// fewer; sessions are forgotten as they end).
pub const MAX_SESSIONS_REMEMBERED: usize = 1 << 16;

/// The settings the gate's rules follow (the pool's configuration, read once).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// Most requests in flight per worker.
    pub max_in_flight_per_worker: usize,
    /// Refuse at once what no worker can answer before its deadline; off, the count bound alone.
    pub admit_by_cost: bool,
    /// Share the workers' time fairly between devices (only with `admit_by_cost`).
    pub fair_share: bool,
    /// With fair sharing, a device refused for cost while within its share waits in line.
    pub fair_line: bool,
    /// Worker choice among those that fit.
    pub pick: PickPolicy,
}

impl Rules {
    /// Whether the devices' shares are judged: fair sharing with admission by cost.
    fn shares(&self) -> bool {
        self.fair_share && self.admit_by_cost
    }
}

/// What admission is asked about: one escalation of a session.
#[derive(Debug, Clone, Copy)]
pub struct Escalation<'a> {
    /// Its session (its device is the share's key).
    pub session: &'a SessionKey,
    /// Tokens of context it sends.
    pub context_len: usize,
    /// Tokens of draft it asks to be checked.
    pub draft_len: usize,
}

/// One worker as the shell reads it at admission, in the session's rendezvous order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkerNow<'a> {
    /// Its index in the pool's worker set.
    pub index: usize,
    /// Its label (its URL): whose prefix cache holds which session.
    pub label: &'a str,
    /// Healthy, its breaker would let a request through, not retired.
    pub available: bool,
    /// Requests in flight to it now.
    pub in_flight: usize,
    /// What is admitted to it for other sessions ([`admission::Load::ahead_of`]).
    pub ahead: Ahead,
    /// Its learned cost model.
    pub model: CostModel,
    /// What its estimates are padded with for their error ([`admission::Load::margin_ms`]).
    pub margin_ms: f64,
}

/// An admitted escalation: where it goes first and what it is charged there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admit {
    /// The index of the worker it goes to first.
    pub first: usize,
    /// Tokens it is charged there ([`admission::cost`]).
    pub cost: usize,
    /// Whether it counts in its device's share until [`Gate::end`].
    pub shared: bool,
}

/// The engine pool's admission state and rules (see the module docs).
#[derive(Debug)]
pub struct Gate {
    rules: Rules,
    share: WorkShare,
    /// Per session, the worker its last escalation went to and what that worker's answers
    /// showed of its prefix cache.
    sessions: HashMap<SessionKey, (String, CacheSeen)>,
}

impl Gate {
    /// A gate following `rules`, with no device and no session known.
    pub fn new(rules: Rules) -> Self {
        Self { rules, share: WorkShare::new(crate::dispatch::fair::DEFAULT_MAX_DEVICES, share::DEFAULT_WINDOW), sessions: HashMap::new() }
    }

    /// Share fairly between devices or not, from now on.
    pub fn set_fair_share(&mut self, on: bool) {
        self.rules.fair_share = on;
    }

    /// Admit `escalation` at `now` to one of `workers` (in its session's rendezvous order), or
    /// refuse it `Busy`: for its device's share, for the workers' room or for its cost before
    /// `deadline` (see the module docs). `rr` is the round-robin counter's value, `service_ms`
    /// the pool's smoothed service time (the floor of a retry hint). Admitted, it counts in
    /// its device's share (when [`Admit::shared`]) until [`Gate::end`], and its session is
    /// noted as sent to that worker.
    pub fn admit(&mut self, escalation: &Escalation<'_>, workers: &[WorkerNow<'_>], deadline: Instant, now: Instant, rr: u64, service_ms: u32) -> Result<Admit, Busy> {
        let views = self.views(escalation, workers);
        let left = deadline.saturating_duration_since(now);
        let device = &escalation.session.device;
        let decided = self.decide(&views, device, left, rr, service_ms, now);
        trace_decision(escalation, &views, left, &decided);
        let first = decided?;
        let cost = views.iter().find(|v| v.index == first).map_or(1, |v| v.offer.cost);
        let shared = self.rules.shares();
        if shared {
            self.share.start(device, cost, now);
        }
        if let Some(w) = workers.iter().find(|w| w.index == first) {
            self.sent(escalation.session, w.label);
        }
        Ok(Admit { first, cost, shared })
    }

    /// The request admitted for `device` as `admit` ended at `now`, however it ended.
    pub fn end(&mut self, device: &str, admit: &Admit, now: Instant) {
        if admit.shared {
            self.share.end(device, admit.cost, now);
        }
    }

    /// The worker labelled `label` answered `session`'s request of `sent` context tokens,
    /// reporting `cached` prompt tokens found in its prefix cache: what it shows it keeps.
    pub fn answered(&mut self, session: &SessionKey, label: &str, sent: usize, cached: Option<u32>) {
        let before = self.sessions.get(session).filter(|(l, _)| l == label).map(|(_, seen)| *seen);
        if before.is_none() && self.sessions.len() >= MAX_SESSIONS_REMEMBERED {
            return;
        }
        self.sessions.insert(session.clone(), (label.to_string(), admission::learn(before, sent, cached)));
    }

    /// A session ended: forget which worker holds its context, and its device's last ask
    /// ([`WorkShare::leave`]).
    pub fn forget(&mut self, session: &SessionKey) {
        self.sessions.remove(session);
        self.share.leave(&session.device);
    }

    /// Devices with requests in flight that count in their shares.
    pub fn devices_in_flight(&self) -> usize {
        self.share.in_flight_devices()
    }

    /// Devices waiting in line.
    pub fn waiting_devices(&self) -> usize {
        self.share.waiting_devices()
    }

    /// Whether fair shares are judged (what the gauges of the share mean).
    pub fn shares(&self) -> bool {
        self.rules.shares()
    }

    /// Each worker's view for `escalation`: open when available with room, its offer charging
    /// the context its prefix cache has not shown it keeps.
    fn views(&self, escalation: &Escalation<'_>, workers: &[WorkerNow<'_>]) -> Vec<admission::Worker> {
        let last = self.sessions.get(escalation.session);
        workers
            .iter()
            .map(|w| {
                let held = last.filter(|(label, _)| label == w.label).and_then(|(_, seen)| seen.held());
                let cost = admission::cost(escalation.context_len, escalation.draft_len, held);
                let offer = Offer { ahead: w.ahead, model: w.model, margin_ms: w.margin_ms, cost };
                let in_flight = w.in_flight.max(w.ahead.requests);
                admission::Worker { index: w.index, open: w.available && in_flight < self.rules.max_in_flight_per_worker, in_flight, offer }
            })
            .collect()
    }

    /// The worker `device`'s escalation goes to first, with `left` to its deadline, or why it
    /// is refused: its share, then its cost or the workers' room.
    fn decide(&mut self, views: &[admission::Worker], device: &Arc<str>, left: Duration, rr: u64, service_ms: u32, now: Instant) -> Result<usize, Busy> {
        let shares = self.rules.shares();
        if shares {
            self.check_share(views, device, left, service_ms, now)?;
        }
        let (others, owed) = match shares {
            true => (self.share.others_active(device), self.share.owed_room(device)),
            false => (false, false),
        };
        // An idle worker's slack for a long prefill is for a device alone on the pool.
        let idle_slack = if others { 1.0 } else { admission::IDLE_SLACK };
        // The room a device served far less than others is owed was kept from them with the
        // margin counted (`Refused::Behind`): its own escalation is not refused for the margin
        // a second time.
        let unpadded: Vec<admission::Worker>;
        let views = match owed {
            true => {
                unpadded = views.iter().map(|v| admission::Worker { offer: Offer { margin_ms: 0.0, ..v.offer }, ..*v }).collect();
                &unpadded[..]
            }
            false => views,
        };
        let decided = admission::decide_with(views, &self.rules.pick, rr, left, self.rules.admit_by_cost, service_ms, idle_slack);
        if let Err(busy) = &decided {
            if shares && self.rules.fair_line && busy.reason == BusyReason::Cost {
                self.wait_in_line(device, busy, now);
            }
        }
        decided
    }

    /// Refuse `device` for its share of the open workers' budget for `left`, its escalation
    /// costing what it costs on the first of them (its sticky worker when open).
    fn check_share(&mut self, views: &[admission::Worker], device: &Arc<str>, left: Duration, service_ms: u32, now: Instant) -> Result<(), Busy> {
        let open: Vec<&admission::Worker> = views.iter().filter(|v| v.open).collect();
        let Some(first) = open.first() else { return Ok(()) };
        let budget = open.iter().map(|v| v.offer.budget_tokens(left)).fold(0usize, usize::saturating_add);
        let model = first.offer.model;
        let hint = |tokens: usize| retry_after_ms(model.batch_ms + tokens as f64 * model.token_ms).max(service_ms);
        match self.share.admit(device, first.offer.cost, budget, now) {
            Ok(()) => Ok(()),
            // Back once its own work in flight has gone through.
            Err(Refused::Over(over)) => Err(Busy { retry_after_ms: hint(over.held), reason: BusyReason::Share }),
            // Back once the work in flight and the less served device's ask could have run.
            Err(Refused::Behind { tokens }) => Err(Busy { retry_after_ms: hint(tokens), reason: BusyReason::Share }),
            // Back once those ahead of it in line could have run.
            Err(Refused::Reserved { tokens }) => {
                let busy = Busy { retry_after_ms: hint(tokens), reason: BusyReason::Reserved };
                self.wait_in_line(device, &busy, now);
                Err(busy)
            }
        }
    }

    /// `device` was refused `busy` at `now` while within its share: it waits in line for the
    /// room its retry needs.
    fn wait_in_line(&mut self, device: &str, busy: &Busy, now: Instant) {
        self.share.wait(device, now + Duration::from_millis(u64::from(busy.retry_after_ms)), now);
    }

    /// Note that a request of `session` goes to the worker labelled `label`: until its answer
    /// says otherwise, that worker is not counted on to hold the session's context.
    fn sent(&mut self, session: &SessionKey, label: &str) {
        if self.sessions.len() >= MAX_SESSIONS_REMEMBERED && !self.sessions.contains_key(session) {
            // Sessions are forgotten as they end; this only bounds a leak. Forgetting costs
            // an estimate (the whole context instead of its delta), never an answer.
            self.sessions.clear();
        }
        let seen = match self.sessions.get(session) {
            Some((l, seen)) if l == label => seen.in_flight(),
            _ => CacheSeen::default(),
        };
        self.sessions.insert(session.clone(), (label.to_string(), seen));
    }
}

/// One admission decision at debug level (`cloud_gateway::engine::pool=debug`), with what it
/// was made from on the session's first worker: what an overload's refusals are read from.
fn trace_decision(escalation: &Escalation<'_>, views: &[admission::Worker], left: Duration, decided: &Result<usize, Busy>) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let Some(v) = views.first() else { return };
    let outcome = match decided {
        Ok(_) => "admitted",
        Err(busy) => busy.reason.label(),
    };
    let session = escalation.session;
    tracing::debug!(
        device = %session.device, session = session.session_id, outcome, context = escalation.context_len, cost = v.offer.cost,
        ahead_requests = v.offer.ahead.requests, ahead_tokens = v.offer.ahead.tokens, budget_tokens = v.offer.budget_tokens(left),
        margin_ms = v.offer.margin_ms as u64, token_ms = v.offer.model.token_ms, left_ms = left.as_millis() as u64, "engine admission"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    /// A CPU engine: 100 ms per request, 20 ms per token of prefill.
    const CPU: CostModel = CostModel { batch_ms: 100.0, token_ms: 20.0 };

    fn rules(fair_share: bool, fair_line: bool) -> Rules {
        Rules { max_in_flight_per_worker: 16, admit_by_cost: true, fair_share, fair_line, pick: PickPolicy::default() }
    }

    fn session(device: &str, id: u64) -> SessionKey {
        SessionKey { device: Arc::from(device), session_id: id }
    }

    fn worker(index: usize, label: &str, ahead: Ahead, margin_ms: f64) -> WorkerNow<'_> {
        WorkerNow { index, label, available: true, in_flight: ahead.requests, ahead, model: CPU, margin_ms }
    }

    fn idle(label: &str) -> WorkerNow<'_> {
        worker(0, label, Ahead::default(), 0.0)
    }

    /// Ask `gate` at `now` for `context` tokens of `session` on `workers`, `left` to the deadline.
    fn ask(gate: &mut Gate, session: &SessionKey, context: usize, workers: &[WorkerNow<'_>], left: Duration, now: Instant) -> Result<Admit, Busy> {
        gate.admit(&Escalation { session, context_len: context, draft_len: 0 }, workers, now + left, now, 0, 0)
    }

    /// `devices` each admitted once for a token and answered: none is a newcomer owed room.
    fn established(gate: &mut Gate, devices: &[&SessionKey], now: Instant) {
        for s in devices {
            let admit = ask(gate, s, 1, &[idle("a")], 1_000 * MS, now).unwrap();
            gate.end(&s.device, &admit, now);
        }
    }

    #[test]
    fn a_device_owed_room_is_not_refused_for_the_margin_a_second_time() {
        // One request of 11 tokens ahead: 300 ms queued, 180 ms of its own 10 tokens; a margin
        // of 1 s passes the 1 s left, without it 480 ms fit.
        let cases = [(0.0, "light", true), (0.0, "flood", true), (1_000.0, "light", true), (1_000.0, "flood", false)];
        for (margin, asking, admitted) in cases {
            let t0 = Instant::now();
            let mut gate = Gate::new(rules(true, false));
            let (flood, light) = (session("flood", 1), session("light", 2));
            established(&mut gate, &[&flood], t0);
            // The light device asks first and is not yet admitted: the flood owes it room.
            let busy = [worker(0, "a", Ahead { requests: 1, tokens: 11 }, margin)];
            let light_first = ask(&mut gate, &light, 10, &busy, 1_000 * MS, t0 + MS);
            let who = if asking == "light" { &light } else { &flood };
            let got = if asking == "light" { light_first } else { ask(&mut gate, who, 10, &busy, 1_000 * MS, t0 + 2 * MS) };
            match admitted {
                true => assert!(got.is_ok(), "margin {margin}, {asking}: {got:?}"),
                false => assert_eq!(got.map_err(|b| b.reason), Err(BusyReason::Cost), "margin {margin}, {asking}"),
            }
        }
    }

    #[test]
    fn an_idle_worker_gives_slack_for_a_long_prefill_only_to_a_device_alone_on_the_pool() {
        // 60 tokens take 1.18 s of their own on an idle worker, with 1 s left.
        let cases = [(true, false, true), (true, true, false), (false, true, true)];
        for (fair_share, another_device, admitted) in cases {
            let t0 = Instant::now();
            let mut gate = Gate::new(rules(fair_share, false));
            if another_device {
                established(&mut gate, &[&session("other", 9)], t0);
            }
            let got = ask(&mut gate, &session("long", 1), 60, &[idle("a")], 1_000 * MS, t0 + MS);
            match admitted {
                true => assert!(got.is_ok(), "fair {fair_share}, other {another_device}: {got:?}"),
                false => assert_eq!(got, Err(Busy { retry_after_ms: 1_180, reason: BusyReason::Cost }), "fair {fair_share}, other {another_device}"),
            }
        }
    }

    #[test]
    fn with_the_line_a_device_refused_for_cost_keeps_its_room_from_a_device_that_retries_first() {
        // 2.1 s left: a budget of 100 tokens on the CPU engine.
        let left = 2_100 * MS;
        for (line, flood_admitted) in [(true, false), (false, true)] {
            let t0 = Instant::now();
            let mut gate = Gate::new(rules(true, line));
            let (flood, light) = (session("flood", 1), session("light", 2));
            established(&mut gate, &[&flood, &light], t0);
            let held = ask(&mut gate, &flood, 90, &[idle("a")], left, t0).unwrap();
            // 90 tokens ahead: 1.88 s queued and 1.18 s of its own do not fit 2.1 s.
            let refused = ask(&mut gate, &light, 60, &[worker(0, "a", Ahead { requests: 1, tokens: 90 }, 0.0)], left, t0 + MS);
            assert_eq!(refused.map_err(|b| b.reason), Err(BusyReason::Cost));
            assert_eq!(gate.waiting_devices(), usize::from(line), "line {line}");
            gate.end("flood", &held, t0 + 100 * MS);
            // The engine drained, and the flood asks first.
            let got = ask(&mut gate, &flood, 64, &[idle("a")], left, t0 + 110 * MS);
            match flood_admitted {
                true => assert!(got.is_ok(), "without the line the room is whoever's comes first: {got:?}"),
                false => assert_eq!(got, Err(Busy { retry_after_ms: 1_300, reason: BusyReason::Reserved }), "the light device's 60 are kept"),
            }
        }
        let t0 = Instant::now();
        let mut gate = Gate::new(rules(true, true));
        let (flood, light) = (session("flood", 1), session("light", 2));
        established(&mut gate, &[&flood, &light], t0);
        let _held = ask(&mut gate, &flood, 90, &[idle("a")], left, t0).unwrap();
        let _ = ask(&mut gate, &light, 60, &[worker(0, "a", Ahead { requests: 1, tokens: 90 }, 0.0)], left, t0 + MS);
        assert!(ask(&mut gate, &light, 60, &[worker(0, "a", Ahead { requests: 1, tokens: 10 }, 0.0)], left, t0 + 400 * MS).is_ok(), "its retry finds its room");
        assert_eq!(gate.waiting_devices(), 0, "admitted, it leaves the line");
    }

    #[test]
    fn a_session_is_charged_its_delta_only_on_the_worker_whose_answer_showed_its_context_kept() {
        let t0 = Instant::now();
        let mut gate = Gate::new(rules(true, false));
        let s = session("d", 1);
        let both = [idle("a"), WorkerNow { index: 1, ..idle("b") }];
        // 10 s left: a budget of 495 tokens, more than the session's requests here take.
        let cost = |gate: &mut Gate, context, workers: &[WorkerNow<'_>]| ask(gate, &s, context, workers, 10_000 * MS, t0).map(|a| (a.first, a.cost));
        let first = ask(&mut gate, &s, 30, &both, 10_000 * MS, t0).unwrap();
        assert_eq!((first.first, first.cost), (0, 30), "sticky to a, the whole context");
        gate.end("d", &first, t0);
        assert_eq!(cost(&mut gate, 40, &both), Ok((0, 40)), "not answered yet: its slot may hold anything");
        gate.answered(&s, "a", 40, Some(0));
        assert_eq!(cost(&mut gate, 50, &both), Ok((0, 10)), "the first answer with cache figures shows it kept");
        assert_eq!(cost(&mut gate, 50, &[WorkerNow { index: 1, ..idle("b") }]), Ok((1, 50)), "another worker holds none of it");
        gate.answered(&s, "a", 50, None);
        assert_eq!(cost(&mut gate, 60, &both), Ok((0, 60)), "an answer without figures shows nothing");
        gate.answered(&s, "a", 60, Some(60));
        gate.forget(&s);
        assert_eq!(cost(&mut gate, 70, &both), Ok((0, 70)), "forgotten as its session ended");
    }

    #[test]
    fn no_open_worker_refuses_for_capacity_and_none_in_time_for_cost() {
        let t0 = Instant::now();
        let s = session("d", 1);
        let loaded = Ahead { requests: 10, tokens: 200 };
        let cases = [
            (WorkerNow { available: false, ..idle("a") }, Err(BusyReason::Capacity)),
            (WorkerNow { in_flight: 16, ..idle("a") }, Err(BusyReason::Capacity)),
            (worker(0, "a", loaded, 0.0), Err(BusyReason::Cost)),
            (worker(0, "a", Ahead { requests: 1, tokens: 20 }, 0.0), Ok(0)),
        ];
        for (w, expected) in cases {
            let mut gate = Gate::new(rules(true, false));
            let got = ask(&mut gate, &s, 6, &[w], 2_000 * MS, t0).map(|a| a.first).map_err(|b| b.reason);
            assert_eq!(got, expected, "{w:?}");
        }
    }

    #[test]
    fn a_device_counts_in_its_share_until_its_request_ends_and_only_with_fair_sharing() {
        let t0 = Instant::now();
        for fair_share in [true, false] {
            let mut gate = Gate::new(rules(fair_share, false));
            let admit = ask(&mut gate, &session("d", 1), 5, &[idle("a")], 1_000 * MS, t0).unwrap();
            assert_eq!((admit.shared, gate.devices_in_flight()), (fair_share, usize::from(fair_share)));
            gate.end("d", &admit, t0 + MS);
            assert_eq!(gate.devices_in_flight(), 0);
        }
    }
}
