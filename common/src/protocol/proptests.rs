//! Property tests across the codec: arbitrary frames round-trip through every decoding path
//! and any byte string is answered with `Ok` or `Err`, never a panic. Also the wire budget.

use proptest::prelude::*;

use super::codec::{decode_frame, decode_frame_traced, encode_frame, encode_frame_traced, FrameDecoder, LENGTH_PREFIX_BYTES};
use super::messages::{ContextSync, ErrorCode, Frame, Limits, RejectReason, WireSampling};
use super::token_ids::{decode_varints, encode_varints, TokenIds};
use super::trace_context::{TraceContext, TRACE_CONTEXT_BYTES};
use super::DEFAULT_MAX_FRAME_BYTES;
use crate::fleet::{BundleRef, Sha256Digest};

const MAX: usize = DEFAULT_MAX_FRAME_BYTES;

fn token_ids() -> impl Strategy<Value = TokenIds> {
    prop::collection::vec(any::<u32>(), 0..64).prop_map(TokenIds)
}

fn text() -> impl Strategy<Value = String> {
    ".{0,24}"
}

fn context_sync() -> impl Strategy<Value = ContextSync> {
    prop_oneof![
        (any::<u32>(), token_ids()).prop_map(|(base_len, tokens)| ContextSync::Delta { base_len, tokens }),
        token_ids().prop_map(|tokens| ContextSync::Full { tokens }),
    ]
}

fn sampling() -> impl Strategy<Value = WireSampling> {
    (any::<f32>(), any::<u32>(), any::<f32>(), any::<Option<u64>>())
        .prop_map(|(temperature, top_k, top_p, seed)| WireSampling { temperature, top_k, top_p, seed })
}

fn reject_reason() -> impl Strategy<Value = RejectReason> {
    prop_oneof![
        any::<u16>().prop_map(|supported| RejectReason::Version { supported }),
        text().prop_map(|expected| RejectReason::TokenizerMismatch { expected }),
        Just(RejectReason::Auth),
        Just(RejectReason::Overloaded),
        text().prop_map(RejectReason::Other),
    ]
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    prop::sample::select(vec![
        ErrorCode::Malformed,
        ErrorCode::Oversize,
        ErrorCode::UnknownSession,
        ErrorCode::OutOfOrder,
        ErrorCode::Replayed,
        ErrorCode::ContextTooLong,
        ErrorCode::InvalidToken,
        ErrorCode::BackendFailed,
        ErrorCode::DeadlineExpired,
        ErrorCode::NotWelcomed,
        ErrorCode::Internal,
        ErrorCode::TooManySessions,
        ErrorCode::BundleNotOffered,
    ])
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        (any::<u16>(), text(), text(), text(), text()).prop_map(|(v, d, a, f, s)| Frame::Hello {
            protocol_version: v,
            device_id: d,
            auth: a,
            tokenizer_fingerprint: f,
            slm_id: s,
        }),
        (text(), text(), any::<[u32; 4]>()).prop_map(|(g, l, [a, b, c, d])| Frame::Welcome {
            gateway_id: g,
            llm_id: l,
            limits: Limits { max_frame_bytes: a, max_context_tokens: b, max_sessions: c, service_time_ms: d },
        }),
        reject_reason().prop_map(|reason| Frame::Reject { reason }),
        (any::<u64>(), any::<u32>(), context_sync(), sampling(), any::<u32>()).prop_map(
            |(session_id, seq, context, sampling, deadline_ms)| Frame::Escalate {
                session_id,
                seq,
                context,
                sampling,
                deadline_ms
            }
        ),
        (any::<u64>(), any::<u32>(), any::<u32>(), any::<f32>(), any::<u32>()).prop_map(
            |(session_id, seq, token_id, logprob, llm_ms)| Frame::Token { session_id, seq, token_id, logprob, llm_ms }
        ),
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(session_id, seq, retry_after_ms)| Frame::Busy {
            session_id,
            seq,
            retry_after_ms
        }),
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(session_id, seq, held_len)| Frame::ContextMissing {
            session_id,
            seq,
            held_len
        }),
        (any::<Option<u64>>(), any::<Option<u32>>(), error_code(), text())
            .prop_map(|(session_id, seq, code, message)| Frame::Error { session_id, seq, code, message }),
        any::<u64>().prop_map(|session_id| Frame::EndSession { session_id }),
        any::<u64>().prop_map(|session_id| Frame::SessionEnded { session_id }),
        any::<u64>().prop_map(|nonce| Frame::Ping { nonce }),
        any::<u64>().prop_map(|nonce| Frame::Pong { nonce }),
        prop::option::of(text()).prop_map(|redirect| Frame::GoAway { redirect }),
        (prop::option::of(bundle_ref()), any::<u64>(), any::<u64>())
            .prop_map(|(running, escalations, fallbacks)| Frame::BundleReport { running, escalations, fallbacks }),
        prop::option::of(bundle_ref()).prop_map(|bundle| Frame::BundleOffer { bundle }),
        (any::<[u8; 32]>(), any::<u32>()).prop_map(|(d, offset)| Frame::FetchBundle { sha256: Sha256Digest(d), offset }),
        (any::<[u8; 32]>(), any::<u32>(), any::<u32>(), prop::collection::vec(any::<u8>(), 0..256))
            .prop_map(|(d, offset, total, bytes)| Frame::BundleChunk { sha256: Sha256Digest(d), offset, total, bytes }),
        (any::<u64>(), any::<u32>(), context_sync(), token_ids(), sampling(), any::<u32>()).prop_map(
            |(session_id, seq, context, draft, sampling, deadline_ms)| Frame::EscalateDraft { session_id, seq, context, draft, sampling, deadline_ms }
        ),
        (any::<u64>(), any::<u32>(), any::<u32>(), any::<u32>(), any::<f32>(), any::<u32>()).prop_map(
            |(session_id, seq, accepted, token_id, logprob, llm_ms)| Frame::Verified { session_id, seq, accepted, token_id, logprob, llm_ms }
        ),
    ]
}

