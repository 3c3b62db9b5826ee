//! The gateway's copy of one session's token context, and the rules for changing it.
//!
//! The gateway never generates into this context: the token it returns may be discarded by
//! the device (fallback on deadline), so the device's next delta carries whatever token it
//! actually kept. The copy is therefore always a prefix of the device's sequence, which is
//! why equal lengths imply equal contents and a length check suffices. The one exception is
//! a draft the LLM verified (v5): its accepted tokens are appended at once
//! ([`SessionContext::append_accepted`]), because the device commits exactly those tokens
//! when it reads the answer, and if it does not read it (a timeout) it resyncs with `Full`.
//!
//! Applying is all-or-nothing: a rejected sync leaves the context and the seq untouched.
//! The gateway should apply an escalation's sync before admission control, so that a `Busy`
//! answer does not leave the device's optimistic view (see
//! [`ContextTracker`](super::ContextTracker)) one delta ahead.

use super::messages::{ContextSync, ErrorCode, Frame};

/// Why a sync was not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    /// The delta assumes a length the gateway does not hold; answer `ContextMissing`.
    #[error("delta assumes a context the gateway does not hold (it holds {held_len} tokens)")]
    Missing {
        /// What the gateway holds.
        held_len: u32,
    },
    /// The resulting context would exceed the limit.
    #[error("context of {len} tokens exceeds the limit of {max}")]
    TooLong {
        /// Resulting length (saturated on overflow).
        len: usize,
        /// Limit.
        max: usize,
    },
    /// The seq equals the last applied one: a duplicate.
    #[error("seq {seq} was already applied")]
    Replayed {
        /// The duplicate seq.
        seq: u32,
    },
    /// The seq is below the last applied one: a stale escalation overtaken by a newer one.
    #[error("seq {seq} is older than the last applied seq {last}")]
    OutOfOrder {
        /// The stale seq.
        seq: u32,
        /// Last applied seq.
        last: u32,
    },
}

impl ContextError {
    /// The frame to answer with, so every gateway answers the same way.
    pub fn reply(&self, session_id: u64, seq: u32) -> Frame {
        let code = match *self {
            ContextError::Missing { held_len } => return Frame::ContextMissing { session_id, seq, held_len },
            ContextError::TooLong { .. } => ErrorCode::ContextTooLong,
            ContextError::Replayed { .. } => ErrorCode::Replayed,
            ContextError::OutOfOrder { .. } => ErrorCode::OutOfOrder,
        };
        Frame::Error { session_id: Some(session_id), seq: Some(seq), code, message: self.to_string() }
    }
}

/// One session's tokens as the gateway holds them, plus the last applied seq.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionContext {
    tokens: Vec<u32>,
    last_seq: Option<u32>,
}

impl SessionContext {
    /// An empty context; a `Delta { base_len: 0 }` is as good as a `Full` on it.
    pub fn new() -> Self {
        Self::default()
    }

    /// The context, for building the backend's input.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Held length as the wire reports it (saturated; the limit keeps it far below u32).
    pub fn held_len(&self) -> u32 {
        u32::try_from(self.tokens.len()).unwrap_or(u32::MAX)
    }

    /// The last seq applied, `None` before the first.
    pub fn last_seq(&self) -> Option<u32> {
        self.last_seq
    }

    /// Bytes of heap held, for per-session memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.tokens.capacity().saturating_mul(std::mem::size_of::<u32>())
    }

    /// Apply escalation `seq`'s sync: `Full` replaces, `Delta` appends if its `base_len`
    /// equals the held length. Seqs must strictly increase; gaps are fine (escalations the
    /// device abandoned before they were sent).
    pub fn apply(&mut self, seq: u32, sync: &ContextSync, max_tokens: usize) -> Result<(), ContextError> {
        if let Some(last) = self.last_seq {
            if seq == last {
                return Err(ContextError::Replayed { seq });
            }
            if seq < last {
                return Err(ContextError::OutOfOrder { seq, last });
            }
        }
        if let ContextSync::Delta { base_len, .. } = sync {
            if usize::try_from(*base_len).ok() != Some(self.tokens.len()) {
                return Err(ContextError::Missing { held_len: self.held_len() });
            }
        }
        let len = sync.resulting_len().unwrap_or(usize::MAX);
        if len > max_tokens {
            return Err(ContextError::TooLong { len, max: max_tokens });
        }
        match sync {
            ContextSync::Full { tokens } => {
                self.tokens.clear();
                self.tokens.extend_from_slice(tokens.as_slice());
            }
            ContextSync::Delta { tokens, .. } => self.tokens.extend_from_slice(tokens.as_slice()),
        }
        self.last_seq = Some(seq);
        Ok(())
    }
}

