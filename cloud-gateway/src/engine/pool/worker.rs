//! The pool's workers: each engine's client with what the pool knows of it (its breaker, its
//! health, its requests in flight, its admitted load), and the set they make, replaced as a
//! whole when one joins or leaves so that a request keeps the set it started with.
//!
//! The rules are elsewhere and pure ([`super::breaker`], [`super::health`],
//! [`super::admission`]); this is their state, with the per-worker metrics recorded as it
//! changes.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::admission::{Load, DEFAULT_START};
use super::breaker::{BreakerConfig, BreakerState, CircuitBreaker, Transition};
use super::health::{HealthConfig, HealthTracker};
use super::EnginePool;
use crate::dispatch::admission::CostModel;
use crate::engine::client::EngineClient;
use crate::engine::EngineError;


/// One engine worker and what the pool knows about it.
pub struct Worker {
    pub(super) client: EngineClient,
    pub(super) label: String,
    /// Its engine's position in the configuration: workers are listed by it, then by label.
    pub(super) rank: usize,
    /// Removed from the pool: takes no new request (those in flight finish).
    pub(super) retired: AtomicBool,
    pub(super) in_flight: AtomicUsize,
    /// Requests it has answered: a request that timed out while this grew timed out for its
    /// deadline, not for the worker ([`EngineError::counts_against_worker_that_answered`]).
    pub(super) answers: AtomicU64,
    pub(super) state: Mutex<WorkerState>,
    /// What is admitted to it, in tokens, and its learned cost model (admission's estimate).
    pub(super) load: Mutex<Load>,
    /// Woken when health checks find the worker down: its requests in flight give up at once
    /// and retry elsewhere instead of waiting out their time on a worker that hangs.
    pub(super) down: tokio::sync::Notify,
}

pub(super) struct WorkerState {
    pub(super) breaker: CircuitBreaker,
    pub(super) health: HealthTracker,
}

impl Worker {
    /// Its URL, the `worker` label of its metrics.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Its client (start-up checks use it directly).
    pub fn client(&self) -> &EngineClient {
        &self.client
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Whether it is healthy and its breaker would let a request through now (half-open only
    /// while its trial slot is free), and it has not left the pool.
    pub fn is_available(&self, now: Instant) -> bool {
        if self.retired.load(Ordering::Relaxed) {
            return false;
        }
        let st = self.lock();
        st.health.is_healthy() && st.breaker.allows(now)
    }

    /// Whether it has left the pool (it finishes its requests in flight, takes no new one).
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Relaxed)
    }

    /// Its breaker's state now.
    pub fn breaker_state(&self, now: Instant) -> BreakerState {
        self.lock().breaker.state(now)
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, WorkerState> {
        // A panic while holding this lock cannot leave the policy state half-updated in a way
        // worse than its last value; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn load(&self) -> std::sync::MutexGuard<'_, Load> {
        // Counts and a model: a panic cannot leave them worse than an estimate; keep serving.
        self.load.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn record_transition(&self, t: Option<Transition>) {
        if let Some(t) = t {
            tracing::info!(worker = %self.label, from = t.from.as_str(), to = t.to.as_str(), "engine circuit breaker");
            metrics::counter!("duet_gateway_engine_breaker_transitions_total", "worker" => self.label.clone(), "to" => t.to.as_str()).increment(1);
            metrics::gauge!("duet_gateway_engine_breaker_state", "worker" => self.label.clone()).set(t.to.as_gauge());
        }
    }
}

/// A counted in-flight request on one worker; releases its slot (and an undecided half-open
/// trial) when dropped, so a cancelled escalation cannot leak either.
pub(super) struct InFlight<'a> {
    worker: &'a Worker,
    decided: bool,
    /// The worker's answers when it started.
    answers: u64,
}

impl<'a> InFlight<'a> {
    pub(super) fn start(worker: &'a Worker) -> Self {
        let n = worker.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        metrics::gauge!("duet_gateway_engine_in_flight", "worker" => worker.label.clone()).set(n as f64);
        Self { worker, decided: false, answers: worker.answers.load(Ordering::Acquire) }
    }

    pub(super) fn succeeded(mut self, now: Instant) {
        self.decided = true;
        self.worker.answers.fetch_add(1, Ordering::AcqRel);
        let t = self.worker.lock().breaker.on_success(now);
        self.worker.record_transition(t);
    }

