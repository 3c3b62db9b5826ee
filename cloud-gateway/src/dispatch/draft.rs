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
//!
//! How much of a draft is checked is the gateway's choice too ([`DraftVerify`],
//! [`verify_len`]): every draft position costs the verifier a token of work whether the LLM
//! accepts it or not, so when the verifier is the fleet's bottleneck a long draft's tail buys
//! one device a few tokens with time other devices' escalations wait for. Under load the
//! gateway checks a shorter prefix (the draft is the device's proposal, not a promise), and a
//! device learns the shorter length from the answer: its draft rule treats a prefix accepted
//! short of what it sent like a rejection there.
#![cfg_attr(not(test), deny(clippy::disallowed_methods))]

use std::time::Duration;

use super::LlmToken;

/// `--draft-verify`: how much of each draft the gateway's LLM checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[value(rename_all = "kebab-case")]
pub enum DraftVerify {
    /// Every draft token the device sent (up to the protocol's bound).
    #[default]
    Whole,
    /// A prefix that shortens as the queue ages past what one batch takes ([`verify_len`]).
    ByLoad,
}

/// How many of a `len`-token draft's tokens to check when the oldest escalation waiting has
/// waited `queue_age` and one batch (or one engine request) takes `service`: all of them
/// while the queue is no older than two batches (the one running and the one filling: the
/// verifier keeps up), then `len` divided by how many times older it is, at least the first
/// token (the hard position itself is what the device asked about). Shortening in proportion
/// keeps the verifier's work per escalation falling as fast as the wait grows.
pub fn verify_len(mode: DraftVerify, len: usize, queue_age: Duration, service: Duration) -> usize {
    if mode == DraftVerify::Whole || len <= 1 {
        return len;
    }
    let keeps_up = 2.0 * service.as_secs_f64().max(1e-3);
    let behind = queue_age.as_secs_f64() / keeps_up;
    if behind <= 1.0 {
        return len;
    }
    ((len as f64 / behind).floor() as usize).clamp(1, len)
}

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
    fn a_verifier_that_keeps_up_checks_the_whole_draft() {
        let ms = Duration::from_millis;
        for mode in [DraftVerify::Whole, DraftVerify::ByLoad] {
            assert_eq!(verify_len(mode, 8, ms(0), ms(50)), 8);
            assert_eq!(verify_len(mode, 8, ms(100), ms(50)), 8, "two batches' wait is keeping up");
        }
    }

    #[test]
    fn by_load_a_draft_shortens_as_the_queue_ages_and_keeps_its_first_token() {
        let ms = Duration::from_millis;
        let table = [(200, 4), (400, 2), (800, 1), (60_000, 1)];
        for (age, want) in table {
            assert_eq!(verify_len(DraftVerify::ByLoad, 8, ms(age), ms(50)), want, "queue age {age} ms");
        }
        assert_eq!(verify_len(DraftVerify::Whole, 8, ms(60_000), ms(50)), 8, "whole: the device's draft as sent");
        assert_eq!(verify_len(DraftVerify::ByLoad, 0, ms(60_000), ms(50)), 0, "no draft stays none");
        assert_eq!(verify_len(DraftVerify::ByLoad, 8, ms(10), Duration::ZERO), 1, "a service time not measured yet counts as 1 ms");
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
