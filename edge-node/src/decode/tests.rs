//! The decode loop with a trace-driven SLM and a scripted cloud: which tokens are escalated,
//! which source each committed token has, and why generation stops. No model, no network.

use std::collections::VecDeque;
use std::ops::ControlFlow;

use common::exchange::FallbackReason;

use super::trace::{TracePoint, TraceSlm};
use super::*;
use crate::routing::router::ConfidenceRouter;
use crate::routing::router_file::Calibration;

/// Answers escalations from a script, recording the contexts it was asked about.
#[derive(Default)]
struct ScriptedCloud {
    answers: VecDeque<CloudAnswer>,
    asked: Vec<Vec<u32>>,
    started: Option<Vec<u32>>,
    finished: bool,
}

impl Cloud for ScriptedCloud {
    fn start(&mut self, prompt: &[u32]) {
        self.started = Some(prompt.to_vec());
    }
    async fn escalate(&mut self, context: &[u32]) -> CloudAnswer {
        self.asked.push(context.to_vec());
        self.answers.pop_front().unwrap_or(CloudAnswer::Fallback(FallbackReason::Timeout))
    }
    async fn finish(&mut self, _stats: &mut DecodeStats) {
        self.finished = true;
    }
}

fn trace(points: &[(u32, f32)]) -> Vec<TracePoint> {
    points.iter().map(|&(token, top_prob)| TracePoint { token, top_prob }).collect()
}

fn run(slm: &mut TraceSlm, cloud: &mut ScriptedCloud, tau: f32, max: usize) -> (Vec<(u32, TokenSource)>, DecodeStats) {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut out = Vec::new();
    let params = DecodeParams { max_new_tokens: max, tau, rate_control: None };
    let stats = rt
        .block_on(decode(slm, &mut ConfidenceRouter, cloud, &[1, 2, 3], params, |e| {
            out.push((e.token, e.source));
            ControlFlow::Continue(())
        }))
        .unwrap();
    (out, stats)
}

#[test]
fn hard_tokens_go_to_the_cloud_and_easy_ones_stay_local() {
    let mut slm = TraceSlm::new(trace(&[(10, 0.9), (11, 0.2), (12, 0.95), (13, 0.1)]), 100, vec![0]);
    let mut cloud = ScriptedCloud { answers: [CloudAnswer::Token(50), CloudAnswer::Token(51)].into(), ..Default::default() };
    let (out, stats) = run(&mut slm, &mut cloud, 0.5, 4);
    assert_eq!(out, vec![(10, TokenSource::Slm), (50, TokenSource::Cloud), (12, TokenSource::Slm), (51, TokenSource::Cloud)]);
    assert_eq!(cloud.asked, vec![vec![1, 2, 3, 10], vec![1, 2, 3, 10, 50, 12]], "each escalation carries the committed context");
    assert_eq!(cloud.started.as_deref(), Some(&[1, 2, 3][..]), "a routed session starts the cloud with the prompt");
    assert!(cloud.finished);
    assert_eq!((stats.routing.escalated, stats.routing.cloud_tokens, stats.routing.fallbacks), (2, 2, 0));
    assert_eq!(slm.pushed, vec![10, 50, 12], "the last token is not pushed: generation ended");
}

#[test]
fn an_unanswered_escalation_takes_the_slms_token_and_counts_the_reason() {
    let mut slm = TraceSlm::new(trace(&[(10, 0.1), (11, 0.1), (12, 0.1)]), 100, vec![0]);
    let mut cloud = ScriptedCloud {
        answers: [CloudAnswer::Fallback(FallbackReason::Busy), CloudAnswer::Token(7), CloudAnswer::Fallback(FallbackReason::Timeout)].into(),
        ..Default::default()
    };
    let (out, stats) = run(&mut slm, &mut cloud, 0.5, 3);
    assert_eq!(out, vec![(10, TokenSource::Fallback), (7, TokenSource::Cloud), (12, TokenSource::Fallback)]);
    assert_eq!((stats.routing.fallbacks, stats.routing.fallback_busy, stats.routing.fallback_timeout), (2, 1, 1));
}