/// Short strings that often hold what a log must not print: newlines, escapes, NUL, bidi
/// controls, separators, zero-width characters, next to ordinary and non-ASCII ones.
fn hostile_text() -> impl Strategy<Value = String> {
    let hostile = prop::sample::select(vec!['\n', '\r', '\u{1b}', '\0', '\u{7f}', '\u{85}', '\u{202E}', '\u{2066}', '\u{2028}', '\u{200B}', '\u{FEFF}', ' ', 'é']);
    prop::collection::vec(prop_oneof![3 => prop::char::range('!', '~'), 1 => hostile, 1 => any::<char>()], 0..24).prop_map(|cs| cs.into_iter().collect())
}

fn bundle_ref() -> impl Strategy<Value = BundleRef> {
    (text(), any::<[u8; 32]>(), any::<u32>()).prop_map(|(version, d, size)| BundleRef { version, sha256: Sha256Digest(d), size })
}

/// Frames with NaN floats are not equal to themselves; compare their encodings then, which
/// are bit-exact.
fn assert_same(decoded: &Frame, original: &Frame, original_bytes: &[u8]) -> Result<(), TestCaseError> {
    #[allow(clippy::eq_op)]
    let comparable = original == original;
    if comparable {
        prop_assert_eq!(decoded, original);
    }
    let again = encode_frame(decoded, MAX).ok();
    prop_assert_eq!(again.as_deref(), Some(original_bytes));
    Ok(())
}

