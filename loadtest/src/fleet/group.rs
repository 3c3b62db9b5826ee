//! What the devices of one group (one network profile, or the local-only baseline) measured
//! together: latency histograms, counters, per-interval timelines, and fallbacks by the RTT
//! the device saw. Every device task of the group adds into the same atomics; the report reads
//! them once the run is over.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use common::exchange::FallbackReason;
use edge_node::decode::CloudAnswer;
use serde::Serialize;

use super::hist::{Histogram, Timeline};

/// Upper bounds of the RTT buckets the fallback rate is broken down by, ms (the last is open).
pub const RTT_BUCKETS_MS: [f64; 8] = [10.0, 50.0, 100.0, 200.0, 400.0, 800.0, 1600.0, f64::INFINITY];
/// Outcomes counted per RTT bucket: cloud, then each fallback reason, then "link down" (no RTT).
pub const OUTCOMES: [&str; 6] = ["cloud", "timeout", "busy", "degraded", "error", "link_down"];
/// Width of the timelines' bins, ms.
pub const BIN_MS: u64 = 250;

/// A counter.
#[derive(Debug, Default)]
pub struct Count(AtomicU64);

impl Count {
    /// Add `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// The value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// One group's measurements.
#[derive(Debug)]
pub struct GroupStats {
    /// Profile name (or `local-only`).
    pub name: String,
    /// Time to first token of each session (from the start of the session), ms.
    pub ttft: Histogram,
    /// Time between consecutive tokens of a session (ITL), ms.
    pub itl: Histogram,
    /// Escalation round trip (asked → answered by the cloud), ms.
    pub escalation_cloud: Histogram,
    /// Time an escalation held the loop whatever its outcome (fallbacks included), ms.
    pub escalation_any: Histogram,
    /// `Ping` round trips on the same links (the transport baseline), ms.
    pub ping: Histogram,
    /// After a blackout ends: time until each device that escalated got a cloud token again, ms.
    pub resume: Histogram,
    /// Tokens per second of each session (generated tokens / session wall time).
    pub session_tokens_per_s: Mutex<Vec<f32>>,
    /// The same session's tokens/s had it run with no cloud, from the trace (its recorded times).
    pub session_nominal_tokens_per_s: Mutex<Vec<f32>>,
    pub devices: Count,
    pub connected: Count,
    pub connect_failures: Count,
    pub sessions: Count,
    pub sessions_cancelled: Count,
    pub tokens: Count,
    pub escalated: Count,
    pub cloud: Count,
    pub fallback_timeout: Count,
    pub fallback_busy: Count,
    pub fallback_link_down: Count,
    pub fallback_degraded: Count,
    pub fallback_error: Count,
    pub full_syncs: Count,
    /// Escalations that carried a draft, the draft tokens they sent and those the LLM took.
    pub drafts: Count,
    pub draft_tokens_sent: Count,
    pub draft_tokens_accepted: Count,
    pub context_missing: Count,
    pub reconnects: Count,
    /// Tokens that waited longer than the deadline's maximum plus their own step (and slack).
    pub stalls: Count,
    /// Devices that escalated right after a blackout but got no cloud token before the next.
    pub not_resumed: Count,
    /// Devices whose first escalation 2 s or more after a blackout's end got a cloud token
    /// (the link was back by then, whatever the device's own gaps between hard tokens).
    pub back_by_2s: Count,
    /// Same, but that escalation fell back.
    pub not_back_by_2s: Count,
    pub pings_lost: Count,
    /// Per RTT bucket × outcome.
    by_rtt: Vec<[Count; 6]>,
    /// Committed tokens / escalations / cloud tokens / fallbacks per bin since the run started.
    pub tokens_over_time: Timeline,
    pub escalations_over_time: Timeline,
    pub cloud_over_time: Timeline,
    pub fallbacks_over_time: Timeline,
}

impl GroupStats {
    /// An empty group; its timelines span `span_ms`.
    pub fn new(name: impl Into<String>, span_ms: u64) -> Self {
        Self {
            name: name.into(),
            ttft: Histogram::default(),
            itl: Histogram::default(),
            escalation_cloud: Histogram::default(),
            escalation_any: Histogram::default(),
            ping: Histogram::default(),
            resume: Histogram::default(),
            session_tokens_per_s: Mutex::new(Vec::new()),
            session_nominal_tokens_per_s: Mutex::new(Vec::new()),
            devices: Count::default(),
            connected: Count::default(),
            connect_failures: Count::default(),
            sessions: Count::default(),
            sessions_cancelled: Count::default(),
            tokens: Count::default(),
            escalated: Count::default(),
            cloud: Count::default(),
            fallback_timeout: Count::default(),
            fallback_busy: Count::default(),
            fallback_link_down: Count::default(),
            fallback_degraded: Count::default(),
            fallback_error: Count::default(),
            full_syncs: Count::default(),
            drafts: Count::default(),
            draft_tokens_sent: Count::default(),
            draft_tokens_accepted: Count::default(),
            context_missing: Count::default(),
            reconnects: Count::default(),
            stalls: Count::default(),
            not_resumed: Count::default(),
            back_by_2s: Count::default(),
            not_back_by_2s: Count::default(),
            pings_lost: Count::default(),
            by_rtt: (0..RTT_BUCKETS_MS.len()).map(|_| Default::default()).collect(),
            tokens_over_time: Timeline::new(span_ms, BIN_MS),
            escalations_over_time: Timeline::new(span_ms, BIN_MS),
            cloud_over_time: Timeline::new(span_ms, BIN_MS),
            fallbacks_over_time: Timeline::new(span_ms, BIN_MS),
        }
    }

