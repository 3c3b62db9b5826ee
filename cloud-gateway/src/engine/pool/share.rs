//! Fair shares of the engine pool's work between devices, weighted by tokens.
//!
//! The pool has no queue of its own (engines batch continuously and serve what they hold in
//! their own order), so fairness applies at admission, to what runs out: the engine's time,
//! counted as the tokens in flight on the workers (admission's [`super::admission::cost`] of
//! each request). A device is its verified identity; its sessions share one share. The budget
//! divided is the tokens the open workers can hold and still answer a short escalation before
//! this one's deadline ([`super::admission::Offer::budget_tokens`]).
//!
//! What a device counts:
//! - its tokens and requests in flight, from admission ([`WorkShare::start`]) to the end
//!   ([`WorkShare::end`]);
//! - its demand: what it holds, or, with nothing in flight, what it last asked (one
//!   escalation's cost), for `window` after its last escalation or until one of its sessions
//!   ends ([`WorkShare::leave`]): a light device holds nothing between escalations, yet its
//!   next one needs room;
//! - the tokens admitted for it while active, on the virtual token counter both LLM paths
//!   keep ([`VirtualTokens`]: a device becoming active starts from the least served active
//!   device's count, so time away banks no credit);
//! - with the line on, its place in the line ([`WorkShare::wait`]).
//!
//! The rules ([`WorkShare::admit`]), in order:
//! - **owed room**: a device with nothing in flight that was served more than
//!   [`PEER_QUANTUM`] tokens less than the asking device, or not yet admitted since it became
//!   active, is owed room for what it last asked (when that fits the budget at all); the asking
//!   device is admitted only where its escalation, the work in flight and the largest such ask
//!   fit the budget together (refusal `Behind`, reason `share`), even with nothing in flight.
//!   Room is kept for one ask, the largest: light devices come one by one;
//! - **fair share**: once half the budget is taken, a device whose tokens in flight with this
//!   escalation's would pass its max-min fair share ([`water_fill`] over the devices'
//!   demands) is refused (`Over`, reason `share`) and gives up its place in line;
//! - **the line**: what the devices at the head of the line last asked (in the order they
//!   started waiting, as many as fit in half the budget, at least the first) is reserved from
//!   every device that started waiting later or does not wait (`Reserved`); a place lapses
//!   when its device does not come back within the time it was told to wait plus
//!   [`TICKET_GRACE`], and one held longer than [`DEFAULT_MAX_WAIT`] goes to the back, so a
//!   device that never fits holds nobody back for good;
//! - otherwise a device with nothing in flight is admitted (one escalation at a time is the
//!   least any device may have; the cost rule still applies), and so is everyone while less
//!   than half the budget is taken: work-conserving.
//!
//! Bounded: at most `max_devices` devices (more only while more have requests in flight, which
//! the pool's places bound), idle ones least recently seen forgotten first; an idle device past
//! its `window` is forgotten at once. Pure: `now` and the budget are passed in; the pool's
//! admission gate ([`super::gate`]) holds it.
#![cfg_attr(not(test), deny(clippy::disallowed_methods))]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::dispatch::fair::{least_served, VirtualTokens};

/// How long after its last escalation a device's demand still counts: a few pauses of a device
/// in conversation (the well-behaved devices of the fair-flood scenario escalate every 0.5 s
/// on the embedded path, every few seconds against a CPU engine). A device that left stops
/// holding its ask back from the others after this.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(30);

/// How many tokens more than another a device must have been served before room is kept for
/// the other's ask ahead of its own (see the module docs): devices within it are peers, so the
/// rule puts a flood behind light devices, not light devices behind each other by an
/// escalation or two.
pub const PEER_QUANTUM: u64 = 512;

/// How long past the wait it was told a waiting device's ticket still holds its place: a
/// device retries after a jittered hint and a hard token of its own, not to the millisecond.
pub const TICKET_GRACE: Duration = Duration::from_secs(1);

/// How long a device may hold the head of the line before it goes to the back (see the
/// module docs): a few deadlines of a CPU engine.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(10);

/// A device's place in the line of those waiting (see the module docs).
#[derive(Debug, Clone, Copy)]
struct Ticket {
    /// When it started waiting: the line's order.
    since: Instant,
    /// When its place lapses unless it comes back.
    until: Instant,
}

