//! The batcher's queue and its cut policy, without an actor, a runtime or a clock: `now` is
//! passed in, so every rule is unit-tested with simulated time (TGI's `next_batch` idea).
//!
//! Rules:
//! - a batch is due when `max_batch` escalations wait or the oldest has waited `max_wait`
//!   ([`PendingQueue::is_due`], [`PendingQueue::flush_at`] for the timer);
//! - a cut takes at most `max_batch` escalations, at most one per session, oldest first, so a
//!   session's escalations reach the backend in `seq` order ([`PendingQueue::cut`]);
//! - an escalation whose device stopped waiting (its reply receiver was dropped: the stream
//!   was reset) is dropped unanswered, and one whose deadline passed is answered `Expired`,
//!   both before they cost the model anything;
//! - an ended session's waiting escalations are answered `SessionEnded`
//!   ([`PendingQueue::end_session`]);
//! - a batch costs at most `max_batch_tokens` tokens of prefill: each escalation carries its
//!   estimated cost (the tokens its backend has not computed yet), an escalation that does not
//!   fit whole gets a [`Prefill`] chunk of the room left (its session's cache filled ahead of
//!   it, its answer still to come) and stays queued with the rest of its cost. So one long
//!   `Full` cannot stall everyone: it runs in bounded steps between other sessions' batches,
//!   and between two steps it is dropped if its device left or its deadline passed;
//! - a session whose escalation was refused `Busy` for its own cost is warmed
//!   ([`PendingQueue::warm`]): its context is prefilled in steps with the room the other work
//!   leaves, answering nothing, so that its later escalations cost only their delta (without
//!   it, a refused session's unprefilled context only grows, and it is refused for good).
//!
//! Admission (the bound on escalations in flight) is counted by an [`Admission`] each
//! escalation carries: it is released when the escalation is answered or dropped, whichever
//! path that takes, so the count cannot leak.
//!
//! Each escalation also carries its trace spans ([`Stages`]): `queue_wait` from submission to
//! its batch, then `batch` (with the batch size) and under it `backend` (the backend call),
//! all under the escalation's `gateway.escalation` span. They end when the escalation is
//! answered or dropped; with tracing off they are disabled and cost nothing.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::telemetry::TRACE_TARGET;
use tokio::sync::oneshot;
use tracing::field::Empty;

use crate::dispatch::{LlmRequest, Outcome};
use crate::sessions::SessionKey;

/// One slot of the admission bound: the in-flight count (and any other counts it was given,
/// such as the estimated tokens of prefill queued) go down when this is dropped.
#[derive(Debug)]
pub struct Admission {
    in_flight: Arc<AtomicUsize>,
    counted: Vec<(Arc<AtomicUsize>, usize)>,
    /// The session's share of the work, released with the rest.
    claim: Option<super::ledger::SessionClaim>,
}

impl Admission {
    /// Take a slot if fewer than `capacity` are taken; `None` means the queue is full.
    pub fn try_take(in_flight: &Arc<AtomicUsize>, capacity: usize) -> Option<Self> {
        let prev = in_flight.fetch_add(1, Ordering::AcqRel);
        if prev >= capacity {
            in_flight.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Self { in_flight: in_flight.clone(), counted: Vec::new(), claim: None })
    }

    /// Also add `n` to `counter` until this is dropped.
    pub fn with_tokens(mut self, counter: &Arc<AtomicUsize>, n: usize) -> Self {
        counter.fetch_add(n, Ordering::AcqRel);
        self.counted.push((counter.clone(), n));
        self
    }

    /// Also hold the session's claim on this work (its ledger entry) until this is dropped.
    pub fn with_claim(mut self, claim: super::ledger::SessionClaim) -> Self {
        self.claim = Some(claim);
        self
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        for (counter, n) in &self.counted {
            counter.fetch_sub(*n, Ordering::AcqRel);
        }
    }
}

/// One admitted escalation, waiting for (or in) a batch.
#[derive(Debug)]
pub struct Escalation {
    /// What to compute.
    pub request: LlmRequest,
    /// When the device stops waiting.
    pub deadline: Instant,
    /// When it was queued (for the max-wait rule and the queue-wait histogram).
    pub enqueued: Instant,
    /// Tokens of its context still to prefill (an estimate: those its session's backend state
    /// does not hold yet), at least 1; prefill chunks run ahead of it take this down.
    pub cost: usize,
    reply: oneshot::Sender<Outcome>,
    admission: Option<Admission>,
    stages: Stages,
}

