//! The batcher's queue and its cut policy, without an actor, a runtime or a clock: `now` is
//! passed in, so every rule is unit-tested with simulated time (TGI's `next_batch` idea).
//!
//! Rules:
//! - a batch is due when `max_batch` escalations wait, when the tokens waiting fill
//!   `max_batch_tokens` (the next cut is full: waiting for company only delays it), or when the
//!   oldest has waited the batch window ([`PendingQueue::is_due`], [`PendingQueue::flush_at`]
//!   for the timer): `max_wait`, or half a batch step when a step is cheaper than that
//!   ([`batch_window`]: company is worth waiting for only as long as the step it shares);
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
//! - with fair sharing on ([`PendingQueue::with_fair_share`]), when more waits than one batch
//!   holds, the rows go device by device to the device served fewest LLM tokens so far
//!   ([`FairShare`]: a virtual token counter per device), oldest first within a device; each
//!   row is charged to its device as its batch is cut (a batch, once cut, runs to its end):
//!   its tokens of prefill plus the one generated. Without it, oldest first;
//! - a session whose escalation was refused `Busy` for its own cost is warmed
//!   ([`PendingQueue::warm`]): its context is prefilled in steps with the room the other work
//!   leaves, answering nothing, so that its later escalations cost only their delta (without
//!   it, a refused session's unprefilled context only grows, and it is refused for good).
//!
//! Each escalation carries its admission's [`Ticket`] ([`super::book`]): released when the
//! escalation is answered or dropped, whichever path that takes, so the admitted work cannot
//! leak.
//!
//! Each escalation also carries its trace spans ([`Stages`]): `queue_wait` from submission to
//! its batch, then `batch` (with the batch size) and under it `backend` (the backend call),
//! all under the escalation's `gateway.escalation` span. They end when the escalation is
//! answered or dropped; with tracing off they are disabled and cost nothing.
#![cfg_attr(not(test), deny(clippy::disallowed_methods))]

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::telemetry::TRACE_TARGET;
use tokio::sync::oneshot;
use tracing::field::Empty;

