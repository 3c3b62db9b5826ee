//! The decode loop with a trace-driven SLM and a scripted cloud: which tokens are escalated,
//! which source each committed token has, and why generation stops. No model, no network.

use std::collections::VecDeque;
use std::ops::ControlFlow;

use common::exchange::FallbackReason;

use super::trace::{TracePoint, TraceSlm};
use super::*;
use crate::router::ConfidenceRouter;

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
    let params = DecodeParams { max_new_tokens: max, tau };
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
        .block_on(decode(&mut slm, &mut ConfidenceRouter, &mut NoCloud, &[1], DecodeParams { max_new_tokens: 8, tau: 0.0 }, |_| {
            n += 1;
            if n == 2 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        }))
        .unwrap();
    assert_eq!((stats.tokens, stats.finish_reason), (2, FinishReason::Cancelled));
}
