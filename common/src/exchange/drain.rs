//! A gateway's graceful drain as a timeline without I/O: what it still takes, and when it
//! closes, from the moment the drain started and what is still live.
//!
//! A drain (SIGTERM, or the operator's `POST /drain`) must end before the orchestrator's own
//! grace period does (Kubernetes sends SIGKILL after `terminationGracePeriodSeconds`), so it is
//! a fixed timeline over the gateway's `grace`:
//!
//! ```text
//! started ── serve open connections ──┬── finish: new work gets Busy ──┬── close ──┤ started + grace
//!            (v2 devices got GoAway    │   in-flight work is answered   │ connections closed,
//!             and leave on their own)  admit_until                      close_at   the process exits
//! ```
//!
//! New connections are refused throughout. Devices that understand `GoAway` (v2) move to
//! another replica at once, so the drain usually ends early: as soon as no connection is left
//! and nothing is in flight. A v1 device keeps its connection and is served until
//! `admit_until`; then its connection is closed once its answers are out. The shell (the
//! gateway's drain task) asks [`Drain::step`] with `now` and what is live, and does what it says.

use std::time::{Duration, Instant};

/// Longest tail of the grace period kept for answering work already admitted: far above an
/// edge's deadline (3 s by default), so what was taken before it is answered, not cut off.
pub const MAX_FINISH_WINDOW: Duration = Duration::from_secs(5);
/// Longest time left at the end for closing connections and exiting.
pub const MAX_CLOSE_MARGIN: Duration = Duration::from_secs(1);

/// What is still live at a draining gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Live {
    /// Devices still connected.
    pub connections: usize,
    /// Escalations admitted and not yet answered (or whose answer is not yet acknowledged).
    pub in_flight: usize,
}

/// What the drain task does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainStep {
    /// Keep serving what is open; ask again when something changes, by `until` at the latest.
    Wait {
        /// The next boundary of the timeline.
        until: Instant,
    },
    /// Close every connection now and exit: nothing is left to answer, or time is up.
    Close,
}

/// One drain's timeline (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drain {
    started: Instant,
    grace: Duration,
}

impl Drain {
    /// A drain started at `now` that must be over within `grace`.
    pub fn start(now: Instant, grace: Duration) -> Self {
        Self { started: now, grace }
    }

    /// When it started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// When the process must be gone.
    pub fn deadline(&self) -> Instant {
        self.started + self.grace
    }

    /// Time kept at the end for closing and exiting: a tenth of the grace, at most
    /// [`MAX_CLOSE_MARGIN`]. The shell spends at most half of it letting the connection closes
    /// go out and a quarter stopping the rest, so the process is gone before the deadline.
    pub fn close_margin(&self) -> Duration {
        (self.grace / 10).min(MAX_CLOSE_MARGIN)
    }

    /// When connections are closed whatever is still in flight.
    pub fn close_at(&self) -> Instant {
        self.deadline() - self.close_margin()
    }

    /// Until when escalations on open connections are still taken: the grace less the finish
    /// window (a quarter of the grace, at most [`MAX_FINISH_WINDOW`]) and the close margin.
    pub fn admit_until(&self) -> Instant {
        self.close_at() - (self.grace / 4).min(MAX_FINISH_WINDOW)
    }

    /// Whether an escalation arriving at `now` on an open connection is still taken (else it
    /// is answered `Busy`, so that the device falls back at once).
    pub fn admits_escalations(&self, now: Instant) -> bool {
        now < self.admit_until()
    }

    /// What to do at `now` with `live` still open.
    pub fn step(&self, now: Instant, live: Live) -> DrainStep {
        let nothing_to_answer = live.in_flight == 0;
        if nothing_to_answer && (live.connections == 0 || !self.admits_escalations(now)) {
            return DrainStep::Close;
        }
        if now >= self.close_at() {
            return DrainStep::Close;
        }
        DrainStep::Wait { until: if self.admits_escalations(now) { self.admit_until() } else { self.close_at() } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;
    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn live(connections: usize, in_flight: usize) -> Live {
        Live { connections, in_flight }
    }

    #[test]
    fn the_grace_period_is_spent_serving_then_finishing_then_closing() {
        let t0 = Instant::now();
        let d = Drain::start(t0, S(20));
        assert_eq!(d.deadline(), t0 + S(20));
        assert_eq!(d.close_at(), t0 + S(19), "1 s to close and exit");
        assert_eq!(d.close_margin(), S(1));
        assert_eq!(d.admit_until(), t0 + S(14), "5 s to answer what was taken");
        assert!(d.admits_escalations(t0 + MS(13_999)));
        assert!(!d.admits_escalations(t0 + S(14)));
    }

    #[test]
    fn a_short_grace_keeps_its_proportions() {
        let t0 = Instant::now();
        let d = Drain::start(t0, S(2));
        assert_eq!(d.close_at(), t0 + MS(1800));
        assert_eq!(d.admit_until(), t0 + MS(1300));
    }

    #[test]
    fn it_ends_at_once_when_every_device_has_left_and_nothing_is_in_flight() {
        let t0 = Instant::now();
        let d = Drain::start(t0, S(20));
        assert_eq!(d.step(t0, live(0, 0)), DrainStep::Close);
        assert_eq!(d.step(t0, live(0, 1)), DrainStep::Wait { until: d.admit_until() }, "an answer is still due");
        assert_eq!(d.step(t0, live(3, 0)), DrainStep::Wait { until: d.admit_until() }, "devices may still send work");
    }

    #[test]
    fn old_devices_are_served_until_admission_ends_then_closed_once_answered() {
        let t0 = Instant::now();
        let d = Drain::start(t0, S(20));
        let finishing = d.admit_until() + MS(10);
        assert_eq!(d.step(finishing, live(2, 1)), DrainStep::Wait { until: d.close_at() });
        assert_eq!(d.step(finishing, live(2, 0)), DrainStep::Close);
    }

    #[test]
    fn work_still_running_at_the_close_is_cut_off_so_the_process_exits_in_time() {
        let t0 = Instant::now();
        let d = Drain::start(t0, S(20));
        assert_eq!(d.step(d.close_at(), live(5, 7)), DrainStep::Close);
        assert!(d.close_at() < d.deadline());
    }
}
