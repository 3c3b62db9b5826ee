//! Both ends of the exchange driven together with simulated time: no sockets, no sleeps.
//!
//! [`Pair`] plays the network and the gateway: it decodes what the [`EdgeSession`] sends, runs
//! the gateway's own rules on it ([`gateway::classify`], [`SessionContext`], [`gateway::reply`])
//! and hands the reply back at a chosen time, or loses, delays, duplicates or reorders it.
//! The gateway's "LLM" is a fixed function of the context, enough to check that every
//! answer belongs to its own escalation.

use std::time::{Duration, Instant};

use super::gateway::{self, EscalationOutcome, HandshakePolicy, Request};
use super::*;
use crate::protocol::{decode_frame, encode_frame, ContextError, ContextSync, ErrorCode, Frame, Limits, RejectReason, SessionContext, ValidationLimits, WireSampling, DEFAULT_MAX_FRAME_BYTES, MAX_DEADLINE_MS, PROTOCOL_VERSION};

const MAX: usize = DEFAULT_MAX_FRAME_BYTES;
const FP: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// The gateway's token for a context: a fixed function, so answers can be checked.
fn llm(context: &[u32]) -> u32 {
    context.iter().fold(17u32, |h, &t| h.wrapping_mul(31).wrapping_add(t)) % 50_000
}

fn up(generation: u64) -> LinkView {
    LinkView::Up { generation, rtt: Duration::from_millis(20), max_frame_bytes: MAX }
}

fn policy() -> DeadlinePolicy {
    DeadlinePolicy { k: 2.0, min: Duration::from_millis(30), max: Duration::from_millis(1000), per_token: Duration::from_millis(5), ..DeadlinePolicy::default() }
}

/// One device session and the gateway's copy of it, with simulated time.
struct Pair {
    edge: EdgeSession,
    gateway: SessionContext,
    now: Instant,
    /// What the gateway answered, in order, for inspection.
    answered: Vec<Frame>,
}

impl Pair {
    fn new() -> Self {
        let health = LinkHealth::new(policy(), Duration::from_millis(10));
        Self { edge: EdgeSession::new(1, WireSampling::default(), health), gateway: SessionContext::new(), now: Instant::now(), answered: Vec::new() }
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
    }

    /// The gateway's answer to one transmitted request, by the gateway's own rules.
    fn serve(&mut self, t: &Transmit) -> Frame {
        let limits = ValidationLimits { max_context_tokens: 4096, vocab_size: Some(151_936), ..ValidationLimits::default() };
        let reply = match gateway::classify(decode_frame(&t.bytes, MAX), &limits) {
            Request::Escalate { session_id, seq, context, draft, .. } => match self.gateway.apply(seq, &context, 4096) {
                Ok(()) if draft.is_empty() => gateway::reply(session_id, seq, EscalationOutcome::Token { token_id: llm(self.gateway.tokens()), logprob: -0.5, llm_ms: 12 }),
                Ok(()) => {
                    // Greedy verification: accept while the LLM's token equals the draft's.
                    let base = self.gateway.tokens().to_vec();
                    let mut ctx = base.clone();
                    let accepted = draft.iter().take_while(|&&d| {
                        let ok = llm(&ctx) == d;
                        ctx.push(d);
                        ok
                    });
                    let accepted = accepted.count();
                    let mut upto = base.clone();
                    upto.extend(&draft[..accepted]);
                    assert!(self.gateway.append_accepted(seq, base.len(), &draft[..accepted], 4096));
                    gateway::reply(session_id, seq, EscalationOutcome::Verified { accepted: accepted as u32, token_id: llm(&upto), logprob: -0.5, llm_ms: 12 })
                }
                Err(e) => gateway::reply(session_id, seq, EscalationOutcome::Context(e)),
            },
            Request::EndSession { .. } => panic!("no reply to EndSession"),
            Request::BundleReport { .. } | Request::FetchBundle { .. } => panic!("a session sends no bundle frames"),
            Request::Answer(f) => f,
        };
        self.answered.push(reply.clone());
        reply
    }

    /// Escalate at `context` with every request served after `delay`; returns the outcome.
    fn escalate_served(&mut self, context: &[u32], delay: Duration) -> Outcome {
        let mut step = self.edge.escalate(context, up(1), self.now);
        loop {
            match step {
                Step::Send(t) => {
                    let reply = self.serve(&t);
                    self.advance(delay);
                    step = if self.now >= t.deadline { self.edge.on_timeout(self.now) } else { self.edge.on_reply(reply, context, self.now) };
                }
                Step::Done(o) => return o,
                Step::Wait => panic!("nothing to wait for"),
            }
        }
    }

    /// Serve `t` and hand the reply to the edge at once.
    fn answer(&mut self, t: &Transmit, context: &[u32]) -> Step {
        let reply = self.serve(t);
        self.edge.on_reply(reply, context, self.now)
    }

    fn sent(step: &Step) -> &Transmit {
        match step {
            Step::Send(t) => t,
            other => panic!("expected a send, got {other:?}"),
        }
    }
}

/// A draft of `n` tokens after `context` whose first `agree` tokens are the LLM's (the rest
/// differ from it), as the SLM would propose it.
fn draft_agreeing(context: &[u32], n: usize, agree: usize) -> Vec<u32> {
    let mut ctx = context.to_vec();
    let mut draft = Vec::new();
    for i in 0..n {
        let t = if i < agree { llm(&ctx) } else { llm(&ctx) + 1 };
        draft.push(t);
        ctx.push(t);
    }
    draft
}

fn verified(step: Step) -> (usize, u32) {
    match step {
        Step::Done(Outcome::Verified { accepted, token, .. }) => (accepted, token),
        other => panic!("expected a verified draft, got {other:?}"),
    }
}

fn decoded(t: &Transmit) -> Frame {
    decode_frame(&t.bytes, MAX).unwrap()
}

fn cloud(o: Outcome) -> u32 {
    match o {
        Outcome::Cloud { token, .. } => token,
        other => panic!("expected a cloud token, got {other:?}"),
    }
}

fn cloud_token(step: Step) -> u32 {
    match step {
        Step::Done(o) => cloud(o),
        other => panic!("expected an outcome, got {other:?}"),
    }
}

fn fallback(step: Step) -> (FallbackReason, Option<Duration>) {
    match step {
        Step::Done(Outcome::Fallback { reason, probe }) => (reason, probe),
        other => panic!("expected a fallback, got {other:?}"),
    }
}

#[test]
fn the_first_escalation_sends_full_and_later_ones_only_the_delta() {
    let mut p = Pair::new();
    let mut ctx: Vec<u32> = (100..140).collect();
    let step = p.edge.escalate(&ctx, up(1), p.now);
    let t = Pair::sent(&step).clone();
    assert!(t.full);
    assert!(matches!(decoded(&t), Frame::Escalate { seq: 0, context: ContextSync::Full { .. }, .. }));
    let token = cloud_token(p.answer(&t, &ctx));
    assert_eq!(token, llm(&ctx));
    ctx.extend([token, 7, 8]);
    let step = p.edge.escalate(&ctx, up(1), p.now);
    let t = Pair::sent(&step);
    assert!(!t.full);
    assert!(matches!(decoded(t), Frame::Escalate { seq: 1, context: ContextSync::Delta { base_len: 40, ref tokens }, .. } if tokens.len() == 3));
    assert!(t.bytes.len() < 64, "a later escalation is small: {} bytes", t.bytes.len());
    assert_eq!(p.edge.counters().full_syncs, 1);
}

