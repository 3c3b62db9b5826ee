//! The loop itself.

use std::ops::ControlFlow;
use std::time::Instant;

use model_runtime::RuntimeError;
use serde::Serialize;

use super::cloud::{Cloud, CloudAnswer, DraftAnswer};
use super::draft::DraftControl;
use crate::routing::rate::RateControl;
use super::slm::{Proposal, Slm};
use super::stats::{DecodeStats, FinishReason};
use crate::routing::router::{should_escalate, Router, RouterInput};

/// Where a generated token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// The SLM's token, not escalated.
    Slm,
    /// The LLM's token, from the cloud.
    Cloud,
    /// Escalated, but the SLM's token was used (timeout, busy, link down, error).
    Fallback,
}

/// Settings of one decode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeParams {
    /// Most tokens to generate.
    pub max_new_tokens: usize,
    /// Escalate when the router's confidence is below `tau` (0 = never, 1 = always). With
    /// `rate_control` this is unused: the controller's tau applies.
    pub tau: f32,
    /// Steer tau toward a target share of escalated tokens ([`RateControl`]) instead of holding
    /// it fixed: a fresh controller, or the one a previous decode returned in
    /// [`DecodeStats::rate_control`] to carry what it learned into this session.
    pub rate_control: Option<RateControl>,
}

/// One token as it is committed, for the caller's `on_token`.
#[derive(Debug, Clone, Copy)]
pub struct Emitted<'a> {
    /// The token.
    pub token: u32,
    /// Where it came from.
    pub source: TokenSource,
    /// The SLM's view of this position, when the loop computed it (always, unless the
    /// position was escalated at `tau >= 1` and the cloud answered).
    pub proposal: Option<Proposal<'a>>,
}

