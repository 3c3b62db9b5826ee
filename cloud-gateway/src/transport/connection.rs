//! One ractor actor per connected device, and the small tasks that move its streams' bytes.
//!
//! The handshake asks [`crate::identity`] who the device is (its certificate's id under mutual
//! TLS, never what `Hello` claims) and registers the connection as that identity's (replacing
//! an older one). The actor owns that identity and applies the device's requests to the
//! session store one at a time, in arrival order, so a device's context updates never race.
//! Around it, a stream task reads one frame from each new stream and classifies it; a reply
//! task waits for the LLM's answer ([`crate::dispatch`]'s `Pending`) and writes it back, or
//! cancels the work if the device resets the stream. What a device can observe (why a `Hello`
//! is refused, which error a bad frame gets, which frame answers each outcome) is decided by
//! `common::exchange::gateway`; this module only moves bytes, applies the store and awaits the
//! LLM.
//!
//! When the gateway drains, each connection of a device that speaks v2 gets one `GoAway` on a
//! unidirectional stream the gateway opens (a v1 device gets nothing: it is served until the
//! drain stops taking work, then closed); escalations still arriving after the drain's
//! admission window are answered `Busy` (by the dispatch seam), and answers written while draining are counted open
//! until the device acknowledges them, so closing the connections loses none.
//!
//! A v4 device reports the router bundle it runs (`BundleReport`, answered with the
//! `BundleOffer` its rollout gives it) and fetches an offered bundle chunk by chunk
//! (`FetchBundle`), each on a request stream like any request; [`crate::fleet`] answers both
//! and lists the device for `/v1/fleet` while it is connected.
//!
//! Traces (with an OTLP exporter, see `common::telemetry`): each escalation gets a
//! `gateway.escalation` span from its decoded frame to its written answer, a child of the
//! device's escalation span when the frame carried a trace context; under it `validate` (the
//! frame's checks), `apply_context` (the session store), and the LLM path's spans (queue wait, batch, backend call), which find it as the current span when the
//! escalation is submitted.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::exchange::gateway::{self, EscalationOutcome, Refused, Request, HELLO_TIMEOUT};
use common::protocol::{encode_frame, CodecError, ContextError, ContextSync, Frame, RejectReason, TraceContext, WireSampling};
use common::sampling::SamplingParams;
use common::telemetry::TRACE_TARGET;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::field::Empty;

use crate::limits::{ConnectionBudget, SourceGuard};
use super::read::{read_frame, read_request_frame};
use crate::dispatch::{Busy, LlmRequest, Outcome};
use crate::identity::registry::Identity;
use crate::sessions::{SessionKey, StoreError};
use crate::state::Shared;

/// QUIC application close code for a refused device.
const CLOSE_REJECTED: u32 = 1;
/// How long a refused device gets to read its `Reject` (and, beyond the connection limit, to
/// send its `Hello`) before the connection is closed.
const REFUSAL_WAIT: Duration = Duration::from_secs(1);
/// While draining, how long an answer waits for the device's acknowledgement before it no
/// longer holds the drain open.
const DRAIN_ACK_WAIT: Duration = Duration::from_secs(2);

/// Messages of a connection actor.
pub enum ConnMsg {
    /// A request that arrived on its own stream, with the stream to answer on.
    Request {
        /// What the frame asks for (a frame that failed to decode or validate is an `Answer`).
        request: Request,
        /// Where the answer goes.
        send: quinn::SendStream,
        /// When the stream was accepted: the device's deadline counts from here.
        received: Instant,
        /// The escalation's `gateway.escalation` span (disabled for other requests, or with
        /// tracing off).
        span: tracing::Span,
    },
}

/// The connection actor: one per device past the handshake.
pub struct ConnectionActor;

/// Its state.
pub struct ConnState {
    device: Arc<str>,
    /// The device's address: whose share of the session store its new sessions count in.
    source: std::net::IpAddr,
    shared: Arc<Shared>,
    protocol_version: u16,
}

/// A device past the handshake.
struct Device {
    identity: Identity,
    protocol_version: u16,
    slm_id: String,
}

