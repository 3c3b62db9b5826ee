//! One ractor actor per connected device.
//!
//! The actor owns the device's identity after the handshake and applies its escalations to the
//! session store one at a time, in arrival order, so a device's context updates never race.
//! Reading and writing QUIC streams happens in small tasks around it: a stream reader decodes
//! one frame and hands it to the actor; a reply task waits for the batcher's answer and writes
//! it back, or cancels the work if the device resets the stream.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::protocol::{decode_frame, encode_frame, ContextError, ErrorCode, Frame, Limits, RejectReason, ValidationLimits, PROTOCOL_VERSION};
use common::sampling::SamplingParams;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::backend::{BackendError, BackendRequest, SessionKey};
use crate::batcher::{Outcome, QueueFull};
use crate::server::Shared;
use crate::session_store::StoreError;

/// How long a device has to send `Hello` after connecting.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest deadline a device may ask for.
const MAX_DEADLINE: Duration = Duration::from_secs(30);
/// QUIC application close codes.
const CLOSE_REJECTED: u32 = 1;

/// Messages of a connection actor.
pub enum ConnMsg {
    /// A decoded frame that arrived on its own stream, with the stream to answer on.
    Frame { frame: Frame, send: quinn::SendStream, received: Instant },
}

/// The connection actor.
pub struct ConnectionActor;

/// Its state.
pub struct ConnState {
    device: Arc<str>,
    shared: Arc<Shared>,
    validation: ValidationLimits,
}

/// Check a `Hello`; the error says why the device is refused.
fn check_hello(bytes: &[u8], shared: &Shared) -> Result<(String, String), RejectReason> {
    let hello = decode_frame(bytes, shared.config.max_frame_bytes).map_err(|e| RejectReason::Other(format!("malformed Hello: {e}")))?;
    let Frame::Hello { protocol_version, device_id, auth, tokenizer_fingerprint, slm_id } = hello else {
        return Err(RejectReason::Other("the first frame must be Hello".into()));
    };
    if protocol_version != PROTOCOL_VERSION {
        return Err(RejectReason::Version { supported: PROTOCOL_VERSION });
    }
    if let Some(token) = &shared.config.auth_token {
        if !constant_time_eq(token.as_bytes(), auth.as_bytes()) {
            return Err(RejectReason::Auth);
        }
    }
    if tokenizer_fingerprint != shared.config.tokenizer_fingerprint {
        return Err(RejectReason::TokenizerMismatch { expected: shared.config.tokenizer_fingerprint.clone() });
    }
    if device_id.is_empty() || device_id.len() > 256 {
        return Err(RejectReason::Other("device_id must be 1..=256 bytes".into()));
    }
    Ok((device_id, slm_id))
}