/// Generate after `prompt`: at each position the SLM proposes, the router scores, and a token
/// the router finds hard goes to `cloud`; the SLM's own token stands in when the cloud does
/// not answer in time. `on_token` sees every committed token and may stop the loop.
///
/// While an escalation is in flight the SLM may continue from its own token for up to
/// [`Cloud::speculation_window`] positions (when the SLM can [`Slm::rewind`]): if the cloud
/// agrees (or does not answer), those tokens stand; if it answers another token, the SLM
/// forgets them and continues from the cloud's. Speculation stops at the next hard token, which
/// waits for the first answer (its context depends on it). Only committed tokens reach
/// `on_token`, so the output equals the non-speculative run's whenever the answers arrive in
/// time; what changes is that the SLM works while the network does.
pub async fn decode<S: Slm, C: Cloud>(
    slm: &mut S,
    router: &mut dyn Router,
    cloud: &mut C,
    prompt: &[u32],
    params: DecodeParams,
    on_token: impl FnMut(Emitted<'_>) -> ControlFlow<()>,
) -> Result<DecodeStats, RuntimeError> {
    let started = Instant::now();
    let mut control = params.rate_control;
    let routing = params.tau > 0.0 || control.is_some();
    if routing {
        cloud.start(prompt);
    }
    slm.start(prompt)?;
    let prefill_ms = started.elapsed().as_secs_f64() * 1e3;
    let decode_started = Instant::now();
    let mut out = Committer {
        stats: DecodeStats { prompt_tokens: prompt.len(), prefill_ms, ..DecodeStats::default() },
        context: prompt.to_vec(),
        step_started: decode_started,
        max_new_tokens: params.max_new_tokens,
        stop: slm.stop_tokens().to_vec(),
        on_token,
    };
    let window = if slm.can_rewind() { cloud.speculation_window() } else { 0 };
    // Drafts (protocol v5): their length follows acceptance and the answer time; none while
    // the link is degraded (the last escalation fell back).
    let draft_limit = if slm.can_rewind() { cloud.draft_limit() } else { 0 };
    let mut drafts = DraftControl::new();
    let mut degraded = false;
    let finish = loop {
        if out.stats.tokens >= params.max_new_tokens {
            break FinishReason::Length;
        }
        slm.pace().await;
        let room = slm.has_room();
        let tau = control.as_ref().map_or(params.tau, RateControl::tau);
        // At tau >= 1 every token is escalated whatever the router says, so the SLM's view is
        // needed only if the cloud fails to answer (a controller's tau stays below 1).
        let mut proposal = if tau >= 1.0 { None } else { Some(slm.propose()?) };
        let confidence = match proposal {
            Some(p) if routing => Some(router.confidence(&RouterInput { hidden: p.hidden, stats: &p.stats })),
            _ => None,
        };
        let escalate = match (proposal, confidence) {
            (None, _) => true,
            (Some(_), Some(c)) => should_escalate(c, tau),
            (Some(_), None) => false,
        };
        if let (Some(rc), Some(c)) = (control.as_mut(), confidence) {
            rc.observe(c, escalate);
        }
        if let (false, Some(p)) = (escalate, proposal) {
            let token = p.token;
            if let ControlFlow::Break(reason) = out.emit(token, TokenSource::Slm, proposal).then(|| advance(slm, token)) {
                break reason;
            }
            continue;
        }
        out.stats.routing.escalated += 1;
        let draft_len = drafts.next_len(draft_limit, degraded).min(out.room());
        if let (Some(p), true) = (proposal, draft_len > 0 && room) {
            // Draft: the SLM's token and its continuation go to the LLM, which checks them all.
            let own = p.token;
            let at = out.context.len();
            let drafted = draft(slm, cloud, &out.context, own, draft_len, &out.stop, &mut drafts).await?;
            degraded = matches!(drafted.answer, DraftAnswer::Fallback(_));
            if let ControlFlow::Break(reason) = out.settle_draft(slm, at, drafted, &mut drafts) {
                break reason;
            }
            continue;
        }
        let own = proposal.map(|p| p.token).filter(|t| window > 0 && out.room() > 1 && room && !out.stop.contains(t));
        if let Some(own) = own {
            // Speculate: the SLM's token goes in at once and the SLM continues from it.
            let at = out.context.len();
            slm.push(own);
            let threshold = Threshold { tau, control };
            let spec = speculate(slm, router, cloud, &out.context, threshold, window.min(out.room() - 1)).await?;
            if let ControlFlow::Break(reason) = out.settle_speculation(slm, at, own, spec, control.as_mut()) {
                break reason;
            }
            continue;
        }
        let asked = Instant::now();
        let answer = cloud.escalate(&out.context).await;
        let waited_ms = asked.elapsed().as_secs_f64() * 1e3;
        degraded = matches!(answer, CloudAnswer::Fallback(_));
        if !degraded {
            drafts.waited(waited_ms);
        }
        let source = out.record_answer(answer, waited_ms);
        let token = match answer {
            CloudAnswer::Token(t) => t,
            CloudAnswer::Fallback(_) => match proposal {
                Some(p) => p.token,
                None => {
                    let p = slm.propose()?;
                    proposal = Some(p);
                    p.token
                }
            },
        };
        if let ControlFlow::Break(reason) = out.emit(token, source, proposal).then(|| advance(slm, token)) {
            break reason;
        }
    };
    let mut stats = out.stats;
    stats.finish_reason = finish;
    stats.rate_control = control;
    stats.decode_ms = decode_started.elapsed().as_secs_f64() * 1e3;
    cloud.finish(&mut stats).await;
    stats.total_ms = started.elapsed().as_secs_f64() * 1e3;
    stats.finish();
    Ok(stats)
}

/// What happened while one escalation was in flight.
struct Speculation {
    /// The cloud's answer.
    answer: CloudAnswer,
    /// How long it took.
    latency_ms: f64,
    /// Tokens the SLM decoded after its own token meanwhile (not committed).
    tokens: Vec<u32>,
    /// The router's confidence at each of them.
    confidences: Vec<f32>,
    /// How many of them (the first ones) the SLM already holds; the others are given to it
    /// when committed, as the loop without speculation would.
    pushed: usize,
}

/// How the positions after an escalation are judged while it is in flight: the loop's fixed tau,
/// or a copy of its controller that goes ahead of it (the real one learns these positions only
/// when they are committed), so each position gets the tau the loop would give it.
#[derive(Clone, Copy)]
struct Threshold {
    tau: f32,
    control: Option<RateControl>,
}

/// While `cloud` answers the escalation of `context` (whose SLM token `own` the SLM has just
/// been given), let the SLM decode up to `window` more positions. It stops at a hard token
/// (its context depends on the answer), and does not give the SLM a token the loop without
/// speculation would not give it: a stop token, the last one allowed, one past a full context.
async fn speculate<S: Slm, C: Cloud>(slm: &mut S, router: &mut dyn Router, cloud: &mut C, context: &[u32], mut threshold: Threshold, window: usize) -> Result<Speculation, RuntimeError> {
    let asked = Instant::now();
    let answer = cloud.escalate(context);
    tokio::pin!(answer);
    let mut tokens = Vec::new();
    let mut confidences = Vec::new();
    let mut pushed = 0;
    while tokens.len() == pushed && tokens.len() < window {
        // The answer wins over the next step: nothing is decoded that is already decided.
        tokio::select! {
            biased;
            a = &mut answer => return Ok(Speculation { answer: a, latency_ms: asked.elapsed().as_secs_f64() * 1e3, tokens, confidences, pushed }),
            () = slm.pace() => {}
        }
        let p = slm.propose()?;
        let tau = threshold.control.as_ref().map_or(threshold.tau, RateControl::tau);
        let confidence = router.confidence(&RouterInput { hidden: p.hidden, stats: &p.stats });
        if should_escalate(confidence, tau) {
            break;
        }
        if let Some(ahead) = threshold.control.as_mut() {
            ahead.observe(confidence, false);
        }
        let token = p.token;
        tokens.push(token);
        confidences.push(confidence);
        if tokens.len() < window && !slm.stop_tokens().contains(&token) && slm.has_room() {
            slm.push(token);
            pushed += 1;
        }
    }
    let answer = answer.await;
    Ok(Speculation { answer, latency_ms: asked.elapsed().as_secs_f64() * 1e3, tokens, confidences, pushed })
}

/// An escalation that carried a draft, answered.
struct Drafted {
    /// The SLM's token at the hard position, then its continuation.
    draft: Vec<u32>,
    /// How many of them (the first ones) the SLM holds.
    pushed: usize,
    /// The cloud's answer.
    answer: DraftAnswer,
    /// How long it took.
    latency_ms: f64,
}

/// Decode a draft of up to `len` tokens from the SLM's token `own` at the position after
/// `context` (the router is not asked: the LLM checks every draft position), then escalate it.
/// It stops after a stop token and where the context is full, and gives the SLM every draft
/// token but the last.
async fn draft<S: Slm, C: Cloud>(slm: &mut S, cloud: &mut C, context: &[u32], own: u32, len: usize, stop: &[u32], control: &mut DraftControl) -> Result<Drafted, RuntimeError> {
    let mut draft = vec![own];
    let mut pushed = 0;
    while let (true, Some(&last)) = (draft.len() < len, draft.last()) {
        if stop.contains(&last) || !slm.has_room() {
            break;
        }
        slm.push(last);
        pushed += 1;
        let step = Instant::now();
        slm.pace().await;
        let p = slm.propose()?;
        control.stepped(step.elapsed().as_secs_f64() * 1e3);
        draft.push(p.token);
    }
    let asked = Instant::now();
    let answer = cloud.escalate_draft(context, &draft).await;
    Ok(Drafted { draft, pushed, answer, latency_ms: asked.elapsed().as_secs_f64() * 1e3 })
}

/// The committed side of a decode: the context, the counters, and the caller's `on_token`.
struct Committer<F> {
    stats: DecodeStats,
    context: Vec<u32>,
    step_started: Instant,
    max_new_tokens: usize,
    stop: Vec<u32>,
    on_token: F,
}

impl<F: FnMut(Emitted<'_>) -> ControlFlow<()>> Committer<F> {
    /// Tokens that may still be generated.
    fn room(&self) -> usize {
        self.max_new_tokens.saturating_sub(self.stats.tokens)
    }

    /// Count an escalation's answer; the source its position's token will have.
    fn record_answer(&mut self, answer: CloudAnswer, latency_ms: f64) -> TokenSource {
        match answer {
            CloudAnswer::Token(_) => {
                self.stats.routing.cloud_tokens += 1;
                self.stats.escalation_latencies.push(latency_ms);
                TokenSource::Cloud
            }
            CloudAnswer::Fallback(reason) => {
                self.stats.routing.fallback(reason);
                TokenSource::Fallback
            }
        }
    }

    /// Commit `token`: append it to the context and show it to the caller; whether generation
    /// goes on after it (the caller stops it, or it ends the sequence).
    fn emit(&mut self, token: u32, source: TokenSource, proposal: Option<Proposal<'_>>) -> ControlFlow<FinishReason> {
        self.stats.tokens += 1;
        self.context.push(token);
        let now = Instant::now();
        self.stats.token_latencies.push(now.duration_since(self.step_started).as_secs_f64() * 1e3);
        self.step_started = now;
        if (self.on_token)(Emitted { token, source, proposal }).is_break() {
            return ControlFlow::Break(FinishReason::Cancelled);
        }
        if self.stop.contains(&token) {
            return ControlFlow::Break(FinishReason::Stop);
        }
        if self.stats.tokens >= self.max_new_tokens {
            return ControlFlow::Break(FinishReason::Length);
        }
        ControlFlow::Continue(())
    }

    /// Commit the outcome of an escalation that the SLM speculated past: its own token `own` at
    /// position `at`, the first `spec.pushed` speculated tokens after it. If the cloud answered
    /// another token, the SLM forgets from `at` on and the cloud's token is committed; otherwise
    /// `own` and the speculated tokens are, each learnt by `control` as it is.
    fn settle_speculation<S: Slm>(&mut self, slm: &mut S, at: usize, own: u32, spec: Speculation, mut control: Option<&mut RateControl>) -> ControlFlow<FinishReason> {
        let source = self.record_answer(spec.answer, spec.latency_ms);
        if let CloudAnswer::Token(t) = spec.answer {
            if t != own {
                // The cloud disagreed: forget what followed the SLM's token.
                slm.rewind(at);
                self.stats.speculation.rolled_back += 1;
                self.stats.speculation.tokens_discarded += spec.tokens.len();
                return self.commit(slm, t, source);
            }
        }
        if !spec.tokens.is_empty() {
            self.stats.speculation.kept += 1;
            self.stats.speculation.tokens_kept += spec.tokens.len();
        }
        // The SLM already holds these tokens: commit them without pushing them again.
        let mut flow = self.emit(own, source, None);
        for (i, &t) in spec.tokens.iter().enumerate() {
            if flow.is_break() {
                break;
            }
            // The controller learns each speculated position as it is committed, as it would
            // have without speculation (where it decided it with the same tau).
            if let (Some(rc), Some(&c)) = (control.as_deref_mut(), spec.confidences.get(i)) {
                rc.observe(c, false);
            }
            flow = self.emit(t, TokenSource::Slm, None);
            if i >= spec.pushed {
                flow = flow.then(|| advance(slm, t));
            }
        }
        flow
    }

    /// Commit the outcome of a draft escalation at position `at`: the accepted draft tokens and
    /// the LLM's token after them (every one the LLM's), or on a fallback the SLM's token at
    /// `at` alone (the loop goes on from there as without a draft). The SLM is rolled back
    /// once, to what is committed, and given what it does not hold yet.
    fn settle_draft<S: Slm>(&mut self, slm: &mut S, at: usize, d: Drafted, control: &mut DraftControl) -> ControlFlow<FinishReason> {
        let (keep, next, source) = match d.answer {
            DraftAnswer::Verified { accepted, token } => {
                let accepted = accepted.min(d.draft.len());
                self.stats.routing.cloud_tokens += 1;
                self.stats.escalation_latencies.push(d.latency_ms);
                self.stats.drafts.record(d.draft.len(), accepted);
                control.answered(d.draft.len(), accepted, d.latency_ms);
                (accepted, Some(token), TokenSource::Cloud)
            }
            DraftAnswer::Fallback(reason) => {
                self.stats.routing.fallback(reason);
                (1, None, TokenSource::Fallback)
            }
        };
        if d.pushed > keep {
            slm.rewind(at + keep);
        }
        let held = d.pushed.min(keep);
        let mut flow = ControlFlow::Continue(());
        for (j, &t) in d.draft[..keep].iter().enumerate() {
            if flow.is_break() {
                break;
            }
            flow = self.emit(t, source, None);
            if j >= held {
                flow = flow.then(|| advance(slm, t));
            }
        }
        match next {
            Some(t) => flow.then(|| self.commit(slm, t, TokenSource::Cloud)),
            None => flow,
        }
    }

    /// [`Committer::emit`], then give the token to the SLM for the next position (unless the
    /// context is full).
    fn commit<S: Slm>(&mut self, slm: &mut S, token: u32, source: TokenSource) -> ControlFlow<FinishReason> {
        self.emit(token, source, None).then(|| advance(slm, token))
    }
}

/// Give the committed `token` to the SLM for the next position, unless the context is full.
fn advance<S: Slm>(slm: &mut S, token: u32) -> ControlFlow<FinishReason> {
    if !slm.has_room() {
        return ControlFlow::Break(FinishReason::ContextFull);
    }
    slm.push(token);
    ControlFlow::Continue(())
}

/// Run the next step only if the previous one let generation go on.
trait Then {
    fn then(self, next: impl FnOnce() -> Self) -> Self;
}

impl Then for ControlFlow<FinishReason> {
    fn then(self, next: impl FnOnce() -> Self) -> Self {
        match self {
            ControlFlow::Continue(()) => next(),
            stop => stop,
        }
    }
}