/// An escalation's trace spans at the batcher (see the module docs).
#[derive(Debug)]
struct Stages {
    /// The escalation's span, the parent of the others.
    parent: tracing::Span,
    /// `queue_wait`, then `batch`.
    stage: tracing::Span,
    /// `backend`, while its batch runs.
    backend: tracing::Span,
}

impl Escalation {
    /// A new escalation queued at `enqueued`, and where its outcome will arrive; dropping the
    /// receiver cancels it.
    pub fn new(request: LlmRequest, deadline: Instant, enqueued: Instant) -> (Self, oneshot::Receiver<Outcome>) {
        let (reply, rx) = oneshot::channel();
        let stages = Stages { parent: tracing::Span::none(), stage: tracing::Span::none(), backend: tracing::Span::none() };
        (Self { request, deadline, enqueued, cost: 1, reply, admission: None, stages }, rx)
    }

    /// Say how many tokens of its context are still to prefill (clamped to 1..=its length).
    pub fn with_cost(mut self, cost: usize) -> Self {
        self.cost = cost.clamp(1, self.request.context.len().max(1));
        self
    }

    /// Trace it under `parent` (the escalation's span): its queue wait starts now.
    pub fn with_trace(mut self, parent: tracing::Span, queued_behind: usize) -> Self {
        if parent.is_disabled() {
            return self; // not traced (tracing off, or submitted outside an escalation's span)
        }
        let stage = tracing::info_span!(target: TRACE_TARGET, parent: &parent, "queue_wait", queued_behind);
        self.stages = Stages { parent, stage, backend: tracing::Span::none() };
        self
    }

    /// Its batch of `size` starts on `backend`: the queue wait ends, the `batch` and `backend`
    /// spans begin.
    pub fn start_batch(&mut self, size: usize, backend: &str) {
        let s = &mut self.stages;
        if s.parent.is_disabled() {
            return;
        }
        // The queue wait ends before the batch begins.
        drop(std::mem::replace(&mut s.stage, tracing::Span::none()));
        s.stage = tracing::info_span!(target: TRACE_TARGET, parent: &s.parent, "batch", batch_size = size);
        s.backend = tracing::info_span!(target: TRACE_TARGET, parent: &s.stage, "backend", backend, backend_ms = Empty, ok = Empty);
    }

    /// Its batch's backend call took `backend_ms`; `ok` if it answered this escalation.
    pub fn end_backend(&mut self, backend_ms: f64, ok: bool) {
        let backend = std::mem::replace(&mut self.stages.backend, tracing::Span::none());
        backend.record("backend_ms", backend_ms).record("ok", ok);
    }

    /// Hold an admission slot until this escalation is answered or dropped.
    pub fn with_admission(mut self, admission: Admission) -> Self {
        self.admission = Some(admission);
        self
    }

    /// Whether the device stopped waiting for it.
    pub fn is_cancelled(&self) -> bool {
        self.reply.is_closed()
    }

    /// Send its outcome. The admission slot is released first, so a device that reads the
    /// answer and submits again at once finds the slot free.
    pub fn answer(mut self, outcome: Outcome) {
        drop(self.admission.take());
        let _ = self.reply.send(outcome);
    }

    /// The session it belongs to.
    pub fn session(&self) -> &SessionKey {
        &self.request.session
    }
}

/// Part of a long prefill, run ahead of its escalation: the backend fills the session's state
/// with the first `upto` tokens of `request.context` and answers nothing.
#[derive(Debug, Clone)]
pub struct Prefill {
    /// The escalation's request (its whole context).
    pub request: LlmRequest,
    /// How many of its tokens this step brings the session's state to.
    pub upto: usize,
}

/// One backend call: escalations to answer, and prefill steps of longer ones.
#[derive(Debug, Default)]
pub struct Batch {
    /// Answered by this call, oldest first.
    pub escalations: Vec<Escalation>,
    /// Prefill steps of escalations that stay queued.
    pub prefills: Vec<Prefill>,
    /// Estimated tokens of prefill in the call (at most the queue's `max_batch_tokens`).
    pub cost: usize,
}

