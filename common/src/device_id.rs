//! What a device id may look like, in one place for everyone who reads or writes one: the
//! gateway's handshake (a `Hello`'s id in dev mode, a client certificate's subject under mutual
//! TLS) and the admin command that issues device certificates.
//!
//! A device id ends up in logs, metric labels, trace attributes and deny lists. A control
//! character in one (a newline, an escape sequence, a NUL) forges log lines or garbles a
//! terminal, and an id of kilobytes multiplies every map key that holds it, so both are refused
//! at the door rather than escaped everywhere later.

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
    /// Holds a control character (at this char index).
    #[error("the device id holds a control character (U+{code:04X}) at position {at}")]
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

/// Check a device id: 1..=[`MAX_DEVICE_ID_BYTES`] bytes, no control characters, no leading or
/// trailing white space.
pub fn check_device_id(id: &str) -> Result<(), DeviceIdError> {
    if id.is_empty() {
        return Err(DeviceIdError::Empty);
    }
    if id.len() > MAX_DEVICE_ID_BYTES {
        return Err(DeviceIdError::TooLong { len: id.len(), max: MAX_DEVICE_ID_BYTES });
    }
    if let Some((at, c)) = id.chars().enumerate().find(|(_, c)| c.is_control()) {
        return Err(DeviceIdError::ControlCharacter { at, code: u32::from(c) });
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
        assert!(matches!(check_device_id(&"x".repeat(MAX_DEVICE_ID_BYTES + 1)), Err(DeviceIdError::TooLong { .. })));
        assert_eq!(check_device_id(&"x".repeat(MAX_DEVICE_ID_BYTES)), Ok(()));
        assert_eq!(check_device_id(" device"), Err(DeviceIdError::Padded));
        assert_eq!(check_device_id("device "), Err(DeviceIdError::Padded));
    }
}
