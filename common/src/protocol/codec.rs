//! Framing: a `u32` little-endian payload length, then the bincode-2 encoding of one [`Frame`];
//! an `Escalate` payload may end with a 26-byte [`TraceContext`] (v3), any other trailing byte
//! is an error.
//!
//! Size limits are enforced on the length prefix before any payload is buffered, and bincode
//! runs with an allocation limit so a small frame cannot claim a huge string. A frame that
//! decodes is therefore bounded in memory by construction; semantic limits are separate
//! ([`super::validate`]).

use bincode::config::{self, Config};

use super::messages::Frame;
use super::trace_context::{TraceContext, TRACE_CONTEXT_BYTES};

/// Size of the length prefix in front of every payload.
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// Absolute cap on a payload, whatever limit a caller passes: bounds the memory any
/// configuration can be talked into, and the bincode allocation limit below.
pub const HARD_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// Why bytes could not be turned into a frame, or a frame into bytes. Every variant is a
/// protocol violation by the peer (or a frame we must not send), never a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The payload length exceeds the limit; reported from the prefix alone.
    #[error("frame payload of {len} bytes exceeds the limit of {max}")]
    Oversize {
        /// Announced (decode) or actual (encode) payload length.
        len: usize,
        /// The limit in force.
        max: usize,
    },
    /// The payload is not a valid bincode `Frame`.
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// Bytes left over after one complete frame where exactly one was expected.
    #[error("{0} trailing bytes after the frame")]
    TrailingBytes(usize),
    /// Fewer bytes than the prefix announces (or than a prefix needs).
    #[error("truncated frame: {have} of {need} bytes")]
    Truncated {
        /// Bytes available.
        have: usize,
        /// Bytes the frame needs.
        need: usize,
    },
    /// bincode refused to encode a frame (not expected for [`Frame`]).
    #[error("cannot encode frame: {0}")]
    Encode(String),
    /// A [`FrameDecoder`] already hit an oversize prefix; framing is lost, close the stream.
    #[error("stream framing lost after an oversize frame")]
    Poisoned,
}

/// The effective limit: the caller's, capped by [`HARD_MAX_FRAME_BYTES`].
fn effective_max(max: usize) -> usize {
    max.min(HARD_MAX_FRAME_BYTES)
}