impl Batch {
    /// Whether the call would do nothing.
    pub fn is_empty(&self) -> bool {
        self.escalations.is_empty() && self.prefills.is_empty()
    }

    /// Rows of the call.
    pub fn len(&self) -> usize {
        self.escalations.len() + self.prefills.len()
    }
}

/// Escalations waiting for a batch, in arrival order.
#[derive(Debug)]
pub struct PendingQueue {
    pending: VecDeque<Escalation>,
    max_batch: usize,
    max_wait: Duration,
    max_batch_tokens: usize,
    /// Sessions to prefill with leftover room: (their context, tokens computed so far).
    warming: VecDeque<(LlmRequest, usize)>,
}

/// Most sessions waiting to be warmed; beyond it the oldest is forgotten.
pub const MAX_WARMING: usize = 64;

impl PendingQueue {
    /// An empty queue cutting batches of at most `max_batch` after at most `max_wait`, with no
    /// cost cap (see [`Self::with_token_cap`]).
    pub fn new(max_batch: usize, max_wait: Duration) -> Self {
        Self { pending: VecDeque::new(), max_batch: max_batch.max(1), max_wait, max_batch_tokens: usize::MAX, warming: VecDeque::new() }
    }

    /// Cap each batch at `max_batch_tokens` tokens of prefill (at least 1).
    pub fn with_token_cap(mut self, max_batch_tokens: usize) -> Self {
        self.max_batch_tokens = max_batch_tokens.max(1);
        self
    }

    /// Smallest prefill step worth a row of its own: a quarter of the cap (a step of a few
    /// tokens would cost a row's fixed overhead for little progress).
    fn min_step(&self) -> usize {
        (self.max_batch_tokens / 4).max(1)
    }

    /// The earliest deadline of a waiting escalation (when the oldest expiry is due).
    #[cfg(test)]
    pub fn earliest_deadline(&self) -> Option<Instant> {
        self.pending.iter().map(|e| e.deadline).min()
    }

    /// Estimated prefill tokens of everything waiting.
    #[cfg(test)]
    pub fn queued_cost(&self) -> usize {
        self.pending.iter().map(|e| e.cost).sum()
    }

    /// Queue an escalation behind the others.
    pub fn push(&mut self, escalation: Escalation) {
        self.pending.push_back(escalation);
    }

    /// Escalations waiting.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether nothing waits (sessions waiting to be warmed do not count: they are done
    /// only with room left over).
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// When the oldest escalation will have waited `max_wait`: when the timer should fire if
    /// the batch does not fill first. `None` when nothing waits.
    pub fn flush_at(&self) -> Option<Instant> {
        self.pending.front().map(|e| e.enqueued + self.max_wait)
    }

    /// Whether a batch should be cut now: `max_batch` escalations wait, or the oldest has
    /// waited `max_wait`.
    pub fn is_due(&self, now: Instant) -> bool {
        self.pending.len() >= self.max_batch || self.flush_at().is_some_and(|at| at <= now)
    }

    /// The next batch if one is due now (see [`Self::is_due`]); `None` if none is due or if
    /// every waiting escalation turned out cancelled or expired.
    #[cfg(test)]
    pub fn next_batch(&mut self, now: Instant) -> Option<Batch> {
        if !self.is_due(now) {
            return None;
        }
        Some(self.cut(now)).filter(|b| !b.is_empty())
    }

    /// Drop what no longer needs the model: cancelled escalations unanswered, expired ones
    /// answered `Expired`. Returns how many went. The batcher calls it while a batch runs, so
    /// that work whose device left or whose deadline passed is not kept (nor answered late)
    /// behind a long batch.
    pub fn purge(&mut self, now: Instant) -> usize {
        let before = self.pending.len();
        let mut keep = VecDeque::with_capacity(before);
        while let Some(esc) = self.pending.pop_front() {
            if let Some(esc) = Self::live(esc, now) {
                keep.push_back(esc);
            }
        }
        self.pending = keep;
        before - self.pending.len()
    }

    /// `esc` if it still needs the model at `now`; otherwise dropped (cancelled) or answered
    /// `Expired`.
    fn live(esc: Escalation, now: Instant) -> Option<Escalation> {
        if esc.is_cancelled() {
            return None;
        }
        if esc.deadline <= now {
            esc.answer(Outcome::Expired);
            return None;
        }
        Some(esc)
    }

