//! How a bundle is named: its SHA-256 (content address) with its version and size.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// A SHA-256. 32 raw bytes in bincode (the wire), lowercase hex in human-readable formats
/// (the bundle store's JSON), so one type serves both.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Sha256Digest(pub [u8; 32]);

impl Sha256Digest {
    /// The SHA-256 of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// Lowercase hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parse 64 hex digits.
    pub fn from_hex(s: &str) -> Option<Self> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).ok()?;
        Some(Self(out))
    }

    /// The first 12 hex digits, for logs.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..6])
    }
}

impl fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.short())
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl Serialize for Sha256Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&self.to_hex())
        } else {
            self.0.serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for Sha256Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            Self::from_hex(&s).ok_or_else(|| serde::de::Error::custom("expected 64 hex digits"))
        } else {
            <[u8; 32]>::deserialize(d).map(Self)
        }
    }
}

/// A published bundle as a device is told about it: enough to decide whether to fetch it
/// (the version and digest differ from what it runs) and to check what arrives (size, digest)
/// before any of it is decoded.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BundleRef {
    /// The operator's version label ([`super::valid_version`]).
    pub version: String,
    /// SHA-256 of the whole bundle file.
    pub sha256: Sha256Digest,
    /// Size of the bundle file, bytes (at most [`super::MAX_BUNDLE_BYTES`]).
    pub size: u32,
}

impl BundleRef {
    /// The reference to `bytes`, a bundle file of version `version`.
    pub fn of(version: &str, bytes: &[u8]) -> Self {
        Self { version: version.to_string(), sha256: Sha256Digest::of(bytes), size: u32::try_from(bytes.len()).unwrap_or(u32::MAX) }
    }
}