/// Accept a connection: handshake, then hand it to a new connection actor. Its source's
/// `place` is held until the connection closes.
pub async fn serve_connection(incoming: quinn::Incoming, shared: Arc<Shared>, place: SourceGuard) {
    let conn = match incoming.await {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!("connection failed during setup: {e}");
            return;
        }
    };
    let device = match handshake(&conn, &shared).await {
        Ok(d) => d,
        Err(e) => {
            tracing::info!(remote = %conn.remote_address(), "{e}");
            return;
        }
    };
    let lives = conn.clone();
    let (fleet, device_id, connection) = (shared.fleet.clone(), device.identity.device_id.clone(), conn.stable_id() as u64);
    fleet.connected(&device_id, &device.slm_id, device.protocol_version, connection);
    if let Err(e) = Actor::spawn(None, ConnectionActor, (conn, device.identity.device_id, device.protocol_version, shared)).await {
        tracing::error!("starting a connection actor: {e}");
        fleet.disconnected(&device_id, connection);
        return;
    }
    lives.closed().await;
    fleet.disconnected(&device_id, connection);
    drop(place);
}

/// Refuse a device beyond the connection limit with `Reject { Overloaded }`, so that it
/// knows to try another replica or back off, instead of seeing a bare connection refusal.
pub async fn refuse_overloaded(incoming: quinn::Incoming, max_frame_bytes: usize) {
    let Ok(conn) = incoming.await else { return };
    let Ok(Ok((send, mut recv))) = tokio::time::timeout(REFUSAL_WAIT, conn.accept_bi()).await else {
        conn.close(CLOSE_REJECTED.into(), b"overloaded");
        return;
    };
    // The Hello is read and ignored, so that the device has finished writing when it is answered.
    let _ = tokio::time::timeout(REFUSAL_WAIT, read_frame(&mut recv, max_frame_bytes)).await;
    refuse(&conn, send, &gateway::overloaded(), max_frame_bytes).await;
    tracing::info!(remote = %conn.remote_address(), "device refused: at the connection limit");
}

/// Handshake on the first stream; returns the device, or refuses and closes the connection.
async fn handshake(conn: &quinn::Connection, shared: &Shared) -> anyhow::Result<Device> {
    let max = shared.max_frame_bytes;
    let (mut send, mut recv) = tokio::time::timeout(HELLO_TIMEOUT, conn.accept_bi()).await??;
    let hello = tokio::time::timeout(HELLO_TIMEOUT, read_frame(&mut recv, max)).await??;
    match gateway::answer_hello(&shared.handshake, shared.welcome_limits(), hello) {
        Ok(welcomed) => {
            // Who it is: the verified certificate's id under mutual TLS, else its claim.
            let identity = match shared.identity.identify(conn, &welcomed.device_id) {
                Ok(identity) => identity,
                Err(reason) => {
                    metrics::counter!("duet_gateway_handshakes_rejected_total").increment(1);
                    refuse(conn, send, &Refused { reason: reason.clone() }, max).await;
                    anyhow::bail!("handshake rejected: {reason:?}")
                }
            };
            // One connection per identity, before the device is welcomed: a proved identity's
            // newest connection replaces the older; a claim cannot evict a live connection.
            if let Err(in_use) = shared.identity.registry.admit(&identity, conn) {
                metrics::counter!("duet_gateway_handshakes_rejected_total").increment(1);
                refuse(conn, send, &Refused { reason: RejectReason::Other(in_use.to_string()) }, max).await;
                anyhow::bail!("handshake rejected for device {}: {in_use}", identity.device_id)
            }
            send.write_all(&encode_frame(&welcomed.reply, max)?).await?;
            send.finish()?;
            tracing::info!(device = %identity.device_id, verified = identity.serial.is_some(), slm = %welcomed.slm_id, version = welcomed.protocol_version, remote = %conn.remote_address(), "device welcomed");
            Ok(Device { identity, protocol_version: welcomed.protocol_version, slm_id: welcomed.slm_id })
        }
        Err(refused) => {
            metrics::counter!("duet_gateway_handshakes_rejected_total").increment(1);
            refuse(conn, send, &refused, max).await;
            anyhow::bail!("handshake rejected: {:?}", refused.reason)
        }
    }
}

