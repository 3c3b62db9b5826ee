//! One ractor actor per connected device, and the small tasks that move its streams' bytes.
//!
//! The actor owns the device's identity after the handshake and applies its requests to the
//! session store one at a time, in arrival order, so a device's context updates never race.
//! Around it, a stream task reads one frame from each new stream and classifies it; a reply
//! task waits for the batcher's answer and writes it back, or cancels the work if the device
//! resets the stream. What a device can observe (why a `Hello` is refused, which error a bad
//! frame gets, which frame answers each outcome) is decided by `common::exchange::gateway`;
//! this module only moves bytes, applies the store and awaits the batcher.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::exchange::gateway::{self, EscalationOutcome, Refused, Request, HELLO_TIMEOUT};
use common::protocol::{encode_frame, CodecError, ContextError, ContextSync, Frame, WireSampling};
use common::sampling::SamplingParams;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::read::read_frame;
use crate::backend::{BackendError, BackendRequest};
use crate::batcher::{Outcome, QueueFull};
use crate::sessions::{SessionKey, StoreError};
use crate::state::Shared;

/// QUIC application close code for a refused device.
const CLOSE_REJECTED: u32 = 1;
/// How long a refused device gets to read its `Reject` (and, beyond the connection limit, to
/// send its `Hello`) before the connection is closed.
const REFUSAL_WAIT: Duration = Duration::from_secs(1);

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
    },
}

/// The connection actor: one per device past the handshake.
pub struct ConnectionActor;

/// Its state.
pub struct ConnState {
    device: Arc<str>,
    shared: Arc<Shared>,
}

