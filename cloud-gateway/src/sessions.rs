//! Token contexts of every live session, shared by all connection actors (dashmap), and the
//! key that names a session everywhere in the gateway.
//!
//! The store is what makes escalations KV-free and small: the gateway keeps each session's
//! token ids, a device sends only what it appended since. Memory is bounded per session
//! (`max_context` tokens), per device (`max_sessions_per_device`) and in total
//! (`max_sessions`: ids are cheap to invent, so the per-device bound alone bounds nothing);
//! idle sessions expire.
//! [`SessionKey`] lives here, with the sessions, because the batcher and the backends only
//! carry it: what a session is, and who owns it, is decided at this layer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::protocol::{ContextError, ContextSync, SessionContext};
use dashmap::DashMap;

/// Identifies one session of one device across the gateway (store, batcher queue, backend
/// caches): device ids are only unique per gateway, session ids only per device.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    /// The device, as accepted at `Hello`.
    pub device: Arc<str>,
    /// The device's own session id.
    pub session_id: u64,
}

struct Entry {
    ctx: SessionContext,
    last_used: Instant,
}

/// Why an escalation's context could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Protocol-level context error (missing base, replay, out of order, too long, ...).
    #[error(transparent)]
    Context(#[from] ContextError),
    /// The device already has as many sessions as allowed.
    #[error("too many sessions for this device (limit {0})")]
    TooManySessions(usize),
    /// The gateway holds as many sessions as it may, all devices together.
    #[error("the gateway holds as many sessions as it may (limit {0})")]
    GatewayFull(usize),
}

/// The shared session store: one per gateway, used concurrently by every connection actor.
pub struct SessionStore {
    sessions: DashMap<SessionKey, Entry>,
    per_device: DashMap<Arc<str>, usize>,
    max_context: usize,
    max_sessions_per_device: usize,
    max_sessions: usize,
}

impl SessionStore {
    /// An empty store with the given bounds, and no total bound but the per-device one.
    pub fn new(max_context: usize, max_sessions_per_device: usize) -> Self {
        Self::with_total(max_context, max_sessions_per_device, usize::MAX)
    }

    /// An empty store holding at most `max_sessions` sessions in all.
    pub fn with_total(max_context: usize, max_sessions_per_device: usize, max_sessions: usize) -> Self {
        Self { sessions: DashMap::new(), per_device: DashMap::new(), max_context, max_sessions_per_device, max_sessions }
    }

    /// Apply an escalation's context sync and return a snapshot of the session's whole context.
    ///
    /// On error nothing changes, so a rejected frame loses nothing the device relied on.
    pub fn apply(&self, key: &SessionKey, seq: u32, sync: &ContextSync, now: Instant) -> Result<Arc<[u32]>, StoreError> {
        if let Some(mut e) = self.sessions.get_mut(key) {
            e.ctx.apply(seq, sync, self.max_context)?;
            e.last_used = now;
            return Ok(Arc::from(e.ctx.tokens()));
        }
        let mut ctx = SessionContext::new();
        ctx.apply(seq, sync, self.max_context)?;
        let snapshot: Arc<[u32]> = Arc::from(ctx.tokens());
        // Checked before the insert, so concurrent new sessions may pass it together: the
        // total can exceed the bound by at most the number of devices creating one at once.
        if self.sessions.len() >= self.max_sessions {
            metrics::counter!("duet_gateway_sessions_refused_total", "reason" => "gateway_full").increment(1);
            return Err(StoreError::GatewayFull(self.max_sessions));
        }
        {
            let mut count = self.per_device.entry(key.device.clone()).or_insert(0);
            if *count >= self.max_sessions_per_device {
                return Err(StoreError::TooManySessions(self.max_sessions_per_device));
            }
            *count += 1;
        }
        self.sessions.insert(key.clone(), Entry { ctx, last_used: now });
        metrics::gauge!("duet_gateway_sessions").set(self.sessions.len() as f64);
        Ok(snapshot)
    }

    /// Append the draft tokens the LLM accepted for escalation `seq`, applied at `base_len`
    /// tokens (see [`SessionContext::append_accepted`]); whether it did.
    pub fn append_accepted(&self, key: &SessionKey, seq: u32, base_len: usize, accepted: &[u32]) -> bool {
        self.sessions.get_mut(key).is_some_and(|mut e| e.ctx.append_accepted(seq, base_len, accepted, self.max_context))
    }

