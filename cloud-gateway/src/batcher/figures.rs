//! The figures the batcher's actor writes and other tasks read without asking it: how fast the
//! backend has been learned to be (the cost model, the service time announced in `Welcome`),
//! and since when the batcher is saturated or stalled (`/readyz`). Atomics, so a connection
//! reads them on its own task.
//!
//! The rules that read them are pure functions in [`super::admission`]; what is admitted is
//! kept in [`super::book`], under its own lock.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use super::admission::{self, CostModel, Load, ReadinessPolicy};

/// Everything the batcher's figures hold.
#[derive(Debug)]
pub struct Figures {
    /// The backend's speed as learned from its batches.
    pub learned: Learned,
    /// Saturation and stall stamps for `/readyz`.
    pub readiness: Readiness,
}

/// The backend's speed, learned from the batches it ran.
#[derive(Debug)]
pub struct Learned {
    /// Smoothed backend time per batch, ms (reported to devices as service time).
    service_ms: AtomicU32,
    /// Time of a batch of short escalations, µs (the cost model).
    batch_us: AtomicU64,
    /// Time per token of prefill, µs (the cost model).
    token_us: AtomicU64,
}

impl Learned {
    /// Starting from the warm-up's measures: `service_ms` per batch, `token_ms` per token.
    pub fn new(service_ms: u32, token_ms: f64) -> Self {
        Self { service_ms: AtomicU32::new(service_ms), batch_us: AtomicU64::new(u64::from(service_ms) * 1000), token_us: AtomicU64::new((token_ms * 1e3).round() as u64) }
    }

    /// The cost model as learned so far.
    pub fn cost_model(&self) -> CostModel {
        CostModel { batch_ms: self.batch_us.load(Ordering::Relaxed) as f64 / 1e3, token_ms: self.token_us.load(Ordering::Relaxed) as f64 / 1e3 }
    }

    /// Smoothed backend time per batch, ms.
    pub fn service_ms(&self) -> u32 {
        self.service_ms.load(Ordering::Relaxed)
    }

    /// A batch of `rows` rows and `tokens` tokens of prefill took `ms`; `answered` if it
    /// answered escalations (prefill-only steps do not move the service time devices see).
    pub fn observe(&self, rows: usize, tokens: usize, ms: f64, answered: bool) {
        let mut m = self.cost_model();
        m.observe(rows, tokens, ms);
        self.batch_us.store((m.batch_ms * 1e3).round() as u64, Ordering::Relaxed);
        self.token_us.store((m.token_ms * 1e3).round() as u64, Ordering::Relaxed);
        if answered {
            let prev = f64::from(self.service_ms());
            let ewma = if prev == 0.0 { ms } else { 0.8 * prev + 0.2 * ms };
            self.service_ms.store(ewma.round() as u32, Ordering::Relaxed);
        }
    }
}

/// Since when the batcher refuses work without catching up, and since when its running batch
/// runs: the stamps [`admission::not_ready`] reads.
#[derive(Debug)]
pub struct Readiness {
    policy: ReadinessPolicy,
    /// The stamps count from it.
    epoch: Instant,
    /// Since when work has been refused without the queue catching up since (ms + 1 after
    /// `epoch`; 0 = not saturated).
    saturated_since: AtomicU64,
    /// Whether work was refused since the running (or last) batch started.
    refused_lately: AtomicBool,
    /// Since when the running batch runs (ms + 1 after `epoch`; 0 = none runs).
    batch_since: AtomicU64,
}

impl Readiness {
    /// Not saturated, nothing running, judged by `policy`.
    pub fn new(policy: ReadinessPolicy) -> Self {
        Self { policy, epoch: Instant::now(), saturated_since: AtomicU64::new(0), refused_lately: AtomicBool::new(false), batch_since: AtomicU64::new(0) }
    }

    /// `at` as stored: ms after `epoch`, plus one (0 means "not set").
    fn stamp(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_millis() as u64 + 1
    }

    /// Work was refused at `now`: saturated from now on, unless already, until the batcher
    /// has run a batch without refusing anything and nothing waits.
    pub fn refused(&self, now: Instant) {
        self.refused_lately.store(true, Ordering::Relaxed);
        let _ = self.saturated_since.compare_exchange(0, self.stamp(now), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// A batch starts at `now`.
    pub fn batch_started(&self, now: Instant) {
        self.batch_since.store(self.stamp(now), Ordering::Relaxed);
        self.refused_lately.store(false, Ordering::Relaxed);
    }

    /// The running batch is done.
    pub fn batch_done(&self) {
        self.batch_since.store(0, Ordering::Relaxed);
    }

    /// No longer saturated once no escalation waits (`queue_empty`) and either a batch ran
    /// without a refusal or there is nothing at all to do (`idle`).
    pub fn caught_up(&self, queue_empty: bool, idle: bool) {
        if queue_empty && (idle || !self.refused_lately.load(Ordering::Relaxed)) {
            self.saturated_since.store(0, Ordering::Relaxed);
        }
    }

    /// Why the batcher is not ready at `now` (saturated or stalled too long), if it is not.
    pub fn not_ready(&self, now: Instant) -> Option<String> {
        let get = |a: &AtomicU64| match a.load(Ordering::Relaxed) {
            0 => None,
            t => Some(t - 1),
        };
        let load = Load { now_ms: self.stamp(now) - 1, saturated_since_ms: get(&self.saturated_since), batch_since_ms: get(&self.batch_since) };
        admission::not_ready(&self.policy, load)
    }
}
