//! The routed decode loop of one session: SLM step → router → escalate or keep → append.
//!
//! Escalations wait at most a deadline derived from the link's RTT and the gateway's service
//! time; on timeout, `Busy`, an error or a dead link the SLM's own token is used (a fallback),
//! so generation never stalls. A `ContextMissing` answer (gateway restarted, session expired)
//! is answered at once with a `Full` resend within the same deadline.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::protocol::{ContextTracker, Frame, WireSampling};
use common::runtime::{CausalLm, KvCache, RuntimeError, StepOutput};
use common::sampling::{distribution_stats, Sampler, SamplingParams};
use serde::Serialize;

use crate::deadline::LinkHealth;
use crate::link::{Link, LinkError, LinkState};
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

/// Why an escalation fell back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FallbackReason {
    Timeout,
    Busy,
    LinkDown,
    Degraded,
    GatewayError,
    Transport,
}

/// Counters and latencies of one routed generation.
#[derive(Debug, Default, Clone, Serialize)]
pub struct RoutedStats {
    pub prompt_tokens: usize,
    pub tokens: usize,
    pub escalated: usize,
    pub cloud_tokens: usize,
    pub fallbacks: usize,
    pub fallback_timeout: usize,
    pub fallback_busy: usize,
    pub fallback_link_down: usize,
    pub fallback_degraded: usize,
    pub fallback_error: usize,
    pub context_missing: usize,
    /// Escalations that carried the whole context (`Full`): the first, and each resync.
    pub full_syncs: usize,
    /// Frame bytes (length prefix included) of the first escalation.
    pub first_escalation_bytes: usize,
    /// Average frame bytes of the escalations after the first.
    pub later_escalation_bytes_avg: f64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub prefill_ms: f64,
    pub total_ms: f64,
    pub tokens_per_s: f64,
    pub token_latency_ms_p50: f64,
    pub token_latency_ms_p90: f64,
    pub token_latency_ms_p99: f64,
    pub escalation_latency_ms_p50: f64,
    pub escalation_latency_ms_p99: f64,
    #[serde(skip)]
    token_latencies: Vec<f64>,
    #[serde(skip)]
    escalation_latencies: Vec<f64>,
    #[serde(skip)]
    escalation_bytes: Vec<usize>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

impl RoutedStats {
    fn fallback(&mut self, reason: FallbackReason) {
        self.fallbacks += 1;
        match reason {
            FallbackReason::Timeout => self.fallback_timeout += 1,
            FallbackReason::Busy => self.fallback_busy += 1,
            FallbackReason::LinkDown => self.fallback_link_down += 1,
            FallbackReason::Degraded => self.fallback_degraded += 1,
            FallbackReason::GatewayError | FallbackReason::Transport => self.fallback_error += 1,
        }
    }

    fn finish(&mut self) {
        let mut t = std::mem::take(&mut self.token_latencies);
        t.sort_by(f64::total_cmp);
        self.token_latency_ms_p50 = percentile(&t, 0.5);
        self.token_latency_ms_p90 = percentile(&t, 0.9);
        self.token_latency_ms_p99 = percentile(&t, 0.99);
        let mut e = std::mem::take(&mut self.escalation_latencies);
        e.sort_by(f64::total_cmp);
        self.escalation_latency_ms_p50 = percentile(&e, 0.5);
        self.escalation_latency_ms_p99 = percentile(&e, 0.99);
        if let Some((first, later)) = self.escalation_bytes.split_first() {
            self.first_escalation_bytes = *first;
            self.later_escalation_bytes_avg = if later.is_empty() { 0.0 } else { later.iter().sum::<usize>() as f64 / later.len() as f64 };
        }
        self.tokens_per_s = if self.total_ms > 0.0 { self.tokens as f64 / (self.total_ms / 1e3) } else { 0.0 };
    }
}

/// Settings of a routed generation.
#[derive(Debug, Clone)]
pub struct RoutedParams {
    pub max_new_tokens: usize,
    pub tau: f32,
    pub sampling: SamplingParams,
    pub session_id: u64,
    /// Send the prompt to the gateway at the start, in the background, so that the first hard
    /// token costs the LLM only a short delta instead of a whole-prompt prefill.
    pub presync: bool,
}

/// Outcome of one escalation attempt.
enum Escalated {
    Token { token: u32 },
    Fallback(FallbackReason),
}

/// Routed session state kept across the decode loop.
pub struct RoutedSession<'a> {
    link: Option<&'a Link>,
    router: &'a mut dyn Router,
    tracker: ContextTracker,
    health: LinkHealth,
    generation: u64,
    params: RoutedParams,
    presync: Option<Presync>,
}

/// A prompt pre-sync in flight: until the gateway answers it, it is still prefilling the
/// prompt, and a hard token queued behind that work needs the prompt's share of the deadline.
#[derive(Debug)]
struct Presync {
    started: Instant,
    tokens: usize,
    generation: u64,
    done: Arc<AtomicBool>,
}

