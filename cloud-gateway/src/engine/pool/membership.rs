//! Which workers the pool should hold, as engine addresses come and go.
//!
//! An engine given as `dns+http://name:port` is one worker per address the name resolves to
//! (a Kubernetes headless Service lists its pods' IPs), re-resolved periodically. Each address
//! goes through the start-up check before it takes sessions (the same vocabulary check as at
//! start-up, [`verify`](crate::engine::verify)), and one that disappears from the answer is
//! drained: no new picks, its requests in flight finish, then it is gone.
//!
//! This is the bookkeeping, with the rules in one place:
//!
//! - an address newly **desired** (resolved) is verified; only a verified one serves;
//! - a serving address that is no longer desired is **removed** (drained by the pool);
//! - an address still being verified when it disappears has its check **cancelled**;
//! - an address whose check failed is **refused** and checked again only after
//!   `retry_after`, while it is still desired (a pod serving another model stays out without
//!   being probed every tick); one that disappears is forgotten;
//! - a verification that completes for an address no longer tracked is dropped.
//!
//! Pure, as [`health`](super::health) and [`breaker`](super::breaker) are: no I/O, no clock
//! reads; the desired set and `now` come in as arguments (the discovery task resolves names and
//! owns the timer), so the rules are tested without DNS or sleeping.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Where one address stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Its start-up check is running.
    Verifying,
    /// Verified: a worker of the pool.
    Serving,
    /// Its check failed; checked again from `retry_at` if still desired.
    Refused {
        /// When it may be checked again.
        retry_at: Instant,
    },
}

/// What the caller must do after [`Membership::plan`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action<K> {
    /// Start the start-up check of this address.
    Verify(K),
    /// Stop its running check: the address is gone.
    Cancel(K),
    /// Drain and remove this worker: its address is gone.
    Remove(K),
}

/// How many addresses are in each state (the discovered-workers gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Workers of the pool.
    pub serving: usize,
    /// Being checked.
    pub verifying: usize,
    /// Refused, waiting for their next check.
    pub refused: usize,
}

/// The addresses the pool knows, keyed by `K` (a worker's label), and their states.
#[derive(Debug, Clone)]
pub struct Membership<K: Ord + Clone> {
    members: BTreeMap<K, MemberState>,
    retry_after: Duration,
}

impl<K: Ord + Clone> Membership<K> {
    /// Nothing known yet; a refused address is checked again `retry_after` after its refusal.
    pub fn new(retry_after: Duration) -> Self {
        Self { members: BTreeMap::new(), retry_after }
    }

    /// Bring the membership to `desired` (every address resolved now): what to verify, cancel
    /// and remove, in that order of kinds and by key within each. Verifications it asks for are
    /// marked [`MemberState::Verifying`] at once, so a second plan does not ask again.
    pub fn plan(&mut self, desired: &BTreeSet<K>, now: Instant) -> Vec<Action<K>> {
        let mut actions = Vec::new();
        for key in desired {
            match self.members.get(key) {
                None => actions.push(Action::Verify(key.clone())),
                Some(MemberState::Refused { retry_at }) if *retry_at <= now => actions.push(Action::Verify(key.clone())),
                Some(_) => {}
            }
        }
        for action in &actions {
            if let Action::Verify(key) = action {
                self.members.insert(key.clone(), MemberState::Verifying);
            }
        }
        let gone: Vec<K> = self.members.keys().filter(|k| !desired.contains(*k)).cloned().collect();
        let mut cancels = Vec::new();
        let mut removes = Vec::new();
        for key in gone {
            match self.members.remove(&key) {
                Some(MemberState::Verifying) => cancels.push(Action::Cancel(key)),
                Some(MemberState::Serving) => removes.push(Action::Remove(key)),
                Some(MemberState::Refused { .. }) | None => {}
            }
        }
        actions.extend(cancels);
        actions.extend(removes);
        actions
    }

    /// `key`'s check passed. `true` when the caller must add it to the pool (it was being
    /// verified and is still desired); `false` drops the result.
    pub fn verified(&mut self, key: &K) -> bool {
        match self.members.get_mut(key) {
            Some(state @ MemberState::Verifying) => {
                *state = MemberState::Serving;
                true
            }
            _ => false,
        }
    }

    /// `key`'s check failed at `now`: refused until `now + retry_after`.
    pub fn refused(&mut self, key: &K, now: Instant) {
        if let Some(state @ MemberState::Verifying) = self.members.get_mut(key) {
            *state = MemberState::Refused { retry_at: now + self.retry_after };
        }
    }

    /// `key`'s state, if it is tracked.
    pub fn state(&self, key: &K) -> Option<MemberState> {
        self.members.get(key).copied()
    }

    /// How many addresses are in each state.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for state in self.members.values() {
            match state {
                MemberState::Serving => c.serving += 1,
                MemberState::Verifying => c.verifying += 1,
                MemberState::Refused { .. } => c.refused += 1,
            }
        }
        c
    }
}