#[test]
fn context_missing_is_answered_with_a_full_resend_within_the_same_deadline() {
    let mut p = Pair::new();
    let ctx: Vec<u32> = (1..30).collect();
    assert_eq!(cloud(p.escalate_served(&ctx, Duration::from_millis(5))), llm(&ctx));
    // The gateway restarts: it holds nothing, so the next delta is refused.
    p.gateway = SessionContext::new();
    let ctx2: Vec<u32> = (1..35).collect();
    let step = p.edge.escalate(&ctx2, up(1), p.now);
    let first = Pair::sent(&step).clone();
    assert!(!first.full);
    let missing = p.serve(&first);
    assert!(matches!(missing, Frame::ContextMissing { held_len: 0, .. }));
    p.advance(Duration::from_millis(5));
    let step = p.edge.on_reply(missing, &ctx2, p.now);
    let resend = Pair::sent(&step).clone();
    assert!(resend.full, "the resend carries the whole context");
    assert_eq!(resend.deadline, first.deadline, "within the same deadline");
    assert!(resend.seq > first.seq);
    let token = cloud_token(p.answer(&resend, &ctx2));
    assert_eq!(token, llm(&ctx2));
    assert_eq!(p.edge.counters().context_missing, 1);
}

#[test]
fn a_second_context_missing_for_one_token_falls_back_instead_of_looping() {
    let mut p = Pair::new();
    let ctx: Vec<u32> = (1..10).collect();
    let step = p.edge.escalate(&ctx, up(1), p.now);
    let t = Pair::sent(&step).clone();
    let missing = |seq| Frame::ContextMissing { session_id: 1, seq, held_len: 3 };
    let step = p.edge.on_reply(missing(t.seq), &ctx, p.now);
    let resend = Pair::sent(&step).clone();
    assert_eq!(fallback(p.edge.on_reply(missing(resend.seq), &ctx, p.now)).0, FallbackReason::GatewayError);
}

#[test]
fn busy_for_a_delta_falls_back_at_once_and_the_next_escalation_stays_a_delta() {
    let mut p = Pair::new();
    let ctx: Vec<u32> = (1..20).collect();
    assert_eq!(cloud(p.escalate_served(&ctx, Duration::ZERO)), llm(&ctx));
    let mut ctx2 = ctx.clone();
    ctx2.push(4);
    let step = p.edge.escalate(&ctx2, up(1), p.now);
    let t = Pair::sent(&step).clone();
    // A held session's context grows in place, then admission refused the work.
    let Request::Escalate { seq, context, .. } = gateway::classify(decode_frame(&t.bytes, MAX), &ValidationLimits::default()) else { panic!() };
    p.gateway.apply(seq, &context, 4096).unwrap();
    let busy = gateway::reply(1, seq, EscalationOutcome::Busy { retry_after_ms: 40 });
    assert_eq!(fallback(p.edge.on_reply(busy, &ctx2, p.now)), (FallbackReason::Busy, None), "the gateway answered: no liveness probe");
    let mut ctx3 = ctx2.clone();
    ctx3.push(5);
    assert_eq!(fallback(p.edge.escalate(&ctx3, up(1), p.now)).0, FallbackReason::Degraded, "the load hint is honoured: local-only for 40 ms");
    p.advance(Duration::from_millis(40));
    let step = p.edge.escalate(&ctx3, up(1), p.now);
    assert!(!Pair::sent(&step).full, "Busy acknowledges a delta");
    assert_eq!(cloud_token(p.answer(Pair::sent(&step), &ctx3)), llm(&ctx3));
}

#[test]
fn busy_for_a_whole_context_leaves_nothing_held_so_the_next_sync_is_whole_again() {
    let mut p = Pair::new();
    let ctx: Vec<u32> = (1..20).collect();
    let step = p.edge.escalate(&ctx, up(1), p.now);
    let t = Pair::sent(&step).clone();
    assert!(t.full);
    // A session the gateway did not hold is kept only once admitted: refused, nothing is kept.
    let busy = gateway::reply(1, t.seq, EscalationOutcome::Busy { retry_after_ms: 40 });
    assert_eq!(fallback(p.edge.on_reply(busy, &ctx, p.now)).0, FallbackReason::Busy);
    p.advance(Duration::from_millis(40));
    let mut ctx2 = ctx.clone();
    ctx2.push(5);
    let step = p.edge.escalate(&ctx2, up(1), p.now);
    assert!(Pair::sent(&step).full, "no delta on a context the gateway never kept");
    assert_eq!(cloud_token(p.answer(Pair::sent(&step), &ctx2)), llm(&ctx2));
    assert_eq!(p.edge.counters().context_missing, 0, "no round trip wasted on ContextMissing");
}

#[test]
fn after_a_reconnect_a_long_context_goes_ahead_and_the_hard_token_is_a_one_token_delta_behind_it() {
    let mut p = Pair::new();
    // 400 tokens at 5 ms each with the margin: far beyond the 1 s maximum deadline.
    let ctx: Vec<u32> = (1..401).collect();
    assert_eq!(cloud(p.escalate_served(&ctx, Duration::ZERO)), llm(&ctx));
    // The gateway restarted: the link's next connection finds it holding nothing.
    p.gateway = SessionContext::new();
    let mut ctx2 = ctx.clone();
    ctx2.push(7);
    let (ahead, report) = p.edge.sync_ahead(&ctx2, up(2), p.now).expect("a long context the new gateway lacks goes ahead");
    assert!(ahead.full);
    assert!(matches!(decoded(&ahead), Frame::Escalate { deadline_ms: MAX_DEADLINE_MS, ref context, .. } if context.tokens().len() == 400), "all but the hard token's position, with the longest deadline");
    let ahead_reply = p.serve(&ahead);
    let step = p.edge.escalate(&ctx2, up(2), p.now);
    let t = Pair::sent(&step).clone();
    assert!(!t.full, "the hard token itself is a delta");
    assert!(matches!(decoded(&t), Frame::Escalate { context: ContextSync::Delta { base_len: 400, ref tokens }, .. } if tokens.len() == 1));
    assert_eq!(t.deadline - p.now, policy().max, "it waits behind the prefill ahead of it, up to the maximum");
    assert_eq!(p.edge.on_reply(ahead_reply, &ctx2, p.now), Step::Wait, "the resync's answer is nobody's");
    report.report(900);
    assert_eq!(cloud_token(p.answer(&t, &ctx2)), llm(&ctx2));
    assert_eq!((p.edge.counters().context_missing, p.edge.counters().syncs_ahead), (0, 1));
}

#[test]
fn nothing_goes_ahead_for_a_held_context_a_short_one_or_a_device_holding_back() {
    let mut p = Pair::new();
    let long: Vec<u32> = (1..401).collect();
    assert_eq!(cloud(p.escalate_served(&long, Duration::ZERO)), llm(&long));
    let mut grown = long.clone();
    grown.push(3);
    assert!(p.edge.sync_ahead(&grown, up(1), p.now).is_none(), "the gateway holds it: a delta follows");
    assert!(p.edge.sync_ahead(&grown, LinkView::Down, p.now).is_none(), "no link");
    // A short context fits a deadline as a `Full`: nothing to send ahead of it.
    let mut q = Pair::new();
    assert!(q.edge.sync_ahead(&[1, 2, 3, 4, 5, 6], up(1), q.now).is_none());
    // Nor with a fixed deadline (minimum = maximum): the deadline is the maximum, but a short
    // context's prefill is expected well within it.
    let fixed = DeadlinePolicy { min: policy().max, ..policy() };
    let mut f = Pair::new();
    f.edge = EdgeSession::new(1, WireSampling::default(), LinkHealth::new(fixed, Duration::from_millis(10)));
    assert!(f.edge.sync_ahead(&[1, 2, 3, 4, 5, 6], up(2), f.now).is_none(), "a fixed deadline sends no short resync ahead");
    // A gateway that asked for a pause gets nothing ahead of time either.
    let mut r = Pair::new();
    let step = r.edge.escalate(&long, up(1), r.now);
    let t = Pair::sent(&step).clone();
    let busy = gateway::reply(1, t.seq, EscalationOutcome::Busy { retry_after_ms: 500 });
    assert_eq!(fallback(r.edge.on_reply(busy, &long, r.now)).0, FallbackReason::Busy);
    assert!(r.edge.sync_ahead(&grown, up(1), r.now).is_none(), "within the Busy's retry-after");
    r.advance(Duration::from_millis(500));
    assert!(r.edge.sync_ahead(&grown, up(1), r.now).is_some(), "after it");
}