    /// Cut a batch now: up to `max_batch` rows, one per session, costing at most
    /// `max_batch_tokens` of prefill. First, oldest first, the escalations that fit whole (a
    /// session's escalations in `seq` order: none is taken past one of its own left waiting);
    /// then, with the room left, a prefill step for the oldest ones that did not fit (at least
    /// a quarter of the cap each), which stay queued with the rest of their cost. Short work
    /// goes first, so a long prefill delays it by one step at most. Cancelled escalations are
    /// dropped and expired ones answered `Expired` on the way; the rest stay queued in order.
    pub fn cut(&mut self, now: Instant) -> Batch {
        let mut batch = Batch::default();
        let mut taken = HashSet::new();
        let mut waiting = HashSet::new();
        let mut keep = VecDeque::with_capacity(self.pending.len());
        while let Some(esc) = self.pending.pop_front() {
            let Some(esc) = Self::live(esc, now) else { continue };
            let room = self.max_batch_tokens.saturating_sub(batch.cost);
            let free = !taken.contains(esc.session()) && !waiting.contains(esc.session());
            if free && batch.len() < self.max_batch && esc.cost <= room {
                taken.insert(esc.session().clone());
                batch.cost += esc.cost;
                batch.escalations.push(esc);
            } else {
                waiting.insert(esc.session().clone());
                keep.push_back(esc);
            }
        }
        let min_step = self.min_step();
        let mut stepped = HashSet::new();
        for esc in keep.iter_mut() {
            let room = self.max_batch_tokens.saturating_sub(batch.cost);
            if batch.len() >= self.max_batch || room < min_step {
                break;
            }
            // Only a session's first waiting escalation, and not one already in the batch.
            if taken.contains(esc.session()) || !stepped.insert(esc.session().clone()) || esc.cost <= room {
                continue;
            }
            // Its context's first `len - cost` tokens are computed: bring them `room` further.
            let done = esc.request.context.len().saturating_sub(esc.cost);
            batch.prefills.push(Prefill { request: esc.request.clone(), upto: done + room });
            batch.cost += room;
            esc.cost -= room;
        }
        self.pending = keep;
        // Warming only when no escalation needs the model (a short escalation's own batch is
        // never lengthened by it), sessions not otherwise waiting, the nearest to done first (a
        // huge abandoned context must not hold back small ones).
        if !batch.is_empty() || !self.pending.is_empty() {
            return batch;
        }
        self.warming.make_contiguous().sort_by_key(|(r, done)| r.context.len() - *done);
        let mut i = 0;
        while i < self.warming.len() {
            let room = self.max_batch_tokens.saturating_sub(batch.cost);
            if batch.len() >= self.max_batch || room < min_step {
                break;
            }
            let (request, done) = &mut self.warming[i];
            if taken.contains(&request.session) || stepped.contains(&request.session) || waiting.contains(&request.session) {
                i += 1;
                continue;
            }
            let step = room.min(request.context.len() - *done);
            *done += step;
            batch.prefills.push(Prefill { request: request.clone(), upto: *done });
            batch.cost += step;
            if *done >= request.context.len() {
                self.warming.remove(i);
            } else {
                i += 1;
            }
        }
        batch
    }

    /// Prefill `request`'s context (of which the first `done` tokens are computed) with the
    /// room batches leave, answering nothing; a newer context of the same session replaces
    /// the older one. At most [`MAX_WARMING`] sessions wait (the oldest is forgotten).
    pub fn warm(&mut self, request: LlmRequest, done: usize) {
        self.warming.retain(|(r, _)| r.session != request.session);
        if request.context.len() > done {
            self.warming.push_back((request, done));
        }
        while self.warming.len() > MAX_WARMING {
            self.warming.pop_front();
        }
    }

    /// Sessions waiting to be warmed.
    pub fn warming(&self) -> usize {
        self.warming.len()
    }

