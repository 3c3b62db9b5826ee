//! Per-session release of replies in seq order.
//!
//! Each escalation travels on its own QUIC stream, so replies can arrive in any order, and a
//! reply may arrive after the device already resolved that position itself (fallback on
//! deadline or `Busy`). Every seq is resolved exactly once, by reply or by fallback; this
//! buffer holds early replies until all lower seqs are resolved and silently drops late ones.

use std::collections::BTreeMap;

/// Why an item could not be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReorderError {
    /// The seq is too far ahead of the next one to release; accepting it could let a
    /// misbehaving peer grow the buffer without bound.
    #[error("seq {seq} is outside the reorder window [{next}, {next} + {capacity})")]
    Full {
        /// The seq offered.
        seq: u32,
        /// Next seq to release.
        next: u64,
        /// Window size.
        capacity: usize,
    },
}

/// What happened to an inserted reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// Held until its turn (or ready now: call [`ReorderBuffer::pop_ready`]).
    Queued,
    /// Dropped: the seq was already released or resolved by fallback.
    Late,
    /// Dropped: a reply for this seq is already held.
    Duplicate,
}

#[derive(Debug, Clone)]
enum Slot<T> {
    Reply(T),
    Resolved,
}

/// Releases replies strictly in seq order, dropping those for seqs resolved locally.
#[derive(Debug, Clone)]
pub struct ReorderBuffer<T> {
    /// Next seq to release. u64 so that seq u32::MAX can be passed without overflow.
    next: u64,
    /// Seqs in [next, next + capacity) that have a reply or were resolved.
    slots: BTreeMap<u64, Slot<T>>,
    capacity: usize,
}

impl<T> ReorderBuffer<T> {
    /// A buffer whose first seq is `first_seq`, holding at most `capacity` seqs ahead
    /// (at least 1).
    pub fn new(first_seq: u32, capacity: usize) -> Self {
        Self { next: u64::from(first_seq), slots: BTreeMap::new(), capacity: capacity.max(1) }
    }

    /// The next seq to be released (u64: it passes u32::MAX after the last seq).
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// Seqs held (replies waiting and fallbacks recorded ahead of the next seq).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn check_window(&self, seq: u32) -> Result<u64, ReorderError> {
        let s = u64::from(seq);
        let cap = u64::try_from(self.capacity).unwrap_or(u64::MAX);
        if s >= self.next.saturating_add(cap) {
            return Err(ReorderError::Full { seq, next: self.next, capacity: self.capacity });
        }
        Ok(s)
    }

    /// Offer the reply for `seq`. Late and duplicate replies are dropped (not errors: the
    /// network may deliver them); only a seq beyond the window is an error.
    pub fn insert(&mut self, seq: u32, item: T) -> Result<Inserted, ReorderError> {
        let s = u64::from(seq);
        if s < self.next {
            return Ok(Inserted::Late);
        }
        let s = self.check_window(seq)?;
        match self.slots.get(&s) {
            Some(Slot::Resolved) => Ok(Inserted::Late),
            Some(Slot::Reply(_)) => Ok(Inserted::Duplicate),
            None => {
                self.slots.insert(s, Slot::Reply(item));
                Ok(Inserted::Queued)
            }
        }
    }

    /// The device resolved `seq` itself (fallback): its reply, held or future, is dropped.
    /// Returns the held reply if one was waiting, so the caller can count the wasted work.
    pub fn mark_resolved(&mut self, seq: u32) -> Result<Option<T>, ReorderError> {
        let s = u64::from(seq);
        if s < self.next {
            return Ok(None);
        }
        let s = self.check_window(seq)?;
        match self.slots.insert(s, Slot::Resolved) {
            Some(Slot::Reply(item)) => Ok(Some(item)),
            _ => Ok(None),
        }
    }

    /// The next reply in seq order, if every lower seq is resolved. Call until `None`.
    pub fn pop_ready(&mut self) -> Option<(u32, T)> {
        loop {
            let entry = self.slots.first_entry()?;
            if *entry.key() != self.next {
                return None;
            }
            let seq = self.next;
            let slot = entry.remove();
            self.next = self.next.saturating_add(1);
            if let Slot::Reply(item) = slot {
                // Keys are only ever made from u32 seqs.
                return u32::try_from(seq).ok().map(|s| (s, item));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(b: &mut ReorderBuffer<&'static str>) -> Vec<(u32, &'static str)> {
        std::iter::from_fn(|| b.pop_ready()).collect()
    }

    #[test]
    fn releases_in_order() {
        let mut b = ReorderBuffer::new(0, 8);
        assert_eq!(b.insert(2, "c"), Ok(Inserted::Queued));
        assert_eq!(b.insert(1, "b"), Ok(Inserted::Queued));
        assert!(drain(&mut b).is_empty());
        assert_eq!(b.insert(0, "a"), Ok(Inserted::Queued));
        assert_eq!(drain(&mut b), vec![(0, "a"), (1, "b"), (2, "c")]);
        assert_eq!(b.next_seq(), 3);
        assert!(b.is_empty());
    }

    #[test]
    fn fallback_drops_late_reply() {
        let mut b = ReorderBuffer::new(10, 8);
        assert_eq!(b.mark_resolved(10), Ok(None));
        assert_eq!(b.insert(11, "x"), Ok(Inserted::Queued));
        assert_eq!(drain(&mut b), vec![(11, "x")]);
        // The reply for 10 finally arrives: dropped.
        assert_eq!(b.insert(10, "late"), Ok(Inserted::Late));
        // Resolved ahead of time, reply arrives before its turn: dropped as well.
        b.mark_resolved(13).unwrap();
        assert_eq!(b.insert(13, "late"), Ok(Inserted::Late));
        assert_eq!(b.insert(12, "y"), Ok(Inserted::Queued));
        assert_eq!(drain(&mut b), vec![(12, "y")]);
        assert_eq!(b.next_seq(), 14);
        assert_eq!(b.len(), 0);
    }

    #[test]
    fn fallback_overrides_held_reply() {
        let mut b = ReorderBuffer::new(0, 8);
        b.insert(1, "held").unwrap();
        assert_eq!(b.mark_resolved(1), Ok(Some("held")));
        b.mark_resolved(0).unwrap();
        assert!(drain(&mut b).is_empty());
        assert_eq!(b.next_seq(), 2);
    }

    #[test]
    fn duplicates_and_window() {
        let mut b = ReorderBuffer::new(0, 2);
        assert_eq!(b.insert(1, "a"), Ok(Inserted::Queued));
        assert_eq!(b.insert(1, "b"), Ok(Inserted::Duplicate));
        assert_eq!(b.insert(2, "c"), Err(ReorderError::Full { seq: 2, next: 0, capacity: 2 }));
        assert!(b.mark_resolved(5).is_err());
        b.insert(0, "z").unwrap();
        assert_eq!(drain(&mut b), vec![(0, "z"), (1, "a")]);
        assert_eq!(b.insert(3, "d"), Ok(Inserted::Queued));
    }

    #[test]
    fn seq_u32_max() {
        let mut b = ReorderBuffer::new(u32::MAX, 4);
        b.insert(u32::MAX, "last").unwrap();
        assert_eq!(drain(&mut b), vec![(u32::MAX, "last")]);
        assert_eq!(b.insert(u32::MAX, "again"), Ok(Inserted::Late));
        assert_eq!(b.insert(0, "wrapped"), Ok(Inserted::Late));
    }
}
