//! Which gateway replica a device connects to next, and how long it waits first: the device's
//! failover, without I/O.
//!
//! A device is given several gateway addresses (a list, and/or DNS names with several
//! records, resolved again before every attempt by the shell). [`Failover`] picks among what
//! they resolve to now:
//! - the first pick starts at a random place in the list, so a fleet spreads over replicas;
//! - after a `GoAway` it connects again at once (no back-off: the old connection still answers
//!   what was sent on it), to the gateway's `redirect` if it named one, else to the next
//!   address, never straight back to the replica that is draining;
//! - after a lost connection it skips the replica that dropped it once, then rotates;
//! - a failed attempt moves on to the next address at once; only after a whole round of the
//!   list has failed does it back off (exponentially, from `backoff_min` to `backoff_max`; the
//!   shell adds jitter). A refusal (wrong token, tokenizer, version) backs off to the maximum
//!   after a round, since every replica would say the same.
//!
//! The link task in `edge-node` carries out what this decides; the decisions are tested here
//! without sockets or sleeps.

use std::net::SocketAddr;
use std::time::Duration;

/// The device's choice of gateway (see the module docs).
#[derive(Debug, Clone)]
pub struct Failover {
    backoff_min: Duration,
    backoff_max: Duration,
    backoff: Duration,
    cursor: usize,
    /// Failed attempts since the last connection.
    failures: usize,
    /// The replica that just went away: not the next pick, if there is another.
    avoid: Option<SocketAddr>,
    /// Where a `GoAway` said to go: the next attempt, once.
    redirect: Option<String>,
}

impl Failover {
    /// Back off from `backoff_min` up to `backoff_max` after whole rounds of failures; the
    /// first pick is the `start`-th address (modulo their number; pass a random number).
    pub fn new(backoff_min: Duration, backoff_max: Duration, start: usize) -> Self {
        Self { backoff_min, backoff_max: backoff_max.max(backoff_min), backoff: backoff_min, cursor: start, failures: 0, avoid: None, redirect: None }
    }

    /// The address a `GoAway` named, to try before the list (once).
    pub fn take_redirect(&mut self) -> Option<String> {
        self.redirect.take()
    }

    /// The address to try among `candidates` (every configured address, resolved now, in
    /// order); `None` when nothing resolved.
    pub fn pick(&mut self, candidates: &[SocketAddr]) -> Option<SocketAddr> {
        if candidates.is_empty() {
            return None;
        }
        let avoid = self.avoid.take();
        let mut pick = candidates[self.cursor % candidates.len()];
        self.cursor = self.cursor.wrapping_add(1);
        if Some(pick) == avoid && candidates.iter().any(|&c| c != pick) {
            while pick == candidates[self.cursor % candidates.len()] {
                self.cursor = self.cursor.wrapping_add(1);
            }
            pick = candidates[self.cursor % candidates.len()];
            self.cursor = self.cursor.wrapping_add(1);
        }
        Some(pick)
    }

    /// A connection was welcomed: the back-off starts over.
    pub fn connected(&mut self) {
        self.backoff = self.backoff_min;
        self.failures = 0;
    }

    /// An attempt failed (unreachable, timed out, refused by QUIC) with `candidates` addresses
    /// configured: how long to wait before the next.
    pub fn failed(&mut self, candidates: usize) -> Duration {
        self.failures += 1;
        if !self.failures.is_multiple_of(candidates.max(1)) {
            return Duration::ZERO;
        }
        let wait = self.backoff;
        self.backoff = (self.backoff * 2).min(self.backoff_max);
        wait
    }

    /// A gateway refused this device in its handshake: try the other replicas, then wait long.
    pub fn refused(&mut self, candidates: usize) -> Duration {
        self.failures += 1;
        if !self.failures.is_multiple_of(candidates.max(1)) {
            return Duration::ZERO;
        }
        self.backoff = self.backoff_max;
        self.backoff_max
    }

    /// The connection to `addr` was lost: how long to wait before reconnecting (elsewhere
    /// first, if there is elsewhere).
    pub fn lost(&mut self, addr: SocketAddr) -> Duration {
        self.avoid = Some(addr);
        self.failures = 0;
        self.backoff_min
    }

    /// The gateway at `addr` sent `GoAway`: reconnect at once, to `redirect` if given.
    pub fn go_away(&mut self, addr: SocketAddr, redirect: Option<String>) -> Duration {
        self.avoid = Some(addr);
        self.redirect = redirect;
        self.failures = 0;
        self.backoff = self.backoff_min;
        Duration::ZERO
    }
}

