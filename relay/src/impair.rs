//! The impairment model, without I/O: what happens to each packet on one direction of a link.
//!
//! Like quinn-proto's connection state machine, nothing here reads a clock, sleeps or touches
//! a socket: the caller passes `now` in, hands packets to [`Link::on_packet`], takes those due
//! from [`Link::poll_transmit`] and sleeps until [`Link::poll_timeout`]. That makes every
//! impairment testable deterministically (a seeded random stream, made-up instants, no
//! waiting) and leaves the UDP shell (`udp.rs`) a thin loop.
//!
//! A packet's path, in order: a scheduled blackout drops it; random loss; Gilbert-Elliott
//! bursty loss; the bottleneck (a FIFO serialising at the capped rate, whose backlog is bounded
//! in bytes: tail drop); then propagation, the one-way delay plus jitter. Each packet is
//! scheduled for its own release instant, so jitter larger than the packet spacing reorders,
//! unless `keep_order`. A duplicate is scheduled with a delay of its own. A packet whose release
//! instant falls in a blackout is dropped then too, so nothing is delivered during one.
#![cfg_attr(not(test), deny(clippy::disallowed_methods))]

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::profile::{JitterDistribution, LinkParams};

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCause {
    /// Random loss (`loss`).
    Loss,
    /// Gilbert-Elliott loss (`burst`).
    Burst,
    /// The bottleneck queue behind the bandwidth cap was full (tail drop).
    Queue,
    /// Sent or due during a scheduled blackout.
    Blackout,
    /// One of the relay's own bounds (the delay line's bytes, a client's inbox, the client
    /// table) was reached: not part of the profile, a sign the relay is overloaded.
    Overflow,
}

/// Packets dropped, by cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drops {
    /// Random loss.
    pub loss: u64,
    /// Bursty (Gilbert-Elliott) loss.
    pub burst: u64,
    /// Tail drop behind the bandwidth cap.
    pub queue: u64,
    /// Scheduled blackouts.
    pub blackout: u64,
    /// The relay's own bounds.
    pub overflow: u64,
}

impl Drops {
    /// Every drop.
    pub fn total(&self) -> u64 {
        self.loss + self.burst + self.queue + self.blackout + self.overflow
    }

    /// Counts one drop.
    pub fn count(&mut self, cause: DropCause) {
        *match cause {
            DropCause::Loss => &mut self.loss,
            DropCause::Burst => &mut self.burst,
            DropCause::Queue => &mut self.queue,
            DropCause::Blackout => &mut self.blackout,
            DropCause::Overflow => &mut self.overflow,
        } += 1;
    }
}

/// What one direction of the relay did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectionStats {
    /// Packets received from the sender.
    pub packets_in: u64,
    /// Their UDP payload bytes.
    pub bytes_in: u64,
    /// Packets delivered to the receiver (duplicates included).
    pub packets_out: u64,
    /// Their UDP payload bytes.
    pub bytes_out: u64,
    /// Packets dropped, by cause.
    pub dropped: Drops,
    /// Extra copies made.
    pub duplicated: u64,
    /// Packets delivered after one that arrived later than they did.
    pub reordered: u64,
}

impl DirectionStats {
    /// The counters as a flat array (for atomics and differences), in a fixed order.
    pub fn to_array(&self) -> [u64; 11] {
        let d = &self.dropped;
        [self.packets_in, self.bytes_in, self.packets_out, self.bytes_out, d.loss, d.burst, d.queue, d.blackout, d.overflow, self.duplicated, self.reordered]
    }

    /// The inverse of [`DirectionStats::to_array`].
    pub fn from_array(a: [u64; 11]) -> Self {
        Self {
            packets_in: a[0],
            bytes_in: a[1],
            packets_out: a[2],
            bytes_out: a[3],
            dropped: Drops { loss: a[4], burst: a[5], queue: a[6], blackout: a[7], overflow: a[8] },
            duplicated: a[9],
            reordered: a[10],
        }
    }