#[test]
fn timeouts_back_off_then_go_local_only_and_a_probe_is_asked_for() {
    let mut p = Pair::new();
    let ctx: Vec<u32> = (1..5).collect();
    let mut deadlines = Vec::new();
    let mut probe = None;
    for _ in 0..policy().failures_to_degrade {
        let step = p.edge.escalate(&ctx, up(1), p.now);
        let t = Pair::sent(&step).clone();
        deadlines.push(t.deadline - p.now);
        p.now = t.deadline;
        let (reason, pr) = fallback(p.edge.on_timeout(p.now));
        assert_eq!(reason, FallbackReason::Timeout);
        assert!(pr.is_some_and(|t| t >= Duration::from_secs(1)), "every silent fallback asks for a probe of at least 1 s");
        probe = pr;
    }
    // 2 x 20 ms RTT + service (three times the announced 10 ms until an answer measures it,
    // then doubled by each timeout: 60, 120) + 1.5 x 5 ms per token sent (the first sends the
    // 4-token context in full, the others nothing).
    assert_eq!(deadlines, [Duration::from_millis(100), Duration::from_millis(100), Duration::from_millis(160)], "Karn: the service estimate doubles");
    assert!(probe.is_some(), "degrading asks the shell to check the gateway");
    // Local-only: hard tokens fall back without sending anything.
    assert_eq!(fallback(p.edge.escalate(&ctx, up(1), p.now)).0, FallbackReason::Degraded);
    // After the back-off, it tries again.
    p.advance(policy().backoff);
    assert!(matches!(p.edge.escalate(&ctx, up(1), p.now), Step::Send(_)));
}

#[test]
fn an_escalation_expired_in_the_gateways_queue_lengthens_the_next_deadline_as_a_timeout_does() {
    let mut p = Pair::new();
    let ctx: Vec<u32> = (1..5).collect();
    let step = p.edge.escalate(&ctx, up(1), p.now);
    let first = Pair::sent(&step).clone();
    let first_budget = first.deadline - p.now;
    p.serve(&first);
    p.now = first.deadline;
    let expired = gateway::reply(1, first.seq, EscalationOutcome::Expired);
    let (reason, probe) = fallback(p.edge.on_reply(expired, &ctx, p.now));
    assert_eq!(reason, FallbackReason::GatewayError);
    assert_eq!(probe, None, "the gateway answered: nothing to probe");
    // 2 x 20 ms RTT + the service estimate + 1.5 x 5 ms per token sent: the first sent its
    // 4 tokens in full with 30 ms of service (three times the announced 10 ms); the next sends
    // nothing new, and its service estimate doubled to 60 ms (without it: 40 + 30 = 70 ms).
    let step = p.edge.escalate(&ctx, up(1), p.now);
    let next = Pair::sent(&step).clone();
    assert_eq!(first_budget, Duration::from_millis(100));
    assert_eq!(next.deadline - p.now, Duration::from_millis(100), "the queue's verdict is learned");
}

#[test]
fn a_new_connection_resyncs_with_full_and_ends_local_only() {
    let mut p = Pair::new();
    let ctx: Vec<u32> = (1..12).collect();
    assert_eq!(cloud(p.escalate_served(&ctx, Duration::ZERO)), llm(&ctx));
    for _ in 0..policy().failures_to_degrade {
        let step = p.edge.escalate(&ctx, up(1), p.now);
        p.now = Pair::sent(&step).deadline;
        p.edge.on_timeout(p.now);
    }
    assert_eq!(fallback(p.edge.escalate(&ctx, up(1), p.now)).0, FallbackReason::Degraded);
    // The link reconnected (to a restarted gateway holding nothing).
    p.gateway = SessionContext::new();
    let step = p.edge.escalate(&ctx, up(2), p.now);
    let t = Pair::sent(&step).clone();
    assert!(t.full, "a new connection resends the whole context");
    assert_eq!(cloud_token(p.answer(&t, &ctx)), llm(&ctx));
}

#[test]
fn a_down_link_falls_back_at_once_without_counting_as_a_failure() {
    let mut p = Pair::new();
    let ctx = [1, 2, 3];
    for _ in 0..10 {
        assert_eq!(fallback(p.edge.escalate(&ctx, LinkView::Down, p.now)), (FallbackReason::LinkDown, None));
    }
    assert!(matches!(p.edge.escalate(&ctx, up(1), p.now), Step::Send(_)), "not local-only");
    assert_eq!(fallback(p.edge.on_transport_error(false, p.now)).0, FallbackReason::Transport);
}

#[test]
fn a_late_reply_after_a_fallback_is_dropped_and_never_applied() {
    let mut p = Pair::new();
    let ctx: Vec<u32> = (1..8).collect();
    let step = p.edge.escalate(&ctx, up(1), p.now);
    let t = Pair::sent(&step).clone();
    let late = p.serve(&t);
    p.now = t.deadline;
    assert_eq!(fallback(p.edge.on_timeout(p.now)).0, FallbackReason::Timeout);
    // The reply arrives after the fallback, with nothing waiting...
    assert_eq!(p.edge.on_reply(late.clone(), &ctx, p.now), Step::Wait);
    // ...and while the next escalation waits: still not taken for that one.
    let mut ctx2 = ctx.clone();
    ctx2.push(9);
    let step = p.edge.escalate(&ctx2, up(1), p.now);
    let t2 = Pair::sent(&step).clone();
    assert_eq!(p.edge.on_reply(late, &ctx2, p.now), Step::Wait);
    assert_eq!(cloud_token(p.answer(&t2, &ctx2)), llm(&ctx2));
    assert_eq!(p.edge.counters().stale_replies, 2);
}

#[test]
fn replayed_and_out_of_order_replies_are_dropped() {
    let mut p = Pair::new();
    let ctx: Vec<u32> = (1..8).collect();
    let step = p.edge.escalate(&ctx, up(1), p.now);
    let t = Pair::sent(&step).clone();
    let reply = p.serve(&t);
    // A reply for a seq that was never sent, and one for another session.
    let future = Frame::Token { session_id: 1, seq: t.seq + 5, token_id: 1, logprob: 0.0, llm_ms: 1 };
    let other = Frame::Token { session_id: 2, seq: t.seq, token_id: 1, logprob: 0.0, llm_ms: 1 };
    assert_eq!(p.edge.on_reply(future, &ctx, p.now), Step::Wait);
    assert_eq!(p.edge.on_reply(other, &ctx, p.now), Step::Wait);
    assert!(matches!(p.edge.on_reply(reply.clone(), &ctx, p.now), Step::Done(Outcome::Cloud { .. })));
    // The same reply again (a replay): dropped.
    assert_eq!(p.edge.on_reply(reply, &ctx, p.now), Step::Wait);
    assert_eq!(p.edge.counters().stale_replies, 3);
}

