//! The batcher actor: owns the [`PendingQueue`] and the backend, and runs one batch at a time.
//!
//! In the spirit of TGI's router queue: connection handlers submit work with a oneshot reply
//! and get an answer or a typed failure; a dropped receiver (the device gave up, the stream was
//! reset) cancels the work before it reaches the model. Ractor mailboxes are unbounded, so the
//! bound is ours: [`BatchQueue::try_submit`] refuses at once beyond `queue_capacity`, which is
//! what lets the gateway answer `Busy` instead of letting deadlines expire.
//!
//! The cut policy is [`PendingQueue`]'s; this shell supplies the clock and the timer. The
//! backend runs on a blocking thread and comes back in [`BatcherMsg::BatchDone`], so the actor
//! stays responsive meanwhile and the queue fills for the next batch.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::oneshot;

use super::queue::{Admission, Escalation, Outcome, PendingQueue};
use crate::backend::{Backend, BackendError, BackendRequest, BackendToken};
use crate::config::BatcherConfig;
use crate::sessions::SessionKey;

/// Messages of the batcher actor.
pub enum BatcherMsg {
    /// New work (already admitted by [`BatchQueue::try_submit`]).
    Submit(Escalation),
    /// The max-wait timer fired.
    Flush,
    /// A backend call finished; the backend comes back with its results.
    BatchDone {
        /// The backend, returned by the blocking thread that ran it.
        backend: Box<dyn Backend>,
        /// One result per escalation of the running batch, in order.
        results: Vec<Result<BackendToken, BackendError>>,
        /// How long the call took, ms.
        backend_ms: f64,
    },
    /// A session ended or expired: drop its queued work and the backend's state for it.
    EndSession(SessionKey),
}

/// Submission refused: the queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull {
    /// Suggested wait before retrying.
    pub retry_after_ms: u32,
}

/// Shared figures the rest of the gateway reads (Welcome limits, readiness, metrics).
#[derive(Debug, Default)]
pub struct BatcherStats {
    /// Escalations admitted and not yet answered.
    pub in_flight: Arc<AtomicUsize>,
    /// Smoothed backend time per batch, ms (reported to devices as service time).
    pub service_ms: AtomicU32,
}

/// Cheap, cloneable handle for submitting work: what connections hold of the batcher.
#[derive(Clone)]
pub struct BatchQueue {
    actor: ActorRef<BatcherMsg>,
    stats: Arc<BatcherStats>,
    capacity: usize,
}

impl BatchQueue {
    /// Admit and enqueue, or refuse at once when full.
    pub fn try_submit(&self, request: BackendRequest, deadline: Instant) -> Result<oneshot::Receiver<Outcome>, QueueFull> {
        let Some(admission) = Admission::try_take(&self.stats.in_flight, self.capacity) else {
            metrics::counter!("duet_gateway_escalations_busy_total").increment(1);
            return Err(QueueFull { retry_after_ms: self.stats.service_ms.load(Ordering::Relaxed).max(5) });
        };
        let (esc, rx) = Escalation::new(request, deadline, Instant::now());
        // Traced under the caller's current span (the connection's `gateway.escalation`).
        let esc = esc.with_trace(tracing::Span::current(), self.stats.in_flight.load(Ordering::Relaxed).saturating_sub(1));
        // If the actor is gone the message (and with it the admission) is dropped.
        if self.actor.send_message(BatcherMsg::Submit(esc.with_admission(admission))).is_err() {
            return Err(QueueFull { retry_after_ms: 1000 });
        }
        metrics::gauge!("duet_gateway_queue_depth").set(self.stats.in_flight.load(Ordering::Relaxed) as f64);
        Ok(rx)
    }

    /// A session is gone: its queued escalations are answered `SessionEnded` (one already
    /// running finishes), and the backend forgets it.
    pub fn end_session(&self, key: SessionKey) {
        let _ = self.actor.send_message(BatcherMsg::EndSession(key));
    }

    /// Shared statistics.
    pub fn stats(&self) -> &Arc<BatcherStats> {
        &self.stats
    }

    /// Most escalations admitted at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The actor, e.g. to stop it or check that it runs.
    pub fn actor(&self) -> &ActorRef<BatcherMsg> {
        &self.actor
    }
}

/// The batcher actor.
pub struct Batcher;

/// Its state.
pub struct BatcherState {
    queue: PendingQueue,
    /// `None` while a batch runs on the blocking thread.
    backend: Option<Box<dyn Backend>>,
    running: Vec<Escalation>,
    timer_armed: bool,
    stats: Arc<BatcherStats>,
    /// Sessions that ended while the backend was busy; applied when it returns.
    ended: Vec<SessionKey>,
}

