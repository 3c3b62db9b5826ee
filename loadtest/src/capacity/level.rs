//! The service level a fleet must get for the server to count as serving it, and what one
//! probe (one fleet run) measured against it. Pure: the fleet report goes in, a verdict
//! with its reason comes out.
//!
//! The level is the user's, not the server's: **at least `served` of the escalations answered
//! by the LLM before their deadline** (a hard token that falls back is one the router asked
//! the LLM for and did not get: what routing buys is lost there), **and the devices'
//! inter-token p99 within `itl_p99_ms`** (a device waits for its escalations; a server that
//! answers everything but slowly stalls the text). A run with a stall past the deadline's
//! maximum, or any correctness violation, never meets it; nor does one with too few
//! escalations to measure a share (raise the probe's duration or lower the think time).

use serde::Serialize;

use crate::fleet::report::FleetReport;

/// What a fleet must get (`--served-at-least`, `--itl-p99-ms`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ServiceLevel {
    /// Least share of escalations answered by the LLM in time.
    pub served: f64,
    /// Largest inter-token p99 of the devices, ms.
    pub itl_p99_ms: f64,
    /// Fewest escalations a probe must see for its served share to mean anything (at 40, one
    /// escalation is 2.5 %).
    pub min_escalations: u64,
}

/// One fleet run, as the capacity search sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Probe {
    /// Devices in the fleet.
    pub devices: usize,
    /// Escalations, and those the LLM answered in time.
    pub escalated: u64,
    pub answered: u64,
    /// answered / escalated (1 when nothing was escalated).
    pub served: f64,
    /// The worst group's inter-token p99, ms.
    pub itl_p99_ms: f64,
    /// Answered escalations' round trip p50, ms.
    pub escalation_rtt_p50_ms: f64,
    /// Tokens waiting past the deadline's maximum.
    pub stalls: u64,
    /// Correctness violations (must be 0).
    pub violations: u64,
    /// Generated tokens, and those the LLM chose or accepted.
    pub tokens: u64,
    pub llm_checked_tokens: u64,
    /// Draft tokens sent and accepted; escalations that carried one.
    pub drafts: u64,
    pub draft_tokens_sent: u64,
    pub draft_tokens_accepted: u64,
    /// Escalations the gateway received per second of load.
    pub gateway_escalations_per_s: f64,
    /// Tokens/s per device against the local-only devices of the same run.
    pub vs_local_only: Option<f64>,
    /// How busy the whole machine was.
    pub host_busy_share: Option<f64>,
    /// Whether the level held, and if not, why.
    pub held: bool,
    pub why_not: Option<String>,
}

impl Probe {
    /// The probe of a fleet report (its relayed groups together; the local-only baseline is
    /// not part of the fleet), judged against `level`.
    pub fn of(report: &FleetReport, level: &ServiceLevel) -> Self {
        let groups = &report.profiles;
        let sum = |f: fn(&crate::fleet::report::GroupReport) -> u64| groups.iter().map(f).sum::<u64>();
        let (escalated, answered) = (sum(|g| g.escalated), sum(|g| g.cloud_tokens));
        let itl_p99_ms = groups.iter().map(|g| g.itl_ms.p99).fold(0.0, f64::max);
        let mut p = Probe {
            devices: report.devices,
            escalated,
            answered,
            served: if escalated == 0 { 1.0 } else { answered as f64 / escalated as f64 },
            itl_p99_ms,
            escalation_rtt_p50_ms: groups.iter().map(|g| g.escalation_rtt_ms.p50).fold(0.0, f64::max),
            stalls: sum(|g| g.stalls),
            violations: report.correctness.violations,
            tokens: sum(|g| g.tokens),
            llm_checked_tokens: sum(|g| g.llm_checked_tokens),
            drafts: sum(|g| g.drafts),
            draft_tokens_sent: sum(|g| g.draft_tokens_sent),
            draft_tokens_accepted: sum(|g| g.draft_tokens_accepted),
            gateway_escalations_per_s: report.gateway.escalations_per_s,
            vs_local_only: groups.first().and_then(|g| g.vs_local_only),
            host_busy_share: report.host_busy_share,
            held: false,
            why_not: None,
        };
        p.why_not = p.shortfall(level);
        p.held = p.why_not.is_none();
        p
    }

    /// What keeps this probe from the level, if anything.
    fn shortfall(&self, level: &ServiceLevel) -> Option<String> {
        let mut why = Vec::new();
        if self.violations > 0 {
            why.push(format!("{} correctness violations", self.violations));
        }
        if self.escalated < level.min_escalations.max(1) {
            why.push(format!("{} escalations: too few to judge (at least {})", self.escalated, level.min_escalations.max(1)));
        }
        if self.served < level.served {
            why.push(format!("served {:.3} < {}", self.served, level.served));
        }
        if self.itl_p99_ms > level.itl_p99_ms {
            why.push(format!("ITL p99 {:.0} ms > {} ms", self.itl_p99_ms, level.itl_p99_ms));
        }
        if self.stalls > 0 {
            why.push(format!("{} stalls past the deadline", self.stalls));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// Draft tokens the LLM accepted per answered draft (0 without drafts).
    pub fn accepted_per_draft(&self) -> f64 {
        if self.drafts == 0 {
            0.0
        } else {
            self.draft_tokens_accepted as f64 / self.drafts as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(served: f64, itl: f64, stalls: u64, violations: u64) -> Probe {
        let escalated = 1000;
        Probe {
            devices: 4,
            escalated,
            answered: (served * escalated as f64) as u64,
            served,
            itl_p99_ms: itl,
            escalation_rtt_p50_ms: 100.0,
            stalls,
            violations,
            tokens: 10_000,
            llm_checked_tokens: 1000,
            drafts: 0,
            draft_tokens_sent: 0,
            draft_tokens_accepted: 0,
            gateway_escalations_per_s: 10.0,
            vs_local_only: None,
            host_busy_share: None,
            held: false,
            why_not: None,
        }
    }

    const LEVEL: ServiceLevel = ServiceLevel { served: 0.99, itl_p99_ms: 1000.0, min_escalations: 40 };

    #[test]
    fn the_level_holds_only_when_every_part_of_it_does() {
        assert_eq!(probe(0.995, 900.0, 0, 0).shortfall(&LEVEL), None);
        let cases = [(probe(0.98, 900.0, 0, 0), "served 0.980 < 0.99"), (probe(1.0, 1200.0, 0, 0), "ITL p99 1200 ms > 1000 ms"), (probe(1.0, 900.0, 2, 0), "2 stalls"), (probe(1.0, 900.0, 0, 1), "1 correctness violations")];
        for (p, want) in cases {
            let why = p.shortfall(&LEVEL).expect("not held");
            assert!(why.contains(want), "{why} should say {want}");
        }
    }

    #[test]
    fn a_run_with_too_few_escalations_to_measure_a_share_does_not_hold() {
        let mut p = probe(1.0, 100.0, 0, 0);
        p.escalated = 0;
        assert!(p.shortfall(&LEVEL).is_some_and(|w| w.contains("0 escalations: too few")));
        p.escalated = 39;
        assert!(p.shortfall(&LEVEL).is_some_and(|w| w.contains("too few to judge")), "one escalation would move the share by 2.5 %");
    }
}
