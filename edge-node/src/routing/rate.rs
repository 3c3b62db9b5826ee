//! Holding a target escalation rate: tau steered by what a session actually escalates.
//!
//! Why: a fixed tau (the router file's calibration table: the r-quantile of the router's
//! confidences on the SLM's own CommonsenseQA answers) escalates another share on other text
//! (routed answers part from the SLM's after the first escalation; code is surer than
//! commonsense; chat less): 7.77 % for a 10 % target on CommonsenseQA, 3.5 % of a code
//! answer's tokens (docs/src/benchmarks/routing-quality.md, "Tried and not kept"). A device that
//! budgets its cloud tokens wants the share it asked for.
//!
//! The rule. The decode loop reads [`RateControl::tau`] before each position's verdict and
//! calls [`RateControl::observe`] with the router's confidence and the verdict once the
//! position is decided (committed positions only, in order):
//!
//! 1. `owed = target * positions - escalated`, the tokens escalated too few so far (negative:
//!    too many), capped at ±[`MAX_OWED`].
//! 2. `p = clamp(target + owed / PAYBACK, target / band, top)`: the share to aim at now, so a
//!    deficit is made up over about [`PAYBACK`] positions, held within a factor `band`
//!    ([`DEFAULT_BAND`] 4) of the target (`top = min(target * band, 1 - (1 - target) / band)`:
//!    a 10 % target aims between 2.5 % and 40 %).
//! 3. `tau` = the smallest threshold below which a share `p` of a mixture falls: the calibration
//!    set's confidences (the table's distribution, weight [`PRIOR_WEIGHT`] positions) and the
//!    last [`WINDOW`] confidences observed (weight one each); then at most the calibrated tau of
//!    `top` (the guard against sending everything, below).
//!
//! A fresh controller starts at the calibrated tau, exactly the fixed path's threshold.
//!
//! Why this rule and not a plain integral controller on tau. tau is in the router's units, and
//! their density differs by router and by task (the shipped router's tau goes 0.77 -> 0.97
//! from 10 % to 20 %; the top probability's 0.34 -> 0.46), so no one gain on tau fits: too
//! small and a 100-token session ends before tau has moved, too large and it oscillates. The
//! running quantile (step 3) is scale-free: it is the tau that would have escalated the share
//! asked for of what this task actually produced, bimodal distributions included, after a few
//! dozen positions. The prior keeps the first positions at the calibrated tau instead of
//! following a handful of samples. The deficit (steps 1-2) corrects what the quantile cannot:
//! a session is not stationary (an answer's reasoning, then its answer line) and a small window
//! is noisy, and it is the *realized* share that should hit the target. With `PAYBACK` 8 the
//! deficit behaves like an AR(1) process with coefficient 7/8 driven by the 0/1 noise of each
//! verdict: its standard deviation is about 0.6 token at a 10 % target, so an N-token session
//! ends within about 1.5/N of the target once the window has learned the task (the tests: every
//! simulated 200-500-token session within 2 points, 100-token ones within 1 on average), and the
//! share over everything a carried controller has seen converges as `owed / N`. The cap on
//! `owed` is the anti-windup: a long stretch where even the top tau escalates too little (code
//! the SLM is sure of) must not turn into a burst of escalations later.
//!
//! Why the band is on the share aimed at, of this text, and the guard on tau only at the top.
//! The floor was once a tau too, the calibrated tau of `target / band`. On a text the router is
//! much less sure of than the calibration set, that floor alone escalates more than the target
//! (BIG-bench `object_counting`: answers of ten tokens, two or three of them below it), the
//! deficit saturates at the cap, and every escalation beyond it is forgotten: 13.9 % for a 10 %
//! target. Held on the share instead, the floor is "the least sure `target / band` of what this
//! device writes", which a text's own quantile always allows, so an excess is always paid
//! back. The top cannot rest on the text alone: a router that saturates (many confidences at
//! one value) leaves no tau between "none of them" and "all of them", so tau also stays at or
//! below the calibrated tau of `top`. A text the router is surer of than that (code) escalates
//! less than its target rather than risk sending everything to the cloud.
//!
//! Carrying across sessions ([`RateControl::next_session`]) keeps the window, the deficit and
//! tau. The device does so by default (`--rate-control carry`): a share is a budget over the
//! device's traffic, a 30-token chat answer at 10 % can escalate 3 tokens but not 3.3, and only
//! a carried deficit makes many short answers add up to the target; the window also learns
//! what this device's text looks like, which a fresh calibrated tau forgets at each request.
//!
//! Pure: inputs passed in, no clock, no I/O, fixed-size state (`Copy`), so it travels in
//! [`super::DecodeParams`] and comes back in [`super::DecodeStats`]; deterministic.
#![cfg_attr(not(test), deny(clippy::disallowed_methods))]

use serde::Serialize;

use super::router_file::{Calibration, RouterFileError};