/// Start the batcher around a backend.
///
/// The backend first answers one one-token warm-up request: the first real escalation does
/// not pay the runtime's lazy initialisation, and devices that connect before any traffic are
/// told a measured service time instead of none (their first deadlines would be too short).
pub async fn spawn_batcher(backend: Box<dyn Backend>, config: BatcherConfig) -> anyhow::Result<BatchQueue> {
    let (backend, warmup_ms) = tokio::task::spawn_blocking(move || warm_up(backend)).await?;
    let stats = Arc::new(BatcherStats { service_ms: AtomicU32::new(warmup_ms), ..BatcherStats::default() });
    let (actor, _handle) = Actor::spawn(None, Batcher, (backend, config, stats.clone())).await?;
    Ok(BatchQueue { actor, stats, capacity: config.queue_capacity.max(1) })
}

/// One decode step on a one-token context of a throw-away session; returns its time in ms
/// (0 if the backend failed, which the first real batch then reports).
fn warm_up(mut backend: Box<dyn Backend>) -> (Box<dyn Backend>, u32) {
    let session = SessionKey { device: Arc::from("gateway-warm-up"), session_id: 0 };
    let request = BackendRequest { session: session.clone(), context: Arc::from([0u32]), sampling: Default::default(), seq: 1 };
    let t = Instant::now();
    let ok = backend.next_tokens(std::slice::from_ref(&request)).first().is_some_and(|r| r.is_ok());
    let ms = t.elapsed().as_secs_f64() * 1e3;
    backend.end_session(&session);
    if !ok {
        tracing::warn!("the backend failed its warm-up request");
        return (backend, 0);
    }
    tracing::debug!(warmup_ms = ms, "backend warmed up");
    (backend, ms.round().max(1.0) as u32)
}

impl BatcherState {
    /// Cut a batch and hand it to the backend on a blocking thread, unless one is running.
    fn start_batch(&mut self, myself: &ActorRef<BatcherMsg>) {
        if !self.running.is_empty() {
            return;
        }
        let Some(mut backend) = self.backend.take() else { return };
        let now = Instant::now();
        let mut batch = self.queue.cut(now);
        if batch.is_empty() {
            self.backend = Some(backend);
            return;
        }
        metrics::histogram!("duet_gateway_batch_size").record(batch.len() as f64);
        let size = batch.len();
        for esc in &mut batch {
            metrics::histogram!("duet_gateway_queue_wait_seconds").record(now.duration_since(esc.enqueued).as_secs_f64());
            esc.start_batch(size, backend.name());
        }
        let requests: Vec<BackendRequest> = batch.iter().map(|e| e.request.clone()).collect();
        self.running = batch;
        let me = myself.clone();
        tokio::task::spawn_blocking(move || {
            let t = Instant::now();
            let results = backend.next_tokens(&requests);
            let backend_ms = t.elapsed().as_secs_f64() * 1e3;
            let _ = me.send_message(BatcherMsg::BatchDone { backend, results, backend_ms });
        });
    }

    /// Start a batch if one is due, or arm the max-wait timer for when it will be.
    fn schedule(&mut self, myself: &ActorRef<BatcherMsg>) {
        if !self.running.is_empty() || self.queue.is_empty() {
            return;
        }
        let now = Instant::now();
        if self.queue.is_due(now) {
            self.start_batch(myself);
        } else if !self.timer_armed {
            if let Some(at) = self.queue.flush_at() {
                self.timer_armed = true;
                myself.send_after(at.saturating_duration_since(now), || BatcherMsg::Flush);
            }
        }
    }

    /// Answer the batch that just ran and take the backend back.
    fn finish_batch(&mut self, mut backend: Box<dyn Backend>, results: Vec<Result<BackendToken, BackendError>>, backend_ms: f64) {
        for key in self.ended.drain(..) {
            backend.end_session(&key);
        }
        self.backend = Some(backend);
        let prev = self.stats.service_ms.load(Ordering::Relaxed) as f64;
        let ewma = if prev == 0.0 { backend_ms } else { 0.8 * prev + 0.2 * backend_ms };
        self.stats.service_ms.store(ewma.round() as u32, Ordering::Relaxed);
        metrics::histogram!("duet_gateway_backend_latency_seconds").record(backend_ms / 1e3);
        let llm_ms = backend_ms.round() as u32;
        tracing::debug!(batch = self.running.len(), backend_ms = llm_ms, queued = self.queue.len(), "batch done");
        let too_few = std::iter::repeat_with(|| Err(BackendError::Failed("backend returned too few results".into())));
        for (mut esc, result) in std::mem::take(&mut self.running).into_iter().zip(results.into_iter().chain(too_few)) {
            esc.end_backend(backend_ms, result.is_ok());
            let outcome = match result {
                Ok(token) => {
                    metrics::counter!("duet_gateway_escalations_answered_total").increment(1);
                    Outcome::Token { token, llm_ms }
                }
                Err(e) => {
                    metrics::counter!("duet_gateway_backend_errors_total").increment(1);
                    Outcome::Failed(e)
                }
            };
            esc.answer(outcome);
        }
        metrics::gauge!("duet_gateway_queue_depth").set(self.stats.in_flight.load(Ordering::Relaxed) as f64);
    }
}

