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

/// The cloud side of a session, as the decode loop sees it: a QUIC link to the gateway, an
/// in-process LLM (evaluation), or nothing (local generation). An implementation never waits
/// past its own deadline: generation must not stall.
pub trait Cloud {
    /// A session starts at `prompt` and may escalate (e.g. sync the prompt ahead of the first
    /// hard token).
    fn start(&mut self, _prompt: &[u32]) {}

    /// The token after `context` (the whole context before the position asked for).
    fn escalate(&mut self, context: &[u32]) -> impl Future<Output = CloudAnswer>;

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
