//! The batcher's admission book: what is admitted and not answered yet, in total, per device
//! and per session, with each session's prefill state (what the backend has computed for
//! it). One owner: admitting an escalation decides ([`admission::decide`]) and records its
//! work in one step ([`AdmissionBook::admit`]), so no other escalation is admitted between
//! the figures read and the place taken; the batcher's handle holds the book under one lock
//! ([`SharedBook`]), connections and the actor both go through it.
//!
//! Admitted work is held by a [`Ticket`] the escalation carries: dropped when it is answered,
//! expires, is cancelled or is dropped with a stopped batcher, whichever comes first, so the
//! counts cannot leak. A session's entry goes when it has no work and nothing computed, or
//! when it ends; a device's entry goes with its last admitted escalation: the maps are
//! bounded by the admitted work and the session store's bounds.
#![cfg_attr(not(test), deny(clippy::disallowed_methods))]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::admission::{self, Ahead, CostModel, Cut, Decision, DeviceWork, Refusal, SessionWork, Snapshot};
use crate::sessions::SessionKey;

/// How the book admits: its bounds and whether devices share fairly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BookRules {
    /// Most escalations admitted at once.
    pub capacity: usize,
    /// How batches are cut, as far as the estimate needs it.
    pub cut: Cut,
    /// Whether admission weighs the device's share (fair sharing between devices).
    pub fair: bool,
}

/// One escalation asking to be admitted, with the backend's figures the book does not keep.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// Its session.
    pub session: &'a SessionKey,
    /// Tokens it runs (context and draft).
    pub run_len: usize,
    /// When it asks.
    pub now: Instant,
    /// When its device stops waiting.
    pub deadline: Instant,
    /// The backend's speed as learned so far.
    pub model: CostModel,
    /// Smoothed backend time per batch, ms.
    pub service_ms: u32,
}

/// What an admitted escalation costs and adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// Tokens of prefill it costs (at least 1).
    pub cost: usize,
    /// What it adds to the work ahead of later escalations.
    pub work: Ahead,
    /// Escalations admitted before it and not answered yet.
    pub behind: usize,
}

/// Everything admitted and not answered, and each session's prefill state.
#[derive(Debug)]
pub struct AdmissionBook {
    rules: BookRules,
    /// All admitted work (`warming`: sessions wait to be warmed).
    all: Ahead,
    sessions: HashMap<SessionKey, SessionWork>,
    /// Each device's admitted work, its sessions together (an entry only while it has some).
    devices: HashMap<Arc<str>, Ahead>,
}

impl AdmissionBook {
    /// An empty book admitting by `rules`.
    pub fn new(rules: BookRules) -> Self {
        Self { rules, all: Ahead::default(), sessions: HashMap::new(), devices: HashMap::new() }
    }

    /// What admission weighs for `ask`.
    pub fn snapshot(&self, ask: &Ask<'_>) -> Snapshot {
        Snapshot {
            now: ask.now,
            deadline: ask.deadline,
            context_len: ask.run_len,
            session: self.session(ask.session),
            all: self.all,
            model: ask.model,
            cut: self.rules.cut,
            capacity: self.rules.capacity,
            service_ms: ask.service_ms,
            device: self.rules.fair.then(|| self.device(&ask.session.device)),
        }
    }

    /// Admit `ask` and record its work, or say why not.
    pub fn admit(&mut self, ask: &Ask<'_>) -> Result<Admission, Refusal> {
        match admission::decide(&self.snapshot(ask)) {
            Decision::Refuse(refusal) => Err(refusal),
            Decision::Admit { cost, work } => {
                let behind = self.all.rows;
                self.record(ask.session, ask.run_len, work);
                Ok(Admission { cost, work, behind })
            }
        }
    }

    /// Count `work` (an escalation reaching `len` tokens) as admitted, `session`'s own.
    fn record(&mut self, session: &SessionKey, len: usize, work: Ahead) {
        self.all = self.all.plus(work);
        let w = self.sessions.entry(session.clone()).or_default();
        w.covered = w.covered.max(len);
        w.pending = w.pending.plus(work);
        let d = self.devices.entry(session.device.clone()).or_default();
        *d = d.plus(work);
    }