#[test]
fn at_tau_one_the_slm_runs_only_when_the_cloud_fails() {
    let mut slm = TraceSlm::new(trace(&[(10, 0.99), (11, 0.99), (12, 0.99)]), 100, vec![0]);
    let mut cloud = ScriptedCloud { answers: [CloudAnswer::Token(5), CloudAnswer::Fallback(FallbackReason::LinkDown), CloudAnswer::Token(6)].into(), ..Default::default() };
    let (out, _) = run(&mut slm, &mut cloud, 1.0, 3);
    assert_eq!(out, vec![(5, TokenSource::Cloud), (11, TokenSource::Fallback), (6, TokenSource::Cloud)]);
    assert_eq!(slm.proposals_computed, 1, "only the fallback needed the SLM");
}

#[test]
fn at_tau_zero_nothing_is_escalated_and_the_cloud_is_not_started() {
    let mut slm = TraceSlm::new(trace(&[(10, 0.0), (11, 0.0)]), 100, vec![0]);
    let mut cloud = ScriptedCloud::default();
    let (out, stats) = run(&mut slm, &mut cloud, 0.0, 2);
    assert_eq!(out, vec![(10, TokenSource::Slm), (11, TokenSource::Slm)]);
    assert!(cloud.asked.is_empty() && cloud.started.is_none());
    assert_eq!(stats.routing.escalated, 0);
}

#[test]
fn generation_stops_at_a_stop_token_the_length_or_a_full_context() {
    let mut slm = TraceSlm::new(trace(&[(10, 0.9), (0, 0.9), (12, 0.9)]), 100, vec![0]);
    let (out, stats) = run(&mut slm, &mut ScriptedCloud::default(), 0.5, 10);
    assert_eq!((out.len(), stats.finish_reason), (2, FinishReason::Stop));
    let mut slm = TraceSlm::new(trace(&[(10, 0.9); 8]), 100, vec![0]);
    let (out, stats) = run(&mut slm, &mut ScriptedCloud::default(), 0.5, 5);
    assert_eq!((out.len(), stats.finish_reason), (5, FinishReason::Length));
    // Prompt of 3 in a context of 6: three more tokens are run, and a fourth is still predicted
    // from the last position (it needs no room itself).
    let mut slm = TraceSlm::new(trace(&[(10, 0.9); 8]), 6, vec![0]);
    let (out, stats) = run(&mut slm, &mut ScriptedCloud::default(), 0.5, 10);
    assert_eq!((out.len(), stats.finish_reason), (4, FinishReason::ContextFull));
    assert_eq!(slm.pushed.len(), 3);
}

#[test]
fn the_caller_can_stop_the_loop() {
    let mut slm = TraceSlm::new(trace(&[(10, 0.9); 8]), 100, vec![0]);
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut n = 0;
    let stats = rt
        .block_on(decode(&mut slm, &mut ConfidenceRouter, &mut NoCloud, &[1], DecodeParams { max_new_tokens: 8, tau: 0.0, rate_control: None }, |_| {
            n += 1;
            if n == 2 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        }))
        .unwrap();
    assert_eq!((stats.tokens, stats.finish_reason), (2, FinishReason::Cancelled));
}

/// Answers from a script after `delay` polls each (one poll per SLM step while speculating),
/// with a speculation window: the network's latency without a network.
struct SlowCloud {
    answers: VecDeque<CloudAnswer>,
    delays: VecDeque<usize>,
    window: usize,
    asked: Vec<Vec<u32>>,
}

impl SlowCloud {
    fn new(answers: &[CloudAnswer], delays: &[usize], window: usize) -> Self {
        Self { answers: answers.iter().copied().collect(), delays: delays.iter().copied().collect(), window, asked: Vec::new() }
    }
}

impl Cloud for SlowCloud {
    fn speculation_window(&self) -> usize {
        self.window
    }
    async fn escalate(&mut self, context: &[u32]) -> CloudAnswer {
        self.asked.push(context.to_vec());
        for _ in 0..self.delays.pop_front().unwrap_or(0) {
            tokio::task::yield_now().await;
        }
        self.answers.pop_front().unwrap_or(CloudAnswer::Fallback(FallbackReason::Timeout))
    }
}

fn run_slow(points: &[(u32, f32)], cloud: &mut SlowCloud, max: usize) -> (Vec<(u32, TokenSource)>, DecodeStats, Vec<u32>) {
    run_slow_in(points, cloud, max, 100)
}

/// [`run_slow`] in a context of `capacity` tokens (prompt of 3 included).
fn run_slow_in(points: &[(u32, f32)], cloud: &mut SlowCloud, max: usize, capacity: usize) -> (Vec<(u32, TokenSource)>, DecodeStats, Vec<u32>) {
    run_slow_with(points, cloud, DecodeParams { max_new_tokens: max, tau: 0.5, rate_control: None }, capacity)
}

