//! Percentiles and process CPU time for reports.

/// p-th percentile (0..=1) of unsorted samples; 0 when empty.
pub fn percentile(samples: &mut [f64], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_by(f64::total_cmp);
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i.min(samples.len() - 1)]
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
