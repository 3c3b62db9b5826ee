//! Token contexts of every live session, shared by all connection actors (dashmap), and the
//! key that names a session everywhere in the gateway.
//!
//! The store is what makes escalations KV-free and small: the gateway keeps each session's
//! token ids, a device sends only what it appended since. Memory is bounded per session
//! (`max_context` tokens), per device (`max_sessions_per_device`) and in total
//! (`max_sessions`); idle sessions expire.
//!
//! The total bound must not become a lever that locks devices out, since ids are cheap to
//! invent. Two rules keep it from that:
//! - **A new session is kept only once its work is admitted** ([`SessionStore::apply`] computes
//!   its context without storing it; [`SessionStore::admit`] stores it after the LLM path took
//!   the escalation). Escalations refused `Busy` leave nothing behind.
//! - **At the bound, the heaviest holder pays**: a new session takes the place of the least
//!   recently used sessions of the source address holding the most sessions
//!   ([`eviction_victims`]), not of whoever came last. A flood from one address evicts its own
//!   sessions; a new device is served. The evicted devices' next escalation finds its context
//!   missing and re-sends it in full, as after any reconnect.
//!
//! [`SessionKey`] lives here, with the sessions, because the batcher and the backends only
//! carry it: what a session is, and who owns it, is decided at this layer.

use std::net::IpAddr;
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
    source: IpAddr,
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
}

/// An escalation's context, applied: what the LLM runs on, and for a session the store does
/// not hold yet, its context, stored only by [`SessionStore::admit`].
#[derive(Debug)]
pub struct Applied {
    /// The session's whole context.
    pub snapshot: Arc<[u32]>,
    new: Option<SessionContext>,
}

impl Applied {
    /// Whether this escalation starts a session the store does not hold yet.
    pub fn is_new(&self) -> bool {
        self.new.is_some()
    }
}

/// How many of the heaviest holder's sessions one eviction frees: a sixteenth of them (at
/// least one), so that a flood at the bound pays one scan per sixteenth of its sessions
/// rather than one per new session.
const EVICTION_SHARE: usize = 16;

/// The sessions to evict so that a new one fits: of `holder`'s sessions (key, last use), the
/// least recently used sixteenth, at least one, oldest first.
pub fn eviction_victims(mut holder: Vec<(SessionKey, Instant)>) -> Vec<SessionKey> {
    let count = (holder.len() / EVICTION_SHARE).max(1).min(holder.len());
    if count < holder.len() {
        holder.select_nth_unstable_by_key(count, |(_, used)| *used);
        holder.truncate(count);
    }
    holder.sort_by_key(|(_, used)| *used);
    holder.into_iter().map(|(key, _)| key).collect()
}