/// One device's work.
#[derive(Debug, Clone, Copy)]
struct Device {
    /// Tokens admitted and not finished.
    in_flight: usize,
    /// Requests admitted and not finished.
    requests: usize,
    /// The cost of its last escalation, admitted or not.
    asked: usize,
    /// Its last escalation or its last request's end.
    seen: Instant,
    /// Its place in the line while it waits to be admitted.
    ticket: Option<Ticket>,
    /// Tokens admitted for it while active, started from the least served active device's
    /// count when it becomes active.
    served: VirtualTokens,
    /// Whether anything was admitted for it since it became active.
    admitted: bool,
}

impl Device {
    /// Whether `self`, with nothing in flight, is owed room by `other` (see the module docs):
    /// served more than [`PEER_QUANTUM`] tokens less, or not yet admitted at all since it
    /// became active while `other` was.
    fn is_owed_by(&self, other: &Device) -> bool {
        self.requests == 0 && (self.served.get().saturating_add(PEER_QUANTUM) < other.served.get() || (!self.admitted && other.admitted))
    }
}

/// A refusal for the device's share: what it holds and what its share is, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverShare {
    /// Its tokens in flight.
    pub held: usize,
    /// Its fair share of the budget.
    pub share: usize,
}

/// Why [`WorkShare::admit`] refused an escalation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The device is over its fair share: others' work first.
    Over(OverShare),
    /// Devices that have waited longer reserve what is left: `tokens` of them, ahead of it.
    Reserved {
        /// Tokens reserved for devices ahead of it in the line.
        tokens: usize,
    },
    /// A device served far less asks for `tokens`, which this escalation would leave no room
    /// for: it goes after them.
    Behind {
        /// The work in flight and what the less served device asks, in tokens.
        tokens: usize,
    },
}

/// The devices' work in flight on the pool (see the module docs).
#[derive(Debug)]
pub struct WorkShare {
    devices: HashMap<Arc<str>, Device>,
    max_devices: usize,
    window: Duration,
}

impl WorkShare {
    /// Shares between devices active within `window`, remembering at most `max_devices` (at
    /// least 1) besides those in flight; a device holds the head of the line at most
    /// [`DEFAULT_MAX_WAIT`].
    pub fn new(max_devices: usize, window: Duration) -> Self {
        Self { devices: HashMap::new(), max_devices: max_devices.max(1), window }
    }

    /// Whether `device` may put an escalation of `cost` tokens in flight on a pool whose budget
    /// is `budget` tokens, at `now`; its ask is remembered either way. Refused for what others
    /// reserve, it should [`WorkShare::wait`].
    pub fn admit(&mut self, device: &Arc<str>, cost: usize, budget: usize, now: Instant) -> Result<(), Refused> {
        self.forget_idle(now);
        let d = self.entry(device, cost, now);
        d.asked = cost;
        d.seen = now;
        let mine = *d;
        self.evict(device);
        if !self.others_active(device) {
            // Alone on the pool, its fair share is all of it: only the cost rule may refuse it,
            // even when the estimate's margin leaves no budget to share (a lone device's hard
            // token behind its own prompt pre-sync is work the engine answers).
            return Ok(());
        }
        let total: usize = self.devices.values().map(|d| d.in_flight).sum();
        let first = self.owed_ask(&mine, budget);
        if first > 0 && total.saturating_add(cost).saturating_add(first) > budget {
            return Err(Refused::Behind { tokens: total.saturating_add(first) });
        }
        let reserved = self.reserved_ahead_of(device, mine.ticket, budget);
        let taken = total.saturating_add(reserved).saturating_add(cost);
        if (mine.requests == 0 && reserved == 0) || taken.saturating_mul(2) <= budget {
            return Ok(());
        }
        let share = self.fair_share(device, cost, budget);
        let held = mine.in_flight;
        if mine.requests > 0 && held.saturating_add(cost) > share {
            if let Some(d) = self.devices.get_mut(device) {
                d.ticket = None; // over its share, it waits for nobody's room
            }
            return Err(Refused::Over(OverShare { held, share }));
        }
        match reserved > 0 && taken > budget {
            true => Err(Refused::Reserved { tokens: reserved }),
            false => Ok(()),
        }
    }

