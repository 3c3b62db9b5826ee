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
//! - **One gate** ([`gate`]): the share, what each worker showed of each session's prefix
//!   cache and the order of the rules live in one pure value behind one lock, so each
//!   admission sees the ones before it.
//! - **Membership**: workers join (verified first) and leave (drained: no new picks, requests
//!   in flight finish) while the pool serves, as discovered engines' names resolve to other
//!   addresses ([`membership`], [`crate::engine::discovery`]). The set is replaced as a whole,
//!   so a request keeps the set it started with.
//!
//! The policies are pure functions of `now` and the workers' figures, tested without a server;
//! this module is the shell that applies them: [`worker`] holds each worker's state and polls
//! its health, [`EnginePool::admit`] reads the workers into the [`gate`], [`answer`] makes the
//! attempts and retries, and [`dispatch`] puts the pool behind the gateway's LLM seam
//! ([`crate::dispatch`]).

pub mod admission;
pub mod answer;
pub mod breaker;
pub mod dispatch;
pub mod gate;
pub mod health;
pub mod membership;
pub mod pick;
pub mod share;
pub mod worker;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use self::breaker::BreakerConfig;
use self::gate::{Admit, Escalation, Gate, Rules, WorkerNow};
use self::health::HealthConfig;
use self::pick::{rendezvous_order, PickPolicy};
pub use self::worker::{Worker, WorkerSet};
use super::client::EngineClient;
use super::{EngineError, EngineSpec};
use crate::dispatch::fair::FairShareMode;
use crate::dispatch::admission::CostModel;
use crate::dispatch::{Busy, LlmRequest};
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
    /// With fair sharing ([`EnginePool::sharing`]): a device refused for cost while within its share waits in line
    /// ([`share`]); the gateway's `[engines] fair-line` sets it.
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
    /// Admission's state and rules, one owner: held while an admission reads the workers'
    /// loads and reserves its own, so that each sees the ones before it.
    gate: Arc<Mutex<Gate>>,
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
        let rules = Rules {
            max_in_flight_per_worker: config.max_in_flight_per_worker,
            admit_by_cost: config.admit_by_cost,
            fair_share: true,
            fair_line: config.fair_line,
            pick: config.pick,
        };
        let gate = Arc::new(Mutex::new(Gate::new(rules)));
        Self { members, config, round_robin: AtomicU64::new(0), service_ms: AtomicU32::new(0), vocab_size, discovery: None, gate }
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
    /// at once, as the [`gate`] decides from the workers' figures now. The admitted request
    /// counts in that worker's load and its device's share until the [`Admitted`] is dropped.
    pub fn admit(&self, request: &LlmRequest, deadline: Instant, now: Instant) -> Result<Admitted, Busy> {
        let workers = self.members.snapshot();
        let labels: Vec<&str> = workers.iter().map(|w| w.label.as_str()).collect();
        let order = rendezvous_order(&session_hash_key(&request.session), &labels);
        let rr = self.round_robin.fetch_add(1, Ordering::Relaxed);
        let escalation = Escalation { session: &request.session, context_len: request.context.len(), draft_len: request.draft.len() };
        let mut gate = self.gate();
        let figures: Vec<WorkerNow> = order
            .iter()
            .map(|&index| {
                let w = &workers[index];
                let load = w.load();
                let ahead = load.ahead_of(&request.session);
                WorkerNow { index, label: &w.label, available: w.is_available(now), in_flight: w.in_flight(), ahead, model: load.model(), margin_ms: load.margin_ms() }
            })
            .collect();
        let decided = gate.admit(&escalation, &figures, deadline, now, rr, self.service_ms());
        if gate.shares() {
            metrics::gauge!("duet_gateway_engine_share_waiting_devices").set(gate.waiting_devices() as f64);
        }
        let admit = decided?;
        if admit.shared {
            metrics::gauge!("duet_gateway_engine_share_devices_in_flight").set(gate.devices_in_flight() as f64);
        }
        let load_id = workers[admit.first].load().reserve_for(Some(request.session.clone()), admit.cost, now);
        drop(gate);
        let device = request.session.device.clone();
        let first = admit.first;
        Ok(Admitted { workers, order, rr, first, load_id, answered: AtomicBool::new(false), ran: AtomicUsize::new(0), gate: (self.gate.clone(), device, admit) })
    }

    /// A session ended: forget which worker holds its context, and its device's last ask.
    pub fn forget(&self, session: &SessionKey) {
        self.gate().forget(session);
    }

    /// How the workers' time is shared between devices: with [`FairShareMode::Device`] (the
    /// default), once half the tokens they can run before a deadline are in flight, a device
    /// over its fair share of them is refused first ([`share`]; only with admission by cost,
    /// whose model says what fits a deadline). The gateway passes its `[overload] fair-share`,
    /// the switch its batcher shares by.
    pub fn sharing(self, mode: FairShareMode) -> Self {
        self.gate().set_fair_share(mode.is_on());
        self
    }

    /// The gate, locked.
    fn gate(&self) -> std::sync::MutexGuard<'_, Gate> {
        // State of estimates and shares: a panic cannot leave it worse than a wrong estimate.
        self.gate.lock().unwrap_or_else(|p| p.into_inner())
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
}

/// An escalation admitted to a worker ([`EnginePool::admit`]): counted in that worker's load
/// until dropped, when the worker's cost model learns what it took (if that worker answered
/// it, or it ran past its estimate unanswered), and in its device's share.
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
    /// The gate that admitted it, its device, and what the gate admitted.
    gate: (Arc<Mutex<Gate>>, Arc<str>, Admit),
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
        let (gate, device, admit) = &self.gate;
        if admit.shared {
            let mut gate = gate.lock().unwrap_or_else(|p| p.into_inner());
            gate.end(device, admit, now);
            metrics::gauge!("duet_gateway_engine_share_devices_in_flight").set(gate.devices_in_flight() as f64);
        }
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
