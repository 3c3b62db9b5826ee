//! Admission on the engine path: refuse an escalation `Busy` at once when no eligible worker
//! can answer it before its deadline, instead of sending it and answering `Expired` when the
//! deadline passes.
//!
//! The count bound (`max_in_flight` per worker) alone let a worker's queue grow until every
//! request on it missed its deadline: under 3x overload a device waited out its whole deadline
//! for nothing. Engines keep their queue to themselves, so the pool estimates each worker's
//! from what it sent there: the requests admitted and not finished, each with the tokens it
//! runs ([`cost`]: its whole context unless the worker has *shown* it keeps the session's
//! prefix, its draft, at least one), and a [`CostModel`] per worker, the seam's (a fixed time
//! per step plus a time per token). An escalation is admitted to a worker when the work ahead there and its own
//! fit the time to its deadline, by the rule both paths share
//! ([`crate::dispatch::admission::within_deadline`]); [`decide`] picks among the workers that
//! fit as the pool picks ([`super::pick::choose`]: its sticky worker first), and when none
//! fits answers `Busy` (reason `cost`) with the soonest any of them should have room.
//!
//! The model learns from each request as it ends ([`Load::finish`]), by what it took against
//! the work it may have waited for. An engine with slots runs what it holds together, in no
//! order the gateway sees: a request may be answered after only its own work, or after all the
//! work that was in flight with it at some moment of its life (the requests admitted after it
//! join its batches). The model is wrong only when the time lies outside what it says for those
//! two; it then learns from the bound it broke, and a time between them teaches nothing. So
//! sixteen requests sent at once to eight slots (the first answered with the eighth, the last
//! admitted sometimes first) neither teach a time per token eight times too long nor count as
//! error. A request that ends unanswered (its deadline passed, its device left) after longer
//! than all it shared explains teaches the time it took as a lower bound: a model that admits
//! too much would otherwise see only timeouts and never learn. Until a worker has taught
//! anything its model is the start the warm-up measured ([`DEFAULT_START`] without one).
//!
//! Admission itself counts all the work in flight as ahead (what the engine holds drains
//! before a request admitted now can be sure of its answer), and the estimate's own error is
//! learned, as TCP learns its round-trip time's (Jacobson's retransmission timeout): the mean
//! distance of each request's time outside its bounds, and the work ahead counts four times
//! that on top ([`Load::margin_ms`]), so a worker whose answers stray from its model admits
//! less; the slots' order and the batches' joiners are no part of that error. Both the model
//! and the error learn from
//! the tokens the engine reported it ran, its own and those of the requests in flight with it
//! ([`Load::settle`]), not from what admission charged: charging a whole context where the cache
//! held most of it is the cost rule's caution, and counted as the model's error it padded every
//! later estimate by seconds under a flood that thrashes the cache.
//!
//! What a worker's prefix cache holds is the engine's to know: with more sessions than slots
//! it evicts, and a request dropped at its deadline may never have reached the cache at all.
//! Assuming the session's last context was still there made a "16-token" request a 2,016-token
//! prefill that stopped a llama-server for 45 s (docs/src/benchmarks/fairness-overload.md, the
//! engine path's fair flood). So a session's earlier context is counted as held only when the
//! engine said so: each answer reports the prompt tokens it found cached (llama-server's `timings.cache_n`,
//! SGLang's `cached_tokens`, vLLM's `prompt_tokens_details.cached_tokens` where enabled), and
//! [`learn`] keeps, per session and worker, whether the answers show the session's context
//! kept ([`CacheSeen`]). The session's first answer there counts as kept when the engine
//! reports cache figures at all (it has just run that context; charging the whole context
//! again until a second answer proved it refused two thirds of a closed loop that one
//! llama-server with 8 slots served in time: docs/src/benchmarks/engines.md); after that, an
//! answer keeps it only when it found the session's earlier context cached. While kept, the next escalation is charged its delta; an engine that reports
//! nothing, a miss, or a request not answered (its slot may hold anything) charges the whole
//! context.
//!
//! A worker with nothing in flight admits what its model says takes up to twice the time left:
//! a cost model learned under load (queueing included) may overestimate an idle worker, and a
//! session refused for its own prefill on an idle worker may be refused for good (the batcher
//! warms such a session; an engine has no way to be told to). Beyond that the prefill cannot be
//! answered in time, and an engine does not stop a prefill it has started when the gateway
//! drops the request: admitting it blocks the worker for everyone for many deadlines.
//!
//! Pure: the pool's shell reads the loads, the clock and the session's last worker, and
//! applies the decision (`super::EnginePool::admit`).

