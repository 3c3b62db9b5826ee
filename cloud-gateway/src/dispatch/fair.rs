//! Token-weighted fairness between devices: a virtual token counter per device (VTC, as in
//! Sheng et al., "Fairness in Serving Large Language Models", and the schedulers of llm-d and
//! AIBrix), without a clock, a runtime or a queue of its own: `now` is passed in, and each LLM
//! path keeps its own queue and asks [`FairShare`] which device goes next.
//!
//! Without it, a device that opens many sessions and escalates as fast as answers come fills
//! the batcher's queue in arrival order, and every other device waits behind it or hears
//! `Busy`. A device is the verified identity that keys sessions (the client certificate's id
//! under mutual TLS, the id `Hello` claimed in the shared-token dev mode), so sessions of one
//! device share one counter: opening more sessions buys no larger share.
//!
//! Rules:
//! - each device's counter is the LLM tokens it has been served (prefilled plus generated),
//!   charged as its work is served ([`FairShare::charge`]);
//! - of the devices with work waiting ("backlogged"), the one with the smallest counter goes
//!   next ([`FairShare::pick`]);
//! - a device that becomes backlogged has its counter lifted to the smallest counter of the
//!   backlogged devices (or, with none, to the last such value): time spent idle banks no
//!   credit, so a device back from a pause cannot then monopolise the LLM
//!   ([`FairShare::enqueue`]);
//! - work-conserving: a device that has nothing waiting is never picked and holds nothing
//!   back, so its unused share goes to whoever has work;
//! - bounded: at most `max_devices` devices are remembered, plus any with work waiting (which
//!   the LLM path's own queue bounds); beyond it the idle device seen longest ago is forgotten
//!   (it would be lifted to the backlogged minimum on its return anyway).
#![cfg_attr(not(test), deny(clippy::disallowed_methods))]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// `--fair-share`: how the LLM is shared between devices under overload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[value(rename_all = "kebab-case")]
pub enum FairShareMode {
    /// The device served the fewest LLM tokens first; a device over its share hears `Busy` first.
    #[default]
    Device,
    /// Oldest first, every device's work weighed alike.
    Off,
}

impl FairShareMode {
    /// Whether devices share fairly.
    pub fn is_on(self) -> bool {
        self == Self::Device
    }
}

/// Devices remembered by default while idle (a forgotten device loses only a debt above the
/// backlogged minimum).
pub const DEFAULT_MAX_DEVICES: usize = 4096;

/// Whether a device holding `held` of a path's `capacity` places (queued or in flight), while
/// `others` other devices hold some, is over its share: the path is at least half full
/// (`in_use` places taken) and the device holds `capacity / (others + 1)` places or more, or,
/// alone, all but an eighth (kept for a device that comes with one escalation: between two
/// escalations a light device holds no place, and would find a flood's queue full). Its next
/// escalation is refused first, so a flood cannot take the places a light device needs; below
/// half full no one is refused for its share (work-conserving).
pub fn over_share(held: usize, others: usize, in_use: usize, capacity: usize) -> bool {
    let share = (capacity / (others + 1)).min(capacity - capacity / 8).max(1);
    in_use.saturating_mul(2) >= capacity && held >= share
}

/// A device's virtual token count, the one counter both LLM paths keep per device (this
/// module's [`FairShare`] for the batcher's queue, `engine::pool::share` for the engine pool's
/// admission): the LLM tokens it was served ([`Self::charge`]), lifted, never lowered, to the
/// least served active device's count when it becomes active ([`Self::lift_to`],
/// [`least_served`]), so time spent idle banks no credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct VirtualTokens(u64);

impl VirtualTokens {
    /// A device becoming active while the least served active device's count is `least`.
    pub fn starting_at(least: u64) -> Self {
        Self(least)
    }

    /// It was served `tokens` more.
    pub fn charge(&mut self, tokens: u64) {
        self.0 = self.0.saturating_add(tokens);
    }

    /// It becomes active again while the least served active device's count is `least`: it
    /// starts from there unless it was served more already.
    pub fn lift_to(&mut self, least: u64) {
        self.0 = self.0.max(least);
    }