/// The addresses in a device's gateway setting: `host:port`, several separated by commas
/// (blanks around them ignored).
pub fn gateway_list(setting: &str) -> Vec<String> {
    setting.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn addrs(n: u16) -> Vec<SocketAddr> {
        (0..n).map(|i| SocketAddr::from(([10, 0, 0, 1], 4433 + i))).collect()
    }

    fn failover(start: usize) -> Failover {
        Failover::new(MS(100), MS(5000), start)
    }

    #[test]
    fn a_fleet_spreads_over_the_replicas_by_its_random_start() {
        let a = addrs(3);
        let firsts: Vec<SocketAddr> = (0..6).map(|start| failover(start).pick(&a).unwrap()).collect();
        assert_eq!(firsts, [a[0], a[1], a[2], a[0], a[1], a[2]]);
        assert_eq!(failover(0).pick(&[]), None);
    }

    #[test]
    fn a_go_away_reconnects_at_once_and_never_straight_back_to_the_draining_replica() {
        let a = addrs(2);
        let mut f = failover(0);
        let first = f.pick(&a).unwrap();
        f.connected();
        assert_eq!(f.go_away(first, None), Duration::ZERO);
        assert_eq!(f.take_redirect(), None);
        assert_eq!(f.pick(&a), Some(a[1]));
        // Even when the rotation would land on it again.
        let mut f = failover(0);
        assert_eq!(f.go_away(a[0], None), Duration::ZERO);
        assert_eq!(f.pick(&a), Some(a[1]));
    }

    #[test]
    fn a_go_away_redirect_is_tried_first_and_only_once() {
        let mut f = failover(0);
        f.go_away(addrs(1)[0], Some("gw-b:4433".into()));
        assert_eq!(f.take_redirect().as_deref(), Some("gw-b:4433"));
        assert_eq!(f.take_redirect(), None);
    }

    #[test]
    fn a_single_address_is_reused_after_a_go_away() {
        let a = addrs(1);
        let mut f = failover(0);
        f.go_away(a[0], None);
        assert_eq!(f.pick(&a), Some(a[0]), "nowhere else to go: the replacement comes up at the same address");
    }

    #[test]
    fn failed_attempts_rotate_at_once_and_back_off_only_after_a_whole_round() {
        let a = addrs(3);
        let mut f = failover(0);
        let mut waits = Vec::new();
        let mut tried = Vec::new();
        for _ in 0..9 {
            tried.push(f.pick(&a).unwrap());
            waits.push(f.failed(a.len()));
        }
        assert_eq!(tried, [a[0], a[1], a[2], a[0], a[1], a[2], a[0], a[1], a[2]]);
        assert_eq!(waits, [MS(0), MS(0), MS(100), MS(0), MS(0), MS(200), MS(0), MS(0), MS(400)]);
        f.connected();
        f.pick(&a);
        assert_eq!((f.failed(3), f.failed(3), f.failed(3)), (MS(0), MS(0), MS(100)), "a connection resets the back-off");
    }

    #[test]
    fn the_back_off_is_capped() {
        let mut f = failover(0);
        let waits: Vec<Duration> = (0..10).map(|_| f.failed(1)).collect();
        assert_eq!(waits.last(), Some(&MS(5000)));
        assert!(waits.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn a_lost_connection_tries_another_replica_first_then_rotates_back() {
        let a = addrs(2);
        let mut f = failover(0);
        assert_eq!(f.pick(&a), Some(a[0]));
        f.connected();
        assert_eq!(f.lost(a[0]), MS(100));
        assert_eq!(f.pick(&a), Some(a[1]));
        f.failed(2);
        assert_eq!(f.pick(&a), Some(a[0]), "the lost replica is not shunned for good (it may have restarted)");
    }

    #[test]
    fn refusals_try_every_replica_then_wait_the_longest() {
        let mut f = failover(0);
        assert_eq!(f.refused(2), Duration::ZERO);
        assert_eq!(f.refused(2), MS(5000));
        assert_eq!(failover(0).refused(1), MS(5000));
    }

    #[test]
    fn the_gateway_setting_is_a_comma_separated_list() {
        assert_eq!(gateway_list("a:1"), ["a:1"]);
        assert_eq!(gateway_list(" a:1, b:2 ,,"), ["a:1", "b:2"]);
        assert!(gateway_list("").is_empty());
    }
}
