//! Per-device tokens: a credential for devices that cannot hold a client certificate, bound to
//! one device id.
//!
//! A token is `dt1.` and the hex of HMAC-SHA256(gateway secret, device id). The gateway keeps
//! only the secret and recomputes a device's token from the id its `Hello` claims, so it stores
//! no list of tokens, and a token opens exactly one id: a device that leaks its own token
//! cannot act as any other, unlike a token shared by the whole fleet. `cloud-gateway ca
//! issue-token` issues one from the same secret file the gateway reads. Revoking one device is
//! the deny list's work (by id); rotating the secret re-issues every token.

use std::path::Path;

use ring::hmac;

/// What every token starts with: the scheme's version, so that a later scheme can be told apart.
pub const TOKEN_PREFIX: &str = "dt1.";

/// Fewest secret bytes accepted: the HMAC's own key size, below which tokens could be guessed
/// offline from one leaked token.
pub const MIN_SECRET_BYTES: usize = 32;

/// Bytes of a secret made by [`DeviceTokenKey::generate_secret`].
const GENERATED_SECRET_BYTES: usize = 32;

/// Domain separation: the same secret must never yield a MAC that means something elsewhere.
const CONTEXT: &[u8] = b"duet device token v1\0";

/// Why a token secret could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DeviceTokenError {
    /// The secret file could not be read.
    #[error("reading the device-token secret {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The secret is not hex.
    #[error("the device-token secret must be hex (as `cloud-gateway ca init-token-secret` writes it)")]
    NotHex,
    /// The secret is too short to resist guessing.
    #[error("the device-token secret is {len} bytes (at least {MIN_SECRET_BYTES})")]
    TooShort {
        /// Its length in bytes.
        len: usize,
    },
    /// The system's random source failed.
    #[error("the system random source failed")]
    Random,
}

/// The gateway's secret, ready to issue and check tokens.
pub struct DeviceTokenKey(hmac::Key);

impl std::fmt::Debug for DeviceTokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.write_str("DeviceTokenKey(..)")
    }
}

impl DeviceTokenKey {
    /// A key from the secret's hex text (white space around it is ignored).
    pub fn from_hex(text: &str) -> Result<Self, DeviceTokenError> {
        let secret = hex::decode(text.trim()).map_err(|_| DeviceTokenError::NotHex)?;
        if secret.len() < MIN_SECRET_BYTES {
            return Err(DeviceTokenError::TooShort { len: secret.len() });
        }
        Ok(Self(hmac::Key::new(hmac::HMAC_SHA256, &secret)))
    }

    /// A key from a file holding the secret's hex.
    pub fn load(path: &Path) -> Result<Self, DeviceTokenError> {
        let text = std::fs::read_to_string(path).map_err(|source| DeviceTokenError::Read { path: path.display().to_string(), source })?;
        Self::from_hex(&text)
    }

    /// A new random secret, as hex: what an operator stores once and hands to every replica.
    pub fn generate_secret() -> Result<String, DeviceTokenError> {
        let mut bytes = [0u8; GENERATED_SECRET_BYTES];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).map_err(|_| DeviceTokenError::Random)?;
        Ok(hex::encode(bytes))
    }

    /// The token of `device_id`.
    pub fn issue(&self, device_id: &str) -> String {
        format!("{TOKEN_PREFIX}{}", hex::encode(hmac::sign(&self.0, &message(device_id)).as_ref()))
    }

    /// Whether `token` is `device_id`'s, compared in constant time.
    pub fn verify(&self, device_id: &str, token: &str) -> bool {
        let Some(mac) = token.strip_prefix(TOKEN_PREFIX).and_then(|h| hex::decode(h).ok()) else { return false };
        hmac::verify(&self.0, &message(device_id), &mac).is_ok()
    }
}

fn message(device_id: &str) -> Vec<u8> {
    [CONTEXT, device_id.as_bytes()].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> DeviceTokenKey {
        DeviceTokenKey::from_hex(&"ab".repeat(32)).unwrap()
    }

    #[test]
    fn a_token_opens_its_own_device_id_and_no_other() {
        let k = key();
        let token = k.issue("device-a");
        assert!(token.starts_with(TOKEN_PREFIX));
        assert!(k.verify("device-a", &token));
        assert!(!k.verify("device-b", &token));
        assert!(!k.verify("device-a", &k.issue("device-b")));
    }

    #[test]
    fn another_secret_issues_other_tokens() {
        let other = DeviceTokenKey::from_hex(&"cd".repeat(32)).unwrap();
        assert!(!key().verify("device-a", &other.issue("device-a")));
    }

    #[test]
    fn malformed_tokens_are_refused_without_panicking() {
        let k = key();
        let good = k.issue("d");
        for bad in ["", "dt1.", "dt1.zz", &good[TOKEN_PREFIX.len()..], &good[..good.len() - 2], &format!("{good}00"), "dt0.00"] {
            assert!(!k.verify("d", bad), "{bad:?} accepted");
        }
    }

    #[test]
    fn short_or_non_hex_secrets_are_refused() {
        assert!(matches!(DeviceTokenKey::from_hex(&"ab".repeat(16)), Err(DeviceTokenError::TooShort { len: 16 })));
        assert!(matches!(DeviceTokenKey::from_hex("not hex at all"), Err(DeviceTokenError::NotHex)));
    }

    #[test]
    fn a_generated_secret_loads_from_a_file_with_a_trailing_newline() {
        let secret = DeviceTokenKey::generate_secret().unwrap();
        assert_eq!(secret.len(), 2 * GENERATED_SECRET_BYTES);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, format!("{secret}\n")).unwrap();
        let k = DeviceTokenKey::load(&path).unwrap();
        assert!(k.verify("d", &DeviceTokenKey::from_hex(&secret).unwrap().issue("d")));
    }
}