    /// The count.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// The least of `counts` (`None` when there is none): what a device becoming active starts from.
pub fn least_served(counts: impl IntoIterator<Item = VirtualTokens>) -> Option<u64> {
    counts.into_iter().min().map(VirtualTokens::get)
}

/// One device's counter.
#[derive(Debug, Clone, Copy)]
struct Device {
    /// Virtual tokens: tokens served, lifted when it becomes backlogged.
    counter: VirtualTokens,
    /// Items of its work waiting in the LLM path's queue.
    waiting: usize,
    /// Last time it was queued to or charged (the least recent idle device is forgotten first).
    seen: Instant,
}

/// The per-device virtual token counters of one LLM path (see the module docs).
#[derive(Debug)]
pub struct FairShare {
    devices: HashMap<Arc<str>, Device>,
    max_devices: usize,
    /// The smallest counter of the backlogged devices as last seen (never goes down): what a
    /// device that becomes backlogged while none is gets lifted to.
    floor: u64,
}

impl FairShare {
    /// Counters for at most `max_devices` idle devices (at least 1) besides the backlogged ones.
    pub fn new(max_devices: usize) -> Self {
        Self { devices: HashMap::new(), max_devices: max_devices.max(1), floor: 0 }
    }

    /// One item of `device`'s work joins the queue at `now`. If the device had nothing
    /// waiting, its counter is lifted to the backlogged minimum first (idle time banks no
    /// credit).
    pub fn enqueue(&mut self, device: &Arc<str>, now: Instant) {
        let floor = self.backlogged_min().unwrap_or(self.floor);
        let d = self.devices.entry(device.clone()).or_insert(Device { counter: VirtualTokens::starting_at(floor), waiting: 0, seen: now });
        if d.waiting == 0 {
            d.counter.lift_to(floor);
        }
        d.waiting += 1;
        d.seen = now;
        self.evict();
    }

    /// One item of `device`'s work left the queue (taken into a batch or sent to a worker,
    /// answered, expired or cancelled) at `now`.
    pub fn dequeue(&mut self, device: &str, now: Instant) {
        if let Some(d) = self.devices.get_mut(device) {
            d.waiting = d.waiting.saturating_sub(1);
            d.seen = now;
        }
        self.raise_floor();
    }

    /// `device` was served `tokens` LLM tokens (prefilled plus generated) at `now`.
    pub fn charge(&mut self, device: &Arc<str>, tokens: u64, now: Instant) {
        let floor = self.backlogged_min().unwrap_or(self.floor);
        let d = self.devices.entry(device.clone()).or_insert(Device { counter: VirtualTokens::starting_at(floor), waiting: 0, seen: now });
        d.counter.charge(tokens);
        d.seen = now;
        let served = d.counter.get();
        match self.backlogged_min() {
            Some(min) => self.floor = self.floor.max(min),
            // No one waits: the device just served is the last to have been backlogged, and
            // whoever comes next starts from its counter.
            None => self.floor = self.floor.max(served),
        }
        self.evict();
    }

    /// Of `candidates` (devices with work that could go next, in the queue's order), the one
    /// with the smallest counter; the first of equals. A device not known counts as the
    /// backlogged minimum.
    pub fn pick<'a>(&self, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
        let floor = self.backlogged_min().unwrap_or(self.floor);
        let mut best: Option<(&'a str, u64)> = None;
        for device in candidates {
            let c = self.counter(device).unwrap_or(floor);
            if best.is_none_or(|(_, b)| c < b) {
                best = Some((device, c));
            }
        }
        best.map(|(d, _)| d)
    }

    /// `device`'s counter, if it is remembered.
    pub fn counter(&self, device: &str) -> Option<u64> {
        self.devices.get(device).map(|d| d.counter.get())
    }

    /// How many tokens `device` is ahead of the backlogged device served least (0 when it is
    /// that device, is not remembered, or none is backlogged): how far over its share it is.
    pub fn lead(&self, device: &str) -> u64 {
        match (self.counter(device), self.backlogged_min()) {
            (Some(c), Some(min)) => c.saturating_sub(min),
            _ => 0,
        }
    }

    /// Devices with work waiting.
    pub fn backlogged(&self) -> usize {
        self.devices.values().filter(|d| d.waiting > 0).count()
    }

    /// The largest counter of a backlogged device minus the smallest (0 with fewer than two):
    /// how far the most-served device with work waiting is ahead of the least-served one.
    pub fn spread(&self) -> u64 {
        let mut counters = self.devices.values().filter(|d| d.waiting > 0).map(|d| d.counter.get());
        let Some(first) = counters.next() else { return 0 };
        let (min, max) = counters.fold((first, first), |(lo, hi), c| (lo.min(c), hi.max(c)));
        max - min
    }

