//! Arbitrary bytes from the network must never panic the protocol codec, and whatever it
//! accepts must behave like a real frame: re-encode, decode again, validate.
//!
//! Input layout: byte 0 picks the chunk size for the streaming decoder (1..=256); byte 1
//! picks the frame size limit class; the rest is the stream. The same rest is also tried as
//! one whole frame and, behind a correct length prefix, as one payload (so bincode and the
//! token-id varint decoder see most of the inputs, not only the framing).

#![no_main]

use common::protocol::{decode_frame, encode_frame, Frame, FrameDecoder, ValidationLimits, DEFAULT_MAX_FRAME_BYTES};
use libfuzzer_sys::fuzz_target;

/// Everything a decoded frame must support without panicking.
fn exercise(frame: &Frame, max: usize) {
    let _ = frame.validate(&ValidationLimits::default());
    let _ = frame.validate(&ValidationLimits { max_context_tokens: 16, vocab_size: Some(1000), max_string_bytes: 8 });
    let _ = frame.kind();
    let _ = frame.session_seq();
    // A decoded frame re-encodes (it fit once, it fits again: the encoding is canonical or
    // shorter) and decodes to something that encodes identically.
    let bytes = encode_frame(frame, max).expect("a decoded frame must re-encode within its limit");
    let again = decode_frame(&bytes, max).expect("a re-encoded frame must decode");
    assert_eq!(encode_frame(&again, max).ok(), Some(bytes), "encoding must be stable");
}

fuzz_target!(|data: &[u8]| {
    let (chunk, max, rest) = match data {
        [a, b, rest @ ..] => {
            let max = match b % 4 {
                0 => 16,
                1 => 256,
                2 => 4096,
                _ => DEFAULT_MAX_FRAME_BYTES,
            };
            (usize::from(*a) + 1, max, rest)
        }
        _ => (1, DEFAULT_MAX_FRAME_BYTES, data),
    };

    // 1. The bytes as one complete frame.
    if let Ok(frame) = decode_frame(rest, max) {
        exercise(&frame, max);
    }

    // 2. The bytes as a payload behind a correct prefix.
    let mut framed = (rest.len() as u32).to_le_bytes().to_vec();
    framed.extend_from_slice(rest);
    let whole = decode_frame(&framed, DEFAULT_MAX_FRAME_BYTES);
    if let Ok(frame) = &whole {
        exercise(frame, DEFAULT_MAX_FRAME_BYTES);
    }

    // 3. The bytes as a stream, in chunks; the streaming decoder never buffers much more
    //    than one frame plus one chunk, and stops for good after an oversize prefix.
    let mut decoder = FrameDecoder::new(max);
    for piece in rest.chunks(chunk) {
        decoder.push(piece);
        assert!(decoder.buffered_len() <= max + 4 + chunk, "decoder buffered too much");
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => exercise(&frame, max),
                Ok(None) => break,
                Err(_) if decoder.is_poisoned() => break,
                Err(_) => continue,
            }
        }
    }

    // 4. The framed payload through the streaming decoder must agree with decode_frame.
    let mut decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES);
    let mut streamed = None;
    for piece in framed.chunks(chunk) {
        decoder.push(piece);
        if let Some(r) = decoder.next_frame().transpose() {
            streamed = Some(r);
        }
    }
    assert_eq!(format!("{streamed:?}"), format!("{:?}", Some(&whole)), "stream and whole decode disagree");
});
