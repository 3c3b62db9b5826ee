//! The trace context an `Escalate` may carry (protocol v3): the W3C `traceparent` in binary,
//! 26 bytes, so that one trace shows a hard token from the device through the gateway's queue
//! into the LLM.
//!
//! On the wire it is an optional trailer of the `Escalate` payload: the frame's bincode fields,
//! then these 26 bytes or nothing (see [`super::codec`]). bincode has no field tags, so an
//! `Option` field would cost a byte on every escalation even with tracing off; a trailer that is
//! present or absent costs exactly nothing when absent, which keeps a later escalation within
//! its 64-byte budget. A device sends it only for a sampled span and only to a gateway that
//! said v3 (older gateways refuse trailing bytes), so the cost when on is 26 bytes per sampled
//! escalation and 0 for the rest.
//!
//! Layout (the fields of the text `traceparent` `00-<trace id>-<span id>-<flags>`, in order):
//! version (1 byte, 0), trace id (16), parent span id (8), trace flags (1).

use std::fmt;

/// Bytes a trace context adds to an `Escalate` frame.
pub const TRACE_CONTEXT_BYTES: usize = 26;

/// The only `traceparent` version there is.
const VERSION: u8 = 0;

/// The `sampled` bit of the trace flags.
const FLAG_SAMPLED: u8 = 0x01;

/// A W3C trace context: which trace an escalation belongs to and which device span asked.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    /// Trace id; never all zeros.
    pub trace_id: [u8; 16],
    /// The sender's span (the device's escalation span); never all zeros.
    pub span_id: [u8; 8],
    /// W3C trace flags (bit 0: sampled).
    pub flags: u8,
}

/// Why 26 bytes are not a trace context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TraceContextError {
    /// A `traceparent` version this build does not know.
    #[error("unknown traceparent version {0}")]
    Version(u8),
    /// An all-zero trace or span id, which W3C defines as invalid.
    #[error("all-zero trace or span id")]
    ZeroId,
}

impl TraceContext {
    /// A sampled context (the only kind a device sends), or `None` for an invalid (zero) id.
    pub fn sampled(trace_id: [u8; 16], span_id: [u8; 8]) -> Option<Self> {
        let tc = Self { trace_id, span_id, flags: FLAG_SAMPLED };
        tc.is_valid().then_some(tc)
    }

    /// Whether both ids are non-zero.
    pub fn is_valid(&self) -> bool {
        self.trace_id != [0; 16] && self.span_id != [0; 8]
    }

    /// Whether the sender sampled the trace.
    pub fn is_sampled(&self) -> bool {
        self.flags & FLAG_SAMPLED != 0
    }

    /// The 26 wire bytes.
    pub fn to_bytes(&self) -> [u8; TRACE_CONTEXT_BYTES] {
        let mut out = [0u8; TRACE_CONTEXT_BYTES];
        out[0] = VERSION;
        out[1..17].copy_from_slice(&self.trace_id);
        out[17..25].copy_from_slice(&self.span_id);
        out[25] = self.flags;
        out
    }

    /// Read the 26 wire bytes; anything but a version-0 context with non-zero ids is refused.
    pub fn from_bytes(bytes: &[u8; TRACE_CONTEXT_BYTES]) -> Result<Self, TraceContextError> {
        if bytes[0] != VERSION {
            return Err(TraceContextError::Version(bytes[0]));
        }
        let mut tc = Self { trace_id: [0; 16], span_id: [0; 8], flags: bytes[25] };
        tc.trace_id.copy_from_slice(&bytes[1..17]);
        tc.span_id.copy_from_slice(&bytes[17..25]);
        if !tc.is_valid() {
            return Err(TraceContextError::ZeroId);
        }
        Ok(tc)
    }
}

/// The text `traceparent` form, for logs and tests.
impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{VERSION:02x}-{}-{}-{:02x}", hex::encode(self.trace_id), hex::encode(self.span_id), self.flags)
    }
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceContext({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_context_is_26_bytes_and_round_trips() {
        let tc = TraceContext::sampled([7; 16], [9; 8]).unwrap();
        let bytes = tc.to_bytes();
        assert_eq!(bytes.len(), 26);
        assert_eq!(TraceContext::from_bytes(&bytes), Ok(tc));
        assert!(tc.is_sampled());
        assert_eq!(tc.to_string(), format!("00-{}-{}-01", "07".repeat(16), "09".repeat(8)));
    }

    #[test]
    fn zero_ids_and_unknown_versions_are_refused() {
        assert_eq!(TraceContext::sampled([0; 16], [1; 8]), None);
        assert_eq!(TraceContext::sampled([1; 16], [0; 8]), None);
        let mut bytes = TraceContext::sampled([1; 16], [2; 8]).unwrap().to_bytes();
        bytes[0] = 1;
        assert_eq!(TraceContext::from_bytes(&bytes), Err(TraceContextError::Version(1)));
        bytes[0] = 0;
        bytes[1..17].fill(0);
        assert_eq!(TraceContext::from_bytes(&bytes), Err(TraceContextError::ZeroId));
    }
}
