//! An admitted escalation's answer still to come, and the metrics both LLM paths share:
//! every admitted escalation is counted once, as answered, failed, expired (its deadline
//! missed) or cancelled, and every refusal once, by reason; while it waits, it counts among
//! the waiting whose oldest gives the queue age ([`super::waiting`]).

use std::time::Instant;

use tokio::sync::oneshot;

use super::contract::{BusyReason, Outcome};
use super::waiting::Waiter;

/// The answer to an admitted escalation, due by its deadline.
#[derive(Debug)]
pub struct Pending {
    rx: oneshot::Receiver<Outcome>,
    deadline: Instant,
    /// Whether its outcome has been counted (else dropping it counts a cancellation).
    settled: bool,
    /// Its place among the escalations waiting for answers, until it is settled or dropped.
    waiter: Option<Waiter>,
}

impl Pending {
    pub(super) fn new(rx: oneshot::Receiver<Outcome>, deadline: Instant) -> Self {
        Self { rx, deadline, settled: false, waiter: None }
    }

    /// Count it among the waiting (the queue age) with `waiter` until it is settled or dropped.
    pub(super) fn waiting(mut self, waiter: Waiter) -> Self {
        self.waiter = Some(waiter);
        self
    }

    /// Its outcome, or `Expired` at the deadline, however long the work ahead of it runs
    /// (never late; the work is cancelled with this). `None` if the LLM path stopped without
    /// answering.
    pub async fn outcome(mut self) -> Option<Outcome> {
        let outcome = tokio::select! {
            o = &mut self.rx => o.ok(),
            _ = tokio::time::sleep_until(self.deadline.into()) => Some(Outcome::Expired),
        };
        self.settled = true;
        self.waiter = None;
        count_outcome(outcome.as_ref());
        outcome
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.settled {
            // The device stopped waiting: its work is dropped wherever it is.
            metrics::counter!("duet_gateway_escalations_cancelled_total").increment(1);
        }
    }
}

fn count_outcome(outcome: Option<&Outcome>) {
    match outcome {
        Some(Outcome::Token { .. }) => metrics::counter!("duet_gateway_escalations_answered_total").increment(1),
        Some(Outcome::Failed(_)) => metrics::counter!("duet_gateway_backend_errors_total").increment(1),
        Some(Outcome::Expired) => metrics::counter!("duet_gateway_escalations_expired_total").increment(1),
        // Dropped unrun because the device ended its session: a cancellation.
        Some(Outcome::SessionEnded) => metrics::counter!("duet_gateway_escalations_cancelled_total").increment(1),
        None => {}
    }
}

/// An escalation refused with `Busy` for `reason`.
pub(super) fn count_busy(reason: BusyReason) {
    metrics::counter!("duet_gateway_escalations_busy_total").increment(1);
    metrics::counter!("duet_gateway_admission_refused_total", "reason" => reason.label()).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn an_escalation_is_answered_expired_at_its_deadline_and_its_work_cancelled() {
        let (tx, rx) = oneshot::channel::<Outcome>();
        let pending = Pending::new(rx, Instant::now() + Duration::from_millis(50));
        assert_eq!(pending.outcome().await, Some(Outcome::Expired));
        assert!(tx.is_closed(), "the path sees the escalation cancelled");
    }

    #[tokio::test]
    async fn an_answer_before_the_deadline_is_the_outcome_and_a_stopped_path_is_none() {
        let (tx, rx) = oneshot::channel();
        let pending = Pending::new(rx, Instant::now() + Duration::from_secs(10));
        tx.send(Outcome::SessionEnded).unwrap();
        assert_eq!(pending.outcome().await, Some(Outcome::SessionEnded));
        let (tx, rx) = oneshot::channel::<Outcome>();
        drop(tx);
        assert_eq!(Pending::new(rx, Instant::now() + Duration::from_secs(10)).outcome().await, None);
    }
}
