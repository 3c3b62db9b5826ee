//! Local generation: prefill once, then one cached decode step per token.

use std::ops::ControlFlow;
use std::time::Instant;

use serde::Serialize;

use super::{CausalLm, KvCache, RuntimeError, StepOutput};
use crate::sampling::{distribution_stats, Sampler};

/// What to do with a prompt longer than the context allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptPolicy {
    /// Refuse it with [`RuntimeError::PromptTooLong`].
    Reject,
    /// Keep its last tokens (the most recent context), dropping the start.
    TruncateLeft,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A stop token was produced.
    Stop,
    /// `max_new_tokens` was reached.
    Length,
    /// The KV cache is full.
    ContextFull,
    /// The caller asked to stop.
    Cancelled,
}

/// Timings and counts of one generation.
#[derive(Debug, Clone, Serialize)]
pub struct GenerationStats {
    /// Tokens in the (possibly truncated) prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens dropped by left truncation.
    pub truncated_tokens: usize,
    /// Tokens generated (the stop token included).
    pub generated_tokens: usize,
    /// Time of the prefill pass.
    pub prefill_ms: f64,
    /// Time of all decode steps.
    pub decode_ms: f64,
    /// Generated tokens after the first, per second of decode time.
    pub decode_tokens_per_s: f64,
    /// Why it stopped.
    pub finish_reason: FinishReason,
}

/// Check a prompt against the context limit, keeping room for at least one new token.
///
/// Returns the prompt to use and how many tokens were dropped from its start.
pub fn fit_prompt(ids: &[u32], capacity: usize, policy: PromptPolicy) -> Result<(&[u32], usize), RuntimeError> {
    if ids.is_empty() {
        return Err(RuntimeError::EmptyPrompt);
    }
    let limit = capacity.saturating_sub(1);
    if ids.len() <= limit {
        return Ok((ids, 0));
    }
    match policy {
        PromptPolicy::Reject => Err(RuntimeError::PromptTooLong { tokens: ids.len(), limit, context: capacity }),
        PromptPolicy::TruncateLeft => {
            let drop = ids.len() - limit;
            Ok((&ids[drop..], drop))
        }
    }
}

/// Generate up to `max_new_tokens` after `prompt`, calling `on_token` with each new token as it
/// is produced. The cache must be empty; it holds the whole context afterwards.
pub fn generate(
    lm: &mut CausalLm,
    cache: &mut KvCache,
    prompt: &[u32],
    max_new_tokens: usize,
    sampler: &mut Sampler,
    mut on_token: impl FnMut(u32) -> ControlFlow<()>,
) -> Result<GenerationStats, RuntimeError> {
    if prompt.is_empty() {
        return Err(RuntimeError::EmptyPrompt);
    }
    cache.clear();
    let mut step = StepOutput::default();
    let t0 = Instant::now();
    lm.forward_into(cache, prompt, &mut step)?;
    let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let mut generated = 0usize;
    let finish_reason = loop {
        if generated >= max_new_tokens {
            break FinishReason::Length;
        }
        let stats = distribution_stats(&step.logits)?;
        let token = sampler.sample_with_stats(&step.logits, &stats)?.token;
        generated += 1;
        if on_token(token).is_break() {
            break FinishReason::Cancelled;
        }
        if lm.stop_tokens().contains(&token) {
            break FinishReason::Stop;
        }
        if generated >= max_new_tokens {
            break FinishReason::Length;
        }
        if cache.len() + 1 > cache.capacity() {
            break FinishReason::ContextFull;
        }
        lm.forward_into(cache, &[token], &mut step)?;
    };
    let decode_ms = t1.elapsed().as_secs_f64() * 1e3;
    let steps = generated.saturating_sub(1);
    Ok(GenerationStats {
        prompt_tokens: prompt.len(),
        truncated_tokens: 0,
        generated_tokens: generated,
        prefill_ms,
        decode_ms,
        decode_tokens_per_s: if decode_ms > 0.0 { steps as f64 / (decode_ms / 1e3) } else { 0.0 },
        finish_reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_prompt_is_an_error() {
        assert!(matches!(fit_prompt(&[], 16, PromptPolicy::Reject), Err(RuntimeError::EmptyPrompt)));
    }

    #[test]
    fn long_prompt_rejected_or_left_truncated() {
        let ids: Vec<u32> = (0..20).collect();
        assert!(matches!(fit_prompt(&ids, 16, PromptPolicy::Reject), Err(RuntimeError::PromptTooLong { tokens: 20, limit: 15, .. })));
        let (kept, dropped) = fit_prompt(&ids, 16, PromptPolicy::TruncateLeft).unwrap();
        assert_eq!(dropped, 5);
        assert_eq!(kept, &ids[5..]);
        assert_eq!(fit_prompt(&ids[..15], 16, PromptPolicy::Reject).unwrap().1, 0);
    }
}