use std::time::{Duration, Instant};

use super::pick::{choose, Candidate, PickPolicy};
use crate::dispatch::admission::{within_deadline, CostModel};
use crate::dispatch::{Busy, BusyReason};
use crate::sessions::SessionKey;

/// The cost model a worker starts from when no warm-up measured one: 50 ms per request and
/// 1 ms per token of prefill (between a GPU engine's and a CPU one's: either way its first
/// requests correct it).
pub const DEFAULT_START: CostModel = CostModel { batch_ms: 50.0, token_ms: 1.0 };

/// What is admitted to one worker and not finished yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ahead {
    /// Requests.
    pub requests: usize,
    /// Their tokens ([`cost`] each).
    pub tokens: usize,
}

/// One admitted request on a worker.
#[derive(Debug, Clone)]
struct Entry {
    id: u64,
    /// The session it serves, when known: that session's own later escalations do not count
    /// it as work ahead of them ([`Load::ahead_of`]).
    session: Option<SessionKey>,
    tokens: usize,
    since: Instant,
    /// All the work that was in flight with it at some moment of its life, its own included:
    /// what an engine that batches whatever it holds may have run before answering it (the
    /// requests admitted after it join its batches).
    shared: Ahead,
}

/// One worker's admitted work and its learned cost model.
#[derive(Debug)]
pub struct Load {
    entries: Vec<Entry>,
    next_id: u64,
    model: CostModel,
    /// Mean absolute error of its predictions, ms (moving average).
    error_ms: f64,
    /// Requests it has learned from.
    observed: u64,
}

/// Weight of a new prediction error in its moving average (TCP's for the deviation of its
/// round-trip time).
const ERROR_WEIGHT: f64 = 0.25;

/// Mean absolute errors the work ahead is padded with (TCP's multiple for its timeout).
const ERROR_MARGIN: f64 = 4.0;

impl Load {
    /// Nothing admitted, the model at `start`.
    pub fn new(start: CostModel) -> Self {
        Self { entries: Vec::new(), next_id: 0, model: start, error_ms: 0.0, observed: 0 }
    }

    /// What is admitted and not finished.
    pub fn ahead(&self) -> Ahead {
        Ahead { requests: self.entries.len(), tokens: self.entries.iter().map(|e| e.tokens).sum() }
    }

    /// What is admitted and not finished for sessions other than `session`: the work an
    /// escalation of `session` is judged against. Its own session's work in flight (the prompt
    /// pre-sync the device sent ahead of its first hard token) is covered by the device's own
    /// deadline, which already waits for it; counted as ahead, it got a lone device's first
    /// hard tokens refused `Busy` by a one-slot llama-server serving nobody else
    /// (docs/src/benchmarks/draft-verification.md, "What a GPU cloud would give (projection)",
    /// llama-server rows).
    pub fn ahead_of(&self, session: &SessionKey) -> Ahead {
        let others = self.entries.iter().filter(|e| e.session.as_ref() != Some(session));
        let (requests, tokens) = others.fold((0, 0), |(r, t), e| (r + 1, t + e.tokens));
        Ahead { requests, tokens }
    }

    /// The cost model now.
    pub fn model(&self) -> CostModel {
        self.model
    }

    /// How much to add to an estimate of the work ahead for the estimate's own error, ms: four
    /// mean absolute errors of its predictions so far.
    pub fn margin_ms(&self) -> f64 {
        ERROR_MARGIN * self.error_ms
    }

    /// Requests it has learned from so far.
    pub fn observed(&self) -> u64 {
        self.observed
    }

    /// Start from `start` instead, unless a request has already taught it something.
    pub fn restart_from(&mut self, start: CostModel) {
        if self.observed == 0 {
            self.model = start;
        }
    }

    /// Count a request of `tokens` admitted at `now`; its id, for [`Load::finish`].
    pub fn reserve(&mut self, tokens: usize, now: Instant) -> u64 {
        self.reserve_for(None, tokens, now)
    }