    /// A session ended: answer its waiting escalations `SessionEnded`; returns how many.
    pub fn end_session(&mut self, key: &SessionKey) -> usize {
        self.warming.retain(|(r, _)| &r.session != key);
        let (ended, keep): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.pending).into_iter().partition(|e| e.session() == key);
        self.pending = keep;
        let n = ended.len();
        for esc in ended {
            esc.answer(Outcome::SessionEnded);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot::error::TryRecvError;

    const WAIT: Duration = Duration::from_millis(3);

    fn key(session_id: u64) -> SessionKey {
        SessionKey { device: Arc::from("device"), session_id }
    }

    /// An escalation of `session` (with a context whose length tells escalations apart),
    /// queued at `at`, due `ttl` later.
    fn esc(session: u64, len: usize, at: Instant, ttl: Duration) -> (Escalation, oneshot::Receiver<Outcome>) {
        let request = LlmRequest { session: key(session), context: vec![1; len].into(), sampling: Default::default(), seq: len as u32 };
        Escalation::new(request, at + ttl, at)
    }

    fn lens(batch: &Batch) -> Vec<usize> {
        batch.escalations.iter().map(|e| e.request.context.len()).collect()
    }

    /// An escalation of `session` whose context is `len` tokens, all of them still to prefill.
    fn costly(session: u64, len: usize, at: Instant, ttl: Duration) -> (Escalation, oneshot::Receiver<Outcome>) {
        let (e, rx) = esc(session, len, at, ttl);
        (e.with_cost(len), rx)
    }

    #[test]
    fn a_full_batch_is_due_at_once_and_holds_at_most_max_batch() {
        let t0 = Instant::now();
        let mut q = PendingQueue::new(2, WAIT);
        let mut rx = Vec::new();
        for (s, len) in [(1, 1), (2, 2), (3, 3)] {
            let (e, r) = esc(s, len, t0, Duration::from_secs(1));
            q.push(e);
            rx.push(r);
        }
        assert!(q.is_due(t0), "max_batch escalations wait");
        assert_eq!(lens(&q.next_batch(t0).unwrap()), [1, 2]);
        assert_eq!(q.len(), 1);
        assert!(!q.is_due(t0), "one escalation, not yet waited max_wait");
    }

    #[test]
    fn a_lone_escalation_is_cut_when_it_has_waited_max_wait() {
        let t0 = Instant::now();
        let mut q = PendingQueue::new(16, WAIT);
        assert_eq!(q.flush_at(), None);
        let (e, _rx) = esc(1, 1, t0, Duration::from_secs(1));
        q.push(e);
        assert_eq!(q.flush_at(), Some(t0 + WAIT));
        assert!(q.next_batch(t0 + WAIT - Duration::from_micros(1)).is_none());
        assert_eq!(lens(&q.next_batch(t0 + WAIT).unwrap()), [1]);
        assert!(q.is_empty());
        assert_eq!(q.flush_at(), None);
    }

    #[test]
    fn a_batch_takes_one_escalation_per_session_oldest_first() {
        let t0 = Instant::now();
        let mut q = PendingQueue::new(8, WAIT);
        let mut rx = Vec::new();
        // Session 1 escalates three times (lens 1, 2, 3), session 2 once (len 10).
        for (i, (s, len)) in [(1, 1), (1, 2), (2, 10), (1, 3)].into_iter().enumerate() {
            let (e, r) = esc(s, len, t0 + Duration::from_micros(i as u64), Duration::from_secs(1));
            q.push(e);
            rx.push(r);
        }
        let now = t0 + WAIT;
        assert_eq!(lens(&q.cut(now)), [1, 10]);
        assert_eq!(lens(&q.cut(now)), [2]);
        assert_eq!(lens(&q.cut(now)), [3]);
        assert!(q.cut(now).is_empty());
    }

    #[test]
    fn an_expired_escalation_is_answered_expired_and_not_run() {
        let t0 = Instant::now();
        let mut q = PendingQueue::new(8, WAIT);
        let (late, mut late_rx) = esc(1, 1, t0, Duration::from_millis(1));
        let (live, mut live_rx) = esc(2, 2, t0, Duration::from_secs(1));
        q.push(late);
        q.push(live);
        let batch = q.cut(t0 + Duration::from_millis(1));
        assert_eq!(lens(&batch), [2]);
        assert_eq!(late_rx.try_recv(), Ok(Outcome::Expired));
        assert_eq!(live_rx.try_recv(), Err(TryRecvError::Empty), "still to be answered by the backend");
    }

    #[test]
    fn a_cancelled_escalation_is_dropped_and_frees_its_admission() {
        let t0 = Instant::now();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let mut q = PendingQueue::new(8, WAIT);
        let (gone, gone_rx) = esc(1, 1, t0, Duration::from_secs(1));
        q.push(gone.with_admission(Admission::try_take(&in_flight, 2).unwrap()));
        let (kept, _kept_rx) = esc(2, 2, t0, Duration::from_secs(1));
        q.push(kept.with_admission(Admission::try_take(&in_flight, 2).unwrap()));
        assert!(Admission::try_take(&in_flight, 2).is_none(), "the queue is full");
        drop(gone_rx);
        let batch = q.cut(t0);
        assert_eq!(lens(&batch), [2]);
        assert_eq!(in_flight.load(Ordering::Acquire), 1, "the cancelled one's slot is free, the running one holds its own");
        drop(batch);
        assert_eq!(in_flight.load(Ordering::Acquire), 0, "a batch dropped unanswered (the batcher stopped) frees its slots too");
    }

    #[test]
    fn ending_a_session_answers_its_waiting_escalations_session_ended() {
        let t0 = Instant::now();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let mut q = PendingQueue::new(8, WAIT);
        let (a, mut a_rx) = esc(1, 1, t0, Duration::from_secs(1));
        let (b, mut b_rx) = esc(2, 2, t0, Duration::from_secs(1));
        let (c, mut c_rx) = esc(1, 3, t0, Duration::from_secs(1));
        for e in [a, b, c] {
            q.push(e.with_admission(Admission::try_take(&in_flight, 8).unwrap()));
        }
        assert_eq!(q.end_session(&key(1)), 2);
        assert_eq!(a_rx.try_recv(), Ok(Outcome::SessionEnded));
        assert_eq!(c_rx.try_recv(), Ok(Outcome::SessionEnded));
        assert_eq!(b_rx.try_recv(), Err(TryRecvError::Empty));
        assert_eq!(in_flight.load(Ordering::Acquire), 1);
        assert_eq!(lens(&q.cut(t0)), [2]);
    }

    #[test]
    fn answering_releases_the_admission_before_the_device_sees_the_answer() {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let (e, mut rx) = esc(1, 1, Instant::now(), Duration::from_secs(1));
        let e = e.with_admission(Admission::try_take(&in_flight, 1).unwrap());
        assert_eq!(in_flight.load(Ordering::Acquire), 1);
        e.answer(Outcome::Expired);
        assert_eq!(rx.try_recv(), Ok(Outcome::Expired));
        assert_eq!(in_flight.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_long_prefill_runs_in_capped_steps_between_other_sessions_work() {
        let t0 = Instant::now();
        let mut q = PendingQueue::new(16, WAIT).with_token_cap(100);
        let (huge, mut huge_rx) = costly(1, 4095, t0, Duration::from_secs(30));
        q.push(huge);
        let mut small_rx = Vec::new();
        let mut steps = 0;
        let mut answered_small = 0;
        let last;
        loop {
            // A one-token escalation of another session arrives before every cut.
            let (small, rx) = costly(100 + steps, 1, t0, Duration::from_secs(30));
            q.push(small);
            small_rx.push(rx);
            let batch = q.cut(t0);
            assert!(batch.cost <= 100, "step {steps} costs {}", batch.cost);
            answered_small += batch.escalations.iter().filter(|e| e.request.context.len() == 1).count();
            if batch.escalations.iter().any(|e| e.request.context.len() == 4095) {
                assert!(batch.prefills.is_empty());
                last = batch;
                break;
            }
            assert_eq!(batch.prefills.len(), 1, "the long one advances by a step");
            assert_eq!(batch.prefills[0].upto, ((steps as usize) + 1) * 99, "each step is the room the small one left");
            steps += 1;
            assert!(steps < 100, "the long prefill never finished");
        }
        assert_eq!(steps, 41, "4095 tokens in steps of 99, the last with its answer");
        assert_eq!(answered_small, steps as usize + 1, "every other session was served at every step");
        assert_eq!(lens(&last), [4095, 1], "the rest of the long one, answered, with the newest short one");
        assert_eq!(huge_rx.try_recv(), Err(TryRecvError::Empty), "answered by the backend, not the queue");
    }

    #[test]
    fn a_long_prefill_whose_device_left_is_dropped_at_the_next_step() {
        let t0 = Instant::now();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let mut q = PendingQueue::new(16, WAIT).with_token_cap(256);
        let (huge, huge_rx) = costly(1, 4095, t0, Duration::from_secs(30));
        q.push(huge.with_admission(Admission::try_take(&in_flight, 8).unwrap()));
        let first = q.cut(t0);
        assert_eq!((first.prefills.len(), first.escalations.len(), first.cost), (1, 0, 256));
        drop(huge_rx); // the device left while the first step ran
        let (small, _small_rx) = costly(2, 3, t0, Duration::from_secs(30));
        q.push(small);
        let next = q.cut(t0);
        assert_eq!((lens(&next), next.prefills.len()), (vec![3], 0), "no more of the long one");
        drop(next);
        assert!(q.is_empty());
        assert_eq!(in_flight.load(Ordering::Acquire), 0, "its admission is released with it");
    }

    #[test]
    fn expired_and_cancelled_work_is_purged_while_a_batch_runs() {
        let t0 = Instant::now();
        let mut q = PendingQueue::new(16, WAIT);
        let (late, mut late_rx) = esc(1, 1, t0, Duration::from_millis(50));
        let (gone, gone_rx) = esc(2, 2, t0, Duration::from_secs(5));
        let (live, mut live_rx) = esc(3, 3, t0, Duration::from_secs(5));
        for e in [late, gone, live] {
            q.push(e);
        }
        drop(gone_rx);
        assert_eq!(q.earliest_deadline(), Some(t0 + Duration::from_millis(50)));
        assert_eq!(q.purge(t0 + Duration::from_millis(10)), 1, "only the cancelled one, before any deadline");
        assert_eq!(q.purge(t0 + Duration::from_millis(50)), 1);
        assert_eq!(late_rx.try_recv(), Ok(Outcome::Expired), "answered at its deadline, not after the running batch");
        assert_eq!(live_rx.try_recv(), Err(TryRecvError::Empty));
        assert_eq!((q.len(), q.queued_cost()), (1, 1));
    }

    #[test]
    fn a_cost_is_at_least_one_token_and_at_most_its_context() {
        let t0 = Instant::now();
        let (e, _rx) = esc(1, 5, t0, Duration::from_secs(1));
        assert_eq!(e.with_cost(0).cost, 1);
        let (e, _rx) = esc(1, 5, t0, Duration::from_secs(1));
        assert_eq!(e.with_cost(99).cost, 5);
    }

    #[test]
    fn a_session_refused_for_its_cost_is_warmed_with_leftover_room_and_forgotten_when_it_ends() {
        let t0 = Instant::now();
        let mut q = PendingQueue::new(16, WAIT).with_token_cap(32);
        let (refused, _) = esc(1, 70, t0, Duration::from_secs(1));
        q.warm(refused.request.clone(), 0);
        let (short, _short_rx) = costly(2, 4, t0, Duration::from_secs(1));
        q.push(short);
        let first = q.cut(t0);
        assert_eq!((lens(&first), first.prefills.len(), first.cost), (vec![4], 0, 4), "an escalation's batch is not lengthened by warming");
        let second = q.cut(t0);
        assert_eq!((second.prefills[0].upto, second.cost), (32, 32), "with nothing else waiting, a whole step");
        assert_eq!(q.warming(), 1);
        let third = q.cut(t0);
        assert_eq!((third.prefills[0].upto, third.cost), (64, 32));
        let fourth = q.cut(t0);
        assert_eq!((fourth.prefills[0].upto, fourth.cost), (70, 6), "to the end of its context, then done");
        assert_eq!(q.warming(), 0);
        assert!(q.cut(t0).is_empty());
        // A newer context replaces the older; ending the session forgets it.
        q.warm(refused.request.clone(), 10);
        q.warm(refused.request.clone(), 20);
        assert_eq!(q.warming(), 1);
        q.end_session(&key(1));
        assert_eq!(q.warming(), 0);
        for s in 0..(MAX_WARMING as u64 + 5) {
            let (e, _) = esc(100 + s, 40, t0, Duration::from_secs(1));
            q.warm(e.request.clone(), 0);
        }
        assert_eq!(q.warming(), MAX_WARMING, "bounded");
    }
}
