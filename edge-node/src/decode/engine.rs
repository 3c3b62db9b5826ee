//! The loop itself.

use std::ops::ControlFlow;
use std::time::Instant;

use model_runtime::RuntimeError;
use serde::Serialize;

use super::cloud::{Cloud, CloudAnswer};
use super::slm::{Proposal, Slm};
use super::stats::DecodeStats;
use crate::router::{should_escalate, Router, RouterInput};

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

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A stop token was produced.
    Stop,
    /// `max_new_tokens` was reached.
    Length,
    /// The context is full.
    ContextFull,
    /// The caller asked to stop.
    Cancelled,
}

/// Settings of one decode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeParams {
    /// Most tokens to generate.
    pub max_new_tokens: usize,
    /// Escalate when the router's confidence is below `tau` (0 = never, 1 = always).
    pub tau: f32,
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
pub async fn decode<S: Slm, C: Cloud>(
    slm: &mut S,
    router: &mut dyn Router,
    cloud: &mut C,
    prompt: &[u32],
    params: DecodeParams,
    mut on_token: impl FnMut(Emitted<'_>) -> ControlFlow<()>,
) -> Result<DecodeStats, RuntimeError> {
    let mut stats = DecodeStats { prompt_tokens: prompt.len(), ..DecodeStats::default() };
    let started = Instant::now();
    let routing = params.tau > 0.0;
    if routing {
        cloud.start(prompt);
    }
    slm.start(prompt)?;
    stats.prefill_ms = started.elapsed().as_secs_f64() * 1e3;
    let decode_started = Instant::now();
    let mut context: Vec<u32> = prompt.to_vec();
    let mut step_started = decode_started;
    stats.finish_reason = loop {
        if stats.tokens >= params.max_new_tokens {
            break FinishReason::Length;
        }
        slm.pace().await;
        // At tau >= 1 every token is escalated whatever the router says, so the SLM's view is
        // needed only if the cloud fails to answer.
        let mut proposal = if params.tau >= 1.0 { None } else { Some(slm.propose()?) };
        let escalate = match proposal {
            None => true,
            Some(p) if routing => should_escalate(router.confidence(&RouterInput { hidden: p.hidden, stats: &p.stats }), params.tau),
            Some(_) => false,
        };
        let mut source = TokenSource::Slm;
        let mut chosen = None;
        if escalate {
            stats.routing.escalated += 1;
            let asked = Instant::now();
            match cloud.escalate(&context).await {
                CloudAnswer::Token(t) => {
                    stats.routing.cloud_tokens += 1;
                    stats.escalation_latencies.push(asked.elapsed().as_secs_f64() * 1e3);
                    source = TokenSource::Cloud;
                    chosen = Some(t);
                }
                CloudAnswer::Fallback(reason) => {
                    stats.routing.fallback(reason);
                    source = TokenSource::Fallback;
                }
            }
        }
        let token = match chosen {
            Some(t) => t,
            None => match proposal {
                Some(p) => p.token,
                None => {
                    let p = slm.propose()?;
                    proposal = Some(p);
                    p.token
                }
            },
        };
        stats.tokens += 1;
        context.push(token);
        let now = Instant::now();
        stats.token_latencies.push(now.duration_since(step_started).as_secs_f64() * 1e3);
        step_started = now;
        if on_token(Emitted { token, source, proposal }).is_break() {
            break FinishReason::Cancelled;
        }
        if slm.stop_tokens().contains(&token) {
            break FinishReason::Stop;
        }
        if stats.tokens >= params.max_new_tokens {
            break FinishReason::Length;
        }
        if !slm.has_room() {
            break FinishReason::ContextFull;
        }
        slm.push(token);
    };
    stats.decode_ms = decode_started.elapsed().as_secs_f64() * 1e3;
    cloud.finish(&mut stats).await;
    stats.total_ms = started.elapsed().as_secs_f64() * 1e3;
    stats.finish();
    Ok(stats)
}
