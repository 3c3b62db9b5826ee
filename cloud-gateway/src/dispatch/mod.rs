//! The seam between a device's escalation and the LLM that answers it.
//!
//! The gateway has two LLM paths, siblings behind this one contract (`contract.rs`: [`LlmRequest`], [`Outcome`], [`Busy`], [`ModelFacts`]): the
//! [`crate::batcher`] (an in-process [`Backend`](crate::batcher::backend::Backend) fed one
//! batch at a time, with admission by estimated cost) and the [`crate::engine`] pool (external
//! engines that batch on their own: one HTTP request per escalation, many in flight). Each
//! implements [`Dispatch`]; connections hold a [`Dispatcher`] and never learn which it is.
//!
//! What is common to both is done here, once: the drain's admission window, the refusal
//! (`Busy`) and outcome metrics, the queue age (how long the oldest escalation not answered
//! yet has waited: [`waiting`]), and answering at the deadline whatever still holds the work
//! ([`Pending`]). Dropping a [`Pending`] cancels the work (before its batch for the batcher,
//! mid-request for an engine).
//!
//! Admission by cost is one rule both paths apply to what is ahead of an escalation on their
//! side ([`admission`]: the learned cost model, the test against the deadline, the retry hint),
//! so a device hears `Busy` for the same reason whichever path serves.
//!
//! Fairness between devices is one policy both paths apply to their own queue ([`fair`]: a
//! virtual token counter per device): which waiting escalation goes next, and whose work is
//! refused first when the path is full.
//!
//! Traces: a path hangs its spans (the batcher's queue wait, batch and backend call; the
//! pool's `backend` span with one `engine_request` per HTTP attempt) under the caller's
//! current span, the connection's `gateway.escalation`.

pub mod admission;
mod contract;
pub mod draft;
pub mod fair;
mod pending;
pub mod waiting;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::exchange::gateway::DRAINING_RETRY_AFTER_MS;
use common::exchange::Drain;
use tokio::sync::{oneshot, watch};

pub use contract::{Busy, BusyReason, LlmError, LlmRequest, LlmToken, ModelFacts, Outcome};
pub use pending::Pending;
pub use draft::DraftVerify;
use waiting::Waiting;

use crate::sessions::SessionKey;

/// One LLM path: what the batcher and the engine pool each implement.
pub trait Dispatch: Send + Sync + 'static {
    /// Admit `request` at `now` and start it, or refuse at once when it cannot be answered
    /// before `deadline`; the outcome arrives on the receiver (dropping it cancels the work).
    fn try_submit(&self, request: LlmRequest, deadline: Instant, now: Instant) -> Result<oneshot::Receiver<Outcome>, Busy>;
    /// A session ended or expired: drop its queued work and any per-session state.
    fn end_session(&self, key: SessionKey);
    /// Smoothed LLM time per escalation (or batch), ms: announced to devices in `Welcome`.
    fn service_ms(&self) -> u32;
    /// Escalations admitted and not yet answered.
    fn in_flight(&self) -> usize;
    /// Why the path cannot take work at `now`, if it cannot (for `/readyz`).
    fn not_ready(&self, now: Instant) -> Option<String>;
    /// Stop for good (the gateway shuts down).
    fn stop(&self) {}
}

/// What connections hold: one LLM path, with what both paths share applied around it.
#[derive(Clone)]
pub struct Dispatcher {
    path: Arc<dyn Dispatch>,
    drain: watch::Receiver<Option<Drain>>,
    /// The escalations admitted and not answered yet, for the queue age.
    waiting: Arc<Waiting>,
    /// How much of each draft the LLM checks.
    draft_verify: DraftVerify,
}

impl Dispatcher {
    /// `path`, refusing work once the drain watched through `drain` stops taking it; every
    /// draft checked whole.
    pub fn new(path: Arc<dyn Dispatch>, drain: watch::Receiver<Option<Drain>>) -> Self {
        Self { path, drain, waiting: Arc::default(), draft_verify: DraftVerify::Whole }
    }

    /// Check drafts as `mode` says (`[overload] draft-verify`).
    pub fn verifying(mut self, mode: DraftVerify) -> Self {
        self.draft_verify = mode;
        self
    }

    /// Admit `request` and start it, or refuse at once (draining past the admission window,
    /// or the path has no room before `deadline`). Counts the refusal.
    pub fn try_submit(&self, mut request: LlmRequest, deadline: Instant) -> Result<Pending, Busy> {
        let now = Instant::now();
        if self.draft_verify == DraftVerify::ByLoad && request.draft.len() > 1 {
            // The queue's age is read only where it can cut a draft (off the common path).
            let service = Duration::from_millis(u64::from(self.path.service_ms()));
            let keep = draft::verify_len(self.draft_verify, request.draft.len(), self.waiting.oldest_age(now), service);
            if keep < request.draft.len() {
                metrics::counter!("duet_gateway_draft_tokens_unchecked_total").increment((request.draft.len() - keep) as u64);
                request.draft = Arc::from(&request.draft[..keep]);
            }
        }
        let draining = self.drain.borrow().is_some_and(|d| !d.admits_escalations(now));
        let submitted = match draining {
            // Past the drain's admission window: the device falls back and reconnects elsewhere.
            true => Err(Busy { retry_after_ms: DRAINING_RETRY_AFTER_MS, reason: BusyReason::Draining }),
            false => self.path.try_submit(request, deadline, now),
        };
        match submitted {
            Ok(rx) => Ok(Pending::new(rx, deadline).waiting(self.waiting.enter(now))),
            Err(busy) => {
                pending::count_busy(busy.reason);
                Err(busy)
            }
        }
    }

    /// A session ended or expired: drop its queued work and per-session state.
    pub fn end_session(&self, key: SessionKey) {
        self.path.end_session(key);
    }

    /// Smoothed LLM time per escalation (or batch), ms.
    pub fn service_ms(&self) -> u32 {
        self.path.service_ms()
    }

    /// Escalations admitted and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.path.in_flight()
    }

    /// How long the oldest escalation admitted and not answered yet has waited (zero when
    /// none waits): the queue age `/metrics` reports as `duet_gateway_queue_age_seconds`.
    pub fn queue_age(&self) -> Duration {
        self.waiting.oldest_age(Instant::now())
    }

    /// Why the gateway's LLM cannot take work now, if it cannot (for `/readyz`).
    pub fn not_ready(&self) -> Option<String> {
        self.path.not_ready(Instant::now())
    }

    /// Stop the path.
    pub fn stop(&self) {
        self.path.stop();
    }
}

/// The LLM tokens served, whichever path served them: `prefill` tokens of prefill and one
/// generated per answered escalation (`answered`), as `duet_gateway_llm_tokens_total`.
pub(crate) fn count_served(prefill: usize, answered: usize) {
    metrics::counter!("duet_gateway_llm_tokens_total", "kind" => "prefill").increment(prefill as u64);
    metrics::counter!("duet_gateway_llm_tokens_total", "kind" => "generated").increment(answered as u64);
}
