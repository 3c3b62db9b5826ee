//! Bounds on what peers can make the gateway's transport hold, whatever they send: connections per
//! source address ([`SourceLimiter`]) and bytes buffered in unfinished frames, per connection
//! and in total ([`BufferBudget`]). The stream read timeout that goes with the byte budget is
//! applied where streams are read (`transport::read`).
//!
//! A leaf of its own: the shared state holds the limiters and the transport applies them, so
//! neither imports the other for them.
//!
//! Measured without them (docs/src/benchmarks/fairness-overload.md, "Gateway under abuse and
//! overload"): 10,000 idle connections from one host locked new
//! devices out, and 30 connections holding partial frames on every stream pinned 2.1 GB.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;

/// Connections (handshaking or connected) per source IP address, up to a maximum.
#[derive(Debug)]
pub struct SourceLimiter {
    counts: DashMap<IpAddr, usize>,
    max: usize,
}

/// One connection's place in its source's count; given back when dropped.
#[derive(Debug)]
pub struct SourceGuard {
    limiter: Arc<SourceLimiter>,
    ip: IpAddr,
}

impl SourceLimiter {
    /// At most `max` connections per address (at least 1).
    pub fn new(max: usize) -> Self {
        Self { counts: DashMap::new(), max: max.max(1) }
    }

    /// Count a new connection from `ip`, or `None` if the address already has `max`. An IPv4
    /// address seen as IPv6 (`::ffff:a.b.c.d`, on a dual-stack socket) counts as itself.
    pub fn try_acquire(self: &Arc<Self>, ip: IpAddr) -> Option<SourceGuard> {
        let ip = ip.to_canonical();
        let mut count = self.counts.entry(ip).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(SourceGuard { limiter: self.clone(), ip })
    }

    /// Connections counted for `ip` now.
    pub fn count(&self, ip: IpAddr) -> usize {
        self.counts.get(&ip.to_canonical()).map_or(0, |c| *c)
    }

    /// Addresses with at least one connection (the map's size: it shrinks as they leave).
    pub fn sources(&self) -> usize {
        self.counts.len()
    }
}

impl Drop for SourceGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.limiter.counts.get_mut(&self.ip) {
            *c = c.saturating_sub(1);
        }
        self.limiter.counts.remove_if(&self.ip, |_, c| *c == 0);
    }
}

/// The gateway-wide budget of bytes held in unfinished frames, and the per-connection share
/// and read timeout that go with it.
#[derive(Debug)]
pub struct BufferBudget {
    total: AtomicUsize,
    max_total: usize,
    max_per_connection: usize,
    /// How long a request stream may take to deliver its frame.
    pub read_timeout: Duration,
}

/// Why a stream's bytes were not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OverBudget {
    /// The connection's unfinished frames already hold its share.
    #[error("this connection's unfinished frames hold their limit of {0} bytes")]
    Connection(usize),
    /// Every connection's unfinished frames together hold the gateway's limit.
    #[error("unfinished frames hold the gateway's limit of {0} bytes")]
    Gateway(usize),
}

impl BufferBudget {
    /// At most `max_per_connection` bytes per connection and `max_total` in all; streams must
    /// finish their frame within `read_timeout`.
    pub fn new(max_per_connection: usize, max_total: usize, read_timeout: Duration) -> Self {
        Self { total: AtomicUsize::new(0), max_total, max_per_connection, read_timeout }
    }

    /// The budget of one new connection.
    pub fn connection(self: &Arc<Self>) -> ConnectionBudget {
        ConnectionBudget { gateway: self.clone(), used: Arc::new(AtomicUsize::new(0)) }
    }

    /// Bytes held in unfinished frames, all connections together.
    pub fn total(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }
}

/// One connection's share of the [`BufferBudget`]; each of its streams holds bytes through a
/// [`Held`].
#[derive(Debug, Clone)]
pub struct ConnectionBudget {
    gateway: Arc<BufferBudget>,
    used: Arc<AtomicUsize>,
}

impl ConnectionBudget {
    /// Start holding bytes for one stream.
    pub fn hold(&self) -> Held {
        Held { budget: self.clone(), bytes: 0 }
    }

    /// Bytes this connection's streams hold now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// How long a stream may take to deliver its frame.
    pub fn read_timeout(&self) -> Duration {
        self.gateway.read_timeout
    }
}

/// Bytes one stream holds until its frame is complete; given back when dropped.
#[derive(Debug)]
pub struct Held {
    budget: ConnectionBudget,
    bytes: usize,
}

impl Held {
    /// Hold `n` more bytes, or refuse (holding nothing more) if the connection or the gateway
    /// would exceed its limit.
    pub fn add(&mut self, n: usize) -> Result<(), OverBudget> {
        let b = &self.budget;
        let used = b.used.fetch_add(n, Ordering::AcqRel).saturating_add(n);
        if used > b.gateway.max_per_connection {
            b.used.fetch_sub(n, Ordering::AcqRel);
            return Err(OverBudget::Connection(b.gateway.max_per_connection));
        }
        let total = b.gateway.total.fetch_add(n, Ordering::AcqRel).saturating_add(n);
        if total > b.gateway.max_total {
            b.gateway.total.fetch_sub(n, Ordering::AcqRel);
            b.used.fetch_sub(n, Ordering::AcqRel);
            return Err(OverBudget::Gateway(b.gateway.max_total));
        }
        self.bytes += n;
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
        self.budget.gateway.total.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_per_source_are_bounded_and_freed_when_they_close() {
        let limiter = Arc::new(SourceLimiter::new(2));
        let attacker: IpAddr = "10.0.0.1".parse().unwrap();
        let device: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = limiter.try_acquire(attacker).unwrap();
        let _a2 = limiter.try_acquire("::ffff:10.0.0.1".parse().unwrap()).expect("the same address in IPv6 form");
        assert!(limiter.try_acquire(attacker).is_none(), "a third from the same address is refused");
        let d = limiter.try_acquire(device).expect("another address is not affected");
        drop(a1);
        assert!(limiter.try_acquire(attacker).is_some(), "a place frees when a connection closes");
        drop(d);
        assert_eq!(limiter.count(device), 0);
        assert_eq!(limiter.sources(), 1, "an address with no connection leaves the map");
    }

    #[test]
    fn unfinished_frames_are_bounded_per_connection_and_in_total_and_freed_when_streams_end() {
        let budget = Arc::new(BufferBudget::new(100, 150, Duration::from_secs(1)));
        let (c1, c2) = (budget.connection(), budget.connection());
        let mut s1 = c1.hold();
        s1.add(60).unwrap();
        let mut s2 = c1.hold();
        assert_eq!(s2.add(41), Err(OverBudget::Connection(100)), "the connection's share is 100");
        s2.add(40).unwrap();
        let mut s3 = c2.hold();
        assert_eq!(s3.add(51), Err(OverBudget::Gateway(150)), "100 held, 150 in all");
        assert_eq!((c1.used(), c2.used(), budget.total()), (100, 0, 100), "a refusal holds nothing");
        drop(s1);
        s3.add(51).unwrap();
        drop((s2, s3));
        assert_eq!((c1.used(), c2.used(), budget.total()), (0, 0, 0), "everything is given back");
    }
}
