//! Reading the one frame a QUIC stream carries (the `Hello`, or one request).
//!
//! Every stream a device opens carries exactly one frame and then ends. The bytes go through
//! [`FrameDecoder`], so an oversize length prefix is refused from the prefix alone, before its
//! body is buffered: a device cannot make the gateway hold more than one frame limit per
//! stream. The rules are in [`OneFrame`], which is fed bytes and told when the stream ends, so
//! they are tested without sockets; [`read_frame`] only moves chunks from quinn into it
//! ([`read_request_frame`] also returns the trace context an `Escalate` may carry).
//!
//! A request stream is also bounded in time and shares its connection's byte budget
//! ([`crate::limits::BufferBudget`]): one that has not delivered its frame within the read
//! timeout, or whose bytes would take its connection (or the gateway) past the budget, is
//! stopped and its bytes freed, so partial frames cannot pin memory.

use common::protocol::{CodecError, Frame, FrameDecoder, TraceContext, LENGTH_PREFIX_BYTES};

use crate::limits::{ConnectionBudget, OverBudget};

/// Why a request stream was given up without an answer.
#[derive(Debug, thiserror::Error)]
pub enum ReadFailure {
    /// The stream was reset or the connection lost.
    #[error(transparent)]
    Transport(#[from] quinn::ReadError),
    /// The frame did not arrive within the read timeout.
    #[error("the frame was not complete within {0:?}")]
    TimedOut(std::time::Duration),
    /// Its bytes would exceed the connection's or the gateway's buffer budget.
    #[error(transparent)]
    OverBudget(#[from] OverBudget),
}

/// `STOP_SENDING` code of a stream given up on: too slow, or over the buffer budget.
const STOP_GIVEN_UP: u32 = 1;

/// The decode rules for a stream that must carry exactly one frame:
/// - an oversize length prefix is an error as soon as the prefix is in;
/// - a payload that does not decode is an error as soon as it is complete;
/// - any byte after the frame is an error (`TrailingBytes`, a malformed request);
/// - a stream that ends before the frame is complete is an error (`Truncated`).
#[derive(Debug)]
pub struct OneFrame {
    decoder: FrameDecoder,
    frame: Option<(Frame, Option<TraceContext>)>,
    /// The first bytes of the stream, kept to report a truncated frame's announced length.
    head: Vec<u8>,
    received: usize,
}

impl OneFrame {
    /// Rules for frames of at most `max_frame_bytes` of payload.
    pub fn new(max_frame_bytes: usize) -> Self {
        Self { decoder: FrameDecoder::new(max_frame_bytes), frame: None, head: Vec::with_capacity(LENGTH_PREFIX_BYTES), received: 0 }
    }

    /// Feed the next bytes of the stream. `Some(error)` means the stream is already known to
    /// be bad: answer now and stop reading it.
    pub fn push(&mut self, chunk: &[u8]) -> Option<CodecError> {
        if chunk.is_empty() {
            return None;
        }
        self.received = self.received.saturating_add(chunk.len());
        if self.frame.is_some() {
            return Some(CodecError::TrailingBytes(chunk.len()));
        }
        let missing = LENGTH_PREFIX_BYTES.saturating_sub(self.head.len());
        self.head.extend_from_slice(&chunk[..missing.min(chunk.len())]);
        self.decoder.push(chunk);
        match self.decoder.next_frame_traced() {
            Ok(None) => None,
            Ok(Some(frame)) => match self.decoder.buffered_len() {
                0 => {
                    self.frame = Some(frame);
                    None
                }
                extra => Some(CodecError::TrailingBytes(extra)),
            },
            Err(e) => Some(e),
        }
    }

    /// The stream ended: its frame, or why there is none.
    #[cfg(test)]
    pub fn finish(self) -> Result<Frame, CodecError> {
        self.finish_traced().map(|(frame, _)| frame)
    }

    /// [`Self::finish`], with the trace context an `Escalate` carried, if any.
    pub fn finish_traced(self) -> Result<(Frame, Option<TraceContext>), CodecError> {
        if let Some(frame) = self.frame {
            return Ok(frame);
        }
        let need = match <[u8; LENGTH_PREFIX_BYTES]>::try_from(self.head.as_slice()) {
            Ok(prefix) => LENGTH_PREFIX_BYTES.saturating_add(u32::from_le_bytes(prefix) as usize),
            Err(_) => LENGTH_PREFIX_BYTES,
        };
        Err(CodecError::Truncated { have: self.received, need })
    }
}

/// Read the one frame of `recv`. The outer error is the transport's (the stream was reset or
/// the connection lost: nobody to answer); the inner one is the device's (answer it). On an
/// early error the rest of the stream is refused with `STOP_SENDING`.
pub async fn read_frame(recv: &mut quinn::RecvStream, max_frame_bytes: usize) -> Result<Result<Frame, CodecError>, quinn::ReadError> {
    Ok(read_traced(recv, max_frame_bytes).await?.map(|(frame, _)| frame))
}

/// The frame of a handshake stream, and the trace context it carried (no budget: the
/// handshake has its own timeout and one stream).
async fn read_traced(recv: &mut quinn::RecvStream, max_frame_bytes: usize) -> Result<Result<(Frame, Option<TraceContext>), CodecError>, quinn::ReadError> {
    let mut one = OneFrame::new(max_frame_bytes);
    let chunk_limit = max_frame_bytes.saturating_add(LENGTH_PREFIX_BYTES);
    while let Some(chunk) = recv.read_chunk(chunk_limit, true).await? {
        if let Some(e) = one.push(&chunk.bytes) {
            let _ = recv.stop(0u32.into());
            return Ok(Err(e));
        }
    }
    Ok(one.finish_traced())
}

/// [`read_frame`] for a request stream: the frame and the trace context an `Escalate` carried.
/// Its bytes count against `budget` until the frame is complete, and it must be complete
/// within the budget's read timeout; otherwise the stream is stopped (`ReadFailure`, nobody to
/// answer) and its bytes freed.
pub async fn read_request_frame(recv: &mut quinn::RecvStream, max_frame_bytes: usize, budget: &ConnectionBudget) -> Result<Result<(Frame, Option<TraceContext>), CodecError>, ReadFailure> {
    let timeout = budget.read_timeout();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut held = budget.hold();
    let mut one = OneFrame::new(max_frame_bytes);
    let chunk_limit = max_frame_bytes.saturating_add(LENGTH_PREFIX_BYTES);
    loop {
        let chunk = match tokio::time::timeout_at(deadline, recv.read_chunk(chunk_limit, true)).await {
            Ok(chunk) => chunk?,
            Err(_) => {
                metrics::counter!("duet_gateway_streams_given_up_total", "reason" => "timeout").increment(1);
                let _ = recv.stop(STOP_GIVEN_UP.into());
                return Err(ReadFailure::TimedOut(timeout));
            }
        };
        let Some(chunk) = chunk else { break };
        if let Err(e) = held.add(chunk.bytes.len()) {
            metrics::counter!("duet_gateway_streams_given_up_total", "reason" => "buffer_budget").increment(1);
            let _ = recv.stop(STOP_GIVEN_UP.into());
            return Err(e.into());
        }
        if let Some(e) = one.push(&chunk.bytes) {
            let _ = recv.stop(0u32.into());
            return Ok(Err(e));
        }
    }
    Ok(one.finish_traced())
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::protocol::encode_frame;

    const MAX: usize = 1000;

    fn ping() -> Vec<u8> {
        encode_frame(&Frame::Ping { nonce: 7 }, MAX).unwrap()
    }

    /// Feed `chunks`, then end the stream (unless an error came first).
    fn read(chunks: &[&[u8]]) -> Result<Frame, CodecError> {
        let mut one = OneFrame::new(MAX);
        for c in chunks {
            if let Some(e) = one.push(c) {
                return Err(e);
            }
        }
        one.finish()
    }

    #[test]
    fn one_frame_in_any_chunking_is_read() {
        let bytes = ping();
        assert_eq!(read(&[&bytes]), Ok(Frame::Ping { nonce: 7 }));
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(read(&singles), Ok(Frame::Ping { nonce: 7 }));
        assert_eq!(read(&[&bytes[..2], &[], &bytes[2..]]), Ok(Frame::Ping { nonce: 7 }));
    }

    #[test]
    fn an_oversize_prefix_is_refused_before_any_body_arrives() {
        let mut one = OneFrame::new(MAX);
        assert_eq!(one.push(&[0xe9, 0x03]), None, "half a prefix says nothing yet");
        assert_eq!(one.push(&[0, 0]), Some(CodecError::Oversize { len: 1001, max: MAX }));
    }

    #[test]
    fn bytes_after_the_frame_are_trailing_whether_in_its_chunk_or_later() {
        let mut bytes = ping();
        bytes.push(0);
        assert_eq!(read(&[&bytes]), Err(CodecError::TrailingBytes(1)));
        assert_eq!(read(&[&ping(), &[1, 2]]), Err(CodecError::TrailingBytes(2)));
        assert_eq!(read(&[&ping(), &ping()]), Err(CodecError::TrailingBytes(ping().len())));
    }

    #[test]
    fn a_stream_that_ends_mid_frame_is_truncated() {
        let bytes = ping();
        assert_eq!(read(&[&bytes[..bytes.len() - 1]]), Err(CodecError::Truncated { have: bytes.len() - 1, need: bytes.len() }));
        assert_eq!(read(&[&bytes[..2]]), Err(CodecError::Truncated { have: 2, need: LENGTH_PREFIX_BYTES }));
        assert_eq!(read(&[]), Err(CodecError::Truncated { have: 0, need: LENGTH_PREFIX_BYTES }));
    }

    #[test]
    fn an_escalations_trace_context_is_read_with_it_in_any_chunking() {
        use common::protocol::{encode_frame_traced, ContextSync, WireSampling};
        let esc = Frame::Escalate { session_id: 1, seq: 1, context: ContextSync::Full { tokens: vec![5, 6].into() }, sampling: WireSampling::default(), deadline_ms: 100 };
        let tc = TraceContext::sampled([3; 16], [4; 8]).unwrap();
        let bytes = encode_frame_traced(&esc, Some(&tc), MAX).unwrap();
        for split in 0..bytes.len() {
            let mut one = OneFrame::new(MAX);
            assert_eq!(one.push(&bytes[..split]), None);
            assert_eq!(one.push(&bytes[split..]), None);
            assert_eq!(one.finish_traced(), Ok((esc.clone(), Some(tc))));
        }
    }

    #[test]
    fn a_payload_that_does_not_decode_is_malformed_as_soon_as_it_is_complete() {
        assert!(matches!(read(&[&[1, 0, 0, 0, 200]]), Err(CodecError::Malformed(_))));
    }
}