    /// Devices remembered (backlogged or not).
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    /// Whether no device is remembered.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    fn backlogged_min(&self) -> Option<u64> {
        least_served(self.devices.values().filter(|d| d.waiting > 0).map(|d| d.counter))
    }

    fn raise_floor(&mut self) {
        if let Some(min) = self.backlogged_min() {
            self.floor = self.floor.max(min);
        }
    }

    /// Forget idle devices, least recently seen first, until at most `max_devices` remain
    /// (backlogged devices are kept: the LLM path's queue bounds them).
    fn evict(&mut self) {
        while self.devices.len() > self.max_devices {
            let oldest = self.devices.iter().filter(|(_, d)| d.waiting == 0).min_by_key(|(_, d)| d.seen).map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.devices.remove(&k);
                }
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::time::Duration;

    fn id(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    /// A server that serves one item per step, `cost` tokens each, from per-device FIFO
    /// queues, picking devices as `fair` says; returns the tokens each device was served.
    struct Sim {
        fair: FairShare,
        queues: Vec<(Arc<str>, VecDeque<u64>)>,
        t: Instant,
    }

    impl Sim {
        fn new(devices: &[&str]) -> Self {
            Self { fair: FairShare::new(DEFAULT_MAX_DEVICES), queues: devices.iter().map(|d| (id(d), VecDeque::new())).collect(), t: Instant::now() }
        }

        fn push(&mut self, device: usize, cost: u64) {
            let (d, q) = &mut self.queues[device];
            q.push_back(cost);
            self.fair.enqueue(d, self.t);
        }

        /// Serve one item; the device served.
        fn step(&mut self) -> Option<usize> {
            self.t += Duration::from_millis(1);
            let candidates: Vec<&str> = self.queues.iter().filter(|(_, q)| !q.is_empty()).map(|(d, _)| &**d).collect();
            let chosen = self.fair.pick(candidates)?.to_string();
            let i = self.queues.iter().position(|(d, _)| **d == *chosen)?;
            let (d, q) = &mut self.queues[i];
            let cost = q.pop_front()?;
            self.fair.dequeue(d, self.t);
            self.fair.charge(d, cost, self.t);
            Some(i)
        }
    }

    #[test]
    fn a_flooding_device_cannot_starve_a_light_one() {
        let mut sim = Sim::new(&["flood", "light"]);
        // The flood queues 1,000 items of 20 tokens before the light device asks at all.
        for _ in 0..1000 {
            sim.push(0, 20);
        }
        for _ in 0..50 {
            sim.step();
        }
        // Now the light device asks for 10 items of 5 tokens, one at a time (it waits for
        // each answer): each is served after at most one more of the flood's, not after the
        // flood's 950 items.
        for _ in 0..10 {
            sim.push(1, 5);
            let ahead = (0..3).map_while(|_| sim.step().filter(|&i| i == 0)).count();
            assert!(ahead <= 1, "{ahead} of the flood's items went first");
        }
        assert_eq!(sim.queues[1].1.len(), 0, "every light item served");
    }

    #[test]
    fn backlogged_devices_share_tokens_equally_whatever_their_item_sizes() {
        let mut sim = Sim::new(&["big", "small"]);
        for _ in 0..400 {
            sim.push(0, 40);
            sim.push(1, 4);
        }
        let mut served = [0u64; 2];
        for _ in 0..400 {
            let i = sim.step().unwrap();
            served[i] += if i == 0 { 40 } else { 4 };
        }
        let ratio = served[0] as f64 / served[1] as f64;
        assert!((0.9..=1.1).contains(&ratio), "token shares {served:?}");
    }

    #[test]
    fn an_idle_device_banks_no_credit() {
        let mut sim = Sim::new(&["busy", "returning"]);
        // Both served alike, then `returning` goes idle while `busy` is served 10,000 tokens.
        for _ in 0..10 {
            sim.push(0, 10);
            sim.push(1, 10);
        }
        while sim.step().is_some() {}
        for _ in 0..1000 {
            sim.push(0, 10);
            sim.step();
        }
        // `returning` comes back with a long backlog (before `busy` queues more), then `busy`
        // queues again too.
        for _ in 0..100 {
            sim.push(1, 10);
            sim.push(0, 10);
        }
        let lifted = sim.fair.counter("returning").unwrap();
        assert_eq!(lifted, sim.fair.counter("busy").unwrap(), "lifted to the backlogged minimum");
        let next: Vec<usize> = (0..20).filter_map(|_| sim.step()).collect();
        let returning = next.iter().filter(|&&i| i == 1).count();
        assert_eq!(returning, 10, "it shares evenly from its return, not 1,000 items in a row: {next:?}");
    }

    #[test]
    fn work_conserving_when_only_one_device_is_backlogged() {
        let mut sim = Sim::new(&["alone", "quiet"]);
        sim.push(1, 5);
        assert_eq!(sim.step(), Some(1));
        for _ in 0..100 {
            sim.push(0, 50);
        }
        // Far ahead of `quiet`, it is still served at every step while `quiet` waits for nothing.
        let served: Vec<usize> = (0..100).filter_map(|_| sim.step()).collect();
        assert_eq!(served, vec![0; 100]);
        assert_eq!(sim.step(), None, "nothing left");
    }

    #[test]
    fn sessions_of_one_device_share_one_counter() {
        // The queue's items are keyed by device: a device with 50 sessions waiting gets no
        // more than one with one session.
        let mut sim = Sim::new(&["many-sessions", "one-session"]);
        for _ in 0..50 {
            sim.push(0, 8);
        }
        for _ in 0..50 {
            sim.push(1, 8);
        }
        let first: Vec<usize> = (0..20).filter_map(|_| sim.step()).collect();
        assert_eq!(first.iter().filter(|&&i| i == 1).count(), 10, "{first:?}");
    }

    #[test]
    fn the_devices_remembered_are_bounded_and_backlogged_ones_are_kept() {
        let mut fair = FairShare::new(8);
        let t0 = Instant::now();
        let waiting = id("waiting");
        fair.enqueue(&waiting, t0);
        for i in 0..10_000u64 {
            let d = id(&format!("device-{i}"));
            let t = t0 + Duration::from_micros(i + 1);
            fair.enqueue(&d, t);
            fair.dequeue(&d, t);
            fair.charge(&d, 3, t);
            assert!(fair.len() <= 8, "{} devices after {i}", fair.len());
        }
        assert!(fair.counter("waiting").is_some(), "a device with work waiting is never forgotten");
        assert!(fair.counter("device-9999").is_some(), "the most recent idle ones are kept");
        assert!(fair.counter("device-0").is_none(), "the least recent are forgotten");
        assert_eq!(fair.backlogged(), 1);
    }

    #[test]
    fn a_device_is_over_its_share_only_while_the_path_is_contended() {
        assert!(over_share(40, 9, 100, 128), "128 places, ten devices: a share is 12");
        assert!(!over_share(11, 9, 100, 128), "under its share");
        assert!(!over_share(60, 9, 63, 128), "below half full, work-conserving");
        assert!(!over_share(100, 0, 100, 128), "alone, its share is all but an eighth...");
        assert!(over_share(112, 0, 112, 128), "...kept for a device that comes");
        assert!(!over_share(0, 0, 1, 1), "a path of one place takes one escalation");
    }

    #[test]
    fn lead_and_spread_say_how_far_a_device_is_over_its_share() {
        let mut fair = FairShare::new(16);
        let t = Instant::now();
        let (a, b) = (id("a"), id("b"));
        fair.enqueue(&a, t);
        fair.enqueue(&b, t);
        fair.charge(&a, 100, t);
        fair.charge(&b, 30, t);
        assert_eq!((fair.lead("a"), fair.lead("b"), fair.lead("unknown")), (70, 0, 0));
        assert_eq!(fair.spread(), 70);
        fair.dequeue("b", t);
        assert_eq!((fair.lead("a"), fair.spread()), (0, 0), "alone, it is over no one");
        assert_eq!(fair.pick(["b", "a", "new"]), Some("b"), "the device served least goes first");
        assert_eq!(fair.pick(["new", "a"]), Some("new"), "an unknown device counts as the backlogged minimum; the first of equals wins");
    }

    #[test]
    fn virtual_tokens_are_charged_lifted_to_the_least_served_and_never_lowered() {
        let mut away = VirtualTokens::starting_at(100);
        away.charge(20);
        assert_eq!(away.get(), 120);
        away.lift_to(500);
        assert_eq!(away.get(), 500, "back from a pause: starts from the least served active count");
        away.lift_to(300);
        assert_eq!(away.get(), 500, "never lowered");
        let counts = [VirtualTokens::starting_at(7), VirtualTokens::starting_at(3), VirtualTokens::starting_at(9)];
        assert_eq!((least_served(counts), least_served([])), (Some(3), None));
    }
}
