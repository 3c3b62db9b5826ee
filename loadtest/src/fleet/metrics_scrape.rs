//! What the gateway does while the fleet runs: its Prometheus `/metrics` (escalations,
//! `Busy`, connections, queue depth) and, from `/proc/<pid>`, its CPU time and RSS, sampled
//! once a second. The fleet's own process is sampled the same way, because on a shared
//! machine a load generator that runs out of CPU skews every latency it measures.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Linux reports CPU times in /proc in ticks of 1/100 s (USER_HZ) on every architecture we run.
const TICKS_PER_S: f64 = 100.0;

/// Fetch `http://addr/metrics` (plain HTTP/1.1, one request per connection).
pub async fn fetch_metrics(addr: SocketAddr, timeout: Duration) -> anyhow::Result<String> {
    let work = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| anyhow::anyhow!("not an HTTP response"))?;
        anyhow::ensure!(head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"), "GET /metrics: {}", head.lines().next().unwrap_or(""));
        anyhow::Ok(body.to_string())
    };
    tokio::time::timeout(timeout, work).await.map_err(|_| anyhow::anyhow!("GET /metrics timed out"))?
}

/// Sum of every series of each metric in a Prometheus text exposition (labels ignored):
/// `name -> value`. Histogram series keep their suffixed names (`_sum`, `_count`, `_bucket`).
pub fn parse_metrics(text: &str) -> HashMap<String, f64> {
    let mut out = HashMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        let Some(value) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else { continue };
        *out.entry(name.to_string()).or_insert(0.0) += value;
    }
    out
}

/// CPU seconds (user + system) and resident memory of a process, from /proc.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ProcSample {
    /// CPU time so far, s.
    pub cpu_s: f64,
    /// Resident set, MiB.
    pub rss_mib: f64,
}

/// Read `/proc/<pid>` (`self` for this process); `None` if it is gone or unreadable.
pub fn proc_sample(pid: &str) -> Option<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let cpu_s = (f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / TICKS_PER_S;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(ProcSample { cpu_s, rss_mib: kb / 1024.0 })
}

/// The whole machine's CPU time so far, s (busy = all but idle and iowait; total), summed over
/// its cores, from /proc/stat: what else runs beside the gateway and the fleet shows here.
pub fn host_cpu() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let f: Vec<f64> = stat.lines().next()?.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    let total: f64 = f.iter().take(8).sum();
    let idle = f.get(3)? + f.get(4).unwrap_or(&0.0);
    Some(((total - idle) / TICKS_PER_S, total / TICKS_PER_S))
}

/// One sample of the gateway and of the fleet's process.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Sample {
    /// Seconds since the run started.
    pub t_s: f64,
    /// Whether `/metrics` answered (if not, the gateway's figures below are 0).
    pub scraped: bool,
    /// Gateway counters (cumulative) and gauges, from `/metrics`.
    pub received: f64,
    pub answered: f64,
    pub busy: f64,
    pub expired: f64,
    pub cancelled: f64,
    pub context_missing: f64,
    pub connections: f64,
    pub sessions: f64,
    pub queue_depth: f64,
    /// Gateway process (None for an external gateway without `--gateway-pid`).
    pub gateway: Option<ProcSample>,
    /// The fleet's own process.
    pub fleet: Option<ProcSample>,
    /// The machine: busy and total CPU seconds so far, all cores.
    pub host_busy_s: f64,
    pub host_total_s: f64,
}

impl Sample {
    fn set_metrics(&mut self, m: &HashMap<String, f64>) {
        let get = |k: &str| m.get(k).copied().unwrap_or(0.0);
        self.received = get("duet_gateway_escalations_received_total");
        self.answered = get("duet_gateway_escalations_answered_total");
        self.busy = get("duet_gateway_escalations_busy_total");
        self.expired = get("duet_gateway_escalations_expired_total");
        self.cancelled = get("duet_gateway_escalations_cancelled_total");
        self.context_missing = get("duet_gateway_context_missing_total");
        self.connections = get("duet_gateway_connections");
        self.sessions = get("duet_gateway_sessions");
        self.queue_depth = get("duet_gateway_queue_depth");
    }
}

/// Where to sample.
#[derive(Debug, Clone)]
pub struct Targets {
    /// The gateway's HTTP side port, if known.
    pub metrics: Option<SocketAddr>,
    /// The gateway's process id, if it runs on this machine.
    pub gateway_pid: Option<u32>,
}

/// Take one sample at `t_s` seconds into the run (a failed scrape leaves the metrics at 0).
pub async fn sample(targets: &Targets, t_s: f64) -> Sample {
    let (host_busy_s, host_total_s) = host_cpu().unwrap_or_default();
    let mut s = Sample { t_s, gateway: targets.gateway_pid.and_then(|p| proc_sample(&p.to_string())), fleet: proc_sample("self"), host_busy_s, host_total_s, ..Sample::default() };
    if let Some(addr) = targets.metrics {
        match fetch_metrics(addr, Duration::from_secs(2)).await {
            Ok(text) => {
                s.set_metrics(&parse_metrics(&text));
                s.scraped = true;
            }
            Err(e) => tracing::debug!("scraping the gateway: {e}"),
        }
    }
    s
}

/// The samples whose scrape succeeded (rates between them are meaningful).
pub fn scraped(samples: &[Sample]) -> Vec<&Sample> {
    samples.iter().filter(|s| s.scraped).collect()
}

/// Sample every `every` until `stop` flips, into a vector returned at the end.
pub async fn sample_until(targets: Targets, started: Instant, every: Duration, mut stop: tokio::sync::watch::Receiver<bool>) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => out.push(sample(&targets, started.elapsed().as_secs_f64()).await),
            _ = stop.changed() => break,
        }
        if *stop.borrow() {
            break;
        }
    }
    out.push(sample(&targets, started.elapsed().as_secs_f64()).await);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_summed_over_their_label_sets() {
        let text = "# TYPE x counter\nduet_gateway_escalations_busy_total 3\nduet_gateway_escalations_received_total{worker=\"a\"} 5\nduet_gateway_escalations_received_total{worker=\"b\"} 7\nduet_gateway_connections 4950\nbad line\n";
        let m = parse_metrics(text);
        assert_eq!(m["duet_gateway_escalations_received_total"], 12.0);
        assert_eq!(m["duet_gateway_connections"], 4950.0);
        let mut s = Sample::default();
        s.set_metrics(&m);
        assert_eq!((s.received, s.busy, s.connections), (12.0, 3.0, 4950.0));
    }

    #[test]
    fn this_process_can_be_sampled() {
        let s = proc_sample("self").unwrap();
        assert!(s.rss_mib > 1.0 && s.cpu_s >= 0.0, "{s:?}");
        assert!(proc_sample("999999999").is_none());
        let (busy, total) = host_cpu().unwrap();
        assert!(busy > 0.0 && total >= busy, "{busy} {total}");
    }
}
