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
//! stays responsive meanwhile and the queue fills for the next batch; work whose device left
//! or whose deadline passed meanwhile is purged as new work arrives, not only between batches.
//!
//! Admission has two bounds: the count (`queue_capacity`) and the estimated cost
//! ([`super::admission::admit`]: the work ahead plus the escalation's own prefill must fit its
//! deadline). The cost of an escalation is the part of its context the backend has not
//! computed for its session yet and its session's admitted work will not compute either; the
//! [`SessionLedger`] tracks both per session, and admission weighs the escalation against the
//! other sessions' work only (its own earlier work is covered by its device's deadline).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::oneshot;

use super::admission::{self, Ahead, CostModel, Cut, Load, ReadinessPolicy};
use super::ledger::SessionLedger;
use super::queue::{Admission, Batch, Escalation, Outcome, PendingQueue, Prefill};
use crate::backend::{Backend, BackendError, BackendRequest, BackendToken};
use crate::config::{BatcherConfig, OverloadConfig};
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
        /// Whether each prefill step of the batch succeeded, in order.
        prefilled: Vec<bool>,
        /// How long the call took, ms.
        backend_ms: f64,
    },
    /// A session ended or expired: drop its queued work and the backend's state for it.
    EndSession(SessionKey),
    /// Prefill this request's context with leftover room (its escalation was refused for its
    /// cost); the first `.1` tokens are computed already.
    Warm(BackendRequest, usize),
}

/// Submission refused: the queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull {
    /// Suggested wait before retrying.
    pub retry_after_ms: u32,
}

/// Shared figures the rest of the gateway reads (Welcome limits, admission, readiness,
/// metrics).
#[derive(Debug)]
pub struct BatcherStats {
    /// Escalations admitted and not yet answered.
    pub in_flight: Arc<AtomicUsize>,
    /// Estimated tokens of prefill of those that fit one batch's cost cap.
    pub queued_tokens: Arc<AtomicUsize>,
    /// Escalations admitted and not yet answered that do not fit one batch (long prefills).
    pub long_rows: Arc<AtomicUsize>,
    /// Their estimated tokens of prefill.
    pub long_tokens: Arc<AtomicUsize>,
    /// Smoothed backend time per batch, ms (reported to devices as service time).
    pub service_ms: AtomicU32,
    /// Learned time of a batch of short escalations, µs (the admission's cost model).
    batch_us: AtomicU64,
    /// Learned time per token of prefill, µs (the admission's cost model).
    token_us: AtomicU64,
    /// Each session's prefill state: what the backend computed, what its admitted work covers.
    ledger: Arc<SessionLedger>,
    /// When the batcher started: the times below count from it.
    epoch: Instant,
    /// Since when work has been refused without the queue catching up since (ms + 1 after
    /// `epoch`; 0 = not saturated).
    saturated_since: AtomicU64,
    /// Whether work was refused since the running (or last) batch started.
    refused_lately: std::sync::atomic::AtomicBool,
    /// Sessions waiting to be warmed (a warming step may run ahead of any escalation).
    warming: AtomicUsize,
    /// Since when the running batch runs (ms + 1 after `epoch`; 0 = none runs).
    batch_since: AtomicU64,
    /// When `/readyz` says not ready.
    readiness: ReadinessPolicy,
}

impl BatcherStats {
    fn new(service_ms: u32, token_ms: f64, readiness: ReadinessPolicy) -> Self {
        Self {
            in_flight: Arc::default(),
            queued_tokens: Arc::default(),
            long_rows: Arc::default(),
            long_tokens: Arc::default(),
            service_ms: AtomicU32::new(service_ms),
            batch_us: AtomicU64::new(u64::from(service_ms) * 1000),
            token_us: AtomicU64::new((token_ms * 1e3).round() as u64),
            ledger: Arc::default(),
            epoch: Instant::now(),
            saturated_since: AtomicU64::new(0),
            refused_lately: std::sync::atomic::AtomicBool::new(false),
            warming: AtomicUsize::new(0),
            batch_since: AtomicU64::new(0),
            readiness,
        }
    }

    /// `at` as stored: ms after `epoch`, plus one (0 means "not set").
    fn stamp(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_millis() as u64 + 1
    }

    /// The admission's cost model as learned so far.
    pub fn cost_model(&self) -> CostModel {
        CostModel { batch_ms: self.batch_us.load(Ordering::Relaxed) as f64 / 1e3, token_ms: self.token_us.load(Ordering::Relaxed) as f64 / 1e3 }
    }