/// [`run_slow_in`] with any parameters.
fn run_slow_with(points: &[(u32, f32)], cloud: &mut SlowCloud, params: DecodeParams, capacity: usize) -> (Vec<(u32, TokenSource)>, DecodeStats, Vec<u32>) {
    let mut slm = TraceSlm::new(trace(points), capacity, vec![0]);
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut out = Vec::new();
    let stats = rt
        .block_on(decode(&mut slm, &mut ConfidenceRouter, cloud, &[1, 2, 3], params, |e| {
            out.push((e.token, e.source));
            ControlFlow::Continue(())
        }))
        .unwrap();
    (out, stats, slm.pushed)
}

#[test]
fn speculation_the_cloud_agrees_with_stands_and_changes_nothing() {
    // Position 1 is hard; the cloud takes 3 SLM steps to answer the SLM's own token (11).
    let points = [(10, 0.9), (11, 0.2), (12, 0.9), (13, 0.9), (14, 0.9), (15, 0.9)];
    let answers = [CloudAnswer::Token(11)];
    let (plain, _, _) = run_slow(&points, &mut SlowCloud::new(&answers, &[3], 0), 6);
    let mut cloud = SlowCloud::new(&answers, &[3], 8);
    let (spec, stats, pushed) = run_slow(&points, &mut cloud, 6);
    assert_eq!(spec, plain);
    assert_eq!(spec[1], (11, TokenSource::Cloud));
    assert_eq!((stats.speculation.kept, stats.speculation.tokens_kept, stats.speculation.rolled_back), (1, 3, 0));
    assert_eq!(pushed, vec![10, 11, 12, 13, 14], "the SLM decoded ahead once, not twice; the last token is not pushed");
}

#[test]
fn speculation_the_cloud_disagrees_with_is_rolled_back_to_the_clouds_token() {
    let points = [(10, 0.9), (11, 0.2), (12, 0.9), (13, 0.9), (14, 0.9)];
    let answers = [CloudAnswer::Token(77)];
    let (plain, _, plain_pushed) = run_slow(&points, &mut SlowCloud::new(&answers, &[2], 0), 5);
    let (spec, stats, pushed) = run_slow(&points, &mut SlowCloud::new(&answers, &[2], 8), 5);
    assert_eq!(spec, plain);
    assert_eq!(spec[1], (77, TokenSource::Cloud));
    assert_eq!(pushed, plain_pushed, "after the roll-back the SLM holds exactly the committed tokens");
    assert_eq!((stats.speculation.rolled_back, stats.speculation.tokens_discarded, stats.speculation.kept), (1, 2, 0));
}

#[test]
fn a_second_hard_token_waits_for_the_first_answer() {
    // Positions 1 and 2 are both hard: the second escalation must carry the first's answer.
    let points = [(10, 0.9), (11, 0.2), (12, 0.2), (13, 0.9)];
    let answers = [CloudAnswer::Token(50), CloudAnswer::Token(51)];
    let mut cloud = SlowCloud::new(&answers, &[5, 5], 8);
    let (spec, stats, _) = run_slow(&points, &mut cloud, 4);
    assert_eq!(spec, vec![(10, TokenSource::Slm), (50, TokenSource::Cloud), (51, TokenSource::Cloud), (13, TokenSource::Slm)]);
    assert_eq!(cloud.asked, vec![vec![1, 2, 3, 10], vec![1, 2, 3, 10, 50]]);
    // The first escalation stopped speculating at the second hard token; the second decoded
    // position 3 ahead, which the cloud's other token threw away.
    assert_eq!((stats.speculation.tokens_kept, stats.speculation.tokens_discarded, stats.speculation.rolled_back), (0, 1, 2));
}

#[test]
fn a_fallback_keeps_the_speculated_tokens() {
    let points = [(10, 0.2), (11, 0.9), (12, 0.9)];
    let answers = [CloudAnswer::Fallback(FallbackReason::Timeout)];
    let (spec, stats, _) = run_slow(&points, &mut SlowCloud::new(&answers, &[4], 8), 3);
    assert_eq!(spec, vec![(10, TokenSource::Fallback), (11, TokenSource::Slm), (12, TokenSource::Slm)]);
    assert_eq!((stats.speculation.kept, stats.speculation.tokens_kept), (1, 2));
}

