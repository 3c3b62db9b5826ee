//! One simulated device: its own QUIC [`Link`] (reconnect, RTT) to the gateway or to its
//! group's impairment relay, and sessions of the real decode loop ([`decode`]) with the
//! trace-replaying SLM, the confidence router and the real [`LinkCloud`] (the exchange's
//! deadlines, fallbacks and link health, carried from one session to the next), with think
//! time in between. Each session's stream is checked ([`super::check`]) and measured into the
//! device's group ([`GroupStats`]). A device stays connected until the run ends, so the
//! gateway holds every device at once.

use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::exchange::{DeadlinePolicy, LinkHealth, LinkView};
use common::protocol::{Frame, WireSampling};
use edge_node::decode::{decode, Cloud, CloudAnswer, DecodeParams, DraftMode, NoCloud, TokenSource};
use edge_node::link::{Link, LinkConfig};
use edge_node::link::link_cloud::LinkCloud;
use edge_node::routing::router::ConfidenceRouter;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::check::{verify_session, CheckedCloud, Escalation};
use super::group::{Checks, GroupStats};
use super::options::Mix;
use super::trace::{ReplaySlm, Trace};

/// Slack on top of the deadline's maximum and the step's own time before a token counts as a
/// stall (timer and scheduling delay of a loaded 2-core machine).
const STALL_SLACK_MS: f64 = 250.0;
/// A device counts towards "resumed after a blackout" when it escalated this soon after it.
const RESUME_ACTIVE_WITHIN: Duration = Duration::from_millis(500);
/// The goal: an escalation this long after a blackout's end is served by the cloud again.
const SERVED_AGAIN_BY: Duration = Duration::from_secs(2);

/// A scheduled blackout of one group's relay: every `every`, from `epoch + first`, for `length`.
#[derive(Debug, Clone, Copy)]
pub struct BlackoutSchedule {
    /// When the relay started.
    pub epoch: Instant,
    /// First blackout, after the epoch.
    pub first: Duration,
    /// Period.
    pub every: Duration,
    /// Length of each.
    pub length: Duration,
}

impl BlackoutSchedule {
    /// Start and end of every blackout that starts before `until`.
    pub fn windows(&self, until: Instant) -> Vec<(Instant, Instant)> {
        let mut out = Vec::new();
        if self.every.is_zero() {
            return out;
        }
        let mut start = self.epoch + self.first;
        while start < until && out.len() < 100_000 {
            out.push((start, start + self.length));
            start += self.every;
        }
        out
    }
}

/// Everything the devices of a run share.
pub struct Env {
    /// The trace replayed.
    pub trace: Trace,
    /// Session kinds and their weights.
    pub mix: Mix,
    /// Confidence threshold (escalate below it).
    pub tau: f32,
    /// Deadlines and degradation.
    pub policy: DeadlinePolicy,
    /// Send the prompt ahead of the first hard token.
    pub presync: bool,
    /// Whether escalations carry drafts of the trace's continuation.
    pub draft: DraftMode,
    /// Set when cloud tokens can be checked (the fixed-cost backend's vocabulary).
    pub check_vocab: Option<usize>,
    /// The gateway's certificate.
    pub cert: PathBuf,
    /// Start of the run (time zero of the timelines).
    pub started: Instant,
    /// When sessions may start (every device connected by then, unless it failed).
    pub load_start: Instant,
    /// When everything stops.
    pub end: Instant,
    /// Most sessions per device.
    pub sessions_per_device: usize,
    /// Mean think time between sessions (exponential).
    pub think_mean: Duration,
    /// How often a device pings the gateway (the transport baseline).
    pub ping_every: Duration,
    /// How long a device waits for its first connection.
    pub connect_timeout: Duration,
    /// Device ids are `{device_prefix}-{index}`.
    pub device_prefix: String,
    /// Each device's certificate, where devices present one (mutual TLS).
    pub client_certs: Option<Arc<super::identity::DeviceCerts>>,
    /// Per group: its measurements, where its devices connect (None: local-only) and its
    /// relay's blackouts.
    pub groups: Vec<Group>,
    /// Correctness over the fleet.
    pub checks: Checks,
    /// Sessions running now.
    pub live_sessions: AtomicI64,
}

/// One group of devices.
pub struct Group {
    /// Its measurements.
    pub stats: GroupStats,
    /// The address its devices dial; `None` for the local-only baseline (no cloud at all).
    pub target: Option<SocketAddr>,
    /// Its relay's blackouts, if any.
    pub blackouts: Option<BlackoutSchedule>,
}

