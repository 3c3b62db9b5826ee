//! How long to wait for the cloud, and when to stop asking (docs/ARCHITECTURE.md, "Deadlines").
//!
//! Pure logic with time passed in (neqo style), so fallback behaviour is testable without
//! sleeping: `deadline = clamp(k * srtt + service_time + 1.5 * per_token * tokens_sent, min, max)`
//! (the 1.5 because prefill times vary with load), and a link that keeps failing puts the node
//! in local-only mode for a back-off period before it probes again.
//!
//! Both service estimates are learned from the gateway's answers: the one-token service time
//! from escalations of a few tokens, the LLM time per context token sent from long ones (and
//! from the prompt pre-sync). A timeout, or an escalation the gateway's queue held past its
//! deadline, doubles the service estimate until the next answer (Karn's rule, as TCP does for
//! its retransmission timer), so a stale estimate cannot keep every deadline too short.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Deadline and degradation settings.
#[derive(Debug, Clone, Copy)]
pub struct DeadlinePolicy {
    /// RTT multiplier: 3, not 2, so that one lost packet of the exchange (recovered after
    /// QUIC's probe timeout, about one more RTT) still makes its deadline; at 2 the fleet saw
    /// 4–6 % timeouts on every lossy profile (docs/src/benchmarks/fleet.md, "Tried and not kept").
    pub k: f64,
    /// Shortest deadline: a scheduling hiccup on either end must not cost a fallback.
    pub min: Duration,
    /// Longest deadline (the most one token may ever wait).
    pub max: Duration,
    /// Expected LLM prefill time per context token sent, before any is measured: a long delta
    /// (or a `Full` resync) costs the gateway more than a one-token one, so it gets a longer
    /// deadline.
    pub per_token: Duration,
    /// Consecutive failed escalations that switch to local-only.
    pub failures_to_degrade: u32,
    /// First local-only period; doubles while probes keep failing, up to `max_backoff`.
    pub backoff: Duration,
    /// Longest local-only period. Short (2 s) because a device must come back soon after its
    /// link does (a blackout's end, a restarted gateway); what a probe costs while the link is
    /// still bad is one escalation waiting out its deadline per period.
    pub max_backoff: Duration,
}