impl SessionContext {
    /// Append the draft tokens the LLM accepted for escalation `seq` (answered `Verified`),
    /// so the device's next delta need not carry them. Only right after `seq`'s sync was
    /// applied at `base_len` tokens (the device appends the same tokens when it reads the
    /// answer); otherwise nothing changes and the device's next delta finds the mismatch.
    /// Returns whether it appended.
    pub fn append_accepted(&mut self, seq: u32, base_len: usize, accepted: &[u32], max_tokens: usize) -> bool {
        let fits = base_len.saturating_add(accepted.len()) <= max_tokens;
        if self.last_seq != Some(seq) || self.tokens.len() != base_len || !fits {
            return false;
        }
        self.tokens.extend_from_slice(accepted);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(base_len: u32, ids: &[u32]) -> ContextSync {
        ContextSync::Delta { base_len, tokens: ids.into() }
    }

    fn full(ids: &[u32]) -> ContextSync {
        ContextSync::Full { tokens: ids.into() }
    }

    #[test]
    fn full_then_deltas() {
        let mut c = SessionContext::new();
        c.apply(0, &full(&[1, 2, 3]), 100).unwrap();
        c.apply(1, &delta(3, &[4, 5]), 100).unwrap();
        c.apply(5, &delta(5, &[]), 100).unwrap();
        assert_eq!(c.tokens(), &[1, 2, 3, 4, 5]);
        assert_eq!(c.last_seq(), Some(5));
        c.apply(6, &full(&[9]), 100).unwrap();
        assert_eq!(c.tokens(), &[9]);
        assert!(c.heap_bytes() >= 4);
    }

    #[test]
    fn delta_on_empty_session() {
        let mut c = SessionContext::new();
        assert_eq!(c.apply(3, &delta(2, &[1]), 100), Err(ContextError::Missing { held_len: 0 }));
        c.apply(3, &delta(0, &[1]), 100).unwrap();
        assert_eq!(c.tokens(), &[1]);
    }

    #[test]
    fn mismatched_base_is_missing_and_changes_nothing() {
        let mut c = SessionContext::new();
        c.apply(1, &full(&[1, 2]), 100).unwrap();
        let before = c.clone();
        assert_eq!(c.apply(2, &delta(3, &[7]), 100), Err(ContextError::Missing { held_len: 2 }));
        assert_eq!(c.apply(2, &delta(1, &[7]), 100), Err(ContextError::Missing { held_len: 2 }));
        assert_eq!(c, before);
        // The failed seq is not consumed: a resend with the same seq works.
        c.apply(2, &full(&[1, 2, 7]), 100).unwrap();
    }

    #[test]
    fn seq_rules() {
        let mut c = SessionContext::new();
        c.apply(5, &full(&[1]), 100).unwrap();
        assert_eq!(c.apply(5, &delta(1, &[2]), 100), Err(ContextError::Replayed { seq: 5 }));
        assert_eq!(c.apply(4, &delta(1, &[2]), 100), Err(ContextError::OutOfOrder { seq: 4, last: 5 }));
        c.apply(u32::MAX, &delta(1, &[2]), 100).unwrap();
        assert_eq!(c.apply(u32::MAX, &delta(2, &[]), 100), Err(ContextError::Replayed { seq: u32::MAX }));
    }

    #[test]
    fn too_long() {
        let mut c = SessionContext::new();
        c.apply(1, &full(&[1, 2, 3]), 4).unwrap();
        assert_eq!(c.apply(2, &delta(3, &[4, 5]), 4), Err(ContextError::TooLong { len: 5, max: 4 }));
        assert_eq!(c.apply(2, &full(&[0; 5]), 4), Err(ContextError::TooLong { len: 5, max: 4 }));
        assert_eq!(c.tokens(), &[1, 2, 3]);
    }

    #[test]
    fn replies() {
        let m = ContextError::Missing { held_len: 7 }.reply(1, 2);
        assert_eq!(m, Frame::ContextMissing { session_id: 1, seq: 2, held_len: 7 });
        let r = ContextError::Replayed { seq: 2 }.reply(1, 2);
        assert!(matches!(r, Frame::Error { code: ErrorCode::Replayed, session_id: Some(1), seq: Some(2), .. }));
        let t = ContextError::TooLong { len: 9, max: 8 }.reply(1, 2);
        assert!(matches!(t, Frame::Error { code: ErrorCode::ContextTooLong, .. }));
        let o = ContextError::OutOfOrder { seq: 1, last: 2 }.reply(1, 1);
        assert!(matches!(o, Frame::Error { code: ErrorCode::OutOfOrder, .. }));
    }

    #[test]
    fn accepted_draft_tokens_are_appended_only_right_after_their_sync() {
        let mut g = SessionContext::new();
        g.apply(1, &ContextSync::Full { tokens: vec![1, 2].into() }, 100).unwrap();
        assert!(g.append_accepted(1, 2, &[3, 4], 100));
        assert_eq!(g.tokens(), &[1, 2, 3, 4]);
        assert!(!g.append_accepted(1, 2, &[5], 100), "the held length moved on");
        g.apply(2, &delta(4, &[9]), 100).unwrap();
        assert!(!g.append_accepted(1, 5, &[5], 100), "an older seq");
        assert!(!g.append_accepted(2, 5, &[5; 10], 10), "past the limit");
        assert_eq!(g.tokens(), &[1, 2, 3, 4, 9]);
    }
}
