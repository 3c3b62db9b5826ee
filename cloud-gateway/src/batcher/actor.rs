//! The batcher actor: owns the [`PendingQueue`] and the backend, and runs one batch at a time.
//!
//! In the spirit of TGI's router queue: connections submit admitted work through
//! [`BatchQueue`] with a oneshot reply and get an answer or a typed failure; a dropped receiver
//! (the device gave up, the stream was reset) cancels the work before it reaches the model.
//!
//! The cut policy is [`PendingQueue`]'s; this shell supplies the clock and the timer. The
//! backend runs on a blocking thread and comes back in [`BatcherMsg::BatchDone`], so the actor
//! stays responsive meanwhile and the queue fills for the next batch; work whose device left
//! or whose deadline passed meanwhile is purged as new work arrives, not only between batches.
//! After each batch the actor updates the [`Figures`] admission and readiness read, and each
//! session's prefill state in the [`SharedBook`] (what the backend has computed for it).

use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::backend::Backend;
use super::book::SharedBook;
use super::figures::Figures;
use super::queue::{Batch, Escalation, PendingQueue, Prefill};
use crate::dispatch::fair::{FairShare, DEFAULT_MAX_DEVICES};
use crate::dispatch::{LlmError, LlmRequest, LlmToken, Outcome};
use crate::config::{BatcherConfig, OverloadConfig};
use crate::sessions::SessionKey;

/// Messages of the batcher actor.
pub enum BatcherMsg {
    /// New work (already admitted by [`BatchQueue::try_submit`]).
    Submit(Box<Escalation>),
    /// The max-wait timer fired.
    Flush,
    /// A backend call finished; the backend comes back with its results.
    BatchDone {
        /// The backend, returned by the blocking thread that ran it.
        backend: Box<dyn Backend>,
        /// One result per escalation of the running batch, in order.
        results: Vec<Result<LlmToken, LlmError>>,
        /// Whether each prefill step of the batch succeeded, in order.
        prefilled: Vec<bool>,
        /// How long the call took, ms.
        backend_ms: f64,
    },
    /// A session ended or expired: drop its queued work and the backend's state for it.
    EndSession(SessionKey),
    /// Prefill this request's context with leftover room (its escalation was refused for its
    /// cost); the first `.1` tokens are computed already.
    Warm(LlmRequest, usize),
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
    figures: Arc<Figures>,
    /// What is admitted and each session's prefill state, which admission reads.
    book: SharedBook,
    /// Sessions that ended while the backend was busy; applied when it returns.
    ended: Vec<SessionKey>,
}

/// Start the batcher actor around a warmed-up backend, publishing to `figures` and `book`.
pub(super) async fn start(backend: Box<dyn Backend>, config: BatcherConfig, overload: OverloadConfig, figures: Arc<Figures>, book: SharedBook) -> anyhow::Result<ActorRef<BatcherMsg>> {
    let (actor, _handle) = Actor::spawn(None, Batcher, (backend, config, overload, figures, book)).await?;
    Ok(actor)
}

/// How the devices share the LLM now: devices with work waiting, and how far the most-served
/// of them is ahead of the least-served (a per-device series would be one per device).
pub(crate) fn publish_fair(fair: &FairShare) {
    metrics::gauge!("duet_gateway_fair_backlogged_devices").set(fair.backlogged() as f64);
    metrics::gauge!("duet_gateway_fair_spread_tokens").set(fair.spread() as f64);
}

/// Tokens of the warm-up's prefill, from which the first estimate of the time per token of
/// prefill comes (the admission's cost model learns it better from real batches).
const WARM_UP_PREFILL: usize = 32;