impl Default for DeadlinePolicy {
    fn default() -> Self {
        Self {
            k: 3.0,
            min: Duration::from_millis(50),
            max: Duration::from_millis(1500),
            per_token: Duration::from_millis(25),
            failures_to_degrade: 3,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl DeadlinePolicy {
    /// Deadline for one escalation that sends `tokens` context tokens, at the prior per-token cost.
    pub fn deadline(&self, srtt: Duration, service_time: Duration, tokens: usize) -> Duration {
        self.deadline_at(srtt, service_time, self.per_token, tokens)
    }

    fn deadline_at(&self, srtt: Duration, service_time: Duration, per_token: Duration, tokens: usize) -> Duration {
        Self::expected_at(self.k, srtt, service_time, per_token, tokens).clamp(self.min, self.max)
    }

    /// The wait a deadline is made from, before the policy's bounds.
    fn expected_at(k: f64, srtt: Duration, service_time: Duration, per_token: Duration, tokens: usize) -> Duration {
        srtt.mul_f64(k) + service_time + per_token * tokens.min(100_000) as u32
    }
}

/// Escalations that send at most this many tokens measure the one-token service time as it is;
/// those sending more, up to [`LONG_SEND`], less the expected cost of the tokens beyond it.
const SHORT_SEND: usize = 2;
/// Times the gateway's announced service time a device waits until an answer has measured it.
/// The figure is the gateway's idle warm-up, without its queue or the load of a machine it
/// shares (the gateway beside the device's SLM on one machine answered in 2-4 times its idle
/// step), and a deadline a little short wastes the whole wait; RFC 6298 starts TCP's timer at
/// three times its first sample for the same reason. The first answer replaces it.
const UNMEASURED_SERVICE: f64 = 3.0;
/// Escalations (or pre-syncs) that send at least this many tokens measure the per-token cost.
const LONG_SEND: usize = 8;
/// Factor on estimated prefill work (context tokens sent, a pre-sync still running) in deadlines.
const PREFILL_MARGIN: f64 = 1.5;
/// Unanswered prefills remembered for learning.
const MAX_PENDING_PREFILLS: usize = 4;
/// Weight of a new sample in the estimates (exponentially weighted moving averages).
const SAMPLE_WEIGHT: f64 = 0.2;

/// The service time one answer teaches, ms: how long the gateway held the escalation as the
/// device saw it (`waited` from sending to the answer, less the link's round trip `rtt`), and
/// at least what the gateway reported its LLM spent (`llm_ms`).
///
/// The LLM's own time leaves out the gateway's queue: deadlines learned from it alone miss
/// whenever other work (another session's prefill, a batch already running) is ahead, and
/// after a timeout's back-off the next answer would put the short estimate straight back.
/// What the device waited for is what its next deadline must allow.
pub fn service_sample(llm_ms: u32, waited: Duration, rtt: Duration) -> u32 {
    let held = waited.saturating_sub(rtt).as_millis().min(u128::from(u32::MAX)) as u32;
    held.max(llm_ms)
}

/// Tracks escalation outcomes and decides whether to escalate at all.
#[derive(Debug, Clone)]
pub struct LinkHealth {
    policy: DeadlinePolicy,
    consecutive_failures: u32,
    local_until: Option<Instant>,
    current_backoff: Duration,
    service_ewma_ms: f64,
    per_token_ms: f64,
    /// The service estimate is not a measurement of this link (the gateway's announced figure,
    /// or one a timeout doubled): the next answer replaces it instead of being averaged in.
    backed_off: bool,
    /// A prefill the gateway is doing (the prompt pre-sync) whose answer may come after the
    /// session that sent it ended; the health learns from it whenever it comes.
    pending_prefill: Vec<(usize, PrefillReport)>,
    /// The connection this state was learned on; a new one starts afresh.
    generation: Option<u64>,
}

/// Where the task awaiting a prefill's answer reports the gateway's service time for it: the
/// answer often comes after the session that sent it ended, so it cannot be an event of that
/// session; the health polls it whenever it next decides something.
#[derive(Debug, Clone)]
pub struct PrefillReport(Arc<AtomicU32>);

impl PrefillReport {
    const WAITING: u32 = u32::MAX;
    const NO_ANSWER: u32 = u32::MAX - 1;

    fn new() -> Self {
        Self(Arc::new(AtomicU32::new(Self::WAITING)))
    }

    /// The gateway answered after `llm_ms` of service (the first ending counts).
    pub fn report(&self, llm_ms: u32) {
        let _ = self.0.compare_exchange(Self::WAITING, llm_ms.min(Self::NO_ANSWER - 1), Ordering::AcqRel, Ordering::Acquire);
    }

    /// The request ended without a token (error, busy, lost link): nothing to learn, but the
    /// gateway is no longer busy with it.
    pub fn finish(&self) {
        let _ = self.0.compare_exchange(Self::WAITING, Self::NO_ANSWER, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Whether the request has ended, answered or not.
    pub fn is_finished(&self) -> bool {
        self.0.load(Ordering::Acquire) != Self::WAITING
    }

    fn answered(&self) -> Option<u32> {
        match self.0.load(Ordering::Acquire) {
            Self::WAITING | Self::NO_ANSWER => None,
            ms => Some(ms),
        }
    }
}

impl LinkHealth {
    /// Healthy, waiting [`UNMEASURED_SERVICE`] times the gateway's announced service time until
    /// an answer measures it.
    pub fn new(policy: DeadlinePolicy, service_time: Duration) -> Self {
        Self {
            policy,
            consecutive_failures: 0,
            local_until: None,
            current_backoff: policy.backoff,
            service_ewma_ms: service_time.as_secs_f64() * 1e3 * UNMEASURED_SERVICE,
            per_token_ms: policy.per_token.as_secs_f64() * 1e3,
            backed_off: true,
            pending_prefill: Vec::new(),
            generation: None,
        }
    }

    /// The settings in force.
    pub fn policy(&self) -> &DeadlinePolicy {
        &self.policy
    }

    /// Replace the settings (a router bundle's deadlines), keeping what was learned of the
    /// link and the gateway.
    pub fn set_policy(&mut self, policy: DeadlinePolicy) {
        self.policy = policy;
    }

    /// Whether a hard token may be escalated now (false = decide locally).
    pub fn may_escalate(&self, now: Instant) -> bool {
        self.local_until.is_none_or(|t| now >= t)
    }

    /// Deadline for an escalation sent now carrying `tokens` context tokens.
    pub fn deadline(&self, srtt: Duration, tokens: usize) -> Duration {
        self.deadline_behind(srtt, tokens, Duration::ZERO)
    }

    /// Deadline for an escalation that will queue behind `ahead` of this session's own work
    /// at the gateway (what is left of an unfinished prompt pre-sync, margin included:
    /// [`Self::presync_left`]). Still at most the policy's maximum, counted from now: no token
    /// ever waits longer than that.
    pub fn deadline_behind(&self, srtt: Duration, tokens: usize, ahead: Duration) -> Duration {
        self.expected_behind(srtt, tokens, ahead).clamp(self.policy.min, self.policy.max)
    }

    /// The wait [`Self::deadline_behind`] is made from, before the policy's bounds: what a
    /// `Full` resync's prefill is expected to take, compared with the maximum to decide whether
    /// it goes ahead of its hard token (a bounded figure would reach the maximum whenever the
    /// policy's minimum is its maximum, and send every resync ahead).
    pub fn expected_behind(&self, srtt: Duration, tokens: usize, ahead: Duration) -> Duration {
        // Prefill times vary with the gateway's load far more than a one-token step, and a
        // deadline a little short wastes the whole wait: prefill work gets a margin.
        let service = Duration::from_secs_f64(self.service_ewma_ms / 1e3) + ahead;
        DeadlinePolicy::expected_at(self.policy.k, srtt, service, Duration::from_secs_f64(PREFILL_MARGIN * self.per_token_ms / 1e3), tokens)
    }

    /// How long a hard token must expect to wait behind this session's pre-sync of `tokens`
    /// prompt tokens, sent `elapsed` ago and not answered yet: what is left of its expected
    /// prefill time with the margin, and once even that has passed, the policy's maximum.
    ///
    /// An overdue pre-sync says the estimate was wrong (it is learned from an idle warm-up and
    /// earlier answers; a gateway whose LLM shares its cores, or is busy, prefills several
    /// times slower), and the gateway answers this session's next token only after that
    /// prefill, whenever it ends: a shorter deadline cannot get an answer, only a fallback the
    /// wait would have avoided. The maximum still bounds the stall (measured: the demo's
    /// CommonsenseQA prompt, 130 tokens, took 7 s to prefill where 3.2 s were expected, and every
    /// hard token fell back on a deadline under 0.7 s; docs/src/getting-started.md).
    pub fn presync_left(&self, tokens: usize, elapsed: Duration) -> Duration {
        let expected = self.prefill_estimate(tokens).mul_f64(PREFILL_MARGIN);
        if elapsed < expected {
            expected - elapsed
        } else {
            self.policy.max
        }
    }

    /// The expected LLM time for prefilling `tokens` context tokens.
    pub fn prefill_estimate(&self, tokens: usize) -> Duration {
        Duration::from_secs_f64(self.per_token_ms * tokens as f64 / 1e3)
    }

    /// The cloud answered an escalation that sent `tokens_sent` context tokens; `llm_ms` is
    /// the service time it teaches ([`service_sample`]: what the gateway held it, queue
    /// included).
    pub fn success(&mut self, tokens_sent: usize, llm_ms: u32) {
        self.consecutive_failures = 0;
        self.local_until = None;
        self.current_backoff = self.policy.backoff;
        if tokens_sent < LONG_SEND {
            // Too few tokens to measure the cost per token, and the commonest escalation (a
            // delta of a few tokens): it measures the service time, less the prefill its
            // tokens beyond a short send are expected to cost.
            let extra = tokens_sent.saturating_sub(SHORT_SEND) as f64 * self.per_token_ms;
            let sample = (llm_ms as f64 - extra).max(0.0);
            self.service_ewma_ms = if self.backed_off { sample } else { (1.0 - SAMPLE_WEIGHT) * self.service_ewma_ms + SAMPLE_WEIGHT * sample };
            self.backed_off = false;
        } else {
            self.observe_prefill(tokens_sent, llm_ms);
        }
    }

    /// The gateway took `llm_ms` for work that sent `tokens` context tokens (an escalation or
    /// the prompt pre-sync): learn the per-token cost from it. Short sends say too little.
    pub fn observe_prefill(&mut self, tokens: usize, llm_ms: u32) {
        if tokens < LONG_SEND {
            return;
        }
        let sample = (llm_ms as f64 - self.service_ewma_ms).max(0.0) / tokens as f64;
        self.per_token_ms = (1.0 - SAMPLE_WEIGHT) * self.per_token_ms + SAMPLE_WEIGHT * sample;
        if sample > self.per_token_ms {
            // Slower than thought: trust the measurement at once (a deadline that is too short
            // wastes the whole wait, one that is too long only while the gateway is slow).
            self.per_token_ms = sample;
        }
    }

    /// A prefill of `tokens` context tokens was sent; report its service time through the
    /// returned handle. A few unanswered ones are remembered (the answer often comes after
    /// the next session started); beyond that the oldest is forgotten.
    pub fn expect_prefill(&mut self, tokens: usize) -> PrefillReport {
        self.poll_prefill();
        if self.pending_prefill.len() >= MAX_PENDING_PREFILLS {
            self.pending_prefill.remove(0);
        }
        let report = PrefillReport::new();
        self.pending_prefill.push((tokens, report.clone()));
        report
    }

    /// Learn from the expected prefills whose answers came.
    pub fn poll_prefill(&mut self) {
        let mut i = 0;
        while i < self.pending_prefill.len() {
            let report = &self.pending_prefill[i].1;
            match report.answered() {
                Some(ms) => {
                    let (tokens, _) = self.pending_prefill.remove(i);
                    self.observe_prefill(tokens, ms);
                }
                None if report.is_finished() => {
                    self.pending_prefill.remove(i);
                }
                None => i += 1,
            }
        }
    }

    /// The escalation timed out: the service estimate doubles (up to the deadline maximum)
    /// until an answer measures it again. Counts as a failure too.
    pub fn timeout(&mut self, now: Instant) {
        let max_ms = self.policy.max.as_secs_f64() * 1e3;
        self.service_ewma_ms = (self.service_ewma_ms * 2.0).max(self.policy.min.as_secs_f64() * 1e3).min(max_ms);
        self.backed_off = true;
        self.failure(now);
    }

    /// The escalation fell back (timeout, transport, error): after `failures_to_degrade` in a
    /// row, or any while probing, start (or extend) a local-only period.
    pub fn failure(&mut self, now: Instant) {
        self.consecutive_failures += 1;
        let probing = self.local_until.is_some();
        if probing || self.consecutive_failures >= self.policy.failures_to_degrade {
            if probing {
                self.current_backoff = (self.current_backoff * 2).min(self.policy.max_backoff);
            }
            self.local_until = Some(now + self.current_backoff);
        }
    }

    /// The gateway answered `Busy` and asked for no escalation for `retry_after`: stay
    /// local-only that long (at most the policy's `max_backoff`; a gateway's hint cannot park a
    /// device longer), so a loaded gateway sheds its fleet's load at once instead of after
    /// `failures_to_degrade` refusals. Not a failure of the link: no back-off growth.
    pub fn busy(&mut self, now: Instant, retry_after: Duration) {
        let pause = retry_after.min(self.policy.max_backoff);
        if !pause.is_zero() {
            self.local_until = Some(self.local_until.map_or(now + pause, |t| t.max(now + pause)));
        }
    }

    /// The link is up on connection `generation`. A new connection starts afresh: its
    /// handshake just proved the gateway reachable, so any local-only period ends. Returns
    /// whether the connection is new to this health.
    pub fn on_connection(&mut self, generation: u64) -> bool {
        if self.generation == Some(generation) {
            return false;
        }
        self.generation = Some(generation);
        self.consecutive_failures = 0;
        self.local_until = None;
        self.current_backoff = self.policy.backoff;
        true
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
        assert_eq!(p.deadline(Duration::from_millis(100), Duration::from_millis(50), 0), Duration::from_millis(350));
        assert_eq!(p.deadline(Duration::from_millis(100), Duration::from_millis(50), 4), Duration::from_millis(450));
        assert_eq!(p.deadline(Duration::from_secs(10), Duration::ZERO, 1), p.max);
    }

    #[test]
    fn busy_parks_the_device_for_the_gateways_hint_at_most_the_longest_backoff() {
        let p = DeadlinePolicy::default();
        let mut h = LinkHealth::new(p, Duration::from_millis(10));
        let t0 = Instant::now();
        h.busy(t0, Duration::from_millis(300));
        assert!(!h.may_escalate(t0 + Duration::from_millis(299)), "one Busy is enough to back off");
        assert!(h.may_escalate(t0 + Duration::from_millis(300)));
        h.busy(t0, Duration::from_secs(3600));
        assert!(h.may_escalate(t0 + p.max_backoff), "a hint cannot park a device beyond max_backoff");
        h.busy(t0, Duration::ZERO);
        assert!(h.may_escalate(t0 + p.max_backoff));
    }

    #[test]
    fn a_blackout_costs_at_most_the_longest_backoff_after_it_ends() {
        let p = DeadlinePolicy::default();
        let mut h = LinkHealth::new(p, Duration::from_millis(10));
        let mut now = Instant::now();
        let end = now + Duration::from_secs(30);
        // Every escalation tried during the blackout times out after its deadline.
        while now < end {
            if h.may_escalate(now) {
                now += h.deadline(Duration::from_millis(100), 1);
                h.timeout(now);
            } else {
                now += Duration::from_millis(10);
            }
        }
        let mut first_try = now;
        while !h.may_escalate(first_try) {
            first_try += Duration::from_millis(10);
        }
        assert!(first_try - end <= p.max_backoff, "the first escalation after the blackout came {:?} after it", first_try - end);
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
        h.success(1, 12);
        assert!(!h.degraded());
        assert!(h.may_escalate(t1));
    }

    /// Milliseconds, rounded: the estimates are floats.
    fn ms(d: Duration) -> u128 {
        (d.as_secs_f64() * 1e3).round() as u128
    }

    #[test]
    fn service_time_is_learned_from_answers_of_a_few_tokens_and_per_token_cost_from_long_ones() {
        let p = DeadlinePolicy { k: 0.0, min: Duration::ZERO, max: Duration::from_secs(60), ..DeadlinePolicy::default() };
        let mut h = LinkHealth::new(p, Duration::from_millis(100));
        h.success(1, 100);
        // Long sends do not pollute the one-token service time.
        h.success(100, 2_100);
        assert_eq!(ms(h.deadline(Duration::ZERO, 1)), 136, "100 ms service + 1.5 x 24 ms per token");
        // 2,000 ms for 100 tokens beyond the 100 ms service: 20 ms per token, below the prior 25.
        let learned = h.prefill_estimate(100).as_secs_f64() * 1e3;
        assert!(learned < 2_500.0 && learned > 2_000.0, "{learned}");
        // A slower measurement is trusted at once.
        h.observe_prefill(100, 4_100);
        assert_eq!(ms(h.prefill_estimate(100)), 4_000);
        // Too few tokens to say anything.
        h.observe_prefill(3, 10_000);
        assert_eq!(ms(h.prefill_estimate(100)), 4_000);
        // Short answers move the service time gradually.
        h.success(1, 200);
        assert_eq!(ms(h.deadline(Duration::ZERO, 0)), 120);
        // So do a few tokens' deltas, less what their tokens beyond two cost (3 x 40 ms).
        h.success(5, 320);
        assert_eq!(ms(h.deadline(Duration::ZERO, 0)), 136, "0.8 x 120 + 0.2 x (320 - 120)");
    }

    #[test]
    fn an_answer_teaches_the_time_the_gateway_held_it_queue_included_at_least_the_llms() {
        let ms = Duration::from_millis;
        assert_eq!(service_sample(40, ms(700), ms(100)), 600, "queued behind other work: the wait less the round trip");
        assert_eq!(service_sample(40, ms(120), ms(100)), 40, "never below what the LLM reported");
        assert_eq!(service_sample(40, ms(50), ms(100)), 40, "an RTT estimate above the wait teaches the LLM's time");
        // After a timeout's back-off the next answer replaces the estimate: with the wait, not
        // the LLM's share of it, so the next deadline covers the queue that caused the miss.
        let p = DeadlinePolicy { k: 0.0, min: ms(30), max: ms(3000), ..DeadlinePolicy::default() };
        let mut h = LinkHealth::new(p, ms(40));
        h.timeout(Instant::now());
        h.success(1, service_sample(40, ms(700), ms(100)));
        assert_eq!(h.deadline(Duration::ZERO, 0), ms(600));
    }

    #[test]
    fn a_timeout_doubles_the_service_estimate_until_the_next_answer() {
        let p = DeadlinePolicy { k: 0.0, min: Duration::from_millis(30), max: Duration::from_millis(1000), ..DeadlinePolicy::default() };
        let mut h = LinkHealth::new(p, Duration::ZERO);
        let t0 = Instant::now();
        assert_eq!(ms(h.deadline(Duration::ZERO, 0)), ms(p.min), "a fresh gateway announces no service time");
        h.timeout(t0);
        assert_eq!(ms(h.deadline(Duration::ZERO, 0)), 30);
        h.timeout(t0);
        assert_eq!(ms(h.deadline(Duration::ZERO, 0)), 60);
        for _ in 0..10 {
            h.timeout(t0);
        }
        assert_eq!(ms(h.deadline(Duration::ZERO, 0)), ms(p.max), "never past the maximum");
        h.success(1, 90);
        assert_eq!(ms(h.deadline(Duration::ZERO, 0)), 90, "the next answer replaces the backed-off estimate");
    }

    #[test]
    fn a_prefill_answered_later_is_learned_when_polled() {
        let p = DeadlinePolicy::default();
        let mut h = LinkHealth::new(p, Duration::ZERO);
        let report = h.expect_prefill(100);
        h.poll_prefill();
        assert_eq!(ms(h.prefill_estimate(100)), 2_500, "the prior until it answers");
        let carried = h.clone();
        report.report(4_000);
        let mut h = carried;
        h.poll_prefill();
        assert_eq!(ms(h.prefill_estimate(100)), 4_000, "learned in the health carried to the next session");
        // The next session's pre-sync is sent before the previous one answered.
        let first = h.expect_prefill(100);
        let second = h.expect_prefill(100);
        first.report(5_000);
        second.report(6_000);
        h.poll_prefill();
        assert_eq!(ms(h.prefill_estimate(100)), 6_000, "both learned");
    }

    #[test]
    fn a_new_connection_ends_local_only_but_the_same_one_does_not() {
        let p = DeadlinePolicy::default();
        let mut h = LinkHealth::new(p, Duration::from_millis(10));
        let t0 = Instant::now();
        assert!(h.on_connection(1));
        for _ in 0..p.failures_to_degrade {
            h.failure(t0);
        }
        assert!(!h.may_escalate(t0));
        assert!(!h.on_connection(1), "the same connection changes nothing");
        assert!(!h.may_escalate(t0));
        assert!(h.on_connection(2));
        assert!(h.may_escalate(t0), "a reconnect proved the gateway reachable");
    }

    #[test]
    fn a_prefill_that_ends_without_an_answer_is_forgotten() {
        let mut h = LinkHealth::new(DeadlinePolicy::default(), Duration::ZERO);
        let report = h.expect_prefill(100);
        assert!(!report.is_finished());
        report.finish();
        report.report(9_000);
        assert!(report.is_finished());
        h.poll_prefill();
        assert_eq!(ms(h.prefill_estimate(100)), 2_500, "nothing learned from an unanswered prefill");
    }

    #[test]
    fn until_an_answer_measures_it_the_device_waits_three_times_the_announced_service_then_the_answer_replaces_it() {
        let p = DeadlinePolicy { k: 0.0, min: Duration::ZERO, ..DeadlinePolicy::default() };
        let mut h = LinkHealth::new(p, Duration::from_millis(100));
        assert_eq!(ms(h.deadline(Duration::ZERO, 0)), 300, "the gateway's idle figure is no measurement of this link");
        h.success(1, 240);
        assert_eq!(ms(h.deadline(Duration::ZERO, 0)), 240, "the first answer replaces it");
        h.success(1, 140);
        assert_eq!(ms(h.deadline(Duration::ZERO, 0)), 220, "later ones are averaged in");
    }

    #[test]
    fn work_queued_ahead_lengthens_the_deadline_but_never_past_the_maximum() {
        let p = DeadlinePolicy { k: 0.0, min: Duration::ZERO, max: Duration::from_millis(3000), ..DeadlinePolicy::default() };
        let mut h = LinkHealth::new(p, Duration::from_millis(100));
        h.success(1, 100);
        assert_eq!(ms(h.deadline_behind(Duration::ZERO, 0, Duration::from_millis(1000))), 1100);
        assert_eq!(ms(h.deadline_behind(Duration::ZERO, 0, Duration::from_secs(10))), ms(p.max));
    }

    #[test]
    fn a_presync_in_time_leaves_its_expected_time_with_the_margin_and_an_overdue_one_the_maximum() {
        let p = DeadlinePolicy { max: Duration::from_millis(3000), per_token: Duration::from_millis(10), ..DeadlinePolicy::default() };
        let h = LinkHealth::new(p, Duration::ZERO);
        // 100 tokens x 10 ms x 1.5 = 1.5 s expected.
        assert_eq!(ms(h.presync_left(100, Duration::ZERO)), 1500);
        assert_eq!(ms(h.presync_left(100, Duration::from_millis(1000))), 500);
        assert_eq!(ms(h.presync_left(100, Duration::from_millis(1500))), 3000, "overdue: its end is unknown");
        assert_eq!(ms(h.presync_left(100, Duration::from_secs(60))), 3000);
    }
}
