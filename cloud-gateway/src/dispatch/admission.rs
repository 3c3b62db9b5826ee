//! Admission's one rule, shared by both LLM paths: admit an escalation only if the work ahead of
//! it and its own are estimated to finish before its deadline; otherwise refuse it at once with
//! `Busy` and a retry hint, rather than send it and answer `Expired` when the deadline passes.
//!
//! The paths differ in what is ahead (the batcher's queue and its cut; an engine worker's
//! requests in flight) and say so themselves (`crate::batcher`'s admission,
//! `crate::engine::pool::admission`); what they share is here, once: the cost model both learn
//! from what they ran ([`CostModel`]: a fixed time per step plus a time per token), the test
//! against the time left ([`within_deadline`]) and the hint a refusal carries
//! ([`retry_after_ms`]). Pure functions: no clock, no I/O.

use std::time::Duration;

/// How long the LLM takes, as learned from what it ran: one step of short escalations, plus a
/// time per token beyond one per row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Time of a step of short escalations (one token each), ms: a batch for the embedded
    /// backend, a request's fixed part for an engine.
    pub batch_ms: f64,
    /// Time per token of prefill beyond one per row, ms.
    pub token_ms: f64,
}

/// Weight of a new observation in the moving averages.
const ALPHA: f64 = 0.2;

impl CostModel {
    /// Learn from `rows` escalations with `tokens` tokens of prefill in all that took `ms`
    /// together: work that is mostly one token per row teaches the step time, the rest the
    /// time per extra token.
    pub fn observe(&mut self, rows: usize, tokens: usize, ms: f64) {
        if rows == 0 || !ms.is_finite() || ms < 0.0 {
            return;
        }
        let extra = tokens.saturating_sub(rows);
        if extra < rows.max(8) {
            self.batch_ms = ewma(self.batch_ms, ms);
        } else {
            let per_token = (ms - self.batch_ms).max(0.0) / extra as f64;
            self.token_ms = ewma(self.token_ms, per_token);
        }
    }

    /// Estimated time to run `rows` escalations with `tokens` tokens of prefill in all, in
    /// steps of at most `max_batch` rows, ms.
    pub fn estimate_ms(&self, rows: usize, tokens: usize, max_batch: usize) -> f64 {
        if rows == 0 && tokens == 0 {
            return 0.0;
        }
        let batches = rows.div_ceil(max_batch.max(1)).max(1);
        batches as f64 * self.batch_ms + tokens.saturating_sub(rows) as f64 * self.token_ms
    }
}

fn ewma(prev: f64, x: f64) -> f64 {
    if prev <= 0.0 {
        x
    } else {
        (1.0 - ALPHA) * prev + ALPHA * x
    }
}

/// The rule: work estimated to wait `queued_ms` behind what is ahead and then run `own_ms`
/// is admitted when both fit in `left`, the time to its deadline; else `Err` with the retry
/// hint: how long the longer of the two should take.
pub fn within_deadline(queued_ms: f64, own_ms: f64, left: Duration) -> Result<(), u32> {
    if queued_ms + own_ms <= left.as_secs_f64() * 1e3 {
        return Ok(());
    }
    Err(retry_after_ms(queued_ms.max(own_ms)))
}

/// A `retry_after_ms` for work estimated to take `ms`: at least 5 ms, at most 30 s (the
/// longest deadline).
pub fn retry_after_ms(ms: f64) -> u32 {
    if ms.is_nan() {
        return 5;
    }
    ms.clamp(5.0, 30_000.0).round() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn work_is_admitted_only_when_the_wait_and_its_own_run_fit_the_time_left() {
        assert_eq!(within_deadline(300.0, 200.0, 500 * MS), Ok(()));
        assert_eq!(within_deadline(300.0, 201.0, 500 * MS), Err(300), "the hint is the longer part");
        assert_eq!(within_deadline(10.0, 900.0, 500 * MS), Err(900));
        assert_eq!(within_deadline(0.0, 0.0, Duration::ZERO), Ok(()), "nothing to run fits any deadline");
    }

    #[test]
    fn a_retry_hint_is_between_5_ms_and_the_longest_deadline() {
        assert_eq!(retry_after_ms(0.2), 5);
        assert_eq!(retry_after_ms(1234.4), 1234);
        assert_eq!(retry_after_ms(1e12), 30_000);
        assert_eq!(retry_after_ms(f64::NAN), 5, "a nonsense estimate still gives a hint");
    }

    #[test]
    fn the_first_observation_replaces_an_unknown_figure_and_later_ones_move_it_by_a_fifth() {
        let mut m = CostModel { batch_ms: 0.0, token_ms: 0.0 };
        m.observe(1, 1, 50.0);
        assert_eq!(m.batch_ms, 50.0);
        m.observe(1, 101, 50.0 + 100.0 * 2.0);
        assert_eq!(m.token_ms, 2.0);
        m.observe(1, 101, 50.0 + 100.0 * 7.0);
        assert!((m.token_ms - 3.0).abs() < 1e-9, "{m:?}");
    }
}