    /// What was counted after `earlier` (a snapshot of the same counters).
    pub fn since(&self, earlier: &DirectionStats) -> DirectionStats {
        let (a, b) = (self.to_array(), earlier.to_array());
        Self::from_array(std::array::from_fn(|i| a[i].saturating_sub(b[i])))
    }
}

/// What the model decided for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Dropped.
    Drop(DropCause),
    /// Delivered at `at`, and a second time at `duplicate_at` if duplicated.
    Deliver {
        /// Release instant.
        at: Instant,
        /// The copy's release instant.
        duplicate_at: Option<Instant>,
    },
}

/// The per-packet decisions of one direction: loss state, bottleneck backlog and ordering.
#[derive(Debug, Clone)]
pub struct Impairment {
    params: LinkParams,
    /// Start of the blackout schedule.
    epoch: Instant,
    blackout: Option<(u128, u128, u128)>,
    /// Payload bytes per second through the bottleneck.
    rate: Option<f64>,
    /// Gilbert-Elliott state.
    bad: bool,
    /// When the bottleneck finishes sending what it holds.
    busy_until: Option<Instant>,
    /// The latest release instant given (for `keep_order`).
    last_release: Option<Instant>,
}

impl Impairment {
    /// A direction with these parameters whose blackout schedule starts at `epoch`.
    pub fn new(params: &LinkParams, epoch: Instant) -> Self {
        let nanos = |s: f64| Duration::from_secs_f64(s).as_nanos();
        let blackout = params.blackout.map(|b| (nanos(b.first_s()), nanos(b.every_s).max(1), nanos(b.for_s)));
        let rate = params.rate_kbit.map(|k| k * 1000.0 / 8.0);
        Self { params: params.clone(), epoch, blackout, rate, bad: false, busy_until: None, last_release: None }
    }

    /// The parameters.
    pub fn params(&self) -> &LinkParams {
        &self.params
    }

    /// Whether `t` falls in a scheduled blackout.
    pub fn in_blackout(&self, t: Instant) -> bool {
        let Some((first, every, length)) = self.blackout else { return false };
        let since = t.saturating_duration_since(self.epoch).as_nanos();
        since >= first && (since - first) % every < length
    }

    /// Bytes waiting in the bottleneck at `now` (0 without a cap).
    pub fn backlog_bytes(&self, now: Instant) -> f64 {
        match (self.rate, self.busy_until) {
            (Some(rate), Some(busy)) => busy.saturating_duration_since(now).as_secs_f64() * rate,
            _ => 0.0,
        }
    }

    /// Decides the fate of a packet of `len` bytes sent at `now`.
    pub fn on_packet<R: Rng + ?Sized>(&mut self, now: Instant, len: usize, rng: &mut R) -> Decision {
        if self.in_blackout(now) {
            return Decision::Drop(DropCause::Blackout);
        }
        if self.params.loss > 0.0 && rng.random::<f64>() < self.params.loss {
            return Decision::Drop(DropCause::Loss);
        }
        if let Some(b) = self.params.burst {
            let p_loss = if self.bad { b.loss_bad } else { b.loss_good };
            let lost = p_loss > 0.0 && rng.random::<f64>() < p_loss;
            let flip = if self.bad { b.bad_to_good } else { b.good_to_bad };
            if flip > 0.0 && rng.random::<f64>() < flip {
                self.bad = !self.bad;
            }
            if lost {
                return Decision::Drop(DropCause::Burst);
            }
        }
        let sent = match self.rate {
            None => now,
            Some(rate) => {
                // Half a byte of slack absorbs the nanosecond rounding of serialisation times.
                if self.backlog_bytes(now) + len as f64 > self.params.queue_bytes as f64 + 0.5 {
                    return Decision::Drop(DropCause::Queue);
                }
                let start = self.busy_until.map_or(now, |b| b.max(now));
                let done = start + Duration::from_secs_f64(len as f64 / rate);
                self.busy_until = Some(done);
                done
            }
        };
        let at = self.release(sent, rng);
        let duplicate_at = (self.params.duplicate > 0.0 && rng.random::<f64>() < self.params.duplicate).then(|| self.release(sent, rng));
        Decision::Deliver { at, duplicate_at }
    }

