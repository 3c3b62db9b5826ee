//! Latency histograms and per-interval counters that thousands of device tasks update at once.
//!
//! A fleet run makes hundreds of millions of samples (every token of every device), far too
//! many to keep: samples go into log-spaced buckets (5 % wide, 10 µs to 100 s) of atomic
//! counters, shared per device group, from which percentiles and CDFs are read at the end
//! within the bucket width. Counters over time go into fixed-width bins the same way.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Smallest value with its own bucket, ms; below it everything counts in bucket 0.
const MIN_MS: f64 = 0.01;
/// Ratio between consecutive bucket bounds.
const RATIO: f64 = 1.05;
/// Buckets: up to `MIN_MS * RATIO^BUCKETS` ≈ 100 s; longer samples count in the last one.
const BUCKETS: usize = 332;

/// A histogram of millisecond values with atomic buckets.
#[derive(Debug)]
pub struct Histogram {
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    /// Sum in microseconds (for the mean).
    sum_us: AtomicU64,
    /// Largest sample, as the bits of an `f64` (positive floats order like their bits).
    max_bits: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self { buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(), count: AtomicU64::new(0), sum_us: AtomicU64::new(0), max_bits: AtomicU64::new(0) }
    }
}

fn bucket_of(ms: f64) -> usize {
    if ms.is_nan() || ms <= MIN_MS {
        return 0;
    }
    (((ms / MIN_MS).ln() / RATIO.ln()) as usize + 1).min(BUCKETS - 1)
}

/// The upper bound of bucket `i`, ms.
fn upper_bound(i: usize) -> f64 {
    MIN_MS * RATIO.powi(i as i32)
}

/// Percentiles of a histogram, ms (the field's names: p50/p90/p99).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Samples.
    pub n: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Histogram {
    /// Count one sample of `ms` milliseconds.
    pub fn record(&self, ms: f64) {
        let ms = if ms.is_finite() { ms.max(0.0) } else { 0.0 };
        self.buckets[bucket_of(ms)].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add((ms * 1e3) as u64, Ordering::Relaxed);
        self.max_bits.fetch_max(ms.to_bits(), Ordering::Relaxed);
    }

    /// Samples so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Largest sample, ms.
    pub fn max(&self) -> f64 {
        f64::from_bits(self.max_bits.load(Ordering::Relaxed))
    }

    /// The value below which a share `p` (0..=1) of the samples lie: the upper bound of the
    /// bucket where the share is reached (at most 5 % above the true value), never above the
    /// largest sample. 0 when empty.
    pub fn quantile(&self, p: f64) -> f64 {
        let n = self.count();
        if n == 0 {
            return 0.0;
        }
        let rank = ((n as f64) * p.clamp(0.0, 1.0)).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            seen += b.load(Ordering::Relaxed);
            if seen >= rank {
                return upper_bound(i).min(self.max());
            }
        }
        self.max()
    }

    /// Share of samples at or below `ms` (to within a bucket).
    pub fn share_at_most(&self, ms: f64) -> f64 {
        let n = self.count();
        if n == 0 {
            return 0.0;
        }
        let last = bucket_of(ms);
        let below: u64 = self.buckets[..=last].iter().map(|b| b.load(Ordering::Relaxed)).sum();
        below as f64 / n as f64
    }

    /// Count, mean, p50/p90/p99 and max.
    pub fn summary(&self) -> Summary {
        let n = self.count();
        let mean = if n == 0 { 0.0 } else { self.sum_us.load(Ordering::Relaxed) as f64 / 1e3 / n as f64 };
        Summary { n, mean, p50: self.quantile(0.5), p90: self.quantile(0.9), p99: self.quantile(0.99), max: self.max() }
    }

    /// The empirical CDF as (ms, share ≤ ms) points, one per non-empty bucket.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        let n = self.count();
        if n == 0 {
            return Vec::new();
        }
        let mut seen = 0;
        let mut points = Vec::new();
        for (i, b) in self.buckets.iter().enumerate() {
            let c = b.load(Ordering::Relaxed);
            if c > 0 {
                seen += c;
                points.push((upper_bound(i).min(self.max()), seen as f64 / n as f64));
            }
        }
        points
    }
}

/// Counters per fixed-width time bin, from the start of the run.
#[derive(Debug)]
pub struct Timeline {
    bin_ms: u64,
    bins: Vec<AtomicU64>,
}

impl Timeline {
    /// `span_ms` of time in bins of `bin_ms`; events later than the span count in the last bin.
    pub fn new(span_ms: u64, bin_ms: u64) -> Self {
        let bin_ms = bin_ms.max(1);
        Self { bin_ms, bins: (0..span_ms / bin_ms + 1).map(|_| AtomicU64::new(0)).collect() }
    }

    /// Count `n` events at `at_ms` since the start.
    pub fn add(&self, at_ms: u64, n: u64) {
        let i = ((at_ms / self.bin_ms) as usize).min(self.bins.len() - 1);
        self.bins[i].fetch_add(n, Ordering::Relaxed);
    }

    /// Width of a bin, ms.
    pub fn bin_ms(&self) -> u64 {
        self.bin_ms
    }

    /// Counts per bin.
    pub fn counts(&self) -> Vec<u64> {
        self.bins.iter().map(|b| b.load(Ordering::Relaxed)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_a_bucket_of_the_true_value() {
        let h = Histogram::default();
        for i in 1..=1000 {
            h.record(i as f64);
        }
        let s = h.summary();
        assert_eq!(s.n, 1000);
        for (got, want) in [(s.p50, 500.0), (s.p90, 900.0), (s.p99, 990.0)] {
            assert!(got >= want && got <= want * RATIO * 1.001, "{got} vs {want}");
        }
        assert_eq!(s.max, 1000.0);
        assert!((s.mean - 500.5).abs() < 0.01);
        assert!((h.share_at_most(500.0) - 0.5).abs() < 0.03);
        let cdf = h.cdf();
        assert_eq!(cdf.last().map(|p| p.1), Some(1.0));
        assert!(cdf.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
    }

    #[test]
    fn an_empty_histogram_reads_as_zeros_and_odd_samples_do_not_panic() {
        let h = Histogram::default();
        assert_eq!(h.summary(), Summary::default());
        assert!(h.cdf().is_empty());
        for v in [f64::NAN, -1.0, 0.0, 1e12, f64::INFINITY] {
            h.record(v);
        }
        assert_eq!(h.count(), 5);
    }

    #[test]
    fn late_events_land_in_the_last_bin() {
        let t = Timeline::new(1000, 100);
        t.add(0, 1);
        t.add(150, 2);
        t.add(99_999, 3);
        let c = t.counts();
        assert_eq!((c[0], c[1], *c.last().unwrap_or(&0)), (1, 2, 3));
    }
}
