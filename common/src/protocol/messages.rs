//! The messages of the protocol, as one envelope enum.
//!
//! bincode writes an enum variant as its index and a struct as its fields in order, with no
//! names. So: never reorder variants or fields, only append, and bump
//! [`PROTOCOL_VERSION`](super::PROTOCOL_VERSION) for anything else. A variant appended in a
//! later version is never sent to a peer that announced an earlier one (v1 peers cannot
//! decode [`Frame::GoAway`], so a gateway sends it only to devices that said `Hello` with
//! version 2 or later; the bundle frames, v4, only to v4 devices, which alone send the
//! requests they answer; `Verified`, v5, only in answer to `EscalateDraft`, which only v5
//! devices send to v5 gateways; `SessionEnded` and the `BundleNotOffered` error code, v6, only
//! to v6 devices).

use serde::{Deserialize, Serialize};

use super::token_ids::TokenIds;
use crate::fleet::{BundleRef, Sha256Digest};
use crate::sampling::SamplingParams;

/// Every message on every stream, in one enum, so a single decoder handles all of them and an
/// unexpected message on a stream is a typed value rather than a decode failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    /// Device → gateway, first frame on the control stream: who is asking and with which
    /// tokenizer, since token ids mean nothing unless both ends share it.
    Hello {
        /// The version the device speaks: the gateway serves
        /// [`MIN_PROTOCOL_VERSION`](super::MIN_PROTOCOL_VERSION)`..=`[`PROTOCOL_VERSION`](super::PROTOCOL_VERSION)
        /// and sends nothing a device of this version cannot decode.
        protocol_version: u16,
        /// Stable device identity, for per-device limits and logs.
        device_id: String,
        /// Bearer credential; opaque to the protocol.
        auth: String,
        /// Lowercase hex SHA-256 from [`crate::fingerprint::tokenizer_fingerprint`].
        tokenizer_fingerprint: String,
        /// The edge model's name, for metrics and to spot mismatched deployments.
        slm_id: String,
    },
    /// Gateway → device: handshake accepted, with the limits the device must respect.
    Welcome {
        /// Which gateway replica answered, for tracing a session across a fleet.
        gateway_id: String,
        /// The cloud model's name, for metrics and logs on the device.
        llm_id: String,
        /// Limits that apply to this connection.
        limits: Limits,
    },
    /// Gateway → device: handshake refused, with a reason the device can act on.
    Reject {
        /// Why.
        reason: RejectReason,
    },
    /// Device → gateway: produce the one token that follows this session's context.
    ///
    /// v3: the payload may end with a 26-byte W3C trace context (sampled escalations only; see
    /// [`super::trace_context`]), outside these fields so that it costs nothing when absent.
    Escalate {
        /// Device-chosen session id, unique on this device. Small numbers (a counter) keep
        /// the frame compact: bincode spends 1 byte below 251 and 9 bytes on a random u64.
        session_id: u64,
        /// Per-session escalation number, strictly increasing; orders replies and rejects
        /// replays.
        seq: u32,
        /// The context up to (not including) the position asked for.
        context: ContextSync,
        /// How to choose the token.
        sampling: WireSampling,
        /// How long the device will wait, in ms from sending; the gateway drops work that
        /// cannot finish in time instead of spending the LLM on a reply nobody reads.
        deadline_ms: u32,
    },
    /// Gateway → device: the token asked for by (`session_id`, `seq`).
    Token {
        /// Session of the escalation.
        session_id: u64,
        /// Seq of the escalation.
        seq: u32,
        /// The chosen token.
        token_id: u32,
        /// Its log-probability under the LLM (untempered), for routing statistics.
        logprob: f32,
        /// Time the backend spent, so the device can separate network from compute.
        llm_ms: u32,
    },
    /// Gateway → device: overloaded, answered at once so the device falls back immediately
    /// rather than waiting out its deadline.
    Busy {
        /// Session of the escalation.
        session_id: u64,
        /// Seq of the escalation.
        seq: u32,
        /// Hint for when to escalate again.
        retry_after_ms: u32,
    },
    /// Gateway → device: the delta's `base_len` does not match what the gateway holds (or the
    /// session is unknown, e.g. after a gateway restart). The device must resend `Full`.
    ContextMissing {
        /// Session of the escalation.
        session_id: u64,
        /// Seq of the escalation.
        seq: u32,
        /// How many tokens the gateway holds for the session (0 if none).
        held_len: u32,
    },
    /// Either direction: a request failed for a reason other than load or context.
    Error {
        /// Session concerned, if the failure is tied to one.
        session_id: Option<u64>,
        /// Escalation concerned, if any.
        seq: Option<u32>,
        /// Machine-readable class of failure.
        code: ErrorCode,
        /// Human-readable detail for logs; never parsed.
        message: String,
    },
    /// Device → gateway: the session is over; the gateway may free its context now instead
    /// of waiting for the idle timeout. Answered by [`Frame::SessionEnded`] on a v6 connection;
    /// before v6, by the stream ending with no frame.
    EndSession {
        /// Session to drop.
        session_id: u64,
    },
    /// Liveness probe on the control stream, answered by [`Frame::Pong`] with the same nonce.
    Ping {
        /// Echoed back.
        nonce: u64,
    },
    /// Answer to [`Frame::Ping`].
    Pong {
        /// The ping's nonce.
        nonce: u64,
    },
    /// Gateway → device (v2), alone on a stream the gateway opens: this gateway is draining.
    /// Reconnect now (to `redirect` if given, else to another of the device's gateway
    /// addresses) and resync each session with `Full` there; send nothing new on this
    /// connection, whose answers in flight still arrive. Not a failure: nothing falls back.
    GoAway {
        /// Where to reconnect (`host:port`), if the gateway knows better than the device's list.
        redirect: Option<String>,
    },
    /// Device → gateway (v4), on a request stream: the bundle it runs and what it did, right
    /// after `Welcome` and at every poll; answered by [`Frame::BundleOffer`]. Also how an
    /// operator sees the fleet (`/v1/fleet`).
    BundleReport {
        /// The bundle it runs; `None`: the router it was started with.
        running: Option<BundleRef>,
        /// Tokens escalated since the device started.
        escalations: u64,
        /// Of those, answered by the SLM's own token (timeout, `Busy`, link down).
        fallbacks: u64,
    },
    /// Gateway → device (v4), the answer to `BundleReport`: the bundle this device should run
    /// for its SLM (by the rollout's percentage), or `None` (keep what it runs).
    BundleOffer {
        /// The bundle to run.
        bundle: Option<BundleRef>,
    },
    /// Device → gateway (v4): the bytes of an offered bundle from `offset`.
    FetchBundle {
        /// The bundle, by its digest.
        sha256: Sha256Digest,
        /// First byte wanted.
        offset: u32,
    },
    /// Gateway → device (v4), the answer to `FetchBundle`: one chunk of the bundle (at most
    /// [`MAX_CHUNK_BYTES`](crate::fleet::MAX_CHUNK_BYTES)).
    BundleChunk {
        /// The bundle, by its digest.
        sha256: Sha256Digest,
        /// Where the chunk starts.
        offset: u32,
        /// The bundle's whole size.
        total: u32,
        /// The chunk.
        bytes: Vec<u8>,
    },
    /// Device → gateway (v5): an escalation that also asks the LLM to check a draft. `draft`
    /// is the SLM's token at the position asked for followed by its continuation (at most
    /// [`MAX_DRAFT_TOKENS`](super::MAX_DRAFT_TOKENS)); the gateway runs context and draft in
    /// one pass and answers [`Frame::Verified`]. Sent only to v5 gateways; may carry a trace
    /// context like `Escalate`.
    EscalateDraft {
        /// As in `Escalate`.
        session_id: u64,
        /// As in `Escalate`.
        seq: u32,
        /// The context up to (not including) the position asked for; the draft is not part of
        /// it (the gateway appends the accepted draft tokens itself, see [`Frame::Verified`]).
        context: ContextSync,
        /// The SLM's tokens from the position asked for on, at least one.
        draft: TokenIds,
        /// How to choose the tokens.
        sampling: WireSampling,
        /// As in `Escalate`.
        deadline_ms: u32,
    },
    /// Gateway → device (v5), the answer to `EscalateDraft`: the LLM took the first `accepted`
    /// draft tokens as its own and chose `token_id` at the position after them (the first
    /// rejected position, or the bonus position after a fully accepted draft). The LLM's token
    /// at the position asked for is `draft[0]` when `accepted >= 1`, else `token_id`. The
    /// gateway appends the accepted draft tokens to the session's context before answering,
    /// so the device's next delta starts after them.
    Verified {
        /// Session of the escalation.
        session_id: u64,
        /// Seq of the escalation.
        seq: u32,
        /// Draft tokens the LLM accepted (at most the draft's length).
        accepted: u32,
        /// The LLM's token after the accepted ones.
        token_id: u32,
        /// Its log-probability under the LLM (untempered).
        logprob: f32,
        /// Time the backend spent.
        llm_ms: u32,
    },
    /// Gateway → device (v6), the answer to `EndSession`: the gateway holds nothing of the
    /// session any more (whether it held it or not: ending a session is idempotent) and has
    /// dropped its queued work.
    SessionEnded {
        /// The session ended.
        session_id: u64,
    },
}