/// Send a `Reject`, give the device a moment to read it, and close the connection.
async fn refuse(conn: &quinn::Connection, mut send: quinn::SendStream, refused: &Refused, max: usize) {
    if let Ok(bytes) = encode_frame(&refused.reply(), max) {
        if send.write_all(&bytes).await.is_ok() && send.finish().is_ok() {
            let _ = tokio::time::timeout(REFUSAL_WAIT, send.stopped()).await;
        }
    }
    conn.close(CLOSE_REJECTED.into(), b"rejected");
}

/// Read one frame from each new stream and pass it to the actor, until the connection closes;
/// when the gateway starts draining, tell the device (`GoAway`, if its version has it).
async fn accept_streams(conn: quinn::Connection, actor: ActorRef<ConnMsg>, shared: Arc<Shared>, device: Arc<str>, protocol_version: u16) {
    let mut drain = shared.drain.subscribe();
    let mut told = false;
    let budget = shared.buffers.connection();
    loop {
        let accepted = tokio::select! {
            s = conn.accept_bi() => s,
            Ok(_) = drain.wait_for(Option::is_some), if !told => {
                told = true;
                if let Some(frame) = gateway::go_away(protocol_version, shared.drain_redirect.as_deref()) {
                    tokio::spawn(send_go_away(conn.clone(), frame, shared.max_frame_bytes, device.clone()));
                }
                continue;
            }
        };
        let (send, recv) = match accepted {
            Ok(s) => s,
            Err(e) => {
                tracing::info!(%device, "connection closed: {e}");
                break;
            }
        };
        tokio::spawn(read_request(send, recv, actor.clone(), shared.clone(), device.clone(), budget.clone()));
    }
    actor.stop(Some("connection closed".into()));
}

/// Push `GoAway` on a stream of its own: the device reconnects elsewhere and sends nothing
/// new here, while answers in flight on this connection still reach it.
async fn send_go_away(conn: quinn::Connection, frame: Frame, max: usize, device: Arc<str>) {
    let sent = async {
        let mut send = conn.open_uni().await?;
        send.write_all(&encode_frame(&frame, max)?).await?;
        send.finish()?;
        anyhow::Ok(())
    };
    match sent.await {
        Ok(()) => {
            metrics::counter!("duet_gateway_goaways_sent_total").increment(1);
            tracing::debug!(%device, "GoAway sent");
        }
        Err(e) => tracing::debug!(%device, "GoAway not sent: {e}"),
    }
}

/// One admitted escalation, counted until it is answered (and, while draining, acknowledged).
struct OpenEscalation(Arc<Shared>);

impl OpenEscalation {
    fn new(shared: Arc<Shared>) -> Self {
        shared.open_escalations.fetch_add(1, Ordering::Relaxed);
        Self(shared)
    }
}

