//! A per-worker circuit breaker: stop sending escalations to an engine worker that keeps
//! failing, and probe it with a few trial requests once it has had time to recover.
//!
//! Every escalation has a deadline of a few hundred milliseconds on the device, so a worker that
//! times out or answers 5xx costs the device its whole wait; after `failure_threshold`
//! consecutive failures the breaker opens and the pool routes the worker's sessions elsewhere.
//! After `open_for` it goes half-open and lets `half_open_max_trials` requests through: enough
//! successes close it again, one failure reopens it and restarts the timer.
//!
//! Pure policy, as [`common::exchange::LinkHealth`] is: no I/O, no clock reads, no async. Time
//! comes in as `now`, and the Open → HalfOpen step is computed lazily from it, so every rule is
//! tested deterministically without sleeping. The pool wraps it in its own lock.
//!
//! Transitions are returned to the caller, so it can count them in metrics: [`on_success`] and
//! [`on_failure`] return the transition their outcome caused; the timer-driven Open → HalfOpen
//! one, which has no event of its own, is collected with [`poll`].
//!
//! [`on_success`]: CircuitBreaker::on_success
//! [`on_failure`]: CircuitBreaker::on_failure
//! [`poll`]: CircuitBreaker::poll

use std::fmt;
use std::time::{Duration, Instant};

/// When a breaker opens, how long it stays open, and how it closes again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures that open a closed breaker (at least 1).
    pub failure_threshold: u32,
    /// How long an open breaker refuses every request before it goes half-open.
    pub open_for: Duration,
    /// Trial requests let through at once while half-open (at least 1).
    pub half_open_max_trials: u32,
    /// Successful trials, while half-open, that close the breaker (at least 1).
    pub success_threshold: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self { failure_threshold: 5, open_for: Duration::from_secs(5), half_open_max_trials: 1, success_threshold: 1 }
    }
}

/// Where a breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Requests flow; failures are being counted.
    Closed,
    /// Requests are refused until `open_for` has passed.
    Open,
    /// A few trial requests are let through to see whether the worker recovered.
    HalfOpen,
}

impl BreakerState {
    /// The value of the per-worker breaker gauge: 0 closed, 1 half-open, 2 open.
    pub fn as_gauge(self) -> f64 {
        match self {
            Self::Closed => 0.0,
            Self::HalfOpen => 1.0,
            Self::Open => 2.0,
        }
    }

    /// The name used in logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
        }
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A change of [`BreakerState`], reported once so the caller can count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Transition {
    /// The state before.
    pub from: BreakerState,
    /// The state after.
    pub to: BreakerState,
}

/// The stored state; `Open` becomes half-open lazily once `open_for` has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Closed { consecutive_failures: u32 },
    Open { since: Instant },
    HalfOpen { trials_in_flight: u32, successes: u32 },
}

/// One worker's circuit breaker (see the module doc).
#[derive(Debug, Clone)]
pub struct CircuitBreaker {
    config: BreakerConfig,
    phase: Phase,
    /// Open → HalfOpen steps taken (lazily, by any call) and not yet returned by `poll`.
    unreported_half_opens: u32,
}

impl CircuitBreaker {
    /// A closed breaker; thresholds of 0 are taken as 1.
    pub fn new(config: BreakerConfig) -> Self {
        let config = BreakerConfig {
            failure_threshold: config.failure_threshold.max(1),
            half_open_max_trials: config.half_open_max_trials.max(1),
            success_threshold: config.success_threshold.max(1),
            ..config
        };
        Self { config, phase: Phase::Closed { consecutive_failures: 0 }, unreported_half_opens: 0 }
    }