    pub(super) fn failed(mut self, error: &EngineError, now: Instant) {
        self.decided = true;
        let t = {
            let mut st = self.worker.lock();
            let answered_meanwhile = self.worker.answers.load(Ordering::Acquire) > self.answers;
            if error.counts_against_worker_that_answered(answered_meanwhile) {
                st.breaker.on_failure(now)
            } else {
                // A refusal says nothing about the worker's health either way (a 429 must
                // not close a half-open breaker).
                st.breaker.on_cancelled();
                None
            }
        };
        self.worker.record_transition(t);
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.decided {
            self.worker.lock().breaker.on_cancelled();
        }
        let n = self.worker.in_flight.fetch_sub(1, Ordering::AcqRel).saturating_sub(1);
        metrics::gauge!("duet_gateway_engine_in_flight", "worker" => self.worker.label.clone()).set(n as f64);
    }
}

/// The pool's workers now. Replaced as a whole when one joins or leaves, so that a request
/// keeps the set it started with (its candidates' indices stay valid) while membership
/// changes; a worker that leaves stays alive as long as a request holds it.
pub struct WorkerSet {
    current: RwLock<Arc<Vec<Arc<Worker>>>>,
    breaker: BreakerConfig,
    health: HealthConfig,
    /// The cost model a joining worker starts from (the warm-up's measure).
    start: Mutex<CostModel>,
}

impl WorkerSet {
    pub(super) fn new(breaker: BreakerConfig, health: HealthConfig) -> Self {
        Self { current: RwLock::new(Arc::new(Vec::new())), breaker, health, start: Mutex::new(DEFAULT_START) }
    }

    /// The workers now, by engine position in the configuration, then label.
    pub fn snapshot(&self) -> Arc<Vec<Arc<Worker>>> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Add a worker talking through `client` (assumed healthy until checked) for the engine at
    /// position `rank` of the configuration. `false` if a worker with its label is already in.
    pub fn add(&self, client: EngineClient, rank: usize) -> bool {
        let label = client.label().to_string();
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        if current.iter().any(|w| w.label == label) {
            return false;
        }
        metrics::gauge!("duet_gateway_engine_member", "worker" => label.clone()).set(1.0);
        metrics::gauge!("duet_gateway_engine_healthy", "worker" => label.clone()).set(1.0);
        metrics::gauge!("duet_gateway_engine_breaker_state", "worker" => label.clone()).set(BreakerState::Closed.as_gauge());
        let worker = Arc::new(Worker {
            label,
            rank,
            client,
            retired: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            answers: AtomicU64::new(0),
            down: tokio::sync::Notify::new(),
            state: Mutex::new(WorkerState { breaker: CircuitBreaker::new(self.breaker), health: HealthTracker::new(self.health, true) }),
            load: Mutex::new(Load::new(*self.start.lock().unwrap_or_else(|p| p.into_inner()))),
        });
        let mut next: Vec<Arc<Worker>> = current.iter().cloned().chain(std::iter::once(worker)).collect();
        next.sort_by(|a, b| (a.rank, &a.label).cmp(&(b.rank, &b.label)));
        *current = Arc::new(next);
        true
    }

    /// Start every worker that has learned nothing yet, and every one that joins later, from
    /// `start` (the warm-up's measure).
    pub fn set_start(&self, start: CostModel) {
        *self.start.lock().unwrap_or_else(|p| p.into_inner()) = start;
        for w in self.snapshot().iter() {
            w.load().restart_from(start);
        }
    }

    /// Take the worker labelled `label` out: no new request goes to it, those in flight
    /// finish. `false` if there is none.
    pub fn remove(&self, label: &str) -> bool {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        let Some(worker) = current.iter().find(|w| w.label == label).cloned() else { return false };
        worker.retired.store(true, Ordering::Relaxed);
        // Its series stay in the exporter at their last values; `member` 0 says to ignore them
        // (the alerts on health and breakers do).
        metrics::gauge!("duet_gateway_engine_member", "worker" => worker.label.clone()).set(0.0);
        *current = Arc::new(current.iter().filter(|w| w.label != label).cloned().collect());
        true
    }
}

impl EnginePool {
    /// Poll every worker's health path every `health.interval` until the pool is dropped.
    pub fn spawn_health_checks(self: &Arc<Self>) -> JoinHandle<()> {
        let pool = Arc::downgrade(self);
        let interval = self.config.health.interval.max(Duration::from_millis(50));
        let timeout = self.config.health.timeout;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(pool) = pool.upgrade() else { return };
                let workers = pool.workers();
                let checks = workers.iter().map(|w| {
                    let w = w.clone();
                    async move {
                        // Report a breaker whose pause is over (Open -> HalfOpen) even if no
                        // request comes to take the step.
                        let half_opened = w.lock().breaker.poll(Instant::now());
                        w.record_transition(half_opened);
                        let ok = w.client.is_healthy(timeout).await;
                        if w.is_retired() {
                            return;
                        }
                        if let Some(healthy) = w.lock().health.record(ok) {
                            tracing::warn!(worker = %w.label, healthy, "engine health changed");
                            metrics::gauge!("duet_gateway_engine_healthy", "worker" => w.label.clone()).set(if healthy { 1.0 } else { 0.0 });
                            if !healthy {
                                w.down.notify_waiters();
                            }
                        }
                    }
                });
                futures_join_all(checks).await;
            }
        })
    }
}


/// Run futures concurrently and wait for all (a few workers: no need for a crate).
async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(futures: impl Iterator<Item = F>) {
    let handles: Vec<JoinHandle<()>> = futures.map(tokio::spawn).collect();
    for h in handles {
        let _ = h.await;
    }
}