/// The desired addresses of one name after a lookup: the answer when it has any, otherwise the
/// previous set (a failed or empty lookup is more often a resolver hiccup than every engine
/// gone, and workers that really are gone fail their health checks meanwhile).
pub fn after_lookup<A: Ord + Clone>(previous: &BTreeSet<A>, answer: Option<BTreeSet<A>>) -> BTreeSet<A> {
    match answer {
        Some(addrs) if !addrs.is_empty() => addrs,
        _ => previous.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::pool::pick::rendezvous_order;

    fn set(keys: &[&str]) -> BTreeSet<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    fn verify(keys: &[&str]) -> Vec<Action<String>> {
        keys.iter().map(|k| Action::Verify(k.to_string())).collect()
    }

    const RETRY: Duration = Duration::from_secs(30);

    #[test]
    fn new_addresses_are_verified_before_they_serve() {
        let now = Instant::now();
        let mut m = Membership::new(RETRY);
        assert_eq!(m.plan(&set(&["a", "b"]), now), verify(&["a", "b"]));
        assert_eq!(m.counts(), Counts { serving: 0, verifying: 2, refused: 0 });
        assert_eq!(m.plan(&set(&["a", "b"]), now), vec![], "a check is asked for once");
        assert!(m.verified(&"a".to_string()));
        assert_eq!(m.state(&"a".to_string()), Some(MemberState::Serving));
        assert_eq!(m.counts(), Counts { serving: 1, verifying: 1, refused: 0 });
    }

    #[test]
    fn a_vanished_serving_address_is_removed_and_a_vanished_check_cancelled() {
        let now = Instant::now();
        let mut m = Membership::new(RETRY);
        m.plan(&set(&["a", "b", "c"]), now);
        m.verified(&"a".to_string());
        m.verified(&"b".to_string());
        let actions = m.plan(&set(&["b", "d"]), now);
        assert_eq!(actions, vec![Action::Verify("d".into()), Action::Cancel("c".into()), Action::Remove("a".into())]);
        assert_eq!(m.state(&"a".to_string()), None);
        assert!(!m.verified(&"c".to_string()), "a cancelled check that completes anyway is dropped");
        assert_eq!(m.counts(), Counts { serving: 1, verifying: 1, refused: 0 });
    }

    #[test]
    fn a_refused_address_is_checked_again_only_after_the_retry_pause() {
        let t0 = Instant::now();
        let mut m = Membership::new(RETRY);
        m.plan(&set(&["a"]), t0);
        m.refused(&"a".to_string(), t0);
        assert_eq!(m.counts(), Counts { serving: 0, verifying: 0, refused: 1 });
        assert_eq!(m.plan(&set(&["a"]), t0 + RETRY - Duration::from_millis(1)), vec![]);
        assert_eq!(m.plan(&set(&["a"]), t0 + RETRY), verify(&["a"]));
        assert!(m.verified(&"a".to_string()));
    }

    #[test]
    fn a_refused_address_that_vanishes_is_forgotten_and_verified_afresh_when_it_returns() {
        let t0 = Instant::now();
        let mut m = Membership::new(RETRY);
        m.plan(&set(&["a"]), t0);
        m.refused(&"a".to_string(), t0);
        assert_eq!(m.plan(&set(&[]), t0), vec![], "nothing to cancel or drain");
        assert_eq!(m.plan(&set(&["a"]), t0), verify(&["a"]), "a new pod at an old address gets its own check");
    }

    #[test]
    fn results_for_addresses_not_being_verified_change_nothing() {
        let now = Instant::now();
        let mut m = Membership::new(RETRY);
        assert!(!m.verified(&"x".to_string()));
        m.refused(&"x".to_string(), now);
        assert_eq!(m.counts(), Counts::default());
        m.plan(&set(&["a"]), now);
        m.verified(&"a".to_string());
        m.refused(&"a".to_string(), now);
        assert_eq!(m.state(&"a".to_string()), Some(MemberState::Serving), "a late failure does not unseat a serving worker");
    }

    #[test]
    fn a_failed_or_empty_lookup_keeps_the_previous_addresses() {
        let before = set(&["a", "b"]);
        assert_eq!(after_lookup(&before, None), before);
        assert_eq!(after_lookup(&before, Some(BTreeSet::new())), before);
        assert_eq!(after_lookup(&before, Some(set(&["b", "c"]))), set(&["b", "c"]));
    }

    #[test]
    fn when_membership_changes_only_the_sessions_of_removed_workers_move() {
        // Rendezvous hashing over the serving set: a removal plan moves exactly the sessions
        // homed on the removed worker, and an added worker takes sessions only onto itself.
        let now = Instant::now();
        let mut m = Membership::new(RETRY);
        let urls = ["http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"];
        m.plan(&set(&urls), now);
        for u in urls {
            m.verified(&u.to_string());
        }
        let serving = |m: &Membership<String>| -> Vec<String> { m.members.iter().filter(|(_, s)| **s == MemberState::Serving).map(|(k, _)| k.clone()).collect() };
        let before = serving(&m);
        let home = |workers: &[String], key: u64| workers[rendezvous_order(&key.to_le_bytes(), workers)[0]].clone();
        let actions = m.plan(&set(&[urls[0], urls[2], "http://10.0.0.4:8080"]), now);
        assert!(actions.contains(&Action::Remove(urls[1].to_string())));
        m.verified(&"http://10.0.0.4:8080".to_string());
        let after = serving(&m);
        let (mut moved_off_removed, mut moved_to_new) = (0, 0);
        for key in 0..5_000u64 {
            let (b, a) = (home(&before, key), home(&after, key));
            if b == urls[1] {
                moved_off_removed += 1;
            } else if b != a {
                assert_eq!(a, "http://10.0.0.4:8080", "session {key} moved between two workers that both stayed");
                moved_to_new += 1;
            }
        }
        assert!(moved_off_removed > 1_000 && moved_to_new > 500, "{moved_off_removed} {moved_to_new}");
    }
}