/// Accept a connection: handshake, then hand it to a new connection actor.
pub async fn serve_connection(incoming: quinn::Incoming, shared: Arc<Shared>) {
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
    if let Err(e) = Actor::spawn(None, ConnectionActor, (conn, device, shared)).await {
        tracing::error!("starting a connection actor: {e}");
    }
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

/// Handshake on the first stream; returns the device id, or refuses and closes the connection.
async fn handshake(conn: &quinn::Connection, shared: &Shared) -> anyhow::Result<Arc<str>> {
    let max = shared.max_frame_bytes;
    let (mut send, mut recv) = tokio::time::timeout(HELLO_TIMEOUT, conn.accept_bi()).await??;
    let hello = tokio::time::timeout(HELLO_TIMEOUT, read_frame(&mut recv, max)).await??;
    match gateway::answer_hello(&shared.handshake, shared.welcome_limits(), hello) {
        Ok(welcomed) => {
            send.write_all(&encode_frame(&welcomed.reply, max)?).await?;
            send.finish()?;
            tracing::info!(device = %welcomed.device_id, slm = %welcomed.slm_id, remote = %conn.remote_address(), "device welcomed");
            Ok(Arc::from(welcomed.device_id))
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

/// Read one frame from each new stream and pass it to the actor, until the connection closes.
async fn accept_streams(conn: quinn::Connection, actor: ActorRef<ConnMsg>, shared: Arc<Shared>, device: Arc<str>) {
    loop {
        let (send, recv) = match conn.accept_bi().await {
            Ok(s) => s,
            Err(e) => {
                tracing::info!(%device, "connection closed: {e}");
                break;
            }
        };
        tokio::spawn(read_request(send, recv, actor.clone(), shared.clone()));
    }
    actor.stop(Some("connection closed".into()));
}

/// Read and classify one request stream, and pass it to the actor (which answers frames that
/// did not decode or validate at once).
async fn read_request(send: quinn::SendStream, mut recv: quinn::RecvStream, actor: ActorRef<ConnMsg>, shared: Arc<Shared>) {
    let received = Instant::now();
    let Ok(decoded) = read_frame(&mut recv, shared.max_frame_bytes).await else {
        return; // reset or connection lost: nobody to answer
    };
    let request = match decoded {
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
    };
    let _ = actor.send_message(ConnMsg::Request { request, send, received });
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

/// What the batcher's outcome means on the wire.
fn wire_outcome(outcome: Outcome) -> EscalationOutcome {
    match outcome {
        Outcome::Token { token, llm_ms } => EscalationOutcome::Token { token_id: token.token_id, logprob: token.logprob, llm_ms },
        Outcome::Expired => EscalationOutcome::Expired,
        Outcome::SessionEnded => EscalationOutcome::SessionEnded,
        Outcome::Failed(e) => {
            let message = e.to_string();
            match e {
                BackendError::ContextTooLong { .. } => EscalationOutcome::ContextTooLong(message),
                BackendError::InvalidToken(_) => EscalationOutcome::InvalidToken(message),
                BackendError::Failed(_) => EscalationOutcome::BackendFailed(message),
            }
        }
    }
}

/// One escalation's fields, as [`Request::Escalate`] carries them.
struct EscalateRequest {
    session_id: u64,
    seq: u32,
    context: ContextSync,
    sampling: WireSampling,
    deadline: Duration,
}

impl ConnState {
    /// Answer at once on a task of its own, so the actor never waits on a slow device.
    fn reply_now(&self, mut send: quinn::SendStream, frame: Frame) {
        let max = self.shared.max_frame_bytes;
        tokio::spawn(async move { write_reply(&mut send, &frame, max).await });
    }

    fn on_escalate(&self, esc: EscalateRequest, send: quinn::SendStream, received: Instant) {
        let EscalateRequest { session_id, seq, context, sampling, deadline } = esc;
        let answer_now = |send, outcome| self.reply_now(send, gateway::reply(session_id, seq, outcome));
        metrics::counter!("duet_gateway_escalations_received_total").increment(1);
        let key = SessionKey { device: self.device.clone(), session_id };
        let snapshot = match self.shared.store.apply(&key, seq, &context, received) {
            Ok(s) => s,
            Err(StoreError::Context(e)) => {
                if matches!(e, ContextError::Missing { .. }) {
                    metrics::counter!("duet_gateway_context_missing_total").increment(1);
                }
                return answer_now(send, EscalationOutcome::Context(e));
            }
            Err(StoreError::TooManySessions(limit)) => return answer_now(send, EscalationOutcome::TooManySessions { limit }),
        };
        let request = BackendRequest { session: key, context: snapshot, sampling: SamplingParams::from(sampling), seq };
        let rx = match self.shared.queue.try_submit(request, received + deadline) {
            Ok(rx) => rx,
            Err(QueueFull { retry_after_ms }) => return answer_now(send, EscalationOutcome::Busy { retry_after_ms }),
        };
        let max = self.shared.max_frame_bytes;
        tokio::spawn(async move {
            let mut send = send;
            let outcome = tokio::select! {
                o = rx => o,
                _ = send.stopped() => return, // the device gave up: dropping rx cancels the work
            };
            let outcome = outcome.map(wire_outcome).unwrap_or(EscalationOutcome::Stopped);
            if matches!(outcome, EscalationOutcome::Token { .. }) {
                metrics::histogram!("duet_gateway_escalation_latency_seconds").record(received.elapsed().as_secs_f64());
            }
            write_reply(&mut send, &gateway::reply(session_id, seq, outcome), max).await;
        });
    }

    fn on_end_session(&self, session_id: u64, mut send: quinn::SendStream) {
        let key = SessionKey { device: self.device.clone(), session_id };
        if self.shared.store.remove(&key) {
            self.shared.queue.end_session(key);
        }
        let _ = send.finish();
    }
}

impl Actor for ConnectionActor {
    type Msg = ConnMsg;
    type State = ConnState;
    type Arguments = (quinn::Connection, Arc<str>, Arc<Shared>);

    async fn pre_start(&self, myself: ActorRef<Self::Msg>, (conn, device, shared): Self::Arguments) -> Result<Self::State, ActorProcessingErr> {
        shared.connections.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!("duet_gateway_connections").increment(1.0);
        tokio::spawn(accept_streams(conn, myself, shared.clone(), device.clone()));
        Ok(ConnState { device, shared })
    }

    async fn post_stop(&self, _myself: ActorRef<Self::Msg>, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        state.shared.connections.fetch_sub(1, Ordering::Relaxed);
        metrics::gauge!("duet_gateway_connections").decrement(1.0);
        Ok(())
    }

    async fn handle(&self, _myself: ActorRef<Self::Msg>, msg: Self::Msg, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        let ConnMsg::Request { request, send, received } = msg;
        match request {
            Request::Escalate { session_id, seq, context, sampling, deadline } => {
                state.on_escalate(EscalateRequest { session_id, seq, context, sampling, deadline }, send, received)
            }
            Request::EndSession { session_id } => state.on_end_session(session_id, send),
            Request::Answer(frame) => state.reply_now(send, frame),
        }
        Ok(())
    }
}