    /// Count one escalation's outcome at `at_ms` into the run, with the RTT its device saw.
    pub fn escalation(&self, answer: CloudAnswer, waited_ms: f64, rtt_ms: Option<f64>, at_ms: u64) {
        self.escalated.add(1);
        self.escalations_over_time.add(at_ms, 1);
        self.escalation_any.record(waited_ms);
        let outcome = match answer {
            CloudAnswer::Token(_) => {
                self.cloud.add(1);
                self.cloud_over_time.add(at_ms, 1);
                self.escalation_cloud.record(waited_ms);
                0
            }
            CloudAnswer::Fallback(reason) => {
                self.fallbacks_over_time.add(at_ms, 1);
                match reason {
                    FallbackReason::Timeout => {
                        self.fallback_timeout.add(1);
                        1
                    }
                    FallbackReason::Busy => {
                        self.fallback_busy.add(1);
                        2
                    }
                    FallbackReason::Degraded => {
                        self.fallback_degraded.add(1);
                        3
                    }
                    FallbackReason::GatewayError | FallbackReason::Transport => {
                        self.fallback_error.add(1);
                        4
                    }
                    FallbackReason::LinkDown => {
                        self.fallback_link_down.add(1);
                        5
                    }
                }
            }
        };
        let bucket = match rtt_ms {
            Some(r) => RTT_BUCKETS_MS.iter().position(|&b| r <= b).unwrap_or(RTT_BUCKETS_MS.len() - 1),
            None => RTT_BUCKETS_MS.len() - 1,
        };
        self.by_rtt[bucket][outcome].add(1);
    }

    /// Count a draft of `sent` tokens of which the LLM took `accepted` (nothing for none).
    pub fn drafted(&self, sent: usize, accepted: usize) {
        if sent > 0 {
            self.drafts.add(1);
            self.draft_tokens_sent.add(sent as u64);
            self.draft_tokens_accepted.add(accepted as u64);
        }
    }

    /// Fallbacks (all reasons).
    pub fn fallbacks(&self) -> u64 {
        self.fallback_timeout.get() + self.fallback_busy.get() + self.fallback_link_down.get() + self.fallback_degraded.get() + self.fallback_error.get()
    }