/// Which rule steers tau, as results record it: results of another rule are not resumed into or
/// reused for these (the floor moved from a calibrated tau to a share of the text seen on
/// 2026-11-27; a result without this mark was steered by the earlier rule).
pub const RULE: &str = "share band of the text seen, tau guard at the top (2026-11-27)";

/// Confidences remembered (the running quantile's sample).
pub const WINDOW: usize = 256;

/// Weight of the calibration table's distribution in the quantile, in positions.
pub const PRIOR_WEIGHT: f32 = 16.0;

/// Positions over which a deficit (or excess) of escalations is made up.
pub const PAYBACK: f32 = 8.0;

/// Most tokens the controller may owe (or be owed): the anti-windup.
pub const MAX_OWED: f32 = 4.0;

/// The share aimed at stays within this factor of the target (of the text seen).
pub const DEFAULT_BAND: f32 = 4.0;

/// Points of the calibration table kept (resampled when the table has more).
const PRIOR_POINTS: usize = 64;

/// Why a controller could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RateControlError {
    /// 0 and 1 need no control (a fixed tau 0 or 1 is exact), and beyond them means nothing.
    #[error("a controlled escalation rate must be strictly between 0 and 1, not {target}")]
    Target {
        /// The rate asked for.
        target: f32,
    },
    /// A band below 1 would exclude the calibrated tau itself.
    #[error("the rate band must be a finite factor of at least 1, not {band}")]
    Band {
        /// The band asked for.
        band: f32,
    },
    /// The calibration table could not map a rate.
    #[error(transparent)]
    Calibration(#[from] RouterFileError),
}

/// Steers tau toward a target share of escalated positions (see the module doc for the rule).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(into = "RateReport")]
pub struct RateControl {
    target: f32,
    share_min: f32,
    share_max: f32,
    tau_max: f32,
    tau: f32,
    tau_session_start: f32,
    /// The calibration table as a distribution: (tau, share of confidences below it), by tau.
    prior: [(f32, f32); PRIOR_POINTS],
    prior_len: usize,
    window: [f32; WINDOW],
    filled: usize,
    next: usize,
    owed: f32,
    positions: usize,
    escalated: usize,
}

/// What a controller did in one session, as reports show it (`generate --json`, serve's
/// `duet` usage, evaluations).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RateReport {
    /// The share of positions to escalate.
    pub target_rate: f32,
    /// tau at the session's first position (the calibrated tau, unless carried).
    pub tau_start: f32,
    /// tau after the session's last position (where a carried controller goes on).
    pub tau_final: f32,
    /// The band the share aimed at is held in (of the text seen).
    pub share_min: f32,
    pub share_max: f32,
    /// The highest tau allowed (the calibrated tau of `share_max`).
    pub tau_max: f32,
    /// Positions decided in the session.
    pub positions: usize,
    /// Of those, escalated.
    pub escalated: usize,
    /// `escalated / positions` (0 for an empty session).
    pub realized_share: f32,
    /// Tokens the controller still owes the target (negative: escalated beyond it), carried
    /// into the next session when the controller is.
    pub owed_tokens: f32,
}

impl From<RateControl> for RateReport {
    fn from(c: RateControl) -> Self {
        Self {
            target_rate: c.target,
            tau_start: c.tau_session_start,
            tau_final: c.tau,
            share_min: c.share_min,
            share_max: c.share_max,
            tau_max: c.tau_max,
            positions: c.positions,
            escalated: c.escalated,
            realized_share: if c.positions == 0 { 0.0 } else { c.escalated as f32 / c.positions as f32 },
            owed_tokens: c.owed,
        }
    }
}

impl RateControl {
    /// A controller for `target` when there is a rate to control: `None` at 0 and 1, which a
    /// fixed tau (0 or 1) already holds exactly.
    pub fn for_target(calibration: &Calibration, target: f32) -> Result<Option<Self>, RateControlError> {
        if target == 0.0 || target == 1.0 {
            return Ok(None);
        }
        Self::new(calibration, target, DEFAULT_BAND).map(Some)
    }

    /// A fresh controller at `calibration`'s tau for `target` (0 < target < 1), aiming at
    /// shares within a factor `band` of it, tau at most the calibrated tau of the top share.
    pub fn new(calibration: &Calibration, target: f32, band: f32) -> Result<Self, RateControlError> {
        if !(target > 0.0 && target < 1.0) {
            return Err(RateControlError::Target { target });
        }
        if !(band.is_finite() && band >= 1.0) {
            return Err(RateControlError::Band { band });
        }
        let tau = calibration.tau_for_rate(target)?;
        // Above the target the band stops short of 1 by the same factor, so tau never reaches 1
        // ("escalate everything"): the loop keeps seeing every position's confidence.
        let share_max = (target * band).min(1.0 - (1.0 - target) / band);
        let tau_max = calibration.tau_for_rate(share_max)?.max(tau);
        let (prior, prior_len) = prior_points(calibration);
        Ok(Self {
            target,
            share_min: target / band,
            share_max,
            tau_max,
            tau,
            tau_session_start: tau,
            prior,
            prior_len,
            window: [0.0; WINDOW],
            filled: 0,
            next: 0,
            owed: 0.0,
            positions: 0,
            escalated: 0,
        })
    }