#[test]
fn a_link_lost_during_speculation_keeps_the_speculated_tokens_and_the_next_hard_token_falls_back_at_once() {
    // The link drops while position 0's escalation is in flight; position 2 is hard again and
    // finds the link down (a fallback without waiting). Same tokens as waiting for each.
    let points = [(10, 0.2), (11, 0.9), (12, 0.2), (13, 0.9)];
    let answers = [CloudAnswer::Fallback(FallbackReason::LinkDown), CloudAnswer::Fallback(FallbackReason::LinkDown)];
    let (plain, _, _) = run_slow(&points, &mut SlowCloud::new(&answers, &[3, 0], 0), 4);
    let (spec, stats, _) = run_slow(&points, &mut SlowCloud::new(&answers, &[3, 0], 8), 4);
    assert_eq!(spec, plain);
    assert_eq!(spec, vec![(10, TokenSource::Fallback), (11, TokenSource::Slm), (12, TokenSource::Fallback), (13, TokenSource::Slm)]);
    assert_eq!((stats.speculation.kept, stats.speculation.rolled_back), (1, 0), "the SLM's own tokens stand");
}

#[test]
fn speculation_never_passes_the_length_or_a_stop_token() {
    let points = [(10, 0.2), (11, 0.9), (0, 0.9), (13, 0.9)];
    let (spec, stats, pushed) = run_slow(&points, &mut SlowCloud::new(&[CloudAnswer::Token(10)], &[9], 8), 10);
    assert_eq!(spec.len(), 3, "{spec:?}");
    assert_eq!(stats.finish_reason, FinishReason::Stop);
    assert_eq!(pushed, vec![10, 11], "a stop token is never given to the SLM");
    let (spec, _, _) = run_slow(&points, &mut SlowCloud::new(&[CloudAnswer::Token(10)], &[9], 8), 2);
    assert_eq!(spec.len(), 2);
}

/// A calibration table measured on uniformly spread confidences: tau = rate.
fn uniform_calibration() -> Calibration {
    let grid: Vec<f32> = (0..1000).map(|i| (i as f32 + 0.5) / 1000.0).collect();
    Calibration::from_confidences(&grid, &Calibration::default_rates())
}

/// `n` positions whose confidences are spread evenly (a low-discrepancy sequence) and then
/// raised to `power`: above 1 the router is less sure than on the calibration set, below 1
/// surer. Token 5 throughout (no stop token).
fn shifted_trace(n: usize, power: f32) -> Vec<(u32, f32)> {
    (0..n).map(|i| (5, ((i as f32 * 0.618_034).fract()).powf(power))).collect()
}

#[test]
fn a_controlled_decode_escalates_the_target_share_where_the_calibrated_tau_drifts() {
    let cal = uniform_calibration();
    let fixed_tau = cal.tau_for_rate(0.1).unwrap();
    for power in [0.6, 1.4] {
        let points = shifted_trace(300, power);
        let (_, fixed, _) = run_slow_with(&points, &mut SlowCloud::new(&[], &[], 0), DecodeParams { max_new_tokens: 300, tau: fixed_tau, rate_control: None }, 400);
        let drift = fixed.routing.escalated as f32 / 300.0;
        assert!((drift - 0.1).abs() > 0.05, "the fixed tau escalates {:.1} % at power {power}", drift * 100.0);
        assert!(fixed.rate_control.is_none(), "a fixed tau reports no controller");
        let control = RateControl::for_target(&cal, 0.1).unwrap();
        let params = DecodeParams { max_new_tokens: 300, tau: fixed_tau, rate_control: control };
        let (_, stats, _) = run_slow_with(&points, &mut SlowCloud::new(&[], &[], 0), params, 400);
        let share = stats.routing.escalated as f32 / stats.tokens as f32;
        assert!((share - 0.1).abs() <= 0.02, "controlled: {:.1} % at power {power}", share * 100.0);
        let report = stats.rate_control.expect("reported").report();
        assert_eq!((report.positions, report.escalated), (stats.tokens, stats.routing.escalated), "it saw every committed position");
        assert_eq!(report.tau_start, fixed_tau, "it started at the calibrated tau");
    }
}

#[test]
fn a_controller_returned_by_one_decode_carries_into_the_next() {
    let cal = uniform_calibration();
    let mut control = RateControl::for_target(&cal, 0.1).unwrap();
    let mut taus = Vec::new();
    for _ in 0..3 {
        let params = DecodeParams { max_new_tokens: 40, tau: 0.1, rate_control: control.map(RateControl::next_session) };
        let (_, stats, _) = run_slow_with(&shifted_trace(40, 0.6), &mut SlowCloud::new(&[], &[], 0), params, 100);
        let report = stats.rate_control.expect("reported").report();
        taus.push((report.tau_start, report.tau_final));
        control = stats.rate_control;
    }
    assert_eq!(taus[1].0, taus[0].1, "the second session starts where the first ended");
    assert_eq!(taus[2].0, taus[1].1);
}

