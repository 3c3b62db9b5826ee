//! Draft acceptance (protocol v5): the one rule every LLM path applies, so a draft gets the
//! same verdict from the embedded backend and from SGLang, vLLM or llama.cpp.
//!
//! A path knows the LLM's choice at the hard position and at each draft position after it
//! (given the context and the draft before that position); the rule accepts draft tokens
//! while the choice equals the draft's token and answers the first choice that differs (the
//! correction), or the choice after a fully accepted draft (the bonus). Choices past the first
//! difference are never read, so a path may compute them from its own tokens instead of the
//! draft's (llama.cpp's greedy continuation), and one that samples (the embedded backend) draws
//! only as far as the rule reads, in order, keeping its seeded draws those of the same
//! positions asked one by one.

use super::LlmToken;

/// The rule, with the choices produced on demand: `choose(j)` is the LLM's token (and its
/// log-probability) at draft position `j` given the draft before it, for `j < positions` (the
/// draft's length plus the position after it, or fewer when the path knows fewer). Accept
/// while it equals the draft's token; answer the first that differs, or the last position known
/// when every one before it agreed.
pub fn verify_draft<E>(draft: &[u32], positions: usize, mut choose: impl FnMut(usize) -> Result<(u32, f32), E>) -> Result<LlmToken, E> {
    let last = draft.len().min(positions.saturating_sub(1));
    let mut j = 0;
    loop {
        let (token, logprob) = choose(j)?;
        if j >= last || draft.get(j) != Some(&token) {
            return Ok(LlmToken { token_id: token, logprob, accepted: j as u32 });
        }
        j += 1;
    }
}

/// The rule over choices already known (an engine's answer): `choices[j]` is the LLM's
/// greedy token and log-probability at draft position `j`, `choices[draft.len()]` the bonus.
/// `None` when there is no choice at all. An empty draft answers `choices[0]` with nothing
/// accepted: the plain next token.
pub fn accept_prefix(choices: &[(u32, f32)], draft: &[u32]) -> Option<LlmToken> {
    if choices.is_empty() {
        return None;
    }
    verify_draft::<std::convert::Infallible>(draft, choices.len(), |j| Ok(choices[j])).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(draft: &[u32], llm: &[u32]) -> (u32, u32, Vec<usize>) {
        let mut asked = Vec::new();
        let t = verify_draft::<()>(draft, draft.len() + 1, |j| {
            asked.push(j);
            Ok((llm[j], -0.1))
        })
        .unwrap();
        (t.accepted, t.token_id, asked)
    }

    #[test]
    fn a_draft_is_accepted_while_the_llm_agrees_and_answered_at_the_first_difference() {
        assert_eq!(run(&[5, 6, 7], &[5, 6, 7, 8]), (3, 8, vec![0, 1, 2, 3]), "all accepted: the bonus token");
        assert_eq!(run(&[5, 6, 7], &[9, 6, 7, 8]), (0, 9, vec![0]), "rejected at once: the LLM's token there");
        assert_eq!(run(&[5, 6, 7], &[5, 9, 7, 8]), (1, 9, vec![0, 1]), "rejected in the middle");
    }

    #[test]
    fn fewer_choices_than_the_draft_needs_answer_at_the_last_position_given() {
        let t = verify_draft::<()>(&[5, 6, 7], 2, |j| Ok(([5, 6][j], 0.0))).unwrap();
        assert_eq!((t.accepted, t.token_id), (1, 6));
    }

    fn accept(choices: &[u32], draft: &[u32]) -> (u32, u32, f32) {
        let choices: Vec<(u32, f32)> = choices.iter().enumerate().map(|(j, &t)| (t, -(j as f32))).collect();
        let t = accept_prefix(&choices, draft).expect("a verdict");
        (t.accepted, t.token_id, t.logprob)
    }

    #[test]
    fn accept_prefix_takes_a_fully_agreed_draft_and_the_bonus_after_it() {
        assert_eq!(accept(&[5, 6, 7, 8], &[5, 6, 7]), (3, 8, -3.0));
    }

    #[test]
    fn accept_prefix_rejects_a_first_token_the_llm_would_not_write() {
        assert_eq!(accept(&[9, 6, 7, 8], &[5, 6, 7]), (0, 9, 0.0));
    }

    #[test]
    fn accept_prefix_keeps_the_agreed_prefix_and_gives_the_correction_at_a_middle_rejection() {
        assert_eq!(accept(&[5, 6, 9, 8], &[5, 6, 7, 8]), (2, 9, -2.0), "choices after the difference are not read");
    }

    #[test]
    fn accept_prefix_without_a_draft_is_the_plain_next_token() {
        assert_eq!(accept(&[4], &[]), (0, 4, 0.0));
        assert_eq!(accept(&[4, 5, 6], &[]), (0, 4, 0.0), "a lookahead's later tokens are not a verdict");
        assert!(accept_prefix(&[], &[1]).is_none(), "no choice, no verdict");
    }

    #[test]
    fn accept_prefix_with_choices_cut_short_never_accepts_past_what_it_knows() {
        // llama-server stopped at an end-of-sequence token after two of the four asked for.
        assert_eq!(accept(&[5, 2], &[5, 6, 7]), (1, 2, -1.0));
        assert_eq!(accept(&[5], &[5, 6, 7]), (0, 5, 0.0), "one choice: the token at the hard position");
    }
}
