//! Where hard tokens go: the interface the decode loop escalates through.

use std::future::Future;

use common::exchange::FallbackReason;

use super::stats::DecodeStats;

/// The answer to one escalation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloudAnswer {
    /// The LLM's token.
    Token(u32),
    /// No token in time (or at all): the loop takes the SLM's token.
    Fallback(FallbackReason),
}

/// The answer to an escalation that carried a draft (protocol v5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DraftAnswer {
    /// The LLM took the first `accepted` draft tokens and chose `token` after them (a
    /// correction, or the bonus token after a fully accepted draft).
    Verified {
        /// Draft tokens taken.
        accepted: usize,
        /// The LLM's token after them.
        token: u32,
    },
    /// No answer in time (or at all): the loop takes the SLM's token at the hard position.
    Fallback(FallbackReason),
}

/// The cloud side of a session, as the decode loop sees it: a QUIC link to the gateway, an
/// in-process LLM (evaluation), or nothing (local generation). An implementation never waits
/// past its own deadline: generation must not stall.
pub trait Cloud {
    /// A session starts at `prompt` and may escalate (e.g. sync the prompt ahead of the first
    /// hard token).
    fn start(&mut self, _prompt: &[u32]) {}

    /// The token after `context` (the whole context before the position asked for).
    fn escalate(&mut self, context: &[u32]) -> impl Future<Output = CloudAnswer>;

    /// Most draft tokens the cloud checks per escalation now (0: none, plain escalations:
    /// drafts off, or a gateway older than protocol v5).
    fn draft_limit(&self) -> usize {
        0
    }

    /// The LLM's check of `draft` (the SLM's token at the position after `context` and its
    /// continuation). Without drafts this asks for the token at that position: accepted 0.
    fn escalate_draft(&mut self, context: &[u32], _draft: &[u32]) -> impl Future<Output = DraftAnswer> {
        let asked = self.escalate(context);
        async move {
            match asked.await {
                CloudAnswer::Token(token) => DraftAnswer::Verified { accepted: 0, token },
                CloudAnswer::Fallback(reason) => DraftAnswer::Fallback(reason),
            }
        }
    }

    /// How many positions the SLM may decode ahead of an escalation in flight (0 = wait for
    /// every answer). Worth it where answers take longer than an SLM step: over a network.
    fn speculation_window(&self) -> usize {
        0
    }

    /// The session is over (free what the cloud holds for it); adds the cloud's counters
    /// (bytes, context syncs) to `stats`.
    fn finish(&mut self, _stats: &mut DecodeStats) -> impl Future<Output = ()> {
        async {}
    }
}

/// No cloud: local generation. The loop never escalates with it (see [`super::DecodeParams`]),
/// and if asked, it falls back at once.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoCloud;

impl Cloud for NoCloud {
    async fn escalate(&mut self, _context: &[u32]) -> CloudAnswer {
        CloudAnswer::Fallback(FallbackReason::LinkDown)
    }
}
