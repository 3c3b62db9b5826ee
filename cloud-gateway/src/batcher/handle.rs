//! What connections hold of the batcher: [`BatchQueue`], the batcher's side of the
//! [`Dispatch`] seam. Submitting reads one admission [`Snapshot`] (the figures the actor
//! keeps, the session's ledger entry), applies [`admission::decide`]'s decision, and hands
//! admitted work to the actor; nothing here decides by itself.
//!
//! Ractor mailboxes are unbounded, so the bound is ours: an escalation beyond the queue's
//! capacity, or one the estimate says would miss its deadline, gets `Busy` at once instead of
//! waiting its deadline out.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use ractor::ActorRef;
use tokio::sync::oneshot;

use super::actor::BatcherMsg;
use super::admission::{self, Cut, Decision, Refusal, Snapshot};
use super::figures::Figures;
use super::ledger::SessionLedger;
use super::queue::{Admission, Escalation};
use crate::dispatch::{Busy, BusyReason, Dispatch, LlmRequest, Outcome};
use crate::sessions::SessionKey;

/// Cheap, cloneable handle for submitting work to the batcher.
#[derive(Clone)]
pub struct BatchQueue {
    pub(super) actor: ActorRef<BatcherMsg>,
    pub(super) figures: Arc<Figures>,
    pub(super) ledger: Arc<SessionLedger>,
    pub(super) capacity: usize,
    pub(super) cut: Cut,
    /// Whether devices share the queue fairly (admission weighs the device's share).
    pub(super) fair: bool,
}

impl BatchQueue {
    /// What admission weighs for `request` at `now`.
    fn snapshot(&self, request: &LlmRequest, deadline: Instant, now: Instant) -> Snapshot {
        Snapshot {
            now,
            deadline,
            // A draft's tokens run too: they cost like the context's.
            context_len: request.run_len(),
            session: self.ledger.get(&request.session),
            all: self.figures.admitted.ahead(),
            model: self.figures.learned.cost_model(),
            cut: self.cut,
            capacity: self.capacity,
            service_ms: self.figures.learned.service_ms(),
            device: self.fair.then(|| self.ledger.device(&request.session.device)),
        }
    }

    /// Refuse `request` at `now`: the batcher counts as saturated, and a session refused for
    /// its cost is warmed with idle room (its context is held all the same).
    fn refuse(&self, request: LlmRequest, refusal: Refusal, now: Instant) -> Busy {
        self.figures.readiness.refused(now);
        if let Some(done) = refusal.warm_from {
            let _ = self.actor.send_message(BatcherMsg::Warm(request, done));
        }
        Busy { retry_after_ms: refusal.retry_after_ms, reason: refusal.reason }
    }
}

impl Dispatch for BatchQueue {
    fn try_submit(&self, request: LlmRequest, deadline: Instant, now: Instant) -> Result<oneshot::Receiver<Outcome>, Busy> {
        let snapshot = self.snapshot(&request, deadline, now);
        let (cost, work) = match admission::decide(&snapshot) {
            Decision::Admit { cost, work } => (cost, work),
            Decision::Refuse(refusal) => return Err(self.refuse(request, refusal, now)),
        };
        let admitted = &self.figures.admitted;
        let Some(slot) = Admission::try_take(&admitted.in_flight, self.capacity) else {
            // Another connection took the last place since the snapshot.
            return Err(self.refuse(request, admission::full(&snapshot), now));
        };
        let slot = match work.long_rows {
            0 => slot.with_tokens(&admitted.queued_tokens, cost),
            _ => slot.with_tokens(&admitted.long_tokens, cost).with_tokens(&admitted.long_rows, 1),
        };
        let slot = slot.with_claim(self.ledger.claim(&request.session, request.context.len(), work));
        let (esc, rx) = Escalation::new(request, deadline, now);
        // Traced under the caller's current span (the connection's `gateway.escalation`).
        let queued_behind = admitted.in_flight.load(Ordering::Relaxed).saturating_sub(1);
        let esc = esc.with_cost(cost).with_trace(tracing::Span::current(), queued_behind).with_admission(slot);
        // If the actor is gone the message (and with it the admission) is dropped.
        if self.actor.send_message(BatcherMsg::Submit(Box::new(esc))).is_err() {
            return Err(Busy { retry_after_ms: 1000, reason: BusyReason::Stopped });
        }
        metrics::gauge!("duet_gateway_queue_depth").set(admitted.in_flight.load(Ordering::Relaxed) as f64);
        Ok(rx)
    }

    /// Its queued escalations are answered `SessionEnded` (one already running finishes), and
    /// the backend forgets it.
    fn end_session(&self, key: SessionKey) {
        let _ = self.actor.send_message(BatcherMsg::EndSession(key));
    }

    fn service_ms(&self) -> u32 {
        self.figures.learned.service_ms()
    }

    fn in_flight(&self) -> usize {
        self.figures.admitted.in_flight.load(Ordering::Relaxed)
    }

    /// The batcher stopped, its queue is full, or it has been saturated or its backend
    /// stalled for too long ([`admission::not_ready`]).
    fn not_ready(&self, now: Instant) -> Option<String> {
        if self.actor.get_status() != ractor::ActorStatus::Running {
            return Some("batcher not running".into());
        }
        if self.in_flight() >= self.capacity {
            return Some("queue full".into());
        }
        self.figures.readiness.not_ready(now)
    }

    fn stop(&self) {
        self.actor.stop(None);
    }
}
