//! How long to wait for the cloud, and when to stop asking (DESIGN §4).
//!
//! Pure logic with time passed in (neqo style), so fallback behaviour is testable without
//! sleeping: `deadline = clamp(k * srtt + service_time, min, max)`, and a link that keeps
//! failing puts the node in local-only mode for a back-off period before it probes again.

use std::time::{Duration, Instant};

/// Deadline and degradation settings.
#[derive(Debug, Clone, Copy)]
pub struct DeadlinePolicy {
    /// RTT multiplier.
    pub k: f64,
    /// Shortest deadline.
    pub min: Duration,
    /// Longest deadline (the most one token may ever wait).
    pub max: Duration,
    /// Expected LLM prefill time per context token sent: a long delta (or a `Full` resync)
    /// costs the gateway more than a one-token one, so it gets a longer deadline.
    pub per_token: Duration,
    /// Consecutive failed escalations that switch to local-only.
    pub failures_to_degrade: u32,
    /// First local-only period; doubles while probes keep failing, up to `max_backoff`.
    pub backoff: Duration,
    /// Longest local-only period.
    pub max_backoff: Duration,
}

impl Default for DeadlinePolicy {
    fn default() -> Self {
        Self {
            k: 2.0,
            min: Duration::from_millis(30),
            max: Duration::from_millis(1500),
            per_token: Duration::from_millis(25),
            failures_to_degrade: 3,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(15),
        }
    }
}

impl DeadlinePolicy {
    /// Deadline for one escalation that sends `tokens` context tokens.
    pub fn deadline(&self, srtt: Duration, service_time: Duration, tokens: usize) -> Duration {
        let d = srtt.mul_f64(self.k) + service_time + self.per_token * tokens.min(100_000) as u32;
        d.clamp(self.min, self.max)
    }
}

/// Tracks escalation outcomes and decides whether to escalate at all.
#[derive(Debug, Clone)]
pub struct LinkHealth {
    policy: DeadlinePolicy,
    consecutive_failures: u32,
    local_until: Option<Instant>,
    current_backoff: Duration,
    service_ewma_ms: f64,
}

impl LinkHealth {
    /// Healthy, with the gateway's announced service time as the first estimate.
    pub fn new(policy: DeadlinePolicy, service_time: Duration) -> Self {
        Self { policy, consecutive_failures: 0, local_until: None, current_backoff: policy.backoff, service_ewma_ms: service_time.as_secs_f64() * 1e3 }
    }

    /// Whether a hard token may be escalated now (false = decide locally).
    pub fn may_escalate(&self, now: Instant) -> bool {
        self.local_until.is_none_or(|t| now >= t)
    }

    /// Deadline for an escalation sent now carrying `tokens` context tokens.
    pub fn deadline(&self, srtt: Duration, tokens: usize) -> Duration {
        self.policy.deadline(srtt, Duration::from_secs_f64(self.service_ewma_ms / 1e3), tokens)
    }

    /// The cloud answered; `llm_ms` is the gateway's reported service time.
    pub fn success(&mut self, llm_ms: u32) {
        self.consecutive_failures = 0;
        self.local_until = None;
        self.current_backoff = self.policy.backoff;
        self.service_ewma_ms = 0.8 * self.service_ewma_ms + 0.2 * llm_ms as f64;
    }

    /// The escalation fell back (timeout, busy, error). Returns true when this starts (or
    /// extends) a local-only period, the moment to check that the gateway is still alive.
    pub fn failure(&mut self, now: Instant) -> bool {
        self.consecutive_failures += 1;
        let probing = self.local_until.is_some();
        if probing || self.consecutive_failures >= self.policy.failures_to_degrade {
            if probing {
                self.current_backoff = (self.current_backoff * 2).min(self.policy.max_backoff);
            }
            self.local_until = Some(now + self.current_backoff);
            return true;
        }
        false
    }

    /// A new connection was established: start afresh.
    pub fn reconnected(&mut self) {
        self.consecutive_failures = 0;
        self.local_until = None;
        self.current_backoff = self.policy.backoff;
    }

    /// Whether the node is currently in (or probing out of) local-only mode.
    pub fn degraded(&self) -> bool {
        self.local_until.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_is_clamped() {
        let p = DeadlinePolicy::default();
        assert_eq!(p.deadline(Duration::from_millis(1), Duration::ZERO, 0), p.min);
        assert_eq!(p.deadline(Duration::from_millis(100), Duration::from_millis(50), 0), Duration::from_millis(250));
        assert_eq!(p.deadline(Duration::from_millis(100), Duration::from_millis(50), 4), Duration::from_millis(350));
        assert_eq!(p.deadline(Duration::from_secs(10), Duration::ZERO, 1), p.max);
    }

    #[test]
    fn repeated_failures_go_local_then_probe_with_growing_backoff() {
        let p = DeadlinePolicy::default();
        let mut h = LinkHealth::new(p, Duration::from_millis(10));
        let t0 = Instant::now();
        h.failure(t0);
        h.failure(t0);
        assert!(h.may_escalate(t0));
        h.failure(t0);
        assert!(!h.may_escalate(t0));
        assert!(!h.may_escalate(t0 + p.backoff - Duration::from_millis(1)));
        let t1 = t0 + p.backoff;
        assert!(h.may_escalate(t1), "probe after the back-off");
        h.failure(t1);
        assert!(!h.may_escalate(t1 + p.backoff), "a failed probe doubles the back-off");
        assert!(h.may_escalate(t1 + p.backoff * 2));
        h.success(12);
        assert!(!h.degraded());
        assert!(h.may_escalate(t1));
    }
}
