//! What connections hold of the batcher: [`BatchQueue`], the batcher's side of the
//! [`Dispatch`] seam. Submitting asks the [`SharedBook`] once: it decides and records the
//! admission in one step ([`super::book`]); admitted work goes to the actor with its ticket,
//! refused work gets `Busy` at once. Nothing here decides by itself.
//!
//! Ractor mailboxes are unbounded, so the bound is ours: an escalation beyond the queue's
//! capacity, or one the estimate says would miss its deadline, gets `Busy` at once instead of
//! waiting its deadline out.

use std::sync::Arc;
use std::time::Instant;

use ractor::ActorRef;
use tokio::sync::oneshot;

use super::actor::BatcherMsg;
use super::admission::Refusal;
use super::book::{Ask, SharedBook};
use super::figures::Figures;
use super::queue::Escalation;
use crate::dispatch::{Busy, BusyReason, Dispatch, LlmRequest, Outcome};
use crate::sessions::SessionKey;

/// Cheap, cloneable handle for submitting work to the batcher.
#[derive(Clone)]
pub struct BatchQueue {
    pub(super) actor: ActorRef<BatcherMsg>,
    pub(super) figures: Arc<Figures>,
    pub(super) book: SharedBook,
    pub(super) capacity: usize,
}

impl BatchQueue {
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
        let learned = &self.figures.learned;
        let ask = Ask { session: &request.session, run_len: request.run_len(), now, deadline, model: learned.cost_model(), service_ms: learned.service_ms() };
        let (admission, ticket) = match self.book.admit(&ask) {
            Ok(admitted) => admitted,
            Err(refusal) => return Err(self.refuse(request, refusal, now)),
        };
        let (esc, rx) = Escalation::new(request, deadline, now);
        // Traced under the caller's current span (the connection's `gateway.escalation`).
        let esc = esc.with_cost(admission.cost).with_trace(tracing::Span::current(), admission.behind).with_ticket(ticket);
        // If the actor is gone the message (and with it the ticket) is dropped.
        if self.actor.send_message(BatcherMsg::Submit(Box::new(esc))).is_err() {
            return Err(Busy { retry_after_ms: 1000, reason: BusyReason::Stopped });
        }
        metrics::gauge!("duet_gateway_queue_depth").set((admission.behind + 1) as f64);
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
        self.book.lock().rows()
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::batcher::backend::Backend;
    use crate::batcher::spawn_batcher_with;
    use crate::config::{BatcherConfig, OverloadConfig};
    use crate::dispatch::{LlmError, LlmToken, ModelFacts};

    /// Answers every request with its context length, after `delay`.
    struct SlowEcho(Duration);

    impl Backend for SlowEcho {
        fn name(&self) -> &str {
            "slow-echo"
        }
        fn facts(&self) -> ModelFacts {
            ModelFacts { llm_id: "slow-echo".into(), tokenizer_fingerprint: String::new(), vocab_size: 1 << 20, max_context: 1 << 20 }
        }
        fn next_tokens(&mut self, batch: &[LlmRequest]) -> Vec<Result<LlmToken, LlmError>> {
            std::thread::sleep(self.0);
            batch.iter().map(|r| Ok(LlmToken { token_id: r.context.len() as u32, logprob: 0.0, accepted: 0 })).collect()
        }
    }