/// Split `bytes` at the given cut points (taken modulo the length).
fn chunks<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.push(0);
    points.push(bytes.len());
    points.sort_unstable();
    points.windows(2).map(|w| &bytes[w[0]..w[1]]).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn frame_round_trips(f in frame()) {
        let bytes = encode_frame(&f, MAX).unwrap();
        let decoded = decode_frame(&bytes, MAX).unwrap();
        assert_same(&decoded, &f, &bytes)?;
    }

    #[test]
    fn frame_stream_round_trips_in_any_chunking(
        frames in prop::collection::vec(frame(), 1..8),
        cuts in prop::collection::vec(any::<usize>(), 0..32),
    ) {
        let encoded: Vec<Vec<u8>> = frames.iter().map(|f| encode_frame(f, MAX).unwrap()).collect();
        let stream = encoded.concat();
        let mut d = FrameDecoder::new(MAX);
        let mut got = Vec::new();
        for chunk in chunks(&stream, &cuts) {
            d.push(chunk);
            while let Some(f) = d.next_frame().unwrap() {
                got.push(f);
            }
        }
        prop_assert_eq!(got.len(), frames.len());
        for ((g, f), b) in got.iter().zip(&frames).zip(&encoded) {
            assert_same(g, f, b)?;
        }
        prop_assert_eq!(d.buffered_len(), 0);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512), max in 0usize..1024) {
        let _ = decode_frame(&bytes, max);
        let mut d = FrameDecoder::new(max);
        d.push(&bytes);
        for _ in 0..bytes.len() + 1 {
            if let Ok(None) | Err(_) = d.next_frame() {
                break;
            }
        }
    }

    #[test]
    fn arbitrary_payload_behind_valid_prefix_never_panics(
        payload in prop::collection::vec(any::<u8>(), 0..256),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        // A right length prefix gets the bytes past framing into bincode and the varint decoder.
        let mut bytes = (payload.len() as u32).to_le_bytes().to_vec();
        bytes.extend_from_slice(&payload);
        let whole = decode_frame(&bytes, MAX);
        let mut d = FrameDecoder::new(MAX);
        let mut streamed = None;
        for chunk in chunks(&bytes, &cuts) {
            d.push(chunk);
            if let Some(r) = d.next_frame().transpose() {
                streamed = Some(r);
            }
        }
        // Debug, not ==: a decoded NaN is not equal to itself.
        prop_assert_eq!(format!("{streamed:?}"), format!("{:?}", Some(&whole)));
        if let Ok(f) = whole {
            // Whatever decodes re-encodes and decodes to the same frame.
            let again = encode_frame(&f, MAX).unwrap();
            let f2 = decode_frame(&again, MAX).unwrap();
            prop_assert_eq!(encode_frame(&f2, MAX).unwrap(), again);
        }
    }

    #[test]
    fn a_traced_escalation_round_trips_with_its_context_and_costs_26_bytes(
        f in frame(),
        trace_id in any::<[u8; 16]>(),
        span_id in any::<[u8; 8]>(),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let Some(tc) = TraceContext::sampled(trace_id, span_id) else { return Ok(()) };
        let plain = encode_frame(&f, MAX).unwrap();
        match encode_frame_traced(&f, Some(&tc), MAX) {
            Ok(traced) => {
                let is_escalation = matches!(f, Frame::Escalate { .. } | Frame::EscalateDraft { .. });
                prop_assert!(is_escalation);
                prop_assert_eq!(traced.len(), plain.len() + TRACE_CONTEXT_BYTES);
                let (decoded, got) = decode_frame_traced(&traced, MAX).unwrap();
                prop_assert_eq!(got, Some(tc));
                assert_same(&decoded, &f, &plain)?;
                let mut d = FrameDecoder::new(MAX);
                let mut streamed = None;
                for chunk in chunks(&traced, &cuts) {
                    d.push(chunk);
                    if let Some(r) = d.next_frame_traced().unwrap() {
                        streamed = Some(r);
                    }
                }
                prop_assert_eq!(streamed.map(|(_, t)| t), Some(Some(tc)));
            }
            Err(_) => {
                let is_escalation = matches!(f, Frame::Escalate { .. } | Frame::EscalateDraft { .. });
                prop_assert!(!is_escalation, "only escalations carry a trace context");
            }
        }
    }

    /// A decoded draft escalation or answer is either valid or refused with a typed error,
    /// and a valid one never holds more than the draft limit.
    #[test]
    fn draft_frames_validate_within_their_bounds(f in frame(), vocab in 1u32..200_000) {
        let lim = super::ValidationLimits { max_context_tokens: 4096, vocab_size: Some(vocab), ..Default::default() };
        match (&f, f.validate(&lim)) {
            (Frame::EscalateDraft { draft, context, .. }, Ok(())) => {
                prop_assert!((1..=super::MAX_DRAFT_TOKENS).contains(&draft.len()));
                prop_assert!(draft.as_slice().iter().chain(context.tokens().as_slice()).all(|&t| t < vocab));
                prop_assert!(context.resulting_len().unwrap() + draft.len() <= 4096);
            }
            (Frame::Verified { accepted, token_id, .. }, Ok(())) => {
                prop_assert!(*accepted as usize <= super::MAX_DRAFT_TOKENS && *token_id < vocab);
            }
            _ => {}
        }
    }

    /// Whatever a peer puts in a `Hello` or an `Error`, a frame that validates carries nothing
    /// a log line, a label or the fleet listing could not print as it is.
    #[test]
    fn a_frame_that_validates_carries_no_unsafe_character_in_its_strings(
        device_id in hostile_text(), slm_id in hostile_text(), message in hostile_text(),
    ) {
        use super::text::first_unsafe;
        let lim = super::ValidationLimits::default();
        let hello = Frame::Hello { protocol_version: 6, device_id: device_id.clone(), auth: String::new(), tokenizer_fingerprint: "0".repeat(64), slm_id: slm_id.clone() };
        if hello.validate(&lim).is_ok() {
            prop_assert!(first_unsafe(&device_id).is_none() && first_unsafe(&slm_id).is_none());
            prop_assert!(slm_id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-/:+@".contains(&b)));
        }
        let error = Frame::Error { session_id: None, seq: None, code: ErrorCode::Internal, message: message.clone() };
        prop_assert_eq!(error.validate(&lim).is_ok(), first_unsafe(&message).is_none());
        let escaped = Frame::Error { session_id: None, seq: None, code: ErrorCode::Internal, message: super::text::escape_text(&message) };
        prop_assert_eq!(escaped.validate(&lim), Ok(()));
    }

    #[test]
    fn token_ids_round_trip(ids in prop::collection::vec(any::<u32>(), 0..256)) {
        let mut bytes = Vec::new();
        encode_varints(&ids, &mut bytes);
        prop_assert_eq!(decode_varints(&bytes), Ok(ids.clone()));
        let f = Frame::Escalate {
            session_id: 1,
            seq: 1,
            context: ContextSync::Full { tokens: TokenIds(ids) },
            sampling: WireSampling::default(),
            deadline_ms: 1,
        };
        prop_assert_eq!(decode_frame(&encode_frame(&f, MAX).unwrap(), MAX), Ok(f));
    }

    #[test]
    fn varint_decoder_is_canonical(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        // Whatever the strict decoder accepts re-encodes to exactly the same bytes.
        if let Ok(ids) = decode_varints(&bytes) {
            let mut again = Vec::new();
            encode_varints(&ids, &mut again);
            prop_assert_eq!(again, bytes);
        }
    }
}

