//! How long a draft the decode loop sends with the next escalation (protocol v5), as a pure
//! rule: inputs and measurements passed in, no clock, no I/O.
//!
//! A draft is the SLM's token at the hard position and its continuation; the LLM checks all of
//! it in one pass and the answer commits every accepted token plus one of its own. A longer
//! draft gains more when the SLM agrees with the LLM, but its tokens are decoded before the
//! escalation is sent, so each costs one SLM step of latency, and tokens past the first
//! rejection are wasted. So:
//!
//! - **acceptance**: a session starts at 1, the SLM's own token alone, which costs no SLM step
//!   (its check also brings the LLM's next token); the target doubles after a fully accepted
//!   draft and drops to one past the accepted prefix after a rejection (at least 1). Starting
//!   long paid for drafts before anything was known: on CommonsenseQA, where the LLM accepted
//!   1 of 35 draft tokens, the 3 extra SLM steps of each session's first draft made verifying
//!   slower than waiting (docs/src/benchmarks/draft-verification.md, "Tried and not kept");
//!   doubling, as TCP's slow start
//!   grows its window, still reaches 4 after two accepted drafts where the SLM agrees;
//! - **time**: drafting the extra tokens may take at most half the time an answer takes
//!   (`(len - 1) * step <= max(wait, 10 ms) / 2`, both smoothed), so a draft never costs much
//!   more latency than it can save;
//! - **link**: no draft while the link is degraded (the last escalation fell back), and none
//!   beyond what the cloud takes ([`super::Cloud::draft_limit`]: 0 for an older gateway or with
//!   drafts off).

/// The longest draft the device sends, however well the SLM does.
pub const MAX_DRAFT: usize = 8;
/// The length a session starts at, before it has measured anything: the SLM's own token.
const START_LEN: usize = 1;
/// Answer time below which drafting is judged against this instead: drafting that takes a few
/// ms is never worth skipping (and a loopback gateway's answer time says little).
const MIN_BUDGET_MS: f64 = 10.0;
/// Weight of a new sample in the smoothed times.
const SAMPLE_WEIGHT: f64 = 0.25;

/// Whether escalations carry drafts (`--draft`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DraftMode {
    /// One token per escalation, as before protocol v5.
    #[default]
    Off,
    /// Drafts whose length follows acceptance and the answer time ([`DraftControl`]).
    Adaptive,
}

/// The draft-length rule's state for one session (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DraftControl {
    target: usize,
    /// Smoothed ms from asking to the answer; `None` before the first answer.
    wait_ms: Option<f64>,
    /// Smoothed ms of one SLM step while drafting; `None` before the first.
    step_ms: Option<f64>,
}

impl Default for DraftControl {
    fn default() -> Self {
        Self { target: START_LEN, wait_ms: None, step_ms: None }
    }
}

impl DraftControl {
    /// A session's controller, at the start length.
    pub fn new() -> Self {
        Self::default()
    }

    /// The draft length for the next escalation: 0 (no draft) when the cloud takes none or the
    /// link is `degraded`, else the target capped by the time rule and by `limit`.
    pub fn next_len(&self, limit: usize, degraded: bool) -> usize {
        if degraded || limit == 0 {
            return 0;
        }
        let by_time = match (self.wait_ms, self.step_ms) {
            (Some(wait), Some(step)) if step > 0.0 => 1 + (wait.max(MIN_BUDGET_MS) / 2.0 / step).floor().min(MAX_DRAFT as f64) as usize,
            _ => MAX_DRAFT,
        };
        self.target.min(by_time).min(limit).min(MAX_DRAFT)
    }

    /// A draft of `sent` tokens was answered with `accepted` of them taken, after `wait_ms`.
    pub fn answered(&mut self, sent: usize, accepted: usize, wait_ms: f64) {
        self.wait_ms = Some(smooth(self.wait_ms, wait_ms));
        if sent == 0 {
            return;
        }
        self.target = if accepted >= sent { (2 * sent).max(self.target).min(MAX_DRAFT) } else { (accepted + 1).min(self.target.saturating_sub(1)).max(1) };
    }

