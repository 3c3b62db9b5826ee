//! A pool of engine workers, keyed by session rather than by text (sgl-model-gateway's ideas
//! for token escalations).
//!
//! - **Sticky**: a session's escalations go to the worker that holds its prefix cache, chosen
//!   by rendezvous hashing on the session key ([`pick`]); a session moves only while its
//!   worker is ineligible, and load skew beyond a threshold sends it to its second choice.
//! - **Health**: every worker's health path is polled; state flips only after several checks
//!   in a row ([`health`]).
//! - **Circuit breaker** per worker ([`breaker`]): consecutive failures open it; after a pause
//!   one trial request decides.
//! - **Retries**: a failed attempt is retried on another worker, after a jittered pause, only
//!   while the escalation's deadline allows (a next-token request is idempotent; sampled ones
//!   carry their seed).
//! - **Bounded**: at most `max_in_flight` requests per worker; when no worker has room the
//!   gateway answers `Busy` at once ([`EnginePool::has_room`]).
//! - **Admission by cost** ([`admission`]): each worker's admitted requests are counted in
//!   tokens (a session's whole context unless the worker's last answer showed it cached)
//!   against a cost model learned from the requests it answered; an escalation goes only to a
//!   worker whose queue lets it be answered before its deadline, and hears `Busy` at once when
//!   none does ([`EnginePool::admit`], before any request is sent).
//! - **Fair shares** ([`share`]): once half the tokens the workers can run before a deadline
//!   are in flight, a device over its max-min fair share of them is refused first; devices
//!   refused for cost wait in a line whose asks are reserved from later comers.
//! - **Membership**: workers join (verified first) and leave (drained: no new picks, requests
//!   in flight finish) while the pool serves, as discovered engines' names resolve to other
//!   addresses ([`membership`], [`crate::engine::discovery`]). The set is replaced as a whole,
//!   so a request keeps the set it started with.
//!
//! The policies are pure functions of `now` and the workers' figures, tested without a server;
//! this module is the async shell that applies them and records the per-worker metrics, and
//! [`dispatch`] puts the pool behind the gateway's LLM seam ([`crate::dispatch`]).

pub mod admission;
pub mod breaker;
pub mod dispatch;
pub mod health;
pub mod membership;
pub mod pick;
pub mod share;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use common::sampling::SamplingParams;
use rand::Rng;
use tokio::task::JoinHandle;

use self::admission::{CacheSeen, Load, Offer, DEFAULT_START};
use self::breaker::{BreakerConfig, BreakerState, CircuitBreaker, Transition};
use self::health::{HealthConfig, HealthTracker};
use self::pick::{choose, rendezvous_order, Candidate, PickPolicy};
use self::share::{Refused, WorkShare};
use super::client::EngineClient;
use super::{DraftCheckRequest, EngineError, EngineReply, EngineSpec, NextTokenRequest, Verdict};
use crate::dispatch::admission::{retry_after_ms, CostModel};
use crate::dispatch::{Busy, BusyReason, LlmRequest, LlmToken};
use crate::sessions::SessionKey;

/// Settings of an engine pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolConfig {
    /// The workers.
    pub engines: Vec<EngineSpec>,
    /// Most requests in flight per worker; beyond it on every worker, `Busy`.
    pub max_in_flight_per_worker: usize,
    /// Longest single attempt (the escalation's deadline usually cuts it shorter).
    pub attempt_timeout: Duration,
    /// Most attempts per escalation (first try included).
    pub max_attempts: u32,
    /// Base pause before a retry; the actual pause is uniform in [base/2, base*3/2].
    pub retry_backoff: Duration,
    /// Worker choice.
    pub pick: PickPolicy,
    /// Circuit breaker thresholds.
    pub breaker: BreakerConfig,
    /// Active health checks.
    pub health: HealthConfig,
    /// How often discovered engines' names are resolved again (`dns+` engines), and a failed
    /// start-up check of a listed engine is looked at again.
    pub resolve_interval: Duration,
    /// How long an address whose start-up check failed stays out before it is checked again.
    pub refused_retry: Duration,
    /// Share the workers' time fairly between devices: once half the tokens they can run before
    /// a deadline are in flight, a device over its fair share of them is refused first
    /// ([`share`]); the gateway's `[overload] fair-share` sets it. Only with `admit_by_cost`:
    /// the tokens that fit a deadline are the cost model's.
    pub fair_share: bool,
    /// With `fair_share`: a device refused for cost while within its share waits in line
    /// ([`share`]); the gateway's `[overload] fair-line` sets it.
    pub fair_line: bool,
    /// Refuse `Busy` at once an escalation no worker's queue lets be answered before its
    /// deadline ([`admission`]); off, only the in-flight bound refuses (`--engine-admission`).
    pub admit_by_cost: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            engines: Vec::new(),
            max_in_flight_per_worker: 64,
            // The longest deadline a device may ask for: deadlines, not this, bound attempts.
            attempt_timeout: Duration::from_millis(u64::from(common::protocol::MAX_DEADLINE_MS)),
            max_attempts: 3,
            retry_backoff: Duration::from_millis(10),
            pick: PickPolicy::default(),
            breaker: BreakerConfig::default(),
            health: HealthConfig::default(),
            resolve_interval: Duration::from_secs(5),
            refused_retry: Duration::from_secs(30),
            fair_share: true,
            fair_line: false,
            admit_by_cost: true,
        }
    }
}