    /// [`Self::reserve`] for a request of `session` (see [`Self::ahead_of`]). The work it
    /// shares its life with counts all that is in flight, its session's included (the engine
    /// runs that too), and every request admitted while it is.
    pub fn reserve_for(&mut self, session: Option<SessionKey>, tokens: usize, now: Instant) -> u64 {
        let ahead = self.ahead();
        let id = self.next_id;
        self.next_id += 1;
        let all = Ahead { requests: ahead.requests + 1, tokens: ahead.tokens + tokens };
        for e in &mut self.entries {
            e.shared = Ahead { requests: e.shared.requests.max(all.requests), tokens: e.shared.tokens.max(all.tokens) };
        }
        self.entries.push(Entry { id, session, tokens, since: now, shared: all });
        id
    }

    /// The engine reported what the request `id` ran: `tokens` (the prompt tokens it did not
    /// find cached, its draft, at least one). The model learns from that instead of the
    /// estimate, so a wrong guess about the cache does not teach a wrong time per token; the
    /// requests in flight with it count it as that much work shared, for the same reason.
    pub fn settle(&mut self, id: u64, tokens: usize) {
        let Some(e) = self.entries.iter_mut().find(|e| e.id == id) else { return };
        let (charged, ran) = (e.tokens, tokens.max(1));
        e.tokens = ran;
        // Every request still here was in flight with it.
        for other in &mut self.entries {
            other.shared.tokens = (other.shared.tokens + ran).saturating_sub(charged);
        }
    }

    /// The request `id` ended at `now`, answered or not: it is no longer ahead of anyone, and
    /// the model learns from what it took when that lies outside the model's time for its own
    /// work and for all it shared (an unanswered one only when it ran past the latter: a lower
    /// bound), counted in the tokens the engine reported ([`Self::settle`]).
    pub fn finish(&mut self, id: u64, answered: bool, now: Instant) {
        let Some(i) = self.entries.iter().position(|e| e.id == id) else { return };
        let e = self.entries.swap_remove(i);
        let ms = now.saturating_duration_since(e.since).as_secs_f64() * 1e3;
        // An engine with slots may run a request the moment it arrives, whatever was admitted
        // before it: at least its own work, at most all that shared its life.
        let least = Ahead { requests: 1, tokens: e.tokens };
        let (low, high) = (predicted_ms(&self.model, least), predicted_ms(&self.model, e.shared));
        if !answered && ms <= high {
            return;
        }
        // The model is wrong only when what it took lies outside what the work it may have
        // waited for explains: then it learns from the bound it broke, and errs by as much.
        let (error, work) = if ms > high {
            (ms - high, e.shared)
        } else if ms < low {
            (low - ms, least)
        } else {
            (0.0, least)
        };
        self.error_ms = if self.observed == 0 { error } else { (1.0 - ERROR_WEIGHT) * self.error_ms + ERROR_WEIGHT * error };
        if error > 0.0 {
            self.model.observe(work.requests, work.tokens, ms);
        }
        self.observed += 1;
    }
}

/// What running `work` (requests and their tokens) is predicted to take, ms: the whole batch
/// as the model runs it (engines batch what they hold continuously: one step, then tokens).
fn predicted_ms(model: &CostModel, work: Ahead) -> f64 {
    model.estimate_ms(work.requests, work.tokens, usize::MAX)
}

/// Tokens an escalation runs on a worker: the part of its `context_len` tokens of context that
/// the worker's prefix cache holds no longer (`held`: what the worker has shown it keeps of the
/// session's context, [`CacheSeen::held`]; `None`, all of it), plus its draft's `draft_len`; at
/// least one (its own step). A context shorter than what is held is a new one: all of it.
pub fn cost(context_len: usize, draft_len: usize, held: Option<usize>) -> usize {
    let prefill = match held {
        Some(h) if h <= context_len => context_len - h,
        _ => context_len,
    };
    (prefill + draft_len).max(1)
}

/// Tokens a reported cache count may fall short of a session's earlier context and still show
/// it kept: engines that cache in blocks report whole blocks (vLLM's default block is 16
/// tokens); llama-server and SGLang report it to the token.
pub const CACHE_GRAIN: usize = 16;