mod equivalence {
    use proptest::prelude::*;

    use super::*;

    fn answer() -> impl Strategy<Value = CloudAnswer> {
        prop_oneof![
            3 => (10u32..14).prop_map(CloudAnswer::Token),
            1 => Just(CloudAnswer::Fallback(FallbackReason::Timeout)),
        ]
    }

    proptest! {
        /// Whatever the trace, the answers and their delays, speculation commits exactly the
        /// tokens (and sources) the loop without it commits.
        #[test]
        fn speculation_commits_what_waiting_commits(
            points in prop::collection::vec((prop_oneof![Just(0u32), 10u32..14], prop_oneof![Just(0.1f32), Just(0.9f32)]), 1..24),
            answers in prop::collection::vec(answer(), 0..24),
            delays in prop::collection::vec(0usize..6, 0..24),
            window in 1usize..6,
            max in 1usize..24,
            capacity in 4usize..30,
        ) {
            let (plain, plain_stats, plain_pushed) = run_slow_in(&points, &mut SlowCloud::new(&answers, &delays, 0), max, capacity);
            let (spec, stats, pushed) = run_slow_in(&points, &mut SlowCloud::new(&answers, &delays, window), max, capacity);
            prop_assert_eq!(&spec, &plain);
            prop_assert_eq!(stats.finish_reason, plain_stats.finish_reason);
            prop_assert_eq!(stats.routing, plain_stats.routing);
            prop_assert_eq!(pushed, plain_pushed);
        }

        /// The same under rate control: speculated positions are judged with the tau the
        /// loop would give them, and the controller ends in the same state.
        #[test]
        fn speculation_commits_what_waiting_commits_under_rate_control(
            points in prop::collection::vec((prop_oneof![Just(0u32), 10u32..14], prop_oneof![Just(0.05f32), Just(0.3f32), Just(0.6f32), Just(0.95f32)]), 1..24),
            answers in prop::collection::vec(answer(), 0..24),
            delays in prop::collection::vec(0usize..6, 0..24),
            window in 1usize..6,
            max in 1usize..24,
            capacity in 4usize..30,
            target in prop_oneof![Just(0.1f32), Just(0.3f32), Just(0.6f32)],
        ) {
            let control = RateControl::for_target(&uniform_calibration(), target).unwrap();
            let params = DecodeParams { max_new_tokens: max, tau: target, rate_control: control };
            let (plain, plain_stats, plain_pushed) = run_slow_with(&points, &mut SlowCloud::new(&answers, &delays, 0), params, capacity);
            let (spec, stats, pushed) = run_slow_with(&points, &mut SlowCloud::new(&answers, &delays, window), params, capacity);
            prop_assert_eq!(&spec, &plain);
            prop_assert_eq!(stats.routing, plain_stats.routing);
            prop_assert_eq!(stats.rate_control, plain_stats.rate_control);
            prop_assert_eq!(pushed, plain_pushed);
        }
    }
}

/// A cloud that checks drafts (protocol v5) with an LLM that is a fixed function of the
/// context: it agrees with the trace's token at a position unless `disagrees(context)`.
/// Escalation `k` falls back when `fallbacks` holds `k`. Records each draft it was asked about
/// (empty for a plain escalation).
struct DraftCloud {
    points: Vec<(u32, f32)>,
    seed: u64,
    /// Percent of positions where the LLM picks another token.
    disagree_pct: u64,
    fallbacks: Vec<(usize, FallbackReason)>,
    limit: usize,
    drafts: Vec<(Vec<u32>, Vec<u32>)>,
}

impl DraftCloud {
    fn new(points: &[(u32, f32)], seed: u64, disagree_pct: u64, limit: usize) -> Self {
        Self { points: points.to_vec(), seed, disagree_pct, fallbacks: Vec::new(), limit, drafts: Vec::new() }
    }

    /// The LLM's token after `context` (prompt of 3 included).
    fn llm(&self, context: &[u32]) -> u32 {
        llm_token(&self.points, self.seed, self.disagree_pct, context)
    }

