//! Fitting a prompt into the context: refuse it, or keep its most recent tokens.

use super::RuntimeError;

/// What to do with a prompt longer than the context allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptPolicy {
    /// Refuse it with [`RuntimeError::PromptTooLong`].
    Reject,
    /// Keep its last tokens (the most recent context), dropping the start.
    TruncateLeft,
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