    /// `work` of `session` is answered or dropped.
    pub fn release(&mut self, session: &SessionKey, work: Ahead) {
        self.all = self.all.minus(work);
        if let Some(d) = self.devices.get_mut(&session.device) {
            *d = d.minus(work);
            if d.rows == 0 {
                self.devices.remove(&session.device);
            }
        }
        if let Some(w) = self.sessions.get_mut(session) {
            w.pending = w.pending.minus(work);
            if w.pending.rows == 0 {
                w.covered = 0;
            }
            if *w == SessionWork::default() {
                self.sessions.remove(session);
            }
        }
    }

    /// The state of `session` (all zero if unknown).
    pub fn session(&self, session: &SessionKey) -> SessionWork {
        self.sessions.get(session).copied().unwrap_or_default()
    }

    /// `device`'s admitted work, and how many devices have work admitted.
    pub fn device(&self, device: &str) -> DeviceWork {
        DeviceWork { own: self.devices.get(device).copied().unwrap_or_default(), devices: self.devices.len() }
    }

    /// Everything admitted and not answered yet.
    #[cfg(test)]
    pub fn all(&self) -> Ahead {
        self.all
    }

    /// Escalations admitted and not answered yet.
    pub fn rows(&self) -> usize {
        self.all.rows
    }

    /// Whether sessions wait to be warmed (a warming step may run ahead of any escalation).
    pub fn set_warming(&mut self, warming: bool) {
        self.all.warming = warming;
    }

    /// The backend has computed the first `len` tokens of `session`'s context.
    pub fn computed(&mut self, session: &SessionKey, len: usize) {
        self.sessions.entry(session.clone()).or_default().computed = len;
    }

    /// The backend's state for `session` is gone or unknown (a failed prefill).
    pub fn forget_computed(&mut self, session: &SessionKey) {
        if let Some(w) = self.sessions.get_mut(session) {
            w.computed = 0;
            if *w == SessionWork::default() {
                self.sessions.remove(session);
            }
        }
    }

    /// The session ended: forget its prefill state (work still admitted is released by its
    /// tickets as usual).
    pub fn remove(&mut self, session: &SessionKey) {
        self.sessions.remove(session);
    }

    /// Whether no session nor device has an entry and nothing is admitted.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty() && self.devices.is_empty() && self.all.rows == 0
    }
}

/// The book under its one lock, shared by the handle, the actor and the tickets.
#[derive(Debug, Clone)]
pub struct SharedBook(Arc<Mutex<AdmissionBook>>);

impl SharedBook {
    /// An empty book admitting by `rules`.
    pub fn new(rules: BookRules) -> Self {
        Self(Arc::new(Mutex::new(AdmissionBook::new(rules))))
    }

    /// The book, locked (a panic elsewhere while holding it leaves plain counts: still usable).
    pub fn lock(&self) -> MutexGuard<'_, AdmissionBook> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admit `ask`: what it costs and the ticket that holds its work until dropped.
    pub fn admit(&self, ask: &Ask<'_>) -> Result<(Admission, Ticket), Refusal> {
        let admission = self.lock().admit(ask)?;
        Ok((admission, Ticket { book: self.clone(), session: ask.session.clone(), work: admission.work }))
    }
}

/// An admitted escalation's work, released from the book when dropped (with the escalation
/// that holds it, however it ends).
#[derive(Debug)]
pub struct Ticket {
    book: SharedBook,
    session: SessionKey,
    work: Ahead,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.book.lock().release(&self.session, self.work);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::dispatch::BusyReason;

    fn key(device: &str, id: u64) -> SessionKey {
        SessionKey { device: Arc::from(device), session_id: id }
    }

    fn rules(capacity: usize, fair: bool) -> BookRules {
        BookRules { capacity, cut: Cut { max_batch: 8, max_batch_tokens: 256 }, fair }
    }

    /// 10 ms a batch of short escalations, 1 ms a token of prefill.
    const MODEL: CostModel = CostModel { batch_ms: 10.0, token_ms: 1.0 };