    /// `device`'s entry, new ones starting from the least served active device's count (a
    /// device that was away is not owed what it did not ask for meanwhile).
    fn entry(&mut self, device: &Arc<str>, cost: usize, now: Instant) -> &mut Device {
        // The least served count only for a new device (an entry borrow would hold the map).
        if !self.devices.contains_key(device) {
            let least = VirtualTokens::starting_at(least_served(self.devices.values().map(|d| d.served)).unwrap_or(0));
            self.devices.insert(device.clone(), Device { in_flight: 0, requests: 0, asked: cost, seen: now, ticket: None, served: least, admitted: false });
        }
        self.devices.entry(device.clone()).or_insert(Device { in_flight: 0, requests: 0, asked: cost, seen: now, ticket: None, served: VirtualTokens::default(), admitted: false })
    }

    /// The most that a device `me` owes room to last asked (0: none), of the asks that fit
    /// `budget` at all (one that does not cannot be answered in time anyway, and keeping room
    /// for it would refuse everyone): room is kept for it (see the module docs).
    fn owed_ask(&self, me: &Device, budget: usize) -> usize {
        self.devices.values().filter(|d| d.is_owed_by(me) && d.asked <= budget).map(|d| d.asked).max().unwrap_or(0)
    }

    /// `device`, within its share, was refused at `now` (for cost, or for what others
    /// reserve) and told to come back by `until`: it takes a place in the line, or keeps its
    /// own (see the module docs).
    pub fn wait(&mut self, device: &str, until: Instant, now: Instant) {
        if let Some(d) = self.devices.get_mut(device) {
            let until = until + TICKET_GRACE;
            d.ticket = Some(match d.ticket {
                Some(t) if now.saturating_duration_since(t.since) <= DEFAULT_MAX_WAIT => Ticket { since: t.since, until: until.max(t.until) },
                _ => Ticket { since: now, until }, // new, or held the line too long: to the back
            });
        }
    }

    /// Whether a device other than `device` is active (in flight, or seen within the window
    /// when last admitted or refused): the pool is shared.
    pub fn others_active(&self, device: &str) -> bool {
        self.devices.keys().any(|d| **d != *device)
    }

    /// Whether another device has been served more than [`PEER_QUANTUM`] tokens more than
    /// `device`, or `device` was not admitted yet since it became active while another was:
    /// room is kept for `device`'s asks ([`Refused::Behind`]).
    pub fn owed_room(&self, device: &str) -> bool {
        let Some(mine) = self.devices.get(device) else { return false };
        let mine = Device { requests: 0, ..*mine };
        self.devices.values().any(|d| mine.is_owed_by(d))
    }

    /// Devices waiting in line.
    pub fn waiting_devices(&self) -> usize {
        self.devices.values().filter(|d| d.ticket.is_some()).count()
    }

    /// What the devices at the head of the line, ahead of `device` (of every waiting device, if
    /// it has no `ticket`), last asked: in ticket order, as many as fit in half the budget (at
    /// least the first). Reserving for the whole line left the engine idle while its head slept
    /// out its retry hint; half the budget stays for whoever comes.
    fn reserved_ahead_of(&self, device: &Arc<str>, ticket: Option<Ticket>, budget: usize) -> usize {
        let mut ahead: Vec<(Instant, usize)> = self
            .devices
            .iter()
            .filter(|(k, _)| *k != device)
            .filter_map(|(_, d)| d.ticket.map(|t| (t.since, d.asked.min(budget))))
            .filter(|(since, _)| ticket.is_none_or(|mine| *since < mine.since))
            .collect();
        ahead.sort_unstable_by_key(|&(since, _)| since);
        let mut reserved = 0usize;
        for (i, (_, asked)) in ahead.into_iter().enumerate() {
            if i > 0 && reserved.saturating_add(asked).saturating_mul(2) > budget {
                break;
            }
            reserved = reserved.saturating_add(asked);
        }
        reserved
    }

