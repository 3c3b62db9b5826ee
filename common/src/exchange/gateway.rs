//! The gateway's side of the exchange, without I/O: the handshake, what each request asks
//! for, and which frame answers each outcome.
//!
//! The gateway's QUIC connection task reads one frame per stream and hands it here; it only
//! moves bytes and awaits the batcher. Every rule a device can observe (why a `Hello` is
//! refused, which error code a bad frame gets, what a backend failure looks like on the wire)
//! lives in these functions, so both the gateway and its tests use one definition.
//!
//! A device's strings are checked here before the gateway logs or lists them (its `slm_id` by
//! the model-id rule, as its `device_id` by its own), and the gateway's own free text is
//! escaped where each `Error` is made ([`crate::protocol::text::escape_text`]): a backend's
//! error or a decoder's complaint may quote bytes a device sent. A refusal never echoes the
//! string it refuses. Answers added in a later protocol version go only to devices that speak
//! it ([`end_session_answer`], [`bundle_not_offered`]); older devices get what they always got.

use std::sync::Arc;
use std::time::Duration;

use super::constant_time_eq;
use crate::device_token::DeviceTokenKey;
use crate::fleet::{BundleRef, Sha256Digest};
use crate::protocol::{understands_go_away, understands_v6_answers, CodecError, ContextError, ContextSync, ErrorCode, Frame, Limits, RejectReason, ValidationLimits, WireSampling, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION};

/// How long a device has to send `Hello` after connecting.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest accepted `device_id`, in bytes (the one rule for device ids: [`crate::device_id`]).
pub use crate::device_id::MAX_DEVICE_ID_BYTES;

/// What the gateway checks a `Hello` against and announces in `Welcome`.
#[derive(Debug, Clone)]
pub struct HandshakePolicy {
    /// Shared secret devices present; `None` accepts any device (development only).
    pub auth_token: Option<String>,
    /// The secret per-device tokens are checked with: a `Hello`'s `auth` must be the token of
    /// the id it claims ([`crate::device_token`]). `None`: no per-device token is asked for.
    pub device_tokens: Option<Arc<DeviceTokenKey>>,
    /// Fingerprint of the LLM's tokenizer; a device with another one is refused.
    pub tokenizer_fingerprint: String,
    /// Name announced in `Welcome`.
    pub gateway_id: String,
    /// The LLM's id, announced in `Welcome`.
    pub llm_id: String,
}

/// A device the handshake accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct Welcomed {
    /// The device's id.
    pub device_id: String,
    /// Its SLM, for logs.
    pub slm_id: String,
    /// The protocol version it speaks: what may be sent to it (see [`go_away`]).
    pub protocol_version: u16,
    /// The `Welcome` to send.
    pub reply: Frame,
}

/// A device the handshake refused: send [`Refused::reply`], then close the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Why.
    pub reason: RejectReason,
}

impl Refused {
    fn new(reason: RejectReason) -> Self {
        Self { reason }
    }

    /// The `Reject` to send.
    pub fn reply(&self) -> Frame {
        Frame::Reject { reason: self.reason.clone() }
    }
}