/// Handshake on the first stream; returns the device id, or refuses and closes the connection.
async fn handshake(conn: &quinn::Connection, shared: &Shared) -> anyhow::Result<Arc<str>> {
    let (mut send, mut recv) = tokio::time::timeout(HELLO_TIMEOUT, conn.accept_bi()).await??;
    let max = shared.config.max_frame_bytes;
    let checked = match tokio::time::timeout(HELLO_TIMEOUT, recv.read_to_end(max + 4)).await? {
        Ok(bytes) => check_hello(&bytes, shared),
        Err(quinn::ReadToEndError::TooLong) => Err(RejectReason::Other(format!("Hello exceeds {max} bytes"))),
        Err(e) => return Err(e.into()),
    };
    let (device_id, slm_id) = match checked {
        Ok(ok) => ok,
        Err(reason) => {
            if let Ok(b) = encode_frame(&Frame::Reject { reason: reason.clone() }, max) {
                let _ = send.write_all(&b).await;
                let _ = send.finish();
                let _ = tokio::time::timeout(Duration::from_secs(1), send.stopped()).await;
            }
            metrics::counter!("duet_gateway_handshakes_rejected_total").increment(1);
            conn.close(CLOSE_REJECTED.into(), b"rejected");
            anyhow::bail!("handshake rejected: {reason:?}");
        }
    };
    let welcome = Frame::Welcome {
        gateway_id: shared.config.gateway_id.clone(),
        llm_id: shared.config.llm_id.clone(),
        limits: Limits {
            max_frame_bytes: max as u32,
            max_context_tokens: shared.config.max_context as u32,
            max_sessions: shared.config.max_sessions_per_device as u32,
            service_time_ms: shared.queue.stats().service_ms.load(Ordering::Relaxed),
        },
    };
    send.write_all(&encode_frame(&welcome, max)?).await?;
    send.finish()?;
    tracing::info!(device = %device_id, slm = %slm_id, remote = %conn.remote_address(), "device welcomed");
    Ok(Arc::from(device_id))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Read one frame from each new stream and pass it to the actor, until the connection closes.
async fn accept_streams(conn: quinn::Connection, actor: ActorRef<ConnMsg>, max: usize, device: Arc<str>) {
    loop {
        let (mut send, mut recv) = match conn.accept_bi().await {
            Ok(s) => s,
            Err(e) => {
                tracing::info!(%device, "connection closed: {e}");
                break;
            }
        };
        let actor = actor.clone();
        tokio::spawn(async move {
            let received = Instant::now();
            let bytes = match recv.read_to_end(max + 4).await {
                Ok(b) => b,
                Err(quinn::ReadToEndError::TooLong) => {
                    metrics::counter!("duet_gateway_frames_rejected_total", "reason" => "oversize").increment(1);
                    let _ = recv.stop(0u32.into());
                    write_reply(&mut send, &error_frame(None, None, ErrorCode::Oversize, format!("frame exceeds {max} bytes")), max).await;
                    return;
                }
                Err(_) => return,
            };
            match decode_frame(&bytes, max) {
                Ok(frame) => {
                    let _ = actor.send_message(ConnMsg::Frame { frame, send, received });
                }
                Err(e) => {
                    metrics::counter!("duet_gateway_frames_rejected_total", "reason" => "malformed").increment(1);
                    write_reply(&mut send, &error_frame(None, None, ErrorCode::Malformed, e.to_string()), max).await;
                }
            }
        });
    }
    actor.stop(Some("connection closed".into()));
}

fn error_frame(session_id: Option<u64>, seq: Option<u32>, code: ErrorCode, message: String) -> Frame {
    Frame::Error { session_id, seq, code, message }
}

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

impl ConnState {
    fn reply_now(&self, mut send: quinn::SendStream, frame: Frame) {
        let max = self.shared.config.max_frame_bytes;
        tokio::spawn(async move { write_reply(&mut send, &frame, max).await });
    }

    fn on_escalate(&self, frame: Frame, send: quinn::SendStream, received: Instant) {
        let Frame::Escalate { session_id, seq, context, sampling, deadline_ms } = frame else { return };
        metrics::counter!("duet_gateway_escalations_received_total").increment(1);
        let key = SessionKey { device: self.device.clone(), session_id };
        let snapshot = match self.shared.store.apply(&key, seq, &context, received) {
            Ok(s) => s,
            Err(StoreError::Context(e)) => {
                if matches!(e, ContextError::Missing { .. }) {
                    metrics::counter!("duet_gateway_context_missing_total").increment(1);
                }
                return self.reply_now(send, e.reply(session_id, seq));
            }
            Err(e @ StoreError::TooManySessions(_)) => {
                return self.reply_now(send, error_frame(Some(session_id), Some(seq), ErrorCode::Internal, e.to_string()));
            }
        };
        let deadline = received + Duration::from_millis(deadline_ms as u64).min(MAX_DEADLINE);
        let request = BackendRequest { session: key, context: snapshot, sampling: SamplingParams::from(sampling), seq };
        let rx = match self.shared.queue.try_submit(request, deadline) {
            Ok(rx) => rx,
            Err(QueueFull { retry_after_ms }) => return self.reply_now(send, Frame::Busy { session_id, seq, retry_after_ms }),
        };
        let max = self.shared.config.max_frame_bytes;
        tokio::spawn(async move {
            let mut send = send;
            let outcome = tokio::select! {
                o = rx => o,
                _ = send.stopped() => return, // the device gave up: dropping rx cancels the work
            };
            let frame = match outcome {
                Ok(Outcome::Token { token, llm_ms }) => {
                    metrics::histogram!("duet_gateway_escalation_latency_seconds").record(received.elapsed().as_secs_f64());
                    Frame::Token { session_id, seq, token_id: token.token_id, logprob: token.logprob, llm_ms }
                }
                Ok(Outcome::Expired) => error_frame(Some(session_id), Some(seq), ErrorCode::DeadlineExpired, "deadline passed in the queue".into()),
                Ok(Outcome::SessionEnded) => error_frame(Some(session_id), Some(seq), ErrorCode::UnknownSession, "the session ended before this escalation ran".into()),
                Ok(Outcome::Failed(e)) => {
                    let code = match e {
                        BackendError::ContextTooLong { .. } => ErrorCode::ContextTooLong,
                        BackendError::InvalidToken(_) => ErrorCode::InvalidToken,
                        BackendError::Failed(_) => ErrorCode::BackendFailed,
                    };
                    error_frame(Some(session_id), Some(seq), code, e.to_string())
                }
                Err(_) => error_frame(Some(session_id), Some(seq), ErrorCode::Internal, "batcher stopped".into()),
            };
            write_reply(&mut send, &frame, max).await;
        });
    }
}

impl Actor for ConnectionActor {
    type Msg = ConnMsg;
    type State = ConnState;
    type Arguments = (quinn::Connection, Arc<str>, Arc<Shared>);

    async fn pre_start(&self, myself: ActorRef<Self::Msg>, (conn, device, shared): Self::Arguments) -> Result<Self::State, ActorProcessingErr> {
        shared.connections.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!("duet_gateway_connections").increment(1.0);
        tokio::spawn(accept_streams(conn, myself, shared.config.max_frame_bytes, device.clone()));
        let validation = ValidationLimits {
            max_context_tokens: shared.config.max_context as u32,
            vocab_size: Some(shared.config.vocab_size as u32),
            ..ValidationLimits::default()
        };
        Ok(ConnState { device, shared, validation })
    }

    async fn post_stop(&self, _myself: ActorRef<Self::Msg>, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        state.shared.connections.fetch_sub(1, Ordering::Relaxed);
        metrics::gauge!("duet_gateway_connections").decrement(1.0);
        Ok(())
    }

    async fn handle(&self, _myself: ActorRef<Self::Msg>, msg: Self::Msg, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        let ConnMsg::Frame { frame, send, received } = msg;
        if let Err(e) = frame.validate(&state.validation) {
            metrics::counter!("duet_gateway_frames_rejected_total", "reason" => "invalid").increment(1);
            let (sid, seq) = frame.session_seq().map(|(s, q)| (Some(s), q)).unwrap_or((None, None));
            state.reply_now(send, error_frame(sid, seq, e.code(), e.to_string()));
            return Ok(());
        }
        match frame {
            Frame::Escalate { .. } => state.on_escalate(frame, send, received),
            Frame::EndSession { session_id } => {
                let key = SessionKey { device: state.device.clone(), session_id };
                if state.shared.store.remove(&key) {
                    state.shared.queue.end_session(key);
                }
                let mut send = send;
                let _ = send.finish();
            }
            Frame::Ping { nonce } => state.reply_now(send, Frame::Pong { nonce }),
            other => {
                let msg = format!("unexpected {} frame after the handshake", other.kind());
                state.reply_now(send, error_frame(None, None, ErrorCode::Malformed, msg));
            }
        }
        Ok(())
    }
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