/// Why the pool did not produce a token.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PoolError {
    /// Every worker is full, unhealthy or open-circuited.
    #[error("no engine worker can take the request")]
    NoWorker,
    /// The deadline passed before an attempt succeeded.
    #[error("deadline passed (last error: {0:?})")]
    DeadlineExpired(Option<EngineError>),
    /// The last attempt failed and no retry was allowed.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// One engine worker and what the pool knows about it.
pub struct Worker {
    client: EngineClient,
    label: String,
    /// Its engine's position in the configuration: workers are listed by it, then by label.
    rank: usize,
    /// Removed from the pool: takes no new request (those in flight finish).
    retired: AtomicBool,
    in_flight: AtomicUsize,
    /// Requests it has answered: a request that timed out while this grew timed out for its
    /// deadline, not for the worker ([`EngineError::counts_against_worker_that_answered`]).
    answers: AtomicU64,
    state: Mutex<WorkerState>,
    /// What is admitted to it, in tokens, and its learned cost model (admission's estimate).
    load: Mutex<Load>,
    /// Woken when health checks find the worker down: its requests in flight give up at once
    /// and retry elsewhere instead of waiting out their time on a worker that hangs.
    down: tokio::sync::Notify,
}

struct WorkerState {
    breaker: CircuitBreaker,
    health: HealthTracker,
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

    fn lock(&self) -> std::sync::MutexGuard<'_, WorkerState> {
        // A panic while holding this lock cannot leave the policy state half-updated in a way
        // worse than its last value; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn load(&self) -> std::sync::MutexGuard<'_, Load> {
        // Counts and a model: a panic cannot leave them worse than an estimate; keep serving.
        self.load.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record_transition(&self, t: Option<Transition>) {
        if let Some(t) = t {
            tracing::info!(worker = %self.label, from = t.from.as_str(), to = t.to.as_str(), "engine circuit breaker");
            metrics::counter!("duet_gateway_engine_breaker_transitions_total", "worker" => self.label.clone(), "to" => t.to.as_str()).increment(1);
            metrics::gauge!("duet_gateway_engine_breaker_state", "worker" => self.label.clone()).set(t.to.as_gauge());
        }
    }
}

/// A counted in-flight request on one worker; releases its slot (and an undecided half-open
/// trial) when dropped, so a cancelled escalation cannot leak either.
struct InFlight<'a> {
    worker: &'a Worker,
    decided: bool,
    /// The worker's answers when it started.
    answers: u64,
}

impl<'a> InFlight<'a> {
    fn start(worker: &'a Worker) -> Self {
        let n = worker.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        metrics::gauge!("duet_gateway_engine_in_flight", "worker" => worker.label.clone()).set(n as f64);
        Self { worker, decided: false, answers: worker.answers.load(Ordering::Acquire) }
    }

    fn succeeded(mut self, now: Instant) {
        self.decided = true;
        self.worker.answers.fetch_add(1, Ordering::AcqRel);
        let t = self.worker.lock().breaker.on_success(now);
        self.worker.record_transition(t);
    }