    /// Escalations per RTT bucket and outcome (`RTT_BUCKETS_MS` × `OUTCOMES`), every bucket.
    pub fn by_rtt(&self) -> Vec<RttRow> {
        let mut lower = 0.0;
        self.by_rtt
            .iter()
            .zip(RTT_BUCKETS_MS)
            .map(|(counts, upper)| {
                let c: Vec<u64> = counts.iter().map(Count::get).collect();
                let row = RttRow { rtt_from_ms: lower, rtt_to_ms: if upper.is_finite() { Some(upper) } else { None }, escalations: c.iter().sum(), by_outcome: OUTCOMES.iter().map(|s| s.to_string()).zip(c).collect() };
                lower = upper;
                row
            })
            .collect()
    }
}

/// Escalations whose device saw an RTT in one bucket, by outcome.
#[derive(Debug, Clone, Serialize)]
pub struct RttRow {
    /// Bucket bounds, ms (`to` absent: open).
    pub rtt_from_ms: f64,
    pub rtt_to_ms: Option<f64>,
    /// Escalations in the bucket.
    pub escalations: u64,
    /// Per outcome (`cloud`, then fallback reasons), in [`OUTCOMES`] order.
    #[serde(serialize_with = "as_map")]
    pub by_outcome: Vec<(String, u64)>,
}

/// Pairs as a JSON object, in order.
fn as_map<S: serde::Serializer>(pairs: &[(String, u64)], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(pairs.len()))?;
    for (k, v) in pairs {
        m.serialize_entry(k, v)?;
    }
    m.end()
}

/// Correctness counts over the whole fleet, and the first violations found.
#[derive(Debug, Default)]
pub struct Checks {
    pub sessions_checked: Count,
    pub tokens_checked: Count,
    pub cloud_tokens_checked: Count,
    pub contexts_checked: Count,
    pub fallbacks_accounted: Count,
    pub violations: Count,
    /// The first few, for the report.
    pub samples: Mutex<Vec<super::check::Violation>>,
}

/// Violations quoted in the report at most.
pub const VIOLATION_SAMPLES: usize = 20;

impl Checks {
    /// Add one session's check.
    pub fn add(&self, device: usize, session: &str, c: &super::check::SessionCheck) {
        self.sessions_checked.add(1);
        self.tokens_checked.add(c.tokens_checked);
        self.cloud_tokens_checked.add(c.cloud_tokens_checked);
        self.contexts_checked.add(c.contexts_checked);
        self.fallbacks_accounted.add(c.fallbacks_accounted);
        if c.violations.is_empty() {
            return;
        }
        self.violations.add(c.violations.len() as u64);
        if let Ok(mut s) = self.samples.lock() {
            for (position, what) in &c.violations {
                if s.len() < VIOLATION_SAMPLES {
                    tracing::error!(device, session, ?position, "{what}");
                    s.push(super::check::Violation { device, session: session.to_string(), position: *position, what: what.clone() });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_land_in_their_rtt_bucket_and_reason() {
        let g = GroupStats::new("4g", 10_000);
        g.escalation(CloudAnswer::Token(1), 120.0, Some(100.0), 0);
        g.escalation(CloudAnswer::Fallback(FallbackReason::Timeout), 900.0, Some(130.0), 0);
        g.escalation(CloudAnswer::Fallback(FallbackReason::LinkDown), 0.0, None, 0);
        let rows = g.by_rtt();
        assert_eq!(rows[2].by_outcome[0], ("cloud".into(), 1));
        assert_eq!(rows[3].by_outcome[1], ("timeout".into(), 1));
        assert_eq!(rows.last().map(|r| r.by_outcome[5].1), Some(1));
        assert_eq!((g.escalated.get(), g.cloud.get(), g.fallbacks()), (3, 1, 2));
        assert_eq!(g.escalation_cloud.count(), 1);
    }
}
