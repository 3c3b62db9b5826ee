//! What a device id may look like, in one place for everyone who reads or writes one: the
//! gateway's handshake (a `Hello`'s id in dev mode, a client certificate's subject under mutual
//! TLS) and the admin command that issues device certificates.
//!
//! A device id ends up in logs, metric labels, trace attributes and deny lists. A control
//! character in one (a newline, an escape sequence, a NUL) forges log lines or garbles a
//! terminal, a bidi override (U+202E) or a zero-width character makes two ids that print alike
//! differ, and an id of kilobytes multiplies every map key that holds it, so all are refused at
//! the door rather than escaped everywhere later (the character rule is
//! [`crate::protocol::text::unsafe_char`]'s).

/// Longest device id, in bytes: room for a 64-byte host name with a process id (the edge's
/// default id) or a UUID with a fleet prefix, and small enough that a map keyed by ids stays
/// small.
pub const MAX_DEVICE_ID_BYTES: usize = 128;

/// Why a device id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceIdError {
    /// Nothing to name a device by.
    #[error("the device id is empty")]
    Empty,
    /// Longer than [`MAX_DEVICE_ID_BYTES`].
    #[error("the device id is {len} bytes long (at most {max})")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Holds a control, bidi or invisible character (at this char index).
    #[error("the device id holds a control character, or a bidi or invisible one (U+{code:04X}) at position {at}")]
    ControlCharacter {
        /// Char index of the first one.
        at: usize,
        /// Its code point.
        code: u32,
    },
    /// Begins or ends with white space, which no log or deny list shows.
    #[error("the device id begins or ends with white space")]
    Padded,
}

/// Check a device id: 1..=[`MAX_DEVICE_ID_BYTES`] bytes, no control, bidi or invisible
/// characters ([`crate::protocol::text::unsafe_char`]), no leading or trailing white space.
pub fn check_device_id(id: &str) -> Result<(), DeviceIdError> {
    if id.is_empty() {
        return Err(DeviceIdError::Empty);
    }
    if id.len() > MAX_DEVICE_ID_BYTES {
        return Err(DeviceIdError::TooLong { len: id.len(), max: MAX_DEVICE_ID_BYTES });
    }
    if let Some((at, code)) = crate::protocol::text::first_unsafe(id) {
        return Err(DeviceIdError::ControlCharacter { at, code });
    }
    if id.trim() != id {
        return Err(DeviceIdError::Padded);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_ids_pass() {
        for id in ["device-a", "host-1234", "aa:bb:cc:dd:ee:ff", "3f2c9a1e-0b7d-4f5e-9a61-2d8c7e5b4a10", "kitchen tablet", "ünïcödé"] {
            assert_eq!(check_device_id(id), Ok(()), "{id}");
        }
    }

    #[test]
    fn control_characters_empty_long_and_padded_ids_are_refused() {
        assert_eq!(check_device_id(""), Err(DeviceIdError::Empty));
        assert_eq!(check_device_id("evil\ndevice-a welcomed"), Err(DeviceIdError::ControlCharacter { at: 4, code: 10 }));
        for id in ["a\0b", "a\u{1b}[31m", "tab\there", "del\u{7f}", "c1\u{85}"] {
            assert!(matches!(check_device_id(id), Err(DeviceIdError::ControlCharacter { .. })), "{id:?}");
        }
        for id in crate::protocol::text::HOSTILE {
            assert!(matches!(check_device_id(id), Err(DeviceIdError::ControlCharacter { at: 1, .. })), "{id:?}");
        }
        assert!(matches!(check_device_id(&"x".repeat(MAX_DEVICE_ID_BYTES + 1)), Err(DeviceIdError::TooLong { .. })));
        assert_eq!(check_device_id(&"x".repeat(MAX_DEVICE_ID_BYTES)), Ok(()));
        assert_eq!(check_device_id(" device"), Err(DeviceIdError::Padded));
        assert_eq!(check_device_id("device "), Err(DeviceIdError::Padded));
    }
}
