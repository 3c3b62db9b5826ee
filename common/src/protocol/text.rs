//! Which characters a string from the network may carry into a log line, a metric label, a
//! terminal or the operator's `/v1/fleet` page, and how the gateway words its own free text.
//!
//! A log line is text: a newline in a peer's string forges a whole line of its own (with any
//! timestamp and level the peer likes), an `ESC [` sequence repaints the operator's terminal,
//! a NUL cuts the line short in some collectors, and a Unicode bidi override (U+202E) or an
//! invisible character makes a line read differently from what it holds. Escaping at every
//! `tracing!` call is easy to forget once, so the fields that name things (device ids, model
//! ids, bundle versions) are refused at validation instead, and free text the gateway sends
//! (error messages, reasons) is escaped where it is made ([`escape_text`]) and refused by the
//! receiver's validation when it still holds such a character.
//!
//! The rules:
//! - [`unsafe_char`]: control characters (C0, DEL, C1), bidi embedding, override and isolate
//!   controls, line and paragraph separators, and zero-width characters. Never allowed in any
//!   string a frame carries that is meant to be read.
//! - [`check_model_id`]: a model id (`Hello::slm_id`) is at most [`MAX_MODEL_ID_BYTES`] of
//!   `[A-Za-z0-9._/:+@-]`: what real ids use (`qwen2.5-0.5b-instruct`, `Qwen/Qwen2.5-7B`,
//!   `llama3:8b`, `model@rev+int4`), and nothing a log, a Prometheus label or a file name
//!   has to quote. Empty is allowed: a device built without a model name says nothing.

/// Longest model id a device may announce, in bytes: room for an `org/name:tag@revision` id,
/// small enough that the fleet listing and logs stay small.
pub const MAX_MODEL_ID_BYTES: usize = 128;

/// Longest free text ([`escape_text`]) the gateway puts in one frame, in bytes: a sentence or
/// two with a backend's own error, far below [`super::ValidationLimits::max_string_bytes`].
pub const MAX_TEXT_BYTES: usize = 1024;

/// The punctuation a model id may use besides ASCII letters and digits.
pub const MODEL_ID_PUNCTUATION: &str = "._-/:+@";

/// Whether `c` must never reach a log from the network: a control character (`\n`, `\r`, ESC,
/// NUL, DEL, the C1 range), a bidi control (U+061C, U+200E, U+200F, U+202A..=U+202E,
/// U+2066..=U+2069), a line or paragraph separator (U+2028, U+2029) or a zero-width character
/// (U+200B..=U+200D, U+2060, U+FEFF).
pub fn unsafe_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{061C}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

/// The first character of `s` that [`unsafe_char`] refuses: its char index and code point.
pub fn first_unsafe(s: &str) -> Option<(usize, u32)> {
    s.chars().enumerate().find(|(_, c)| unsafe_char(*c)).map(|(at, c)| (at, u32::from(c)))
}

/// Whether `c` may appear in a model id.
fn model_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || MODEL_ID_PUNCTUATION.contains(c)
}

/// Why a model id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelIdError {
    /// Longer than [`MAX_MODEL_ID_BYTES`].
    #[error("the model id is {len} bytes long (at most {max})")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Holds a character outside `[A-Za-z0-9._/:+@-]` (at this char index).
    #[error("the model id holds U+{code:04X} at position {at}; a model id is [A-Za-z0-9] and `{MODEL_ID_PUNCTUATION}`")]
    Character {
        /// Char index of the first one.
        at: usize,
        /// Its code point.
        code: u32,
    },
}

/// Check a model id: at most [`MAX_MODEL_ID_BYTES`] bytes of ASCII letters, digits and
/// [`MODEL_ID_PUNCTUATION`] (no white space, no control characters, nothing non-ASCII).
pub fn check_model_id(id: &str) -> Result<(), ModelIdError> {
    if id.len() > MAX_MODEL_ID_BYTES {
        return Err(ModelIdError::TooLong { len: id.len(), max: MAX_MODEL_ID_BYTES });
    }
    match id.chars().enumerate().find(|(_, c)| !model_id_char(*c)) {
        Some((at, c)) => Err(ModelIdError::Character { at, code: u32::from(c) }),
        None => Ok(()),
    }
}

