//! Counters and latencies of one decoded sequence, as `--json` reports them, and why it ended
//! ([`FinishReason`]): the facts of a finished output, which the decode loop fills in.

use serde::Serialize;

use common::exchange::FallbackReason;
use common::stats::percentile_sorted;

use crate::routing::rate::RateControl;

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A stop token was produced.
    Stop,
    /// `max_new_tokens` was reached.
    Length,
    /// The context is full.
    ContextFull,
    /// The caller asked to stop.
    Cancelled,
}

/// What the router and the cloud did with a sequence's tokens: the figures every report of a
/// routed generation carries (`generate --json`, the server's usage, the evaluation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RoutingCounts {
    /// Tokens the router sent to the cloud.
    pub escalated: usize,
    /// Of those, answered by the cloud in time.
    pub cloud_tokens: usize,
    /// Escalations that took the SLM's token instead, by reason below.
    pub fallbacks: usize,
    pub fallback_timeout: usize,
    pub fallback_busy: usize,
    pub fallback_link_down: usize,
    pub fallback_degraded: usize,
    pub fallback_error: usize,
}

impl RoutingCounts {
    /// Count a fallback and its reason.
    pub fn fallback(&mut self, reason: FallbackReason) {
        self.fallbacks += 1;
        match reason {
            FallbackReason::Timeout => self.fallback_timeout += 1,
            FallbackReason::Busy => self.fallback_busy += 1,
            FallbackReason::LinkDown => self.fallback_link_down += 1,
            FallbackReason::Degraded => self.fallback_degraded += 1,
            FallbackReason::GatewayError | FallbackReason::Transport => self.fallback_error += 1,
        }
    }

    /// Add another sequence's counts.
    pub fn add(&mut self, other: &RoutingCounts) {
        self.escalated += other.escalated;
        self.cloud_tokens += other.cloud_tokens;
        self.fallbacks += other.fallbacks;
        self.fallback_timeout += other.fallback_timeout;
        self.fallback_busy += other.fallback_busy;
        self.fallback_link_down += other.fallback_link_down;
        self.fallback_degraded += other.fallback_degraded;
        self.fallback_error += other.fallback_error;
    }
}

/// What the SLM's speculation past escalated tokens did (see [`super::decode`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SpeculationCounts {
    /// Escalations whose speculated tokens stood (the cloud agreed, or did not answer).
    #[serde(rename = "speculation_kept")]
    pub kept: usize,
    /// Escalations the cloud answered with another token: the speculated tokens were dropped.
    #[serde(rename = "speculation_rolled_back")]
    pub rolled_back: usize,
    /// Tokens decoded during escalations and committed.
    #[serde(rename = "speculated_tokens_kept")]
    pub tokens_kept: usize,
    /// Tokens decoded during escalations and thrown away (work lost to a roll-back).
    #[serde(rename = "speculated_tokens_discarded")]
    pub tokens_discarded: usize,
}

/// What drafts the LLM checked did (protocol v5, `--draft adaptive`): how many of the SLM's
/// draft tokens the LLM took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct DraftCounts {
    /// Draft escalations the LLM answered.
    #[serde(rename = "drafts_answered")]
    pub answered: usize,
    /// Draft tokens in them.
    #[serde(rename = "draft_tokens_sent")]
    pub tokens_sent: usize,
    /// Of those, accepted by the LLM (each a committed token the LLM checked).
    #[serde(rename = "draft_tokens_accepted")]
    pub tokens_accepted: usize,
    /// `tokens_accepted / tokens_sent` (0 without drafts).
    pub draft_acceptance_rate: f64,
    /// Accepted tokens per answered draft (0 without drafts).
    pub draft_mean_accepted: f64,
}

impl DraftCounts {
    /// A draft of `sent` tokens answered with `accepted` taken.
    pub fn record(&mut self, sent: usize, accepted: usize) {
        self.answered += 1;
        self.tokens_sent += sent;
        self.tokens_accepted += accepted.min(sent);
        self.rates();
    }

    /// Add another sequence's counts.
    pub fn add(&mut self, other: &DraftCounts) {
        self.answered += other.answered;
        self.tokens_sent += other.tokens_sent;
        self.tokens_accepted += other.tokens_accepted;
        self.rates();
    }

    fn rates(&mut self) {
        self.draft_acceptance_rate = if self.tokens_sent > 0 { self.tokens_accepted as f64 / self.tokens_sent as f64 } else { 0.0 };
        self.draft_mean_accepted = if self.answered > 0 { self.tokens_accepted as f64 / self.answered as f64 } else { 0.0 };
    }
}

