//! The rate controller on simulated traces: synthetic confidence sequences whose distribution
//! differs from the calibration set's, run through the same verdict the decode loop applies
//! (`should_escalate`), with a seeded generator of its own so the traces never change.

use super::*;
use crate::routing::router::should_escalate;

/// splitmix64: a tiny seeded generator, stable across crate versions.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let u = self.uniform().max(1e-12);
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()
    }
}

/// A task's confidences: a mixture of logit-normal modes (weight, mean, sd of the logit).
#[derive(Clone, Copy)]
struct Task(&'static [(f64, f64, f64)]);

/// What the calibration table was measured on: the SLM's own commonsense answers.
const CALIBRATION: Task = Task(&[(1.0, 2.0, 1.6)]);
/// A task the router is less sure of than calibration (chat): a fixed tau escalates too many.
const LOWER: Task = Task(&[(1.0, 1.4, 1.6)]);
/// A task the router is surer of (the routed answers of EVALUATION.md): too few.
const HIGHER: Task = Task(&[(1.0, 2.6, 1.6)]);
/// Mostly sure, with a cluster of hard positions: the target quantile sits inside the low mode.
const BIMODAL: Task = Task(&[(0.8, 4.5, 0.8), (0.2, 0.5, 1.0)]);
/// Code the SLM is almost always sure of: even the band's top tau escalates less than 10 %.
const CODE: Task = Task(&[(0.97, 6.0, 1.0), (0.03, 0.0, 1.5)]);
/// Short answers with a few positions the router is far less sure of than anything in the
/// calibration set (BIG-bench `object_counting`: "the answer is 7." with the number in doubt):
/// a quarter of the positions sit below the calibrated tau of 2.5 %.
const FAR_BELOW: Task = Task(&[(0.75, 3.0, 1.0), (0.25, -3.0, 0.5)]);

impl Task {
    fn sample(&self, rng: &mut Rng) -> f32 {
        let mut u = rng.uniform();
        let &(_, mean, sd) = self.0.iter().find(|(w, _, _)| {
            u -= w;
            u < 0.0
        }).unwrap_or(&self.0[self.0.len() - 1]);
        let logit = mean + sd * rng.normal();
        (1.0 / (1.0 + (-logit).exp())) as f32
    }
    fn trace(&self, seed: u64, len: usize) -> Vec<f32> {
        let mut rng = Rng(seed);
        (0..len).map(|_| self.sample(&mut rng)).collect()
    }
}

fn calibration() -> Calibration {
    Calibration::from_confidences(&CALIBRATION.trace(7, 20_000), &Calibration::default_rates())
}

const TARGET: f32 = 0.10;

fn controller() -> RateControl {
    RateControl::for_target(&calibration(), TARGET).unwrap().unwrap()
}

/// Run `trace` through the loop's verdict with `control` steering tau; returns how many were
/// escalated and the tau of every position.
fn steer(control: &mut RateControl, trace: &[f32]) -> (usize, Vec<f32>) {
    let mut escalated = 0;
    let mut taus = Vec::with_capacity(trace.len());
    for &c in trace {
        let tau = control.tau();
        taus.push(tau);
        let e = should_escalate(c, tau);
        escalated += usize::from(e);
        control.observe(c, e);
    }
    (escalated, taus)
}

/// Share escalated by the fixed calibrated tau (the old path), for contrast.
fn fixed_share(trace: &[f32]) -> f32 {
    let tau = calibration().tau_for_rate(TARGET).unwrap();
    trace.iter().filter(|&&c| should_escalate(c, tau)).count() as f32 / trace.len() as f32
}

/// Shares of `sessions` fresh sessions of `len` positions of `task`.
fn session_shares(task: Task, sessions: u64, len: usize) -> Vec<f32> {
    (0..sessions)
        .map(|seed| {
            let (e, _) = steer(&mut controller(), &task.trace(1000 + seed, len));
            e as f32 / len as f32
        })
        .collect()
}

fn assert_within(shares: &[f32], points: f32, what: &str) {
    for (i, s) in shares.iter().enumerate() {
        assert!((s - TARGET).abs() <= points / 100.0, "{what}: session {i} escalated {:.1} %, target {:.0} %", s * 100.0, TARGET * 100.0);
    }
}

fn mean(v: &[f32]) -> f32 {
    v.iter().sum::<f32>() / v.len() as f32
}

#[test]
fn a_fresh_controller_starts_at_the_calibrated_tau() {
    let cal = calibration();
    let c = RateControl::for_target(&cal, TARGET).unwrap().unwrap();
    assert_eq!(c.tau(), cal.tau_for_rate(TARGET).unwrap());
    assert_eq!(c.share_band(), (TARGET / DEFAULT_BAND, TARGET * DEFAULT_BAND));
    assert!(c.tau() < c.tau_max() && c.tau_max() < 1.0, "tau {} under its guard {}", c.tau(), c.tau_max());
    assert_eq!(c.tau_max(), cal.tau_for_rate(TARGET * DEFAULT_BAND).unwrap());
}

#[test]
fn on_the_calibration_distribution_it_escalates_the_target_share() {
    let shares = session_shares(CALIBRATION, 20, 300);
    assert_within(&shares, 2.0, "calibration-like");
}

#[test]
fn a_task_with_lower_confidences_still_escalates_the_target_share() {
    let trace = LOWER.trace(1, 300);
    assert!(fixed_share(&trace) > 0.18, "the fixed tau escalates {:.1} % here", fixed_share(&trace) * 100.0);
    assert_within(&session_shares(LOWER, 20, 300), 2.0, "lower confidences");
}

#[test]
fn a_task_with_higher_confidences_still_escalates_the_target_share() {
    let trace = HIGHER.trace(1, 300);
    assert!(fixed_share(&trace) < 0.05, "the fixed tau escalates {:.1} % here", fixed_share(&trace) * 100.0);
    assert_within(&session_shares(HIGHER, 20, 300), 2.0, "higher confidences");
}

#[test]
fn a_bimodal_task_escalates_the_target_share_from_inside_the_hard_mode() {
    let trace = BIMODAL.trace(1, 300);
    assert!((fixed_share(&trace) - TARGET).abs() > 0.03, "the fixed tau escalates {:.1} % here", fixed_share(&trace) * 100.0);
    assert_within(&session_shares(BIMODAL, 20, 300), 2.0, "bimodal");
}

#[test]
fn sessions_of_two_hundred_to_five_hundred_tokens_each_end_within_two_points() {
    for task in [CALIBRATION, LOWER, HIGHER, BIMODAL] {
        for len in [200, 500] {
            assert_within(&session_shares(task, 20, len), 2.0, &format!("{len}-token sessions"));
        }
    }
}

#[test]
fn hundred_token_sessions_end_within_one_point_on_average_and_three_at_worst() {
    for task in [CALIBRATION, LOWER, HIGHER, BIMODAL] {
        let shares = session_shares(task, 40, 100);
        let mae = shares.iter().map(|s| (s - TARGET).abs()).sum::<f32>() / shares.len() as f32;
        assert!(mae <= 0.01, "mean absolute error {:.2} points", mae * 100.0);
        assert_within(&shares, 3.0, "100-token sessions");
    }
}

#[test]
fn short_sessions_hit_the_target_together_when_the_controller_is_carried() {
    // 60 chat answers of 30 tokens: one alone can only escalate 0, 1, 2, 3... of 30.
    for task in [LOWER, HIGHER, BIMODAL] {
        let mut carried = controller();
        let (mut escalated, mut positions) = (0, 0);
        for seed in 0..60 {
            carried = carried.next_session();
            let trace = task.trace(500 + seed, 30);
            let (e, _) = steer(&mut carried, &trace);
            assert_eq!(carried.report().positions, 30, "the session's counts start again");
            escalated += e;
            positions += trace.len();
        }
        let share = escalated as f32 / positions as f32;
        assert!((share - TARGET).abs() <= 0.01, "carried: {:.2} % over {positions} positions", share * 100.0);
    }
}

#[test]
fn short_fresh_sessions_stay_nearer_the_target_than_the_fixed_tau() {
    for task in [LOWER, HIGHER] {
        let shares = session_shares(task, 60, 30);
        let fixed: Vec<f32> = (0..60).map(|seed| fixed_share(&task.trace(1000 + seed, 30))).collect();
        assert!((mean(&shares) - TARGET).abs() < (mean(&fixed) - TARGET).abs() / 2.0, "controlled {:.1} %, fixed {:.1} %", mean(&shares) * 100.0, mean(&fixed) * 100.0);
    }
}

#[test]
fn a_session_whose_text_changes_midway_still_ends_near_the_target() {
    // Sure reasoning, then an unsure answer line: not stationary within the session.
    let mut trace = HIGHER.trace(3, 200);
    trace.extend(LOWER.trace(4, 100));
    let (e, _) = steer(&mut controller(), &trace);
    let share = e as f32 / trace.len() as f32;
    assert!((share - TARGET).abs() <= 0.02, "{:.1} %", share * 100.0);
}

#[test]
fn a_carried_controller_follows_the_device_from_one_task_to_another() {
    let mut c = controller();
    for (i, task) in [HIGHER, LOWER, BIMODAL, CALIBRATION].into_iter().enumerate() {
        c = c.next_session();
        let (e, _) = steer(&mut c, &task.trace(40 + i as u64, 250));
        let share = e as f32 / 250.0;
        assert!((share - TARGET).abs() <= 0.02, "task {i}: {:.1} %", share * 100.0);
    }
}

#[test]
fn tau_never_passes_its_guard_and_a_task_beyond_it_owes_at_most_the_cap() {
    let mut c = controller();
    let hi = c.tau_max();
    let (e, taus) = steer(&mut c, &CODE.trace(9, 500));
    assert!(taus.iter().all(|&t| t <= hi), "tau passed {hi}");
    assert_eq!(c.tau(), hi, "too sure a task holds tau at its guard");
    assert!(e < 50, "the guard wins over the target: {e} of 500 escalated");
    assert_eq!(c.report().owed_tokens, MAX_OWED);
    // Every confidence the same: no tau separates them, so all escalate, and at most the cap
    // is given back afterwards.
    let (e, taus) = steer(&mut c, &[0.0; 300]);
    assert!(taus.iter().all(|&t| t <= hi));
    assert_eq!((e, c.report().owed_tokens), (300, -MAX_OWED));
}

#[test]
fn a_text_far_below_the_calibration_set_is_paid_back_below_the_calibrated_floor() {
    // Sixty answers of ten tokens, carried as the device does: the calibrated tau of 2.5 %
    // alone escalates a quarter of them, so a floor there would end near 25 %.
    let cal = calibration();
    let floor = cal.tau_for_rate(TARGET / DEFAULT_BAND).unwrap();
    let mut c = controller();
    let (mut escalated, mut below_floor, mut positions, mut lowest) = (0, 0, 0, f32::INFINITY);
    for seed in 0..60 {
        c = c.next_session();
        let trace = FAR_BELOW.trace(700 + seed, 10);
        below_floor += trace.iter().filter(|&&x| should_escalate(x, floor)).count();
        let (e, taus) = steer(&mut c, &trace);
        escalated += e;
        positions += trace.len();
        lowest = taus.into_iter().fold(lowest, f32::min);
    }
    assert!(below_floor * 5 > positions, "{below_floor} of {positions} below the calibrated floor");
    let share = escalated as f32 / positions as f32;
    assert!((share - TARGET).abs() <= 0.02, "{:.1} % over {positions} positions", share * 100.0);
    assert!(lowest < floor, "tau went down to {lowest}, the calibrated floor is {floor}");
}

#[test]
fn after_a_stretch_beyond_the_band_it_recovers_within_a_session() {
    // The cap keeps a long easy stretch from turning into a long burst afterwards.
    let mut c = controller();
    steer(&mut c, &CODE.trace(9, 500));
    c = c.next_session();
    let (e, _) = steer(&mut c, &CALIBRATION.trace(10, 200));
    let share = e as f32 / 200.0;
    assert!((share - TARGET).abs() <= 0.03, "{:.1} %", share * 100.0);
}

#[test]
fn the_same_trace_gives_the_same_taus() {
    let trace = BIMODAL.trace(11, 400);
    let (a, ta) = steer(&mut controller(), &trace);
    let (b, tb) = steer(&mut controller(), &trace);
    assert_eq!(a, b);
    assert_eq!(ta.iter().map(|t| t.to_bits()).collect::<Vec<_>>(), tb.iter().map(|t| t.to_bits()).collect::<Vec<_>>());
}

#[test]
fn a_non_finite_confidence_counts_as_a_position_but_not_as_a_sample() {
    let mut c = controller();
    c.observe(f32::NAN, false);
    assert_eq!(c.report().positions, 1);
    assert!(c.tau().is_finite());
}

#[test]
fn rates_zero_and_one_need_no_controller_and_others_outside_are_refused() {
    let cal = calibration();
    assert!(RateControl::for_target(&cal, 0.0).unwrap().is_none());
    assert!(RateControl::for_target(&cal, 1.0).unwrap().is_none());
    assert!(matches!(RateControl::new(&cal, 1.5, DEFAULT_BAND), Err(RateControlError::Target { .. })));
    assert!(matches!(RateControl::new(&cal, f32::NAN, DEFAULT_BAND), Err(RateControlError::Target { .. })));
    assert!(matches!(RateControl::new(&cal, 0.1, 0.5), Err(RateControlError::Band { .. })));
}

#[test]
fn without_a_calibration_table_it_still_works_from_the_identity_table() {
    let c = RateControl::for_target(&Calibration::default(), 0.2).unwrap().unwrap();
    assert_eq!(c.tau(), 0.2);
    let mut c = c;
    let trace = Task(&[(1.0, 0.5, 1.0)]).trace(12, 400);
    let (e, _) = steer(&mut c, &trace);
    assert!((e as f32 / 400.0 - 0.2).abs() <= 0.02, "{e} of 400");
}

#[test]
fn the_report_says_what_the_session_did() {
    let mut c = controller();
    let start = c.tau();
    let (e, _) = steer(&mut c, &HIGHER.trace(13, 120));
    let r = c.report();
    assert_eq!((r.target_rate, r.tau_start, r.tau_final, r.positions, r.escalated), (TARGET, start, c.tau(), 120, e));
    assert!((r.realized_share - e as f32 / 120.0).abs() < 1e-6);
    let json = serde_json::to_value(c).unwrap();
    assert_eq!(json["positions"], 120);
    assert!(json.get("window").is_none(), "the state itself is not reported");
    let next = c.next_session().report();
    assert_eq!((next.tau_start, next.positions, next.owed_tokens), (c.tau(), 0, r.owed_tokens));
}