/// What a worker's answers showed about one session's context in its prefix cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheSeen {
    /// Context length of the session's last request the worker answered.
    pub sent: usize,
    /// Whether that answer showed the session's context before it still cached, and no request
    /// went there since without an answer.
    pub kept: bool,
}

impl CacheSeen {
    /// What the worker may be counted on to hold of the session's context: the last answered
    /// context when its answer showed the prefix kept, else nothing.
    pub fn held(self) -> Option<usize> {
        self.kept.then_some(self.sent)
    }

    /// A request of the session went to the worker: until its answer says otherwise, the slot
    /// may hold anything (an engine may evict the context while running it, or never finish it).
    pub fn in_flight(self) -> Self {
        Self { kept: false, ..self }
    }
}

/// What the worker's answer to a request of `sent` context tokens teaches, after `before` (what
/// its answers showed so far; `None`, or nothing `sent`, for the session's first answer there).
/// The first answer shows the context kept whenever the engine reports cache figures (it has
/// just computed it); a later one when the engine reported `cached` prompt tokens, at least
/// one, covering the context it answered before (short of it by less than [`CACHE_GRAIN`]). An
/// engine that reports nothing shows nothing.
pub fn learn(before: Option<CacheSeen>, sent: usize, cached: Option<u32>) -> CacheSeen {
    let kept = match (before, cached) {
        (_, None) => false,
        (Some(b), Some(c)) if b.sent > 0 => c > 0 && c as usize + CACHE_GRAIN > b.sent,
        (_, Some(_)) => true,
    };
    CacheSeen { sent, kept }
}

/// An escalation of `cost` tokens offered to a worker holding `ahead`, whose model is `model`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Offer {
    /// What is admitted there and not finished.
    pub ahead: Ahead,
    /// The worker's cost model.
    pub model: CostModel,
    /// What the worker's estimates are padded with for their error ([`Load::margin_ms`]).
    pub margin_ms: f64,
    /// Tokens the escalation runs there ([`cost`]).
    pub cost: usize,
}

impl Offer {
    /// `Ok` when the work ahead and the escalation's own fit `left` (on an idle worker, when
    /// its own fits [`IDLE_SLACK`] times `left`: see the module docs); else the retry hint.
    pub fn fits(&self, left: Duration) -> Result<(), u32> {
        self.fits_with(left, IDLE_SLACK)
    }

    /// [`Self::fits`] with `idle_slack` times `left` for its own prefill on an idle worker:
    /// [`IDLE_SLACK`] for a device alone on the pool, 1 while others want it (an idle
    /// worker's moment is then theirs as much as its, and a prefill that outlives a deadline
    /// takes it from all of them).
    pub fn fits_with(&self, left: Duration, idle_slack: f64) -> Result<(), u32> {
        // Its own step is not held against it (devices' deadlines allow for the service time),
        // as on the batcher's path.
        let own_ms = self.cost.saturating_sub(1) as f64 * self.model.token_ms;
        if self.ahead.requests == 0 {
            return within_deadline(0.0, own_ms, left.mul_f64(idle_slack.max(1.0)));
        }
        let queued_ms = self.model.estimate_ms(self.ahead.requests, self.ahead.tokens, usize::MAX) + self.margin_ms;
        within_deadline(queued_ms, own_ms, left)
    }

    /// Tokens of work the worker can hold in flight and still answer a short escalation within
    /// `left`: the time left less one step and the margin, over the time per token. What fair
    /// sharing divides between devices ([`super::share`]).
    pub fn budget_tokens(&self, left: Duration) -> usize {
        let ms = left.as_secs_f64() * 1e3 - self.model.batch_ms - self.margin_ms;
        if ms <= 0.0 {
            return 0;
        }
        if self.model.token_ms <= 0.0 {
            return MAX_BUDGET;
        }
        ((ms / self.model.token_ms) as usize).min(MAX_BUDGET)
    }
}

/// How many times the time left an idle worker's model may say an escalation's own prefill
/// takes and still be admitted (see the module docs).
pub const IDLE_SLACK: f64 = 2.0;

/// The most tokens [`Offer::budget_tokens`] counts (a model that learned no time per token).
const MAX_BUDGET: usize = 1 << 24;