#[test]
fn the_gateway_refuses_replayed_and_stale_escalations() {
    let mut p = Pair::new();
    let ctx: Vec<u32> = (1..8).collect();
    let step = p.edge.escalate(&ctx, up(1), p.now);
    let t = Pair::sent(&step).clone();
    assert!(matches!(p.serve(&t), Frame::Token { .. }));
    let replayed = p.serve(&t);
    assert!(matches!(replayed, Frame::Error { code: ErrorCode::Replayed, .. }), "{replayed:?}");
    let mut ctx2 = ctx.clone();
    ctx2.push(3);
    p.edge.on_timeout(p.now);
    let newer = Pair::sent(&p.edge.escalate(&ctx2, up(1), p.now)).clone();
    assert!(matches!(p.serve(&newer), Frame::Token { .. }));
    // The older request arrives after the newer one.
    assert!(matches!(p.serve(&t), Frame::Error { code: ErrorCode::OutOfOrder, .. }));
}

#[test]
fn out_of_order_from_a_session_id_another_process_used_moves_the_session_to_a_fresh_id_within_the_deadline() {
    let mut p = Pair::new();
    let ctx: Vec<u32> = (1..9).collect();
    // The gateway still holds session 1 from this device's previous process, at seq 5.
    let mut stale = SessionContext::new();
    stale.apply(5, &ContextSync::Full { tokens: vec![9, 9].into() }, 4096).unwrap();
    let step = p.edge.escalate(&ctx, up(1), p.now);
    let t = Pair::sent(&step).clone();
    let Request::Escalate { session_id, seq, context, .. } = gateway::classify(decode_frame(&t.bytes, MAX), &ValidationLimits::default()) else { panic!() };
    assert_eq!(session_id, 1);
    let refused = gateway::reply(session_id, seq, EscalationOutcome::Context(stale.apply(seq, &context, 4096).unwrap_err()));
    assert!(matches!(refused, Frame::Error { code: ErrorCode::OutOfOrder, .. }), "{refused:?}");
    let step = p.edge.on_reply(refused, &ctx, p.now);
    let resent = Pair::sent(&step).clone();
    assert!(resent.full, "the new id starts with a Full sync");
    assert_eq!(resent.deadline, t.deadline, "within the same deadline");
    let Frame::Escalate { session_id: new_id, .. } = decoded(&resent) else { panic!() };
    assert_ne!(new_id, 1);
    assert_eq!(p.edge.session_id(), new_id);
    assert_eq!(cloud_token(p.answer(&resent, &ctx)), llm(&ctx), "served under the new id");
    assert_eq!(p.edge.counters().renewed_session_ids, 1);
}

#[test]
fn a_second_out_of_order_for_one_token_falls_back_instead_of_looping() {
    let mut p = Pair::new();
    let ctx: Vec<u32> = (1..9).collect();
    let step = p.edge.escalate(&ctx, up(1), p.now);
    let t = Pair::sent(&step).clone();
    let refusal = |sid: u64, seq: u32| Frame::Error { session_id: Some(sid), seq: Some(seq), code: ErrorCode::OutOfOrder, message: "stale".into() };
    let Frame::Escalate { seq, .. } = decoded(&t) else { panic!() };
    let step = p.edge.on_reply(refusal(1, seq), &ctx, p.now);
    let resent = Pair::sent(&step).clone();
    let Frame::Escalate { session_id, seq, .. } = decoded(&resent) else { panic!() };
    assert_eq!(fallback(p.edge.on_reply(refusal(session_id, seq), &ctx, p.now)).0, FallbackReason::GatewayError);
}

#[test]
fn a_presync_is_resolved_out_of_band_and_lengthens_the_first_deadline() {
    let mut p = Pair::new();
    let prompt: Vec<u32> = (1..200).collect();
    let (t, report) = p.edge.presync(&prompt, up(1), p.now).expect("link up");
    assert!(t.full);
    assert!(matches!(decoded(&t), Frame::Escalate { deadline_ms: MAX_DEADLINE_MS, .. }));
    let presync_reply = p.serve(&t);
    // A hard token right away waits behind the prompt's prefill (199 tokens x 5 ms x 1.5).
    let mut ctx = prompt.clone();
    ctx.push(5);
    let step = p.edge.escalate(&ctx, up(1), p.now);
    let t2 = Pair::sent(&step).clone();
    assert!(!t2.full, "the pre-sync already carried the prompt");
    assert_eq!(t2.deadline - p.now, policy().max, "{:?}", t2.deadline - p.now);
    // The pre-sync's reply is not this escalation's.
    assert_eq!(p.edge.on_reply(presync_reply, &ctx, p.now), Step::Wait);
    report.report(800);
    assert!(matches!(p.answer(&t2, &ctx), Step::Done(Outcome::Cloud { .. })));
    // Once it answered, nothing is ahead: a short delta gets a short deadline.
    ctx.push(6);
    let t3 = Pair::sent(&p.edge.escalate(&ctx, up(1), p.now)).clone();
    assert!(t3.deadline - p.now < Duration::from_millis(200), "{:?}", t3.deadline - p.now);
}

#[test]
fn a_hard_token_behind_an_overdue_presync_waits_up_to_the_maximum_not_the_stale_estimate() {
    // 20 tokens x 5 ms x 1.5: the pre-sync is expected within 150 ms.
    let prompt: Vec<u32> = (1..21).collect();
    let mut ctx = prompt.clone();
    ctx.push(5);
    let deadline_after = |elapsed: Duration| {
        let mut p = Pair::new();
        let _unanswered = p.edge.presync(&prompt, up(1), p.now).expect("link up");
        p.advance(elapsed);
        let t = Pair::sent(&p.edge.escalate(&ctx, up(1), p.now)).clone();
        t.deadline - p.now
    };
    let in_time = deadline_after(Duration::from_millis(100));
    assert!(in_time < Duration::from_millis(200), "what is left of the expected prefill: {in_time:?}");
    assert_eq!(deadline_after(Duration::from_millis(200)), policy().max, "overdue: the answer comes only after that prefill");
}

#[test]
fn a_frame_over_the_gateways_limit_is_not_sent() {
    let mut p = Pair::new();
    let ctx: Vec<u32> = (100_000..100_100).collect();
    let tiny = LinkView::Up { generation: 1, rtt: Duration::ZERO, max_frame_bytes: 64 };
    assert_eq!(fallback(p.edge.escalate(&ctx, tiny, p.now)).0, FallbackReason::Transport);
    assert!(p.edge.escalate(&ctx, up(1), p.now) != Step::Wait);
}

#[test]
fn ending_a_session_frees_the_gateways_copy_only_if_it_may_hold_one() {
    let mut p = Pair::new();
    assert_eq!(p.edge.end(), None);
    let ctx = [1, 2, 3];
    let _ = p.edge.escalate(&ctx, up(1), p.now);
    assert_eq!(p.edge.end(), Some(Frame::EndSession { session_id: 1 }));
}

