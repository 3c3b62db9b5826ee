//! Active health of one engine worker, with hysteresis.
//!
//! The pool probes each worker's health path (`/health`, `/health_generate`, ...) every
//! `interval`, each probe given `timeout`. One lost probe says little (a GC pause, a long
//! prefill holding the server's event loop), and a worker that answers every other probe is no
//! place for a session whose device waits a few hundred milliseconds per token; so a worker
//! goes out after `unhealthy_after` consecutive failed checks and comes back only after
//! `healthy_after` consecutive good ones: a flapping worker stays out.
//!
//! This is the slow, active signal; the [`breaker`](super::breaker) is the fast, passive one
//! fed by real requests. A worker takes sessions only while both allow it.
//!
//! Pure policy, as [`common::exchange::LinkHealth`] is: no I/O, no clock reads, no async; the
//! probes' outcomes come in as arguments (the pool's health task owns the interval and the
//! timeout), so the rules are tested without a server or sleeping.

use std::time::Duration;

/// How often a worker is probed and how many checks in a row flip its health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthConfig {
    /// Time between two probes of one worker.
    pub interval: Duration,
    /// How long one probe may take before it counts as failed.
    pub timeout: Duration,
    /// Consecutive failed checks that take a healthy worker out (at least 1).
    pub unhealthy_after: u32,
    /// Consecutive good checks that bring an unhealthy worker back (at least 1).
    pub healthy_after: u32,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self { interval: Duration::from_secs(1), timeout: Duration::from_millis(500), unhealthy_after: 2, healthy_after: 2 }
    }
}

/// One worker's health as its probes report it (see the module doc).
#[derive(Debug, Clone)]
pub struct HealthTracker {
    config: HealthConfig,
    healthy: bool,
    /// Consecutive checks, up to the latest, that disagreed with `healthy`.
    against: u32,
}

impl HealthTracker {
    /// A tracker starting healthy or not; thresholds of 0 are taken as 1.
    pub fn new(config: HealthConfig, initially_healthy: bool) -> Self {
        let config = HealthConfig { unhealthy_after: config.unhealthy_after.max(1), healthy_after: config.healthy_after.max(1), ..config };
        Self { config, healthy: initially_healthy, against: 0 }
    }

    /// The settings in force (after the thresholds were clamped to at least 1).
    pub fn config(&self) -> &HealthConfig {
        &self.config
    }

    /// Whether the worker may take sessions, as far as its probes tell.
    pub fn is_healthy(&self) -> bool {
        self.healthy
    }

    /// Consecutive latest checks that disagree with the current health (how close it is to
    /// flipping).
    pub fn streak_against(&self) -> u32 {
        self.against
    }

    /// Record one probe's outcome (`ok`: answered 2xx within the timeout). Returns
    /// `Some(new health)` when this check flipped it.
    pub fn record(&mut self, ok: bool) -> Option<bool> {
        if ok == self.healthy {
            self.against = 0;
            return None;
        }
        self.against += 1;
        let needed = if self.healthy { self.config.unhealthy_after } else { self.config.healthy_after };
        if self.against < needed {
            return None;
        }
        self.healthy = ok;
        self.against = 0;
        Some(ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(unhealthy_after: u32, healthy_after: u32) -> HealthConfig {
        HealthConfig { unhealthy_after, healthy_after, ..HealthConfig::default() }
    }

    #[test]
    fn the_defaults_probe_every_second_and_flip_after_two_checks() {
        let c = HealthConfig::default();
        assert_eq!((c.interval, c.timeout), (Duration::from_secs(1), Duration::from_millis(500)));
        assert_eq!((c.unhealthy_after, c.healthy_after), (2, 2));
    }

    #[test]
    fn one_failed_check_does_not_take_a_healthy_worker_out() {
        let mut h = HealthTracker::new(HealthConfig::default(), true);
        assert_eq!(h.record(false), None);
        assert!(h.is_healthy());
        assert_eq!(h.record(true), None);
        assert_eq!(h.record(false), None, "a good check in between starts the count again");
        assert!(h.is_healthy());
    }

    #[test]
    fn unhealthy_after_consecutive_failed_checks_take_it_out() {
        let mut h = HealthTracker::new(config(3, 2), true);
        assert_eq!(h.record(false), None);
        assert_eq!(h.record(false), None);
        assert_eq!(h.streak_against(), 2);
        assert_eq!(h.record(false), Some(false));
        assert!(!h.is_healthy());
        assert_eq!(h.record(false), None, "the flip is reported once");
    }

    #[test]
    fn recovery_needs_healthy_after_consecutive_good_checks() {
        let mut h = HealthTracker::new(config(2, 3), false);
        assert_eq!(h.record(true), None);
        assert_eq!(h.record(true), None);
        assert!(!h.is_healthy());
        assert_eq!(h.record(true), Some(true));
        assert!(h.is_healthy());
    }

    #[test]
    fn a_flapping_worker_stays_out() {
        let mut h = HealthTracker::new(HealthConfig::default(), true);
        h.record(false);
        assert_eq!(h.record(false), Some(false));
        for i in 0..20 {
            assert_eq!(h.record(i % 2 == 0), None);
            assert!(!h.is_healthy(), "check {i}");
        }
        h.record(true);
        assert_eq!(h.record(true), Some(true), "two good checks in a row bring it back");
    }

    #[test]
    fn a_worker_starting_unhealthy_waits_for_its_checks() {
        let mut h = HealthTracker::new(HealthConfig::default(), false);
        assert!(!h.is_healthy());
        assert_eq!(h.record(false), None);
        assert_eq!(h.record(true), None);
        assert_eq!(h.record(true), Some(true));
    }

    #[test]
    fn zero_thresholds_are_taken_as_one() {
        let mut h = HealthTracker::new(config(0, 0), true);
        assert_eq!(h.record(false), Some(false));
        assert_eq!(h.record(true), Some(true));
    }
}