    /// The same controller for the next session: what it learned (window, deficit, tau) goes
    /// on; the session's counts start again.
    pub fn next_session(self) -> Self {
        Self { tau_session_start: self.tau, positions: 0, escalated: 0, ..self }
    }

    /// The threshold for the next position.
    pub fn tau(&self) -> f32 {
        self.tau
    }

    /// The share of positions it aims to escalate.
    pub fn target(&self) -> f32 {
        self.target
    }

    /// The band the share aimed at is held in.
    pub fn share_band(&self) -> (f32, f32) {
        (self.share_min, self.share_max)
    }

    /// The highest tau it may set.
    pub fn tau_max(&self) -> f32 {
        self.tau_max
    }

    /// What it did this session.
    pub fn report(&self) -> RateReport {
        RateReport::from(*self)
    }

    /// A position was decided: the router's `confidence` and whether it was `escalated`
    /// (whatever the cloud then answered). Moves tau for the next position.
    pub fn observe(&mut self, confidence: f32, escalated: bool) {
        if confidence.is_finite() {
            self.window[self.next] = confidence;
            self.next = (self.next + 1) % WINDOW;
            self.filled = (self.filled + 1).min(WINDOW);
        }
        self.positions += 1;
        self.escalated += usize::from(escalated);
        self.owed = (self.owed + self.target - f32::from(u8::from(escalated))).clamp(-MAX_OWED, MAX_OWED);
        self.tau = self.steer();
    }

    /// Steps 2 and 3 of the rule: the smallest tau up to `tau_max` at which the mixture's
    /// share below tau reaches `p` (bisection; the share is non-decreasing in tau).
    fn steer(&self) -> f32 {
        let p = (self.target + self.owed / PAYBACK).clamp(self.share_min, self.share_max);
        let (mut lo, mut hi) = (0.0, self.tau_max);
        if self.share_below(hi) < p {
            return hi;
        }
        if self.share_below(lo) >= p {
            return lo;
        }
        // share_below(lo) < p <= share_below(hi); f32 halving meets adjacent values (or comes
        // within 2^-64 of the answer near 0) in 64 steps.
        for _ in 0..64 {
            let mid = lo + (hi - lo) / 2.0;
            if mid <= lo || mid >= hi {
                break;
            }
            if self.share_below(mid) >= p {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }

    /// Share of the mixture (calibration prior + window) strictly below `x`.
    fn share_below(&self, x: f32) -> f32 {
        let seen = self.window[..self.filled].iter().filter(|&&c| c < x).count() as f32;
        (PRIOR_WEIGHT * self.prior_share_below(x) + seen) / (PRIOR_WEIGHT + self.filled as f32)
    }

    /// Share of the calibration set's confidences below `x`: the table read backwards,
    /// interpolated as [`Calibration::tau_for_rate`] interpolates it forwards.
    fn prior_share_below(&self, x: f32) -> f32 {
        let points = &self.prior[..self.prior_len];
        let Some(&(first_tau, first_rate)) = points.first() else { return x.clamp(0.0, 1.0) };
        match points.iter().position(|&(tau, _)| tau >= x) {
            None => 1.0,
            Some(0) if first_tau > 0.0 => first_rate * (x / first_tau).clamp(0.0, 1.0),
            Some(0) => 0.0,
            Some(i) => {
                let ((t0, r0), (t1, r1)) = (points[i - 1], points[i]);
                if t1 > t0 {
                    r0 + (r1 - r0) * (x - t0) / (t1 - t0)
                } else {
                    r0
                }
            }
        }
    }
}

/// The calibration table as (tau, rate) points sorted by tau, at most [`PRIOR_POINTS`], ending
/// at (1, 1) so every confidence below 1 has a share. An empty table stands for the uniform
/// distribution (as [`Calibration::tau_for_rate`] then maps rate to tau one to one).
fn prior_points(calibration: &Calibration) -> ([(f32, f32); PRIOR_POINTS], usize) {
    let mut out = [(0.0, 0.0); PRIOR_POINTS];
    let mut points: Vec<(f32, f32)> = calibration.points.iter().filter(|p| p.tau.is_finite() && p.rate.is_finite()).map(|p| (p.tau, p.rate.clamp(0.0, 1.0))).collect();
    if points.is_empty() {
        return (out, 0);
    }
    points.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let room = PRIOR_POINTS - 1;
    let kept: Vec<(f32, f32)> = if points.len() <= room {
        points
    } else {
        (0..room).map(|j| points[j * (points.len() - 1) / (room - 1)]).collect()
    };
    let mut len = 0;
    for p in kept {
        out[len] = p;
        len += 1;
    }
    if out[len - 1].0 < 1.0 {
        out[len] = (1.0, 1.0);
        len += 1;
    }
    (out, len)
}

#[cfg(test)]
#[path = "rate_tests.rs"]
mod tests;