/// Answer the first frame of a connection. `limits` are announced to an accepted device.
pub fn answer_hello(policy: &HandshakePolicy, limits: Limits, hello: Result<Frame, CodecError>) -> Result<Welcomed, Refused> {
    let hello = hello.map_err(|e| Refused::new(RejectReason::Other(format!("malformed Hello: {e}"))))?;
    let Frame::Hello { protocol_version, device_id, auth, tokenizer_fingerprint, slm_id } = hello else {
        return Err(Refused::new(RejectReason::Other(format!("the first frame must be Hello, not {}", hello.kind()))));
    };
    if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&protocol_version) {
        return Err(Refused::new(RejectReason::Version { supported: PROTOCOL_VERSION }));
    }
    if let Some(token) = &policy.auth_token {
        if !constant_time_eq(token.as_bytes(), auth.as_bytes()) {
            return Err(Refused::new(RejectReason::Auth));
        }
    }
    if tokenizer_fingerprint != policy.tokenizer_fingerprint {
        return Err(Refused::new(RejectReason::TokenizerMismatch { expected: policy.tokenizer_fingerprint.clone() }));
    }
    if let Err(e) = crate::protocol::text::check_model_id(&slm_id) {
        // Not echoed either: the gateway logs and lists an slm_id as it is.
        return Err(Refused::new(RejectReason::Other(format!("slm_id refused: {e}"))));
    }
    if let Err(e) = crate::device_id::check_device_id(&device_id) {
        // Said without echoing the id back: it may be the very escape sequence refused.
        return Err(Refused::new(RejectReason::Other(format!("device_id refused: {e}"))));
    }
    if let Some(key) = &policy.device_tokens {
        if !key.verify(&device_id, &auth) {
            return Err(Refused::new(RejectReason::Auth));
        }
    }
    let reply = Frame::Welcome { gateway_id: policy.gateway_id.clone(), llm_id: policy.llm_id.clone(), limits };
    Ok(Welcomed { device_id, slm_id, protocol_version, reply })
}

/// What a draining gateway tells a device that speaks `protocol_version`: `GoAway` (with
/// `redirect`, if the operator named another replica) for v2 and later; nothing for a v1
/// device, which cannot decode it and is simply closed at the end of the drain.
pub fn go_away(protocol_version: u16, redirect: Option<&str>) -> Option<Frame> {
    understands_go_away(protocol_version).then(|| Frame::GoAway { redirect: redirect.map(str::to_string) })
}

/// `retry_after_ms` of the `Busy` a draining gateway answers once it stops taking work: about
/// the time a device needs to reconnect elsewhere.
pub const DRAINING_RETRY_AFTER_MS: u32 = 500;

/// The refusal for a device beyond the gateway's connection limit.
pub fn overloaded() -> Refused {
    Refused::new(RejectReason::Overloaded)
}

/// What one request frame (after the handshake) asks the gateway to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Produce the token after this session's context.
    Escalate {
        /// Session.
        session_id: u64,
        /// Escalation seq.
        seq: u32,
        /// How to bring the gateway's copy up to date.
        context: ContextSync,
        /// How to choose the token.
        sampling: WireSampling,
        /// How long the device waits, capped at [`MAX_DEADLINE_MS`](crate::protocol::MAX_DEADLINE_MS).
        deadline: Duration,
        /// The draft to check (an `EscalateDraft`, v5), empty for a plain `Escalate`: answered
        /// with [`EscalationOutcome::Verified`].
        draft: Vec<u32>,
    },
    /// Free this session's state.
    EndSession {
        /// Session.
        session_id: u64,
    },
    /// A device's bundle report (v4): record it, answer with its `BundleOffer`.
    BundleReport {
        /// The bundle it runs.
        running: Option<BundleRef>,
        /// Tokens it escalated.
        escalations: u64,
        /// Of those, fallen back.
        fallbacks: u64,
    },
    /// A chunk of a bundle (v4): answer with `BundleChunk`, or an error if not offered.
    FetchBundle {
        /// Which bundle.
        sha256: Sha256Digest,
        /// From where.
        offset: u32,
    },
    /// Answer at once with this frame (a `Pong`, or an error for a bad request).
    Answer(Frame),
}

