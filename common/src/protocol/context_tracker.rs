//! The edge's view of how much of a session's context the gateway holds, which decides
//! between a small `Delta` and a `Full` resend.
//!
//! The view is optimistic: once a sync is sent, the gateway is assumed to have applied it,
//! whether or not a reply comes back. That is right in the common fallback case (the request
//! arrived and was applied, only the reply was late), and when it is wrong the gateway's
//! length differs from the next delta's `base_len`, it answers `ContextMissing`, and the
//! next sync is `Full`. A length match can never hide different contents, because the
//! gateway only ever holds a prefix of what this device sent and the device's sequence only
//! grows; a rollback goes through [`ContextTracker::truncate`], which forces a `Full`.
//!
//! The alternative, keeping `base_len` at the last *acknowledged* length, fails the other way
//! under the gateway's exact-length rule: after a late reply the gateway holds more than
//! the device assumes, so every escalation after a fallback would cost a `ContextMissing`
//! round trip.

use super::messages::ContextSync;

/// One escalation's seq and context, produced together so a seq is never reused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingSync {
    /// Seq to put in the `Escalate` frame.
    pub seq: u32,
    /// Context to put in the `Escalate` frame.
    pub context: ContextSync,
}

/// Per-session tracker on the device; see the module docs for the policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContextTracker {
    /// Tokens the gateway holds if every sync sent so far was applied; `None` = unknown.
    assumed_len: Option<usize>,
    /// Seq of the next escalation.
    next_seq: u32,
    /// Seq of the latest `Full`: a `ContextMissing` for an older seq predates it.
    last_full_seq: Option<u32>,
    /// Seq and resulting length of the latest sync sent.
    last_sent: Option<(u32, usize)>,
    /// Length the gateway confirmed by answering the latest sync.
    acked_len: Option<usize>,
}

impl ContextTracker {
    /// A tracker for a new session: nothing is known, so the first sync is `Full`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The seq the next escalation will carry. Seqs never go back, not even after
    /// [`Self::reset`], because the gateway rejects a seq it has seen.
    pub fn next_seq(&self) -> u32 {
        self.next_seq
    }

    /// Tokens the gateway is assumed to hold; `None` means the next sync is `Full`.
    pub fn assumed_len(&self) -> Option<usize> {
        self.assumed_len
    }

    /// Length the gateway confirmed for the latest sync (a reply arrived for it), for
    /// statistics; it does not change what is sent.
    pub fn acked_len(&self) -> Option<usize> {
        self.acked_len
    }

    /// Allocate the next seq and the sync that brings the gateway to `all_tokens` (the whole
    /// context before the position being asked for), then assume it applied.
    pub fn sync_for(&mut self, all_tokens: &[u32]) -> OutgoingSync {
        let seq = self.next_seq;
        // Saturates after 2^32 escalations; the gateway then answers Replayed.
        self.next_seq = self.next_seq.saturating_add(1);
        let context = match self.assumed_len {
            Some(base) if base <= all_tokens.len() => ContextSync::Delta {
                base_len: u32::try_from(base).unwrap_or(u32::MAX),
                tokens: all_tokens.get(base..).unwrap_or_default().into(),
            },
            _ => {
                self.last_full_seq = Some(seq);
                ContextSync::Full { tokens: all_tokens.into() }
            }
        };
        self.assumed_len = Some(all_tokens.len());
        self.last_sent = Some((seq, all_tokens.len()));
        OutgoingSync { seq, context }
    }

    /// A reply (`Token` or `Busy`) for `seq` arrived, so the gateway applied that sync.
    pub fn acknowledge(&mut self, seq: u32) {
        if let Some((sent_seq, len)) = self.last_sent {
            if sent_seq == seq {
                self.acked_len = Some(len);
            }
        }
    }

    /// The gateway answered draft escalation `seq` with `accepted` draft tokens taken: it
    /// appended them to its copy before answering, so the next delta starts after them.
    /// Ignored unless `seq` is the latest sync sent (an older answer changes nothing the
    /// gateway still holds for this view).
    pub fn draft_accepted(&mut self, seq: u32, accepted: usize) {
        if let Some((sent_seq, len)) = self.last_sent {
            if sent_seq == seq {
                let held = len.saturating_add(accepted);
                self.assumed_len = Some(held);
                self.acked_len = Some(held);
                self.last_sent = Some((seq, held));
            }
        }
    }

    /// Draft escalation `seq` was not answered (a timeout, a transport error): the gateway may
    /// have appended any number of its draft tokens, or none, so the next sync is `Full`.
    pub fn draft_unresolved(&mut self, seq: u32) {
        if self.last_sent.is_some_and(|(sent_seq, _)| sent_seq == seq) {
            self.reset();
        }
    }

    /// The gateway answered `ContextMissing` for `seq`. Forces a `Full` next, unless a `Full`
    /// was already sent after `seq` (the answer is stale). Returns whether it reset.
    pub fn context_missing(&mut self, seq: u32, _held_len: u32) -> bool {
        if self.last_full_seq.is_some_and(|full| seq < full) {
            return false;
        }
        self.reset();
        true
    }

    /// Forget what the gateway holds (reconnect, gateway restart): the next sync is `Full`.
    pub fn reset(&mut self) {
        self.assumed_len = None;
        self.acked_len = None;
    }