/// One worker as admission sees it, in the session's rendezvous order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Worker {
    /// Its index in the pool's worker set (what [`decide`] returns).
    pub index: usize,
    /// Healthy, its breaker lets a request through, below its in-flight limit.
    pub open: bool,
    /// Requests in flight to it (the pick's load-skew rule).
    pub in_flight: usize,
    /// The escalation there.
    pub offer: Offer,
}

/// Where to send an escalation with `left` to its deadline, of `workers` (in its session's
/// rendezvous order): the worker [`choose`] picks among the open ones that fit (with `by_cost`
/// off, among the open ones: the count bound alone). `Busy` when none: for its cost, with the
/// soonest retry hint of the open workers, when some are open; else for capacity, retrying
/// after `service_ms`.
pub fn decide(workers: &[Worker], policy: &PickPolicy, rr_counter: u64, left: Duration, by_cost: bool, service_ms: u32) -> Result<usize, Busy> {
    decide_with(workers, policy, rr_counter, left, by_cost, service_ms, IDLE_SLACK)
}

/// [`decide`] with `idle_slack` for an idle worker ([`Offer::fits_with`]).
pub fn decide_with(workers: &[Worker], policy: &PickPolicy, rr_counter: u64, left: Duration, by_cost: bool, service_ms: u32, idle_slack: f64) -> Result<usize, Busy> {
    let fits = |w: &Worker| !by_cost || w.offer.fits_with(left, idle_slack).is_ok();
    let candidates: Vec<Candidate> = workers.iter().map(|w| Candidate { index: w.index, eligible: w.open && fits(w), in_flight: w.in_flight }).collect();
    if let Some(index) = choose(&candidates, policy, &[], rr_counter) {
        return Ok(index);
    }
    let soonest = workers.iter().filter(|w| w.open).filter_map(|w| w.offer.fits_with(left, idle_slack).err()).min();
    Err(match soonest {
        Some(retry_after_ms) => Busy { retry_after_ms, reason: BusyReason::Cost },
        None => Busy { retry_after_ms: service_ms.max(5), reason: BusyReason::Capacity },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    /// A CPU engine: 100 ms per request, 20 ms per token of prefill.
    const CPU: CostModel = CostModel { batch_ms: 100.0, token_ms: 20.0 };

    fn worker(index: usize, ahead: Ahead, cost: usize) -> Worker {
        Worker { index, open: true, in_flight: ahead.requests, offer: Offer { ahead, model: CPU, margin_ms: 0.0, cost } }
    }

    #[test]
    fn an_escalation_costs_what_its_workers_cache_lacks_and_its_draft() {
        assert_eq!(cost(120, 0, Some(100)), 20, "its delta on the worker that saw the rest");
        assert_eq!(cost(120, 0, None), 120, "all of it on another worker");
        assert_eq!(cost(120, 4, Some(100)), 24, "draft tokens run like context tokens");
        assert_eq!(cost(100, 0, Some(100)), 1, "at least its own step");
        assert_eq!(cost(50, 0, Some(100)), 50, "a shorter context is a new one");
    }

    #[test]
    fn a_worker_whose_queue_misses_the_deadline_refuses_busy_for_cost_with_its_drain_time() {
        // Ten requests of 20 tokens ahead: 100 ms + 190 x 20 ms = 3.9 s.
        let ahead = Ahead { requests: 10, tokens: 200 };
        let left = 2_000 * MS;
        let refused = decide(&[worker(0, ahead, 6)], &PickPolicy::default(), 0, left, true, 80).unwrap_err();
        assert_eq!(refused, Busy { retry_after_ms: 3_900, reason: BusyReason::Cost });
        assert_eq!(decide(&[worker(0, ahead, 6)], &PickPolicy::default(), 0, 4_100 * MS, true, 80), Ok(0), "3.9 s + 5 tokens fit 4.1 s");
        assert_eq!(decide(&[worker(0, ahead, 6)], &PickPolicy::default(), 0, left, false, 80), Ok(0), "admission by count only: sent anyway");
    }

    #[test]
    fn a_session_leaves_its_sticky_worker_only_for_one_that_can_answer_in_time() {
        let busy = worker(3, Ahead { requests: 10, tokens: 200 }, 6);
        let idle_other = worker(1, Ahead::default(), 120);
        assert_eq!(decide(&[busy, idle_other], &PickPolicy::default(), 0, 2_000 * MS, true, 80), Ok(1));
        let loaded_other = worker(1, Ahead { requests: 2, tokens: 40 }, 120);
        // There: 100 ms + 38 x 20 ms queued, then 119 x 20 ms of its own context: 3.2 s.
        let refused = decide(&[busy, loaded_other], &PickPolicy::default(), 0, 2_000 * MS, true, 80).unwrap_err();
        assert_eq!(refused, Busy { retry_after_ms: 2_380, reason: BusyReason::Cost }, "the soonest hint of the two");
    }

    #[test]
    fn an_idle_worker_admits_up_to_twice_the_time_left_but_not_a_prefill_that_would_block_it_for_many_deadlines() {
        // 20 ms a token: 60 tokens take 1.18 s of a 1 s deadline, 4,000 tokens 80 s.
        assert_eq!(decide(&[worker(0, Ahead::default(), 60)], &PickPolicy::default(), 0, 1_000 * MS, true, 80), Ok(0), "the model may overestimate an idle worker");
        let refused = decide(&[worker(0, Ahead::default(), 4_000)], &PickPolicy::default(), 0, 1_000 * MS, true, 80).unwrap_err();
        assert_eq!(refused, Busy { retry_after_ms: 30_000, reason: BusyReason::Cost });
    }

    #[test]
    fn while_other_devices_want_the_pool_an_idle_worker_admits_only_what_fits_the_deadline() {
        let idle = [worker(0, Ahead::default(), 60)];
        let refused = decide_with(&idle, &PickPolicy::default(), 0, 1_000 * MS, true, 80, 1.0).unwrap_err();
        assert_eq!(refused, Busy { retry_after_ms: 1_180, reason: BusyReason::Cost }, "1.18 s of prefill does not fit 1 s");
        assert_eq!(decide_with(&[worker(0, Ahead::default(), 50)], &PickPolicy::default(), 0, 1_000 * MS, true, 80, 1.0), Ok(0));
    }

    #[test]
    fn an_escalation_is_charged_its_delta_while_the_engine_shows_it_keeps_the_prefix() {
        // The first answer: the engine has just computed the context it answered.
        let first = learn(None, 32, Some(0));
        assert_eq!(learn(Some(CacheSeen::default()), 32, Some(30)).held(), Some(32));
        assert_eq!((first.held(), cost(37, 0, first.held())), (Some(32), 5));
        // Not from an engine that reports no cache figures.
        assert_eq!(learn(None, 32, None).held(), None);
        // The next answer found the 32 tokens cached: the one after is charged its delta.
        let second = learn(Some(first.in_flight()), 37, Some(32));
        assert_eq!((second.held(), cost(42, 0, second.held())), (Some(37), 5));
        // The slot was given to another session in between: all of it again.
        let evicted = learn(Some(second), 42, Some(0));
        assert_eq!(cost(47, 0, evicted.held()), 47);
        // Only a shared prefix survived (another session's 8-token system prompt).
        assert_eq!(learn(Some(second), 42, Some(8)).held(), None);
        // An engine that reports no cache figures shows nothing.
        assert_eq!(learn(Some(second), 42, None).held(), None);
        // Engines that cache in blocks report whole blocks: short by less than one still counts.
        assert_eq!(learn(Some(CacheSeen { sent: 100, kept: true }), 105, Some(96)).held(), Some(105));
        assert_eq!(learn(Some(CacheSeen { sent: 100, kept: true }), 105, Some(80)).held(), None);
    }

    #[test]
    fn a_request_not_answered_leaves_nothing_counted_as_held() {
        let seen = CacheSeen { sent: 200, kept: true };
        assert_eq!(seen.in_flight().held(), None, "dropped at its deadline: its slot may hold anything");
        assert_eq!(seen.in_flight().sent, 200, "what was last answered stays the reference for the next answer");
    }

    #[test]
    fn the_budget_is_the_tokens_a_worker_runs_in_the_time_left_after_one_step_and_the_margin() {
        let offer = |margin_ms| Offer { ahead: Ahead::default(), model: CPU, margin_ms, cost: 1 };
        assert_eq!(offer(0.0).budget_tokens(1_000 * MS), 45, "(1000 - 100) / 20");
        assert_eq!(offer(300.0).budget_tokens(1_000 * MS), 30);
        assert_eq!(offer(0.0).budget_tokens(50 * MS), 0, "less than a step");
    }

    #[test]
    fn with_no_open_worker_the_refusal_is_for_capacity_after_one_service_time() {
        let closed = Worker { open: false, ..worker(0, Ahead::default(), 1) };
        assert_eq!(decide(&[closed], &PickPolicy::default(), 0, 10_000 * MS, true, 80), Err(Busy { retry_after_ms: 80, reason: BusyReason::Capacity }));
        assert_eq!(decide(&[], &PickPolicy::default(), 0, 10_000 * MS, true, 0), Err(Busy { retry_after_ms: 5, reason: BusyReason::Capacity }));
    }

    #[test]
    fn a_sessions_own_work_in_flight_is_not_ahead_of_its_next_escalation() {
        let t0 = Instant::now();
        let mut load = Load::new(CostModel { batch_ms: 100.0, token_ms: 1.0 });
        let session = |id: u64| SessionKey { device: "d".into(), session_id: id };
        load.reserve_for(Some(session(7)), 130, t0);
        load.reserve_for(Some(session(8)), 20, t0);
        load.reserve(5, t0);
        assert_eq!(load.ahead_of(&session(7)), Ahead { requests: 2, tokens: 25 }, "session 7's pre-sync is covered by its device's deadline");
        assert_eq!(load.ahead_of(&session(9)), Ahead { requests: 3, tokens: 155 });
        assert_eq!(load.ahead(), Ahead { requests: 3, tokens: 155 }, "the engine still runs all of it");
    }

    #[test]
    fn the_load_counts_admitted_work_until_it_ends_and_learns_what_it_took() {
        let t0 = Instant::now();
        let mut load = Load::new(CostModel { batch_ms: 100.0, token_ms: 1.0 });
        let a = load.reserve(50, t0);
        let b = load.reserve(50, t0);
        assert_eq!(load.ahead(), Ahead { requests: 2, tokens: 100 });
        // `b` had 50 tokens ahead: 2 requests, 100 tokens in 1.1 s teach 10 ms per extra token.
        load.finish(b, true, t0 + 1_080 * MS);
        assert_eq!(load.ahead(), Ahead { requests: 1, tokens: 50 });
        assert!((load.model().token_ms - (0.8 * 1.0 + 0.2 * 10.0)).abs() < 1e-9, "{:?}", load.model());
        load.finish(a, false, t0 + 10 * MS);
        assert_eq!(load.ahead(), Ahead::default());
        assert_eq!(load.observed(), 1, "an unanswered request ended before its prediction teaches nothing");
        load.finish(a, true, t0 + 10 * MS);
        assert_eq!(load.observed(), 1, "an id ends once");
    }

    #[test]
    fn the_model_learns_from_the_tokens_the_engine_reported_it_ran_not_from_the_estimate() {
        let t0 = Instant::now();
        let mut load = Load::new(CostModel { batch_ms: 100.0, token_ms: 1.0 });
        // Charged 20 (a delta on a cache it assumed), the engine ran 1,001 tokens in 10.1 s:
        // 10 ms for each beyond the first.
        let id = load.reserve(20, t0);
        load.settle(id, 1_001);
        load.finish(id, true, t0 + 10_100 * MS);
        assert!((load.model().token_ms - (0.8 * 1.0 + 0.2 * 10.0)).abs() < 1e-9, "{:?}", load.model());
    }

    #[test]
    fn a_cache_hit_the_charge_did_not_count_on_is_no_error_of_the_model_for_the_requests_behind_it() {
        let t0 = Instant::now();
        let mut load = Load::new(CostModel { batch_ms: 100.0, token_ms: 1.0 });
        // Charged its whole 1,000-token context; the engine found all but 10 cached.
        let a = load.reserve(1_000, t0);
        let b = load.reserve(20, t0);
        load.settle(a, 10);
        load.finish(a, true, t0 + 109 * MS);
        // Behind 10 tokens, not 1,000: 100 ms + 28 x 1 ms, exactly as the model says.
        load.settle(b, 20);
        load.finish(b, true, t0 + 128 * MS);
        assert!(load.margin_ms() < 1.0, "no timing error, no margin: {}", load.margin_ms());
        assert!((load.model().token_ms - 1.0).abs() < 1e-9, "nor a faster time per token: {:?}", load.model());
    }

    #[test]
    fn work_admitted_during_a_requests_life_explains_its_wait_and_is_no_error_of_the_model() {
        // Sixteen requests of 32 tokens at once on an engine that batches them in slots: the
        // first takes what eight of them take together (100 ms + 255 x 10 ms), the last admitted
        // is answered first. Neither lies outside what the model says for the work they shared.
        let t0 = Instant::now();
        let model = CostModel { batch_ms: 100.0, token_ms: 10.0 };
        let mut load = Load::new(model);
        let ids: Vec<u64> = (0..16).map(|_| load.reserve(32, t0)).collect();
        load.finish(ids[15], true, t0 + 2_650 * MS);
        load.finish(ids[0], true, t0 + 2_660 * MS);
        assert_eq!(load.margin_ms(), 0.0);
        assert_eq!(load.model(), model, "nothing to correct");
        // One that took longer than all of it would have: the model was too fast.
        load.finish(ids[1], true, t0 + 9_000 * MS);
        assert!(load.margin_ms() > 0.0 && load.model().token_ms > model.token_ms, "{:?}", load.model());
    }

    #[test]
    fn a_request_answered_faster_than_its_own_work_alone_lowers_the_model() {
        let t0 = Instant::now();
        let mut load = Load::new(CostModel { batch_ms: 100.0, token_ms: 10.0 });
        let a = load.reserve(32, t0);
        let _b = load.reserve(32, t0);
        // Its own 32 tokens alone: 100 ms + 31 x 10 ms = 410 ms; it took 200.
        load.finish(a, true, t0 + 200 * MS);
        assert!(load.model().token_ms < 10.0, "{:?}", load.model());
        assert!((load.margin_ms() - 4.0 * 210.0).abs() < 1e-6, "{}", load.margin_ms());
    }

    #[test]
    fn a_request_that_times_out_past_its_prediction_raises_the_model_so_admission_catches_up() {
        let t0 = Instant::now();
        let mut load = Load::new(CostModel { batch_ms: 50.0, token_ms: 1.0 });
        for _ in 0..20 {
            load.reserve(20, t0);
        }
        // Predicted for the last: 50 ms + 399 x 1 ms = 0.45 s; the deadline passes at 2 s.
        let last = load.reserve(20, t0);
        let before = load.model().token_ms;
        load.finish(last, false, t0 + 2_000 * MS);
        assert!(load.model().token_ms > before, "{:?}", load.model());
        assert_eq!(load.observed(), 1);
    }

    #[test]
    fn a_worker_whose_answers_stray_from_the_estimate_pads_it_and_admits_less() {
        let t0 = Instant::now();
        let mut load = Load::new(CostModel { batch_ms: 100.0, token_ms: 20.0 });
        // Alone, each predicted at 100 + 4 x 20 = 180 ms; they take 180 ms +- 100 ms.
        for (i, ms) in [80u32, 280, 80, 280].into_iter().enumerate() {
            let id = load.reserve(5, t0 + Duration::from_secs(i as u64));
            load.finish(id, true, t0 + Duration::from_secs(i as u64) + ms * MS);
        }
        assert!(load.margin_ms() > 300.0, "four mean errors of about 100 ms: {}", load.margin_ms());
        let ahead = Ahead { requests: 2, tokens: 10 };
        let steady = Offer { ahead, model: load.model(), margin_ms: 0.0, cost: 5 };
        let straying = Offer { margin_ms: load.margin_ms(), ..steady };
        let left = 600 * MS;
        assert!(steady.fits(left).is_ok(), "{steady:?}");
        assert!(straying.fits(left).is_err(), "{straying:?}");
    }

    #[test]
    fn a_measured_start_replaces_the_default_only_before_anything_was_learned() {
        let t0 = Instant::now();
        let measured = CostModel { batch_ms: 80.0, token_ms: 25.0 };
        let mut fresh = Load::new(DEFAULT_START);
        fresh.restart_from(measured);
        assert_eq!(fresh.model(), measured);
        let mut taught = Load::new(DEFAULT_START);
        let id = taught.reserve(1, t0);
        taught.finish(id, true, t0 + 40 * MS);
        let learned = taught.model();
        taught.restart_from(measured);
        assert_eq!(taught.model(), learned);
    }
}