    fn fallback(&self, k: usize) -> Option<FallbackReason> {
        self.fallbacks.iter().find(|(i, _)| *i == k).map(|(_, r)| *r)
    }
}

fn llm_token(points: &[(u32, f32)], seed: u64, disagree_pct: u64, context: &[u32]) -> u32 {
    let h = context.iter().fold(seed ^ 0x9e37_79b9_7f4a_7c15, |h, &t| (h ^ u64::from(t)).wrapping_mul(0x1000_0000_01b3));
    let slm = points.get(context.len() - 3).map_or(0, |p| p.0);
    if (h >> 7) % 100 < disagree_pct {
        // Another token, sometimes the stop token.
        [20, 21, 0][((h >> 20) % 3) as usize]
    } else {
        slm
    }
}

impl Cloud for DraftCloud {
    fn draft_limit(&self) -> usize {
        self.limit
    }
    async fn escalate(&mut self, context: &[u32]) -> CloudAnswer {
        let k = self.drafts.len();
        self.drafts.push((context.to_vec(), Vec::new()));
        match self.fallback(k) {
            Some(r) => CloudAnswer::Fallback(r),
            None => CloudAnswer::Token(self.llm(context)),
        }
    }
    async fn escalate_draft(&mut self, context: &[u32], draft: &[u32]) -> DraftAnswer {
        let k = self.drafts.len();
        self.drafts.push((context.to_vec(), draft.to_vec()));
        if let Some(r) = self.fallback(k) {
            return DraftAnswer::Fallback(r);
        }
        let mut ctx = context.to_vec();
        for (j, &d) in draft.iter().enumerate() {
            let l = self.llm(&ctx);
            if l != d {
                return DraftAnswer::Verified { accepted: j, token: l };
            }
            ctx.push(d);
        }
        DraftAnswer::Verified { accepted: draft.len(), token: self.llm(&ctx) }
    }
}

fn run_draft(points: &[(u32, f32)], cloud: &mut DraftCloud, max: usize, capacity: usize) -> (Vec<(u32, TokenSource)>, DecodeStats, Vec<u32>) {
    let mut slm = TraceSlm::new(trace(points), capacity, vec![0]);
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut out = Vec::new();
    let params = DecodeParams { max_new_tokens: max, tau: 0.5, rate_control: None };
    let stats = rt
        .block_on(decode(&mut slm, &mut ConfidenceRouter, cloud, &[1, 2, 3], params, |e| {
            out.push((e.token, e.source));
            ControlFlow::Continue(())
        }))
        .unwrap();
    (out, stats, slm.pushed)
}

/// The loop that asks the LLM position by position: at a hard position it escalates; when the
/// LLM answers the SLM's own token it goes on escalating the next position, for as many
/// positions as the draft sent there held (`drafts[k]`, 0 for a plain escalation), and one
/// more (the bonus). A fallback takes the SLM's token.
fn position_by_position(points: &[(u32, f32)], llm: impl Fn(&[u32]) -> u32, fallback: impl Fn(usize) -> bool, drafts: &[usize], max: usize, capacity: usize) -> Vec<(u32, TokenSource)> {
    let slm = |i: usize| points.get(i).copied().unwrap_or((0, 1.0));
    let mut ctx = vec![1u32, 2, 3];
    let mut out: Vec<(u32, TokenSource)> = Vec::new();
    // Commit a token; whether generation goes on (stop token, length, full context).
    let commit = |out: &mut Vec<(u32, TokenSource)>, ctx: &mut Vec<u32>, t: u32, s: TokenSource| {
        out.push((t, s));
        ctx.push(t);
        t != 0 && out.len() < max && ctx.len() - 1 < capacity
    };
    let mut k = 0;
    'outer: while out.len() < max {
        let i = ctx.len() - 3;
        let (own, conf) = slm(i);
        if conf >= 0.5 {
            if !commit(&mut out, &mut ctx, own, TokenSource::Slm) {
                break;
            }
            continue;
        }
        let n = drafts.get(k).copied().unwrap_or(0);
        k += 1;
        if fallback(k - 1) {
            if !commit(&mut out, &mut ctx, own, TokenSource::Fallback) {
                break;
            }
            continue;
        }
        let mut j = 0;
        loop {
            let l = llm(&ctx);
            let agreed = l == slm(i + j).0;
            if !commit(&mut out, &mut ctx, l, TokenSource::Cloud) {
                break 'outer;
            }
            // Positions 0..n are the draft's, n the bonus: go on inside the draft while agreed.
            if n == 0 || j == n || !agreed {
                break;
            }
            j += 1;
        }
    }
    out
}