/// What one call of [`super::decode`] did.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeStats {
    /// Tokens in the (possibly truncated) prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens dropped by left truncation (set by the caller that truncated).
    pub truncated_tokens: usize,
    /// Tokens generated (a stop token included).
    pub tokens: usize,
    /// Why generation stopped.
    pub finish_reason: FinishReason,
    /// What the router and the cloud did with the tokens.
    #[serde(flatten)]
    pub routing: RoutingCounts,
    /// What speculation past escalated tokens did.
    #[serde(flatten)]
    pub speculation: SpeculationCounts,
    /// What the drafts the LLM checked did.
    #[serde(flatten)]
    pub drafts: DraftCounts,
    /// The rate controller after the last position, when one steered tau: reported as its
    /// session's figures (target, tau at start and end, share realized); pass it to the next
    /// decode to carry it on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_control: Option<RateControl>,
    /// `ContextMissing` answers (each followed by a `Full` resend).
    pub context_missing: usize,
    /// Escalations that carried the whole context (`Full`): the first, and each resync.
    pub full_syncs: usize,
    /// Of those, contexts sent ahead of a hard token to a gateway that did not hold them (a
    /// resync after a reconnect), not counting the prompt's pre-sync.
    pub syncs_ahead: usize,
    /// Frame bytes (length prefix included) of the first escalation.
    pub first_escalation_bytes: usize,
    /// Average frame bytes of the escalations after the first.
    pub later_escalation_bytes_avg: f64,
    /// Frame bytes the link sent and received during the session.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Time of the prompt prefill.
    pub prefill_ms: f64,
    /// Time after the prefill.
    pub decode_ms: f64,
    /// Generated tokens after the first, per second of decode time.
    pub decode_tokens_per_s: f64,
    /// Whole call.
    pub total_ms: f64,
    /// Generated tokens per second of the whole call.
    pub tokens_per_s: f64,
    pub token_latency_ms_p50: f64,
    pub token_latency_ms_p90: f64,
    pub token_latency_ms_p99: f64,
    pub escalation_latency_ms_p50: f64,
    pub escalation_latency_ms_p99: f64,
    #[serde(skip)]
    pub(crate) token_latencies: Vec<f64>,
    /// Per escalation the cloud answered: ms from asking to the answer, in order.
    #[serde(skip)]
    pub(crate) escalation_latencies: Vec<f64>,
    /// Frame bytes of each escalation, in order (filled by the cloud).
    #[serde(skip)]
    pub escalation_bytes: Vec<usize>,
}

impl Default for DecodeStats {
    fn default() -> Self {
        Self {
            prompt_tokens: 0,
            truncated_tokens: 0,
            tokens: 0,
            finish_reason: FinishReason::Length,
            routing: RoutingCounts::default(),
            speculation: SpeculationCounts::default(),
            drafts: DraftCounts::default(),
            rate_control: None,
            context_missing: 0,
            full_syncs: 0,
            syncs_ahead: 0,
            first_escalation_bytes: 0,
            later_escalation_bytes_avg: 0.0,
            bytes_sent: 0,
            bytes_received: 0,
            prefill_ms: 0.0,
            decode_ms: 0.0,
            decode_tokens_per_s: 0.0,
            total_ms: 0.0,
            tokens_per_s: 0.0,
            token_latency_ms_p50: 0.0,
            token_latency_ms_p90: 0.0,
            token_latency_ms_p99: 0.0,
            escalation_latency_ms_p50: 0.0,
            escalation_latency_ms_p99: 0.0,
            token_latencies: Vec::new(),
            escalation_latencies: Vec::new(),
            escalation_bytes: Vec::new(),
        }
    }
}

impl DecodeStats {
    /// Per escalation the cloud answered: ms from asking to the answer, in order.
    pub fn escalation_latencies(&self) -> &[f64] {
        &self.escalation_latencies
    }

    /// Add another sequence's counters (totals over an evaluation).
    pub fn add_counts(&mut self, other: &DecodeStats) {
        self.tokens += other.tokens;
        self.routing.add(&other.routing);
        self.speculation.kept += other.speculation.kept;
        self.speculation.rolled_back += other.speculation.rolled_back;
        self.speculation.tokens_kept += other.speculation.tokens_kept;
        self.speculation.tokens_discarded += other.speculation.tokens_discarded;
        self.drafts.add(&other.drafts);
        self.context_missing += other.context_missing;
        self.full_syncs += other.full_syncs;
        self.syncs_ahead += other.syncs_ahead;
    }

    pub(crate) fn finish(&mut self) {
        let mut t = std::mem::take(&mut self.token_latencies);
        t.sort_by(f64::total_cmp);
        self.token_latency_ms_p50 = percentile_sorted(&t, 0.5);
        self.token_latency_ms_p90 = percentile_sorted(&t, 0.9);
        self.token_latency_ms_p99 = percentile_sorted(&t, 0.99);
        // Kept in arrival order (`generate --json` lists them); sorted in a copy.
        let mut e = self.escalation_latencies.clone();
        e.sort_by(f64::total_cmp);
        self.escalation_latency_ms_p50 = percentile_sorted(&e, 0.5);
        self.escalation_latency_ms_p99 = percentile_sorted(&e, 0.99);
        if let Some((first, later)) = self.escalation_bytes.split_first() {
            self.first_escalation_bytes = *first;
            self.later_escalation_bytes_avg = if later.is_empty() { 0.0 } else { later.iter().sum::<usize>() as f64 / later.len() as f64 };
        }
        self.tokens_per_s = if self.total_ms > 0.0 { self.tokens as f64 / (self.total_ms / 1e3) } else { 0.0 };
        let steps = self.tokens.saturating_sub(1);
        self.decode_tokens_per_s = if self.decode_ms > 0.0 { steps as f64 / (self.decode_ms / 1e3) } else { 0.0 };
    }
}
