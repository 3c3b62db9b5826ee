//! The cloud of a routed session: the QUIC [`Link`] carrying what the session's
//! [`EdgeSession`] decides. All rules (what to send, how long to wait, what a reply means)
//! are the exchange's; this file only moves its bytes and reports what happened.
//!
//! Traces (when an OTLP exporter is installed, see `common::telemetry`): a `generation` span per
//! session, and under it an `escalation` span per hard token (how long it waited, cloud or
//! which fallback, bytes sent) and a `presync` span for context sent ahead (the prompt, or a
//! resync after a reconnect). A sampled escalation carries its span's trace context to the
//! gateway, whose spans then join the same trace; an unsampled one, or any with tracing off,
//! carries nothing.

use std::time::{Duration, Instant};

use common::exchange::{EdgeSession, FallbackReason, LinkHealth, Outcome, PrefillReport, Step, Transmit};
use common::protocol::{understands_drafts, Frame, WireSampling};
use common::telemetry::TRACE_TARGET;
use tracing::field::Empty;

use crate::decode::{Cloud, CloudAnswer, DecodeStats, DraftAnswer, DraftMode, MAX_DRAFT};
use super::{Link, LinkError, LinkState};

/// How long the `EndSession` notice may take; nobody waits for its answer beyond this.
const END_SESSION_WAIT: Duration = Duration::from_millis(200);

/// One session's escalations over a link.
pub struct LinkCloud<'a> {
    link: &'a Link,
    session: EdgeSession,
    presync: bool,
    speculation_window: usize,
    draft: DraftMode,
    sent_at_start: u64,
    received_at_start: u64,
    escalation_bytes: Vec<usize>,
    /// The session's `generation` span (disabled with tracing off).
    generation: tracing::Span,
}

impl<'a> LinkCloud<'a> {
    /// Session `session_id` over `link`, with what the link learned so far (`health`).
    /// `presync` sends context ahead of the hard tokens that need it: the prompt, and a long
    /// context a gateway does not hold (after a reconnect).
    pub fn new(link: &'a Link, session_id: u64, sampling: WireSampling, health: LinkHealth, presync: bool) -> Self {
        let c = link.counters();
        Self {
            link,
            session: EdgeSession::new(session_id, sampling, health),
            presync,
            speculation_window: 0,
            draft: DraftMode::Off,
            sent_at_start: c.sent(),
            received_at_start: c.received(),
            escalation_bytes: Vec::new(),
            // Kept only when sampled: an unsampled generation has no escalation spans either.
            generation: common::trace::keep_if_sampled(tracing::info_span!(target: TRACE_TARGET, "generation", session = session_id, prompt_tokens = Empty, tokens = Empty, escalated = Empty, cloud_tokens = Empty, fallbacks = Empty)),
        }
    }

    /// Let the SLM decode up to `window` tokens ahead while an escalation crosses the link
    /// (see [`crate::decode::decode`]); 0 (the default) waits for every answer.
    pub fn with_speculation(mut self, window: usize) -> Self {
        self.speculation_window = window;
        self
    }

    /// Send drafts with escalations (`--draft`), to gateways that check them (protocol v5).
    pub fn with_draft(mut self, mode: DraftMode) -> Self {
        self.draft = mode;
        self
    }

    /// The link health, to carry into the next session on the same link.
    pub fn into_health(self) -> LinkHealth {
        self.session.into_health()
    }

    /// A span under the generation's, or none when the generation is not traced (a span with
    /// a disabled parent would start a trace of its own).
    fn child(&self, make: impl FnOnce(&tracing::Span) -> tracing::Span) -> tracing::Span {
        if self.generation.is_disabled() {
            tracing::Span::none()
        } else {
            make(&self.generation)
        }
    }
}

