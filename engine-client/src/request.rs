//! What is asked of an engine and what it answers, engine-independent: the dialects map these
//! to and from each engine's JSON.

use common::sampling::SamplingParams;

/// What an engine is asked for: the next token(s) after `context`.
#[derive(Debug, Clone, Copy)]
pub struct NextTokenRequest<'a> {
    /// The session's whole context (token ids); the answer continues it.
    pub context: &'a [u32],
    /// How to choose tokens (greedy when `temperature == 0`).
    pub sampling: &'a SamplingParams,
    /// Seed for sampled decoding (the escalation's seed mixed with its `seq`), so a retry on
    /// another worker draws the same token.
    pub seed: Option<u64>,
    /// Tokens to generate: 1 for an escalation, more for a lookahead.
    pub max_new_tokens: u32,
    /// Top log-probabilities wanted per token (0 = only the chosen token's).
    pub top_logprobs: u32,
    /// llama.cpp slot to use (the pool pins a session to a slot for its prompt cache).
    pub slot: Option<u32>,
}

/// One generated token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineToken {
    /// Its id.
    pub id: u32,
    /// Its log-probability, when the engine reports it.
    pub logprob: Option<f32>,
}

/// An engine's answer to a [`NextTokenRequest`] or a [`DraftCheckRequest`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EngineReply {
    /// Generated tokens, first one first (at least one); for a draft check, the LLM's choices
    /// from the hard position on (at most the draft's length plus one).
    pub tokens: Vec<EngineToken>,
    /// Prompt tokens the engine counted, when reported.
    pub prompt_tokens: Option<u32>,
    /// Of those, how many came from its prefix cache, when reported.
    pub cached_tokens: Option<u32>,
}

/// What an engine is asked to check (protocol v5), in one request: the LLM's greedy
/// choice at the position after `context` (the hard position) and after each draft token but
/// the last, and its token after the whole draft. Only greedy escalations are checked: an
/// engine's choices are its argmax, which a seeded sampler's draws are not.
#[derive(Debug, Clone, Copy)]
pub struct DraftCheckRequest<'a> {
    /// The session's whole context (not empty); the draft continues it.
    pub context: &'a [u32],
    /// The SLM's tokens from the hard position on (at least one).
    pub draft: &'a [u32],
    /// llama.cpp slot to use, as in [`NextTokenRequest::slot`].
    pub slot: Option<u32>,
}

impl DraftCheckRequest<'_> {
    /// Context and draft as one sequence: what prompt log-probabilities are asked of.
    pub fn sequence(&self) -> Vec<u32> {
        [self.context, self.draft].concat()
    }

    /// The draft's positions in [`Self::sequence`] as the prompt choices that give the LLM's
    /// choice there (the token after the draft is the generated one, not a prompt position).
    pub fn prompt_choices<'s>(&self, sequence: &'s [u32]) -> PromptChoicesRequest<'s> {
        PromptChoicesRequest { tokens: sequence, first: self.context.len(), runner_up: false, slot: self.slot }
    }
}

/// The LLM's greedy choice at every position of `tokens` from `first` on, each given the
/// tokens before it (teacher forcing): what the router lab asks of its teacher
/// ([`crate::prompt_choices`]), and how SGLang and vLLM check a draft
/// ([`DraftCheckRequest::prompt_choices`]). Engines with prompt log-probabilities (SGLang,
/// vLLM) answer it in one request; llama-server needs one request per position (see
/// [`crate::llamacpp`]).
#[derive(Debug, Clone, Copy)]
pub struct PromptChoicesRequest<'a> {
    /// The whole sequence; its last token is never predicted from, only predicted.
    pub tokens: &'a [u32],
    /// First position wanted (at least 1: nothing predicts position 0).
    pub first: usize,
    /// Also the second-best token at each position: the gap between the two tells a near-tie.
    pub runner_up: bool,
    /// llama.cpp slot to pin the per-position requests to (each then prefills one token on the
    /// slot's cached prefix); other engines ignore it.
    pub slot: Option<u32>,
}

impl PromptChoicesRequest<'_> {
    /// The positions answered, in order: `max(first, 1)..tokens.len()`.
    pub fn positions(&self) -> std::ops::Range<usize> {
        self.first.max(1)..self.tokens.len().max(self.first.max(1))
    }

    /// Top log-probabilities to ask for per position: 2 with the runner-up, else 1.
    pub fn top_n(&self) -> u32 {
        if self.runner_up {
            2
        } else {
            1
        }
    }
}

/// The LLM's choice at one position of a [`PromptChoicesRequest`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PromptChoice {
    /// Its greedy (argmax) token, with its log-probability when the engine reports it.
    pub best: EngineToken,
    /// The second-best token, when asked for and reported.
    pub runner_up: Option<EngineToken>,
}

impl PromptChoice {
    /// The best and second-best of `candidates` (any order) by log-probability; the earlier of
    /// equals wins. `None` when there is no candidate.
    pub fn from_candidates(candidates: &[EngineToken], runner_up: bool) -> Option<Self> {
        let key = |t: &EngineToken| t.logprob.unwrap_or(f32::NEG_INFINITY);
        let mut sorted: Vec<EngineToken> = candidates.to_vec();
        // Stable: ties keep the engine's order.
        sorted.sort_by(|a, b| key(b).total_cmp(&key(a)));
        let best = *sorted.first()?;
        let second = sorted.iter().find(|t| t.id != best.id).copied().filter(|_| runner_up);
        Some(Self { best, runner_up: second })
    }
}

/// What an engine says about its model at start-up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EngineModel {
    /// Model id or path as the engine names it.
    pub id: String,
    /// Vocabulary size, when the engine reports it.
    pub vocab_size: Option<usize>,
    /// Longest context per request, when reported.
    pub max_context: Option<usize>,
}

/// An HTTP call a dialect wants made: method, path and (for POST) a JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpCall {
    /// `GET` when `body` is `None`, `POST` otherwise.
    pub path: String,
    /// JSON body of a POST.
    pub body: Option<serde_json::Value>,
}

impl HttpCall {
    /// A GET of `path`.
    pub fn get(path: &str) -> Self {
        Self { path: path.into(), body: None }
    }
    /// A POST of `body` to `path`.
    pub fn post(path: &str, body: serde_json::Value) -> Self {
        Self { path: path.into(), body: Some(body) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draft_check_asks_for_the_choices_at_the_drafts_positions_of_context_and_draft() {
        let r = DraftCheckRequest { context: &[1, 2, 3], draft: &[4, 5], slot: Some(1) };
        let sequence = r.sequence();
        assert_eq!(sequence, vec![1, 2, 3, 4, 5]);
        let choices = r.prompt_choices(&sequence);
        assert_eq!((choices.positions(), choices.runner_up, choices.slot), (3..5, false, Some(1)), "the hard position and the one after the first draft token");
    }
}
