//! Semantic checks on decoded frames: a frame that decodes is well-formed bincode, not yet
//! safe to act on. Run [`Frame::validate`] on everything read from the network before it
//! reaches the session store, the sampler or the model (an id beyond the vocabulary would
//! index past the embedding table), or a log line, a metric label or the fleet listing.
//!
//! Strings are checked by what they are ([`super::text`]): an id (`device_id`, `slm_id`, a
//! bundle version) by a character set and a length, so that it can be printed anywhere as it
//! is; free text (`Error::message`, a `Reject` reason, the gateway's and the LLM's names in
//! `Welcome`) by its length and the absence of control, bidi and invisible characters; the
//! bearer credential (`auth`) only by its length, since it is compared, never printed. Reported
//! figures are checked for consistency ([`crate::fleet::ReportedCounts`]).

use super::messages::{ErrorCode, Frame, Limits, RejectReason, WireSampling};
use super::text::{check_model_id, first_unsafe, ModelIdError};
use super::token_ids::TokenIds;
use super::{MAX_DRAFT_TOKENS, MAX_REDIRECT_BYTES};
use crate::device_id::{check_device_id, DeviceIdError};
use crate::fleet::{ReportError, ReportedCounts};

/// Length of a lowercase hex SHA-256, the form of `tokenizer_fingerprint`.
const FINGERPRINT_HEX_LEN: usize = 64;

/// The bounds a frame is checked against; built from the connection's [`Limits`] plus what
/// only the receiving side knows (its vocabulary size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidationLimits {
    /// Longest context a sync may produce, in tokens.
    pub max_context_tokens: u32,
    /// Token ids must be below this; `None` skips the check (the device does not know the
    /// LLM's vocabulary; the gateway does).
    pub vocab_size: Option<u32>,
    /// Longest string field (ids, credentials, messages), in bytes; keeps logs and maps small.
    pub max_string_bytes: usize,
}

impl Default for ValidationLimits {
    fn default() -> Self {
        Self { max_context_tokens: 32_768, vocab_size: None, max_string_bytes: 4096 }
    }
}

impl ValidationLimits {
    /// Limits matching what a gateway announced in `Welcome`.
    pub fn from_limits(limits: &Limits) -> Self {
        Self { max_context_tokens: limits.max_context_tokens, ..Self::default() }
    }
}

