//! The Duet wire protocol (v6; v1-v5 devices still served): message types, the frame codec and the pure per-session logic
//! that both ends run around it.
//!
//! Nothing in here touches a socket or an executor, so every rule of the protocol (framing,
//! size limits, context deltas, sequence ordering, late replies) can be tested and fuzzed
//! without a network. The QUIC transports in `edge-node` and `cloud-gateway` only move the
//! bytes that [`encode_frame`] produces; they read each request stream through a
//! [`FrameDecoder`], which refuses an oversize frame from its length prefix before buffering it.
//!
//! Layout, one job per file:
//! - [`messages`]: the [`Frame`] envelope and the types inside it.
//! - [`token_ids`]: the compact LEB128 encoding of token id lists.
//! - [`codec`]: length-prefixed bincode framing with hard size limits.
//! - [`trace_context`]: the optional W3C trace context behind an `Escalate` (v3).
//! - [`validate`]: semantic checks on decoded frames (counts, floats, strings).
//! - [`text`]: which characters a peer's strings may carry into logs, labels and listings.
//! - [`session_context`]: the gateway's copy of a session's tokens and its seq rules.
//! - [`context_tracker`]: the edge's view of what the gateway holds, producing deltas.
//! - [`reorder`]: releasing replies in seq order and dropping ones already resolved locally.

pub mod codec;
pub mod context_tracker;
pub mod messages;
pub mod reorder;
pub mod session_context;
pub mod text;
pub mod token_ids;
pub mod trace_context;
pub mod validate;

#[cfg(test)]
mod proptests;

pub use codec::{attach_trace_context, decode_frame, decode_frame_traced, encode_frame, encode_frame_traced, CodecError, FrameDecoder, HARD_MAX_FRAME_BYTES, LENGTH_PREFIX_BYTES};
pub use context_tracker::{ContextTracker, OutgoingSync};
pub use messages::{ContextSync, ErrorCode, Frame, Limits, RejectReason, WireSampling};
pub use reorder::{Inserted, ReorderBuffer, ReorderError};
pub use session_context::{ContextError, SessionContext};
pub use token_ids::{TokenIds, VarintError};
pub use trace_context::{TraceContext, TRACE_CONTEXT_BYTES};
pub use validate::{ValidationError, ValidationLimits};

/// Version a device announces in `Hello`. bincode has no field names or tags to fall back on,
/// so both ends must know which layout the other decodes: a gateway serves every version from
/// [`MIN_PROTOCOL_VERSION`] to this one and never sends a device a frame its version lacks; a
/// device refused with an older `supported` version says `Hello` again in that version.
///
/// v2 adds [`Frame::GoAway`] (graceful drain); v3 lets an `Escalate` end with a 26-byte
/// [`TraceContext`] (sent only to v3 gateways, only when sampled); v4 adds the router bundle
/// frames (`BundleReport`, `BundleOffer`, `FetchBundle`, `BundleChunk`: [`crate::fleet`]);
/// v5 adds draft verification ([`Frame::EscalateDraft`] → [`Frame::Verified`]: several
/// LLM-checked tokens per round trip); v6 adds typed answers where there were none or a
/// borrowed one ([`Frame::SessionEnded`] answers `EndSession`, [`ErrorCode::BundleNotOffered`]
/// refuses a `FetchBundle`); everything else is v1's layout.
pub const PROTOCOL_VERSION: u16 = 6;

/// Oldest version a gateway still serves: v1 devices get no `GoAway` (their connection is
/// simply closed at the end of a drain).
pub const MIN_PROTOCOL_VERSION: u16 = 1;

/// Whether a device speaking `version` understands [`Frame::GoAway`].
pub fn understands_go_away(version: u16) -> bool {
    version >= 2
}

/// Whether a gateway speaking `version` accepts an `Escalate` with a trace context (older ones
/// refuse the trailing bytes as malformed).
pub fn accepts_trace_context(version: u16) -> bool {
    version >= 3
}

/// Whether a peer speaking `version` has the bundle frames (v4): a device reports its bundle
/// and fetches one only from a gateway that has them; a gateway answers them only to v4 devices.
pub fn understands_bundles(version: u16) -> bool {
    version >= 4
}

/// Whether a peer speaking `version` has draft verification (v5): a device sends
/// `EscalateDraft` only to a gateway that has it; a gateway answers one only on a v5 connection.
pub fn understands_drafts(version: u16) -> bool {
    version >= 5
}

/// Whether a device speaking `version` decodes v6's answers: [`Frame::SessionEnded`] (older
/// devices get an `EndSession` stream that ends with no frame) and
/// [`ErrorCode::BundleNotOffered`] (older devices get `UnknownSession`).
pub fn understands_v6_answers(version: u16) -> bool {
    version >= 6
}

/// Most tokens in one `EscalateDraft` draft: bounds the LLM work one escalation can ask for
/// beyond its context, and the answer's `accepted`.
pub const MAX_DRAFT_TOKENS: usize = 16;

/// QUIC ALPN identifier; a peer speaking another protocol fails the TLS handshake instead of
/// sending us bytes we would try to decode. It names the framing (length-prefixed bincode, one
/// request per stream), which v2 keeps; the message layout's version is `Hello`'s.
pub const ALPN: &[u8] = b"duet/1";

/// Longest `GoAway::redirect`, in bytes: a `host:port`.
pub const MAX_REDIRECT_BYTES: usize = 256;

/// Longest deadline a device may ask for, in ms: the gateway caps `Escalate::deadline_ms` here
/// and the device never asks for more (its prompt pre-sync asks for exactly this).
pub const MAX_DEADLINE_MS: u32 = 30_000;

/// Default cap on one frame's payload: far above any honest escalation (a full 4k-token
/// context is ~12 KiB) yet small enough that a hostile peer cannot make us buffer much.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 64 * 1024;