    /// The settings in force (after the thresholds were clamped to at least 1).
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// The state at `now`: an open breaker reads half-open once `open_for` has passed.
    pub fn state(&self, now: Instant) -> BreakerState {
        match self.phase {
            Phase::Closed { .. } => BreakerState::Closed,
            Phase::Open { since } if self.open_expired(since, now) => BreakerState::HalfOpen,
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// Whether [`try_acquire`](Self::try_acquire) would let a request through at `now`,
    /// without taking a trial slot (for building the pick's candidates).
    pub fn allows(&self, now: Instant) -> bool {
        match self.phase {
            Phase::Closed { .. } => true,
            Phase::Open { since } => self.open_expired(since, now),
            Phase::HalfOpen { trials_in_flight, .. } => trials_in_flight < self.config.half_open_max_trials,
        }
    }

    /// Consecutive failures counted while closed (0 in the other states).
    pub fn consecutive_failures(&self) -> u32 {
        match self.phase {
            Phase::Closed { consecutive_failures } => consecutive_failures,
            _ => 0,
        }
    }

    /// Ask to send a request at `now`. Closed: yes. Open: no. Half-open: yes while fewer than
    /// `half_open_max_trials` trials are outstanding, and the request then counts as one; it
    /// must end in [`on_success`](Self::on_success), [`on_failure`](Self::on_failure) or
    /// [`on_cancelled`](Self::on_cancelled), or its slot stays taken.
    pub fn try_acquire(&mut self, now: Instant) -> bool {
        self.advance(now);
        match &mut self.phase {
            Phase::Closed { .. } => true,
            Phase::Open { .. } => false,
            Phase::HalfOpen { trials_in_flight, .. } => {
                if *trials_in_flight < self.config.half_open_max_trials {
                    *trials_in_flight += 1;
                    true
                } else {
                    false
                }
            }
        }
    }

    /// A request to this worker succeeded at `now`. Closed: the failure count restarts.
    /// Half-open: a trial succeeded, and `success_threshold` of them close the breaker. Open:
    /// nothing (the request was sent before the breaker opened). Returns the transition made.
    pub fn on_success(&mut self, now: Instant) -> Option<Transition> {
        self.advance(now);
        match &mut self.phase {
            Phase::Closed { consecutive_failures } => {
                *consecutive_failures = 0;
                None
            }
            Phase::Open { .. } => None,
            Phase::HalfOpen { trials_in_flight, successes } => {
                *trials_in_flight = trials_in_flight.saturating_sub(1);
                *successes += 1;
                if *successes >= self.config.success_threshold {
                    self.phase = Phase::Closed { consecutive_failures: 0 };
                    Some(Transition { from: BreakerState::HalfOpen, to: BreakerState::Closed })
                } else {
                    None
                }
            }
        }
    }

    /// A request to this worker failed at `now`, by the worker's fault
    /// ([`EngineError::counts_against_worker`](crate::engine::EngineError::counts_against_worker)).
    /// Closed: counted, and `failure_threshold` in a row open the breaker. Half-open: reopens
    /// at once, restarting `open_for`. Open: nothing (the request was sent before the breaker
    /// opened, and does not extend the wait). Returns the transition made.
    pub fn on_failure(&mut self, now: Instant) -> Option<Transition> {
        self.advance(now);
        match &mut self.phase {
            Phase::Closed { consecutive_failures } => {
                *consecutive_failures += 1;
                if *consecutive_failures >= self.config.failure_threshold {
                    self.phase = Phase::Open { since: now };
                    Some(Transition { from: BreakerState::Closed, to: BreakerState::Open })
                } else {
                    None
                }
            }
            Phase::Open { .. } => None,
            Phase::HalfOpen { .. } => {
                self.phase = Phase::Open { since: now };
                Some(Transition { from: BreakerState::HalfOpen, to: BreakerState::Open })
            }
        }
    }

    /// The request was cancelled (the device stopped waiting) before the worker answered: a
    /// half-open trial slot is freed without judging the worker either way.
    pub fn on_cancelled(&mut self) {
        if let Phase::HalfOpen { trials_in_flight, .. } = &mut self.phase {
            *trials_in_flight = trials_in_flight.saturating_sub(1);
        }
    }

    /// Take the timer-driven Open → HalfOpen step if `open_for` has passed, and return it if it
    /// has not been returned yet (whichever call took it). Each such step is returned exactly
    /// once; call this where the breaker's gauge is exported or before each pick. More than
    /// one can be pending only if the breaker went Open → HalfOpen → Open again between two
    /// polls, so a caller that counts every step calls it until it returns `None`.
    pub fn poll(&mut self, now: Instant) -> Option<Transition> {
        self.advance(now);
        if self.unreported_half_opens == 0 {
            return None;
        }
        self.unreported_half_opens -= 1;
        Some(Transition { from: BreakerState::Open, to: BreakerState::HalfOpen })
    }

    fn open_expired(&self, since: Instant, now: Instant) -> bool {
        now.saturating_duration_since(since) >= self.config.open_for
    }

    /// Turn an expired Open into HalfOpen (remembering to report it).
    fn advance(&mut self, now: Instant) {
        if let Phase::Open { since } = self.phase {
            if self.open_expired(since, now) {
                self.phase = Phase::HalfOpen { trials_in_flight: 0, successes: 0 };
                self.unreported_half_opens += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN_FOR: Duration = Duration::from_secs(5);

    fn config(failure_threshold: u32, half_open_max_trials: u32, success_threshold: u32) -> BreakerConfig {
        BreakerConfig { failure_threshold, open_for: OPEN_FOR, half_open_max_trials, success_threshold }
    }

    fn tripped(cfg: BreakerConfig, t0: Instant) -> CircuitBreaker {
        let mut b = CircuitBreaker::new(cfg);
        for _ in 0..cfg.failure_threshold {
            b.on_failure(t0);
        }
        assert_eq!(b.state(t0), BreakerState::Open);
        b
    }

    const OPENED: Transition = Transition { from: BreakerState::Closed, to: BreakerState::Open };
    const HALF_OPENED: Transition = Transition { from: BreakerState::Open, to: BreakerState::HalfOpen };
    const CLOSED: Transition = Transition { from: BreakerState::HalfOpen, to: BreakerState::Closed };
    const REOPENED: Transition = Transition { from: BreakerState::HalfOpen, to: BreakerState::Open };

    #[test]
    fn the_defaults_are_five_failures_five_seconds_one_trial_one_success() {
        assert_eq!(BreakerConfig::default(), config(5, 1, 1));
    }

    #[test]
    fn a_breaker_opens_after_the_threshold_of_consecutive_failures() {
        let t0 = Instant::now();
        let mut b = CircuitBreaker::new(config(3, 1, 1));
        assert_eq!(b.on_failure(t0), None);
        assert_eq!(b.on_failure(t0), None);
        assert!(b.try_acquire(t0), "still closed below the threshold");
        assert_eq!(b.consecutive_failures(), 2);
        assert_eq!(b.on_failure(t0), Some(OPENED));
        assert_eq!(b.state(t0), BreakerState::Open);
        assert!(!b.try_acquire(t0));
        assert!(!b.allows(t0));
    }

    #[test]
    fn interleaved_successes_keep_a_breaker_closed() {
        let t0 = Instant::now();
        let mut b = CircuitBreaker::new(config(3, 1, 1));
        for _ in 0..10 {
            assert_eq!(b.on_failure(t0), None);
            assert_eq!(b.on_failure(t0), None);
            assert_eq!(b.on_success(t0), None);
            assert_eq!(b.consecutive_failures(), 0);
        }
        assert_eq!(b.state(t0), BreakerState::Closed);
    }

    #[test]
    fn an_open_breaker_refuses_everything_until_open_for_has_passed() {
        let t0 = Instant::now();
        let mut b = tripped(config(2, 1, 1), t0);
        let just_before = t0 + OPEN_FOR - Duration::from_millis(1);
        assert_eq!(b.state(just_before), BreakerState::Open);
        assert!(!b.allows(just_before));
        assert!(!b.try_acquire(just_before));
        assert_eq!(b.poll(just_before), None);
        assert_eq!(b.state(t0 + OPEN_FOR), BreakerState::HalfOpen, "half-open is computed from `now` alone");
        assert!(b.allows(t0 + OPEN_FOR));
    }

    #[test]
    fn a_half_open_breaker_lets_exactly_the_configured_trials_through() {
        for trials in [1, 3] {
            let t0 = Instant::now();
            let mut b = tripped(config(2, trials, 5), t0);
            let t1 = t0 + OPEN_FOR;
            for _ in 0..trials {
                assert!(b.try_acquire(t1));
            }
            assert!(!b.try_acquire(t1), "no more than {trials} trials at once");
            assert!(!b.allows(t1));
            assert_eq!(b.state(t1), BreakerState::HalfOpen);
            assert_eq!(b.on_success(t1), None, "one success of five needed");
            assert!(b.try_acquire(t1), "an answered trial frees its slot");
            assert!(!b.try_acquire(t1));
        }
    }

    #[test]
    fn a_successful_trial_closes_the_breaker() {
        let t0 = Instant::now();
        let mut b = tripped(config(2, 1, 1), t0);
        let t1 = t0 + OPEN_FOR;
        assert!(b.try_acquire(t1));
        assert_eq!(b.on_success(t1), Some(CLOSED));
        assert_eq!(b.state(t1), BreakerState::Closed);
        assert!(b.try_acquire(t1) && b.try_acquire(t1), "closed lets everything through");
        assert_eq!(b.consecutive_failures(), 0);
        assert_eq!(b.on_failure(t1), None, "the failure count starts again from zero");
    }

    #[test]
    fn closing_takes_success_threshold_successful_trials() {
        let t0 = Instant::now();
        let mut b = tripped(config(2, 1, 3), t0);
        let t1 = t0 + OPEN_FOR;
        for _ in 0..2 {
            assert!(b.try_acquire(t1));
            assert_eq!(b.on_success(t1), None);
            assert_eq!(b.state(t1), BreakerState::HalfOpen);
        }
        assert!(b.try_acquire(t1));
        assert_eq!(b.on_success(t1), Some(CLOSED));
    }

    #[test]
    fn a_failed_trial_reopens_the_breaker_and_restarts_the_timer() {
        let t0 = Instant::now();
        let mut b = tripped(config(2, 1, 1), t0);
        let t1 = t0 + OPEN_FOR + Duration::from_secs(2);
        assert!(b.try_acquire(t1));
        assert_eq!(b.on_failure(t1), Some(REOPENED));
        assert_eq!(b.state(t1), BreakerState::Open);
        assert_eq!(b.state(t1 + OPEN_FOR - Duration::from_millis(1)), BreakerState::Open, "open_for counts from the reopening");
        assert!(!b.try_acquire(t1 + OPEN_FOR - Duration::from_millis(1)));
        assert_eq!(b.state(t1 + OPEN_FOR), BreakerState::HalfOpen);
        assert!(b.try_acquire(t1 + OPEN_FOR));
    }

    #[test]
    fn answers_to_requests_sent_before_the_breaker_opened_change_nothing_while_open() {
        let t0 = Instant::now();
        let mut b = tripped(config(2, 1, 1), t0);
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(b.on_success(t1), None);
        assert_eq!(b.on_failure(t1), None);
        assert_eq!(b.state(t1), BreakerState::Open);
        assert_eq!(b.state(t0 + OPEN_FOR), BreakerState::HalfOpen, "a late failure does not extend the wait");
    }

    #[test]
    fn every_transition_is_reported_exactly_once() {
        let t0 = Instant::now();
        let mut b = CircuitBreaker::new(config(2, 1, 1));
        let mut seen = Vec::new();
        seen.extend(b.on_failure(t0));
        seen.extend(b.on_failure(t0));
        seen.extend(b.on_failure(t0));
        seen.extend(b.poll(t0));
        let t1 = t0 + OPEN_FOR;
        assert!(b.try_acquire(t1), "try_acquire takes the half-open step itself");
        seen.extend(b.poll(t1));
        seen.extend(b.poll(t1));
        seen.extend(b.on_failure(t1));
        seen.extend(b.on_failure(t1));
        let t2 = t1 + OPEN_FOR;
        seen.extend(b.poll(t2));
        assert!(b.try_acquire(t2));
        seen.extend(b.on_success(t2));
        seen.extend(b.on_success(t2));
        seen.extend(b.poll(t2 + OPEN_FOR));
        assert_eq!(seen, [OPENED, HALF_OPENED, REOPENED, HALF_OPENED, CLOSED]);
    }

    #[test]
    fn half_open_steps_taken_between_polls_are_all_reported() {
        let t0 = Instant::now();
        let mut b = tripped(config(1, 1, 1), t0);
        let t1 = t0 + OPEN_FOR;
        assert!(b.try_acquire(t1));
        assert_eq!(b.on_failure(t1), Some(REOPENED));
        assert!(b.try_acquire(t1 + OPEN_FOR));
        assert_eq!(b.poll(t1 + OPEN_FOR), Some(HALF_OPENED));
        assert_eq!(b.poll(t1 + OPEN_FOR), Some(HALF_OPENED));
        assert_eq!(b.poll(t1 + OPEN_FOR), None);
    }

    #[test]
    fn a_cancelled_trial_frees_its_slot_without_judging_the_worker() {
        let t0 = Instant::now();
        let mut b = tripped(config(2, 1, 1), t0);
        let t1 = t0 + OPEN_FOR;
        assert!(b.try_acquire(t1));
        assert!(!b.try_acquire(t1));
        b.on_cancelled();
        assert_eq!(b.state(t1), BreakerState::HalfOpen, "neither closed nor reopened");
        assert!(b.try_acquire(t1), "the slot is free again");
        b.on_cancelled();
        b.on_cancelled();
        assert!(b.try_acquire(t1));
        assert!(!b.try_acquire(t1), "extra cancellations do not make extra slots");
    }

    #[test]
    fn cancellations_while_closed_do_not_reset_the_failure_count() {
        let t0 = Instant::now();
        let mut b = CircuitBreaker::new(config(2, 1, 1));
        b.on_failure(t0);
        b.on_cancelled();
        assert_eq!(b.on_failure(t0), Some(OPENED));
    }

    #[test]
    fn zero_thresholds_are_taken_as_one() {
        let t0 = Instant::now();
        let mut b = CircuitBreaker::new(config(0, 0, 0));
        assert_eq!(*b.config(), config(1, 1, 1));
        assert_eq!(b.on_failure(t0), Some(OPENED));
        assert!(b.try_acquire(t0 + OPEN_FOR), "a half-open breaker lets at least one trial through");
    }

    #[test]
    fn the_gauge_orders_states_by_severity() {
        assert_eq!(BreakerState::Closed.as_gauge(), 0.0);
        assert_eq!(BreakerState::HalfOpen.as_gauge(), 1.0);
        assert_eq!(BreakerState::Open.as_gauge(), 2.0);
        assert_eq!(BreakerState::HalfOpen.to_string(), "half_open");
    }
}