    /// `device`'s max-min fair share of `budget`, its demand being what it holds and `cost`.
    fn fair_share(&self, device: &Arc<str>, cost: usize, budget: usize) -> usize {
        let mut me = 0;
        let demands: Vec<usize> = self
            .devices
            .iter()
            .enumerate()
            .map(|(i, (k, d))| match k == device {
                true => {
                    me = i;
                    d.in_flight.saturating_add(cost)
                }
                false => d.in_flight.max(d.asked),
            })
            .collect();
        water_fill(&demands, budget)[me]
    }

    /// `device`'s escalation of `cost` tokens was admitted at `now`: in flight until
    /// [`WorkShare::end`].
    /// Its place in the line, if it had one, goes to whoever waited next.
    pub fn start(&mut self, device: &Arc<str>, cost: usize, now: Instant) {
        let d = self.entry(device, cost, now);
        d.in_flight = d.in_flight.saturating_add(cost);
        d.served.charge(cost as u64);
        d.admitted = true;
        d.requests += 1;
        d.seen = now;
        d.ticket = None;
    }

    /// `device`'s request of `cost` tokens ended at `now`, however it ended.
    pub fn end(&mut self, device: &str, cost: usize, now: Instant) {
        if let Some(d) = self.devices.get_mut(device) {
            d.in_flight = d.in_flight.saturating_sub(cost);
            d.requests = d.requests.saturating_sub(1);
            d.seen = now;
        }
    }

    /// One of `device`'s sessions ended: what it last asked counts no longer and it leaves the
    /// line (see the module docs); a device with nothing in flight is forgotten.
    pub fn leave(&mut self, device: &str) {
        if let Some(d) = self.devices.get_mut(device) {
            d.asked = 0;
            d.ticket = None;
            if d.requests == 0 {
                self.devices.remove(device);
            }
        }
    }

    /// Devices with requests in flight.
    pub fn in_flight_devices(&self) -> usize {
        self.devices.values().filter(|d| d.requests > 0).count()
    }

    /// Devices remembered (in flight, or idle within their window and the bound).
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    /// Whether no device is remembered.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// Forget idle devices not seen within the window, and places in line that lapsed.
    fn forget_idle(&mut self, now: Instant) {
        let window = self.window;
        self.devices.retain(|_, d| {
            if d.ticket.is_some_and(|t| now > t.until) {
                d.ticket = None;
            }
            d.requests > 0 || now.saturating_duration_since(d.seen) <= window
        });
    }

    /// Forget idle devices, least recently seen first, until at most `max_devices` remain
    /// besides those in flight (never `keep`).
    fn evict(&mut self, keep: &Arc<str>) {
        while self.devices.len() > self.max_devices {
            let oldest = self.devices.iter().filter(|(k, d)| d.requests == 0 && *k != keep).min_by_key(|(_, d)| d.seen).map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.devices.remove(&k);
                }
                None => break,
            }
        }
    }
}