impl Cloud for LinkCloud<'_> {
    fn start(&mut self, prompt: &[u32]) {
        self.generation.record("prompt_tokens", prompt.len());
        if !self.presync {
            return;
        }
        if let Some((t, report)) = self.session.presync(prompt, self.link.view(), Instant::now()) {
            self.send_ahead(t, report, "presync", prompt.len());
        }
    }

    fn speculation_window(&self) -> usize {
        self.speculation_window
    }

    fn draft_limit(&self) -> usize {
        // An older gateway (a rolling upgrade) cannot decode a draft: plain escalations to it.
        let drafts = match self.link.state() {
            LinkState::Up(c) => understands_drafts(c.protocol_version),
            _ => false,
        };
        if self.draft == DraftMode::Adaptive && drafts { MAX_DRAFT } else { 0 }
    }

    async fn escalate(&mut self, context: &[u32]) -> CloudAnswer {
        match self.exchange(context, &[]).await {
            Answer::Token(t) | Answer::Verified { token: t, .. } => CloudAnswer::Token(t),
            Answer::Fallback(reason) => CloudAnswer::Fallback(reason),
        }
    }

    async fn escalate_draft(&mut self, context: &[u32], draft: &[u32]) -> DraftAnswer {
        match self.exchange(context, draft).await {
            // A gateway path that does not check drafts answers the token at the position asked for.
            Answer::Token(token) => DraftAnswer::Verified { accepted: 0, token },
            Answer::Verified { accepted, token } => DraftAnswer::Verified { accepted, token },
            Answer::Fallback(reason) => DraftAnswer::Fallback(reason),
        }
    }

    async fn finish(&mut self, stats: &mut DecodeStats) {
        if let Some(end) = self.session.end() {
            // Free the gateway's copy of this session at once instead of waiting for expiry.
            let _ = self.link.request(&end, Instant::now() + END_SESSION_WAIT).await;
        }
        let counters = self.session.counters();
        stats.full_syncs += counters.full_syncs;
        stats.context_missing += counters.context_missing;
        stats.syncs_ahead += counters.syncs_ahead;
        stats.escalation_bytes = std::mem::take(&mut self.escalation_bytes);
        let c = self.link.counters();
        stats.bytes_sent = c.sent() - self.sent_at_start;
        stats.bytes_received = c.received() - self.received_at_start;
        // The generation ends here, whenever this value is dropped.
        let generation = std::mem::replace(&mut self.generation, tracing::Span::none());
        if !generation.is_disabled() {
            let r = &stats.routing;
            generation.record("tokens", stats.tokens).record("escalated", r.escalated).record("cloud_tokens", r.cloud_tokens).record("fallbacks", r.fallbacks);
        }
    }
}

/// How one escalation over the link ended.
enum Answer {
    /// The LLM's token (a plain escalation, or a gateway path that does not check drafts).
    Token(u32),
    /// The LLM checked the draft.
    Verified { accepted: usize, token: u32 },
    /// The SLM's token stands.
    Fallback(FallbackReason),
}