    fn failed(mut self, error: &EngineError, now: Instant) {
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
    fn new(breaker: BreakerConfig, health: HealthConfig) -> Self {
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

/// The engine workers behind one gateway.
pub struct EnginePool {
    members: Arc<WorkerSet>,
    config: PoolConfig,
    round_robin: AtomicU64,
    /// Smoothed successful request time, ms (announced to devices as the service time).
    service_ms: AtomicU32,
    /// Token ids at or above this are not tokens the devices share: an engine answering one
    /// is broken.
    vocab_size: usize,
    /// The task that keeps membership up to date (discovered engines, late workers), if any:
    /// stopped with the pool.
    discovery: Option<tokio::task::AbortHandle>,
    /// Tokens in flight per device, for fair shares of the workers' time.
    share: Arc<Mutex<WorkShare>>,
    /// Per session, the worker its last escalation went to and what that worker's answers
    /// showed of its prefix cache (admission's [`admission::cost`] charges the delta only when
    /// it showed the context kept).
    sessions: Mutex<HashMap<SessionKey, (String, CacheSeen)>>,
    /// Admissions one at a time, so that each sees the ones before it in the workers' loads.
    admitting: Mutex<()>,
}

impl Drop for EnginePool {
    fn drop(&mut self) {
        if let Some(task) = &self.discovery {
            task.abort();
        }
    }
}

impl EnginePool {
    /// A pool over `clients` (one per `config.engines` entry, in order), all assumed healthy
    /// until checked; answers must be ids below `vocab_size`.
    pub fn new(config: PoolConfig, clients: Vec<EngineClient>, vocab_size: usize) -> Self {
        let members = Arc::new(WorkerSet::new(config.breaker, config.health));
        for (rank, client) in clients.into_iter().enumerate() {
            members.add(client, rank);
        }
        Self {
            members,
            config,
            round_robin: AtomicU64::new(0),
            service_ms: AtomicU32::new(0),
            vocab_size,
            discovery: None,
            share: Arc::new(Mutex::new(WorkShare::new(crate::dispatch::fair::DEFAULT_MAX_DEVICES, share::DEFAULT_WINDOW))),
            sessions: Mutex::default(),
            admitting: Mutex::new(()),
        }
    }

    /// A pool starting with the one worker `client` (of the engine at position `rank` of
    /// `config.engines`), assumed healthy until checked; others join through
    /// [`WorkerSet::add`].
    pub fn with_worker(config: PoolConfig, client: EngineClient, rank: usize, vocab_size: usize) -> Self {
        let pool = Self::new(config, Vec::new(), vocab_size);
        pool.members.add(client, rank);
        pool
    }

    /// The workers now, by engine position in the configuration, then label (a snapshot:
    /// membership may change after it is taken).
    pub fn workers(&self) -> Arc<Vec<Arc<Worker>>> {
        self.members.snapshot()
    }

    /// The set workers join and leave through (the discovery task holds it weakly).
    pub(crate) fn members(&self) -> &Arc<WorkerSet> {
        &self.members
    }

    /// Hand the pool the task that maintains its membership, to stop with it.
    pub(crate) fn attach_discovery(&mut self, task: tokio::task::AbortHandle) {
        if let Some(old) = self.discovery.replace(task) {
            old.abort();
        }
    }

    /// Wait until the pool has at least `n` workers (engines verified after start-up join
    /// it as they pass); `false` if `timeout` passes first. For benchmarks that compare
    /// workers, which the gateway itself does not wait for.
    pub async fn wait_for_workers(&self, n: usize, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        loop {
            if self.members.snapshot().len() >= n {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Smoothed engine time per escalation, ms.
    pub fn service_ms(&self) -> u32 {
        self.service_ms.load(Ordering::Relaxed)
    }

    /// Set the service time (the start-up warm-up measures the first one).
    pub fn set_service_ms(&self, ms: u32) {
        self.service_ms.store(ms, Ordering::Relaxed);
    }

    /// Start the workers' cost models from `start` (the warm-up's measure) until they learn.
    pub fn set_start(&self, start: CostModel) {
        self.members.set_start(start);
    }

    /// Admit `request` at `now` to the worker it will be sent to first, or refuse it `Busy`
    /// at once: for its device's share when fair sharing (and admission by cost) is on and the
    /// device is over its share of a contended pool ([`share`]), for capacity when no worker is open with room, for its
    /// cost when none of those can answer it before `deadline` ([`admission::decide`]; with
    /// `admit_by_cost` off, the count bound alone). The admitted request counts in that
    /// worker's load and its device's share until the [`Admitted`] is dropped.
    pub fn admit(&self, request: &LlmRequest, deadline: Instant, now: Instant) -> Result<Admitted, Busy> {
        let workers = self.members.snapshot();
        let labels: Vec<&str> = workers.iter().map(|w| w.label.as_str()).collect();
        let order = rendezvous_order(&session_hash_key(&request.session), &labels);
        let rr = self.round_robin.fetch_add(1, Ordering::Relaxed);
        let last = self.sessions.lock().unwrap_or_else(|p| p.into_inner()).get(&request.session).cloned();
        let _one_at_a_time = self.admitting.lock().unwrap_or_else(|p| p.into_inner());
        let views: Vec<admission::Worker> = order
            .iter()
            .map(|&index| {
                let w = &workers[index];
                let load = w.load();
                let held = last.as_ref().filter(|(label, _)| *label == w.label).and_then(|(_, seen)| seen.held());
                let cost = admission::cost(request.context.len(), request.draft.len(), held);
                let offer = Offer { ahead: load.ahead_of(&request.session), model: load.model(), margin_ms: load.margin_ms(), cost };
                let in_flight = w.in_flight().max(offer.ahead.requests);
                admission::Worker { index, open: in_flight < self.config.max_in_flight_per_worker && w.is_available(now), in_flight, offer }
            })
            .collect();
        let left = deadline.saturating_duration_since(now);
        let device = &request.session.device;
        let shares = self.config.fair_share && self.config.admit_by_cost;
        let decided = self.decide(&views, device, shares, left, rr, now);
        trace_decision(request, &views, left, &decided);
        let first = decided?;
        let cost = views.iter().find(|v| v.index == first).map_or(1, |v| v.offer.cost);
        let load_id = workers[first].load().reserve_for(Some(request.session.clone()), cost, now);
        let share = shares.then(|| {
            let mut share = self.share.lock().unwrap_or_else(|p| p.into_inner());
            share.start(device, cost, now);
            metrics::gauge!("duet_gateway_fair_backlogged_devices").set(share.in_flight_devices() as f64);
            metrics::gauge!("duet_gateway_fair_waiting_devices").set(share.waiting_devices() as f64);
            (self.share.clone(), device.clone(), cost)
        });
        self.sent(&request.session, &workers[first].label);
        Ok(Admitted { workers, order, rr, first, load_id, answered: AtomicBool::new(false), ran: AtomicUsize::new(0), share })
    }

    /// The worker `device`'s escalation goes to first, with `left` to its deadline, or why it
    /// is refused: its share ([`Self::check_share`], with `shares`), then its cost or the
    /// workers' room ([`admission::decide`]); refused for cost with the line on, it waits in line.
    fn decide(&self, views: &[admission::Worker], device: &Arc<str>, shares: bool, left: Duration, rr: u64, now: Instant) -> Result<usize, Busy> {
        if shares {
            self.check_share(views, device, left, now)?;
        }
        let (others, owed) = match shares {
            true => {
                let share = self.share.lock().unwrap_or_else(|p| p.into_inner());
                (share.others_active(device), share.owed_room(device))
            }
            false => (false, false),
        };
        // An idle worker's slack for a long prefill is for a device alone on the pool.
        let idle_slack = if others { 1.0 } else { admission::IDLE_SLACK };
        // The room a device served far less than others is owed was kept from them with the
        // margin counted (`share::Refused::Behind`): its own escalation is not refused for the
        // margin a second time.
        let unpadded: Vec<admission::Worker>;
        let views = match owed {
            true => {
                unpadded = views.iter().map(|v| admission::Worker { offer: Offer { margin_ms: 0.0, ..v.offer }, ..*v }).collect();
                &unpadded[..]
            }
            false => views,
        };
        admission::decide_with(views, &self.config.pick, rr, left, self.config.admit_by_cost, self.service_ms(), idle_slack).inspect_err(|busy| {
            if shares && self.config.fair_line && busy.reason == BusyReason::Cost {
                self.wait_in_line(device, busy, now);
            }
        })
    }

    /// Refuse `device` for its share ([`share`]) of the open workers' budget for `left`, its
    /// escalation costing what it costs on the first of them (its sticky worker when open).
    fn check_share(&self, views: &[admission::Worker], device: &Arc<str>, left: Duration, now: Instant) -> Result<(), Busy> {
        let open: Vec<&admission::Worker> = views.iter().filter(|v| v.open).collect();
        let Some(first) = open.first() else { return Ok(()) };
        let budget = open.iter().map(|v| v.offer.budget_tokens(left)).fold(0usize, usize::saturating_add);
        let refused = self.share.lock().unwrap_or_else(|p| p.into_inner()).admit(device, first.offer.cost, budget, now);
        let model = first.offer.model;
        refused.map_err(|refused| match refused {
            // Back once its own work in flight has gone through.
            Refused::Over(over) => Busy { retry_after_ms: retry_after_ms(model.batch_ms + over.held as f64 * model.token_ms).max(self.service_ms()), reason: BusyReason::Share },
            // Back once the work in flight and the less served device's ask could have run.
            Refused::Behind { tokens } => Busy { retry_after_ms: retry_after_ms(model.batch_ms + tokens as f64 * model.token_ms).max(self.service_ms()), reason: BusyReason::Share },
            // Back once those ahead of it in line could have run.
            Refused::Reserved { tokens } => {
                let busy = Busy { retry_after_ms: retry_after_ms(model.batch_ms + tokens as f64 * model.token_ms).max(self.service_ms()), reason: BusyReason::Reserved };
                self.wait_in_line(device, &busy, now);
                busy
            }
        })
    }

    /// `device` was refused `busy` at `now` while within its share: it waits in line for the
    /// room its retry needs ([`share`]).
    fn wait_in_line(&self, device: &str, busy: &Busy, now: Instant) {
        let mut share = self.share.lock().unwrap_or_else(|p| p.into_inner());
        share.wait(device, now + Duration::from_millis(u64::from(busy.retry_after_ms)), now);
        metrics::gauge!("duet_gateway_fair_waiting_devices").set(share.waiting_devices() as f64);
    }

    /// Note that a request of `session` goes to the worker labelled `label`: until its answer
    /// says otherwise, that worker is not counted on to hold the session's context.
    fn sent(&self, session: &SessionKey, label: &str) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sessions.len() >= MAX_SESSIONS_REMEMBERED && !sessions.contains_key(session) {
            // Sessions are forgotten as they end; this only bounds a leak. Forgetting costs
            // an estimate (the whole context instead of its delta), never an answer.
            sessions.clear();
        }
        let seen = match sessions.get(session) {
            Some((l, seen)) if l == label => seen.in_flight(),
            _ => CacheSeen::default(),
        };
        sessions.insert(session.clone(), (label.to_string(), seen));
    }

    /// The worker labelled `label` answered `session`'s request of `sent` context tokens,
    /// reporting `cached` prompt tokens found in its prefix cache: what it shows it keeps.
    fn answered(&self, session: &SessionKey, label: &str, sent: usize, cached: Option<u32>) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let before = sessions.get(session).filter(|(l, _)| l == label).map(|(_, seen)| *seen);
        if before.is_none() && sessions.len() >= MAX_SESSIONS_REMEMBERED {
            return;
        }
        sessions.insert(session.clone(), (label.to_string(), admission::learn(before, sent, cached)));
    }

    /// A session ended: forget which worker holds its context, and its device's last ask
    /// ([`WorkShare::leave`]).
    pub fn forget(&self, session: &SessionKey) {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(session);
        self.share.lock().unwrap_or_else(|p| p.into_inner()).leave(&session.device);
    }

    /// Requests in flight on all workers (of the pool now: a removed worker's last requests
    /// are not counted).
    pub fn in_flight(&self) -> usize {
        self.members.snapshot().iter().map(|w| w.in_flight()).sum()
    }

    /// Most requests in flight on all workers together.
    pub fn capacity(&self) -> usize {
        self.members.snapshot().len() * self.config.max_in_flight_per_worker.max(1)
    }

    /// Whether some available worker has room for another request: if not, the gateway
    /// answers `Busy` instead of queueing.
    pub fn has_room(&self, now: Instant) -> bool {
        self.members.snapshot().iter().any(|w| w.in_flight() < self.config.max_in_flight_per_worker && w.is_available(now))
    }

    /// Whether any worker is available at all (readiness).
    pub fn any_available(&self, now: Instant) -> bool {
        self.members.snapshot().iter().any(|w| w.is_available(now))
    }

    /// The LLM's answer to `request`, trying workers as the policies say until one answers or
    /// `deadline` passes: its token after the context or, for a greedy request with a draft,
    /// the verdict on the draft from the same one request ([`EngineClient::check_draft`]: how
    /// many draft tokens it accepts and its token after them). A sampled request's draft is not
    /// checked (an engine's choices are its argmax, not the seeded draws the device would get
    /// position by position): its token at the hard position, `accepted` 0.
    ///
    /// The first attempt goes to the worker `admitted` names ([`EnginePool::admit`]), a retry
    /// to another as the pick chooses.
    pub async fn answer(&self, request: &LlmRequest, deadline: Instant, admitted: &Admitted) -> Result<LlmToken, PoolError> {
        let (workers, order, rr) = (&admitted.workers, &admitted.order, admitted.rr);
        let sampling = request.sampling;
        let seed = seed_for(&sampling, request.seq);
        let next = NextTokenRequest { context: &request.context, sampling: &sampling, seed, max_new_tokens: 1, top_logprobs: 0, slot: None };
        let checks_draft = sampling.is_greedy() && !request.draft.is_empty() && !request.context.is_empty();
        let ask = match checks_draft {
            true => Ask::Draft(DraftCheckRequest { context: &request.context, draft: &request.draft, slot: None }),
            false => Ask::Next(next),
        };
        let mut tried: Vec<usize> = Vec::new();
        let mut last_error: Option<EngineError> = None;
        for attempt in 0..self.config.max_attempts.max(1) {
            let now = Instant::now();
            if now >= deadline {
                return Err(PoolError::DeadlineExpired(last_error));
            }
            let candidates: Vec<Candidate> = order
                .iter()
                .map(|&index| {
                    let w = &workers[index];
                    Candidate { index, eligible: w.in_flight() < self.config.max_in_flight_per_worker && w.is_available(now), in_flight: w.in_flight() }
                })
                .collect();
            let pick = if attempt == 0 { Some(admitted.first) } else { choose(&candidates, &self.config.pick, &tried, rr) };
            let Some(index) = pick else {
                return Err(match last_error {
                    Some(EngineError::Timeout) if Instant::now() >= deadline => PoolError::DeadlineExpired(last_error),
                    Some(e) => PoolError::Engine(e),
                    None => PoolError::NoWorker,
                });
            };
            tried.push(index);
            let worker = &workers[index];
            let (acquired, half_opened) = {
                let mut st = worker.lock();
                let half_opened = st.breaker.poll(now);
                (st.breaker.try_acquire(now), half_opened)
            };
            worker.record_transition(half_opened);
            if !acquired {
                continue; // half-open with its trial already out: another worker
            }
            let slot = InFlight::start(worker);
            // While another worker could still answer, an attempt gets half the time left, so
            // a hung worker leaves room to fail over within the deadline.
            let remaining = deadline.saturating_duration_since(now);
            let others = candidates.iter().any(|c| c.eligible && !tried.contains(&c.index));
            let budget = if others && attempt + 1 < self.config.max_attempts { remaining / 2 } else { remaining };
            let timeout = budget.min(self.config.attempt_timeout);
            let started = Instant::now();
            let down = worker.down.notified();
            let result = tokio::select! {
                r = ask.make(&worker.client, timeout) => r.and_then(|reply| self.check_vocab(reply)).and_then(|reply| Ok((reply.verdict(ask.draft())?, reply))),
                _ = down => Err(EngineError::Transport("worker failed its health checks while the request was in flight".into())),
            };
            let seconds = started.elapsed().as_secs_f64();
            let done = Instant::now();
            match result {
                Ok((verdict, reply)) => {
                    slot.succeeded(done);
                    if index == admitted.first {
                        admitted.answered.store(true, Ordering::Relaxed);
                        if let Some(ran) = ran_tokens(&reply, request.context.len() + ask.draft().len()) {
                            admitted.ran.store(ran, Ordering::Relaxed);
                        }
                    }
                    self.answered(&request.session, &worker.label, request.context.len(), reply.cached_tokens);
                    self.record_success(worker, &reply, seconds, ask.draft().len(), verdict.accepted as usize);
                    return Ok(verdict);
                }
                Err(error) => {
                    slot.failed(&error, done);
                    metrics::counter!("duet_gateway_engine_requests_total", "worker" => worker.label.clone(), "outcome" => error.label()).increment(1);
                    tracing::debug!(worker = %worker.label, attempt, %error, "engine attempt failed");
                    if !error.is_retryable() {
                        return Err(PoolError::Engine(error));
                    }
                    last_error = Some(error);
                    let pause = jittered(self.config.retry_backoff);
                    if Instant::now() + pause >= deadline {
                        return Err(PoolError::DeadlineExpired(last_error));
                    }
                    tokio::time::sleep(pause).await;
                }
            }
        }
        Err(last_error.map_or(PoolError::NoWorker, PoolError::Engine))
    }

    fn check_vocab(&self, reply: EngineReply) -> Result<EngineReply, EngineError> {
        match reply.tokens.iter().find(|t| t.id as usize >= self.vocab_size) {
            Some(t) => Err(EngineError::TokenOutOfVocabulary { id: t.id, vocab_size: self.vocab_size }),
            None => Ok(reply),
        }
    }

    /// Count an answered request: for a draft check, `drafted` tokens checked and `accepted`
    /// of them taken (the LLM then answered `accepted + 1` tokens).
    fn record_success(&self, worker: &Worker, reply: &EngineReply, seconds: f64, drafted: usize, accepted: usize) {
        let label = worker.label.clone();
        metrics::counter!("duet_gateway_engine_requests_total", "worker" => label.clone(), "outcome" => "ok").increment(1);
        metrics::histogram!("duet_gateway_engine_latency_seconds", "worker" => label.clone()).record(seconds);
        if drafted > 0 {
            metrics::counter!("duet_gateway_engine_draft_tokens_total", "worker" => label.clone(), "kind" => "checked").increment(drafted as u64);
            metrics::counter!("duet_gateway_engine_draft_tokens_total", "worker" => label.clone(), "kind" => "accepted").increment(accepted as u64);
        }
        if let Some(prompt) = reply.prompt_tokens {
            metrics::counter!("duet_gateway_engine_prompt_tokens_total", "worker" => label.clone()).increment(u64::from(prompt));
        }
        if let Some(cached) = reply.cached_tokens {
            metrics::counter!("duet_gateway_engine_cached_tokens_total", "worker" => label).increment(u64::from(cached));
        }
        let prefilled = reply.prompt_tokens.map_or(0, |p| p.saturating_sub(reply.cached_tokens.unwrap_or(0)));
        let answered = if drafted > 0 { accepted + 1 } else { reply.tokens.len() };
        crate::batcher::count_served(prefilled as usize, answered);
        let ms = seconds * 1e3;
        let prev = f64::from(self.service_ms.load(Ordering::Relaxed));
        let ewma = if prev == 0.0 { ms } else { 0.8 * prev + 0.2 * ms };
        self.service_ms.store(ewma.round().max(1.0) as u32, Ordering::Relaxed);
    }

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
                let workers = pool.members.snapshot();
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

/// What one attempt asks a worker: the next token, or a draft check.
enum Ask<'a> {
    Next(NextTokenRequest<'a>),
    Draft(DraftCheckRequest<'a>),
}

impl Ask<'_> {
    /// Make the request on `client`.
    async fn make(&self, client: &EngineClient, timeout: Duration) -> Result<EngineReply, EngineError> {
        match self {
            Self::Next(r) => client.next_token(r, timeout).await,
            Self::Draft(r) => client.check_draft(r, timeout).await,
        }
    }

    /// The draft the answer is a verdict on (none for a plain next-token request).
    fn draft(&self) -> &[u32] {
        match self {
            Self::Next(_) => &[],
            Self::Draft(r) => r.draft,
        }
    }
}

/// Sessions remembered at most for their last worker (the gateway's session store holds
/// fewer; sessions are forgotten as they end).
const MAX_SESSIONS_REMEMBERED: usize = 1 << 16;

/// An escalation admitted to a worker ([`EnginePool::admit`]): counted in that worker's load
/// until dropped, when the worker's cost model learns what it took (if that worker answered
/// it, or it ran past its estimate unanswered).
pub struct Admitted {
    /// The workers when it was admitted (a retry picks among these).
    workers: Arc<Vec<Arc<Worker>>>,
    /// Its session's rendezvous order over them.
    order: Vec<usize>,
    rr: u64,
    /// The worker it goes to first.
    first: usize,
    load_id: u64,
    /// Whether the first worker answered it.
    answered: AtomicBool,
    /// The tokens the first worker reported it ran, when it did (0: not reported).
    ran: AtomicUsize,
    /// Its device's share and its cost there, with fair sharing on.
    share: Option<(Arc<Mutex<WorkShare>>, Arc<str>, usize)>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let now = Instant::now();
        let answered = self.answered.load(Ordering::Relaxed);
        {
            let mut load = self.workers[self.first].load();
            let ran = self.ran.load(Ordering::Relaxed);
            if ran > 0 {
                load.settle(self.load_id, ran);
            }
            load.finish(self.load_id, answered, now);
        }
        if let Some((share, device, cost)) = &self.share {
            let mut share = share.lock().unwrap_or_else(|p| p.into_inner());
            share.end(device, *cost, now);
            metrics::gauge!("duet_gateway_fair_backlogged_devices").set(share.in_flight_devices() as f64);
        }
    }
}

/// One admission decision at debug level (`cloud_gateway::engine::pool=debug`), with what it
/// was made from on the session's first worker: what an overload's refusals are read from.
fn trace_decision(request: &LlmRequest, views: &[admission::Worker], left: Duration, decided: &Result<usize, Busy>) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let Some(v) = views.first() else { return };
    let outcome = match decided {
        Ok(_) => "admitted",
        Err(busy) => busy.reason.label(),
    };
    tracing::debug!(
        device = %request.session.device, session = request.session.session_id, outcome, context = request.context.len(), cost = v.offer.cost,
        ahead_requests = v.offer.ahead.requests, ahead_tokens = v.offer.ahead.tokens, budget_tokens = v.offer.budget_tokens(left),
        margin_ms = v.offer.margin_ms as u64, token_ms = v.offer.model.token_ms, left_ms = left.as_millis() as u64, "engine admission"
    );
}

/// The tokens an answered request ran, from the engine's report: the prompt tokens it did not
/// find cached, and the positions of `asked` (context and draft) not in the prompt (a
/// llama-server draft check decodes them one by one); `None` when it reported no cache figures.
fn ran_tokens(reply: &EngineReply, asked: usize) -> Option<usize> {
    let prompt = reply.prompt_tokens? as usize;
    let cached = reply.cached_tokens? as usize;
    Some((prompt.saturating_sub(cached) + asked.saturating_sub(prompt)).max(1))
}

/// Run futures concurrently and wait for all (a few workers: no need for a crate).
async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(futures: impl Iterator<Item = F>) {
    let handles: Vec<JoinHandle<()>> = futures.map(tokio::spawn).collect();
    for h in handles {
        let _ = h.await;
    }
}

/// The bytes a session is hashed by: device id and session id.
fn session_hash_key(session: &SessionKey) -> Vec<u8> {
    let mut key = Vec::with_capacity(session.device.len() + 9);
    key.extend_from_slice(session.device.as_bytes());
    key.push(0);
    key.extend_from_slice(&session.session_id.to_le_bytes());
    key
}

/// The seed an engine samples with: the escalation's seed mixed with its `seq`, so repeated
/// escalations of a session draw differently and a retry draws the same.
fn seed_for(sampling: &SamplingParams, seq: u32) -> Option<u64> {
    if sampling.is_greedy() {
        return None;
    }
    Some(sampling.seed.unwrap_or(0) ^ (u64::from(seq)).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// A pause uniform in [base/2, base*3/2], so retries from many escalations do not align.
fn jittered(base: Duration) -> Duration {
    let base = base.as_secs_f64();
    Duration::from_secs_f64(rand::rng().random_range(base * 0.5..=base * 1.5))
}