impl Frame {
    /// Variant name without data, for metrics labels and logs that must not print tokens or
    /// credentials.
    pub fn kind(&self) -> &'static str {
        match self {
            Frame::Hello { .. } => "hello",
            Frame::Welcome { .. } => "welcome",
            Frame::Reject { .. } => "reject",
            Frame::Escalate { .. } => "escalate",
            Frame::Token { .. } => "token",
            Frame::Busy { .. } => "busy",
            Frame::ContextMissing { .. } => "context_missing",
            Frame::Error { .. } => "error",
            Frame::EndSession { .. } => "end_session",
            Frame::Ping { .. } => "ping",
            Frame::Pong { .. } => "pong",
            Frame::GoAway { .. } => "go_away",
            Frame::BundleReport { .. } => "bundle_report",
            Frame::BundleOffer { .. } => "bundle_offer",
            Frame::FetchBundle { .. } => "fetch_bundle",
            Frame::BundleChunk { .. } => "bundle_chunk",
            Frame::EscalateDraft { .. } => "escalate_draft",
            Frame::Verified { .. } => "verified",
            Frame::SessionEnded { .. } => "session_ended",
        }
    }

    /// The (session, seq) a frame refers to, so replies can be routed without matching on
    /// every variant at each call site.
    pub fn session_seq(&self) -> Option<(u64, Option<u32>)> {
        match *self {
            Frame::Escalate { session_id, seq, .. }
            | Frame::EscalateDraft { session_id, seq, .. }
            | Frame::Verified { session_id, seq, .. }
            | Frame::Token { session_id, seq, .. }
            | Frame::Busy { session_id, seq, .. }
            | Frame::ContextMissing { session_id, seq, .. } => Some((session_id, Some(seq))),
            Frame::Error { session_id: Some(session_id), seq, .. } => Some((session_id, seq)),
            Frame::EndSession { session_id } | Frame::SessionEnded { session_id } => Some((session_id, None)),
            _ => None,
        }
    }
}

