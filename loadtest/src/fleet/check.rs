//! Each device checks its own token stream, session by session
//! (docs/src/benchmarks/fleet.md, "Fleet load test", "Correctness").
//!
//! [`CheckedCloud`] wraps the device's real cloud ([`edge_node::link::link_cloud::LinkCloud`]) and
//! logs every escalation: the position asked for, a hash of the context sent, the answer and,
//! with the fixed-cost backend, whether the cloud's token is the one that backend gives for
//! exactly that context (it hashes the context the *gateway* holds, so a token lost, doubled
//! or reordered anywhere between the device's loop and the backend changes the answer).
//! [`verify_session`] then replays what must have been committed at each position from the
//! trace and that log, and compares it with what the decode loop actually committed: the same
//! tokens, in order, none missing or extra, every source right, every fallback counted under
//! its reason. An escalation that carried a draft commits the draft tokens the LLM accepted
//! (the trace's own tokens from that position on) and the LLM's token after them.

use std::time::Instant;

use common::exchange::FallbackReason;
use edge_node::decode::{Cloud, CloudAnswer, DecodeStats, DraftAnswer, TokenSource};
use serde::Serialize;

use crate::fixed_backend::expected_token;

/// FNV-1a of token ids (a context's fingerprint in the log).
pub fn context_hash(tokens: impl IntoIterator<Item = u32>) -> u64 {
    tokens.into_iter().fold(0xcbf2_9ce4_8422_2325u64, |h, t| (h ^ t as u64).wrapping_mul(0x100_0000_01b3))
}

/// One escalation as the device made it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Escalation {
    /// Generated position asked for (0 = the first token after the prompt).
    pub position: usize,
    /// Hash of the context sent (prompt and every committed token before `position`).
    pub context_hash: u64,
    /// What came back (for a draft: the LLM's token after the accepted prefix).
    pub answer: CloudAnswer,
    /// Draft tokens sent with it (0: a plain escalation).
    pub draft: usize,
    /// Of them, taken by the LLM (committed before its token).
    pub accepted: usize,
    /// With a checkable backend: whether the cloud's token is the backend's for that context.
    pub token_ok: Option<bool>,
    /// From asking to the answer (or the fallback), ms.
    pub waited_ms: f64,
    /// The link's smoothed RTT when it was asked, ms (None: link down).
    pub rtt_ms: Option<f64>,
    /// When it was resolved.
    pub at: Instant,
}

/// Something a device saw that must never happen.
#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    /// Device index.
    pub device: usize,
    /// The trace session replayed.
    pub session: String,
    /// Generated position, where one applies.
    pub position: Option<usize>,
    /// What was wrong.
    pub what: String,
}

/// A cloud whose every escalation is logged (and its token checked) on the way through.
pub struct CheckedCloud<'l, C> {
    inner: C,
    prompt_len: usize,
    vocab: Option<usize>,
    rtt: Box<dyn Fn() -> Option<f64> + Send + Sync + 'l>,
    observe: Box<dyn Fn(&Escalation) + Send + Sync + 'l>,
    /// Every escalation, in order.
    pub log: Vec<Escalation>,
}

impl<'l, C: Cloud> CheckedCloud<'l, C> {
    /// Wrap `inner` for a session whose prompt has `prompt_len` tokens; `vocab` is set when the
    /// backend's tokens can be checked ([`expected_token`]); `rtt` reads the link's RTT;
    /// `observe` sees each escalation as it is resolved (live counters).
    pub fn new(inner: C, prompt_len: usize, vocab: Option<usize>, rtt: impl Fn() -> Option<f64> + Send + Sync + 'l, observe: impl Fn(&Escalation) + Send + Sync + 'l) -> Self {
        Self { inner, prompt_len, vocab, rtt: Box::new(rtt), observe: Box::new(observe), log: Vec::new() }
    }

    /// The wrapped cloud.
    pub fn into_inner(self) -> C {
        self.inner
    }