/// Max-min fair shares of `capacity` among `demands`: a demand below an equal split of what is
/// left gets all it asks, the rest is split among the others.
pub fn water_fill(demands: &[usize], capacity: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by_key(|&i| demands[i]);
    let mut fair = vec![0; demands.len()];
    let mut left = capacity;
    for (k, &i) in order.iter().enumerate() {
        let level = left / (order.len() - k);
        fair[i] = demands[i].min(level);
        left -= fair[i];
    }
    fair
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn id(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    /// Each of `devices` admitted once for a token: none is a newcomer owed room.
    fn established(share: &mut WorkShare, devices: &[&Arc<str>], t: Instant) {
        for d in devices {
            share.start(d, 1, t);
            share.end(d, 1, t);
        }
    }

    #[test]
    fn max_min_shares_give_small_demands_all_they_ask_and_split_the_rest() {
        assert_eq!(water_fill(&[10, 10, 1_000], 120), vec![10, 10, 100]);
        assert_eq!(water_fill(&[100, 100], 100), vec![50, 50]);
        assert_eq!(water_fill(&[], 100), Vec::<usize>::new());
    }

    #[test]
    fn a_device_served_far_more_leaves_room_for_what_a_less_served_device_asks_even_with_nothing_in_flight() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        let (flood, light, peer) = (id("flood"), id("light"), id("peer"));
        let serve = |share: &mut WorkShare, d: &Arc<str>, cost: usize, t: Instant| {
            assert_eq!(share.admit(d, cost, 100, t), Ok(()));
            share.start(d, cost, t);
            share.end(d, cost, t);
        };
        serve(&mut share, &flood, 20, t0);
        // A light device arrives, starting from the flood's count (owed nothing yet), and is
        // served its 40; so is a peer of it.
        serve(&mut share, &light, 40, t0 + MS);
        serve(&mut share, &peer, 30, t0 + MS);
        // The flood, alone on the engine while they think, is served 600 tokens more.
        for i in 0..30 {
            serve(&mut share, &flood, 20, t0 + (10 + i) * MS);
        }
        let t = t0 + 100 * MS;
        assert_eq!(share.admit(&flood, 70, 100, t), Err(Refused::Behind { tokens: 40 }), "70 and the light device's 40 pass 100: not even with nothing in flight");
        assert_eq!(share.admit(&flood, 20, 100, t), Ok(()), "what fits beside that room is the flood's");
        share.start(&flood, 20, t);
        assert_eq!(share.admit(&flood, 20, 100, t), Ok(()));
        share.start(&flood, 20, t);
        assert_eq!(share.admit(&flood, 30, 100, t), Err(Refused::Behind { tokens: 80 }), "its 40 in flight, 30 more and the 40 pass 100");
        share.end(&flood, 20, t);
        share.end(&flood, 20, t);
        assert_eq!(share.admit(&flood, 60, 100, t), Ok(()), "the rest of the engine is the flood's");
        share.start(&flood, 60, t);
        assert_eq!(share.admit(&light, 40, 100, t + MS), Ok(()), "the light device finds its room");
        share.start(&light, 40, t + MS);
        assert_eq!(share.admit(&peer, 30, 100, t + MS), Ok(()), "a peer is not held back for it: within a quantum of each other");
    }

    #[test]
    fn room_is_owed_to_a_device_served_far_less_than_another_and_not_between_peers() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        let (flood, light, peer) = (id("flood"), id("light"), id("peer"));
        established(&mut share, &[&flood, &light, &peer], t0);
        share.admit(&light, 30, 100, t0).unwrap();
        share.admit(&peer, 30, 100, t0).unwrap();
        share.start(&flood, 20, t0);
        assert!(!share.owed_room("light"), "20 tokens apart: peers");
        assert!(share.others_active("light"));
        share.start(&flood, 600, t0);
        assert!(share.owed_room("light") && share.owed_room("peer"));
        assert!(!share.owed_room("flood"), "served the most, owed nothing");
        assert!(!share.owed_room("unknown"));
    }

    #[test]
    fn a_newcomer_is_owed_room_for_its_first_escalation_but_not_for_an_ask_no_budget_could_hold() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        let (flood, new, huge) = (id("flood"), id("new"), id("huge"));
        share.start(&flood, 20, t0);
        share.end(&flood, 20, t0);
        assert_eq!(share.admit(&new, 40, 100, t0 + MS), Ok(()));
        assert!(share.owed_room("new"), "not yet admitted, while the flood was");
        assert_eq!(share.admit(&flood, 70, 100, t0 + MS), Err(Refused::Behind { tokens: 40 }), "room for the newcomer's first ask");
        share.start(&new, 40, t0 + 2 * MS);
        share.end(&new, 40, t0 + 2 * MS);
        assert!(!share.owed_room("new"), "admitted once, a peer of the flood");
        assert_eq!(share.admit(&huge, 150, 100, t0 + 3 * MS), Ok(()), "for the cost rule to judge");
        assert_eq!(share.admit(&flood, 70, 100, t0 + 3 * MS), Ok(()), "150 tokens never fit a budget of 100: no room is kept for them");
    }

    #[test]
    fn a_device_becoming_active_starts_from_the_least_served_count() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        let (flood, late) = (id("flood"), id("late"));
        for i in 0..100 {
            share.start(&flood, 20, t0 + i * MS);
            share.end(&flood, 20, t0 + i * MS);
        }
        established(&mut share, &[&late], t0 + 200 * MS);
        share.admit(&late, 40, 100, t0 + 200 * MS).unwrap();
        assert_eq!(share.admit(&flood, 80, 100, t0 + 200 * MS), Ok(()), "admitted once, the newcomer is owed nothing for the time it was away");
    }

    #[test]
    fn a_flood_is_refused_for_its_share_while_light_devices_between_escalations_keep_theirs() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        let flood = id("flood");
        // Twenty light devices asked for 6 tokens each and were answered: none in flight now.
        for i in 0..20 {
            let d = id(&format!("light-{i}"));
            assert_eq!(share.admit(&d, 6, 400, t0), Ok(()));
            share.start(&d, 6, t0);
            share.end(&d, 6, t0 + 100 * MS);
        }
        // The flood fills the budget of 400 tokens, less what the light devices ask (120).
        let mut held = 0;
        while share.admit(&flood, 20, 400, t0 + 200 * MS).is_ok() {
            share.start(&flood, 20, t0 + 200 * MS);
            held += 20;
        }
        assert_eq!(held, 280, "400 less twenty asks of 6");
        assert_eq!(share.admit(&flood, 20, 400, t0 + 200 * MS), Err(Refused::Over(OverShare { held: 280, share: 280 })));
        // A light device coming back is never refused for its share.
        assert_eq!(share.admit(&id("light-3"), 6, 400, t0 + 300 * MS), Ok(()));
    }

    #[test]
    fn alone_or_below_half_the_budget_a_device_takes_what_it_wants() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        let flood = id("flood");
        for _ in 0..5 {
            assert_eq!(share.admit(&flood, 20, 1_000, t0), Ok(()), "below half the budget: work-conserving");
            share.start(&flood, 20, t0);
        }
        // Alone, its share is the whole budget.
        for _ in 0..45 {
            assert_eq!(share.admit(&flood, 20, 1_000, t0), Ok(()));
            share.start(&flood, 20, t0);
        }
        assert_eq!(share.admit(&flood, 20, 1_000, t0), Ok(()), "alone, even past the budget: that is the cost rule's to refuse");
        // Once the light devices' window has passed, what they asked counts no longer.
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        share.admit(&id("light"), 500, 1_000, t0).unwrap();
        share.start(&flood, 500, t0);
        assert!(share.admit(&flood, 20, 1_000, t0 + 1_000 * MS).is_err(), "the light device's 500 are reserved");
        assert_eq!(share.admit(&flood, 20, 1_000, t0 + DEFAULT_WINDOW + 1_000 * MS), Ok(()), "idle past its window: forgotten");
        assert_eq!(share.len(), 1);
    }

    #[test]
    fn a_device_alone_is_never_refused_for_its_share_even_when_the_margin_leaves_no_budget() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        let lone = id("lone");
        assert_eq!(share.admit(&lone, 112, 0, t0), Ok(()));
        share.start(&lone, 112, t0); // its prompt pre-sync, in flight
        assert_eq!(share.admit(&lone, 115, 0, t0 + 100 * MS), Ok(()), "its hard token behind its own pre-sync");
        share.admit(&id("other"), 10, 0, t0 + 200 * MS).ok();
        assert!(share.admit(&lone, 115, 0, t0 + 300 * MS).is_err(), "with another device asking, shares apply again");
    }

    #[test]
    fn devices_whose_sessions_ended_leave_a_newcomer_alone_on_the_pool() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        for i in 0..20 {
            let d = id(&format!("gone-{i}"));
            share.admit(&d, 15, 400, t0).unwrap();
            share.start(&d, 15, t0);
            share.end(&d, 15, t0 + 100 * MS);
            share.leave(&d);
        }
        assert!(share.is_empty(), "nothing in flight: forgotten");
        let lone = id("lone");
        let mut held = 0;
        while share.admit(&lone, 20, 400, t0 + 200 * MS).is_ok() && held < 1_000 {
            share.start(&lone, 20, t0 + 200 * MS);
            held += 20;
        }
        assert_eq!(held, 1_000, "alone on the pool, nothing of it is refused for its share (the cost rule bounds it)");
    }

    #[test]
    fn a_device_leaving_with_work_in_flight_keeps_it_counted_until_it_ends() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        let (a, b) = (id("a"), id("b"));
        share.start(&a, 300, t0);
        share.leave(&a);
        assert_eq!(share.in_flight_devices(), 1);
        share.start(&b, 20, t0);
        assert_eq!(share.admit(&b, 200, 400, t0), Err(Refused::Over(OverShare { held: 20, share: 200 })), "a's 300 tokens still run");
        share.end("a", 300, t0 + MS);
        assert_eq!(share.admit(&b, 200, 400, t0 + MS), Ok(()), "a ran out and asks nothing more");
    }

    #[test]
    fn a_device_with_nothing_in_flight_may_always_send_one() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        share.start(&id("other"), 900, t0);
        assert_eq!(share.admit(&id("big"), 4_000, 1_000, t0), Ok(()), "its cost is for the cost rule to judge");
        share.start(&id("big"), 4_000, t0);
        assert!(share.admit(&id("big"), 1, 1_000, t0).is_err());
        share.end("big", 4_000, t0);
        assert_eq!(share.in_flight_devices(), 1);
    }

    #[test]
    fn sessions_of_one_device_share_one_share() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        let (many, one) = (id("many-sessions"), id("one-session"));
        share.admit(&one, 10, 100, t0).unwrap();
        share.start(&one, 10, t0);
        let mut admitted = 0;
        for _ in 0..50 {
            if share.admit(&many, 10, 100, t0).is_ok() {
                share.start(&many, 10, t0);
                admitted += 1;
            }
        }
        assert_eq!(admitted, 9, "100 tokens less the other device's 10: nine of its fifty sessions' escalations");
    }

    #[test]
    fn the_devices_remembered_are_bounded_and_those_in_flight_are_kept() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(8, DEFAULT_WINDOW);
        let busy = id("busy");
        share.start(&busy, 5, t0);
        for i in 0..10_000u64 {
            let d = id(&format!("device-{i}"));
            let t = t0 + Duration::from_micros(i);
            share.admit(&d, 3, 100, t).unwrap();
            assert!(share.len() <= 9, "{} devices after {i}", share.len());
        }
        assert_eq!(share.in_flight_devices(), 1, "a device in flight is never forgotten");
        share.end("busy", 5, t0);
        share.admit(&id("late"), 1, 100, t0 + DEFAULT_WINDOW * 2).unwrap();
        assert_eq!(share.len(), 1, "past the window, every idle device is forgotten");
    }

    #[test]
    fn a_light_device_refused_for_cost_keeps_its_room_from_a_flood_that_retries_more_often() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        let (flood, light) = (id("flood"), id("light"));
        established(&mut share, &[&flood, &light], t0);
        share.start(&flood, 90, t0);
        assert_eq!(share.admit(&light, 60, 100, t0), Ok(()), "nothing in flight: for the cost rule to judge");
        share.wait(&light, t0 + 500 * MS, t0); // the cost rule refused it: 90 tokens ahead
        share.end(&flood, 90, t0 + 100 * MS);
        // The engine drained and the flood, retrying every few ms, is there first.
        assert_eq!(share.admit(&flood, 64, 100, t0 + 110 * MS), Err(Refused::Reserved { tokens: 60 }), "not with nothing in flight either");
        assert_eq!(share.admit(&flood, 16, 100, t0 + 120 * MS), Ok(()), "what fits beside the light device's 60 is the flood's");
        share.start(&flood, 16, t0 + 120 * MS);
        assert_eq!(share.admit(&light, 60, 100, t0 + 400 * MS), Ok(()), "its retry finds its room");
        share.start(&light, 60, t0 + 400 * MS);
        assert_eq!(share.waiting_devices(), 0, "admitted, it leaves the line");
    }

    #[test]
    fn devices_waiting_are_admitted_in_the_order_they_started_waiting() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        let (flood, a, b) = (id("flood"), id("a"), id("b"));
        established(&mut share, &[&flood, &a, &b], t0);
        share.start(&flood, 80, t0);
        share.admit(&a, 50, 100, t0).unwrap();
        share.wait(&a, t0 + 500 * MS, t0);
        assert_eq!(share.admit(&b, 60, 100, t0 + 10 * MS), Err(Refused::Reserved { tokens: 50 }), "a waited first");
        share.wait(&b, t0 + 500 * MS, t0 + 10 * MS);
        share.end(&flood, 80, t0 + 100 * MS);
        assert_eq!(share.admit(&b, 60, 100, t0 + 200 * MS), Err(Refused::Reserved { tokens: 50 }), "the engine drained, a's turn first");
        assert_eq!(share.admit(&flood, 64, 100, t0 + 200 * MS), Err(Refused::Reserved { tokens: 50 }), "behind the head of the line");
        assert_eq!(share.admit(&a, 50, 100, t0 + 300 * MS), Ok(()));
        share.start(&a, 50, t0 + 300 * MS);
        assert_eq!(share.admit(&b, 60, 100, t0 + 350 * MS), Ok(()), "first in line now");
    }

    #[test]
    fn the_line_reserves_for_its_head_and_at_most_half_the_budget_so_the_engine_is_not_left_idle() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        share.start(&id("flood"), 100, t0);
        for i in 0..20 {
            let d = id(&format!("light-{i}"));
            let _ = share.admit(&d, 30, 100, t0 + i * MS); // the first passes here, the cost rule refuses it
            share.wait(&d, t0 + 2_000 * MS, t0 + i * MS);
        }
        share.end(&id("flood"), 100, t0 + 100 * MS);
        // Twenty wait, 600 tokens asked; the line holds back the first one's 30 (two would pass half).
        let newcomer = id("newcomer");
        assert_eq!(share.admit(&newcomer, 70, 100, t0 + 200 * MS), Ok(()), "the rest of the budget is for whoever comes");
        share.start(&newcomer, 70, t0 + 200 * MS);
        assert_eq!(share.admit(&id("light-5"), 30, 100, t0 + 300 * MS), Err(Refused::Reserved { tokens: 30 }), "behind light-0");
        assert_eq!(share.admit(&id("light-0"), 30, 100, t0 + 300 * MS), Ok(()), "the head's room was kept");
    }

    #[test]
    fn a_place_in_line_lapses_when_its_device_does_not_come_back() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        let (flood, gone) = (id("flood"), id("gone"));
        share.start(&id("other"), 90, t0);
        share.admit(&gone, 50, 100, t0).unwrap();
        share.wait(&gone, t0 + 500 * MS, t0);
        assert!(share.admit(&flood, 20, 100, t0 + 1_000 * MS).is_err(), "told 0.5 s, held with the grace");
        let lapsed = t0 + 500 * MS + TICKET_GRACE + MS;
        assert_eq!(share.admit(&flood, 20, 100, lapsed), Ok(()), "it did not come back: its room is free again");
        assert_eq!(share.waiting_devices(), 0);
    }

    #[test]
    fn a_device_that_held_the_head_of_the_line_too_long_goes_to_the_back() {
        let t0 = Instant::now();
        let mut share = WorkShare::new(64, DEFAULT_WINDOW);
        let (never_fits, next) = (id("never-fits"), id("next"));
        share.start(&id("flood"), 90, t0);
        share.admit(&never_fits, 80, 100, t0).unwrap();
        share.wait(&never_fits, t0 + 500 * MS, t0);
        share.admit(&next, 30, 100, t0 + MS).unwrap_err();
        share.wait(&next, t0 + 500 * MS, t0 + MS);
        // Refused for cost again and again, never-fits keeps its place, its ticket renewed ...
        let mut t = t0;
        while t < t0 + DEFAULT_MAX_WAIT {
            t += 400 * MS;
            share.admit(&never_fits, 80, 100, t).unwrap();
            share.wait(&never_fits, t + 300 * MS, t);
            share.admit(&next, 30, 100, t).unwrap_err();
            share.wait(&next, t + 300 * MS, t);
        }
        // ... until it has held the head of the line longer than the most any device may.
        assert!(matches!(share.admit(&next, 30, 100, t + MS), Err(Refused::Reserved { .. })), "still behind it");
        t += 400 * MS;
        share.admit(&never_fits, 80, 100, t).unwrap();
        share.wait(&never_fits, t + 300 * MS, t);
        assert_eq!(share.admit(&next, 30, 100, t + MS), Ok(()), "never-fits went to the back");
    }
}