/// `text` made safe to send as free text: each [`unsafe_char`] written as its `\u{..}` escape
/// (so a reader still sees that it was there), and cut at a character boundary to at most
/// [`MAX_TEXT_BYTES`] (ending in `...` when cut). What the gateway puts in an `Error` message or
/// a `Reject` reason, whatever a backend or a decoder said.
pub fn escape_text(text: &str) -> String {
    const CUT: &str = "...";
    let mut out = String::with_capacity(text.len().min(MAX_TEXT_BYTES));
    for c in text.chars() {
        let piece = if unsafe_char(c) { c.escape_unicode().to_string() } else { c.to_string() };
        if out.len() + piece.len() > MAX_TEXT_BYTES - CUT.len() {
            out.push_str(CUT);
            return out;
        }
        out.push_str(&piece);
    }
    out
}

/// Newlines, carriage returns, escapes, NUL, DEL, C1, bidi controls, separators and
/// zero-width characters, each between an `a` and a `b`: every character the rule exists for,
/// for the tests of every field it guards.
#[cfg(test)]
pub(crate) const HOSTILE: [&str; 12] = [
    "a\nb", "a\rb", "a\u{1b}[2Jb", "a\0b", "a\u{7f}b", "a\u{85}b", "a\u{202E}b", "a\u{2066}b", "a\u{200F}b", "a\u{2028}b", "a\u{200B}b", "a\u{FEFF}b",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_model_ids_pass_the_model_id_rule() {
        for id in ["", "qwen2.5-0.5b-instruct", "Qwen/Qwen2.5-7B-Instruct", "llama3:8b", "model@rev+int4", "tiny_qwen2", &"x".repeat(MAX_MODEL_ID_BYTES)] {
            assert_eq!(check_model_id(id), Ok(()), "{id}");
        }
    }

    #[test]
    fn hostile_white_space_non_ascii_and_long_model_ids_are_refused() {
        for id in HOSTILE.iter().copied().chain(["a b", "a\tb", "aüb", "a;b", "a\"b", "a{b}"]) {
            assert!(matches!(check_model_id(id), Err(ModelIdError::Character { at: 1, .. })), "{id:?}");
        }
        let forged = "slm\n2099-01-01T00:00:00Z ERROR forged";
        assert_eq!(check_model_id(forged), Err(ModelIdError::Character { at: 3, code: 10 }));
        assert!(matches!(check_model_id(&"x".repeat(MAX_MODEL_ID_BYTES + 1)), Err(ModelIdError::TooLong { .. })));
    }

    #[test]
    fn every_hostile_character_is_unsafe_and_ordinary_text_is_not() {
        for s in HOSTILE {
            assert_eq!(first_unsafe(s).map(|(at, _)| at), Some(1), "{s:?}");
        }
        assert_eq!(first_unsafe("bundle v1.2 is not offered: ünïcödé, 中文, emoji 🙂"), None);
    }

    #[test]
    fn escaped_text_holds_no_unsafe_character_and_fits_the_limit() {
        for s in HOSTILE {
            let e = escape_text(s);
            assert_eq!(first_unsafe(&e), None, "{e}");
            assert!(e.starts_with('a') && e.ends_with('b') && e.contains("\\u{"), "{e}");
        }
        assert_eq!(escape_text("plain text"), "plain text");
        let long = escape_text(&"\n".repeat(10_000));
        assert!(long.len() <= MAX_TEXT_BYTES && long.ends_with("..."), "{}", long.len());
        let wide = escape_text(&"é".repeat(MAX_TEXT_BYTES));
        assert!(wide.len() <= MAX_TEXT_BYTES, "cut at a char boundary");
    }
}