    /// Log an escalation of `context` asked at `asked`, its token checked where it can be.
    fn logged(&mut self, context: &[u32], asked: Instant, rtt_ms: Option<f64>, answer: CloudAnswer, draft: usize, accepted: usize) {
        let at = Instant::now();
        let token_ok = match (answer, self.vocab) {
            (CloudAnswer::Token(t), Some(vocab)) if accepted == 0 => Some(t == expected_token(context, vocab)),
            _ => None,
        };
        let e = Escalation {
            position: context.len().saturating_sub(self.prompt_len),
            context_hash: context_hash(context.iter().copied()),
            answer,
            draft,
            accepted,
            token_ok,
            waited_ms: at.duration_since(asked).as_secs_f64() * 1e3,
            rtt_ms,
            at,
        };
        (self.observe)(&e);
        self.log.push(e);
    }
}

impl<C: Cloud> Cloud for CheckedCloud<'_, C> {
    fn start(&mut self, prompt: &[u32]) {
        self.inner.start(prompt)
    }

    async fn escalate(&mut self, context: &[u32]) -> CloudAnswer {
        let rtt_ms = (self.rtt)();
        let asked = Instant::now();
        let answer = self.inner.escalate(context).await;
        self.logged(context, asked, rtt_ms, answer, 0, 0);
        answer
    }

    fn draft_limit(&self) -> usize {
        self.inner.draft_limit()
    }

    async fn escalate_draft(&mut self, context: &[u32], draft: &[u32]) -> DraftAnswer {
        let rtt_ms = (self.rtt)();
        let asked = Instant::now();
        let answer = self.inner.escalate_draft(context, draft).await;
        let (logged, accepted) = match answer {
            DraftAnswer::Verified { accepted, token } => (CloudAnswer::Token(token), accepted.min(draft.len())),
            DraftAnswer::Fallback(reason) => (CloudAnswer::Fallback(reason), 0),
        };
        // The fixed-cost backend accepts nothing, so its token follows the context alone.
        self.logged(context, asked, rtt_ms, logged, draft.len(), accepted);
        answer
    }

    async fn finish(&mut self, stats: &mut DecodeStats) {
        self.inner.finish(stats).await
    }
}

/// What checking one session found.
#[derive(Debug, Default, Clone)]
pub struct SessionCheck {
    /// Committed tokens compared with what must be there.
    pub tokens_checked: u64,
    /// Cloud tokens compared with the backend's rule.
    pub cloud_tokens_checked: u64,
    /// Escalations whose context was compared with the committed stream.
    pub contexts_checked: u64,
    /// Fallbacks matched to a counted reason.
    pub fallbacks_accounted: u64,
    /// What was wrong (empty when all is well).
    pub violations: Vec<(Option<usize>, String)>,
}

/// The token the trace proposes at `position` (past its end: the first stop token, as the
/// stand-in does).
fn trace_token(trace_tokens: &[u32], stop: &[u32], position: usize) -> u32 {
    trace_tokens.get(position).copied().unwrap_or_else(|| stop.first().copied().unwrap_or(0))
}