/// What the gateway allows on a connection, sent in `Welcome` so the device can stay within
/// it instead of learning by rejection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Largest frame payload the gateway accepts, in bytes (length prefix excluded).
    pub max_frame_bytes: u32,
    /// Longest session context the gateway will hold, in tokens.
    pub max_context_tokens: u32,
    /// Most concurrent sessions per connection.
    pub max_sessions: u32,
    /// The gateway's recent backend p50 in ms; feeds the device's escalation deadline.
    pub service_time_ms: u32,
}

/// Why a `Hello` was refused; each variant tells the device what to fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RejectReason {
    /// The gateway speaks another protocol version.
    Version {
        /// The version it supports.
        supported: u16,
    },
    /// The device's tokenizer differs, so its token ids would be misread.
    TokenizerMismatch {
        /// The gateway's fingerprint.
        expected: String,
    },
    /// Credential missing or invalid.
    Auth,
    /// The gateway cannot take another connection now; try another replica or later.
    Overloaded,
    /// Anything else, for logs.
    Other(String),
}

/// How the gateway brings its copy of the session context up to date. Sending only what was
/// appended since the last escalation is what keeps messages small without shipping KV caches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContextSync {
    /// Append `tokens` to the `base_len` tokens the gateway already holds; valid only if it
    /// holds exactly `base_len` (else it answers `ContextMissing`).
    Delta {
        /// The gateway's held length this delta assumes.
        base_len: u32,
        /// Tokens appended since.
        tokens: TokenIds,
    },
    /// Replace the gateway's copy with the whole context: first escalation, or recovery.
    Full {
        /// The whole context.
        tokens: TokenIds,
    },
}

impl ContextSync {
    /// Context length after applying this sync, `None` on overflow (hostile input), so limit
    /// checks can be done before touching any state.
    pub fn resulting_len(&self) -> Option<usize> {
        match self {
            ContextSync::Delta { base_len, tokens } => usize::try_from(*base_len).ok()?.checked_add(tokens.len()),
            ContextSync::Full { tokens } => Some(tokens.len()),
        }
    }

    /// The ids carried, for validation against the vocabulary.
    pub fn tokens(&self) -> &TokenIds {
        match self {
            ContextSync::Delta { tokens, .. } | ContextSync::Full { tokens } => tokens,
        }
    }
}

