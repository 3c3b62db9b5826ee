//! Per-device rate limit on escalations: a token bucket keyed by the device's identity.
//!
//! The batcher's queue bounds the gateway as a whole, first come first served, so one device
//! escalating every token of many sessions would take the LLM from everyone else and push
//! their answers past their deadlines. A bucket per identity (the verified one under mutual
//! TLS, so a device cannot spread itself over invented ids) caps each device's share: a burst
//! for a prompt's first tokens, a steady rate beyond. Over the limit a device gets `Busy` with
//! the time until its next token, and falls back to its SLM at once; its context sync is applied
//! first, as for every `Busy`, so its next escalation is still a short delta.
//!
//! Time is passed in (as in `LinkHealth`), so the policy is tested without sleeping. The map
//! is bounded: a bucket that has refilled to its burst is the same as no bucket, so those are
//! dropped first when it is full; a device beyond that evicts the one idle longest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A device's allowance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Escalations per second a device may sustain; 0 turns the limit off.
    pub per_second: u32,
    /// Escalations a device may make at once after being quiet.
    pub burst: u32,
}

impl Default for RateLimit {
    /// Generous: far above what one device decoding at tens of tokens per second can send
    /// (every token escalated, several sessions), so only a runaway or hostile device meets it.
    fn default() -> Self {
        Self { per_second: 500, burst: 1000 }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets by device id.
#[derive(Debug)]
pub struct DeviceRateLimiter {
    limit: RateLimit,
    max_buckets: usize,
    buckets: Mutex<HashMap<Arc<str>, Bucket>>,
}

impl DeviceRateLimiter {
    /// Limit each device to `limit`, keeping at most `max_buckets` buckets.
    pub fn new(limit: RateLimit, max_buckets: usize) -> Self {
        Self { limit, max_buckets: max_buckets.max(1), buckets: Mutex::new(HashMap::new()) }
    }

    /// Take one escalation from `device`'s bucket at `now`: `Ok`, or `Err(retry_after_ms)`, the
    /// time until it may escalate again.
    pub fn check(&self, device: &Arc<str>, now: Instant) -> Result<(), u32> {
        if self.limit.per_second == 0 {
            return Ok(());
        }
        let rate = f64::from(self.limit.per_second);
        let burst = f64::from(self.limit.burst.max(1));
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if !buckets.contains_key(device) && buckets.len() >= self.max_buckets {
            self.evict(&mut buckets, now, rate, burst);
        }
        let bucket = buckets.entry(device.clone()).or_insert(Bucket { tokens: burst, at: now });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(burst);
        bucket.at = now.max(bucket.at);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait = Duration::from_secs_f64((1.0 - bucket.tokens) / rate);
            Err(u32::try_from(wait.as_millis().max(1)).unwrap_or(u32::MAX))
        }
    }

    /// Make room for one more bucket: drop the full ones (they equal a fresh bucket), or if
    /// none is full, the one idle longest.
    fn evict(&self, buckets: &mut HashMap<Arc<str>, Bucket>, now: Instant, rate: f64, burst: f64) {
        buckets.retain(|_, b| b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * rate < burst);
        if buckets.len() >= self.max_buckets {
            if let Some(oldest) = buckets.iter().min_by_key(|(_, b)| b.at).map(|(k, _)| k.clone()) {
                buckets.remove(&oldest);
            }
        }
    }

    /// Buckets held (tests and diagnostics).
    pub fn len(&self) -> usize {
        self.buckets.lock().map_or(0, |b| b.len())
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn a_device_gets_its_burst_then_its_rate_and_is_told_when_to_come_back() {
        let limiter = DeviceRateLimiter::new(RateLimit { per_second: 2, burst: 3 }, 16);
        let (a, t0) = (id("a"), Instant::now());
        for _ in 0..3 {
            assert_eq!(limiter.check(&a, t0), Ok(()));
        }
        assert_eq!(limiter.check(&a, t0), Err(500), "one token every 500 ms");
        assert_eq!(limiter.check(&a, t0 + Duration::from_millis(400)), Err(100));
        assert_eq!(limiter.check(&a, t0 + Duration::from_millis(500)), Ok(()));
        assert!(limiter.check(&a, t0 + Duration::from_millis(500)).is_err());
        // Another device has its own bucket.
        assert_eq!(limiter.check(&id("b"), t0 + Duration::from_millis(500)), Ok(()));
        // After a long quiet spell, no more than the burst.
        let later = t0 + Duration::from_secs(60);
        assert_eq!((0..10).filter(|_| limiter.check(&a, later).is_ok()).count(), 3);
    }

    #[test]
    fn zero_per_second_turns_the_limit_off() {
        let limiter = DeviceRateLimiter::new(RateLimit { per_second: 0, burst: 0 }, 1);
        let t0 = Instant::now();
        assert!((0..10_000).all(|_| limiter.check(&id("a"), t0).is_ok()));
        assert!(limiter.is_empty());
    }

    #[test]
    fn the_map_stays_bounded_and_eviction_never_refills_a_limited_device() {
        let limiter = DeviceRateLimiter::new(RateLimit { per_second: 1, burst: 2 }, 2);
        let t0 = Instant::now();
        let (a, b) = (id("a"), id("b"));
        // a is limited; b is full again by t0 + 5 s.
        assert!(limiter.check(&a, t0).is_ok() && limiter.check(&a, t0).is_ok());
        assert!(limiter.check(&b, t0).is_ok());
        let t1 = t0 + Duration::from_secs(5);
        assert!(limiter.check(&a, t1).is_ok() && limiter.check(&a, t1).is_ok());
        assert!(limiter.check(&a, t1).is_err());
        // A third device evicts b (full), not a (empty).
        assert!(limiter.check(&id("c"), t1).is_ok());
        assert_eq!(limiter.len(), 2);
        assert!(limiter.check(&a, t1).is_err(), "a is still limited");
        // With none full, the one idle longest goes, and the map stays at its bound.
        for (i, n) in ["d", "e", "f"].iter().enumerate() {
            let t = t1 + Duration::from_millis(i as u64);
            assert!(limiter.check(&id(n), t).is_ok() && limiter.check(&id(n), t).is_ok());
            assert_eq!(limiter.len(), 2);
        }
    }
}