#[test]
fn a_fully_accepted_draft_commits_every_draft_token_and_the_bonus_as_the_llms() {
    let points = [(10, 0.2), (11, 0.9), (12, 0.2), (13, 0.9), (14, 0.9), (15, 0.9), (16, 0.9)];
    let mut cloud = DraftCloud::new(&points, 1, 0, 3);
    let (out, stats, pushed) = run_draft(&points, &mut cloud, 7, 100);
    assert_eq!(
        cloud.drafts,
        vec![(vec![1, 2, 3], vec![10]), (vec![1, 2, 3, 10, 11], vec![12, 13])],
        "the first draft is the SLM's token alone; accepted, the next one is twice as long"
    );
    let c = TokenSource::Cloud;
    assert_eq!(out, vec![(10, c), (11, c), (12, c), (13, c), (14, c), (15, TokenSource::Slm), (16, TokenSource::Slm)]);
    assert_eq!((stats.drafts.answered, stats.drafts.tokens_sent, stats.drafts.tokens_accepted), (2, 3, 3));
    assert_eq!((stats.drafts.draft_acceptance_rate, stats.drafts.draft_mean_accepted), (1.0, 1.5));
    assert_eq!((stats.routing.escalated, stats.routing.cloud_tokens), (2, 2));
    assert_eq!(pushed, vec![10, 11, 12, 13, 14, 15], "no roll-back; the last token is not pushed");
}

/// Two hard positions whose one- and two-token drafts the LLM accepts (the draft grows to 4),
/// then a third at position 5: the points for the rejection tests.
const GROWN: [(u32, f32); 5] = [(5, 0.2), (6, 0.9), (7, 0.2), (8, 0.9), (9, 0.9)];

#[test]
fn a_draft_rejected_at_its_first_token_commits_the_llms_token_and_rolls_the_slm_back_once() {
    let points: Vec<(u32, f32)> = GROWN.iter().copied().chain([(10, 0.2), (11, 0.9), (12, 0.9), (13, 0.9)]).collect();
    let mut cloud = DraftCloud::new(&points, 1, 0, 3);
    cloud.points[5].0 = 77; // the LLM's token at position 5
    let (out, stats, pushed) = run_draft(&points, &mut cloud, 9, 100);
    assert_eq!(cloud.drafts[2].1, vec![10, 11, 12], "grown to the cloud's limit");
    let c = TokenSource::Cloud;
    let s = TokenSource::Slm;
    assert_eq!(out, vec![(5, c), (6, c), (7, c), (8, c), (9, c), (77, c), (11, s), (12, s), (13, s)]);
    assert_eq!((stats.drafts.tokens_sent, stats.drafts.tokens_accepted), (6, 3));
    assert_eq!(pushed, vec![5, 6, 7, 8, 9, 77, 11, 12], "the SLM holds exactly the committed tokens");
}

#[test]
fn a_draft_rejected_in_the_middle_keeps_the_accepted_prefix_and_the_correction() {
    let points: Vec<(u32, f32)> = GROWN.iter().copied().chain([(10, 0.2), (11, 0.9), (12, 0.9), (13, 0.9), (14, 0.9)]).collect();
    let mut cloud = DraftCloud::new(&points, 1, 0, 4);
    cloud.points[7].0 = 88; // the LLM disagrees at position 7, the draft's third token
    let (out, stats, pushed) = run_draft(&points, &mut cloud, 10, 100);
    assert_eq!(cloud.drafts[2].1, vec![10, 11, 12, 13]);
    let c = TokenSource::Cloud;
    let s = TokenSource::Slm;
    assert_eq!(out, vec![(5, c), (6, c), (7, c), (8, c), (9, c), (10, c), (11, c), (88, c), (13, s), (14, s)]);
    assert_eq!((stats.drafts.tokens_sent, stats.drafts.tokens_accepted), (7, 5));
    assert_eq!(pushed, vec![5, 6, 7, 8, 9, 10, 11, 88, 13]);
}