    /// `sent` plus one delay draw (in order after the last release with `keep_order`).
    fn release<R: Rng + ?Sized>(&mut self, sent: Instant, rng: &mut R) -> Instant {
        let p = &self.params;
        let jitter = if p.jitter_ms <= 0.0 {
            0.0
        } else {
            match p.jitter_distribution {
                JitterDistribution::Uniform => rng.random_range(-p.jitter_ms..=p.jitter_ms),
                JitterDistribution::Normal => (standard_normal(rng) * p.jitter_ms).clamp(-3.0 * p.jitter_ms, 3.0 * p.jitter_ms),
            }
        };
        let mut at = sent + Duration::from_secs_f64((p.delay_ms + jitter).max(0.0) / 1000.0);
        if p.keep_order {
            if let Some(last) = self.last_release {
                at = at.max(last);
            }
            self.last_release = Some(at);
        }
        at
    }
}

/// One draw of N(0, 1) (Box-Muller).
fn standard_normal<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A packet waiting for its release instant.
struct Scheduled<P> {
    at: Instant,
    /// Unique, increasing: ties at one instant leave in the order they were scheduled.
    order: u64,
    /// Arrival number of the original (for counting reordering).
    arrival: u64,
    duplicate: bool,
    packet: P,
}

impl<P> PartialEq for Scheduled<P> {
    fn eq(&self, other: &Self) -> bool {
        self.order == other.order
    }
}
impl<P> Eq for Scheduled<P> {}
impl<P> PartialOrd for Scheduled<P> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<P> Ord for Scheduled<P> {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.order).cmp(&(self.at, self.order))
    }
}

/// One direction of an impaired link: packets in with [`Link::on_packet`], out when due with
/// [`Link::poll_transmit`]. The delay line is bounded in bytes (drops beyond it count as
/// [`DropCause::Overflow`]).
pub struct Link<P = Vec<u8>> {
    impairment: Impairment,
    rng: SmallRng,
    line: BinaryHeap<Scheduled<P>>,
    line_bytes: usize,
    max_line_bytes: usize,
    arrivals: u64,
    orders: u64,
    /// Highest arrival number delivered so far (originals only).
    latest_delivered: Option<u64>,
    stats: DirectionStats,
}

impl<P: AsRef<[u8]> + Clone> Link<P> {
    /// A direction with these parameters: blackouts scheduled from `epoch`, random draws from
    /// `seed`, at most `max_line_bytes` of payload waiting for release.
    pub fn new(params: &LinkParams, epoch: Instant, seed: u64, max_line_bytes: usize) -> Self {
        Self {
            impairment: Impairment::new(params, epoch),
            rng: SmallRng::seed_from_u64(seed),
            line: BinaryHeap::new(),
            line_bytes: 0,
            max_line_bytes,
            arrivals: 0,
            orders: 0,
            latest_delivered: None,
            stats: DirectionStats::default(),
        }
    }

    /// A packet sent at `now`; returns why it was dropped, or `None` if it was scheduled.
    pub fn on_packet(&mut self, now: Instant, packet: P) -> Option<DropCause> {
        let len = packet.as_ref().len();
        self.stats.packets_in += 1;
        self.stats.bytes_in += len as u64;
        self.arrivals += 1;
        let arrival = self.arrivals;
        let cause = if self.line_bytes + len > self.max_line_bytes {
            Some(DropCause::Overflow)
        } else {
            match self.impairment.on_packet(now, len, &mut self.rng) {
                Decision::Drop(cause) => Some(cause),
                Decision::Deliver { at, duplicate_at } => {
                    let copy = duplicate_at.filter(|_| self.line_bytes + 2 * len <= self.max_line_bytes).map(|dup_at| (dup_at, packet.clone()));
                    self.schedule(at, arrival, false, packet);
                    if let Some((dup_at, copy)) = copy {
                        self.stats.duplicated += 1;
                        self.schedule(dup_at, arrival, true, copy);
                    }
                    None
                }
            }
        };
        if let Some(cause) = cause {
            self.stats.dropped.count(cause);
        }
        cause
    }