/// Many escalations over a network that loses requests, delays replies past deadlines and
/// restarts the gateway: every answer the device takes is the gateway's token for exactly its
/// context, and the gateway's copy is always a prefix of the device's.
#[test]
fn over_a_lossy_network_every_accepted_answer_is_for_its_own_context() {
    let mut p = Pair::new();
    let mut ctx: Vec<u32> = (1..16).collect();
    let (mut cloud_tokens, mut fallbacks) = (0, 0);
    for i in 0u32..300 {
        ctx.push(1000 + i);
        if i % 97 == 50 {
            p.gateway = SessionContext::new(); // restart
        }
        let mut step = p.edge.escalate(&ctx, up(1 + u64::from(i / 120)), p.now);
        let outcome = loop {
            match step {
                Step::Send(t) => {
                    let lost = i % 7 == 3;
                    let late = i % 11 == 5;
                    if lost {
                        p.now = t.deadline;
                        step = p.edge.on_timeout(p.now);
                        continue;
                    }
                    let reply = p.serve(&t);
                    assert!(ctx.starts_with(p.gateway.tokens()), "the gateway's copy is a prefix of the device's");
                    if late {
                        p.now = t.deadline;
                        step = p.edge.on_timeout(p.now);
                        assert_eq!(p.edge.on_reply(reply, &ctx, p.now), Step::Wait);
                    } else {
                        p.advance(Duration::from_millis(3));
                        step = p.edge.on_reply(reply, &ctx, p.now);
                    }
                }
                Step::Done(o) => break o,
                Step::Wait => panic!("nothing waits"),
            }
        };
        match outcome {
            Outcome::Cloud { token, .. } => {
                assert_eq!(token, llm(&ctx));
                cloud_tokens += 1;
                ctx.push(token);
            }
            Outcome::Fallback { .. } => {
                fallbacks += 1;
                p.advance(Duration::from_millis(600)); // let any local-only period pass
            }
            Outcome::Verified { .. } => panic!("no draft was sent"),
        }
    }
    assert!(cloud_tokens > 200 && fallbacks > 30, "cloud {cloud_tokens}, fallbacks {fallbacks}");
}

fn handshake_policy() -> HandshakePolicy {
    HandshakePolicy { auth_token: Some("sesame".into()), device_tokens: None, tokenizer_fingerprint: FP.into(), gateway_id: "gw".into(), llm_id: "llm".into() }
}

fn hello(version: u16, auth: &str, fp: &str, device: &str) -> Frame {
    Frame::Hello { protocol_version: version, device_id: device.into(), auth: auth.into(), tokenizer_fingerprint: fp.into(), slm_id: "slm".into() }
}

#[test]
fn the_handshake_welcomes_a_good_device_with_the_limits() {
    let limits = Limits { max_frame_bytes: 1000, max_context_tokens: 100, max_sessions: 4, service_time_ms: 9 };
    let ok = gateway::answer_hello(&handshake_policy(), limits, Ok(hello(PROTOCOL_VERSION, "sesame", FP, "dev-1"))).unwrap();
    assert_eq!(ok.device_id, "dev-1");
    assert_eq!(ok.reply, Frame::Welcome { gateway_id: "gw".into(), llm_id: "llm".into(), limits });
    let open = HandshakePolicy { auth_token: None, ..handshake_policy() };
    assert!(gateway::answer_hello(&open, limits, Ok(hello(PROTOCOL_VERSION, "anything", FP, "dev"))).is_ok());
}

#[test]
fn a_per_device_token_admits_only_the_device_it_was_issued_to() {
    let limits = Limits { max_frame_bytes: 1000, max_context_tokens: 100, max_sessions: 4, service_time_ms: 0 };
    let key = crate::device_token::DeviceTokenKey::from_hex(&"5a".repeat(32)).unwrap();
    let token = key.issue("dev-1");
    let policy = HandshakePolicy { auth_token: None, device_tokens: Some(std::sync::Arc::new(key)), ..handshake_policy() };
    assert_eq!(gateway::answer_hello(&policy, limits, Ok(hello(PROTOCOL_VERSION, &token, FP, "dev-1"))).unwrap().device_id, "dev-1");
    // The same token claiming another id, no token, or another device's token: refused.
    for (auth, device) in [(token.as_str(), "dev-2"), ("", "dev-1"), ("sesame", "dev-1")] {
        assert_eq!(gateway::answer_hello(&policy, limits, Ok(hello(PROTOCOL_VERSION, auth, FP, device))).unwrap_err().reason, RejectReason::Auth, "{auth:?} as {device}");
    }
}

#[test]
fn the_handshake_refuses_each_bad_hello_with_a_reason_the_device_can_act_on() {
    let l = Limits { max_frame_bytes: 1000, max_context_tokens: 100, max_sessions: 4, service_time_ms: 0 };
    let refuse = |f: Result<Frame, crate::protocol::CodecError>| gateway::answer_hello(&handshake_policy(), l, f).unwrap_err().reason;
    assert_eq!(refuse(Ok(hello(99, "sesame", FP, "d"))), RejectReason::Version { supported: PROTOCOL_VERSION });
    assert_eq!(refuse(Ok(hello(PROTOCOL_VERSION, "guess", FP, "d"))), RejectReason::Auth);
    assert_eq!(refuse(Ok(hello(PROTOCOL_VERSION, "sesame", &"ab".repeat(32), "d"))), RejectReason::TokenizerMismatch { expected: FP.into() });
    assert!(matches!(refuse(Ok(hello(PROTOCOL_VERSION, "sesame", FP, ""))), RejectReason::Other(_)));
    assert!(matches!(refuse(Ok(hello(PROTOCOL_VERSION, "sesame", FP, &"x".repeat(300)))), RejectReason::Other(_)));
    // Control characters in an id would forge log lines: refused, and not echoed back.
    let forged = refuse(Ok(hello(PROTOCOL_VERSION, "sesame", FP, "a\nINFO device b welcomed")));
    assert!(matches!(&forged, RejectReason::Other(m) if m.contains("control character") && !m.contains('\n')), "{forged:?}");
    assert!(matches!(refuse(Ok(Frame::Ping { nonce: 1 })), RejectReason::Other(m) if m.contains("Hello")));
    assert!(matches!(refuse(decode_frame(&[1, 0, 0, 0, 200], MAX)), RejectReason::Other(m) if m.contains("malformed")));
    let r = gateway::overloaded();
    assert_eq!(r.reply(), Frame::Reject { reason: RejectReason::Overloaded });
}

