//! Choosing a worker for a session's escalation.
//!
//! Engines with a prefix cache (SGLang's radix cache, vLLM's prefix caching, llama.cpp's
//! `cache_prompt`) prefill only the delta since the session's last escalation, but only on the
//! worker that saw the rest of it. So a session sticks to one worker, chosen by rendezvous
//! (highest-random-weight) hashing of its key over the workers' URLs: every gateway replica,
//! and the same gateway after a restart, picks the same worker for the same session without
//! sharing any state; and when a worker leaves, only the sessions it held move (each to its
//! next worker in rendezvous order), and they come back when it returns.
//!
//! Stickiness gives way in two cases: the worker is ineligible (unhealthy, breaker open, or at
//! its in-flight limit), and the session takes the next eligible worker in its order; or the
//! load is skewed, the first worker having both `skew_slack` more requests in flight than the
//! second and more than `skew_factor` times as many, and the session takes the second (the
//! power of two choices, restricted to the session's top two so it stays on at most two warm
//! caches). [`Routing::RoundRobin`] ignores the session, for the benchmark that measures what
//! stickiness buys.
//!
//! The score must be the same in every process and with every Rust version, so it is not
//! `std`'s `DefaultHasher` (randomly keyed, and its algorithm may change) but FNV-1a 64 with a
//! SplitMix64 finaliser, written here and pinned by a test.
//!
//! Pure functions: no I/O, no clock, no state; the pool passes in what it knows.

use std::fmt;
use std::str::FromStr;

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 of `bytes`: stable across processes, platforms and Rust versions.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET_BASIS, |h, &b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

/// SplitMix64's finaliser: a bijection on `u64` whose every output bit depends on every input
/// bit (FNV-1a alone mixes its last bytes poorly into the high bits that decide a comparison).
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The rendezvous score of `worker` (its URL) for the session `key`: stable, and distinct
/// between workers for one key.
pub fn score(key: &[u8], worker: &str) -> u64 {
    mix64(fnv1a64(key) ^ mix64(fnv1a64(worker.as_bytes())))
}

/// Indices into `workers` (their URLs) by descending [`score`] for `key`; ties (identical
/// URLs) in index order. The first is the session's home worker, the next its fallbacks.
pub fn rendezvous_order<W: AsRef<str>>(key: &[u8], workers: &[W]) -> Vec<usize> {
    let mut scored: Vec<(u64, usize)> = workers.iter().enumerate().map(|(i, w)| (score(key, w.as_ref()), i)).collect();
    scored.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, i)| i).collect()
}

/// What the pool knows about one worker when it picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The worker's index in the pool (what [`choose`] returns).
    pub index: usize,
    /// Whether it may take the request: healthy, its breaker allows it, below its in-flight
    /// limit.
    pub eligible: bool,
    /// Requests in flight to it now.
    pub in_flight: usize,
}

/// How sessions are spread over workers (`--engine-routing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[value(rename_all = "kebab-case")]
pub enum Routing {
    /// Each session to its rendezvous worker, for the engine's prefix cache (the default).
    #[default]
    Sticky,
    /// Each request to the next eligible worker in turn, ignoring the session (a baseline).
    RoundRobin,
}

impl Routing {
    /// The name used on the command line and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sticky => "sticky",
            Self::RoundRobin => "round-robin",
        }
    }
}

impl fmt::Display for Routing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Routing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "sticky" => Ok(Self::Sticky),
            "round-robin" | "round_robin" | "roundrobin" | "rr" => Ok(Self::RoundRobin),
            other => Err(format!("unknown routing `{other}` (expected sticky or round-robin)")),
        }
    }
}

/// How [`choose`] picks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PickPolicy {
    /// Sticky or round-robin.
    pub routing: Routing,
    /// Sticky: the first worker must have more than this many times the second's in-flight
    /// requests to lose the session's request to it...
    pub skew_factor: f64,
    /// ...and more than this many more of them.
    pub skew_slack: usize,
}

impl Default for PickPolicy {
    fn default() -> Self {
        Self { routing: Routing::Sticky, skew_factor: 2.0, skew_slack: 4 }
    }
}

impl PickPolicy {
    /// Whether a session's first worker, with `first` requests in flight, is loaded enough
    /// against its second, with `second`, to send the request to the second: past both the
    /// absolute slack and the factor.
    pub fn is_skewed(&self, first: usize, second: usize) -> bool {
        first > second.saturating_add(self.skew_slack) && first as f64 > self.skew_factor * second as f64
    }
}

