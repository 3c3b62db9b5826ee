//! Percentiles and process CPU time, as every report of the project computes them (the device's
//! latency figures, the load tests, the relay's own benchmark), so that a p99 means one thing
//! across them.

/// The `p`-th percentile (0..=1) of samples already in ascending order, nearest rank rounded;
/// 0 when empty.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The `p`-th percentile (0..=1) of unsorted samples (sorted in place); 0 when empty.
pub fn percentile(samples: &mut [f64], p: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    percentile_sorted(samples, p)
}

/// CPU seconds this process has used so far, all threads (user + system, from
/// `/proc/self/stat`; 0 where absent). Under contention from other work, CPU time per unit of
/// work varies far less than throughput does.
pub fn process_cpu_s() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    // Fields after the command name (which may hold spaces) start at field 3; utime and stime
    // are fields 14 and 15, in clock ticks of 1/100 s (USER_HZ on Linux).
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { return 0.0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_percentile_is_the_nearest_rank_and_empty_samples_give_zero() {
        let mut v = vec![5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&mut v, 0.5), 3.0);
        assert_eq!(percentile(&mut v, 0.0), 1.0);
        assert_eq!(percentile(&mut v, 1.0), 5.0);
        assert_eq!(percentile_sorted(&[1.0, 2.0, 3.0, 4.0], 0.99), 4.0);
        assert_eq!(percentile(&mut [], 0.5), 0.0);
    }
}