/// One device of the run.
#[derive(Debug, Clone, Copy)]
pub struct DeviceSpec {
    /// Index in the fleet (its id is `fleet-<index>`).
    pub index: usize,
    /// Its group.
    pub group: usize,
    /// When it connects.
    pub connect_at: Instant,
    /// Its random stream (session choice, think times).
    pub seed: u64,
}

/// How device `spec` reaches `addr`: the gateway's certificate, its id and, under mutual TLS,
/// its own certificate (never polled for a rotation: a run's certificates do not change).
fn link_config(env: &Env, spec: DeviceSpec, addr: SocketAddr, fingerprint: &str) -> LinkConfig {
    let id = super::device_id(&env.device_prefix, spec.index);
    let client_identity = env.client_certs.as_ref().map(|c| c.identity(&id));
    LinkConfig { slm_id: "fleet".into(), client_identity, cert_poll: Duration::ZERO, ..LinkConfig::new(addr.to_string(), Some(env.cert.clone()), id, fingerprint) }
}

/// Run one device until the end of the run.
pub async fn run_device(env: Arc<Env>, spec: DeviceSpec, fingerprint: Arc<str>) {
    let group = &env.groups[spec.group];
    let g = &group.stats;
    g.devices.add(1);
    tokio::time::sleep_until(spec.connect_at.into()).await;
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let link = match group.target {
        None => None,
        Some(addr) => match Link::start(link_config(&env, spec, addr, &fingerprint)) {
            Ok(link) => Some(link),
            Err(e) => {
                tracing::error!(device = spec.index, "link: {e:#}");
                g.connect_failures.add(1);
                return;
            }
        },
    };
    let mut health = LinkHealth::new(env.policy, Duration::ZERO);
    let generation = Arc::new(AtomicU64::new(0));
    let mut pinger = None;
    if let Some(link) = &link {
        match link.wait_up(env.connect_timeout).await {
            Some(c) => {
                g.connected.add(1);
                health = LinkHealth::new(env.policy, Duration::from_millis(u64::from(c.limits.service_time_ms)));
                generation.fetch_max(c.generation, Ordering::Relaxed);
            }
            None => g.connect_failures.add(1),
        }
        pinger = Some(tokio::spawn(ping_loop(env.clone(), spec.group, link.clone(), generation.clone(), spec.seed)));
    }
    // The first session starts at a random point of the first think period, so sessions do
    // not all begin at once.
    let first = (env.load_start + env.think_mean.mul_f64(rng.random::<f64>())).min(env.end);
    tokio::time::sleep_until(first.max(Instant::now()).into()).await;
    let mut outcomes: Vec<(Instant, bool)> = Vec::new();
    let mut session_id = 0u64;
    for _ in 0..env.sessions_per_device {
        if Instant::now() >= env.end {
            break;
        }
        let kind = env.mix.pick(rng.random::<f64>()).to_string();
        let candidates: Vec<usize> = env.trace.sessions.iter().enumerate().filter(|(_, s)| s.kind == kind).map(|(i, _)| i).collect();
        let Some(&which) = candidates.get(rng.random_range(0..candidates.len().max(1))) else { break };
        session_id += 1;
        let log = match &link {
            Some(link) => {
                let cloud = LinkCloud::new(link, session_id, WireSampling::default(), health, env.presync).with_draft(env.draft);
                let rtt = move || match link.view() {
                    LinkView::Up { rtt, .. } => Some(rtt.as_secs_f64() * 1e3),
                    LinkView::Down => None,
                };
                let (log, cloud) = run_session(&env, spec, which, cloud, rtt, env.tau).await;
                health = cloud.into_health();
                if let LinkView::Up { generation: n, .. } = link.view() {
                    generation.fetch_max(n, Ordering::Relaxed);
                }
                log
            }
            None => run_session(&env, spec, which, NoCloud, || None, 0.0).await.0,
        };
        if group.blackouts.is_some() {
            outcomes.extend(log.iter().map(|e| (e.at, matches!(e.answer, CloudAnswer::Token(_)))));
        }
        let think = env.think_mean.mul_f64(-(1.0 - rng.random::<f64>()).ln());
        tokio::time::sleep_until((Instant::now() + think).min(env.end).into()).await;
    }
    // Stay connected (idle, kept alive) until the run ends.
    tokio::time::sleep_until(env.end.into()).await;
    if let Some(p) = pinger {
        p.abort();
    }
    if let Some(link) = &link {
        if let LinkView::Up { generation: n, .. } = link.view() {
            generation.fetch_max(n, Ordering::Relaxed);
        }
        g.reconnects.add(generation.load(Ordering::Relaxed).saturating_sub(1));
    }
    if let Some(schedule) = group.blackouts {
        resumes(g, &schedule, &outcomes, env.end);
    }
}