impl Drop for OpenEscalation {
    fn drop(&mut self) {
        self.0.open_escalations.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Read and classify one request stream, and pass it to the actor (which answers frames that
/// did not decode or validate at once).
async fn read_request(mut send: quinn::SendStream, mut recv: quinn::RecvStream, actor: ActorRef<ConnMsg>, shared: Arc<Shared>, device: Arc<str>, budget: ConnectionBudget) {
    let received = Instant::now();
    let decoded = match read_request_frame(&mut recv, shared.max_frame_bytes, &budget).await {
        Ok(decoded) => decoded,
        Err(e) => {
            // Reset, lost, too slow or over the buffer budget: nobody to answer.
            tracing::debug!(%device, "request stream given up: {e}");
            let _ = send.reset(1u32.into());
            return;
        }
    };
    let (decoded, span) = match decoded {
        Ok((frame, trace)) => {
            let span = escalation_span(&frame, trace.as_ref(), &device, received);
            (Ok(frame), span)
        }
        Err(e) => (Err(e), tracing::Span::none()),
    };
    let validate = child(&span, || tracing::info_span!(target: TRACE_TARGET, parent: &span, "validate"));
    let request = validate.in_scope(|| match decoded {
        Err(CodecError::Oversize { len, max }) => {
            metrics::counter!("duet_gateway_frames_rejected_total", "reason" => "oversize").increment(1);
            Request::Answer(gateway::oversize(len, max))
        }
        Err(e) => {
            metrics::counter!("duet_gateway_frames_rejected_total", "reason" => "malformed").increment(1);
            gateway::classify(Err(e), &shared.validation)
        }
        Ok(frame) => {
            let request = gateway::classify(Ok(frame), &shared.validation);
            if matches!(request, Request::Answer(Frame::Error { .. })) {
                metrics::counter!("duet_gateway_frames_rejected_total", "reason" => "invalid").increment(1);
            }
            request
        }
    });
    drop(validate);
    let _ = actor.send_message(ConnMsg::Request { request, send, received, span });
}

/// The `gateway.escalation` span of an `Escalate` frame (none for other frames), under the
/// device's span when the frame carried its trace context. It starts once the frame is
/// decoded; `read_decode_us` says how long reading and decoding took since the stream opened.
/// Disabled when its trace is not sampled.
fn escalation_span(frame: &Frame, trace: Option<&TraceContext>, device: &str, received: Instant) -> tracing::Span {
    let Frame::Escalate { session_id, seq, context, deadline_ms, .. } = frame else { return tracing::Span::none() };
    let sync = if matches!(context, ContextSync::Full { .. }) { "full" } else { "delta" };
    let span = tracing::info_span!(
        target: TRACE_TARGET, parent: None, "gateway.escalation",
        otel.kind = "server", device = Empty, session = Empty, seq = Empty, sync = Empty, tokens = Empty, deadline_ms = Empty,
        traced = trace.is_some(), read_decode_us = Empty, outcome = Empty,
    );
    if let Some(tc) = trace {
        common::trace::set_remote_parent(&span, tc);
    }
    // Not sampled: no span at all from here on (its stages and attributes would cost without
    // being exported).
    let span = common::trace::keep_if_sampled(span);
    if !span.is_disabled() {
        span.record("device", device).record("session", session_id).record("seq", seq).record("sync", sync);
        span.record("tokens", context.tokens().len()).record("deadline_ms", deadline_ms).record("read_decode_us", received.elapsed().as_micros() as u64);
    }
    span
}

/// A child span of `parent` made by `make`, or none when `parent` is none (not an escalation,
/// or tracing off): a span given a disabled parent would start a trace of its own.
fn child(parent: &tracing::Span, make: impl FnOnce() -> tracing::Span) -> tracing::Span {
    if parent.is_disabled() {
        tracing::Span::none()
    } else {
        make()
    }
}

/// What became of an escalation, as its span says.
fn outcome_name(outcome: &EscalationOutcome) -> &'static str {
    match outcome {
        EscalationOutcome::Token { .. } => "token",
        EscalationOutcome::Verified { .. } => "verified",
        EscalationOutcome::Busy { .. } => "busy",
        EscalationOutcome::Context(ContextError::Missing { .. }) => "context_missing",
        EscalationOutcome::Context(_) => "context_error",
        EscalationOutcome::TooManySessions { .. } => "too_many_sessions",
        EscalationOutcome::GatewayFull { .. } => "gateway_full",
        EscalationOutcome::Expired => "expired",
        EscalationOutcome::SessionEnded => "session_ended",
        EscalationOutcome::ContextTooLong(_) => "context_too_long",
        EscalationOutcome::InvalidToken(_) => "invalid_token",
        EscalationOutcome::BackendFailed(_) => "backend_failed",
        EscalationOutcome::Stopped => "stopped",
    }
}

/// The answer to a draft escalation: `Verified` with the accepted count the LLM path gave
/// (0 from a path that does not check drafts), after `append` put the accepted draft tokens
/// into the session's context (the device's next delta starts after them). If they could not
/// be appended (the session moved on meanwhile), the answer claims none accepted, so device
/// and gateway still agree on the context.
fn verified(outcome: Outcome, draft: &[u32], append: impl FnOnce(&[u32]) -> bool) -> EscalationOutcome {
    match outcome {
        Outcome::Token { token, llm_ms } => {
            let accepted = usize::try_from(token.accepted).unwrap_or(usize::MAX).min(draft.len());
            if accepted == 0 || append(&draft[..accepted]) {
                EscalationOutcome::Verified { accepted: accepted as u32, token_id: token.token_id, logprob: token.logprob, llm_ms }
            } else {
                // Only the LLM's token at the position asked for is safe to give.
                EscalationOutcome::Verified { accepted: 0, token_id: draft[0], logprob: 0.0, llm_ms }
            }
        }
        other => other.to_wire(),
    }
}

/// Write one frame and end the stream; a device that already left is not an error.
async fn write_reply(send: &mut quinn::SendStream, frame: &Frame, max: usize) {
    match encode_frame(frame, max) {
        Ok(bytes) => {
            if send.write_all(&bytes).await.is_ok() {
                let _ = send.finish();
            }
        }
        Err(e) => tracing::error!("encoding a {} reply: {e}", frame.kind()),
    }
}

/// What a device hears when the session store refuses its escalation's context.
fn store_refusal(e: StoreError) -> EscalationOutcome {
    match e {
        StoreError::Context(e) => {
            if matches!(e, ContextError::Missing { .. }) {
                metrics::counter!("duet_gateway_context_missing_total").increment(1);
            }
            EscalationOutcome::Context(e)
        }
        StoreError::TooManySessions(limit) => EscalationOutcome::TooManySessions { limit },
    }
}

/// One escalation's fields, as [`Request::Escalate`] carries them.
struct EscalateRequest {
    session_id: u64,
    seq: u32,
    context: ContextSync,
    sampling: WireSampling,
    deadline: Duration,
    /// The draft to check (v5), empty for none.
    draft: Vec<u32>,
}

impl ConnState {
    /// Answer at once on a task of its own, so the actor never waits on a slow device.
    fn reply_now(&self, mut send: quinn::SendStream, frame: Frame) {
        let max = self.shared.max_frame_bytes;
        tokio::spawn(async move { write_reply(&mut send, &frame, max).await });
    }

    fn on_escalate(&self, esc: EscalateRequest, send: quinn::SendStream, received: Instant, span: tracing::Span) {
        let EscalateRequest { session_id, seq, context, sampling, deadline, draft } = esc;
        let answer_now = |send, outcome: EscalationOutcome| {
            span.record("outcome", outcome_name(&outcome));
            self.reply_now(send, gateway::reply(session_id, seq, outcome))
        };
        metrics::counter!("duet_gateway_escalations_received_total").increment(1);
        if !draft.is_empty() {
            if let Some(refusal) = gateway::drafts_unsupported(self.protocol_version, session_id, seq) {
                return self.reply_now(send, refusal);
            }
        }
        self.shared.fleet.escalation(&self.device);
        let key = SessionKey { device: self.device.clone(), session_id };
        let applied = child(&span, || tracing::info_span!(target: TRACE_TARGET, parent: &span, "apply_context")).in_scope(|| self.shared.store.apply(&key, seq, &context, received));
        let applied = match applied {
            Ok(a) => a,
            Err(e) => return answer_now(send, store_refusal(e)),
        };
        if let Err(retry_after_ms) = self.shared.identity.rate.check(&self.device, Instant::now()) {
            // This device is over its own rate: it falls back, others keep their share.
            metrics::counter!("duet_gateway_escalations_rate_limited_total").increment(1);
            return answer_now(send, EscalationOutcome::Busy { retry_after_ms });
        }
        let snapshot = applied.snapshot.clone();
        let base_len = snapshot.len();
        let draft: Arc<[u32]> = Arc::from(draft);
        let request = LlmRequest { session: key.clone(), context: snapshot, sampling: SamplingParams::from(sampling), seq, draft: draft.clone() };
        let open = OpenEscalation::new(self.shared.clone());
        // The LLM path hangs its spans under the current one. Refused while draining past the
        // admission window too: the device falls back at once and reconnects elsewhere.
        let submitted = span.in_scope(|| self.shared.llm.try_submit(request, received + deadline));
        let pending = match submitted {
            Ok(pending) => pending,
            Err(Busy { retry_after_ms, .. }) => return answer_now(send, EscalationOutcome::Busy { retry_after_ms }),
        };
        // Admitted: only now is a new session's context kept (work refused leaves nothing).
        match self.shared.store.admit(&key, applied, self.source, received) {
            Ok(evicted) => evicted.into_iter().for_each(|k| self.shared.llm.end_session(k)),
            Err(e) => {
                drop(pending); // cancels the work
                return answer_now(send, store_refusal(e));
            }
        }
        let max = self.shared.max_frame_bytes;
        tokio::spawn(async move {
            let mut send = send;
            // `Expired` at its deadline, however long the work ahead of it runs: never late.
            let outcome = tokio::select! {
                o = pending.outcome() => o,
                _ = send.stopped() => {
                    // The device gave up: dropping `pending` cancels the work.
                    span.record("outcome", "device_gone");
                    return;
                }
            };
            let outcome = match outcome {
                Some(o) if !draft.is_empty() => verified(o, &draft, |accepted| open.0.store.append_accepted(&key, seq, base_len, accepted)),
                Some(o) => o.to_wire(),
                None => EscalationOutcome::Stopped,
            };
            span.record("outcome", outcome_name(&outcome));
            if matches!(outcome, EscalationOutcome::Token { .. } | EscalationOutcome::Verified { .. }) {
                metrics::histogram!("duet_gateway_escalation_latency_seconds").record(received.elapsed().as_secs_f64());
            }
            write_reply(&mut send, &gateway::reply(session_id, seq, outcome), max).await;
            if open.0.draining().is_some() {
                // Closing the connection would discard an answer not yet delivered.
                let _ = tokio::time::timeout(DRAIN_ACK_WAIT, send.stopped()).await;
            }
            drop(open);
        });
    }

    /// Drop the session and its queued work, then answer: `SessionEnded` on a v6 connection, the
    /// stream ended with no frame before v6 (`gateway::end_session_answer`).
    fn on_end_session(&self, session_id: u64, mut send: quinn::SendStream) {
        let key = SessionKey { device: self.device.clone(), session_id };
        if self.shared.store.remove(&key) {
            self.shared.llm.end_session(key);
        }
        match gateway::end_session_answer(self.protocol_version, session_id) {
            Some(answer) => self.reply_now(send, answer),
            None => {
                let _ = send.finish();
            }
        }
    }
}

impl Actor for ConnectionActor {
    type Msg = ConnMsg;
    type State = ConnState;
    type Arguments = (quinn::Connection, Arc<str>, u16, Arc<Shared>);

    async fn pre_start(&self, myself: ActorRef<Self::Msg>, (conn, device, protocol_version, shared): Self::Arguments) -> Result<Self::State, ActorProcessingErr> {
        shared.connections.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!("duet_gateway_connections").increment(1.0);
        let source = conn.remote_address().ip();
        tokio::spawn(accept_streams(conn, myself, shared.clone(), device.clone(), protocol_version));
        Ok(ConnState { device, source, shared, protocol_version })
    }

    async fn post_stop(&self, _myself: ActorRef<Self::Msg>, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        state.shared.connections.fetch_sub(1, Ordering::Relaxed);
        metrics::gauge!("duet_gateway_connections").decrement(1.0);
        Ok(())
    }

    async fn handle(&self, _myself: ActorRef<Self::Msg>, msg: Self::Msg, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        let ConnMsg::Request { request, send, received, span } = msg;
        match request {
            Request::Escalate { session_id, seq, context, sampling, deadline, draft } => {
                state.on_escalate(EscalateRequest { session_id, seq, context, sampling, deadline, draft }, send, received, span)
            }
            Request::EndSession { session_id } => state.on_end_session(session_id, send),
            Request::BundleReport { running, escalations, fallbacks } => {
                let reply = gateway::bundles_unsupported(state.protocol_version).unwrap_or_else(|| state.shared.fleet.report(&state.device, running, escalations, fallbacks));
                state.reply_now(send, reply)
            }
            Request::FetchBundle { sha256, offset } => {
                let reply = gateway::bundles_unsupported(state.protocol_version).unwrap_or_else(|| state.shared.fleet.fetch(&state.device, sha256, offset));
                state.reply_now(send, reply)
            }
            Request::Answer(frame) => state.reply_now(send, frame),
        }
        Ok(())
    }
}