/// Sampling settings on the wire: fixed-width integers (unlike [`SamplingParams`]'s `usize`)
/// so the encoding does not depend on the platform. The default is greedy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WireSampling {
    /// Softmax temperature; 0 = greedy.
    pub temperature: f32,
    /// Keep the k most likely tokens; 0 = no limit.
    pub top_k: u32,
    /// Nucleus mass in (0, 1]; 1 = no limit.
    pub top_p: f32,
    /// Seed for reproducible sampling.
    pub seed: Option<u64>,
}

impl Default for WireSampling {
    fn default() -> Self {
        Self { temperature: 0.0, top_k: 0, top_p: 1.0, seed: None }
    }
}

impl From<SamplingParams> for WireSampling {
    fn from(p: SamplingParams) -> Self {
        Self {
            temperature: p.temperature,
            // A top-k beyond u32 is no limit in practice.
            top_k: u32::try_from(p.top_k).unwrap_or(u32::MAX),
            top_p: p.top_p,
            seed: p.seed,
        }
    }
}

impl From<WireSampling> for SamplingParams {
    fn from(w: WireSampling) -> Self {
        Self {
            temperature: w.temperature,
            top_k: usize::try_from(w.top_k).unwrap_or(usize::MAX),
            top_p: w.top_p,
            seed: w.seed,
        }
    }
}

/// Machine-readable failure classes for [`Frame::Error`], so the device can decide between
/// retrying, resyncing and giving up without parsing messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    /// A frame could not be decoded or failed validation.
    Malformed,
    /// A frame exceeded the size limit.
    Oversize,
    /// The session ended before an escalation of it ran (before v6 also: the bundle a
    /// `FetchBundle` asks for is not offered to this device).
    UnknownSession,
    /// A seq lower than one already applied.
    OutOfOrder,
    /// A seq equal to one already applied.
    Replayed,
    /// The context would exceed `max_context_tokens`.
    ContextTooLong,
    /// A token id outside the vocabulary.
    InvalidToken,
    /// The LLM backend failed.
    BackendFailed,
    /// The deadline passed before the token was ready.
    DeadlineExpired,
    /// A request arrived before a successful `Hello`/`Welcome`. Not sent by v1 gateways (they
    /// answer any first frame with `Welcome` or `Reject`); kept so later variants keep their
    /// bincode index.
    NotWelcomed,
    /// A bug or unexpected state on the sender's side, or a gateway that is stopping.
    Internal,
    /// The device already holds as many sessions as the gateway allows (`Limits::max_sessions`).
    TooManySessions,
    /// (v6) The bundle a `FetchBundle` asks for is not offered to this device (any more): the
    /// device drops the download and reports again. Sent to pre-v6 devices as `UnknownSession`,
    /// which they cannot tell from a session error but decode.
    BundleNotOffered,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_sampling_is_greedy() {
        let s = WireSampling::default();
        assert!(SamplingParams::from(s).is_greedy());
        assert_eq!(SamplingParams::from(s), SamplingParams::default());
    }

    #[test]
    fn sampling_params_round_trip() {
        let p = SamplingParams { temperature: 0.7, top_k: 40, top_p: 0.9, seed: Some(7) };
        assert_eq!(SamplingParams::from(WireSampling::from(p)), p);
        let huge = SamplingParams { top_k: usize::MAX, ..p };
        assert_eq!(WireSampling::from(huge).top_k, u32::MAX);
    }

    #[test]
    fn resulting_len() {
        let d = ContextSync::Delta { base_len: 10, tokens: vec![1, 2, 3].into() };
        assert_eq!(d.resulting_len(), Some(13));
        let f = ContextSync::Full { tokens: vec![1, 2].into() };
        assert_eq!(f.resulting_len(), Some(2));
        assert_eq!(f.tokens().as_slice(), &[1, 2]);
    }

    #[test]
    fn session_seq_and_kind() {
        let t = Frame::Token { session_id: 4, seq: 9, token_id: 1, logprob: -0.1, llm_ms: 3 };
        assert_eq!(t.session_seq(), Some((4, Some(9))));
        assert_eq!(t.kind(), "token");
        let e = Frame::Error { session_id: None, seq: None, code: ErrorCode::Internal, message: String::new() };
        assert_eq!(e.session_seq(), None);
        assert_eq!(Frame::EndSession { session_id: 2 }.session_seq(), Some((2, None)));
        assert_eq!(Frame::Ping { nonce: 1 }.kind(), "ping");
        assert_eq!(Frame::GoAway { redirect: None }.kind(), "go_away");
        assert_eq!(Frame::GoAway { redirect: None }.session_seq(), None);
        assert_eq!(Frame::SessionEnded { session_id: 2 }.session_seq(), Some((2, None)));
        assert_eq!(Frame::SessionEnded { session_id: 2 }.kind(), "session_ended");
    }
}