/// Classify a request stream's frame (or why it did not decode), validated against `limits`.
pub fn classify(decoded: Result<Frame, CodecError>, limits: &ValidationLimits) -> Request {
    let frame = match decoded {
        Ok(frame) => frame,
        Err(e) => {
            let code = if matches!(e, CodecError::Oversize { .. }) { ErrorCode::Oversize } else { ErrorCode::Malformed };
            return Request::Answer(error(None, None, code, e.to_string()));
        }
    };
    if let Err(e) = frame.validate(limits) {
        let (sid, seq) = frame.session_seq().map(|(s, q)| (Some(s), q)).unwrap_or((None, None));
        return Request::Answer(error(sid, seq, e.code(), e.to_string()));
    }
    match frame {
        Frame::Escalate { session_id, seq, context, sampling, deadline_ms } => {
            let deadline = Duration::from_millis(u64::from(deadline_ms.min(crate::protocol::MAX_DEADLINE_MS)));
            Request::Escalate { session_id, seq, context, sampling, deadline, draft: Vec::new() }
        }
        Frame::EscalateDraft { session_id, seq, context, draft, sampling, deadline_ms } => {
            let deadline = Duration::from_millis(u64::from(deadline_ms.min(crate::protocol::MAX_DEADLINE_MS)));
            Request::Escalate { session_id, seq, context, sampling, deadline, draft: draft.as_slice().to_vec() }
        }
        Frame::EndSession { session_id } => Request::EndSession { session_id },
        Frame::Ping { nonce } => Request::Answer(Frame::Pong { nonce }),
        Frame::BundleReport { running, escalations, fallbacks } => Request::BundleReport { running, escalations, fallbacks },
        Frame::FetchBundle { sha256, offset } => Request::FetchBundle { sha256, offset },
        other => Request::Answer(error(None, None, ErrorCode::Malformed, format!("unexpected {} frame after the handshake", other.kind()))),
    }
}

/// What became of an escalation at the gateway, in the gateway's own terms.
#[derive(Debug, Clone, PartialEq)]
pub enum EscalationOutcome {
    /// The LLM's token.
    Token {
        /// Chosen token.
        token_id: u32,
        /// Its log-probability.
        logprob: f32,
        /// Backend time, ms.
        llm_ms: u32,
    },
    /// The LLM checked a draft (v5): took its first `accepted` tokens and chose `token_id`
    /// after them.
    Verified {
        /// Draft tokens taken.
        accepted: u32,
        /// The LLM's token after them.
        token_id: u32,
        /// Its log-probability.
        logprob: f32,
        /// Backend time, ms.
        llm_ms: u32,
    },
    /// Refused at admission: the queue is full.
    Busy {
        /// Suggested wait.
        retry_after_ms: u32,
    },
    /// The context sync was not applied.
    Context(ContextError),
    /// The device already holds as many sessions as allowed.
    TooManySessions {
        /// The limit.
        limit: usize,
    },
    /// The gateway holds as many sessions as it may, all devices together: a new session
    /// waits until others end or expire (or goes to another replica).
    GatewayFull {
        /// The gateway's total limit.
        limit: usize,
    },
    /// The deadline passed before the backend ran it.
    Expired,
    /// The session ended before the backend ran it.
    SessionEnded,
    /// The backend refused the context as too long.
    ContextTooLong(String),
    /// The backend refused a token id.
    InvalidToken(String),
    /// The backend failed.
    BackendFailed(String),
    /// The gateway is stopping and dropped the work.
    Stopped,
}

/// The frame that tells the device about `outcome` of escalation (`session_id`, `seq`).
pub fn reply(session_id: u64, seq: u32, outcome: EscalationOutcome) -> Frame {
    let (sid, q) = (Some(session_id), Some(seq));
    match outcome {
        EscalationOutcome::Token { token_id, logprob, llm_ms } => Frame::Token { session_id, seq, token_id, logprob, llm_ms },
        EscalationOutcome::Verified { accepted, token_id, logprob, llm_ms } => Frame::Verified { session_id, seq, accepted, token_id, logprob, llm_ms },
        EscalationOutcome::Busy { retry_after_ms } => Frame::Busy { session_id, seq, retry_after_ms },
        EscalationOutcome::Context(e) => e.reply(session_id, seq),
        EscalationOutcome::TooManySessions { limit } => {
            error(sid, q, ErrorCode::TooManySessions, format!("too many sessions for this device (limit {limit})"))
        }
        EscalationOutcome::GatewayFull { limit } => {
            error(sid, q, ErrorCode::TooManySessions, format!("the gateway holds its maximum of {limit} sessions: try later or another gateway"))
        }
        EscalationOutcome::Expired => error(sid, q, ErrorCode::DeadlineExpired, "deadline passed in the queue".into()),
        EscalationOutcome::SessionEnded => error(sid, q, ErrorCode::UnknownSession, "the session ended before this escalation ran".into()),
        EscalationOutcome::ContextTooLong(m) => error(sid, q, ErrorCode::ContextTooLong, m),
        EscalationOutcome::InvalidToken(m) => error(sid, q, ErrorCode::InvalidToken, m),
        EscalationOutcome::BackendFailed(m) => error(sid, q, ErrorCode::BackendFailed, m),
        EscalationOutcome::Stopped => error(sid, q, ErrorCode::Internal, "the gateway is stopping".into()),
    }
}