/// Encode one frame with its length prefix, refusing frames over `max_frame_bytes` of payload
/// so we never send what the peer is bound to reject.
pub fn encode_frame(frame: &Frame, max_frame_bytes: usize) -> Result<Vec<u8>, CodecError> {
    let payload =
        bincode::serde::encode_to_vec(frame, config::standard()).map_err(|e| CodecError::Encode(e.to_string()))?;
    let max = effective_max(max_frame_bytes);
    let len = u32::try_from(payload.len()).ok().filter(|_| payload.len() <= max);
    let Some(len) = len else {
        return Err(CodecError::Oversize { len: payload.len(), max });
    };
    let mut out = Vec::with_capacity(LENGTH_PREFIX_BYTES + payload.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Encode one frame, followed by `trace` when given: the optional trace context of an
/// `Escalate` (none = not a byte more than [`encode_frame`]). Only an `Escalate` carries one.
pub fn encode_frame_traced(frame: &Frame, trace: Option<&TraceContext>, max_frame_bytes: usize) -> Result<Vec<u8>, CodecError> {
    let mut bytes = encode_frame(frame, max_frame_bytes)?;
    if let Some(tc) = trace {
        if !matches!(frame, Frame::Escalate { .. } | Frame::EscalateDraft { .. }) {
            return Err(CodecError::Encode(format!("a trace context rides only on escalate, not {}", frame.kind())));
        }
        attach_trace_context(&mut bytes, tc, max_frame_bytes)?;
    }
    Ok(bytes)
}

/// Append `trace` to an encoded `Escalate` frame (its length prefix included), as
/// [`encode_frame_traced`] would have written it; refused, leaving `frame` as it was, if the
/// result would exceed `max_frame_bytes` of payload. The caller vouches that `frame` is one
/// complete `Escalate` (a gateway refuses a trace context behind anything else).
pub fn attach_trace_context(frame: &mut Vec<u8>, trace: &TraceContext, max_frame_bytes: usize) -> Result<(), CodecError> {
    let len = read_prefix(frame)?;
    if frame.len() != LENGTH_PREFIX_BYTES.saturating_add(len) {
        return Err(CodecError::Encode("not one complete frame".into()));
    }
    let max = effective_max(max_frame_bytes);
    let new_len = len + TRACE_CONTEXT_BYTES;
    let prefix = u32::try_from(new_len).ok().filter(|_| new_len <= max).ok_or(CodecError::Oversize { len: new_len, max })?;
    frame[..LENGTH_PREFIX_BYTES].copy_from_slice(&prefix.to_le_bytes());
    frame.extend_from_slice(&trace.to_bytes());
    Ok(())
}

/// Decode exactly one complete frame (prefix included); anything after it is an error, so a
/// message-per-stream transport notices a peer that sends more than it should. An `Escalate`'s
/// trace context is accepted and dropped ([`decode_frame_traced`] returns it).
pub fn decode_frame(bytes: &[u8], max_frame_bytes: usize) -> Result<Frame, CodecError> {
    decode_frame_traced(bytes, max_frame_bytes).map(|(frame, _)| frame)
}

/// [`decode_frame`], with the trace context an `Escalate` carried, if any.
pub fn decode_frame_traced(bytes: &[u8], max_frame_bytes: usize) -> Result<(Frame, Option<TraceContext>), CodecError> {
    let max = effective_max(max_frame_bytes);
    let len = read_prefix(bytes)?;
    if len > max {
        return Err(CodecError::Oversize { len, max });
    }
    let body = bytes.get(LENGTH_PREFIX_BYTES..).unwrap_or_default();
    match body.len().cmp(&len) {
        std::cmp::Ordering::Less => {
            Err(CodecError::Truncated { have: bytes.len(), need: LENGTH_PREFIX_BYTES.saturating_add(len) })
        }
        std::cmp::Ordering::Greater => Err(CodecError::TrailingBytes(body.len() - len)),
        std::cmp::Ordering::Equal => decode_payload(body),
    }
}

/// The announced payload length, or `Truncated` if fewer than 4 bytes are there.
fn read_prefix(bytes: &[u8]) -> Result<usize, CodecError> {
    let prefix: [u8; LENGTH_PREFIX_BYTES] = bytes
        .get(..LENGTH_PREFIX_BYTES)
        .and_then(|p| p.try_into().ok())
        .ok_or(CodecError::Truncated { have: bytes.len(), need: LENGTH_PREFIX_BYTES })?;
    // u32 always fits in usize on the 32/64-bit targets we build for; saturate otherwise so
    // the size check rejects it.
    Ok(usize::try_from(u32::from_le_bytes(prefix)).unwrap_or(usize::MAX))
}

/// Decode one payload (no prefix) that must be consumed entirely: one frame, and after an
/// `Escalate` optionally its trace context (exactly [`TRACE_CONTEXT_BYTES`], a valid one).
fn decode_payload(payload: &[u8]) -> Result<(Frame, Option<TraceContext>), CodecError> {
    let (frame, used) = decode_with_limit(payload)?;
    let rest = payload.get(used..).unwrap_or_default();
    match <&[u8; TRACE_CONTEXT_BYTES]>::try_from(rest) {
        _ if rest.is_empty() => Ok((frame, None)),
        Ok(trailer) if matches!(frame, Frame::Escalate { .. } | Frame::EscalateDraft { .. }) => match TraceContext::from_bytes(trailer) {
            Ok(tc) => Ok((frame, Some(tc))),
            Err(e) => Err(CodecError::Malformed(format!("trace context: {e}"))),
        },
        _ => Err(CodecError::TrailingBytes(rest.len())),
    }
}

/// bincode counts every value it decodes against its limit at in-memory size (a varint u64
/// of 1 byte claims 8), on top of the announced length of strings and byte strings. A
/// `Frame` has a small fixed number of scalars, so this headroom covers them.
const CLAIM_HEADROOM: usize = 1024;

/// bincode with an allocation limit: at least the payload plus [`CLAIM_HEADROOM`] (no honest
/// frame claims more) and at most 16x that. bincode allocates a string's announced length
/// before reading it, so without a limit a 10-byte frame could ask for gigabytes. The limit
/// is a const generic, hence the size classes.
fn decode_with_limit(payload: &[u8]) -> Result<(Frame, usize), CodecError> {
    fn run<C: Config>(payload: &[u8], cfg: C) -> Result<(Frame, usize), CodecError> {
        bincode::serde::decode_from_slice(payload, cfg).map_err(|e| CodecError::Malformed(e.to_string()))
    }
    const KIB: usize = 1024;
    let std = config::standard();
    match payload.len().saturating_add(CLAIM_HEADROOM) {
        0..=4096 => run(payload, std.with_limit::<{ 4 * KIB }>()),
        4097..=65_536 => run(payload, std.with_limit::<{ 64 * KIB }>()),
        65_537..=1_048_576 => run(payload, std.with_limit::<{ 1024 * KIB }>()),
        _ => run(payload, std.with_limit::<{ HARD_MAX_FRAME_BYTES + CLAIM_HEADROOM }>()),
    }
}

/// Incremental decoder for a byte stream carrying several frames (the control stream), fed
/// in whatever chunks the transport delivers. Holds at most one partial frame plus the
/// current chunk, because an oversize prefix is rejected before its body is kept.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    max: usize,
    poisoned: bool,
}

impl FrameDecoder {
    /// A decoder enforcing `max_frame_bytes` of payload per frame.
    pub fn new(max_frame_bytes: usize) -> Self {
        Self { buf: Vec::new(), max: effective_max(max_frame_bytes), poisoned: false }
    }

    /// The payload limit in force (after the hard cap).
    pub fn max_frame_bytes(&self) -> usize {
        self.max
    }

    /// Bytes received but not yet returned as frames, for back-pressure and leak checks.
    pub fn buffered_len(&self) -> usize {
        self.buf.len()
    }

    /// Whether an oversize prefix was seen; the stream must then be closed.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Append bytes from the transport. Cheap; all checks happen in [`Self::next_frame`],
    /// except that a pending oversize prefix makes the decoder drop the data at once.
    pub fn push(&mut self, data: &[u8]) {
        if self.poisoned {
            return;
        }
        self.buf.extend_from_slice(data);
        if matches!(read_prefix(&self.buf), Ok(len) if len > self.max) {
            // Keep only the prefix so next_frame can report the size; never the body.
            self.buf.truncate(LENGTH_PREFIX_BYTES);
        }
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed. A malformed payload is
    /// consumed and reported, so the caller may answer `Error` and carry on (framing is
    /// intact); an oversize prefix poisons the decoder because framing is lost. An `Escalate`'s
    /// trace context is dropped ([`Self::next_frame_traced`] returns it).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, CodecError> {
        self.next_frame_traced().map(|f| f.map(|(frame, _)| frame))
    }

    /// [`Self::next_frame`], with the trace context an `Escalate` carried, if any.
    pub fn next_frame_traced(&mut self) -> Result<Option<(Frame, Option<TraceContext>)>, CodecError> {
        if self.poisoned {
            return Err(CodecError::Poisoned);
        }
        let len = match read_prefix(&self.buf) {
            Ok(len) => len,
            Err(_) => return Ok(None),
        };
        if len > self.max {
            self.poisoned = true;
            self.buf = Vec::new();
            return Err(CodecError::Oversize { len, max: self.max });
        }
        let end = LENGTH_PREFIX_BYTES + len;
        let Some(payload) = self.buf.get(LENGTH_PREFIX_BYTES..end) else {
            return Ok(None);
        };
        let result = decode_payload(payload);
        self.buf.drain(..end);
        if self.buf.is_empty() && self.buf.capacity() > 2 * LENGTH_PREFIX_BYTES + self.max {
            // Do not hold on to a large buffer after a burst.
            self.buf = Vec::new();
        }
        result.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::super::messages::{ContextSync, ErrorCode, WireSampling};
    use super::super::DEFAULT_MAX_FRAME_BYTES;
    use super::*;

    const MAX: usize = DEFAULT_MAX_FRAME_BYTES;

    fn ping(n: u64) -> Frame {
        Frame::Ping { nonce: n }
    }

    fn escalate(ids: Vec<u32>) -> Frame {
        Frame::Escalate {
            session_id: 1,
            seq: 2,
            context: ContextSync::Full { tokens: ids.into() },
            sampling: WireSampling::default(),
            deadline_ms: 200,
        }
    }

    #[test]
    fn round_trip_one_frame() {
        let f = escalate(vec![1, 2, 70_000]);
        let bytes = encode_frame(&f, MAX).unwrap();
        let len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
        assert_eq!(len + 4, bytes.len());
        assert_eq!(decode_frame(&bytes, MAX), Ok(f));
    }

    #[test]
    fn encode_refuses_oversize() {
        let f = escalate(vec![100_000; 100]);
        let need = encode_frame(&f, MAX).unwrap().len() - 4;
        assert_eq!(encode_frame(&f, need), encode_frame(&f, MAX));
        assert_eq!(encode_frame(&f, need - 1), Err(CodecError::Oversize { len: need, max: need - 1 }));
    }

    #[test]
    fn decode_rejects_oversize_prefix_without_body() {
        let bytes = 1000u32.to_le_bytes();
        assert_eq!(decode_frame(&bytes, 999), Err(CodecError::Oversize { len: 1000, max: 999 }));
        // The hard cap applies whatever the caller asks for.
        let huge = u32::MAX.to_le_bytes();
        assert_eq!(
            decode_frame(&huge, usize::MAX),
            Err(CodecError::Oversize { len: u32::MAX as usize, max: HARD_MAX_FRAME_BYTES })
        );
    }

    #[test]
    fn decode_truncated_and_trailing() {
        let bytes = encode_frame(&ping(5), MAX).unwrap();
        assert!(matches!(decode_frame(&bytes[..2], MAX), Err(CodecError::Truncated { .. })));
        assert!(matches!(decode_frame(&bytes[..bytes.len() - 1], MAX), Err(CodecError::Truncated { .. })));
        let mut long = bytes.clone();
        long.extend_from_slice(&[0, 0]);
        assert_eq!(decode_frame(&long, MAX), Err(CodecError::TrailingBytes(2)));
    }

    #[test]
    fn payload_with_unconsumed_bytes_is_trailing() {
        // Ping{nonce: 5} is [variant 9, 5]; announce one extra byte inside the payload.
        let mut bytes = encode_frame(&ping(5), MAX).unwrap();
        bytes.push(0);
        let len = (bytes.len() - 4) as u32;
        bytes[..4].copy_from_slice(&len.to_le_bytes());
        assert_eq!(decode_frame(&bytes, MAX), Err(CodecError::TrailingBytes(1)));
    }

    #[test]
    fn garbage_is_malformed() {
        // Variant index 200 does not exist.
        let bytes = [1, 0, 0, 0, 200];
        assert!(matches!(decode_frame(&bytes, MAX), Err(CodecError::Malformed(_))));
    }

    #[test]
    fn huge_string_claim_is_refused_not_allocated() {
        // Error { session_id: None, seq: None, code: Malformed, message: <len 2^60> }:
        // bincode varint 255 = u64 marker, then 8 bytes.
        let mut payload = vec![7u8, 0, 0, 0, 255];
        payload.extend_from_slice(&(1u64 << 60).to_le_bytes());
        let mut bytes = (payload.len() as u32).to_le_bytes().to_vec();
        bytes.extend_from_slice(&payload);
        assert!(matches!(decode_frame(&bytes, MAX), Err(CodecError::Malformed(_))));
    }

    /// bincode also counts scalars at in-memory size against its limit; frames whose payload
    /// sits just under a size class must still decode (proptest found this with 43 ids).
    #[test]
    fn every_size_class_edge_decodes() {
        // 5 bytes per id: the 4 KiB, 64 KiB and 1 MiB classes end near 600, 12900 and 209500.
        let counts = (0..1200).chain(12_800..13_200).chain((209_300..209_700).step_by(11));
        for n in counts {
            let f = escalate(vec![u32::MAX; n]);
            let bytes = encode_frame(&f, HARD_MAX_FRAME_BYTES).unwrap();
            let decoded = decode_frame(&bytes, HARD_MAX_FRAME_BYTES);
            assert_eq!(decoded, Ok(f), "{n} ids, {} bytes", bytes.len());
        }
    }

    #[test]
    fn decoder_handles_byte_by_byte_and_batches() {
        let frames = [ping(1), escalate(vec![5; 30]), ping(3)];
        let mut stream = Vec::new();
        for f in &frames {
            stream.extend(encode_frame(f, MAX).unwrap());
        }
        let mut d = FrameDecoder::new(MAX);
        let mut got = Vec::new();
        for b in &stream {
            d.push(std::slice::from_ref(b));
            while let Some(f) = d.next_frame().unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, frames);
        assert_eq!(d.buffered_len(), 0);

        let mut d = FrameDecoder::new(MAX);
        d.push(&stream);
        for f in &frames {
            assert_eq!(d.next_frame().unwrap().as_ref(), Some(f));
        }
        assert_eq!(d.next_frame(), Ok(None));
    }

    #[test]
    fn decoder_drops_oversize_body_and_poisons() {
        let mut d = FrameDecoder::new(100);
        d.push(&101u32.to_le_bytes());
        d.push(&[0u8; 90]);
        assert!(d.buffered_len() <= 4, "body must not be buffered");
        assert_eq!(d.next_frame(), Err(CodecError::Oversize { len: 101, max: 100 }));
        assert!(d.is_poisoned());
        d.push(&encode_frame(&ping(1), MAX).unwrap());
        assert_eq!(d.buffered_len(), 0);
        assert_eq!(d.next_frame(), Err(CodecError::Poisoned));
    }

    #[test]
    fn decoder_skips_a_malformed_frame_and_continues() {
        let mut d = FrameDecoder::new(MAX);
        d.push(&[1, 0, 0, 0, 200]);
        d.push(&encode_frame(&ping(9), MAX).unwrap());
        assert!(matches!(d.next_frame(), Err(CodecError::Malformed(_))));
        assert_eq!(d.next_frame(), Ok(Some(ping(9))));
        assert!(!d.is_poisoned());
    }

    fn trace() -> TraceContext {
        TraceContext::sampled([0xab; 16], [0xcd; 8]).unwrap()
    }

    #[test]
    fn a_trace_context_costs_an_escalation_exactly_26_bytes_and_nothing_when_absent() {
        let f = escalate(vec![1, 2, 3]);
        let plain = encode_frame(&f, MAX).unwrap();
        assert_eq!(encode_frame_traced(&f, None, MAX).unwrap(), plain);
        let traced = encode_frame_traced(&f, Some(&trace()), MAX).unwrap();
        assert_eq!(traced.len(), plain.len() + 26);
        assert_eq!(decode_frame_traced(&traced, MAX), Ok((f.clone(), Some(trace()))));
        assert_eq!(decode_frame_traced(&plain, MAX), Ok((f.clone(), None)));
        assert_eq!(decode_frame(&traced, MAX), Ok(f.clone()), "the plain decoder accepts and drops it");
        let mut attached = plain.clone();
        attach_trace_context(&mut attached, &trace(), MAX).unwrap();
        assert_eq!(attached, traced);
    }

    #[test]
    fn a_trace_context_behind_anything_but_an_escalation_is_trailing_bytes() {
        assert!(matches!(encode_frame_traced(&ping(1), Some(&trace()), MAX), Err(CodecError::Encode(_))));
        let mut bytes = encode_frame(&ping(1), MAX).unwrap();
        attach_trace_context(&mut bytes, &trace(), MAX).unwrap();
        assert_eq!(decode_frame_traced(&bytes, MAX), Err(CodecError::TrailingBytes(26)));
        // 25 or 27 bytes behind an escalation are not a trace context either.
        let mut short = encode_frame_traced(&escalate(vec![1]), Some(&trace()), MAX).unwrap();
        short.pop();
        let len = (short.len() - 4) as u32;
        short[..4].copy_from_slice(&len.to_le_bytes());
        assert_eq!(decode_frame_traced(&short, MAX), Err(CodecError::TrailingBytes(25)));
    }

    #[test]
    fn an_invalid_trace_context_is_malformed() {
        let mut bytes = encode_frame_traced(&escalate(vec![1]), Some(&trace()), MAX).unwrap();
        let n = bytes.len();
        bytes[n - 26] = 7; // version 7
        assert!(matches!(decode_frame_traced(&bytes, MAX), Err(CodecError::Malformed(m)) if m.contains("version")));
        bytes[n - 26] = 0;
        bytes[n - 25..n - 9].fill(0); // zero trace id
        assert!(matches!(decode_frame_traced(&bytes, MAX), Err(CodecError::Malformed(_))));
    }

    #[test]
    fn attaching_a_trace_context_respects_the_frame_limit() {
        let plain = encode_frame(&escalate(vec![1, 2]), MAX).unwrap();
        let payload = plain.len() - 4;
        let mut bytes = plain.clone();
        assert_eq!(attach_trace_context(&mut bytes, &trace(), payload + 25), Err(CodecError::Oversize { len: payload + 26, max: payload + 25 }));
        assert_eq!(bytes, plain, "left as it was");
        assert!(attach_trace_context(&mut bytes, &trace(), payload + 26).is_ok());
        let mut torn = plain[..plain.len() - 1].to_vec();
        assert!(matches!(attach_trace_context(&mut torn, &trace(), MAX), Err(CodecError::Encode(_))));
    }

    #[test]
    fn the_stream_decoder_returns_a_trace_context_with_its_escalation() {
        let mut d = FrameDecoder::new(MAX);
        d.push(&encode_frame_traced(&escalate(vec![4]), Some(&trace()), MAX).unwrap());
        d.push(&encode_frame(&ping(2), MAX).unwrap());
        assert_eq!(d.next_frame_traced(), Ok(Some((escalate(vec![4]), Some(trace())))));
        assert_eq!(d.next_frame_traced(), Ok(Some((ping(2), None))));
    }

    #[test]
    fn error_frame_round_trip() {
        let f = Frame::Error {
            session_id: Some(3),
            seq: None,
            code: ErrorCode::ContextTooLong,
            message: "too long".into(),
        };
        assert_eq!(decode_frame(&encode_frame(&f, MAX).unwrap(), MAX), Ok(f));
    }
}