impl Actor for Batcher {
    type Msg = BatcherMsg;
    type State = BatcherState;
    type Arguments = (Box<dyn Backend>, BatcherConfig, Arc<BatcherStats>);

    async fn pre_start(&self, _myself: ActorRef<Self::Msg>, (backend, config, stats): Self::Arguments) -> Result<Self::State, ActorProcessingErr> {
        Ok(BatcherState {
            queue: PendingQueue::new(config.max_batch, config.max_wait),
            backend: Some(backend),
            running: Vec::new(),
            timer_armed: false,
            stats,
            ended: Vec::new(),
        })
    }

    async fn handle(&self, myself: ActorRef<Self::Msg>, msg: Self::Msg, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        match msg {
            BatcherMsg::Submit(esc) => {
                state.queue.push(esc);
                state.schedule(&myself);
            }
            BatcherMsg::Flush => {
                state.timer_armed = false;
                state.start_batch(&myself);
                state.schedule(&myself);
            }
            BatcherMsg::BatchDone { backend, results, backend_ms } => {
                state.finish_batch(backend, results, backend_ms);
                state.schedule(&myself);
            }
            BatcherMsg::EndSession(key) => {
                state.queue.end_session(&key);
                match state.backend.as_mut() {
                    Some(b) => b.end_session(&key),
                    None => state.ended.push(key),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{BackendToken, ModelFacts};
    use std::time::Duration;

    /// Answers every request with its context length, after `delay`.
    struct SlowEcho(Duration);

    impl Backend for SlowEcho {
        fn name(&self) -> &str {
            "slow-echo"
        }
        fn facts(&self) -> ModelFacts {
            ModelFacts { llm_id: "slow-echo".into(), tokenizer_fingerprint: String::new(), vocab_size: 1 << 20, max_context: 1 << 20 }
        }
        fn next_tokens(&mut self, batch: &[BackendRequest]) -> Vec<Result<BackendToken, BackendError>> {
            std::thread::sleep(self.0);
            batch.iter().map(|r| Ok(BackendToken { token_id: r.context.len() as u32, logprob: 0.0 })).collect()
        }
    }

    fn request(session_id: u64, len: usize) -> BackendRequest {
        let session = SessionKey { device: Arc::from("device"), session_id };
        BackendRequest { session, context: vec![1; len].into(), sampling: Default::default(), seq: 1 }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ending_a_session_drops_its_queued_work_but_not_others() {
        let config = BatcherConfig { max_batch: 1, max_wait: Duration::ZERO, queue_capacity: 16 };
        let queue = spawn_batcher(Box::new(SlowEcho(Duration::from_millis(200))), config).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let running = queue.try_submit(request(1, 3), deadline).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let queued_same = queue.try_submit(request(1, 4), deadline).unwrap();
        let queued_other = queue.try_submit(request(2, 5), deadline).unwrap();
        queue.end_session(SessionKey { device: Arc::from("device"), session_id: 1 });
        assert_eq!(queued_same.await.unwrap(), Outcome::SessionEnded);
        assert!(matches!(running.await.unwrap(), Outcome::Token { token, .. } if token.token_id == 3), "the running batch finishes");
        assert!(matches!(queued_other.await.unwrap(), Outcome::Token { token, .. } if token.token_id == 5));
        assert_eq!(queue.stats().in_flight.load(Ordering::Acquire), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn beyond_capacity_a_submission_is_refused_at_once() {
        let config = BatcherConfig { max_batch: 1, max_wait: Duration::ZERO, queue_capacity: 1 };
        let queue = spawn_batcher(Box::new(SlowEcho(Duration::from_millis(100))), config).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let first = queue.try_submit(request(1, 3), deadline).unwrap();
        assert!(queue.try_submit(request(2, 3), deadline).is_err());
        assert!(matches!(first.await.unwrap(), Outcome::Token { .. }));
        assert_eq!(queue.stats().in_flight.load(Ordering::Acquire), 0);
        assert!(queue.try_submit(request(2, 3), deadline).is_ok(), "the slot is free again");
    }
}