/// The worker (a [`Candidate::index`]) to send a request to, or `None` when no eligible worker
/// is left. `order` is every worker in the session's [`rendezvous_order`]; `exclude` the
/// indices already tried for this request (a retry goes to another worker); `rr_counter` a
/// counter the pool bumps on every round-robin pick.
///
/// Sticky: the first eligible candidate not excluded, unless it [is skewed](PickPolicy::is_skewed)
/// against the second such candidate, which is then chosen. Round-robin: the eligible
/// candidates not excluded, in index order, the `rr_counter`-th modulo their number.
pub fn choose(order: &[Candidate], policy: &PickPolicy, exclude: &[usize], rr_counter: u64) -> Option<usize> {
    let mut open = order.iter().filter(|c| c.eligible && !exclude.contains(&c.index));
    match policy.routing {
        Routing::Sticky => {
            let first = open.next()?;
            match open.next() {
                Some(second) if policy.is_skewed(first.in_flight, second.in_flight) => Some(second.index),
                _ => Some(first.index),
            }
        }
        Routing::RoundRobin => {
            let mut indices: Vec<usize> = open.map(|c| c.index).collect();
            if indices.is_empty() {
                return None;
            }
            indices.sort_unstable();
            indices.dedup();
            Some(indices[(rr_counter % indices.len() as u64) as usize])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workers(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("http://10.0.0.{}:30000", i + 1)).collect()
    }

    fn key(i: u64) -> [u8; 8] {
        i.to_le_bytes()
    }

    /// Candidates in `order`, eligible unless listed in `out`, with `load[index]` in flight.
    fn candidates(order: &[usize], out: &[usize], load: &[usize]) -> Vec<Candidate> {
        order.iter().map(|&index| Candidate { index, eligible: !out.contains(&index), in_flight: load[index] }).collect()
    }

    const STICKY: PickPolicy = PickPolicy { routing: Routing::Sticky, skew_factor: 2.0, skew_slack: 4 };
    const ROUND_ROBIN: PickPolicy = PickPolicy { routing: Routing::RoundRobin, skew_factor: 2.0, skew_slack: 4 };

    #[test]
    fn the_default_policy_is_sticky_with_a_skew_of_twice_and_four_more() {
        assert_eq!(PickPolicy::default(), STICKY);
        assert_eq!("round-robin".parse::<Routing>().unwrap(), Routing::RoundRobin);
        assert_eq!("Sticky".parse::<Routing>().unwrap(), Routing::Sticky);
        assert!("random".parse::<Routing>().is_err());
    }

    #[test]
    fn the_hash_is_fnv1a_64_and_the_score_is_pinned_across_versions() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        // A change here re-homes every session of every deployed gateway: do not "fix" it.
        // (Computed independently: mix64(fnv1a64(42u64 LE) ^ mix64(fnv1a64(url))).)
        assert_eq!(score(&key(42), "http://10.0.0.1:30000"), 0xeee7_7167_e185_ef16);
    }

    #[test]
    fn the_same_key_always_maps_to_the_same_worker() {
        let ws = workers(5);
        for i in 0..100 {
            let order = rendezvous_order(&key(i), &ws);
            assert_eq!(order, rendezvous_order(&key(i), &ws));
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [0, 1, 2, 3, 4], "every worker once");
        }
    }

    #[test]
    fn a_keys_worker_does_not_depend_on_the_order_workers_are_listed_in() {
        let ws = workers(4);
        let reversed: Vec<String> = ws.iter().rev().cloned().collect();
        for i in 0..1000 {
            let home = &ws[rendezvous_order(&key(i), &ws)[0]];
            assert_eq!(home, &reversed[rendezvous_order(&key(i), &reversed)[0]]);
        }
    }

    #[test]
    fn keys_spread_roughly_evenly_over_four_workers() {
        let ws = workers(4);
        let mut counts = [0usize; 4];
        for i in 0..10_000 {
            counts[rendezvous_order(&key(i), &ws)[0]] += 1;
        }
        for (w, &n) in counts.iter().enumerate() {
            assert!((2_000..=3_000).contains(&n), "worker {w} got {n} of 10000 keys: {counts:?}");
        }
    }

    #[test]
    fn removing_a_worker_moves_only_the_keys_it_held() {
        let ws = workers(4);
        let without: Vec<String> = ws.iter().filter(|w| **w != ws[2]).cloned().collect();
        let mut moved = [0usize; 4];
        for i in 0..10_000 {
            let before = &ws[rendezvous_order(&key(i), &ws)[0]];
            let after = &without[rendezvous_order(&key(i), &without)[0]];
            if *before == ws[2] {
                let next = &ws[rendezvous_order(&key(i), &ws)[1]];
                assert_eq!(after, next, "key {i} goes to its second choice");
                moved[ws.iter().position(|w| w == after).unwrap()] += 1;
            } else {
                assert_eq!(before, after, "key {i} was not on the removed worker and must stay");
            }
        }
        assert_eq!(moved[2], 0);
        for w in [0, 1, 3] {
            assert!(moved[w] > 500, "the removed worker's keys spread over the rest: {moved:?}");
        }
    }

    #[test]
    fn adding_a_worker_moves_keys_only_onto_it() {
        let ws = workers(5);
        let (old, new) = (&ws[..4], &ws[..]);
        let mut gained = 0;
        for i in 0..10_000 {
            let before = &old[rendezvous_order(&key(i), old)[0]];
            let after = &new[rendezvous_order(&key(i), new)[0]];
            if before != after {
                assert_eq!(after, &ws[4], "key {i} may only move to the new worker");
                gained += 1;
            }
        }
        assert!((1_500..=2_500).contains(&gained), "the new worker takes about a fifth: {gained}");
    }

    #[test]
    fn an_ineligible_home_worker_is_skipped_and_the_key_returns_when_it_recovers() {
        let ws = workers(4);
        let load = [0; 4];
        for i in 0..100 {
            let order = rendezvous_order(&key(i), &ws);
            let home = order[0];
            assert_eq!(choose(&candidates(&order, &[], &load), &STICKY, &[], 0), Some(home));
            assert_eq!(choose(&candidates(&order, &[home], &load), &STICKY, &[], 0), Some(order[1]));
            assert_eq!(choose(&candidates(&order, &[home, order[1]], &load), &STICKY, &[], 0), Some(order[2]));
            assert_eq!(choose(&candidates(&order, &[], &load), &STICKY, &[], 0), Some(home), "back home");
        }
    }

    #[test]
    fn skew_sends_the_request_to_the_second_choice_only_past_both_thresholds() {
        let order = [2, 0, 1];
        let pick = |first: usize, second: usize| {
            let mut load = [0; 3];
            load[2] = first;
            load[0] = second;
            choose(&candidates(&order, &[], &load), &STICKY, &[], 0)
        };
        assert_eq!(pick(4, 0), Some(2), "4 more is not more than the slack of 4");
        assert_eq!(pick(5, 0), Some(0), "5 more, and more than twice");
        assert_eq!(pick(10, 5), Some(2), "5 more but exactly twice, not more");
        assert_eq!(pick(11, 5), Some(0), "6 more and more than twice");
        assert_eq!(pick(30, 20), Some(2), "10 more but only 1.5 times");
        assert_eq!(pick(7, 7), Some(2));
        let busy_second = candidates(&order, &[0], &[0, 0, 50]);
        assert_eq!(choose(&busy_second, &STICKY, &[], 0), Some(1), "the second is the next *eligible* candidate");
        let alone = candidates(&[2], &[], &[0, 0, 50]);
        assert_eq!(choose(&alone, &STICKY, &[], 0), Some(2), "with no second, the first however loaded");
    }

    #[test]
    fn a_retry_skips_the_workers_already_tried() {
        let order = [3, 1, 0, 2];
        let c = candidates(&order, &[], &[0; 4]);
        assert_eq!(choose(&c, &STICKY, &[3], 0), Some(1));
        assert_eq!(choose(&c, &STICKY, &[3, 1], 0), Some(0));
        assert_eq!(choose(&c, &STICKY, &[3, 1, 0, 2], 0), None);
        assert_eq!(choose(&c, &ROUND_ROBIN, &[0, 1, 2], 7), Some(3));
    }

    #[test]
    fn no_eligible_worker_means_no_choice() {
        let order = [1, 0];
        let c = candidates(&order, &[0, 1], &[0, 0]);
        assert_eq!(choose(&c, &STICKY, &[], 0), None);
        assert_eq!(choose(&c, &ROUND_ROBIN, &[], 0), None);
        assert_eq!(choose(&[], &STICKY, &[], 0), None);
        assert_eq!(rendezvous_order::<&str>(b"k", &[]), Vec::<usize>::new());
    }

    #[test]
    fn round_robin_cycles_over_the_eligible_workers_in_index_order() {
        let order = [2, 0, 3, 1];
        let c = candidates(&order, &[1], &[0, 0, 0, 9]);
        let picks: Vec<_> = (0..7).map(|n| choose(&c, &ROUND_ROBIN, &[], n).unwrap()).collect();
        assert_eq!(picks, [0, 2, 3, 0, 2, 3, 0], "ignores the session's order, the load and the ineligible worker");
    }
}