/// Deterministic ids in 0..40000 (an LCG, so the sizes printed are reproducible).
fn ids_below_40000(n: usize, mut state: u64) -> Vec<u32> {
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) % 40_000) as u32
        })
        .collect()
}

fn escalation(seq: u32, context: ContextSync) -> Frame {
    Frame::Escalate { session_id: 3, seq, context, sampling: WireSampling::default(), deadline_ms: 240 }
}

/// The design's wire budget: <= 64 bytes per escalation after the first, prefix included.
#[test]
fn typical_escalation_sizes() {
    let first = escalation(0, ContextSync::Full { tokens: ids_below_40000(40, 1).into() });
    let first_len = encode_frame(&first, MAX).unwrap().len();
    let delta = escalation(1, ContextSync::Delta { base_len: 40, tokens: ids_below_40000(12, 2).into() });
    let delta_len = encode_frame(&delta, MAX).unwrap().len();
    // Worst case for this budget: every id needs 3 LEB128 bytes, seq and base_len need 3
    // bincode bytes each, a deadline above 250 ms.
    let worst = Frame::Escalate {
        session_id: 200,
        seq: 60_000,
        context: ContextSync::Delta { base_len: 30_000, tokens: vec![39_999; 12].into() },
        sampling: WireSampling { temperature: 0.7, top_k: 50, top_p: 0.9, seed: None },
        deadline_ms: 60_000,
    };
    let worst_len = encode_frame(&worst, MAX).unwrap().len();
    println!("escalation bytes incl. {LENGTH_PREFIX_BYTES}-byte prefix: first Full(40 ids) = {first_len}, Delta(12 ids) = {delta_len}, worst Delta(12 ids >= 16384) = {worst_len}");
    assert!(delta_len <= 64, "delta escalation is {delta_len} bytes");
    assert!(worst_len <= 64, "worst-case delta escalation is {worst_len} bytes");
    assert!(first_len <= 160, "first escalation is {first_len} bytes");
    // Tracing on: a sampled escalation carries its trace context, 26 bytes more; off, none.
    let tc = TraceContext::sampled([1; 16], [2; 8]).unwrap();
    assert_eq!(encode_frame_traced(&delta, None, MAX).unwrap().len(), delta_len);
    assert_eq!(encode_frame_traced(&delta, Some(&tc), MAX).unwrap().len(), delta_len + 26);
}

/// The draft's wire budget: a later draft escalation costs at most 64 bytes plus 3 per draft
/// token (prefix included), and its answer stays small.
#[test]
fn draft_escalations_stay_within_their_budget() {
    for n in 1..=super::MAX_DRAFT_TOKENS {
        let worst = Frame::EscalateDraft {
            session_id: 200,
            seq: 60_000,
            context: ContextSync::Delta { base_len: 30_000, tokens: vec![39_999; 12].into() },
            draft: vec![39_999; n].into(),
            sampling: WireSampling { temperature: 0.7, top_k: 50, top_p: 0.9, seed: None },
            deadline_ms: 60_000,
        };
        let len = encode_frame(&worst, MAX).unwrap().len();
        assert!(len <= 64 + 3 * n, "a draft escalation of {n} tokens is {len} bytes");
    }
    let answer = Frame::Verified { session_id: 200, seq: 60_000, accepted: 16, token_id: 151_000, logprob: -0.3, llm_ms: 900 };
    assert!(encode_frame(&answer, MAX).unwrap().len() <= 24);
}
