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
//!   ([`PendingQueue::end_session`]).
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

use crate::backend::{BackendError, BackendRequest, BackendToken};
use crate::sessions::SessionKey;

/// What became of one escalation at the batcher (the connection turns it into a frame).
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The LLM's token, and the time the backend call took.
    Token {
        /// The backend's answer.
        token: BackendToken,
        /// Backend time for the whole batch, ms.
        llm_ms: u32,
    },
    /// The backend refused or failed this request.
    Failed(BackendError),
    /// Its deadline passed before it could run.
    Expired,
    /// The device ended the session before it could run (e.g. an unneeded prompt pre-sync):
    /// dropped so that it does not delay the device's next session.
    SessionEnded,
}

/// One slot of the admission bound: the in-flight count goes down when this is dropped.
#[derive(Debug)]
pub struct Admission(Arc<AtomicUsize>);

impl Admission {
    /// Take a slot if fewer than `capacity` are taken; `None` means the queue is full.
    pub fn try_take(in_flight: &Arc<AtomicUsize>, capacity: usize) -> Option<Self> {
        let prev = in_flight.fetch_add(1, Ordering::AcqRel);
        if prev >= capacity {
            in_flight.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Self(in_flight.clone()))
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One admitted escalation, waiting for (or in) a batch.
#[derive(Debug)]
pub struct Escalation {
    /// What to compute.
    pub request: BackendRequest,
    /// When the device stops waiting.
    pub deadline: Instant,
    /// When it was queued (for the max-wait rule and the queue-wait histogram).
    pub enqueued: Instant,
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
    pub fn new(request: BackendRequest, deadline: Instant, enqueued: Instant) -> (Self, oneshot::Receiver<Outcome>) {
        let (reply, rx) = oneshot::channel();
        let stages = Stages { parent: tracing::Span::none(), stage: tracing::Span::none(), backend: tracing::Span::none() };
        (Self { request, deadline, enqueued, reply, admission: None, stages }, rx)
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

/// Escalations waiting for a batch, in arrival order.
#[derive(Debug)]
pub struct PendingQueue {
    pending: VecDeque<Escalation>,
    max_batch: usize,
    max_wait: Duration,
}

impl PendingQueue {
    /// An empty queue cutting batches of at most `max_batch` after at most `max_wait`.
    pub fn new(max_batch: usize, max_wait: Duration) -> Self {
        Self { pending: VecDeque::new(), max_batch: max_batch.max(1), max_wait }
    }

    /// Queue an escalation behind the others.
    pub fn push(&mut self, escalation: Escalation) {
        self.pending.push_back(escalation);
    }

    /// Escalations waiting.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether nothing waits.
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
    pub fn next_batch(&mut self, now: Instant) -> Option<Vec<Escalation>> {
        if !self.is_due(now) {
            return None;
        }
        Some(self.cut(now)).filter(|b| !b.is_empty())
    }

    /// Cut a batch now: up to `max_batch` live escalations, one per session, oldest first.
    /// Cancelled ones are dropped and expired ones answered `Expired` on the way; the rest
    /// stay queued in order.
    pub fn cut(&mut self, now: Instant) -> Vec<Escalation> {
        let mut batch = Vec::new();
        let mut sessions = HashSet::new();
        let mut keep = VecDeque::with_capacity(self.pending.len());
        while let Some(esc) = self.pending.pop_front() {
            if esc.is_cancelled() {
                metrics::counter!("duet_gateway_escalations_cancelled_total").increment(1);
                continue;
            }
            if esc.deadline <= now {
                metrics::counter!("duet_gateway_escalations_expired_total").increment(1);
                esc.answer(Outcome::Expired);
                continue;
            }
            if batch.len() < self.max_batch && sessions.insert(esc.session().clone()) {
                batch.push(esc);
            } else {
                keep.push_back(esc);
            }
        }
        self.pending = keep;
        batch
    }

    /// A session ended: answer its waiting escalations `SessionEnded`; returns how many.
    pub fn end_session(&mut self, key: &SessionKey) -> usize {
        let (ended, keep): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.pending).into_iter().partition(|e| e.session() == key);
        self.pending = keep;
        let n = ended.len();
        for esc in ended {
            metrics::counter!("duet_gateway_escalations_cancelled_total").increment(1);
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
        let request = BackendRequest { session: key(session), context: vec![1; len].into(), sampling: Default::default(), seq: len as u32 };
        Escalation::new(request, at + ttl, at)
    }

    fn lens(batch: &[Escalation]) -> Vec<usize> {
        batch.iter().map(|e| e.request.context.len()).collect()
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
}