    fn schedule(&mut self, at: Instant, arrival: u64, duplicate: bool, packet: P) {
        self.orders += 1;
        self.line_bytes += packet.as_ref().len();
        self.line.push(Scheduled { at, order: self.orders, arrival, duplicate, packet });
    }

    /// The next packet due at `now`, if any (those whose release falls in a blackout are
    /// dropped on the way).
    pub fn poll_transmit(&mut self, now: Instant) -> Option<P> {
        while self.line.peek().is_some_and(|s| s.at <= now) {
            let s = self.line.pop()?;
            let len = s.packet.as_ref().len();
            self.line_bytes -= len;
            if self.impairment.in_blackout(s.at) {
                self.stats.dropped.count(DropCause::Blackout);
                continue;
            }
            if !s.duplicate {
                match self.latest_delivered {
                    Some(latest) if s.arrival < latest => self.stats.reordered += 1,
                    _ => self.latest_delivered = Some(s.arrival),
                }
            }
            self.stats.packets_out += 1;
            self.stats.bytes_out += len as u64;
            return Some(s.packet);
        }
        None
    }

    /// When the next packet is due (`None`: nothing waiting).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.line.peek().map(|s| s.at)
    }

    /// Payload bytes waiting for release.
    pub fn queued_bytes(&self) -> usize {
        self.line_bytes
    }

    /// Nothing waiting.
    pub fn is_empty(&self) -> bool {
        self.line.is_empty()
    }

    /// Counters since the link was made.
    pub fn stats(&self) -> &DirectionStats {
        &self.stats
    }

    /// The decision model (its parameters, blackout schedule, bottleneck backlog).
    pub fn impairment(&self) -> &Impairment {
        &self.impairment
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Blackout, Burst};

    const MS: Duration = Duration::from_millis(1);

    fn link(params: LinkParams) -> (Link<Vec<u8>>, Instant) {
        let t0 = Instant::now();
        (Link::new(&params, t0, 7, 1 << 30), t0)
    }

    /// Sends `n` packets of `len` bytes `gap` apart from `t0` and drains the link as it goes;
    /// returns (arrival index, send instant, delivery instant) of every delivery.
    fn run(l: &mut Link<Vec<u8>>, t0: Instant, n: usize, len: usize, gap: Duration) -> Vec<(usize, Instant, Instant)> {
        let mut sent = Vec::new();
        let mut out = Vec::new();
        let drain = |l: &mut Link<Vec<u8>>, until: Instant, out: &mut Vec<(usize, Instant, Instant)>, sent: &[Instant]| {
            // A packet due in a blackout is dropped on the way: poll_transmit gives nothing.
            while let Some(at) = l.poll_timeout().filter(|&at| at <= until) {
                if let Some(p) = l.poll_transmit(at) {
                    let i = u64::from_le_bytes(p[..8].try_into().unwrap()) as usize;
                    out.push((i, sent[i], at));
                }
            }
        };
        for i in 0..n {
            let now = t0 + gap * i as u32;
            drain(l, now, &mut out, &sent);
            let mut p = vec![0u8; len.max(8)];
            p[..8].copy_from_slice(&(i as u64).to_le_bytes());
            sent.push(now);
            l.on_packet(now, p);
        }
        drain(l, t0 + Duration::from_secs(3600), &mut out, &sent);
        out
    }

    #[test]
    fn no_impairment_delivers_everything_at_once_in_order() {
        let (mut l, t0) = link(LinkParams::default());
        let out = run(&mut l, t0, 1000, 100, MS);
        assert_eq!(out.len(), 1000);
        assert!(out.iter().enumerate().all(|(k, &(i, s, d))| i == k && s == d));
        assert_eq!(l.stats().packets_out, 1000);
        assert_eq!(l.stats().bytes_out, 100_000);
        assert_eq!(l.stats().dropped.total() + l.stats().reordered + l.stats().duplicated, 0);
    }

    #[test]
    fn uniform_jitter_stays_within_delay_plus_minus_jitter_and_covers_it() {
        let (mut l, t0) = link(LinkParams { delay_ms: 50.0, jitter_ms: 20.0, ..LinkParams::default() });
        let delays: Vec<f64> = run(&mut l, t0, 20_000, 100, MS).iter().map(|&(_, s, d)| (d - s).as_secs_f64() * 1e3).collect();
        let (min, max) = (delays.iter().copied().fold(f64::MAX, f64::min), delays.iter().copied().fold(0.0, f64::max));
        assert!(min >= 30.0 - 1e-6 && max <= 70.0 + 1e-6, "{min}..{max}");
        assert!(min < 30.5 && max > 69.5, "{min}..{max}");
        let mean = delays.iter().sum::<f64>() / delays.len() as f64;
        assert!((mean - 50.0).abs() < 0.5, "mean {mean}");
    }

    #[test]
    fn normal_jitter_has_the_configured_spread_cut_at_three_sigma_and_never_below_zero() {
        let (mut l, t0) = link(LinkParams { delay_ms: 40.0, jitter_ms: 10.0, jitter_distribution: JitterDistribution::Normal, ..LinkParams::default() });
        let d: Vec<f64> = run(&mut l, t0, 20_000, 100, MS).iter().map(|&(_, s, d)| (d - s).as_secs_f64() * 1e3).collect();
        let mean = d.iter().sum::<f64>() / d.len() as f64;
        let sd = (d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / d.len() as f64).sqrt();
        assert!((mean - 40.0).abs() < 0.5 && (sd - 10.0).abs() < 0.5, "mean {mean} sd {sd}");
        assert!(d.iter().all(|&x| (10.0 - 1e-6..=70.0 + 1e-6).contains(&x)));
        let (mut l, t0) = link(LinkParams { delay_ms: 5.0, jitter_ms: 10.0, jitter_distribution: JitterDistribution::Normal, ..LinkParams::default() });
        assert!(run(&mut l, t0, 5_000, 100, MS).iter().all(|&(_, s, d)| d >= s));
    }

    #[test]
    fn jitter_wider_than_the_packet_spacing_reorders_unless_keep_order() {
        let params = LinkParams { delay_ms: 50.0, jitter_ms: 20.0, ..LinkParams::default() };
        let (mut l, t0) = link(params.clone());
        let out = run(&mut l, t0, 5_000, 100, MS);
        let inversions = out.windows(2).filter(|w| w[1].0 < w[0].0).count();
        assert!(inversions > 500, "{inversions}");
        assert!(l.stats().reordered > 500);
        // Spacing wider than the jitter range: no reordering.
        let (mut l, t0) = link(params.clone());
        run(&mut l, t0, 500, 100, 41 * MS);
        assert_eq!(l.stats().reordered, 0);
        // keep_order: in order whatever the spacing, and no packet earlier than its own draw.
        let (mut l, t0) = link(LinkParams { keep_order: true, ..params });
        let out = run(&mut l, t0, 5_000, 100, MS);
        assert!(out.iter().enumerate().all(|(k, &(i, _, _))| i == k));
        assert!(out.iter().all(|&(_, s, d)| d - s >= 30 * MS));
        assert_eq!(l.stats().reordered, 0);
    }

    #[test]
    fn random_loss_matches_the_configured_rate() {
        let (mut l, t0) = link(LinkParams { loss: 0.03, ..LinkParams::default() });
        let out = run(&mut l, t0, 100_000, 50, MS);
        let rate = 1.0 - out.len() as f64 / 100_000.0;
        assert!((rate - 0.03).abs() < 0.003, "{rate}");
        assert_eq!(l.stats().dropped.loss, 100_000 - out.len() as u64);
        assert_eq!(l.stats().dropped.total(), l.stats().dropped.loss);
    }

    /// Mean length of runs of consecutive lost packets, and the loss rate.
    fn loss_runs(params: LinkParams, n: usize) -> (f64, f64) {
        let (mut l, t0) = link(params);
        let mut got = vec![false; n];
        for (i, _, _) in run(&mut l, t0, n, 50, MS) {
            got[i] = true;
        }
        let mut runs = Vec::new();
        let mut cur = 0;
        for g in got.iter() {
            if !g {
                cur += 1;
            } else if cur > 0 {
                runs.push(cur as f64);
                cur = 0;
            }
        }
        let lost = got.iter().filter(|g| !**g).count() as f64;
        (runs.iter().sum::<f64>() / runs.len() as f64, lost / n as f64)
    }

    #[test]
    fn gilbert_elliott_loses_in_bursts_of_the_configured_mean_length() {
        let burst = Burst { good_to_bad: 0.05, bad_to_good: 0.25, loss_good: 0.0, loss_bad: 1.0 };
        let params = LinkParams { burst: Some(burst), ..LinkParams::default() };
        let expected = params.expected_loss();
        let (mean_run, rate) = loss_runs(params, 200_000);
        assert!((mean_run - 4.0).abs() < 0.2, "mean burst {mean_run}");
        assert!((rate - expected).abs() < 0.01, "rate {rate} vs {expected}");
        // The same loss rate, independent: runs of about 1 / (1 - p).
        let (random_run, _) = loss_runs(LinkParams { loss: expected, ..LinkParams::default() }, 200_000);
        assert!(random_run < 1.3, "{random_run}");
    }

    #[test]
    fn the_bandwidth_cap_paces_packets_and_tail_drops_beyond_the_queue() {
        // 1 Mbit/s = 125 bytes/ms: a 1250-byte packet takes 10 ms to serialise.
        let params = LinkParams { rate_kbit: Some(1000.0), queue_bytes: 12_500, ..LinkParams::default() };
        let (mut l, t0) = link(params.clone());
        // Paced: one every 12 ms (slower than the cap) leaves unchanged but for serialisation.
        let out = run(&mut l, t0, 100, 1250, 12 * MS);
        assert!(out.iter().all(|&(_, s, d)| d - s == 10 * MS));
        // A burst of 30 at once: 10 fit in the queue (12.5 kB), the rest are tail-dropped, and
        // the ten leave 10 ms apart.
        let (mut l, t0) = link(params);
        let mut out = Vec::new();
        for i in 0..30 {
            l.on_packet(t0, vec![i as u8; 1250]);
        }
        while let Some(at) = l.poll_timeout() {
            out.push((l.poll_transmit(at).unwrap()[0], at - t0));
        }
        assert_eq!(out.len(), 10);
        assert_eq!(l.stats().dropped.queue, 20);
        assert!(out.iter().enumerate().all(|(k, &(id, dt))| id as usize == k && dt == 10 * MS * (k as u32 + 1)));
        // Throughput under overload is the cap: 10 s of 2 Mbit/s offered.
        let (mut l, t0) = link(LinkParams { rate_kbit: Some(1000.0), ..LinkParams::default() });
        let out = run(&mut l, t0, 2000, 1250, 5 * MS);
        let span = (out.last().unwrap().2 - t0).as_secs_f64();
        let kbit_s = out.len() as f64 * 1250.0 * 8.0 / span / 1000.0;
        assert!((kbit_s - 1000.0).abs() < 10.0, "{kbit_s}");
    }

    #[test]
    fn blackouts_drop_exactly_in_their_windows() {
        let params = LinkParams { delay_ms: 20.0, blackout: Some(Blackout { every_s: 1.0, for_s: 0.25, offset_s: Some(0.5) }), ..LinkParams::default() };
        let (mut l, t0) = link(params);
        let out = run(&mut l, t0, 3000, 100, MS); // 3 s, one packet a millisecond
        let in_window = |t: Instant| {
            let ms = (t - t0).as_millis() as u64;
            ms >= 500 && (ms - 500) % 1000 < 250
        };
        // Delivered: sent outside a window and due outside one.
        assert!(out.iter().all(|&(_, s, d)| !in_window(s) && !in_window(d)));
        // Everything else was dropped, and counted as blackout: windows [0.5, 0.75), [1.5, 1.75),
        // [2.5, 2.75) catch 250 sends each, plus the 20 sent just before each window (due inside).
        assert_eq!(l.stats().dropped.blackout, 3 * 250 + 3 * 20);
        assert_eq!(out.len(), 3000 - 3 * 270);
        // Traffic resumes at the end of each window.
        assert!(out.iter().any(|&(_, s, _)| (s - t0).as_millis() == 750));
    }

    #[test]
    fn the_first_blackout_comes_after_one_full_period_by_default() {
        let params = LinkParams { blackout: Some(Blackout { every_s: 30.0, for_s: 5.0, offset_s: None }), ..LinkParams::default() };
        let imp = Impairment::new(&params, Instant::now());
        let t0 = imp.epoch;
        let s = Duration::from_secs;
        assert!(!imp.in_blackout(t0) && !imp.in_blackout(t0 + s(29)));
        assert!(imp.in_blackout(t0 + s(30)) && imp.in_blackout(t0 + s(34)));
        assert!(!imp.in_blackout(t0 + s(35)) && imp.in_blackout(t0 + s(60)) && !imp.in_blackout(t0 + s(65)));
    }

    #[test]
    fn duplication_delivers_copies_at_the_configured_rate() {
        let (mut l, t0) = link(LinkParams { duplicate: 0.1, delay_ms: 10.0, ..LinkParams::default() });
        let out = run(&mut l, t0, 50_000, 50, MS);
        let copies = out.len() - 50_000;
        assert_eq!(copies as u64, l.stats().duplicated);
        assert!((copies as f64 / 50_000.0 - 0.1).abs() < 0.01, "{copies}");
        assert_eq!(l.stats().packets_out, out.len() as u64);
    }

    #[test]
    fn the_delay_line_is_bounded_in_bytes() {
        let t0 = Instant::now();
        let mut l: Link<Vec<u8>> = Link::new(&LinkParams { delay_ms: 1000.0, ..LinkParams::default() }, t0, 1, 10_000);
        for _ in 0..50 {
            l.on_packet(t0, vec![0; 1000]);
        }
        assert_eq!(l.queued_bytes(), 10_000);
        assert_eq!(l.stats().dropped.overflow, 40);
        assert_eq!(l.poll_transmit(t0 + 999 * MS), None);
        assert_eq!(l.poll_timeout(), Some(t0 + 1000 * MS));
        let mut n = 0;
        while l.poll_transmit(t0 + 1000 * MS).is_some() {
            n += 1;
        }
        assert_eq!((n, l.queued_bytes(), l.is_empty()), (10, 0, true));
    }

    #[test]
    fn the_same_seed_gives_the_same_fate_to_every_packet() {
        let params = LinkParams { delay_ms: 30.0, jitter_ms: 25.0, loss: 0.05, duplicate: 0.02, ..LinkParams::default() };
        let (mut a, t0) = link(params.clone());
        let mut b = Link::new(&params, t0, 7, 1 << 30);
        let (ra, rb) = (run(&mut a, t0, 5000, 64, MS), run(&mut b, t0, 5000, 64, MS));
        assert_eq!(ra, rb);
        let mut c = Link::new(&params, t0, 8, 1 << 30);
        assert_ne!(ra, run(&mut c, t0, 5000, 64, MS));
    }

    #[test]
    fn stats_differences_and_arrays_round_trip() {
        let s = DirectionStats { packets_in: 9, bytes_in: 8, packets_out: 7, bytes_out: 6, dropped: Drops { loss: 5, burst: 4, queue: 3, blackout: 2, overflow: 1 }, duplicated: 11, reordered: 12 };
        assert_eq!(DirectionStats::from_array(s.to_array()), s);
        assert_eq!(s.since(&s), DirectionStats::default());
        assert_eq!(s.since(&DirectionStats::default()), s);
    }
}
