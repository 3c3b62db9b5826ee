//! The batcher: one ractor actor that owns the queue of escalations and the backend.
//!
//! In the spirit of TGI's router queue: connection handlers submit work with a oneshot reply
//! and get an answer or a typed failure; a dropped receiver (the device gave up, the stream was
//! reset) cancels the work before it reaches the model. Ractor mailboxes are unbounded, so the
//! bound is ours: [`BatchQueue::try_submit`] refuses at once beyond `queue_capacity`, which is
//! what lets the gateway answer `Busy` instead of letting deadlines expire.
//!
//! A batch is cut when `max_batch` escalations wait or the oldest has waited `max_wait`. It
//! holds at most one escalation per session, so a session's escalations run in `seq` order.
//! The backend runs on a blocking thread; the actor stays responsive meanwhile and the queue
//! fills for the next batch.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::oneshot;

use crate::backend::{Backend, BackendError, BackendRequest, BackendToken, SessionKey};

/// Batching settings.
#[derive(Debug, Clone, Copy)]
pub struct BatcherConfig {
    /// Most escalations per backend call.
    pub max_batch: usize,
    /// Longest an escalation waits for others before its batch is cut.
    pub max_wait: Duration,
    /// Most escalations queued or running; beyond it submissions are refused (`Busy`).
    pub queue_capacity: usize,
}

/// What became of one escalation.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The LLM's token, and the time the backend call took.
    Token { token: BackendToken, llm_ms: u32 },
    /// The backend refused or failed this request.
    Failed(BackendError),
    /// Its deadline passed before it could run.
    Expired,
    /// The device ended the session before it could run (e.g. an unneeded prompt pre-sync):
    /// dropped so that it does not delay the device's next session.
    SessionEnded,
}

/// One queued escalation.
#[derive(Debug)]
pub struct Escalation {
    /// What to compute.
    pub request: BackendRequest,
    /// When the device stops waiting.
    pub deadline: Instant,
    /// Where the answer goes; a closed receiver cancels the work.
    pub reply: oneshot::Sender<Outcome>,
    enqueued: Instant,
}

/// Messages of the batcher actor.
pub enum BatcherMsg {
    /// New work (already admitted by [`BatchQueue::try_submit`]).
    Submit(Escalation),
    /// The max-wait timer fired.
    Flush,
    /// A backend call finished.
    BatchDone { backend: Box<dyn Backend>, results: Vec<Result<BackendToken, BackendError>>, backend_ms: f64 },
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
    pub in_flight: AtomicUsize,
    /// Smoothed backend time per batch, ms (reported to devices as service time).
    pub service_ms: AtomicU32,
}

/// Cheap, cloneable handle for submitting work.
#[derive(Clone)]
pub struct BatchQueue {
    actor: ActorRef<BatcherMsg>,
    stats: Arc<BatcherStats>,
    capacity: usize,
}

impl BatchQueue {
    /// Admit and enqueue, or refuse at once when full.
    pub fn try_submit(&self, request: BackendRequest, deadline: Instant) -> Result<oneshot::Receiver<Outcome>, QueueFull> {
        let prev = self.stats.in_flight.fetch_add(1, Ordering::AcqRel);
        if prev >= self.capacity {
            self.stats.in_flight.fetch_sub(1, Ordering::AcqRel);
            metrics::counter!("duet_gateway_escalations_busy_total").increment(1);
            return Err(QueueFull { retry_after_ms: self.stats.service_ms.load(Ordering::Relaxed).max(5) });
        }
        let (tx, rx) = oneshot::channel();
        let esc = Escalation { request, deadline, reply: tx, enqueued: Instant::now() };
        if self.actor.send_message(BatcherMsg::Submit(esc)).is_err() {
            self.stats.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(QueueFull { retry_after_ms: 1000 });
        }
        metrics::gauge!("duet_gateway_queue_depth").set(prev as f64 + 1.0);
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

    /// The actor, e.g. to stop it.
    pub fn actor(&self) -> &ActorRef<BatcherMsg> {
        &self.actor
    }
}

/// The batcher actor.
pub struct Batcher;

/// Its state.
pub struct BatcherState {
    config: BatcherConfig,
    backend: Option<Box<dyn Backend>>,
    pending: VecDeque<Escalation>,
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
    fn answer(&self, esc: Escalation, outcome: Outcome) {
        self.stats.in_flight.fetch_sub(1, Ordering::AcqRel);
        let _ = esc.reply.send(outcome);
    }