/// The shared session store: one per gateway, used concurrently by every connection actor.
pub struct SessionStore {
    sessions: DashMap<SessionKey, Entry>,
    per_device: DashMap<Arc<str>, usize>,
    per_source: DashMap<IpAddr, usize>,
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
        Self { sessions: DashMap::new(), per_device: DashMap::new(), per_source: DashMap::new(), max_context, max_sessions_per_device, max_sessions }
    }

    /// Apply an escalation's context sync: a held session's context grows in place; a new
    /// session's is computed but not stored (see [`Self::admit`]).
    ///
    /// On error nothing changes, so a rejected frame loses nothing the device relied on.
    pub fn apply(&self, key: &SessionKey, seq: u32, sync: &ContextSync, now: Instant) -> Result<Applied, StoreError> {
        if let Some(mut e) = self.sessions.get_mut(key) {
            e.ctx.apply(seq, sync, self.max_context)?;
            e.last_used = now;
            return Ok(Applied { snapshot: Arc::from(e.ctx.tokens()), new: None });
        }
        if self.per_device.get(&key.device).is_some_and(|c| *c >= self.max_sessions_per_device) {
            return Err(StoreError::TooManySessions(self.max_sessions_per_device));
        }
        let mut ctx = SessionContext::new();
        ctx.apply(seq, sync, self.max_context)?;
        Ok(Applied { snapshot: Arc::from(ctx.tokens()), new: Some(ctx) })
    }

    /// Keep a new session whose escalation the LLM path admitted (nothing to do for a held
    /// one), opened from `source`. At the total bound the heaviest source's least recently used
    /// sessions make room; their keys are returned, for the LLM path to forget.
    pub fn admit(&self, key: &SessionKey, applied: Applied, source: IpAddr, now: Instant) -> Result<Vec<SessionKey>, StoreError> {
        let Some(ctx) = applied.new else { return Ok(Vec::new()) };
        let source = source.to_canonical();
        {
            let mut count = self.per_device.entry(key.device.clone()).or_insert(0);
            if *count >= self.max_sessions_per_device {
                return Err(StoreError::TooManySessions(self.max_sessions_per_device));
            }
            *count += 1;
        }
        // Checked before the insert, so concurrent new sessions may pass it together: the
        // total can exceed the bound by at most the number of devices creating one at once.
        let evicted = if self.sessions.len() >= self.max_sessions { self.evict_from_heaviest() } else { Vec::new() };
        *self.per_source.entry(source).or_insert(0) += 1;
        if let Some(replaced) = self.sessions.insert(key.clone(), Entry { ctx, last_used: now, source }) {
            // Another escalation of this session was admitted meanwhile: it holds the place.
            self.uncount(&key.device, replaced.source);
        }
        metrics::gauge!("duet_gateway_sessions").set(self.sessions.len() as f64);
        Ok(evicted)
    }

    /// Free room at the total bound from the source holding the most sessions.
    fn evict_from_heaviest(&self) -> Vec<SessionKey> {
        let Some(heaviest) = self.per_source.iter().max_by_key(|c| *c.value()).map(|c| *c.key()) else { return Vec::new() };
        let held: Vec<(SessionKey, Instant)> = self.sessions.iter().filter(|e| e.source == heaviest).map(|e| (e.key().clone(), e.last_used)).collect();
        let victims = eviction_victims(held);
        for k in &victims {
            self.remove(k);
        }
        metrics::counter!("duet_gateway_sessions_evicted_total").increment(victims.len() as u64);
        tracing::debug!(source = %heaviest, evicted = victims.len(), "session store at its bound: the heaviest source's least recently used sessions make room");
        victims
    }

    /// Append the draft tokens the LLM accepted for escalation `seq`, applied at `base_len`
    /// tokens (see [`SessionContext::append_accepted`]); whether it did.
    pub fn append_accepted(&self, key: &SessionKey, seq: u32, base_len: usize, accepted: &[u32]) -> bool {
        self.sessions.get_mut(key).is_some_and(|mut e| e.ctx.append_accepted(seq, base_len, accepted, self.max_context))
    }

    /// Forget a session (device said `EndSession`, it expired or was evicted). Returns whether
    /// it existed.
    pub fn remove(&self, key: &SessionKey) -> bool {
        let removed = self.sessions.remove(key);
        if let Some((_, entry)) = &removed {
            self.uncount(&key.device, entry.source);
            metrics::gauge!("duet_gateway_sessions").set(self.sessions.len() as f64);
        }
        removed.is_some()
    }

    fn uncount(&self, device: &Arc<str>, source: IpAddr) {
        if let Some(mut c) = self.per_device.get_mut(device) {
            *c = c.saturating_sub(1);
        }
        self.per_device.remove_if(device, |_, c| *c == 0);
        if let Some(mut c) = self.per_source.get_mut(&source) {
            *c = c.saturating_sub(1);
        }
        self.per_source.remove_if(&source, |_, c| *c == 0);
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

    /// Source addresses holding sessions (the per-source map's size: it shrinks as they go).
    pub fn sources(&self) -> usize {
        self.per_source.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::protocol::TokenIds;

    fn key(d: &str, s: u64) -> SessionKey {
        SessionKey { device: Arc::from(d), session_id: s }
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    /// Apply and, as when the LLM path admits the work, keep.
    fn open(st: &SessionStore, k: &SessionKey, seq: u32, sync: &ContextSync, source: IpAddr, now: Instant) -> Result<Arc<[u32]>, StoreError> {
        let applied = st.apply(k, seq, sync, now)?;
        let snapshot = applied.snapshot.clone();
        st.admit(k, applied, source, now)?;
        Ok(snapshot)
    }

    #[test]
    fn delta_extends_and_missing_base_is_refused_without_change() {
        let st = SessionStore::new(100, 4);
        let k = key("d", 1);
        let now = Instant::now();
        let snap = open(&st, &k, 0, &ContextSync::Full { tokens: TokenIds(vec![1, 2, 3]) }, ip(1), now).unwrap();
        assert_eq!(&snap[..], &[1, 2, 3]);
        let snap = open(&st, &k, 1, &ContextSync::Delta { base_len: 3, tokens: TokenIds(vec![4]) }, ip(1), now).unwrap();
        assert_eq!(&snap[..], &[1, 2, 3, 4]);
        assert!(st.apply(&k, 2, &ContextSync::Delta { base_len: 9, tokens: TokenIds(vec![5]) }, now).is_err());
        assert_eq!(st.held_len(&k), Some(4));
    }

    #[test]
    fn a_new_session_whose_work_is_not_admitted_leaves_nothing_behind() {
        let st = SessionStore::with_total(100, 4, 8);
        let k = key("d", 1);
        let applied = st.apply(&k, 0, &ContextSync::Full { tokens: TokenIds(vec![1, 2]) }, Instant::now()).unwrap();
        assert!(applied.is_new());
        assert_eq!(&applied.snapshot[..], &[1, 2]);
        drop(applied); // refused Busy: never admitted
        assert!(st.is_empty());
        assert_eq!(st.held_len(&k), None);
        assert_eq!(st.sources(), 0);
    }

    #[test]
    fn per_device_session_limit_and_expiry() {
        let st = SessionStore::new(100, 2);
        let t0 = Instant::now();
        let full = ContextSync::Full { tokens: TokenIds(vec![1]) };
        open(&st, &key("d", 1), 0, &full, ip(1), t0).unwrap();
        open(&st, &key("d", 2), 0, &full, ip(1), t0).unwrap();
        assert!(matches!(st.apply(&key("d", 3), 0, &full, t0), Err(StoreError::TooManySessions(2))));
        open(&st, &key("other", 3), 0, &full, ip(2), t0).unwrap();
        let gone = st.expire_idle(t0 + Duration::from_secs(10), Duration::from_secs(5));
        assert_eq!(gone.len(), 3);
        assert!(st.is_empty());
        assert_eq!(st.sources(), 0, "the per-source counts go with the sessions");
        open(&st, &key("d", 3), 0, &full, ip(1), t0).unwrap();
    }

    #[test]
    fn at_the_bound_a_flood_of_invented_ids_evicts_its_own_sessions_and_a_new_device_is_served() {
        let (bound, flood, device) = (64, ip(66), ip(7));
        let st = SessionStore::with_total(100, 2, bound);
        let t0 = Instant::now();
        let full = ContextSync::Full { tokens: TokenIds(vec![1, 2]) };
        // A well-behaved device, then a flood of invented ids from one address filling the bound.
        open(&st, &key("well-behaved", 1), 0, &full, device, t0).unwrap();
        for i in 0..1000u64 {
            let evicted = open(&st, &key(&format!("invented-{i}"), 1), 0, &full, flood, t0 + Duration::from_millis(1 + i)).map(|_| ());
            assert!(evicted.is_ok(), "never refused for the total");
        }
        assert!(st.len() <= bound, "{} sessions held", st.len());
        assert_eq!(st.held_len(&key("well-behaved", 1)), Some(2), "the flood evicted only its own");
        // A new device's first session is stored, and the store stays bounded.
        let t1 = t0 + Duration::from_secs(2);
        open(&st, &key("new-device", 1), 0, &full, ip(8), t1).unwrap();
        assert_eq!(st.held_len(&key("new-device", 1)), Some(2));
        assert!(st.len() <= bound);
        // The well-behaved session still grows.
        open(&st, &key("well-behaved", 1), 1, &ContextSync::Delta { base_len: 2, tokens: TokenIds(vec![3]) }, device, t1).unwrap();
    }

    #[test]
    fn eviction_takes_the_least_recently_used_sixteenth_oldest_first() {
        let t0 = Instant::now();
        let held: Vec<(SessionKey, Instant)> = (0..32u64).rev().map(|i| (key("d", i), t0 + Duration::from_secs(i))).collect();
        assert_eq!(eviction_victims(held), vec![key("d", 0), key("d", 1)]);
        assert_eq!(eviction_victims(vec![(key("d", 5), t0)]), vec![key("d", 5)], "at least one");
        assert!(eviction_victims(Vec::new()).is_empty());
    }
}