impl Presync {
    fn pending(&self, generation: u64) -> bool {
        self.generation == generation && !self.done.load(Ordering::Acquire)
    }
}

impl<'a> RoutedSession<'a> {
    /// A session over `link` (or local-only when `None`).
    pub fn new(link: Option<&'a Link>, router: &'a mut dyn Router, health: LinkHealth, params: RoutedParams) -> Self {
        Self { link, router, tracker: ContextTracker::new(), health, generation: 0, params, presync: None }
    }

    /// The link health, to carry into the next session on the same link (what it learned
    /// about the gateway's speed, and any local-only period).
    pub fn into_health(self) -> LinkHealth {
        self.health
    }

    async fn escalate(&mut self, context: &[u32], stats: &mut RoutedStats) -> Escalated {
        self.health.poll_prefill();
        let now = Instant::now();
        let Some(link) = self.link else { return Escalated::Fallback(FallbackReason::LinkDown) };
        if !self.health.may_escalate(now) && matches!(link.state(), LinkState::Up(ref c) if c.generation == self.generation) {
            return Escalated::Fallback(FallbackReason::Degraded);
        }
        // A dead link costs no waiting (the fallback is immediate), so it does not count
        // towards local-only mode; the link task reconnects on its own.
        let LinkState::Up(connected) = link.state() else { return Escalated::Fallback(FallbackReason::LinkDown) };
        if connected.generation != self.generation {
            // A new connection: the gateway may be a restarted one without our context, and
            // the handshake just proved it reachable, so end any local-only period.
            self.generation = connected.generation;
            self.tracker.reset();
            self.health.reconnected();
        }
        let to_send = context.len() - self.tracker.assumed_len().filter(|&n| n <= context.len()).unwrap_or(0);
        let ahead = match self.presync.as_ref().filter(|p| p.pending(connected.generation)) {
            // Still prefilling the prompt: this token waits behind what is left of it (still
            // capped by the deadline's maximum, so the edge never stalls longer than configured).
            Some(p) => self.health.prefill_estimate(p.tokens).saturating_sub(p.started.elapsed()),
            None => Duration::ZERO,
        };
        let budget = self.health.deadline_behind(connected.conn.rtt(), to_send, ahead);
        let deadline = now + budget;
        for attempt in 0..2 {
            let deadline_ms = deadline.saturating_duration_since(Instant::now()).as_millis() as u32;
            let (seq, frame) = self.next_escalation(context, deadline_ms, stats);
            // What this frame makes the LLM prefill (a `Full` resend after `ContextMissing` is
            // the whole context), for learning the per-token cost from the answer.
            let sent = match &frame {
                Frame::Escalate { context, .. } => context.tokens().len(),
                _ => to_send,
            };
            stats.escalation_bytes.push(common::protocol::encode_frame(&frame, usize::MAX).map(|b| b.len()).unwrap_or(0));
            let outcome = link.request(&frame, deadline).await;
            let reason = match outcome {
                Ok((Frame::Token { seq: got, token_id, llm_ms, .. }, _)) if got == seq => {
                    self.tracker.acknowledge(seq);
                    self.health.success(sent, llm_ms);
                    tracing::debug!(waited_ms = now.elapsed().as_millis() as u64, budget_ms = budget.as_millis() as u64, sent = to_send, llm_ms, "cloud token");
                    stats.escalation_latencies.push(now.elapsed().as_secs_f64() * 1e3);
                    return Escalated::Token { token: token_id };
                }
                Ok((Frame::ContextMissing { seq, held_len, .. }, _)) if attempt == 0 => {
                    stats.context_missing += 1;
                    self.tracker.context_missing(seq, held_len);
                    continue;
                }
                Ok((Frame::Busy { seq, .. }, _)) => {
                    self.tracker.acknowledge(seq);
                    FallbackReason::Busy
                }
                Ok((other, _)) => {
                    tracing::debug!(reply = ?other, "escalation answered with an error");
                    FallbackReason::GatewayError
                }
                Err(LinkError::Timeout) => FallbackReason::Timeout,
                Err(LinkError::Down) => FallbackReason::LinkDown,
                Err(e) => {
                    tracing::debug!("escalation failed: {e}");
                    FallbackReason::Transport
                }
            };
            tracing::debug!(?reason, waited_ms = now.elapsed().as_millis() as u64, budget_ms = budget.as_millis() as u64, sent = to_send, "escalation fell back");
            let degraded = match reason {
                FallbackReason::Timeout => self.health.timeout(Instant::now()),
                _ => self.health.failure(Instant::now()),
            };
            if degraded {
                link.probe(budget.max(Duration::from_millis(300)));
            }
            return Escalated::Fallback(reason);
        }
        if self.health.failure(Instant::now()) {
            link.probe(budget.max(Duration::from_millis(300)));
        }
        Escalated::Fallback(FallbackReason::GatewayError)
    }