    /// Cut a batch: up to `max_batch` live escalations, one per session, oldest first.
    fn cut(&mut self, now: Instant) -> Vec<Escalation> {
        let mut batch = Vec::new();
        let mut sessions = HashSet::new();
        let mut keep = VecDeque::with_capacity(self.pending.len());
        while let Some(esc) = self.pending.pop_front() {
            if esc.reply.is_closed() {
                metrics::counter!("duet_gateway_escalations_cancelled_total").increment(1);
                self.stats.in_flight.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
            if esc.deadline <= now {
                metrics::counter!("duet_gateway_escalations_expired_total").increment(1);
                self.answer(esc, Outcome::Expired);
                continue;
            }
            if batch.len() < self.config.max_batch && sessions.insert(esc.request.session.clone()) {
                batch.push(esc);
            } else {
                keep.push_back(esc);
            }
        }
        self.pending = keep;
        batch
    }

    fn start_batch(&mut self, myself: &ActorRef<BatcherMsg>) {
        if !self.running.is_empty() {
            return;
        }
        let Some(mut backend) = self.backend.take() else { return };
        let now = Instant::now();
        let batch = self.cut(now);
        if batch.is_empty() {
            self.backend = Some(backend);
            return;
        }
        metrics::histogram!("duet_gateway_batch_size").record(batch.len() as f64);
        for esc in &batch {
            metrics::histogram!("duet_gateway_queue_wait_seconds").record(now.duration_since(esc.enqueued).as_secs_f64());
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

    fn schedule(&mut self, myself: &ActorRef<BatcherMsg>) {
        if !self.running.is_empty() || self.pending.is_empty() {
            return;
        }
        let oldest = self.pending.front().map(|e| e.enqueued.elapsed()).unwrap_or_default();
        if self.pending.len() >= self.config.max_batch || oldest >= self.config.max_wait {
            self.start_batch(myself);
        } else if !self.timer_armed {
            self.timer_armed = true;
            myself.send_after(self.config.max_wait - oldest, || BatcherMsg::Flush);
        }
    }
}

impl Actor for Batcher {
    type Msg = BatcherMsg;
    type State = BatcherState;
    type Arguments = (Box<dyn Backend>, BatcherConfig, Arc<BatcherStats>);

    async fn pre_start(&self, _myself: ActorRef<Self::Msg>, (backend, config, stats): Self::Arguments) -> Result<Self::State, ActorProcessingErr> {
        Ok(BatcherState { config, backend: Some(backend), pending: VecDeque::new(), running: Vec::new(), timer_armed: false, stats, ended: Vec::new() })
    }

    async fn handle(&self, myself: ActorRef<Self::Msg>, msg: Self::Msg, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        match msg {
            BatcherMsg::Submit(esc) => {
                state.pending.push_back(esc);
                state.schedule(&myself);
            }
            BatcherMsg::Flush => {
                state.timer_armed = false;
                if state.running.is_empty() && !state.pending.is_empty() {
                    state.start_batch(&myself);
                }
                state.schedule(&myself);
            }
            BatcherMsg::BatchDone { backend, results, backend_ms } => {
                let mut backend = backend;
                for key in state.ended.drain(..) {
                    backend.end_session(&key);
                }
                state.backend = Some(backend);
                let prev = state.stats.service_ms.load(Ordering::Relaxed) as f64;
                let ewma = if prev == 0.0 { backend_ms } else { 0.8 * prev + 0.2 * backend_ms };
                state.stats.service_ms.store(ewma.round() as u32, Ordering::Relaxed);
                metrics::histogram!("duet_gateway_backend_latency_seconds").record(backend_ms / 1e3);
                let llm_ms = backend_ms.round() as u32;
                tracing::debug!(batch = state.running.len(), backend_ms = llm_ms, queued = state.pending.len(), "batch done");
                let running = std::mem::take(&mut state.running);
                for (esc, result) in running.into_iter().zip(results.into_iter().chain(std::iter::repeat_with(|| Err(BackendError::Failed("backend returned too few results".into()))))) {
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
                    state.answer(esc, outcome);
                }
                metrics::gauge!("duet_gateway_queue_depth").set(state.stats.in_flight.load(Ordering::Relaxed) as f64);
                state.schedule(&myself);
            }
            BatcherMsg::EndSession(key) => {
                let (ended, keep): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut state.pending).into_iter().partition(|e| e.request.session == key);
                state.pending = keep;
                for esc in ended {
                    metrics::counter!("duet_gateway_escalations_cancelled_total").increment(1);
                    state.answer(esc, Outcome::SessionEnded);
                }
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
    use crate::backend::BackendToken;

    /// Answers every request with its context length, after `delay`.
    struct SlowEcho(Duration);

    impl Backend for SlowEcho {
        fn name(&self) -> &str {
            "slow-echo"
        }
        fn model_id(&self) -> &str {
            "slow-echo"
        }
        fn max_context(&self) -> usize {
            1 << 20
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
}