/// One session: replay trace session `which` through the decode loop with `cloud`, check its
/// stream and count it into the device's group. Returns the escalation log and the cloud.
async fn run_session<C: Cloud>(env: &Env, spec: DeviceSpec, which: usize, cloud: C, rtt: impl Fn() -> Option<f64> + Send + Sync, tau: f32) -> (Vec<Escalation>, C) {
    let g = &env.groups[spec.group].stats;
    let ts = &env.trace.sessions[which];
    let stop = env.trace.stop_tokens.clone();
    let mut slm = ReplaySlm::new(ts, stop.clone());
    let t0 = env.started;
    let observe = move |e: &Escalation| {
        g.escalation(e.answer, e.waited_ms, e.rtt_ms, e.at.saturating_duration_since(t0).as_millis() as u64);
        g.drafted(e.draft, e.accepted);
    };
    let mut cloud = CheckedCloud::new(cloud, ts.prompt.len(), env.check_vocab, rtt, observe);
    let mut committed: Vec<(u32, TokenSource)> = Vec::with_capacity(ts.tokens.len());
    let deadline_max_ms = env.policy.max.as_secs_f64() * 1e3;
    let started = Instant::now();
    let mut last = started;
    let mut stalls = 0u64;
    let mut cancelled = false;
    env.live_sessions.fetch_add(1, Ordering::Relaxed);
    let params = DecodeParams { max_new_tokens: ts.tokens.len(), tau, rate_control: None };
    let result = decode(&mut slm, &mut ConfidenceRouter, &mut cloud, &ts.prompt, params, |e| {
        let now = Instant::now();
        let ms = now.duration_since(last).as_secs_f64() * 1e3;
        let p = committed.len();
        let own = f64::from(ts.step_ms.get(p).copied().unwrap_or(0.0)) + if p == 0 { ts.prefill_ms } else { 0.0 };
        if p == 0 {
            g.ttft.record(ms);
        } else {
            g.itl.record(ms);
        }
        if ms > deadline_max_ms + own + STALL_SLACK_MS {
            stalls += 1;
        }
        last = now;
        committed.push((e.token, e.source));
        if now >= env.end {
            cancelled = true;
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    })
    .await;
    env.live_sessions.fetch_sub(1, Ordering::Relaxed);
    let log = std::mem::take(&mut cloud.log);
    let cloud = cloud.into_inner();
    let stats = match result {
        Ok(s) => s,
        Err(e) => {
            // The stand-in never fails; if the loop does, that is a finding.
            env.checks.add(spec.index, &ts.name, &super::check::SessionCheck { violations: vec![(None, format!("the decode loop failed: {e}"))], ..Default::default() });
            return (log, cloud);
        }
    };
    let check = verify_session(&ts.prompt, &ts.tokens, &stop, &committed, &log, &stats);
    env.checks.add(spec.index, &ts.name, &check);
    g.sessions.add(1);
    g.tokens.add(committed.len() as u64);
    g.tokens_over_time.add(last.saturating_duration_since(env.started).as_millis() as u64, committed.len() as u64);
    g.full_syncs.add(stats.full_syncs as u64);
    g.context_missing.add(stats.context_missing as u64);
    g.stalls.add(stalls);
    if cancelled {
        g.sessions_cancelled.add(1);
    } else if committed.len() > 1 {
        let wall = last.duration_since(started).as_secs_f64();
        let nominal: f64 = ts.prefill_ms + ts.step_ms.iter().take(committed.len()).map(|&s| f64::from(s)).sum::<f64>();
        if let (Ok(mut a), Ok(mut b)) = (g.session_tokens_per_s.lock(), g.session_nominal_tokens_per_s.lock()) {
            a.push((committed.len() as f64 / wall.max(1e-6)) as f32);
            b.push((committed.len() as f64 / (nominal / 1e3).max(1e-6)) as f32);
        }
    }
    (log, cloud)
}

/// Ping the gateway every `ping_every` (jittered) while the run lasts: the transport's round
/// trip on the same link, the baseline of the escalations' latency.
async fn ping_loop(env: Arc<Env>, group: usize, link: Link, generation: Arc<AtomicU64>, seed: u64) {
    let g = &env.groups[group].stats;
    let mut rng = StdRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
    let mut nonce = 0u64;
    loop {
        let wait = env.ping_every.mul_f64(rng.random_range(0.5..1.5));
        tokio::time::sleep(wait).await;
        if Instant::now() >= env.end {
            return;
        }
        let LinkView::Up { generation: n, .. } = link.view() else { continue };
        generation.fetch_max(n, Ordering::Relaxed);
        nonce += 1;
        let t = Instant::now();
        match link.request(&Frame::Ping { nonce }, t + Duration::from_secs(2)).await {
            Ok((Frame::Pong { nonce: back }, _)) if back == nonce => g.ping.record(t.elapsed().as_secs_f64() * 1e3),
            _ => g.pings_lost.add(1),
        }
    }
}

/// After each blackout: if the device escalated soon after it ended, how long until a cloud
/// token came back (or never, before the next blackout or the end).
fn resumes(g: &GroupStats, schedule: &BlackoutSchedule, outcomes: &[(Instant, bool)], end: Instant) {
    let windows = schedule.windows(end);
    for (k, &(_, over)) in windows.iter().enumerate() {
        if over >= end {
            break;
        }
        let next_start = windows.get(k + 1).map_or(end, |w| w.0);
        let after: Vec<&(Instant, bool)> = outcomes.iter().filter(|o| o.0 >= over && o.0 < next_start).collect();
        match after.iter().find(|o| o.0 >= over + SERVED_AGAIN_BY) {
            Some(o) if o.1 => g.back_by_2s.add(1),
            Some(_) => g.not_back_by_2s.add(1),
            None => {}
        }
        let Some(first) = after.first() else { continue };
        if first.0 > over + RESUME_ACTIVE_WITHIN {
            continue;
        }
        match after.iter().find(|o| o.1) {
            Some(c) => g.resume.record(c.0.duration_since(over).as_secs_f64() * 1e3),
            None => g.not_resumed.add(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blackout_windows_follow_the_schedule() {
        let epoch = Instant::now();
        let s = BlackoutSchedule { epoch, first: Duration::from_secs(30), every: Duration::from_secs(30), length: Duration::from_secs(5) };
        let w = s.windows(epoch + Duration::from_secs(95));
        assert_eq!(w.len(), 3);
        assert_eq!(w[1], (epoch + Duration::from_secs(60), epoch + Duration::from_secs(65)));
    }

    #[test]
    fn resume_is_measured_from_the_end_of_the_blackout_for_active_devices() {
        let epoch = Instant::now();
        let s = BlackoutSchedule { epoch, first: Duration::from_secs(10), every: Duration::from_secs(20), length: Duration::from_secs(5) };
        let at = |ms: u64| epoch + Duration::from_millis(ms);
        let g = GroupStats::new("flapping", 60_000);
        // Active 100 ms after the first blackout's end (15 s), cloud back at 15.9 s.
        let outcomes = vec![(at(15_100), false), (at(15_900), true), (at(36_000), false)];
        resumes(&g, &s, &outcomes, at(60_000));
        assert_eq!(g.resume.count(), 1);
        assert!((g.resume.max() - 900.0).abs() < 1.0);
        // After the second (35 s) the device first escalated a second later: not counted.
        assert_eq!(g.not_resumed.get(), 0);
        // No escalation 2 s or more after either end (17–30 s, 37–50 s): nothing to count.
        assert_eq!((g.back_by_2s.get(), g.not_back_by_2s.get()), (0, 0));
    }

    #[test]
    fn service_back_by_2s_looks_at_the_first_escalation_2s_after_the_end() {
        let epoch = Instant::now();
        let s = BlackoutSchedule { epoch, first: Duration::from_secs(10), every: Duration::from_secs(20), length: Duration::from_secs(5) };
        let at = |ms: u64| epoch + Duration::from_millis(ms);
        let g = GroupStats::new("flapping", 60_000);
        // First blackout ends at 15 s: fallbacks until 16.5 s, then cloud at 17.2 s.
        let outcomes = vec![(at(15_100), false), (at(16_500), false), (at(17_200), true), (at(18_000), true)];
        resumes(&g, &s, &outcomes, at(60_000));
        assert_eq!((g.back_by_2s.get(), g.not_back_by_2s.get()), (1, 0));
    }
}