    /// The device dropped its tokens beyond `len` (e.g. speculation the LLM disagreed with).
    /// If the gateway may hold any of them, its copy is no longer a prefix, so resend `Full`.
    pub fn truncate(&mut self, len: usize) {
        if self.assumed_len.is_some_and(|held| held > len) {
            self.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::session_context::{ContextError, SessionContext};
    use super::*;

    fn full(ids: &[u32]) -> ContextSync {
        ContextSync::Full { tokens: ids.into() }
    }

    fn delta(base_len: u32, ids: &[u32]) -> ContextSync {
        ContextSync::Delta { base_len, tokens: ids.into() }
    }

    #[test]
    fn first_full_then_deltas() {
        let mut t = ContextTracker::new();
        assert_eq!(t.sync_for(&[1, 2, 3]), OutgoingSync { seq: 0, context: full(&[1, 2, 3]) });
        t.acknowledge(0);
        assert_eq!(t.acked_len(), Some(3));
        assert_eq!(t.sync_for(&[1, 2, 3, 4, 5]), OutgoingSync { seq: 1, context: delta(3, &[4, 5]) });
        // Nothing new (a retry at the same position) is an empty delta.
        assert_eq!(t.sync_for(&[1, 2, 3, 4, 5]).context, delta(5, &[]));
        assert_eq!(t.next_seq(), 3);
    }

    #[test]
    fn unanswered_delta_is_assumed_applied() {
        let mut t = ContextTracker::new();
        t.sync_for(&[1, 2]);
        t.sync_for(&[1, 2, 3]); // reply never came: fallback
        assert_eq!(t.sync_for(&[1, 2, 3, 4]).context, delta(3, &[4]));
        assert_eq!(t.assumed_len(), Some(4));
    }

    #[test]
    fn reset_and_context_missing() {
        let mut t = ContextTracker::new();
        t.sync_for(&[1]);
        t.sync_for(&[1, 2]);
        assert!(t.context_missing(1, 1));
        assert_eq!(t.sync_for(&[1, 2, 3]), OutgoingSync { seq: 2, context: full(&[1, 2, 3]) });
        // A ContextMissing for seq 1 again predates the Full at seq 2: ignored.
        assert!(!t.context_missing(1, 1));
        assert_eq!(t.sync_for(&[1, 2, 3, 4]).context, delta(3, &[4]));
        // One for seq 3 is news.
        assert!(t.context_missing(3, 0));
        t.reset();
        assert!(matches!(t.sync_for(&[1, 2, 3, 4]).context, ContextSync::Full { .. }));
    }

    #[test]
    fn truncate_below_assumed_forces_full() {
        let mut t = ContextTracker::new();
        t.sync_for(&[1, 2, 3]);
        t.truncate(5);
        assert_eq!(t.sync_for(&[1, 2, 3, 4]).context, delta(3, &[4]));
        t.truncate(2);
        assert!(matches!(t.sync_for(&[1, 2, 9]).context, ContextSync::Full { .. }));
        // Shrinking without telling the tracker is caught too.
        assert!(matches!(t.sync_for(&[1]).context, ContextSync::Full { .. }));
    }

    #[test]
    fn accepted_draft_tokens_are_not_sent_again_and_an_unanswered_draft_forces_full() {
        let mut t = ContextTracker::new();
        t.sync_for(&[1, 2, 3]);
        // Draft [4, 5, 6] at position 3: the gateway took 4 and 5 and chose 9 after them.
        t.draft_accepted(0, 2);
        assert_eq!(t.assumed_len(), Some(5));
        assert_eq!(t.sync_for(&[1, 2, 3, 4, 5, 9]).context, delta(5, &[9]));
        // An answer for an older seq changes nothing.
        t.draft_accepted(0, 3);
        assert_eq!(t.assumed_len(), Some(6));
        t.draft_unresolved(0);
        assert_eq!(t.assumed_len(), Some(6), "a stale seq does not reset");
        t.draft_unresolved(1);
        assert!(matches!(t.sync_for(&[1, 2, 3, 4, 5, 9, 7]).context, ContextSync::Full { .. }));
    }

    /// Edge and gateway together, with escalations whose requests are lost or replies late:
    /// the gateway's copy must equal the device's context whenever it accepts a sync.
    #[test]
    fn converges_with_lost_requests() {
        let mut t = ContextTracker::new();
        let mut g = SessionContext::new();
        let mut device: Vec<u32> = Vec::new();
        for step in 0u32..200 {
            device.push(step * 7 % 1000);
            let out = t.sync_for(&device);
            let lost = step % 5 == 3; // request never reaches the gateway
            if lost {
                continue;
            }
            match g.apply(out.seq, &out.context, 10_000) {
                Ok(()) => {
                    assert_eq!(g.tokens(), device.as_slice());
                    if step % 4 != 0 {
                        t.acknowledge(out.seq); // else the reply is late: fallback
                    }
                }
                Err(ContextError::Missing { held_len }) => {
                    assert!(t.context_missing(out.seq, held_len));
                    let retry = t.sync_for(&device);
                    g.apply(retry.seq, &retry.context, 10_000).unwrap();
                    assert_eq!(g.tokens(), device.as_slice());
                }
                Err(e) => panic!("unexpected {e}"),
            }
        }
    }
}