    fn set_cost_model(&self, m: CostModel) {
        self.batch_us.store((m.batch_ms * 1e3).round() as u64, Ordering::Relaxed);
        self.token_us.store((m.token_ms * 1e3).round() as u64, Ordering::Relaxed);
    }

    /// Tokens of `request`'s context that neither its session's backend state holds nor its
    /// session's admitted work will compute (at least 1).
    pub fn cost_of(&self, request: &BackendRequest) -> usize {
        let w = self.ledger.get(&request.session);
        admission::cost(request.context.len(), w.computed, w.covered)
    }

    /// Sessions with prefill state at the batcher.
    pub fn tracked_sessions(&self) -> usize {
        self.ledger.len()
    }

    /// Everything admitted and not answered yet.
    fn ahead(&self) -> Ahead {
        Ahead {
            rows: self.in_flight.load(Ordering::Relaxed),
            tokens: self.queued_tokens.load(Ordering::Relaxed),
            long_rows: self.long_rows.load(Ordering::Relaxed),
            long_tokens: self.long_tokens.load(Ordering::Relaxed),
            warming: self.warming.load(Ordering::Relaxed) > 0,
        }
    }

    /// Work was refused at `now`: saturated from now on, unless already, until the batcher
    /// has run a batch without refusing anything and nothing waits.
    fn saturated(&self, now: Instant) {
        self.refused_lately.store(true, Ordering::Relaxed);
        let _ = self.saturated_since.compare_exchange(0, self.stamp(now), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Why the batcher is not ready at `now` (saturated or stalled too long), if it is not.
    pub fn not_ready(&self, now: Instant) -> Option<String> {
        let get = |a: &AtomicU64| match a.load(Ordering::Relaxed) {
            0 => None,
            t => Some(t - 1),
        };
        let load = Load { now_ms: self.stamp(now) - 1, saturated_since_ms: get(&self.saturated_since), batch_since_ms: get(&self.batch_since) };
        admission::not_ready(&self.readiness, load)
    }
}

/// Cheap, cloneable handle for submitting work: what connections hold of the batcher.
#[derive(Clone)]
pub struct BatchQueue {
    actor: ActorRef<BatcherMsg>,
    stats: Arc<BatcherStats>,
    capacity: usize,
    cut: Cut,
}

impl BatchQueue {
    /// Admit and enqueue, or refuse at once: when full, or when the work ahead and its own
    /// prefill are estimated to take longer than its deadline allows.
    pub fn try_submit(&self, request: BackendRequest, deadline: Instant) -> Result<oneshot::Receiver<Outcome>, QueueFull> {
        let now = Instant::now();
        let stats = &self.stats;
        let own = stats.ledger.get(&request.session);
        let cost = admission::cost(request.context.len(), own.computed, own.covered);
        let model = stats.cost_model();
        let all = stats.ahead();
        let ahead = admission::others(all, own.pending);
        let busy = |retry_after_ms: u32, why: &'static str| {
            metrics::counter!("duet_gateway_escalations_busy_total").increment(1);
            metrics::counter!("duet_gateway_admission_refused_total", "reason" => why).increment(1);
            stats.saturated(now);
            Err(QueueFull { retry_after_ms })
        };
        if let Err(retry_after_ms) = admission::admit(&model, self.cut, ahead, cost, deadline.saturating_duration_since(now)) {
            // Its context is held all the same: prefill it when there is room, so that the
            // session's later escalations cost only their delta.
            let done = request.context.len().saturating_sub(cost);
            let _ = self.actor.send_message(BatcherMsg::Warm(request, done));
            return busy(retry_after_ms, "cost");
        }
        let Some(admission) = Admission::try_take(&stats.in_flight, self.capacity) else {
            let drain_ms = model.estimate_ms(all.rows, all.tokens + all.long_tokens, self.cut.max_batch).max(f64::from(stats.service_ms.load(Ordering::Relaxed)));
            return busy(admission::retry_after_ms(drain_ms), "capacity");
        };
        let work = Ahead::of(cost, self.cut);
        let admission = if work.long_rows == 0 {
            admission.with_tokens(&stats.queued_tokens, cost)
        } else {
            admission.with_tokens(&stats.long_tokens, cost).with_tokens(&stats.long_rows, 1)
        };
        let admission = admission.with_claim(stats.ledger.claim(&request.session, request.context.len(), work));
        let (esc, rx) = Escalation::new(request, deadline, now);
        let esc = esc.with_cost(cost);
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
    /// Prefill steps of the running batch.
    prefilling: Vec<Prefill>,
    /// Estimated tokens of prefill of the running batch.
    running_cost: usize,
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
    spawn_batcher_with(backend, config, OverloadConfig::default()).await
}

/// [`spawn_batcher`] with the overload bounds of `overload` (cost cap per batch, readiness).
pub async fn spawn_batcher_with(backend: Box<dyn Backend>, config: BatcherConfig, overload: OverloadConfig) -> anyhow::Result<BatchQueue> {
    let (backend, warmup_ms, token_ms) = tokio::task::spawn_blocking(move || warm_up(backend)).await?;
    let readiness = ReadinessPolicy { saturated_for: overload.ready_saturated_after, stalled_after: overload.ready_stalled_after };
    let stats = Arc::new(BatcherStats::new(warmup_ms, token_ms, readiness));
    let (actor, _handle) = Actor::spawn(None, Batcher, (backend, config, overload, stats.clone())).await?;
    let cut = Cut { max_batch: config.max_batch.max(1), max_batch_tokens: overload.max_batch_tokens.max(1) };
    Ok(BatchQueue { actor, stats, capacity: config.queue_capacity.max(1), cut })
}

/// Tokens of the warm-up's prefill, from which the first estimate of the time per token of
/// prefill comes (the admission's cost model learns it better from real batches).
const WARM_UP_PREFILL: usize = 32;

/// One decode step on a one-token context of a throw-away session, then a 32-token prefill
/// on another; returns the first's time in ms (0 if the backend failed, which the first real
/// batch then reports) and the time per token of the second.
fn warm_up(mut backend: Box<dyn Backend>) -> (Box<dyn Backend>, u32, f64) {
    let session = SessionKey { device: Arc::from("gateway-warm-up"), session_id: 0 };
    let request = BackendRequest { session: session.clone(), context: Arc::from([0u32]), sampling: Default::default(), seq: 1 };
    let t = Instant::now();
    let ok = backend.next_tokens(std::slice::from_ref(&request)).first().is_some_and(|r| r.is_ok());
    let ms = t.elapsed().as_secs_f64() * 1e3;
    backend.end_session(&session);
    if !ok {
        tracing::warn!("the backend failed its warm-up request");
        return (backend, 0, 0.0);
    }
    let long = SessionKey { session_id: 1, ..session };
    let request = BackendRequest { session: long.clone(), context: Arc::from(vec![0u32; WARM_UP_PREFILL]), sampling: Default::default(), seq: 1 };
    let t = Instant::now();
    let ok = backend.next_tokens(std::slice::from_ref(&request)).first().is_some_and(|r| r.is_ok());
    let long_ms = t.elapsed().as_secs_f64() * 1e3;
    backend.end_session(&long);
    let token_ms = if ok { (long_ms - ms).max(0.0) / (WARM_UP_PREFILL - 1) as f64 } else { 0.0 };
    tracing::debug!(warmup_ms = ms, token_ms, "backend warmed up");
    (backend, ms.round().max(1.0) as u32, token_ms)
}

impl BatcherState {
    /// Cut a batch and hand it to the backend on a blocking thread, unless one is running.
    fn start_batch(&mut self, myself: &ActorRef<BatcherMsg>) {
        if self.is_running() {
            return;
        }
        let Some(mut backend) = self.backend.take() else { return };
        let now = Instant::now();
        let Batch { escalations: mut batch, prefills, cost } = self.queue.cut(now);
        if batch.is_empty() && prefills.is_empty() {
            self.backend = Some(backend);
            self.caught_up();
            return;
        }
        metrics::histogram!("duet_gateway_batch_size").record(batch.len() as f64);
        metrics::histogram!("duet_gateway_batch_tokens").record(cost as f64);
        let size = batch.len();
        for esc in &mut batch {
            metrics::histogram!("duet_gateway_queue_wait_seconds").record(now.duration_since(esc.enqueued).as_secs_f64());
            esc.start_batch(size, backend.name());
        }
        let requests: Vec<BackendRequest> = batch.iter().map(|e| e.request.clone()).collect();
        let steps: Vec<(BackendRequest, usize)> = prefills.iter().map(|p| (p.request.clone(), p.upto)).collect();
        self.running = batch;
        self.prefilling = prefills;
        self.running_cost = cost;
        self.stats.batch_since.store(self.stats.stamp(now), Ordering::Relaxed);
        self.stats.refused_lately.store(false, Ordering::Relaxed);
        self.stats.warming.store(self.queue.warming(), Ordering::Relaxed);
        let me = myself.clone();
        tokio::task::spawn_blocking(move || {
            let t = Instant::now();
            let prefilled = steps.iter().map(|(r, upto)| backend.prefill(r, *upto).is_ok()).collect();
            let results = if requests.is_empty() { Vec::new() } else { backend.next_tokens(&requests) };
            let backend_ms = t.elapsed().as_secs_f64() * 1e3;
            let _ = me.send_message(BatcherMsg::BatchDone { backend, results, prefilled, backend_ms });
        });
    }

    fn is_running(&self) -> bool {
        self.backend.is_none()
    }

    /// No longer saturated once no escalation waits and either a batch ran without a refusal
    /// or there is nothing at all to do.
    fn caught_up(&self) {
        self.stats.warming.store(self.queue.warming(), Ordering::Relaxed);
        let idle = !self.is_running() && self.queue.warming() == 0;
        if self.queue.is_empty() && (idle || !self.stats.refused_lately.load(Ordering::Relaxed)) {
            self.stats.saturated_since.store(0, Ordering::Relaxed);
        }
    }

    /// Start a batch if one is due, or arm the max-wait timer for when it will be.
    fn schedule(&mut self, myself: &ActorRef<BatcherMsg>) {
        if self.is_running() {
            return;
        }
        if self.queue.is_empty() {
            self.caught_up();
            if self.queue.warming() > 0 {
                // Idle: warm sessions with the whole cap.
                self.start_batch(myself);
            }
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
    fn finish_batch(&mut self, mut backend: Box<dyn Backend>, results: Vec<Result<BackendToken, BackendError>>, prefilled: Vec<bool>, backend_ms: f64) {
        self.stats.batch_since.store(0, Ordering::Relaxed);
        let rows = self.running.len() + self.prefilling.len();
        for (step, ok) in std::mem::take(&mut self.prefilling).into_iter().zip(prefilled) {
            if ok {
                self.stats.ledger.computed(&step.request.session, step.upto);
            } else {
                self.stats.ledger.forget_computed(&step.request.session);
            }
        }
        for (esc, result) in self.running.iter().zip(&results) {
            if result.is_ok() {
                self.stats.ledger.computed(esc.session(), esc.request.context.len());
            }
        }
        for key in self.ended.drain(..) {
            self.stats.ledger.remove(&key);
            backend.end_session(&key);
        }
        self.backend = Some(backend);
        let mut model = self.stats.cost_model();
        model.observe(rows.max(1), self.running_cost.max(rows), backend_ms);
        self.stats.set_cost_model(model);
        if !self.running.is_empty() {
            let prev = self.stats.service_ms.load(Ordering::Relaxed) as f64;
            let ewma = if prev == 0.0 { backend_ms } else { 0.8 * prev + 0.2 * backend_ms };
            self.stats.service_ms.store(ewma.round() as u32, Ordering::Relaxed);
        }
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
    type Arguments = (Box<dyn Backend>, BatcherConfig, OverloadConfig, Arc<BatcherStats>);

    async fn pre_start(&self, _myself: ActorRef<Self::Msg>, (backend, config, overload, stats): Self::Arguments) -> Result<Self::State, ActorProcessingErr> {
        Ok(BatcherState {
            queue: PendingQueue::new(config.max_batch, config.max_wait).with_token_cap(overload.max_batch_tokens),
            backend: Some(backend),
            running: Vec::new(),
            prefilling: Vec::new(),
            running_cost: 0,
            timer_armed: false,
            stats,
            ended: Vec::new(),
        })
    }

    async fn handle(&self, myself: ActorRef<Self::Msg>, msg: Self::Msg, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        match msg {
            BatcherMsg::Submit(esc) => {
                if state.is_running() {
                    // Behind a batch that may be long: drop what no longer needs the model.
                    state.queue.purge(Instant::now());
                }
                state.queue.push(esc);
                state.schedule(&myself);
            }
            BatcherMsg::Flush => {
                state.timer_armed = false;
                state.start_batch(&myself);
                state.schedule(&myself);
            }
            BatcherMsg::BatchDone { backend, results, prefilled, backend_ms } => {
                state.finish_batch(backend, results, prefilled, backend_ms);
                state.schedule(&myself);
            }
            BatcherMsg::Warm(request, done) => {
                state.queue.warm(request, done);
                state.stats.warming.store(state.queue.warming(), Ordering::Relaxed);
                state.schedule(&myself);
            }
            BatcherMsg::EndSession(key) => {
                state.queue.end_session(&key);
                match state.backend.as_mut() {
                    Some(b) => {
                        state.stats.ledger.remove(&key);
                        b.end_session(&key)
                    }
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