#[test]
fn a_draft_answered_after_its_deadline_keeps_only_the_slms_token_and_the_next_hard_token_sends_no_draft() {
    let points = [(10, 0.2), (11, 0.9), (12, 0.2), (13, 0.9)];
    let mut cloud = DraftCloud::new(&points, 1, 0, 3);
    cloud.fallbacks = vec![(0, FallbackReason::Timeout)];
    let (out, stats, pushed) = run_draft(&points, &mut cloud, 4, 100);
    assert_eq!(out, vec![(10, TokenSource::Fallback), (11, TokenSource::Slm), (12, TokenSource::Cloud), (13, TokenSource::Slm)]);
    assert_eq!(cloud.drafts.len(), 2);
    assert!(cloud.drafts[1].1.is_empty(), "after a fallback the link counts as degraded: a plain escalation");
    assert_eq!((stats.routing.fallback_timeout, stats.drafts.answered), (1, 0));
    assert_eq!(pushed, vec![10, 11, 12]);
}

#[test]
fn a_link_lost_mid_draft_falls_back_to_the_slm_and_drafts_again_once_answers_return() {
    let points = [(10, 0.2), (11, 0.9), (12, 0.2), (13, 0.9), (14, 0.2), (15, 0.9)];
    let mut cloud = DraftCloud::new(&points, 1, 0, 2);
    cloud.fallbacks = vec![(0, FallbackReason::LinkDown)];
    let (out, _, _) = run_draft(&points, &mut cloud, 6, 100);
    let sources: Vec<TokenSource> = out.iter().map(|o| o.1).collect();
    assert_eq!(sources[0], TokenSource::Fallback);
    assert!(cloud.drafts[1].1.is_empty(), "no draft right after the link was lost");
    assert!(!cloud.drafts.last().unwrap().1.is_empty(), "drafts again after an answer");
    assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), vec![10, 11, 12, 13, 14, 15], "the LLM agreed throughout");
}

#[test]
fn a_cloud_without_drafts_gets_plain_escalations_and_the_same_tokens() {
    // An older gateway, or --draft off: draft_limit 0.
    let points = [(10, 0.2), (11, 0.9), (12, 0.2), (13, 0.9)];
    let mut cloud = DraftCloud::new(&points, 1, 30, 0);
    let (out, stats, _) = run_draft(&points, &mut cloud, 4, 100);
    assert!(cloud.drafts.iter().all(|(_, d)| d.is_empty()));
    assert_eq!(stats.drafts.answered, 0);
    let mut plain = ScriptedCloud { answers: cloud.drafts.iter().map(|(c, _)| CloudAnswer::Token(cloud.llm(c))).collect(), ..Default::default() };
    let mut slm = TraceSlm::new(trace(&points), 100, vec![0]);
    let (reference, _) = run(&mut slm, &mut plain, 0.5, 4);
    assert_eq!(out, reference);
}

mod draft_equivalence {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Whatever the trace, the LLM's agreement, the fallbacks and the draft lengths the
        /// adaptation chose, a loop that sends drafts commits exactly what a loop that asked
        /// the LLM position by position about the same tokens commits.
        #[test]
        fn drafting_commits_what_asking_position_by_position_commits(
            points in prop::collection::vec((prop_oneof![Just(0u32), 10u32..14], prop_oneof![Just(0.1f32), Just(0.9f32)]), 1..30),
            seed in any::<u64>(),
            disagree_pct in 0u64..60,
            fallbacks in prop::collection::vec(0usize..12, 0..4),
            limit in 0usize..6,
            max in 1usize..30,
            capacity in 4usize..36,
        ) {
            let mut cloud = DraftCloud::new(&points, seed, disagree_pct, limit);
            cloud.fallbacks = fallbacks.iter().map(|&k| (k, FallbackReason::Timeout)).collect();
            let (out, stats, pushed) = run_draft(&points, &mut cloud, max, capacity);
            let lens: Vec<usize> = cloud.drafts.iter().map(|(_, d)| d.len()).collect();
            for (ctx, d) in &cloud.drafts {
                // A draft is the SLM's own tokens from the hard position on.
                for (j, &t) in d.iter().enumerate() {
                    prop_assert_eq!(t, points.get(ctx.len() - 3 + j).map_or(0, |p| p.0));
                }
                prop_assert!(d.len() <= limit);
            }
            let reference = position_by_position(&points, |c| llm_token(&points, seed, disagree_pct, c), |k| fallbacks.contains(&k), &lens, max, capacity);
            prop_assert_eq!(&out, &reference);
            let committed: Vec<u32> = out.iter().map(|o| o.0).collect();
            prop_assert_eq!(&pushed[..], &committed[..pushed.len()], "the SLM holds a prefix of what was committed");
            prop_assert!(committed.len() - pushed.len() <= 1);
            prop_assert!(stats.drafts.tokens_accepted <= stats.drafts.tokens_sent);
        }
    }
}