    /// A plain escalation (no draft) was answered after `wait_ms`: the time rule learns it.
    pub fn waited(&mut self, wait_ms: f64) {
        self.wait_ms = Some(smooth(self.wait_ms, wait_ms));
    }

    /// One SLM step while drafting took `ms`.
    pub fn stepped(&mut self, ms: f64) {
        self.step_ms = Some(smooth(self.step_ms, ms));
    }
}

fn smooth(old: Option<f64>, sample: f64) -> f64 {
    let sample = if sample.is_finite() { sample.max(0.0) } else { 0.0 };
    match old {
        Some(o) => (1.0 - SAMPLE_WEIGHT) * o + SAMPLE_WEIGHT * sample,
        None => sample,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_starts_with_the_slms_own_token_alone_and_never_past_the_limit() {
        let mut c = DraftControl::new();
        assert_eq!(c.next_len(MAX_DRAFT, false), 1, "no SLM step is spent before anything is measured");
        c.answered(1, 1, 100.0);
        c.answered(2, 2, 100.0);
        assert_eq!(c.next_len(MAX_DRAFT, false), 4);
        assert_eq!(c.next_len(2, false), 2, "never past what the cloud takes");
    }

    #[test]
    fn a_task_whose_drafts_are_rejected_never_drafts_past_the_slms_own_token() {
        let mut c = DraftControl::new();
        for _ in 0..10 {
            let n = c.next_len(MAX_DRAFT, false);
            assert_eq!(n, 1);
            c.answered(n, 0, 100.0);
        }
    }

    #[test]
    fn no_draft_when_the_link_is_degraded_or_the_cloud_takes_none() {
        let c = DraftControl::new();
        assert_eq!(c.next_len(MAX_DRAFT, true), 0);
        assert_eq!(c.next_len(0, false), 0);
    }

    #[test]
    fn drafts_grow_while_fully_accepted_up_to_the_maximum() {
        let mut c = DraftControl::new();
        for _ in 0..20 {
            let n = c.next_len(MAX_DRAFT, false);
            c.answered(n, n, 100.0);
        }
        c.stepped(1.0);
        assert_eq!(c.next_len(MAX_DRAFT, false), MAX_DRAFT);
    }

    #[test]
    fn a_rejection_shortens_the_draft_to_just_past_the_accepted_prefix() {
        let mut c = DraftControl::new();
        c.answered(1, 1, 100.0);
        c.answered(2, 2, 100.0);
        c.answered(4, 1, 100.0);
        assert_eq!(c.next_len(MAX_DRAFT, false), 2);
        c.answered(2, 0, 100.0);
        assert_eq!(c.next_len(MAX_DRAFT, false), 1, "never below the SLM's own token");
        c.answered(1, 0, 100.0);
        assert_eq!(c.next_len(MAX_DRAFT, false), 1);
        c.answered(1, 1, 100.0);
        assert_eq!(c.next_len(MAX_DRAFT, false), 2, "and grows back once accepted");
    }

    #[test]
    fn drafting_may_take_at_most_half_the_answer_time() {
        let mut c = DraftControl::new();
        for _ in 0..10 {
            c.answered(8, 8, 40.0);
        }
        c.stepped(10.0);
        // 40 ms answers, 10 ms steps: 2 extra tokens (20 ms) at most.
        assert_eq!(c.next_len(MAX_DRAFT, false), 3);
        let mut slow_slm = c;
        slow_slm.stepped(1000.0);
        slow_slm.stepped(1000.0);
        assert_eq!(slow_slm.next_len(MAX_DRAFT, false), 1, "a slow SLM sends only its own token");
    }

    #[test]
    fn odd_measurements_do_not_break_the_rule() {
        let mut c = DraftControl::new();
        c.answered(3, 3, f64::NAN);
        c.stepped(f64::INFINITY);
        c.stepped(-5.0);
        let n = c.next_len(MAX_DRAFT, false);
        assert!((1..=MAX_DRAFT).contains(&n));
    }
}
