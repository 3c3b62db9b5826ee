//! Each session's prefill state, as the batcher knows it: how much of the session's context the
//! backend has computed, and what the session's own admitted work (queued or running) will
//! bring it to.
//!
//! Admission needs both. An escalation costs the tokens of its context that neither the backend
//! holds nor the session's earlier admitted work will compute: a device's first hard token,
//! sent while its prompt's pre-sync is still being prefilled, costs its short delta, not the
//! prompt again. And that pre-sync is work the device's own deadline already covers (the
//! device sizes it for the prefill it has sent: ARCHITECTURE.md, "Deadlines"), so admission
//! weighs the escalation against the *other* sessions' work ahead ([`super::admission::others`]),
//! never the session's own twice.
//!
//! Entries are written when work is admitted and released (through [`SessionClaim`], dropped
//! with the escalation whichever way it ends) and when batches complete; a session's entry
//! goes when it ends or expires, so the map is bounded by the session store's bounds.
#![cfg_attr(not(test), deny(clippy::disallowed_methods))]

use std::sync::Arc;

use dashmap::DashMap;

use super::admission::{Ahead, DeviceWork};
use crate::sessions::SessionKey;

/// One session's prefill state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionWork {
    /// Tokens of the session's context the backend has computed (as far as the batcher knows).
    pub computed: usize,
    /// Context length the session's admitted work reaches (0 when none is admitted).
    pub covered: usize,
    /// The session's admitted work not answered yet, in the terms admission weighs.
    pub pending: Ahead,
}

/// The per-session prefill state of every session the batcher has seen.
#[derive(Debug, Default)]
pub struct SessionLedger {
    sessions: DashMap<SessionKey, SessionWork>,
    /// Each device's admitted work, its sessions together (an entry only while it has some:
    /// bounded by the admitted work).
    devices: DashMap<Arc<str>, Ahead>,
}

impl SessionLedger {
    /// The state of `session` (all zero if unknown).
    pub fn get(&self, session: &SessionKey) -> SessionWork {
        self.sessions.get(session).map_or_else(SessionWork::default, |w| *w)
    }

    /// The backend has computed the first `len` tokens of `session`'s context.
    pub fn computed(&self, session: &SessionKey, len: usize) {
        self.sessions.entry(session.clone()).or_default().computed = len;
    }

    /// The backend's state for `session` is gone or unknown (a failed prefill).
    pub fn forget_computed(&self, session: &SessionKey) {
        if let Some(mut w) = self.sessions.get_mut(session) {
            w.computed = 0;
        }
        self.sessions.remove_if(session, |_, w| *w == SessionWork::default());
    }

    /// The session ended: forget it.
    pub fn remove(&self, session: &SessionKey) {
        self.sessions.remove(session);
    }

    /// Whether no session (nor device) has an entry.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty() && self.devices.is_empty()
    }

    /// `device`'s admitted work, and how many devices have work admitted.
    pub fn device(&self, device: &str) -> DeviceWork {
        DeviceWork { own: self.devices.get(device).map_or_else(Ahead::default, |w| *w), devices: self.devices.len() }
    }

    /// Count `work` (an admitted escalation reaching `len` tokens) as `session`'s own until the
    /// returned claim is dropped.
    pub fn claim(self: &Arc<Self>, session: &SessionKey, len: usize, work: Ahead) -> SessionClaim {
        let mut w = self.sessions.entry(session.clone()).or_default();
        w.covered = w.covered.max(len);
        w.pending = w.pending.plus(work);
        drop(w);
        let mut d = self.devices.entry(session.device.clone()).or_default();
        *d = d.plus(work);
        drop(d);
        SessionClaim { ledger: self.clone(), session: session.clone(), work }
    }

    fn release(&self, session: &SessionKey, work: Ahead) {
        if let Some(mut d) = self.devices.get_mut(&session.device) {
            *d = d.minus(work);
        }
        self.devices.remove_if(&session.device, |_, d| d.rows == 0);
        if let Some(mut w) = self.sessions.get_mut(session) {
            w.pending = w.pending.minus(work);
            if w.pending.rows == 0 {
                w.covered = 0;
            }
        }
        self.sessions.remove_if(session, |_, w| *w == SessionWork::default());
    }
}

/// A session's share of admitted work, released when dropped (with the escalation that holds
/// it, however it ends).
#[derive(Debug)]
pub struct SessionClaim {
    ledger: Arc<SessionLedger>,
    session: SessionKey,
    work: Ahead,
}

impl Drop for SessionClaim {
    fn drop(&mut self) {
        self.ledger.release(&self.session, self.work);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: u64) -> SessionKey {
        SessionKey { device: Arc::from("d"), session_id: id }
    }

    #[test]
    fn a_claim_counts_as_the_sessions_own_work_until_dropped_and_leaves_no_entry() {
        let ledger = Arc::new(SessionLedger::default());
        let presync = Ahead { rows: 1, long_rows: 1, long_tokens: 130, ..Ahead::default() };
        let claim = ledger.claim(&key(1), 130, presync);
        let delta = ledger.claim(&key(1), 134, Ahead { rows: 1, tokens: 4, ..Ahead::default() });
        let w = ledger.get(&key(1));
        assert_eq!((w.covered, w.pending.rows, w.pending.tokens, w.pending.long_tokens), (134, 2, 4, 130));
        assert_eq!(ledger.get(&key(2)), SessionWork::default(), "another session has none");
        let other = ledger.claim(&SessionKey { device: Arc::from("e"), session_id: 1 }, 8, Ahead { rows: 1, tokens: 8, ..Ahead::default() });
        let d = ledger.device("d");
        assert_eq!((d.own.rows, d.own.tokens, d.own.long_tokens, d.devices), (2, 4, 130, 2), "a device's sessions together");
        drop(claim);
        drop(delta);
        assert_eq!((ledger.device("d").own, ledger.device("d").devices), (Ahead::default(), 1), "a device with no work admitted has no entry");
        drop(other);
        assert!(ledger.is_empty(), "nothing is kept for a session with no work and nothing computed");
    }

    #[test]
    fn what_the_backend_computed_stays_until_the_session_ends() {
        let ledger = Arc::new(SessionLedger::default());
        drop(ledger.claim(&key(1), 10, Ahead { rows: 1, tokens: 10, ..Ahead::default() }));
        ledger.computed(&key(1), 10);
        assert_eq!(ledger.get(&key(1)).computed, 10);
        assert_eq!(ledger.get(&key(1)).covered, 0, "no admitted work covers anything");
        ledger.forget_computed(&key(1));
        assert!(ledger.is_empty());
        ledger.computed(&key(1), 12);
        ledger.remove(&key(1));
        assert!(ledger.is_empty());
    }
}