/// Why a decoded frame must not be acted on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValidationError {
    /// The context would exceed the limit (or overflow).
    #[error("context of {len} tokens exceeds the limit of {max}")]
    ContextTooLong {
        /// Resulting length (saturated on overflow).
        len: usize,
        /// Limit.
        max: u32,
    },
    /// A token id is outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab_size}")]
    InvalidToken {
        /// The id.
        id: u32,
        /// Vocabulary size.
        vocab_size: u32,
    },
    /// Temperature is NaN, infinite or negative.
    #[error("temperature must be finite and >= 0, got {0}")]
    Temperature(f32),
    /// top_p is not in (0, 1].
    #[error("top_p must be in (0, 1], got {0}")]
    TopP(f32),
    /// A logprob is NaN or positive.
    #[error("logprob must be <= 0, got {0}")]
    Logprob(f32),
    /// A string field is longer than allowed.
    #[error("{field} is {len} bytes, more than {max}")]
    StringTooLong {
        /// Which field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// The tokenizer fingerprint is not 64 lowercase hex digits.
    #[error("tokenizer fingerprint is not a lowercase hex sha256")]
    Fingerprint,
    /// A `GoAway` redirect is not a short `host:port` of printable characters.
    #[error("a GoAway redirect must be a host:port of at most {max} printable bytes")]
    Redirect {
        /// Limit, bytes.
        max: usize,
    },
    /// A bundle frame out of bounds (version label, size, chunk).
    #[error("{0}")]
    Bundle(String),
    /// A draft that is empty or longer than [`MAX_DRAFT_TOKENS`], or a `Verified` that accepts
    /// more than a draft can hold.
    #[error("a draft holds 1..={max} tokens, got {len}")]
    Draft {
        /// Its length (or `accepted`).
        len: usize,
        /// Limit.
        max: usize,
    },
    /// A `Hello`'s device id breaks [`crate::device_id`]'s rule.
    #[error("device_id: {0}")]
    DeviceId(#[from] DeviceIdError),
    /// A `Hello`'s `slm_id` breaks [`super::text::check_model_id`]'s rule.
    #[error("slm_id: {0}")]
    SlmId(#[from] ModelIdError),
    /// Free text holding a control, bidi or invisible character ([`super::text::unsafe_char`]).
    #[error("{field} holds U+{code:04X} at position {at} (control, bidi and invisible characters are refused)")]
    UnsafeText {
        /// Which field.
        field: &'static str,
        /// Char index of the first such character.
        at: usize,
        /// Its code point.
        code: u32,
    },
    /// A `BundleReport`'s figures cannot be true.
    #[error("{0}")]
    Report(#[from] ReportError),
}

impl ValidationError {
    /// The code to put in the `Error` frame sent back, so the peer can tell a context-length
    /// problem from a vocabulary or encoding problem.
    pub fn code(&self) -> ErrorCode {
        match self {
            ValidationError::ContextTooLong { .. } => ErrorCode::ContextTooLong,
            ValidationError::InvalidToken { .. } => ErrorCode::InvalidToken,
            _ => ErrorCode::Malformed,
        }
    }
}

impl Frame {
    /// Check semantic limits a decoder cannot: counts, float ranges, string sizes.
    pub fn validate(&self, limits: &ValidationLimits) -> Result<(), ValidationError> {
        let s = |field: &'static str, v: &str| check_string(field, v, limits.max_string_bytes);
        let text = |field: &'static str, v: &str| check_text(field, v, limits.max_string_bytes);
        match self {
            Frame::Hello { protocol_version: _, device_id, auth, tokenizer_fingerprint, slm_id } => {
                s("device_id", device_id)?;
                s("auth", auth)?;
                s("slm_id", slm_id)?;
                check_hello_names(device_id, slm_id)?;
                check_fingerprint(tokenizer_fingerprint)
            }
            Frame::Welcome { gateway_id, llm_id, limits: _ } => {
                text("gateway_id", gateway_id)?;
                text("llm_id", llm_id)
            }
            Frame::Reject { reason } => match reason {
                RejectReason::TokenizerMismatch { expected } => text("expected", expected),
                RejectReason::Other(m) => text("reason", m),
                _ => Ok(()),
            },
            Frame::Escalate { context, sampling, .. } => {
                let len = context.resulting_len().unwrap_or(usize::MAX);
                check_escalation(limits, len, context.tokens(), sampling)
            }
            Frame::EscalateDraft { context, draft, sampling, .. } => {
                if draft.is_empty() || draft.len() > MAX_DRAFT_TOKENS {
                    return Err(ValidationError::Draft { len: draft.len(), max: MAX_DRAFT_TOKENS });
                }
                // The draft's tokens must fit the context too: the LLM runs them.
                let len = context.resulting_len().unwrap_or(usize::MAX).saturating_add(draft.len());
                check_escalation(limits, len, context.tokens(), sampling)?;
                check_vocab(limits, draft)
            }
            Frame::Token { logprob, token_id, .. } => check_answer(limits, *logprob, *token_id),
            Frame::Verified { accepted, logprob, token_id, .. } => {
                let accepted = usize::try_from(*accepted).unwrap_or(usize::MAX);
                if accepted > MAX_DRAFT_TOKENS {
                    return Err(ValidationError::Draft { len: accepted, max: MAX_DRAFT_TOKENS });
                }
                check_answer(limits, *logprob, *token_id)
            }
            Frame::Error { message, .. } => text("message", message),
            Frame::GoAway { redirect } => redirect.as_deref().map_or(Ok(()), check_redirect),
            Frame::BundleReport { running, escalations, fallbacks } => {
                running.as_ref().map_or(Ok(()), check_bundle_ref)?;
                Ok(ReportedCounts { escalations: *escalations, fallbacks: *fallbacks }.check()?)
            }
            Frame::BundleOffer { bundle } => bundle.as_ref().map_or(Ok(()), check_bundle_ref),
            Frame::BundleChunk { offset, total, bytes, .. } => check_chunk(*offset, *total, bytes.len()),
            Frame::FetchBundle { .. }
            | Frame::Busy { .. }
            | Frame::ContextMissing { .. }
            | Frame::EndSession { .. }
            | Frame::Ping { .. }
            | Frame::Pong { .. }
            | Frame::SessionEnded { .. } => Ok(()),
        }
    }
}

/// An escalation whose context becomes `len` tokens: within the limit, ids in the
/// vocabulary, sampling in range.
fn check_escalation(limits: &ValidationLimits, len: usize, tokens: &TokenIds, sampling: &WireSampling) -> Result<(), ValidationError> {
    if usize::try_from(limits.max_context_tokens).is_ok_and(|max| len > max) {
        return Err(ValidationError::ContextTooLong { len, max: limits.max_context_tokens });
    }
    check_vocab(limits, tokens)?;
    check_sampling(sampling)
}

/// Every id below the vocabulary size, when the receiver knows it.
fn check_vocab(limits: &ValidationLimits, tokens: &TokenIds) -> Result<(), ValidationError> {
    if let Some(vocab_size) = limits.vocab_size {
        if let Some(&id) = tokens.as_slice().iter().find(|&&id| id >= vocab_size) {
            return Err(ValidationError::InvalidToken { id, vocab_size });
        }
    }
    Ok(())
}

/// An answer's token: a log-probability (<= 0, not NaN) and an id in the vocabulary.
fn check_answer(limits: &ValidationLimits, logprob: f32, token_id: u32) -> Result<(), ValidationError> {
    if logprob.is_nan() || logprob > 0.0 {
        return Err(ValidationError::Logprob(logprob));
    }
    match limits.vocab_size {
        Some(vocab_size) if token_id >= vocab_size => Err(ValidationError::InvalidToken { id: token_id, vocab_size }),
        _ => Ok(()),
    }
}

/// Temperature finite and >= 0, top_p in (0, 1] (the same rules as
/// [`crate::sampling::SamplingParams::validate`], checked before conversion).
fn check_sampling(s: &WireSampling) -> Result<(), ValidationError> {
    if !s.temperature.is_finite() || s.temperature < 0.0 {
        return Err(ValidationError::Temperature(s.temperature));
    }
    if !(s.top_p > 0.0 && s.top_p <= 1.0) {
        return Err(ValidationError::TopP(s.top_p));
    }
    Ok(())
}

fn check_string(field: &'static str, v: &str, max: usize) -> Result<(), ValidationError> {
    if v.len() > max {
        return Err(ValidationError::StringTooLong { field, len: v.len(), max });
    }
    Ok(())
}

/// Free text: within `max` bytes and without a character [`super::text::unsafe_char`] refuses.
fn check_text(field: &'static str, v: &str, max: usize) -> Result<(), ValidationError> {
    check_string(field, v, max)?;
    match first_unsafe(v) {
        Some((at, code)) => Err(ValidationError::UnsafeText { field, at, code }),
        None => Ok(()),
    }
}

/// The names a `Hello` gives, each by its own rule: the device id by [`crate::device_id`]'s,
/// the SLM's by the model-id rule ([`super::text::check_model_id`]). Both are logged and listed
/// by the gateway as they are. The gateway's handshake runs this too.
pub fn check_hello_names(device_id: &str, slm_id: &str) -> Result<(), ValidationError> {
    check_device_id(device_id)?;
    Ok(check_model_id(slm_id)?)
}

/// A redirect is dialled and logged by the device: short, printable, and with a port.
fn check_redirect(r: &str) -> Result<(), ValidationError> {
    let printable = r.bytes().all(|b| b.is_ascii_graphic());
    if r.is_empty() || r.len() > MAX_REDIRECT_BYTES || !printable || !r.contains(':') {
        return Err(ValidationError::Redirect { max: MAX_REDIRECT_BYTES });
    }
    Ok(())
}

/// A bundle reference names a usable version and a size within the cap.
fn check_bundle_ref(r: &crate::fleet::BundleRef) -> Result<(), ValidationError> {
    let size_ok = usize::try_from(r.size).is_ok_and(|s| (1..=crate::fleet::MAX_BUNDLE_BYTES).contains(&s));
    if !crate::fleet::valid_version(&r.version) || !size_ok {
        return Err(ValidationError::Bundle(format!("a bundle reference needs a version of [A-Za-z0-9._+-] and a size within 1..={}", crate::fleet::MAX_BUNDLE_BYTES)));
    }
    Ok(())
}

/// A chunk is at most [`crate::fleet::MAX_CHUNK_BYTES`], not empty, and inside its bundle.
fn check_chunk(offset: u32, total: u32, len: usize) -> Result<(), ValidationError> {
    let total = usize::try_from(total).unwrap_or(usize::MAX);
    let end = usize::try_from(offset).unwrap_or(usize::MAX).saturating_add(len);
    if len == 0 || len > crate::fleet::MAX_CHUNK_BYTES || total > crate::fleet::MAX_BUNDLE_BYTES || end > total {
        return Err(ValidationError::Bundle(format!("a chunk of {len} bytes ending at {end} of {total}")));
    }
    Ok(())
}

fn check_fingerprint(fp: &str) -> Result<(), ValidationError> {
    let ok = fp.len() == FINGERPRINT_HEX_LEN && fp.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if ok {
        Ok(())
    } else {
        Err(ValidationError::Fingerprint)
    }
}

#[cfg(test)]
mod tests {
    use super::super::messages::ContextSync;
    use super::*;

    fn esc(context: ContextSync, sampling: WireSampling) -> Frame {
        Frame::Escalate { session_id: 1, seq: 1, context, sampling, deadline_ms: 100 }
    }

    fn hello(fp: &str) -> Frame {
        Frame::Hello {
            protocol_version: 1,
            device_id: "dev".into(),
            auth: "tok".into(),
            tokenizer_fingerprint: fp.into(),
            slm_id: "slm".into(),
        }
    }

    #[test]
    fn context_length_limit() {
        let lim = ValidationLimits { max_context_tokens: 10, ..Default::default() };
        let ok = esc(ContextSync::Delta { base_len: 7, tokens: vec![1, 2, 3].into() }, WireSampling::default());
        assert_eq!(ok.validate(&lim), Ok(()));
        let long = esc(ContextSync::Delta { base_len: 8, tokens: vec![1, 2, 3].into() }, WireSampling::default());
        assert_eq!(long.validate(&lim), Err(ValidationError::ContextTooLong { len: 11, max: 10 }));
        assert_eq!(long.validate(&lim).unwrap_err().code(), ErrorCode::ContextTooLong);
        let full = esc(ContextSync::Full { tokens: vec![0; 11].into() }, WireSampling::default());
        assert!(full.validate(&lim).is_err());
    }

    #[test]
    fn vocab_limit() {
        let lim = ValidationLimits { vocab_size: Some(100), ..Default::default() };
        let bad = esc(ContextSync::Full { tokens: vec![1, 100].into() }, WireSampling::default());
        assert_eq!(bad.validate(&lim), Err(ValidationError::InvalidToken { id: 100, vocab_size: 100 }));
        let tok = Frame::Token { session_id: 1, seq: 1, token_id: 100, logprob: -1.0, llm_ms: 1 };
        assert_eq!(tok.validate(&lim).unwrap_err().code(), ErrorCode::InvalidToken);
        assert_eq!(tok.validate(&ValidationLimits::default()), Ok(()));
    }

    #[test]
    fn sampling_ranges() {
        let lim = ValidationLimits::default();
        let ctx = || ContextSync::Full { tokens: vec![1].into() };
        for t in [f32::NAN, f32::INFINITY, -0.1] {
            let f = esc(ctx(), WireSampling { temperature: t, ..Default::default() });
            assert!(matches!(f.validate(&lim), Err(ValidationError::Temperature(_))), "{t}");
        }
        for p in [0.0, 1.01, f32::NAN, -1.0] {
            let f = esc(ctx(), WireSampling { top_p: p, ..Default::default() });
            assert!(matches!(f.validate(&lim), Err(ValidationError::TopP(_))), "{p}");
        }
        let f = esc(ctx(), WireSampling { temperature: 0.8, top_k: 50, top_p: 0.95, seed: Some(1) });
        assert_eq!(f.validate(&lim), Ok(()));
    }

    #[test]
    fn logprob_range() {
        let lim = ValidationLimits::default();
        for (lp, ok) in [(0.0, true), (-3.0, true), (f32::NEG_INFINITY, true), (0.5, false), (f32::NAN, false)] {
            let f = Frame::Token { session_id: 1, seq: 1, token_id: 1, logprob: lp, llm_ms: 1 };
            assert_eq!(f.validate(&lim).is_ok(), ok, "{lp}");
        }
    }

    #[test]
    fn hello_checks() {
        let lim = ValidationLimits::default();
        let fp = "0123456789abcdef".repeat(4);
        assert_eq!(hello(&fp).validate(&lim), Ok(()));
        assert_eq!(hello(&fp.to_uppercase()).validate(&lim), Err(ValidationError::Fingerprint));
        assert_eq!(hello("abc").validate(&lim), Err(ValidationError::Fingerprint));
        let small = ValidationLimits { max_string_bytes: 2, ..lim };
        assert!(matches!(hello(&fp).validate(&small), Err(ValidationError::StringTooLong { field: "device_id", .. })));
    }

    #[test]
    fn strings_in_other_frames() {
        let small = ValidationLimits { max_string_bytes: 3, ..Default::default() };
        let r = Frame::Reject { reason: RejectReason::Other("long reason".into()) };
        assert!(r.validate(&small).is_err());
        assert_eq!(Frame::Reject { reason: RejectReason::Auth }.validate(&small), Ok(()));
        let e = Frame::Error { session_id: None, seq: None, code: ErrorCode::Internal, message: "oops".into() };
        assert!(e.validate(&small).is_err());
        assert_eq!(Frame::Ping { nonce: 1 }.validate(&small), Ok(()));
    }

    #[test]
    fn bundle_frames_are_bounded() {
        use crate::fleet::{BundleRef, Sha256Digest, MAX_BUNDLE_BYTES, MAX_CHUNK_BYTES};
        let lim = ValidationLimits::default();
        let r = |version: &str, size: u32| Some(BundleRef { version: version.into(), sha256: Sha256Digest([1; 32]), size });
        assert_eq!(Frame::BundleOffer { bundle: r("v1.2", 10) }.validate(&lim), Ok(()));
        assert_eq!(Frame::BundleOffer { bundle: None }.validate(&lim), Ok(()));
        for bad in [r("", 10), r("a b", 10), r("v", 0), r("v", MAX_BUNDLE_BYTES as u32 + 1), r(&"v".repeat(65), 1)] {
            assert!(Frame::BundleReport { running: bad.clone(), escalations: 0, fallbacks: 0 }.validate(&lim).is_err(), "{bad:?}");
        }
        let chunk = |offset: u32, total: u32, len: usize| Frame::BundleChunk { sha256: Sha256Digest([0; 32]), offset, total, bytes: vec![0; len] };
        assert_eq!(chunk(0, 100, 100).validate(&lim), Ok(()));
        for bad in [chunk(0, 100, 0), chunk(90, 100, 11), chunk(u32::MAX, u32::MAX, 1), chunk(0, 1 << 30, MAX_CHUNK_BYTES + 1)] {
            assert!(matches!(bad.validate(&lim), Err(ValidationError::Bundle(_))));
        }
    }

    #[test]
    fn a_draft_is_bounded_in_length_vocabulary_and_context() {
        let lim = ValidationLimits { max_context_tokens: 10, vocab_size: Some(100), ..Default::default() };
        let draft = |base_len: u32, ids: Vec<u32>| Frame::EscalateDraft {
            session_id: 1,
            seq: 1,
            context: ContextSync::Delta { base_len, tokens: vec![1].into() },
            draft: ids.into(),
            sampling: WireSampling::default(),
            deadline_ms: 100,
        };
        assert_eq!(draft(5, vec![1, 2, 3]).validate(&lim), Ok(()));
        assert!(matches!(draft(5, vec![]).validate(&lim), Err(ValidationError::Draft { len: 0, .. })));
        let long = ValidationLimits { max_context_tokens: 1000, ..lim };
        assert!(matches!(draft(5, vec![1; MAX_DRAFT_TOKENS + 1]).validate(&long), Err(ValidationError::Draft { .. })));
        assert_eq!(draft(5, vec![1; MAX_DRAFT_TOKENS]).validate(&long), Ok(()));
        assert_eq!(draft(5, vec![1, 100]).validate(&lim), Err(ValidationError::InvalidToken { id: 100, vocab_size: 100 }));
        // Context 6 + draft 5 passes the limit of 10: the draft's tokens count.
        assert_eq!(draft(5, vec![1; 5]).validate(&lim), Err(ValidationError::ContextTooLong { len: 11, max: 10 }));
    }

    #[test]
    fn a_verified_answer_accepts_at_most_a_draft_and_names_a_token_in_the_vocabulary() {
        let lim = ValidationLimits { vocab_size: Some(100), ..Default::default() };
        let v = |accepted: u32, token_id: u32, logprob: f32| Frame::Verified { session_id: 1, seq: 1, accepted, token_id, logprob, llm_ms: 1 };
        assert_eq!(v(3, 5, -0.5).validate(&lim), Ok(()));
        assert_eq!(v(MAX_DRAFT_TOKENS as u32, 5, 0.0).validate(&lim), Ok(()));
        assert!(matches!(v(MAX_DRAFT_TOKENS as u32 + 1, 5, -0.5).validate(&lim), Err(ValidationError::Draft { .. })));
        assert_eq!(v(0, 100, -0.5).validate(&lim).unwrap_err().code(), ErrorCode::InvalidToken);
        assert!(matches!(v(0, 1, 0.5).validate(&lim), Err(ValidationError::Logprob(_))));
    }

    fn hello_named(device_id: &str, slm_id: &str) -> Frame {
        Frame::Hello { protocol_version: 6, device_id: device_id.into(), auth: "tok".into(), tokenizer_fingerprint: "0123456789abcdef".repeat(4), slm_id: slm_id.into() }
    }

    /// Every string a frame carries that a peer logs, labels or lists, each built around `v`.
    fn every_named_string(v: &str) -> Vec<(&'static str, Frame)> {
        use crate::fleet::{BundleRef, Sha256Digest};
        let bundle = Some(BundleRef { version: v.into(), sha256: Sha256Digest([1; 32]), size: 10 });
        vec![
            ("Hello.device_id", hello_named(v, "slm")),
            ("Hello.slm_id", hello_named("dev", v)),
            ("Welcome.gateway_id", Frame::Welcome { gateway_id: v.into(), llm_id: "llm".into(), limits: Limits { max_frame_bytes: 1, max_context_tokens: 1, max_sessions: 1, service_time_ms: 1 } }),
            ("Welcome.llm_id", Frame::Welcome { gateway_id: "gw".into(), llm_id: v.into(), limits: Limits { max_frame_bytes: 1, max_context_tokens: 1, max_sessions: 1, service_time_ms: 1 } }),
            ("Reject.expected", Frame::Reject { reason: RejectReason::TokenizerMismatch { expected: v.into() } }),
            ("Reject.reason", Frame::Reject { reason: RejectReason::Other(v.into()) }),
            ("Error.message", Frame::Error { session_id: None, seq: None, code: ErrorCode::Internal, message: v.into() }),
            ("GoAway.redirect", Frame::GoAway { redirect: Some(format!("{v}:1")) }),
            ("BundleReport.running.version", Frame::BundleReport { running: bundle.clone(), escalations: 0, fallbacks: 0 }),
            ("BundleOffer.bundle.version", Frame::BundleOffer { bundle }),
        ]
    }

    #[test]
    fn newlines_escapes_nul_bidi_controls_and_invisible_characters_are_refused_in_every_named_string() {
        let lim = ValidationLimits::default();
        for (field, f) in every_named_string("ok") {
            assert_eq!(f.validate(&lim), Ok(()), "{field}");
        }
        let mut hostile: Vec<String> = crate::protocol::text::HOSTILE.iter().map(|s| s.to_string()).collect();
        hostile.push("slm\n2099-01-01T00:00:00Z ERROR forged line".into());
        for v in &hostile {
            for (field, f) in every_named_string(v) {
                assert!(f.validate(&lim).is_err(), "{field} took {v:?}");
                assert_eq!(f.validate(&lim).unwrap_err().code(), ErrorCode::Malformed, "{field}");
            }
        }
    }

    #[test]
    fn oversize_strings_are_refused_in_every_named_string() {
        let lim = ValidationLimits::default();
        let huge = "x".repeat(lim.max_string_bytes + 1);
        for (field, f) in every_named_string(&huge) {
            assert!(f.validate(&lim).is_err(), "{field} took {} bytes", huge.len());
        }
        let auth = Frame::Hello { protocol_version: 6, device_id: "d".into(), auth: huge.clone(), tokenizer_fingerprint: "0".repeat(64), slm_id: String::new() };
        assert!(matches!(auth.validate(&lim), Err(ValidationError::StringTooLong { field: "auth", .. })), "the credential is bounded too");
    }

    #[test]
    fn a_hello_names_its_slm_by_the_model_id_rule() {
        let lim = ValidationLimits::default();
        for ok in ["", "qwen2.5-0.5b-instruct", "Qwen/Qwen2.5-7B-Instruct", "llama3:8b", "m@rev+int4"] {
            assert_eq!(hello_named("dev", ok).validate(&lim), Ok(()), "{ok}");
        }
        for bad in ["a b", "ünï", &"x".repeat(129)] {
            assert!(matches!(hello_named("dev", bad).validate(&lim), Err(ValidationError::SlmId(_))), "{bad:?}");
        }
        assert!(matches!(hello_named("", "slm").validate(&lim), Err(ValidationError::DeviceId(_))));
    }

    #[test]
    fn a_bundle_report_with_more_fallbacks_than_escalations_or_beyond_the_bound_is_refused() {
        use crate::fleet::{ReportError, MAX_REPORTED_COUNT};
        let lim = ValidationLimits::default();
        let report = |escalations: u64, fallbacks: u64| Frame::BundleReport { running: None, escalations, fallbacks };
        assert_eq!(report(10, 10).validate(&lim), Ok(()));
        assert_eq!(report(2, 3).validate(&lim), Err(ValidationError::Report(ReportError::FallbacksExceedEscalations { escalations: 2, fallbacks: 3 })));
        assert!(matches!(report(MAX_REPORTED_COUNT + 1, 0).validate(&lim), Err(ValidationError::Report(ReportError::TooLarge { .. }))));
        assert_eq!(report(2, 3).validate(&lim).unwrap_err().code(), ErrorCode::Malformed);
    }

    #[test]
    fn a_go_away_redirect_must_be_a_short_printable_host_and_port() {
        let lim = ValidationLimits::default();
        let go = |r: &str| Frame::GoAway { redirect: Some(r.into()) };
        assert_eq!(Frame::GoAway { redirect: None }.validate(&lim), Ok(()));
        assert_eq!(go("gw-2.example:4433").validate(&lim), Ok(()));
        assert_eq!(go("[::1]:4433").validate(&lim), Ok(()));
        for bad in ["", "no-port", "a b:1", "evil\n:1", &format!("{}:1", "h".repeat(300))] {
            assert!(matches!(go(bad).validate(&lim), Err(ValidationError::Redirect { .. })), "{bad:?}");
        }
    }
}