/// The answer to a bundle request from a device that speaks `protocol_version`, when that
/// version has no bundle frames (a pre-v4 device cannot have sent one honestly): an error,
/// never a frame it cannot decode.
pub fn bundles_unsupported(protocol_version: u16) -> Option<Frame> {
    (!crate::protocol::understands_bundles(protocol_version))
        .then(|| error(None, None, ErrorCode::Malformed, format!("bundle frames need protocol version 4, this connection speaks {protocol_version}")))
}

/// The answer to an `EscalateDraft` from a device that speaks `protocol_version`, when that
/// version has no drafts (a pre-v5 device cannot have sent one honestly): an error it can
/// decode, never a `Verified`.
pub fn drafts_unsupported(protocol_version: u16, session_id: u64, seq: u32) -> Option<Frame> {
    (!crate::protocol::understands_drafts(protocol_version))
        .then(|| error(Some(session_id), Some(seq), ErrorCode::Malformed, format!("drafts need protocol version 5, this connection speaks {protocol_version}")))
}

/// The answer to `FetchBundle` for a bundle this device is not offered (or no longer is):
/// `BundleNotOffered` to a device that speaks `protocol_version` 6 or later, `UnknownSession`
/// (the code this answer had before v6, which older devices decode) to older ones.
pub fn bundle_not_offered(protocol_version: u16, sha256: &Sha256Digest) -> Frame {
    let code = if understands_v6_answers(protocol_version) { ErrorCode::BundleNotOffered } else { ErrorCode::UnknownSession };
    error(None, None, code, format!("bundle {} is not offered to this device", sha256.short()))
}

/// The answer to `EndSession` on a connection that speaks `protocol_version`, once the session
/// is dropped: `SessionEnded` from v6 on; `None` before, where the stream ends with no frame
/// (what those devices expect, and all a v1-v5 layout has to say).
pub fn end_session_answer(protocol_version: u16, session_id: u64) -> Option<Frame> {
    understands_v6_answers(protocol_version).then_some(Frame::SessionEnded { session_id })
}

/// The answer to a `BundleReport` whose figures cannot follow the connection's previous report
/// ([`crate::fleet::ReportedCounts::follows`]): `Malformed`, and the report is not recorded.
pub fn report_refused(why: &crate::fleet::ReportError) -> Frame {
    error(None, None, ErrorCode::Malformed, format!("bundle report refused: {why}"))
}

/// The answer to a request frame that exceeds the size limit, read from its length prefix.
pub fn oversize(len: usize, max: usize) -> Frame {
    error(None, None, ErrorCode::Oversize, format!("frame of {len} bytes exceeds {max}"))
}

/// Every `Error` the gateway sends, with its message escaped: it may quote a backend's error
/// or a decoder's complaint about a device's bytes, and a device logs it.
fn error(session_id: Option<u64>, seq: Option<u32>, code: ErrorCode, message: String) -> Frame {
    Frame::Error { session_id, seq, code, message: crate::protocol::text::escape_text(&message) }
}