/// Compare what the decode loop committed (`committed`: token and source per position) with
/// what must have been committed given the trace and the escalation log, and the loop's
/// counters (`stats`) with both.
pub fn verify_session(prompt: &[u32], trace_tokens: &[u32], stop: &[u32], committed: &[(u32, TokenSource)], log: &[Escalation], stats: &DecodeStats) -> SessionCheck {
    let mut c = SessionCheck::default();
    let mut bad = |pos: Option<usize>, what: String| c.violations.push((pos, what));
    if committed.len() != stats.tokens {
        bad(None, format!("{} tokens committed but the loop counted {}", committed.len(), stats.tokens));
    }
    // The log, in position order, one escalation per position at most.
    for w in log.windows(2) {
        if w[1].position <= w[0].position {
            bad(Some(w[1].position), format!("escalation for position {} after one for position {}", w[1].position, w[0].position));
        }
    }
    let mut next = log.iter().peekable();
    let mut hash = context_hash(prompt.iter().copied());
    // Tokens an escalation's answer decided for the positions after its own (accepted draft
    // tokens, then the LLM's), in order.
    let mut decided: std::collections::VecDeque<(u32, TokenSource)> = Default::default();
    for (p, &(token, source)) in committed.iter().enumerate() {
        let escalation = match next.peek() {
            Some(e) if e.position == p => next.next(),
            _ => None,
        };
        if escalation.is_some() && !decided.is_empty() {
            bad(Some(p), "an escalation for a position an earlier answer decided".into());
            decided.clear();
        }
        let want = match (escalation, decided.pop_front()) {
            (None, Some(w)) => w,
            (None, None) => (trace_token(trace_tokens, stop, p), TokenSource::Slm),
            (Some(e), _) => {
                c.contexts_checked += 1;
                if e.context_hash != hash {
                    bad(Some(p), "the escalated context differs from the prompt and the tokens committed before it".into());
                }
                match e.answer {
                    CloudAnswer::Token(t) => {
                        if let Some(ok) = e.token_ok {
                            c.cloud_tokens_checked += 1;
                            if !ok {
                                bad(Some(p), format!("cloud token {t} is not the backend's token for this context"));
                            }
                        }
                        decided.extend((0..e.accepted).map(|j| (trace_token(trace_tokens, stop, p + j), TokenSource::Cloud)));
                        decided.push_back((t, TokenSource::Cloud));
                        decided.pop_front().unwrap_or((t, TokenSource::Cloud))
                    }
                    CloudAnswer::Fallback(_) => (trace_token(trace_tokens, stop, p), TokenSource::Fallback),
                }
            }
        };
        c.tokens_checked += 1;
        if (token, source) != want {
            bad(Some(p), format!("committed {token} ({source:?}) where {} ({:?}) belongs", want.0, want.1));
        }
        hash = (hash ^ token as u64).wrapping_mul(0x100_0000_01b3);
    }
    for e in next {
        bad(Some(e.position), "an escalation's answer was never committed (token lost)".into());
    }
    // Counters: every escalation and every fallback accounted for, by reason.
    let r = &stats.routing;
    let cloud = log.iter().filter(|e| matches!(e.answer, CloudAnswer::Token(_))).count();
    let reasons = |want: &[FallbackReason]| log.iter().filter(|e| matches!(e.answer, CloudAnswer::Fallback(x) if want.contains(&x))).count();
    let fallbacks = log.len() - cloud;
    let by_reason = [
        ("timeout", reasons(&[FallbackReason::Timeout]), r.fallback_timeout),
        ("busy", reasons(&[FallbackReason::Busy]), r.fallback_busy),
        ("link_down", reasons(&[FallbackReason::LinkDown]), r.fallback_link_down),
        ("degraded", reasons(&[FallbackReason::Degraded]), r.fallback_degraded),
        ("error", reasons(&[FallbackReason::GatewayError, FallbackReason::Transport]), r.fallback_error),
    ];
    if r.escalated != log.len() || r.cloud_tokens != cloud || r.fallbacks != fallbacks {
        bad(None, format!("the loop counted {} escalated / {} cloud / {} fallbacks, the device saw {} / {cloud} / {fallbacks}", r.escalated, r.cloud_tokens, r.fallbacks, log.len()));
    }
    for (name, seen, counted) in by_reason {
        if seen != counted {
            bad(None, format!("{seen} fallbacks by {name} seen but {counted} counted"));
        }
    }
    let sum: usize = by_reason.iter().map(|b| b.2).sum();
    if sum != r.fallbacks {
        bad(None, format!("fallbacks by reason add up to {sum}, not {}", r.fallbacks));
    }
    let fallback_tokens = committed.iter().filter(|t| t.1 == TokenSource::Fallback).count();
    if fallback_tokens != r.fallbacks {
        bad(None, format!("{fallback_tokens} fallback tokens committed, {} fallbacks counted", r.fallbacks));
    }
    c.fallbacks_accounted = fallbacks.min(sum) as u64;
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esc(prompt: &[u32], committed: &[(u32, TokenSource)], position: usize, answer: CloudAnswer, token_ok: Option<bool>) -> Escalation {
        let ctx = prompt.iter().copied().chain(committed[..position].iter().map(|t| t.0));
        Escalation { position, context_hash: context_hash(ctx), answer, draft: 0, accepted: 0, token_ok, waited_ms: 1.0, rtt_ms: Some(1.0), at: Instant::now() }
    }

    fn stats(tokens: usize, escalated: usize, cloud: usize, timeouts: usize) -> DecodeStats {
        let mut s = DecodeStats::default();
        s.tokens = tokens;
        s.routing.escalated = escalated;
        s.routing.cloud_tokens = cloud;
        for _ in 0..timeouts {
            s.routing.fallback(FallbackReason::Timeout);
        }
        s
    }

    const PROMPT: &[u32] = &[1, 2, 3];
    const TRACE: &[u32] = &[10, 11, 12, 13];

    fn good() -> (Vec<(u32, TokenSource)>, Vec<Escalation>) {
        let committed = vec![(10, TokenSource::Slm), (77, TokenSource::Cloud), (12, TokenSource::Fallback), (13, TokenSource::Slm)];
        let log = vec![
            esc(PROMPT, &committed, 1, CloudAnswer::Token(77), Some(true)),
            esc(PROMPT, &committed, 2, CloudAnswer::Fallback(FallbackReason::Timeout), None),
        ];
        (committed, log)
    }

    #[test]
    fn a_faithful_session_passes_and_says_what_it_checked() {
        let (committed, log) = good();
        let c = verify_session(PROMPT, TRACE, &[0], &committed, &log, &stats(4, 2, 1, 1));
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        assert_eq!((c.tokens_checked, c.cloud_tokens_checked, c.contexts_checked, c.fallbacks_accounted), (4, 1, 2, 1));
    }

    #[test]
    fn a_lost_a_doubled_and_a_wrong_token_are_each_caught() {
        let (committed, log) = good();
        let s = stats(4, 2, 1, 1);
        let mut lost = committed.clone();
        lost.remove(1);
        assert!(!verify_session(PROMPT, TRACE, &[0], &lost, &log, &s).violations.is_empty(), "lost");
        let mut doubled = committed.clone();
        doubled.insert(1, (10, TokenSource::Slm));
        assert!(!verify_session(PROMPT, TRACE, &[0], &doubled, &log, &s).violations.is_empty(), "doubled");
        let mut swapped = committed.clone();
        swapped.swap(0, 3);
        assert!(!verify_session(PROMPT, TRACE, &[0], &swapped, &log, &s).violations.is_empty(), "out of order");
        let mut wrong = log.clone();
        wrong[0].token_ok = Some(false);
        let v = verify_session(PROMPT, TRACE, &[0], &committed, &wrong, &s).violations;
        assert!(v.iter().any(|x| x.1.contains("not the backend's token")), "{v:?}");
    }

    #[test]
    fn a_context_that_skipped_a_token_is_caught() {
        let (committed, mut log) = good();
        log[1].context_hash = context_hash(PROMPT.iter().copied().chain([10]));
        let v = verify_session(PROMPT, TRACE, &[0], &committed, &log, &stats(4, 2, 1, 1)).violations;
        assert!(v.iter().any(|x| x.0 == Some(2) && x.1.contains("escalated context")), "{v:?}");
    }

    #[test]
    fn a_fallback_counted_under_another_reason_is_caught() {
        let (committed, log) = good();
        let mut s = stats(4, 2, 1, 0);
        s.routing.fallback(FallbackReason::Busy);
        let v = verify_session(PROMPT, TRACE, &[0], &committed, &log, &s).violations;
        assert!(v.iter().any(|x| x.1.contains("by timeout")) && v.iter().any(|x| x.1.contains("by busy")), "{v:?}");
    }

    #[test]
    fn a_draft_commits_its_accepted_prefix_then_the_llms_token_and_nothing_else() {
        // Position 1 escalated with a draft of 3 (the trace's 11, 12, 13): 2 accepted, then 99.
        let committed = vec![(10, TokenSource::Slm), (11, TokenSource::Cloud), (12, TokenSource::Cloud), (99, TokenSource::Cloud)];
        let mut e = esc(PROMPT, &committed, 1, CloudAnswer::Token(99), None);
        (e.draft, e.accepted) = (3, 2);
        let s = stats(4, 1, 1, 0);
        let c = verify_session(PROMPT, TRACE, &[0], &committed, &[e], &s);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        let mut short = committed.clone();
        short.remove(2);
        short.push((13, TokenSource::Slm));
        assert!(!verify_session(PROMPT, TRACE, &[0], &short, &[e], &s).violations.is_empty(), "an accepted draft token lost");
        let mut over = e;
        over.accepted = 3;
        assert!(!verify_session(PROMPT, TRACE, &[0], &committed, &[over], &s).violations.is_empty(), "more accepted than committed");
    }
}