#[test]
fn each_bad_request_gets_its_own_error_code() {
    let limits = ValidationLimits { max_context_tokens: 10, vocab_size: Some(100), ..ValidationLimits::default() };
    let code = |r: Request| match r {
        Request::Answer(Frame::Error { code, .. }) => code,
        other => panic!("expected an error answer, got {other:?}"),
    };
    assert_eq!(code(gateway::classify(decode_frame(&[1, 0, 0, 0, 200], MAX), &limits)), ErrorCode::Malformed);
    assert_eq!(code(gateway::classify(decode_frame(&5000u32.to_le_bytes(), 100), &limits)), ErrorCode::Oversize);
    let esc = |tokens: Vec<u32>, deadline_ms| Frame::Escalate { session_id: 4, seq: 2, context: ContextSync::Full { tokens: tokens.into() }, sampling: WireSampling::default(), deadline_ms };
    match gateway::classify(Ok(esc(vec![1, 200], 10)), &limits) {
        Request::Answer(Frame::Error { code: ErrorCode::InvalidToken, session_id: Some(4), seq: Some(2), .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(code(gateway::classify(Ok(esc(vec![1; 11], 10)), &limits)), ErrorCode::ContextTooLong);
    assert_eq!(code(gateway::classify(Ok(Frame::Pong { nonce: 1 }), &limits)), ErrorCode::Malformed);
    assert_eq!(code(gateway::classify(Ok(hello(1, "", FP, "d")), &limits)), ErrorCode::Malformed);
    assert_eq!(gateway::classify(Ok(Frame::Ping { nonce: 7 }), &limits), Request::Answer(Frame::Pong { nonce: 7 }));
    assert_eq!(gateway::classify(Ok(Frame::EndSession { session_id: 3 }), &limits), Request::EndSession { session_id: 3 });
    match gateway::classify(Ok(esc(vec![1, 2], u32::MAX)), &limits) {
        Request::Escalate { deadline, .. } => assert_eq!(deadline, Duration::from_millis(u64::from(MAX_DEADLINE_MS)), "capped"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_outcome_maps_to_the_frame_the_device_expects() {
    use EscalationOutcome as O;
    let code = |o| match gateway::reply(9, 3, o) {
        Frame::Error { code, session_id: Some(9), seq: Some(3), .. } => code,
        other => panic!("{other:?}"),
    };
    assert_eq!(gateway::reply(9, 3, O::Token { token_id: 5, logprob: -1.0, llm_ms: 4 }), Frame::Token { session_id: 9, seq: 3, token_id: 5, logprob: -1.0, llm_ms: 4 });
    assert_eq!(gateway::reply(9, 3, O::Busy { retry_after_ms: 7 }), Frame::Busy { session_id: 9, seq: 3, retry_after_ms: 7 });
    assert_eq!(gateway::reply(9, 3, O::Context(ContextError::Missing { held_len: 2 })), Frame::ContextMissing { session_id: 9, seq: 3, held_len: 2 });
    assert_eq!(code(O::Context(ContextError::Replayed { seq: 3 })), ErrorCode::Replayed);
    assert_eq!(code(O::TooManySessions { limit: 2 }), ErrorCode::TooManySessions);
    assert_eq!(code(O::Expired), ErrorCode::DeadlineExpired);
    assert_eq!(code(O::SessionEnded), ErrorCode::UnknownSession);
    assert_eq!(code(O::ContextTooLong("x".into())), ErrorCode::ContextTooLong);
    assert_eq!(code(O::InvalidToken("x".into())), ErrorCode::InvalidToken);
    assert_eq!(code(O::BackendFailed("x".into())), ErrorCode::BackendFailed);
    assert_eq!(code(O::Stopped), ErrorCode::Internal);
    assert!(matches!(gateway::oversize(10, 5), Frame::Error { code: ErrorCode::Oversize, .. }));
    // Every answer encodes within the default limit.
    assert!(encode_frame(&gateway::reply(9, 3, O::BackendFailed("m".repeat(100))), MAX).is_ok());
}

#[test]
fn the_device_reads_each_handshake_answer_into_what_to_do() {
    use super::edge::{hello, read_handshake, HandshakeAnswer};
    let limits = Limits { max_frame_bytes: 1, max_context_tokens: 2, max_sessions: 3, service_time_ms: 4 };
    let welcome = gateway::answer_hello(&HandshakePolicy { auth_token: None, ..handshake_policy() }, limits, Ok(hello(PROTOCOL_VERSION, "d", "", FP, "slm"))).unwrap().reply;
    assert_eq!(read_handshake(welcome, FP), HandshakeAnswer::Welcome { gateway_id: "gw".into(), llm_id: "llm".into(), limits });
    let refused = |reason| match read_handshake(Frame::Reject { reason }, "mine") {
        HandshakeAnswer::Refused(why) => why,
        other => panic!("{other:?}"),
    };
    assert!(refused(RejectReason::Auth).contains("--auth-token"));
    assert!(refused(RejectReason::TokenizerMismatch { expected: "theirs".into() }).contains("theirs"));
    assert!(refused(RejectReason::Version { supported: 7 }).contains('7'));
    assert!(refused(RejectReason::Overloaded).contains("connection limit"));
    assert!(matches!(read_handshake(Frame::Pong { nonce: 1 }, FP), HandshakeAnswer::Unexpected(_)));
}

#[test]
fn the_gateway_serves_v1_and_v2_devices_and_sends_go_away_only_to_v2() {
    let limits = Limits { max_frame_bytes: 1000, max_context_tokens: 100, max_sessions: 4, service_time_ms: 9 };
    let v1 = gateway::answer_hello(&handshake_policy(), limits, Ok(hello(1, "sesame", FP, "old"))).unwrap();
    let v2 = gateway::answer_hello(&handshake_policy(), limits, Ok(hello(2, "sesame", FP, "new"))).unwrap();
    assert_eq!((v1.protocol_version, v2.protocol_version), (1, 2));
    assert_eq!(gateway::go_away(v1.protocol_version, Some("b:1")), None, "a v1 device cannot decode GoAway");
    assert_eq!(gateway::go_away(v2.protocol_version, Some("b:1")), Some(Frame::GoAway { redirect: Some("b:1".into()) }));
    assert_eq!(gateway::go_away(v2.protocol_version, None), Some(Frame::GoAway { redirect: None }));
    let refuse = |v| gateway::answer_hello(&handshake_policy(), limits, Ok(hello(v, "sesame", FP, "d"))).unwrap_err().reason;
    assert_eq!(refuse(0), RejectReason::Version { supported: PROTOCOL_VERSION });
    assert_eq!(refuse(PROTOCOL_VERSION + 1), RejectReason::Version { supported: PROTOCOL_VERSION });
}

#[test]
fn a_device_says_hello_again_in_an_older_gateways_version() {
    use super::edge::{read_handshake, HandshakeAnswer};
    // What a v1 gateway answers a v2 Hello during a rolling upgrade.
    let old_gateway = Frame::Reject { reason: RejectReason::Version { supported: 1 } };
    assert_eq!(read_handshake(old_gateway, FP), HandshakeAnswer::Downgrade { version: 1 });
    let unknown = Frame::Reject { reason: RejectReason::Version { supported: 0 } };
    assert!(matches!(read_handshake(unknown, FP), HandshakeAnswer::Refused(_)));
}

#[test]
fn a_pushed_go_away_is_read_as_reconnect_now_and_anything_else_is_ignored() {
    use super::edge::{read_push, Push};
    let go = |redirect: Option<&str>| read_push(Ok(Frame::GoAway { redirect: redirect.map(Into::into) }));
    assert_eq!(go(None), Push::GoAway { redirect: None });
    assert_eq!(go(Some("gw-b:4433")), Push::GoAway { redirect: Some("gw-b:4433".into()) });
    assert_eq!(go(Some("bad redirect")), Push::GoAway { redirect: None }, "still go, to the device's own list");
    assert!(matches!(read_push(Ok(Frame::Ping { nonce: 1 })), Push::Ignored(_)));
    assert!(matches!(read_push(decode_frame(&[1, 0, 0, 0, 200], MAX)), Push::Ignored(_)));
    // A GoAway is a few bytes on the wire.
    assert!(encode_frame(&Frame::GoAway { redirect: None }, MAX).unwrap().len() <= 8);
}

/// A gateway drains while an escalation is in flight: its answer still arrives on the old
/// connection and is applied; the link moves (the session sees the next generation at once)
/// and the next escalation resyncs the new replica with `Full`. No fallback, every token is
/// the gateway's answer for exactly its context, in order.
#[test]
fn a_go_away_mid_generation_moves_the_session_to_another_replica_without_a_fallback() {
    let mut p = Pair::new();
    let mut ctx: Vec<u32> = (1..40).collect();
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let t = cloud(p.escalate_served(&ctx, Duration::from_millis(2)));
        tokens.push(t);
        ctx.extend([t, 5]);
    }
    // Escalation in flight on replica A (generation 1)...
    let step = p.edge.escalate(&ctx, up(1), p.now);
    let in_flight = Pair::sent(&step).clone();
    assert!(!in_flight.full);
    let answer = p.serve(&in_flight);
    // ...when A sends GoAway: the link shows the next generation while it reconnects, and A's
    // answer arrives after that.
    p.advance(Duration::from_millis(3));
    let t = cloud_token(p.edge.on_reply(answer, &ctx, p.now));
    assert_eq!(t, llm(&ctx));
    tokens.push(t);
    ctx.extend([t, 6]);
    // Replica B holds nothing for this session.
    p.gateway = SessionContext::new();
    let step = p.edge.escalate(&ctx, up(2), p.now);
    let resync = Pair::sent(&step).clone();
    assert!(resync.full, "the new replica gets the whole context");
    assert!(resync.seq > in_flight.seq, "seqs keep increasing across replicas");
    let t = cloud_token(p.answer(&resync, &ctx));
    assert_eq!(t, llm(&ctx));
    ctx.push(t);
    let step = p.edge.escalate(&ctx, up(2), p.now);
    assert!(!Pair::sent(&step).full, "then deltas again");
    assert_eq!(p.edge.counters().context_missing, 0, "no wasted round trip");
    assert_eq!(p.edge.counters().stale_replies, 0);
}

mod drafts {
    use super::*;

    /// Escalate `draft` at `ctx`, answered at once; the committed tokens after `ctx`.
    fn round(p: &mut Pair, ctx: &[u32], draft: &[u32]) -> (usize, u32, Transmit) {
        let step = p.edge.escalate_draft(ctx, draft, up(1), p.now);
        let t = Pair::sent(&step).clone();
        let (accepted, token) = verified(p.answer(&t, ctx));
        (accepted, token, t)
    }

    #[test]
    fn a_fully_accepted_draft_yields_every_token_and_the_bonus_and_the_next_delta_skips_them() {
        let mut p = Pair::new();
        let mut ctx: Vec<u32> = (100..140).collect();
        let draft = draft_agreeing(&ctx, 4, 4);
        let (accepted, token, t) = round(&mut p, &ctx, &draft);
        assert!(matches!(decoded(&t), Frame::EscalateDraft { ref draft, .. } if draft.len() == 4));
        assert_eq!(accepted, 4);
        ctx.extend(&draft);
        assert_eq!(token, llm(&ctx), "the bonus token after the whole draft");
        assert_eq!(p.gateway.tokens(), ctx.as_slice(), "the gateway appended the accepted draft");
        ctx.push(token);
        let step = p.edge.escalate(&ctx, up(1), p.now);
        let next = Pair::sent(&step);
        assert!(matches!(decoded(next), Frame::Escalate { context: ContextSync::Delta { base_len: 44, ref tokens }, .. } if tokens.as_slice() == [token]));
        assert_eq!(cloud_token(p.answer(next, &ctx)), llm(&ctx));
    }

    #[test]
    fn a_draft_rejected_at_its_first_token_yields_the_llms_token_there() {
        let mut p = Pair::new();
        let mut ctx: Vec<u32> = (1..20).collect();
        let draft = draft_agreeing(&ctx, 3, 0);
        let (accepted, token, _) = round(&mut p, &ctx, &draft);
        assert_eq!((accepted, token), (0, llm(&ctx)));
        ctx.push(token);
        ctx.push(9);
        let step = p.edge.escalate(&ctx, up(1), p.now);
        assert!(!Pair::sent(&step).full, "nothing to resync");
        assert_eq!(cloud_token(p.answer(Pair::sent(&step), &ctx)), llm(&ctx));
    }

    #[test]
    fn a_draft_rejected_in_the_middle_keeps_the_prefix_and_corrects_the_rest() {
        let mut p = Pair::new();
        let mut ctx: Vec<u32> = (1..20).collect();
        let draft = draft_agreeing(&ctx, 5, 2);
        let (accepted, token, _) = round(&mut p, &ctx, &draft);
        assert_eq!(accepted, 2);
        ctx.extend(&draft[..2]);
        assert_eq!(token, llm(&ctx), "the LLM's token at the first rejected position");
        assert_ne!(token, draft[2]);
        ctx.push(token);
        let next = draft_agreeing(&ctx, 2, 2);
        let (accepted, token, t) = round(&mut p, &ctx, &next);
        assert!(matches!(decoded(&t), Frame::EscalateDraft { context: ContextSync::Delta { base_len: 21, ref tokens }, .. } if tokens.len() == 1));
        ctx.extend(&next);
        assert_eq!((accepted, token), (2, llm(&ctx)));
        assert_eq!(p.edge.counters().full_syncs, 1, "only the first sync was Full");
    }

    #[test]
    fn a_draft_answered_after_the_deadline_falls_back_and_the_next_sync_is_full() {
        let mut p = Pair::new();
        let mut ctx: Vec<u32> = (1..20).collect();
        let draft = draft_agreeing(&ctx, 4, 4);
        let step = p.edge.escalate_draft(&ctx, &draft, up(1), p.now);
        let t = Pair::sent(&step).clone();
        let late = p.serve(&t); // the gateway appended the whole draft and answered...
        p.now = t.deadline;
        assert_eq!(fallback(p.edge.on_timeout(p.now)).0, FallbackReason::Timeout);
        assert_eq!(p.edge.on_reply(late, &ctx, p.now), Step::Wait, "...too late: dropped");
        // The device keeps the SLM's tokens (the draft); it cannot know what the gateway holds.
        ctx.extend(&draft);
        ctx.push(3);
        let step = p.edge.escalate(&ctx, up(1), p.now);
        let t = Pair::sent(&step);
        assert!(t.full, "an unanswered draft resyncs with Full");
        assert_eq!(cloud_token(p.answer(t, &ctx)), llm(&ctx));
        assert_eq!(p.gateway.tokens(), ctx.as_slice());
    }

    #[test]
    fn a_link_lost_mid_draft_falls_back_and_resyncs_on_the_next_connection() {
        let mut p = Pair::new();
        let mut ctx: Vec<u32> = (1..20).collect();
        let draft = draft_agreeing(&ctx, 3, 3);
        let step = p.edge.escalate_draft(&ctx, &draft, up(1), p.now);
        let _lost = Pair::sent(&step).clone();
        assert_eq!(fallback(p.edge.on_transport_error(true, p.now)).0, FallbackReason::LinkDown);
        ctx.extend(&draft);
        assert_eq!(fallback(p.edge.escalate_draft(&ctx, &draft_agreeing(&ctx, 2, 2), LinkView::Down, p.now)).0, FallbackReason::LinkDown);
        // Reconnected: a new connection, a new gateway copy.
        p.gateway = SessionContext::new();
        let next = draft_agreeing(&ctx, 2, 1);
        let step = p.edge.escalate_draft(&ctx, &next, up(2), p.now);
        let t = Pair::sent(&step).clone();
        assert!(t.full);
        assert_eq!(verified(p.answer(&t, &ctx)).0, 1);
    }

    #[test]
    fn a_verified_answer_claiming_more_than_the_draft_is_refused() {
        let mut p = Pair::new();
        let ctx: Vec<u32> = (1..10).collect();
        let step = p.edge.escalate_draft(&ctx, &[1, 2], up(1), p.now);
        let t = Pair::sent(&step).clone();
        let bogus = Frame::Verified { session_id: 1, seq: t.seq, accepted: 3, token_id: 5, logprob: -1.0, llm_ms: 1 };
        assert_eq!(fallback(p.edge.on_reply(bogus, &ctx, p.now)).0, FallbackReason::GatewayError);
    }

    #[test]
    fn a_context_missing_resend_carries_the_draft_again() {
        let mut p = Pair::new();
        let ctx: Vec<u32> = (1..30).collect();
        assert_eq!(cloud(p.escalate_served(&ctx, Duration::from_millis(5))), llm(&ctx));
        p.gateway = SessionContext::new();
        let mut ctx2 = ctx.clone();
        ctx2.push(llm(&ctx));
        let draft = draft_agreeing(&ctx2, 3, 3);
        let step = p.edge.escalate_draft(&ctx2, &draft, up(1), p.now);
        let first = Pair::sent(&step).clone();
        let missing = p.serve(&first);
        let step = p.edge.on_reply(missing, &ctx2, p.now);
        let resend = Pair::sent(&step).clone();
        assert!(resend.full && matches!(decoded(&resend), Frame::EscalateDraft { ref draft, .. } if draft.len() == 3));
        assert_eq!(verified(p.answer(&resend, &ctx2)).0, 3);
    }

    #[test]
    fn a_gateway_answers_a_draft_from_an_old_device_with_an_error_it_can_decode() {
        assert!(gateway::drafts_unsupported(5, 1, 2).is_none());
        for v in 1..5 {
            let Some(Frame::Error { code, seq, .. }) = gateway::drafts_unsupported(v, 1, 2) else { panic!("v{v}") };
            assert_eq!((code, seq), (ErrorCode::Malformed, Some(2)));
        }
        // A device whose draft an old gateway could not decode falls back, and carries on.
        let mut p = Pair::new();
        let ctx: Vec<u32> = (1..10).collect();
        let step = p.edge.escalate_draft(&ctx, &[1, 2], up(1), p.now);
        let _t = Pair::sent(&step).clone();
        let old = Frame::Error { session_id: None, seq: None, code: ErrorCode::Malformed, message: "unknown variant".into() };
        assert_eq!(fallback(p.edge.on_reply(old, &ctx, p.now)).0, FallbackReason::GatewayError);
    }
}

/// What the gateway takes from a device's strings and puts in its own: the `Hello`'s names
/// refused when a log line or the fleet listing could not print them as they are, its own
/// messages escaped, and v6's answers only to v6 devices.
mod untrusted_strings {
    use super::*;
    use crate::protocol::text::{first_unsafe, HOSTILE};

    fn hello_from(slm_id: &str) -> Frame {
        Frame::Hello { protocol_version: PROTOCOL_VERSION, device_id: "dev".into(), auth: "sesame".into(), tokenizer_fingerprint: FP.into(), slm_id: slm_id.into() }
    }

    fn limits() -> Limits {
        Limits { max_frame_bytes: 1000, max_context_tokens: 100, max_sessions: 4, service_time_ms: 0 }
    }

    #[test]
    fn a_hello_whose_slm_id_could_forge_a_log_line_is_refused_without_echoing_it() {
        let forged = "slm\n2099-01-01T00:00:00Z ERROR forged".to_string();
        let long = "x".repeat(129);
        for slm in HOSTILE.iter().map(|s| s.to_string()).chain([forged, long, "a b".into()]) {
            let refused = gateway::answer_hello(&handshake_policy(), limits(), Ok(hello_from(&slm))).unwrap_err();
            let RejectReason::Other(why) = &refused.reason else { panic!("{slm:?}: {:?}", refused.reason) };
            assert!(why.starts_with("slm_id refused"), "{why}");
            assert!(!why.contains(&slm) && first_unsafe(why).is_none(), "{why:?} echoes {slm:?}");
            assert_eq!(refused.reply().validate(&ValidationLimits::default()), Ok(()), "the Reject itself passes validation");
        }
        let ok = gateway::answer_hello(&handshake_policy(), limits(), Ok(hello_from("Qwen/Qwen2.5-0.5B-Instruct"))).unwrap();
        assert_eq!(ok.slm_id, "Qwen/Qwen2.5-0.5B-Instruct");
    }

    #[test]
    fn a_hello_whose_device_id_holds_a_bidi_override_is_refused() {
        for d in HOSTILE {
            let refused = gateway::answer_hello(&handshake_policy(), limits(), Ok(hello(PROTOCOL_VERSION, "sesame", FP, d))).unwrap_err();
            assert!(matches!(&refused.reason, RejectReason::Other(why) if why.starts_with("device_id refused") && first_unsafe(why).is_none()), "{d:?}: {:?}", refused.reason);
        }
    }

    #[test]
    fn every_error_the_gateway_makes_carries_an_escaped_message_a_device_can_validate() {
        use crate::protocol::text::MAX_TEXT_BYTES;
        for raw in HOSTILE.iter().map(|s| s.to_string()).chain(["\n".repeat(100_000)]) {
            let frames = [
                gateway::reply(1, 2, EscalationOutcome::BackendFailed(raw.clone())),
                gateway::reply(1, 2, EscalationOutcome::ContextTooLong(raw.clone())),
                gateway::reply(1, 2, EscalationOutcome::InvalidToken(raw.clone())),
            ];
            for f in frames {
                let Frame::Error { message, .. } = &f else { panic!("{f:?}") };
                assert!(first_unsafe(message).is_none() && message.len() <= MAX_TEXT_BYTES, "{message:?}");
                assert_eq!(f.validate(&ValidationLimits::default()), Ok(()));
            }
        }
    }

    #[test]
    fn end_session_is_answered_with_session_ended_from_v6_and_by_an_empty_stream_before() {
        assert_eq!(gateway::end_session_answer(6, 9), Some(Frame::SessionEnded { session_id: 9 }));
        assert_eq!(gateway::end_session_answer(PROTOCOL_VERSION, 9), Some(Frame::SessionEnded { session_id: 9 }));
        for v in 1..6 {
            assert_eq!(gateway::end_session_answer(v, 9), None, "v{v} decodes no SessionEnded");
        }
    }

    #[test]
    fn a_bundle_not_offered_has_its_own_code_from_v6_and_unknown_session_before() {
        let sha = crate::fleet::Sha256Digest([3; 32]);
        let code = |v: u16| match gateway::bundle_not_offered(v, &sha) {
            Frame::Error { code, .. } => code,
            other => panic!("{other:?}"),
        };
        assert_eq!(code(6), ErrorCode::BundleNotOffered);
        assert_eq!(code(4), ErrorCode::UnknownSession);
        assert_eq!(code(5), ErrorCode::UnknownSession);
        // What a v5 device decodes: the pre-v6 code, never the new variant's index.
        let old = encode_frame(&gateway::bundle_not_offered(5, &sha), MAX).unwrap();
        assert!(matches!(decode_frame(&old, MAX), Ok(Frame::Error { code: ErrorCode::UnknownSession, .. })));
    }

    #[test]
    fn a_report_refusal_is_malformed_and_says_why() {
        let why = crate::fleet::ReportError::FallbacksExceedEscalations { escalations: 1, fallbacks: 2 };
        assert!(matches!(gateway::report_refused(&why), Frame::Error { code: ErrorCode::Malformed, message, .. } if message.contains("2 fallbacks among 1")));
        let report = Frame::BundleReport { running: None, escalations: 1, fallbacks: 2 };
        let classified = gateway::classify(Ok(report), &ValidationLimits::default());
        assert!(matches!(classified, Request::Answer(Frame::Error { code: ErrorCode::Malformed, .. })), "{classified:?}");
    }
}