    /// Forget a session (device said `EndSession`, or it expired). Returns whether it existed.
    pub fn remove(&self, key: &SessionKey) -> bool {
        let existed = self.sessions.remove(key).is_some();
        if existed {
            if let Some(mut c) = self.per_device.get_mut(&key.device) {
                *c = c.saturating_sub(1);
            }
            self.per_device.remove_if(&key.device, |_, c| *c == 0);
            metrics::gauge!("duet_gateway_sessions").set(self.sessions.len() as f64);
        }
        existed
    }

    /// Remove sessions idle longer than `idle`; returns their keys.
    pub fn expire_idle(&self, now: Instant, idle: Duration) -> Vec<SessionKey> {
        let stale: Vec<SessionKey> =
            self.sessions.iter().filter(|e| now.saturating_duration_since(e.last_used) > idle).map(|e| e.key().clone()).collect();
        for k in &stale {
            self.remove(k);
        }
        if !stale.is_empty() {
            metrics::counter!("duet_gateway_sessions_expired_total").increment(stale.len() as u64);
        }
        stale
    }

    /// Live sessions (tests and diagnostics).
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether no session is live.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Tokens held for a session (tests and diagnostics).
    pub fn held_len(&self, key: &SessionKey) -> Option<usize> {
        self.sessions.get(key).map(|e| e.ctx.tokens().len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::protocol::TokenIds;

    fn key(d: &str, s: u64) -> SessionKey {
        SessionKey { device: Arc::from(d), session_id: s }
    }

    #[test]
    fn delta_extends_and_missing_base_is_refused_without_change() {
        let st = SessionStore::new(100, 4);
        let k = key("d", 1);
        let now = Instant::now();
        let snap = st.apply(&k, 0, &ContextSync::Full { tokens: TokenIds(vec![1, 2, 3]) }, now).unwrap();
        assert_eq!(&snap[..], &[1, 2, 3]);
        let snap = st.apply(&k, 1, &ContextSync::Delta { base_len: 3, tokens: TokenIds(vec![4]) }, now).unwrap();
        assert_eq!(&snap[..], &[1, 2, 3, 4]);
        assert!(st.apply(&k, 2, &ContextSync::Delta { base_len: 9, tokens: TokenIds(vec![5]) }, now).is_err());
        assert_eq!(st.held_len(&k), Some(4));
    }

    #[test]
    fn per_device_session_limit_and_expiry() {
        let st = SessionStore::new(100, 2);
        let t0 = Instant::now();
        let full = ContextSync::Full { tokens: TokenIds(vec![1]) };
        st.apply(&key("d", 1), 0, &full, t0).unwrap();
        st.apply(&key("d", 2), 0, &full, t0).unwrap();
        assert!(matches!(st.apply(&key("d", 3), 0, &full, t0), Err(StoreError::TooManySessions(2))));
        st.apply(&key("other", 3), 0, &full, t0).unwrap();
        let gone = st.expire_idle(t0 + Duration::from_secs(10), Duration::from_secs(5));
        assert_eq!(gone.len(), 3);
        assert!(st.is_empty());
        st.apply(&key("d", 3), 0, &full, t0).unwrap();
    }

    #[test]
    fn the_total_session_bound_holds_against_invented_devices_and_frees_on_expiry() {
        let st = SessionStore::with_total(100, 2, 3);
        let t0 = Instant::now();
        let full = ContextSync::Full { tokens: TokenIds(vec![1, 2]) };
        for d in ["a", "b", "c"] {
            st.apply(&key(d, 1), 0, &full, t0).unwrap();
        }
        // An invented device id gets nothing once the gateway is full.
        assert!(matches!(st.apply(&key("invented-1", 1), 0, &full, t0), Err(StoreError::GatewayFull(3))));
        assert_eq!(st.len(), 3);
        // An existing session still grows.
        st.apply(&key("a", 1), 1, &ContextSync::Delta { base_len: 2, tokens: TokenIds(vec![3]) }, t0).unwrap();
        // Once the flood's sessions expire (or end), new ones are served again.
        assert_eq!(st.expire_idle(t0 + Duration::from_secs(10), Duration::from_secs(5)).len(), 3);
        st.apply(&key("well-behaved", 1), 0, &full, t0 + Duration::from_secs(10)).unwrap();
        assert_eq!(st.len(), 1);
    }
}