impl LinkCloud<'_> {
    /// Send context ahead of the hard tokens that will need it (the prompt's pre-sync, or a
    /// resync the exchange asks for, see [`EdgeSession::sync_ahead`]). Nobody waits for the
    /// answer (an LLM token nobody needs), but the work must not be cancelled, and its service
    /// time is a whole prefill's cost: the link health learns it whenever it comes.
    fn send_ahead(&self, t: Transmit, report: PrefillReport, name: &'static str, tokens: usize) {
        let link = self.link.clone();
        let span = self.child(|g| tracing::info_span!(target: TRACE_TARGET, parent: g, "presync", otel.kind = "client", kind = name, tokens, bytes = Empty, answered = Empty));
        let trace = common::trace::outgoing(&span);
        tokio::spawn(async move {
            let (reply, sent) = link.request_escalation(&t.bytes, trace.as_ref(), t.deadline).await;
            span.record("bytes", sent);
            match reply {
                Ok(Frame::Token { llm_ms, .. }) => {
                    span.record("answered", true);
                    report.report(llm_ms)
                }
                _ => report.finish(),
            }
        });
    }

    /// One escalation (with `draft`, if not empty) carried over the link until the exchange resolves it.
    async fn exchange(&mut self, context: &[u32], draft: &[u32]) -> Answer {
        let started = Instant::now();
        let span = self.child(|g| {
            tracing::info_span!(
                target: TRACE_TARGET, parent: g, "escalation",
                otel.kind = "client", context_tokens = context.len(), draft_tokens = draft.len(), wait_ms = Empty, accepted = Empty, outcome = Empty, fallback_reason = Empty, bytes = Empty, frames = Empty,
            )
        });
        // Sent with the escalation only when sampled (absent: not a byte on the wire).
        let trace = common::trace::outgoing(&span);
        let (mut bytes, mut frames) = (0usize, 0usize);
        if self.presync {
            // A gateway holding nothing of a long context (a restarted or new replica) gets it
            // ahead, so that this hard token is a short delta it can admit.
            if let Some((t, report)) = self.session.sync_ahead(context, self.link.view(), Instant::now()) {
                self.send_ahead(t, report, "resync", context.len() - 1);
            }
        }
        let mut step = self.session.escalate_draft(context, draft, self.link.view(), Instant::now());
        loop {
            step = match step {
                Step::Send(t) => {
                    let (reply, sent) = self.link.request_escalation(&t.bytes, trace.as_ref(), t.deadline).await;
                    let sent = sent.max(t.bytes.len());
                    self.escalation_bytes.push(sent);
                    (bytes, frames) = (bytes + sent, frames + 1);
                    match reply {
                        Ok(reply) => match self.session.on_reply(reply, context, Instant::now()) {
                            // Each request has its own stream: a reply that is not for it is a
                            // gateway fault, and nothing else will come on that stream.
                            Step::Wait => self.session.on_transport_error(false, Instant::now()),
                            next => next,
                        },
                        Err(LinkError::Timeout) => self.session.on_timeout(Instant::now()),
                        Err(LinkError::Down) => self.session.on_transport_error(true, Instant::now()),
                        Err(e) => {
                            tracing::debug!("escalation failed: {e}");
                            self.session.on_transport_error(false, Instant::now())
                        }
                    }
                }
                Step::Wait => self.session.on_transport_error(false, Instant::now()),
                Step::Done(Outcome::Cloud { token, .. }) => {
                    record_outcome(&span, started, None, bytes, frames);
                    return Answer::Token(token);
                }
                Step::Done(Outcome::Verified { accepted, token, .. }) => {
                    record_outcome(&span, started, None, bytes, frames);
                    span.record("accepted", accepted);
                    return Answer::Verified { accepted, token };
                }
                Step::Done(Outcome::Fallback { reason, probe }) => {
                    record_outcome(&span, started, Some(reason), bytes, frames);
                    if let Some(timeout) = probe {
                        self.link.probe(timeout);
                    }
                    return Answer::Fallback(reason);
                }
            };
        }
    }
}

/// How an escalation ended, on its span: waited `started.elapsed()`, answered by the cloud
/// (`fallback` = `None`) or fell back, after sending `frames` frames of `bytes` in all.
fn record_outcome(span: &tracing::Span, started: Instant, fallback: Option<FallbackReason>, bytes: usize, frames: usize) {
    if span.is_disabled() {
        return;
    }
    span.record("wait_ms", started.elapsed().as_secs_f64() * 1e3).record("bytes", bytes).record("frames", frames);
    match fallback {
        None => span.record("outcome", "cloud"),
        Some(reason) => span.record("outcome", "fallback").record("fallback_reason", fallback_name(reason)),
    };
}

/// A fallback reason as the reports name it (`link_down`, ...).
fn fallback_name(reason: FallbackReason) -> &'static str {
    match reason {
        FallbackReason::Timeout => "timeout",
        FallbackReason::Busy => "busy",
        FallbackReason::LinkDown => "link_down",
        FallbackReason::Degraded => "degraded",
        FallbackReason::GatewayError => "gateway_error",
        FallbackReason::Transport => "transport",
    }
}