use super::book::Ticket;
use crate::dispatch::fair::FairShare;
use crate::dispatch::{LlmRequest, Outcome};
use crate::sessions::SessionKey;

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
    ticket: Option<Ticket>,
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
        (Self { request, deadline, enqueued, cost: 1, reply, ticket: None, stages }, rx)
    }

    /// Say how many tokens of its context (and draft) are still to run (clamped to 1..=their
    /// length).
    pub fn with_cost(mut self, cost: usize) -> Self {
        self.cost = cost.clamp(1, self.request.run_len().max(1));
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

    /// Hold its admission's ticket until this escalation is answered or dropped.
    pub fn with_ticket(mut self, ticket: Ticket) -> Self {
        self.ticket = Some(ticket);
        self
    }

    /// Whether the device stopped waiting for it.
    pub fn is_cancelled(&self) -> bool {
        self.reply.is_closed()
    }

    /// Send its outcome. Its admitted work is released first, so a device that reads the
    /// answer and submits again at once finds its place free.
    pub fn answer(mut self, outcome: Outcome) {
        drop(self.ticket.take());
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
    /// How long the oldest escalation waits for company now ([`batch_window`]).
    window: Duration,
    max_batch_tokens: usize,
    /// Sessions to prefill with leftover room: (their context, tokens computed so far).
    warming: VecDeque<(LlmRequest, usize)>,
    /// Who goes next between devices, when fair sharing is on.
    fair: Option<FairShare>,
}

/// How long a batch waits for company when one backend step costs `step_ms`: at most
/// `max_wait`, and at most half a step. An escalation that joins a batch saves a step of its
/// own; waiting longer than the step it would share delays every row by more than the sharing
/// saves (a backend whose step is a fraction of a millisecond gets no window at all; the
/// embedded LLM's step of 100 ms and more keeps all of `max_wait`).
pub fn batch_window(max_wait: Duration, step_ms: f64) -> Duration {
    let half_step = if step_ms.is_finite() && step_ms > 0.0 { Duration::from_secs_f64(step_ms / 2e3) } else { Duration::ZERO };
    max_wait.min(half_step)
}

/// Most sessions waiting to be warmed; beyond it the oldest is forgotten.
pub const MAX_WARMING: usize = 64;

impl PendingQueue {
    /// An empty queue cutting batches of at most `max_batch` after at most `max_wait` (the
    /// window until [`Self::pace`] learns a step), with no cost cap (see [`Self::with_token_cap`]).
    pub fn new(max_batch: usize, max_wait: Duration) -> Self {
        Self { pending: VecDeque::new(), max_batch: max_batch.max(1), max_wait, window: max_wait, max_batch_tokens: usize::MAX, warming: VecDeque::new(), fair: None }
    }

    /// A batch step of the backend costs `step_ms` (as learned): wait for company at most
    /// [`batch_window`] of it.
    pub fn pace(&mut self, step_ms: f64) {
        self.window = batch_window(self.max_wait, step_ms);
    }

    /// Cap each batch at `max_batch_tokens` tokens of prefill (at least 1).
    pub fn with_token_cap(mut self, max_batch_tokens: usize) -> Self {
        self.max_batch_tokens = max_batch_tokens.max(1);
        self
    }

    /// Share rows between devices by the LLM tokens each has been served, remembering at most
    /// `max_devices` idle devices (see the module docs).
    pub fn with_fair_share(mut self, max_devices: usize) -> Self {
        self.fair = Some(FairShare::new(max_devices));
        self
    }

    /// The devices' counters, when fair sharing is on.
    pub fn fair(&self) -> Option<&FairShare> {
        self.fair.as_ref()
    }

    /// `esc` left the queue at `now` (taken, dropped or answered).
    fn left(&mut self, esc: &Escalation, now: Instant) {
        if let Some(fair) = &mut self.fair {
            fair.dequeue(&esc.request.session.device, now);
        }
    }

    /// `device` is served `tokens` LLM tokens at `now`.
    fn charge(&mut self, device: &Arc<str>, tokens: usize, now: Instant) {
        if let Some(fair) = &mut self.fair {
            fair.charge(device, tokens as u64, now);
        }
    }

    /// Of the escalations at `candidates` (indices into `items`, in queue order), the one to
    /// take next: the oldest of the device served least, or without fair sharing the oldest.
    fn choose(&self, items: &[Option<Escalation>], candidates: &[usize]) -> Option<usize> {
        let fair = match &self.fair {
            Some(fair) => fair,
            None => return candidates.first().copied(),
        };
        let device = |i: &usize| items[*i].as_ref().map(|e| &*e.request.session.device);
        let chosen = fair.pick(candidates.iter().filter_map(device))?;
        candidates.iter().copied().find(|i| device(i) == Some(chosen))
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
        if let Some(fair) = &mut self.fair {
            fair.enqueue(&escalation.request.session.device, escalation.enqueued);
        }
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

    /// When the oldest escalation will have waited the batch window: when the timer should
    /// fire if the batch does not fill first. `None` when nothing waits.
    pub fn flush_at(&self) -> Option<Instant> {
        self.pending.front().map(|e| e.enqueued + self.window)
    }

    /// Whether a batch should be cut now: `max_batch` escalations wait, their tokens fill
    /// `max_batch_tokens`, or the oldest has waited the batch window ([`Self::pace`]).
    pub fn is_due(&self, now: Instant) -> bool {
        self.pending.len() >= self.max_batch || self.tokens_fill_a_batch() || self.flush_at().is_some_and(|at| at <= now)
    }

    /// Whether the escalations waiting cost at least what one batch may run: a cut now is as
    /// full as one after the window (the sum stops at the cap, within the first few rows).
    fn tokens_fill_a_batch(&self) -> bool {
        if self.max_batch_tokens == usize::MAX {
            return false; // no cap: only the count and the window cut
        }
        let mut tokens = 0usize;
        self.pending.iter().any(|e| {
            tokens = tokens.saturating_add(e.cost);
            tokens >= self.max_batch_tokens
        })
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
            if esc.is_cancelled() || esc.deadline <= now {
                self.left(&esc, now);
            }
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
    /// `max_batch_tokens` of prefill. First the escalations that fit whole (only a session's
    /// oldest waiting one may run, so its escalations go in `seq` order), oldest first or,
    /// with fair sharing, the oldest of the device served least, one row at a time; then, with
    /// the room left, a prefill step (at least a quarter of the cap) for one that did not fit,
    /// chosen the same way, which stays queued with the rest of its cost. Short work goes
    /// first, so a long prefill delays it by one step at most. Cancelled escalations are
    /// dropped and expired ones answered `Expired` first; the rest stay queued in order, and
    /// the batch's escalations are in queue order.
    pub fn cut(&mut self, now: Instant) -> Batch {
        let mut batch = Batch::default();
        self.purge(now);
        let mut items: Vec<Option<Escalation>> = std::mem::take(&mut self.pending).into_iter().map(Some).collect();
        // Each session's oldest waiting escalation, in queue order: the only ones that may run.
        let mut sessions = HashSet::new();
        let mut open: Vec<usize> = (0..items.len()).filter(|&i| items[i].as_ref().is_some_and(|e| sessions.insert(e.session().clone()))).collect();
        let mut taken = Vec::new();
        while taken.len() < self.max_batch {
            let room = self.max_batch_tokens.saturating_sub(batch.cost);
            let fits: Vec<usize> = open.iter().copied().filter(|&i| items[i].as_ref().is_some_and(|e| e.cost <= room)).collect();
            let Some(i) = self.choose(&items, &fits) else { break };
            open.retain(|&j| j != i);
            let Some(esc) = items[i].take() else { break };
            batch.cost += esc.cost;
            self.left(&esc, now);
            self.charge(&esc.request.session.device, esc.cost + 1, now);
            taken.push((i, esc));
        }
        taken.sort_by_key(|(i, _)| *i);
        batch.escalations = taken.into_iter().map(|(_, e)| e).collect();
        let min_step = self.min_step();
        loop {
            let room = self.max_batch_tokens.saturating_sub(batch.cost);
            if batch.len() >= self.max_batch || room < min_step {
                break;
            }
            // What is left open did not fit whole: its context's first `len - cost` tokens are
            // computed; bring them `room` further.
            let Some(i) = self.choose(&items, &open) else { break };
            open.retain(|&j| j != i);
            let Some(esc) = items[i].as_mut() else { break };
            let done = esc.request.run_len().saturating_sub(esc.cost);
            let step = room.min(esc.cost.saturating_sub(1)).max(1);
            batch.prefills.push(Prefill { request: esc.request.clone(), upto: done + step });
            batch.cost += step;
            esc.cost -= step;
            let device = esc.request.session.device.clone();
            self.charge(&device, step, now);
        }
        self.pending = items.into_iter().flatten().collect();
        // Warming only when no escalation needs the model (a short escalation's own batch is
        // never lengthened by it), the nearest to done first (a huge abandoned context must not
        // hold back small ones).
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
            let step = room.min(request.context.len() - *done);
            *done += step;
            batch.prefills.push(Prefill { request: request.clone(), upto: *done });
            batch.cost += step;
            let finished = *done >= request.context.len();
            let device = request.session.device.clone();
            self.charge(&device, step, now);
            if finished {
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

    /// A session ended at `now`: answer its waiting escalations `SessionEnded`; returns how many.
    pub fn end_session(&mut self, key: &SessionKey, now: Instant) -> usize {
        self.warming.retain(|(r, _)| &r.session != key);
        let (ended, keep): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.pending).into_iter().partition(|e| e.session() == key);
        self.pending = keep;
        let n = ended.len();
        for esc in ended {
            self.left(&esc, now);
            esc.answer(Outcome::SessionEnded);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::super::admission::CostModel;
    use super::super::book::{Ask, BookRules, SharedBook};
    use super::*;
    use tokio::sync::oneshot::error::TryRecvError;

    const WAIT: Duration = Duration::from_millis(3);

    fn key(session_id: u64) -> SessionKey {
        SessionKey { device: Arc::from("device"), session_id }
    }

    /// An escalation of `session` (with a context whose length tells escalations apart),
    /// queued at `at`, due `ttl` later.
    /// A book with `capacity` places and no cost bound that matters here.
    fn book(capacity: usize) -> SharedBook {
        let cut = super::super::admission::Cut { max_batch: 8, max_batch_tokens: usize::MAX };
        SharedBook::new(BookRules { capacity, cut, fair: false })
    }

    /// `e` with its admission's ticket from `book`, if it has a place.
    fn admitted(book: &SharedBook, e: Escalation) -> Option<Escalation> {
        let model = CostModel { batch_ms: 0.0, token_ms: 0.0 };
        let ask = Ask { session: &e.request.session, run_len: e.request.run_len(), now: e.enqueued, deadline: e.deadline, model, service_ms: 0 };
        let (_, ticket) = book.admit(&ask).ok()?;
        Some(e.with_ticket(ticket))
    }

    fn esc(session: u64, len: usize, at: Instant, ttl: Duration) -> (Escalation, oneshot::Receiver<Outcome>) {
        let request = LlmRequest { session: key(session), context: vec![1; len].into(), sampling: Default::default(), seq: len as u32, draft: Default::default() };
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

    /// An escalation of `device`'s session `session` whose context is `len` tokens, `cost` of
    /// them still to prefill.
    fn of_device(device: &str, session: u64, len: usize, cost: usize, at: Instant) -> (Escalation, oneshot::Receiver<Outcome>) {
        let request = LlmRequest { session: SessionKey { device: Arc::from(device), session_id: session }, context: vec![1; len].into(), sampling: Default::default(), seq: len as u32, draft: Default::default() };
        let (e, rx) = Escalation::new(request, at + Duration::from_secs(10), at);
        (e.with_cost(cost), rx)
    }

    fn devices(batch: &Batch) -> Vec<String> {
        batch.escalations.iter().map(|e| e.request.session.device.to_string()).collect()
    }

    /// A flood of 64 escalations from 64 sessions of one device, then one of a light device.
    fn flooded(q: &mut PendingQueue, t0: Instant) -> Vec<oneshot::Receiver<Outcome>> {
        let mut rx = Vec::new();
        for s in 0..64 {
            let (e, r) = of_device("flood", s, 8, 4, t0);
            q.push(e);
            rx.push(r);
        }
        let (e, r) = of_device("light", 1, 8, 4, t0 + Duration::from_millis(1));
        q.push(e);
        rx.push(r);
        rx
    }

    #[test]
    fn with_fair_share_a_light_device_is_in_the_next_batch_behind_a_flood() {
        let t0 = Instant::now();
        let mut fifo = PendingQueue::new(4, WAIT);
        let _rx = flooded(&mut fifo, t0);
        let cuts: Vec<bool> = (0..17).map(|_| devices(&fifo.cut(t0)).contains(&"light".to_string())).collect();
        assert_eq!(cuts.iter().position(|&l| l), Some(16), "oldest first, it waits for the flood's 16 batches");
        let mut fair = PendingQueue::new(4, WAIT).with_fair_share(64);
        let _rx = flooded(&mut fair, t0);
        // Lifted to the flood's counter, it ties, so it goes after one of the flood's rows.
        assert_eq!(devices(&fair.cut(t0)), ["flood", "flood", "flood", "light"]);
        assert_eq!(fair.fair().and_then(|f| f.counter("light")), Some(5), "charged its prefill and the token generated");
        assert_eq!(fair.fair().and_then(|f| f.counter("flood")), Some(15));
        assert_eq!(fair.fair().map(FairShare::backlogged), Some(1), "the light device has nothing left waiting");
    }

    #[test]
    fn with_fair_share_devices_alternate_by_tokens_and_a_session_keeps_its_order() {
        let t0 = Instant::now();
        let mut q = PendingQueue::new(2, WAIT).with_fair_share(64);
        let mut rx = Vec::new();
        // `a`: one session, three escalations (lens 1, 2, 3); `b`: four sessions.
        for (i, len) in [1usize, 2, 3].into_iter().enumerate() {
            let (e, r) = of_device("a", 1, len, 1, t0 + Duration::from_micros(i as u64));
            q.push(e);
            rx.push(r);
        }
        for s in 0..4 {
            let (e, r) = of_device("b", 10 + s, 10, 1, t0 + Duration::from_millis(1));
            q.push(e);
            rx.push(r);
        }
        let first = q.cut(t0);
        assert_eq!((devices(&first), lens(&first)), (vec!["a".to_string(), "b".into()], vec![1, 10]), "one row each, though `b` has four sessions waiting");
        let second = q.cut(t0);
        assert_eq!(lens(&second), [2, 10], "`a`'s next in seq order, and `b` again");
        assert_eq!(lens(&q.cut(t0)), [3, 10]);
        assert_eq!(lens(&q.cut(t0)), [10], "work-conserving: `b` alone takes what is left");
    }

    #[test]
    fn work_leaving_the_queue_any_way_leaves_no_device_backlogged() {
        let t0 = Instant::now();
        let mut q = PendingQueue::new(8, WAIT).with_fair_share(64);
        let (late, _late_rx) = esc(1, 1, t0, Duration::from_millis(1));
        let (gone, gone_rx) = esc(2, 2, t0, Duration::from_secs(1));
        let (ended, _ended_rx) = of_device("other", 3, 3, 1, t0);
        for e in [late, gone, ended] {
            q.push(e);
        }
        drop(gone_rx);
        assert_eq!(q.fair().map(FairShare::backlogged), Some(2));
        q.purge(t0 + Duration::from_millis(5));
        assert_eq!(q.fair().map(FairShare::backlogged), Some(1), "expired and cancelled work left");
        q.end_session(&SessionKey { device: Arc::from("other"), session_id: 3 }, t0 + Duration::from_millis(5));
        assert_eq!(q.fair().map(FairShare::backlogged), Some(0));
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
    fn a_batch_whose_waiting_tokens_fill_the_token_cap_is_due_without_waiting_for_company() {
        let t0 = Instant::now();
        let mut q = PendingQueue::new(16, WAIT).with_token_cap(32);
        let mut rx = Vec::new();
        for (s, cost) in [(1, 10), (2, 10), (3, 10)] {
            let (e, r) = costly(s, cost, t0, Duration::from_secs(1));
            q.push(e);
            rx.push(r);
        }
        assert!(!q.is_due(t0), "30 of 32 tokens: company may still fit");
        let (e, r) = costly(4, 10, t0, Duration::from_secs(1));
        q.push(e);
        rx.push(r);
        assert!(q.is_due(t0), "40 tokens wait: the next cut is full now");
        let batch = q.next_batch(t0).expect("a batch");
        assert!(batch.cost <= 32, "still within the cap: {}", batch.cost);
        assert!(!PendingQueue::new(16, WAIT).is_due(t0), "without a cap an empty queue is never due");
    }

    #[test]
    fn the_batch_window_is_max_wait_or_half_a_step_whichever_is_shorter() {
        let ms = Duration::from_millis;
        assert_eq!(batch_window(ms(3), 600.0), ms(3), "the embedded LLM's step: all of max_wait");
        assert_eq!(batch_window(ms(3), 2.0), ms(1), "a 2 ms step: 1 ms");
        assert_eq!(batch_window(ms(3), 0.0), Duration::ZERO, "a free step: no window");
        assert_eq!(batch_window(ms(3), f64::NAN), Duration::ZERO);
        let t0 = Instant::now();
        let mut q = PendingQueue::new(16, ms(3));
        q.pace(0.2);
        let (e, _rx) = esc(1, 1, t0, Duration::from_secs(1));
        q.push(e);
        assert_eq!(q.flush_at(), Some(t0 + Duration::from_micros(100)));
        assert!(q.is_due(t0 + Duration::from_micros(100)), "cut after half the 0.2 ms step, not 3 ms");
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
        let book = book(2);
        let mut q = PendingQueue::new(8, WAIT);
        let (gone, gone_rx) = esc(1, 1, t0, Duration::from_secs(1));
        q.push(admitted(&book, gone).expect("room"));
        let (kept, _kept_rx) = esc(2, 2, t0, Duration::from_secs(1));
        q.push(admitted(&book, kept).expect("room"));
        assert!(admitted(&book, esc(3, 1, t0, Duration::from_secs(1)).0).is_none(), "the queue is full");
        drop(gone_rx);
        let batch = q.cut(t0);
        assert_eq!(lens(&batch), [2]);
        assert_eq!(book.lock().rows(), 1, "the cancelled one's place is free, the running one holds its own");
        drop(batch);
        assert_eq!(book.lock().rows(), 0, "a batch dropped unanswered (the batcher stopped) frees its places too");
    }

    #[test]
    fn ending_a_session_answers_its_waiting_escalations_session_ended() {
        let t0 = Instant::now();
        let book = book(8);
        let mut q = PendingQueue::new(8, WAIT);
        let (a, mut a_rx) = esc(1, 1, t0, Duration::from_secs(1));
        let (b, mut b_rx) = esc(2, 2, t0, Duration::from_secs(1));
        let (c, mut c_rx) = esc(1, 3, t0, Duration::from_secs(1));
        for e in [a, b, c] {
            q.push(admitted(&book, e).expect("room"));
        }
        assert_eq!(q.end_session(&key(1), t0), 2);
        assert_eq!(a_rx.try_recv(), Ok(Outcome::SessionEnded));
        assert_eq!(c_rx.try_recv(), Ok(Outcome::SessionEnded));
        assert_eq!(b_rx.try_recv(), Err(TryRecvError::Empty));
        assert_eq!(book.lock().rows(), 1);
        assert_eq!(lens(&q.cut(t0)), [2]);
    }

    #[test]
    fn answering_releases_the_admission_before_the_device_sees_the_answer() {
        let book = book(1);
        let (e, mut rx) = esc(1, 1, Instant::now(), Duration::from_secs(1));
        let e = admitted(&book, e).expect("room");
        assert_eq!(book.lock().rows(), 1);
        e.answer(Outcome::Expired);
        assert_eq!(rx.try_recv(), Ok(Outcome::Expired));
        assert_eq!(book.lock().rows(), 0);
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
        let book = book(8);
        let mut q = PendingQueue::new(16, WAIT).with_token_cap(256);
        let (huge, huge_rx) = costly(1, 4095, t0, Duration::from_secs(30));
        q.push(admitted(&book, huge).expect("room"));
        let first = q.cut(t0);
        assert_eq!((first.prefills.len(), first.escalations.len(), first.cost), (1, 0, 256));
        drop(huge_rx); // the device left while the first step ran
        let (small, _small_rx) = costly(2, 3, t0, Duration::from_secs(30));
        q.push(small);
        let next = q.cut(t0);
        assert_eq!((lens(&next), next.prefills.len()), (vec![3], 0), "no more of the long one");
        drop(next);
        assert!(q.is_empty());
        assert_eq!(book.lock().rows(), 0, "its admission is released with it");
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
        q.end_session(&key(1), t0);
        assert_eq!(q.warming(), 0);
        for s in 0..(MAX_WARMING as u64 + 5) {
            let (e, _) = esc(100 + s, 40, t0, Duration::from_secs(1));
            q.warm(e.request.clone(), 0);
        }
        assert_eq!(q.warming(), MAX_WARMING, "bounded");
    }
}