/// One decode step on a one-token context of a throw-away session, then a 32-token prefill
/// on another; returns the first's time in ms (0 if the backend failed, which the first real
/// batch then reports) and the time per token of the second.
pub(super) fn warm_up(mut backend: Box<dyn Backend>) -> (Box<dyn Backend>, u32, f64) {
    let session = SessionKey { device: Arc::from("gateway-warm-up"), session_id: 0 };
    let request = LlmRequest { session: session.clone(), context: Arc::from([0u32]), sampling: Default::default(), seq: 1, draft: Default::default() };
    let t = Instant::now();
    let ok = backend.next_tokens(std::slice::from_ref(&request)).first().is_some_and(|r| r.is_ok());
    let ms = t.elapsed().as_secs_f64() * 1e3;
    backend.end_session(&session);
    if !ok {
        tracing::warn!("the backend failed its warm-up request");
        return (backend, 0, 0.0);
    }
    let long = SessionKey { session_id: 1, ..session };
    let request = LlmRequest { session: long.clone(), context: Arc::from(vec![0u32; WARM_UP_PREFILL]), sampling: Default::default(), seq: 1, draft: Default::default() };
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
        crate::dispatch::count_served(cost, batch.len());
        if let Some(fair) = self.queue.fair() {
            publish_fair(fair);
        }
        let size = batch.len();
        for esc in &mut batch {
            metrics::histogram!("duet_gateway_queue_wait_seconds").record(now.duration_since(esc.enqueued).as_secs_f64());
            esc.start_batch(size, backend.name());
        }
        let requests: Vec<LlmRequest> = batch.iter().map(|e| e.request.clone()).collect();
        let steps: Vec<(LlmRequest, usize)> = prefills.iter().map(|p| (p.request.clone(), p.upto)).collect();
        self.running = batch;
        self.prefilling = prefills;
        self.running_cost = cost;
        self.figures.readiness.batch_started(now);
        self.publish_warming();
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
        self.publish_warming();
        let idle = !self.is_running() && self.queue.warming() == 0;
        self.figures.readiness.caught_up(self.queue.is_empty(), idle);
    }

    /// Tell admission how many sessions wait to be warmed.
    fn publish_warming(&self) {
        self.book.lock().set_warming(self.queue.warming() > 0);
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
    fn finish_batch(&mut self, mut backend: Box<dyn Backend>, results: Vec<Result<LlmToken, LlmError>>, prefilled: Vec<bool>, backend_ms: f64) {
        self.figures.readiness.batch_done();
        let rows = self.running.len() + self.prefilling.len();
        let mut book = self.book.lock();
        for (step, ok) in std::mem::take(&mut self.prefilling).into_iter().zip(prefilled) {
            if ok {
                book.computed(&step.request.session, step.upto);
            } else {
                book.forget_computed(&step.request.session);
            }
        }
        for (esc, result) in self.running.iter().zip(&results) {
            if result.is_ok() {
                book.computed(esc.session(), esc.request.context.len());
            }
        }
        for key in &self.ended {
            book.remove(key);
        }
        drop(book);
        for key in self.ended.drain(..) {
            backend.end_session(&key);
        }
        self.backend = Some(backend);
        self.figures.learned.observe(rows.max(1), self.running_cost.max(rows), backend_ms, !self.running.is_empty());
        self.queue.pace(self.figures.learned.cost_model().batch_ms);
        metrics::histogram!("duet_gateway_backend_latency_seconds").record(backend_ms / 1e3);
        let llm_ms = backend_ms.round() as u32;
        tracing::debug!(batch = self.running.len(), backend_ms = llm_ms, queued = self.queue.len(), "batch done");
        let too_few = std::iter::repeat_with(|| Err(LlmError::Failed("backend returned too few results".into())));
        for (mut esc, result) in std::mem::take(&mut self.running).into_iter().zip(results.into_iter().chain(too_few)) {
            esc.end_backend(backend_ms, result.is_ok());
            esc.answer(match result {
                Ok(token) => Outcome::Token { token, llm_ms },
                Err(e) => Outcome::Failed(e),
            });
        }
        metrics::gauge!("duet_gateway_queue_depth").set(self.book.lock().rows() as f64);
    }
}

/// `queue`, sharing fairly between devices if `overload` says so, remembering idle devices up
/// to the default bound (devices with work waiting are bounded by the queue's capacity).
fn fair_queue(queue: PendingQueue, config: BatcherConfig, overload: OverloadConfig) -> PendingQueue {
    match overload.fair_share.is_on() {
        true => queue.with_fair_share(DEFAULT_MAX_DEVICES.max(config.queue_capacity)),
        false => queue,
    }
}

impl Actor for Batcher {
    type Msg = BatcherMsg;
    type State = BatcherState;
    type Arguments = (Box<dyn Backend>, BatcherConfig, OverloadConfig, Arc<Figures>, SharedBook);

    async fn pre_start(&self, _myself: ActorRef<Self::Msg>, (backend, config, overload, figures, book): Self::Arguments) -> Result<Self::State, ActorProcessingErr> {
        let mut queue = fair_queue(PendingQueue::new(config.max_batch, config.max_wait).with_token_cap(overload.max_batch_tokens), config, overload);
        queue.pace(figures.learned.cost_model().batch_ms);
        Ok(BatcherState {
            queue,
            backend: Some(backend),
            running: Vec::new(),
            prefilling: Vec::new(),
            running_cost: 0,
            timer_armed: false,
            figures,
            book,
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
                state.queue.push(*esc);
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
                state.publish_warming();
                state.schedule(&myself);
            }
            BatcherMsg::EndSession(key) => {
                state.queue.end_session(&key, Instant::now());
                match state.backend.as_mut() {
                    Some(b) => {
                        state.book.lock().remove(&key);
                        b.end_session(&key)
                    }
                    None => state.ended.push(key),
                }
            }
        }
        Ok(())
    }
}
