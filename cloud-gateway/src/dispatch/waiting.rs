//! How long the oldest escalation still waiting for its answer has waited: the queue age a
//! replica's devices feel, whichever path serves (queued or in a batch for the batcher, in
//! flight to an engine). Counts of work in flight say how much waits, not for how long: 16
//! one-token escalations and 16 long prefills read the same. The age rises as soon as a
//! replica answers more slowly than its devices ask, and is what the autoscaler acts on beside
//! the count (k8s/README.md, "Scale").
//!
//! Kept in the seam, so both paths have it for free: every admitted escalation's [`Pending`]
//! holds a [`Waiter`] from admission until its outcome is settled or it is dropped; the
//! `/metrics` handler reads [`Waiting::oldest_age`] at scrape time (a gauge set only when
//! escalations come and go would go stale while the oldest one waits). Time is passed in.
//!
//! [`Pending`]: super::Pending

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The admission times of the escalations waiting for their answers.
#[derive(Debug, Default)]
pub struct Waiting {
    since: Mutex<BTreeSet<(Instant, u64)>>,
    next: AtomicU64,
}

/// One escalation's place among the waiting, given up when dropped.
#[derive(Debug)]
pub struct Waiter {
    waiting: Arc<Waiting>,
    key: (Instant, u64),
}

impl Waiting {
    /// An escalation admitted at `now` starts waiting.
    pub fn enter(self: &Arc<Self>, now: Instant) -> Waiter {
        let key = (now, self.next.fetch_add(1, Ordering::Relaxed));
        self.lock().insert(key);
        Waiter { waiting: self.clone(), key }
    }

    /// How long the oldest escalation still waiting has waited at `now` (zero when none waits).
    pub fn oldest_age(&self, now: Instant) -> Duration {
        self.lock().first().map_or(Duration::ZERO, |(since, _)| now.saturating_duration_since(*since))
    }

    /// Escalations waiting.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<(Instant, u64)>> {
        // A set of instants cannot be left half-updated by a panic: keep using it.
        self.since.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.waiting.lock().remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_queue_age_is_the_oldest_waiting_escalations_and_falls_when_it_is_answered() {
        let t0 = Instant::now();
        let waiting = Arc::new(Waiting::default());
        assert_eq!(waiting.oldest_age(t0), Duration::ZERO, "none waits: zero, not missing");
        let first = waiting.enter(t0);
        let second = waiting.enter(t0 + 300 * MS);
        let same_instant = waiting.enter(t0 + 300 * MS);
        assert_eq!(waiting.oldest_age(t0 + 1_000 * MS), 1_000 * MS);
        drop(first);
        assert_eq!(waiting.oldest_age(t0 + 1_000 * MS), 700 * MS, "the next oldest");
        drop(second);
        assert_eq!((waiting.len(), waiting.oldest_age(t0 + 1_000 * MS)), (1, 700 * MS), "two admitted at one instant are two");
        drop(same_instant);
        assert!(waiting.is_empty());
        assert_eq!(waiting.oldest_age(t0 + 5_000 * MS), Duration::ZERO);
    }

    #[test]
    fn a_clock_read_before_the_admission_gives_zero_not_a_panic() {
        let t0 = Instant::now();
        let waiting = Arc::new(Waiting::default());
        let _w = waiting.enter(t0 + 50 * MS);
        assert_eq!(waiting.oldest_age(t0), Duration::ZERO);
    }
}