    fn request(session_id: u64, len: usize) -> LlmRequest {
        let session = SessionKey { device: Arc::from("device"), session_id };
        LlmRequest { session, context: vec![1; len].into(), sampling: Default::default(), seq: 1, draft: Default::default() }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ending_a_session_drops_its_queued_work_but_not_others() {
        let config = BatcherConfig { max_batch: 1, max_wait: Duration::ZERO, queue_capacity: 16 };
        let queue = spawn_batcher_with(Box::new(SlowEcho(Duration::from_millis(200))), config, OverloadConfig::default()).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let running = queue.try_submit(request(1, 3), deadline, Instant::now()).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let queued_same = queue.try_submit(request(1, 4), deadline, Instant::now()).unwrap();
        let queued_other = queue.try_submit(request(2, 5), deadline, Instant::now()).unwrap();
        queue.end_session(SessionKey { device: Arc::from("device"), session_id: 1 });
        assert_eq!(queued_same.await.unwrap(), Outcome::SessionEnded);
        assert!(matches!(running.await.unwrap(), Outcome::Token { token, .. } if token.token_id == 3), "the running batch finishes");
        assert!(matches!(queued_other.await.unwrap(), Outcome::Token { token, .. } if token.token_id == 5));
        assert_eq!(queue.in_flight(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn beyond_capacity_a_submission_is_refused_at_once() {
        let config = BatcherConfig { max_batch: 1, max_wait: Duration::ZERO, queue_capacity: 1 };
        let queue = spawn_batcher_with(Box::new(SlowEcho(Duration::from_millis(100))), config, OverloadConfig::default()).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let first = queue.try_submit(request(1, 3), deadline, Instant::now()).unwrap();
        assert!(queue.try_submit(request(2, 3), deadline, Instant::now()).is_err());
        assert!(matches!(first.await.unwrap(), Outcome::Token { .. }));
        assert_eq!(queue.in_flight(), 0);
        assert!(queue.try_submit(request(2, 3), deadline, Instant::now()).is_ok(), "the slot is free again");
    }

    /// Takes 1 ms per token of every request's context, with no cache: what the cost model
    /// learns is a time per token.
    struct PerToken;

    impl Backend for PerToken {
        fn name(&self) -> &str {
            "per-token"
        }
        fn facts(&self) -> ModelFacts {
            SlowEcho(Duration::ZERO).facts()
        }
        fn next_tokens(&mut self, batch: &[LlmRequest]) -> Vec<Result<LlmToken, LlmError>> {
            let tokens: usize = batch.iter().map(|r| r.context.len()).sum();
            std::thread::sleep(Duration::from_millis(tokens as u64));
            batch.iter().map(|r| Ok(LlmToken { token_id: r.context.len() as u32, logprob: 0.0, accepted: 0 })).collect()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_context_refused_for_its_cost_is_warmed_so_its_next_escalation_costs_its_delta() {
        let config = BatcherConfig { max_batch: 4, max_wait: Duration::ZERO, queue_capacity: 16 };
        let overload = OverloadConfig { max_batch_tokens: 128, ..OverloadConfig::default() };
        let queue = spawn_batcher_with(Box::new(PerToken), config, overload).await.unwrap();
        let refused = queue.try_submit(request(1, 600), Instant::now() + Duration::from_millis(200), Instant::now()).expect_err("600 ms of prefill");
        assert_eq!(refused.reason, BusyReason::Cost);
        assert!(queue.not_ready(Instant::now() + Duration::from_secs(60)).is_some(), "a refusal leaves the batcher saturated until it catches up");
        let give_up = Instant::now() + Duration::from_secs(20);
        loop {
            let now = Instant::now();
            if let Ok(rx) = queue.try_submit(request(1, 601), now + Duration::from_millis(200), now) {
                drop(rx);
                break;
            }
            assert!(now < give_up, "the session was never warmed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopped_batcher_refuses_at_once_and_is_not_ready() {
        let config = BatcherConfig { max_batch: 1, max_wait: Duration::ZERO, queue_capacity: 4 };
        let queue = spawn_batcher_with(Box::new(SlowEcho(Duration::ZERO)), config, OverloadConfig::default()).await.unwrap();
        for _ in 0..100 {
            if queue.not_ready(Instant::now()).is_none() {
                break; // running (the actor's status turns Running just after it starts)
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(queue.not_ready(Instant::now()), None);
        queue.stop();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = Instant::now();
        let busy = queue.try_submit(request(1, 3), now + Duration::from_secs(1), now).expect_err("nobody to run it");
        assert_eq!(busy.reason, BusyReason::Stopped);
        assert_eq!(queue.in_flight(), 0, "the refused work holds no place");
        assert_eq!(queue.not_ready(now).as_deref(), Some("batcher not running"));
    }
}