    /// The next `Escalate` frame for `context` (allocates its seq, counts a `Full`).
    fn next_escalation(&mut self, context: &[u32], deadline_ms: u32, stats: &mut RoutedStats) -> (u32, Frame) {
        let sync = self.tracker.sync_for(context);
        if matches!(sync.context, common::protocol::ContextSync::Full { .. }) {
            stats.full_syncs += 1;
        }
        let frame = Frame::Escalate {
            session_id: self.params.session_id,
            seq: sync.seq,
            context: sync.context,
            sampling: WireSampling::from(self.params.sampling),
            deadline_ms,
        };
        (sync.seq, frame)
    }

    /// Start syncing `prompt` to the gateway without waiting: the reply (an LLM token nobody
    /// needs) is awaited in a background task so the work is not cancelled, and the tracker
    /// assumes the sync applied, like any other (a lost one costs a `ContextMissing` retry).
    fn presync(&mut self, prompt: &[u32], stats: &mut RoutedStats) {
        let Some(link) = self.link else { return };
        let LinkState::Up(connected) = link.state() else { return };
        if connected.generation != self.generation {
            self.generation = connected.generation;
            self.tracker.reset();
        }
        let (_, frame) = self.next_escalation(prompt, 30_000, stats);
        let link = link.clone();
        let done = Arc::new(AtomicBool::new(false));
        // The answer's service time is the prefill cost of a whole prompt: the link health
        // learns from it, even after this session ended.
        let report = self.health.expect_prefill(prompt.len());
        tokio::spawn({
            let done = done.clone();
            async move {
                if let Ok((Frame::Token { llm_ms, .. }, _)) = link.request(&frame, Instant::now() + Duration::from_secs(30)).await {
                    report.report(llm_ms);
                }
                done.store(true, Ordering::Release);
            }
        });
        self.presync = Some(Presync { started: Instant::now(), tokens: prompt.len(), generation: connected.generation, done });
    }

    /// Generate after `prompt`, calling `on_token(token, source)` for each token.
    pub async fn generate(
        &mut self,
        lm: &mut CausalLm,
        cache: &mut KvCache,
        prompt: &[u32],
        mut on_token: impl FnMut(u32, TokenSource) -> ControlFlow<()>,
    ) -> Result<RoutedStats, RuntimeError> {
        let mut stats = RoutedStats { prompt_tokens: prompt.len(), ..Default::default() };
        let mut sampler = Sampler::new(self.params.sampling)?;
        let started = Instant::now();
        let mut step = StepOutput::default();
        cache.clear();
        if self.params.presync && self.params.tau > 0.0 {
            self.presync(prompt, &mut stats);
        }
        tokio::task::block_in_place(|| lm.forward_into(cache, prompt, &mut step))?;
        stats.prefill_ms = started.elapsed().as_secs_f64() * 1e3;
        let mut context: Vec<u32> = prompt.to_vec();
        let stop = lm.stop_tokens().to_vec();
        let mut step_started = Instant::now();
        loop {
            if stats.tokens >= self.params.max_new_tokens {
                break;
            }
            let dist = distribution_stats(&step.logits)?;
            let slm = sampler.sample_with_stats(&step.logits, &dist)?.token;
            let confidence = self.router.confidence(&RouterInput { hidden: &step.hidden, stats: &dist });
            let (token, source) = if should_escalate(confidence, self.params.tau) {
                stats.escalated += 1;
                match self.escalate(&context, &mut stats).await {
                    Escalated::Token { token, .. } => {
                        stats.cloud_tokens += 1;
                        (token, TokenSource::Cloud)
                    }
                    Escalated::Fallback(reason) => {
                        stats.fallback(reason);
                        (slm, TokenSource::Fallback)
                    }
                }
            } else {
                (slm, TokenSource::Slm)
            };
            stats.tokens += 1;
            context.push(token);
            let now = Instant::now();
            stats.token_latencies.push(now.duration_since(step_started).as_secs_f64() * 1e3);
            step_started = now;
            if on_token(token, source).is_break() || stop.contains(&token) || stats.tokens >= self.params.max_new_tokens {
                break;
            }
            if cache.len() + 1 > cache.capacity() {
                break;
            }
            tokio::task::block_in_place(|| lm.forward_into(cache, &[token], &mut step))?;
        }
        if let Some(link) = self.link {
            if self.tracker.assumed_len().is_some() {
                // Free the gateway's copy of this session at once instead of waiting for expiry.
                let _ = link.request(&Frame::EndSession { session_id: self.params.session_id }, Instant::now() + Duration::from_millis(200)).await;
            }
            stats.bytes_sent = link.counters().bytes_sent.load(Ordering::Relaxed);
            stats.bytes_received = link.counters().bytes_received.load(Ordering::Relaxed);
        }
        stats.total_ms = started.elapsed().as_secs_f64() * 1e3;
        stats.finish();
        Ok(stats)
    }
}