    fn ask(session: &SessionKey, run_len: usize, now: Instant, left_ms: u64) -> Ask<'_> {
        Ask { session, run_len, now, deadline: now + Duration::from_millis(left_ms), model: MODEL, service_ms: 10 }
    }

    #[test]
    fn an_admission_is_recorded_in_the_same_step_so_the_last_place_goes_once() {
        let book = SharedBook::new(rules(2, false));
        let now = Instant::now();
        let (a, b, c) = (key("d", 1), key("d", 2), key("d", 3));
        let (first, _t1) = book.admit(&ask(&a, 4, now, 1000)).expect("room");
        let (second, _t2) = book.admit(&ask(&b, 4, now, 1000)).expect("room");
        assert_eq!((first.behind, second.behind), (0, 1));
        let refused = book.admit(&ask(&c, 4, now, 1000)).expect_err("both places are taken");
        assert_eq!(refused.reason, BusyReason::Capacity);
        assert_eq!(book.lock().rows(), 2);
    }

    #[test]
    fn a_ticket_dropped_however_its_escalation_ends_releases_its_work_and_leaves_no_entry() {
        let book = SharedBook::new(rules(8, true));
        let now = Instant::now();
        let (a, b) = (key("d", 1), key("e", 1));
        let (_, ta) = book.admit(&ask(&a, 4, now, 1000)).expect("room");
        let (_, tb) = book.admit(&ask(&b, 6, now, 1000)).expect("room");
        {
            let held = book.lock();
            assert_eq!((held.all().rows, held.all().tokens), (2, 10));
            assert_eq!((held.device("d").own.rows, held.device("d").devices), (1, 2));
            assert_eq!(held.session(&a).covered, 4);
        }
        drop(ta);
        assert_eq!(book.lock().device("d"), DeviceWork { own: Ahead::default(), devices: 1 });
        drop(tb);
        assert!(book.lock().is_empty());
    }

    #[test]
    fn a_first_hard_token_behind_its_own_presync_costs_its_delta_and_others_wait_for_the_presync() {
        let book = SharedBook::new(rules(8, false));
        let now = Instant::now();
        let (own, other) = (key("d", 1), key("e", 1));
        // A 600-token pre-sync runs in steps: 600 ms at 1 ms a token.
        let (presync, _t) = book.admit(&ask(&own, 600, now, 5000)).expect("a pre-sync has the longest deadline");
        assert_eq!(presync.work.long_rows, 1);
        let (delta, _t) = book.admit(&ask(&own, 604, now, 300)).expect("its own pre-sync is not held against it");
        assert_eq!(delta.cost, 4);
        let refused = book.admit(&ask(&other, 4, now, 300)).expect_err("another session waits for it");
        assert_eq!(refused.reason, BusyReason::Cost);
    }

    #[test]
    fn what_the_backend_computed_lowers_the_next_cost_until_forgotten_or_the_session_ends() {
        let book = SharedBook::new(rules(8, false));
        let now = Instant::now();
        let s = key("d", 1);
        book.lock().computed(&s, 100);
        let (a, t) = book.admit(&ask(&s, 105, now, 1000)).expect("room");
        assert_eq!(a.cost, 5);
        drop(t);
        book.lock().forget_computed(&s);
        let (a, t) = book.admit(&ask(&s, 105, now, 1000)).expect("room");
        assert_eq!(a.cost, 105, "nothing computed: all of it");
        drop(t);
        book.lock().computed(&s, 105);
        book.lock().remove(&s);
        assert!(book.lock().is_empty());
    }

    #[test]
    fn with_fair_sharing_the_device_over_its_share_of_a_contended_queue_is_refused_first() {
        let book = SharedBook::new(rules(8, true));
        let now = Instant::now();
        let flood: Vec<_> = (0..6).map(|i| key("heavy", i)).collect();
        let tickets: Vec<_> = flood.iter().map(|s| book.admit(&ask(s, 1, now, 10_000)).expect("room").1).collect();
        let light = key("light", 1);
        let (_, _t) = book.admit(&ask(&light, 1, now, 10_000)).expect("a light device is admitted behind a flood");
        let more = key("heavy", 99);
        let refused = book.admit(&ask(&more, 1, now, 10_000)).expect_err("the flood is over its share");
        assert_eq!(refused.reason, BusyReason::Share);
        drop(tickets);
    }
}
