//! The bundle file: a router file and the device settings that go with it, signed.
//!
//! Layout (all lengths little-endian):
//!
//! ```text
//! "DUETBNDL"  u16 format (1)  u32 manifest_len  manifest (bincode)  u32 router_len  router  signature (64)
//! ```
//!
//! The Ed25519 signature covers [`SIGNING_CONTEXT`] followed by the manifest's bytes; the
//! manifest carries the router's SHA-256, so the signature covers the router too. Decoding is
//! bounded (every length is checked against what is left and against its own cap before
//! anything is allocated) and never panics; [`Bundle::verify`] is a separate step, so that a
//! decoded but unverified bundle can be shown to an operator, never used.

use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};
use serde::{Deserialize, Serialize};

use super::digest::Sha256Digest;
use super::{valid_version, MAX_BUNDLE_BYTES};

/// First bytes of every bundle file.
pub const MAGIC: &[u8; 8] = b"DUETBNDL";
/// The one format this build writes and reads.
pub const FORMAT: u16 = 1;
/// What a signature signs before the manifest: a signature made for anything else (another
/// file type signed with the same key) never verifies as a bundle.
pub const SIGNING_CONTEXT: &[u8] = b"duet-bundle/v1\n";
/// Largest manifest, bytes: a few ids and numbers.
pub const MAX_MANIFEST_BYTES: usize = 4096;
/// Bytes of an Ed25519 signature.
pub const SIGNATURE_BYTES: usize = 64;
/// Largest deadline a bundle may set, ms (the protocol's own cap).
const MAX_DEADLINE_MS: u32 = crate::protocol::MAX_DEADLINE_MS;
/// Most tokens a bundle may let the SLM speculate ahead.
pub const MAX_SPECULATE: u32 = 64;

/// Why a bundle file cannot be used. Every variant is a refusal a device logs and survives.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// Fewer bytes than the layout needs: a truncated file or download.
    #[error("truncated bundle: {have} bytes, the layout needs {need}")]
    Truncated {
        /// Bytes there.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
    /// Not a bundle at all.
    #[error("not a Duet bundle (bad magic)")]
    BadMagic,
    /// A format this build does not read.
    #[error("bundle format {0} is not supported (this build reads {FORMAT})")]
    Format(u16),
    /// A part is larger than its cap.
    #[error("bundle {part} of {len} bytes exceeds {max}")]
    TooLarge {
        /// Which part.
        part: &'static str,
        /// Its size.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// Bytes after the signature.
    #[error("{0} trailing bytes after the bundle's signature")]
    Trailing(usize),
    /// The manifest does not decode.
    #[error("bundle manifest: {0}")]
    Manifest(String),
    /// A manifest field out of range (version, settings).
    #[error("bundle manifest: {0}")]
    Invalid(String),
    /// Signed by a key this device does not trust (or not signed at all).
    #[error("bundle signed by key {signed_by}, this device trusts key {trusted}")]
    WrongKey {
        /// The manifest's key id.
        signed_by: String,
        /// The trusted key's id.
        trusted: String,
    },
    /// The signature does not verify: the manifest was altered, or the bundle is unsigned.
    #[error("bundle signature does not verify (tampered or unsigned)")]
    BadSignature,
    /// The router's bytes do not match the signed digest: the router was altered.
    #[error("bundle router does not match its signed digest (tampered)")]
    RouterDigest,
    /// A key file that cannot be read as one.
    #[error("signing key: {0}")]
    Key(String),
}

/// Device settings a bundle carries with its router: the operating point it was calibrated
/// for. `None` leaves the device's own flag in force. A small typed struct, so that a bundle
/// can only set what the device knows how to apply.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct DeviceSettings {
    /// Target share of tokens escalated (through the router's calibration table), in [0, 1].
    pub escalation_rate: Option<f32>,
    /// A fixed threshold instead of a rate, in [0, 1].
    pub tau: Option<f32>,
    /// Shortest wait for a cloud token, ms.
    pub deadline_min_ms: Option<u32>,
    /// Longest wait for a cloud token, ms.
    pub deadline_max_ms: Option<u32>,
    /// Tokens the SLM may decode ahead of an escalation in flight.
    pub speculate: Option<u32>,
}

impl DeviceSettings {
    /// Refuse values a device must not apply: a rate or tau outside [0, 1] (or both), a
    /// deadline above the protocol's cap or a minimum above the maximum, a long speculation.
    pub fn validate(&self) -> Result<(), BundleError> {
        let bad = |m: String| Err(BundleError::Invalid(m));
        for (name, v) in [("escalation_rate", self.escalation_rate), ("tau", self.tau)] {
            if let Some(v) = v {
                if !(0.0..=1.0).contains(&v) {
                    return bad(format!("{name} {v} is outside [0, 1]"));
                }
            }
        }
        if self.escalation_rate.is_some() && self.tau.is_some() {
            return bad("give escalation_rate or tau, not both".into());
        }
        for (name, v) in [("deadline_min_ms", self.deadline_min_ms), ("deadline_max_ms", self.deadline_max_ms)] {
            if v.is_some_and(|v| v == 0 || v > MAX_DEADLINE_MS) {
                return bad(format!("{name} must be within 1..={MAX_DEADLINE_MS}"));
            }
        }
        if let (Some(min), Some(max)) = (self.deadline_min_ms, self.deadline_max_ms) {
            if min > max {
                return bad(format!("deadline_min_ms {min} exceeds deadline_max_ms {max}"));
            }
        }
        if self.speculate.is_some_and(|s| s > MAX_SPECULATE) {
            return bad(format!("speculate must be at most {MAX_SPECULATE}"));
        }
        Ok(())
    }
}

/// What a bundle says about itself; signed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BundleManifest {
    /// The operator's version label ([`valid_version`]).
    pub version: String,
    /// The SLM the router reads the hidden states of.
    pub slm_id: String,
    /// That SLM's tokenizer fingerprint.
    pub tokenizer_fingerprint: String,
    /// Settings applied with the router.
    pub settings: DeviceSettings,
    /// SHA-256 of the router file.
    pub router_sha256: Sha256Digest,
    /// Which key signed it ([`VerifyingKey::key_id`]), so a refusal can say so.
    pub key_id: [u8; 8],
    /// When it was made, seconds since the Unix epoch (for operators; not checked).
    pub created_unix: u64,
}

/// A decoded bundle: its manifest, router and signature. Decoded is not verified: use
/// [`Bundle::verify`] before trusting any of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    /// The manifest.
    pub manifest: BundleManifest,
    /// The router file's bytes (safetensors).
    pub router: Vec<u8>,
    manifest_bytes: Vec<u8>,
    signature: [u8; SIGNATURE_BYTES],
}

/// Reads the layout front to back, refusing a length before it is used.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BundleError> {
        let need = self.at.saturating_add(n);
        let out = self.bytes.get(self.at..need).ok_or(BundleError::Truncated { have: self.bytes.len(), need })?;
        self.at = need;
        Ok(out)
    }

    fn u32(&mut self) -> Result<usize, BundleError> {
        let b = self.take(4)?;
        Ok(usize::try_from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])).unwrap_or(usize::MAX))
    }

    fn part(&mut self, part: &'static str, max: usize) -> Result<&'a [u8], BundleError> {
        let len = self.u32()?;
        if len > max {
            return Err(BundleError::TooLarge { part, len, max });
        }
        self.take(len)
    }
}

fn signed_message(manifest_bytes: &[u8]) -> Vec<u8> {
    [SIGNING_CONTEXT, manifest_bytes].concat()
}

impl Bundle {
    /// Decode a bundle file. Bounded: at most [`MAX_BUNDLE_BYTES`] are looked at, every part is
    /// checked against its cap first; trailing bytes are refused.
    pub fn decode(bytes: &[u8]) -> Result<Self, BundleError> {
        if bytes.len() > MAX_BUNDLE_BYTES {
            return Err(BundleError::TooLarge { part: "file", len: bytes.len(), max: MAX_BUNDLE_BYTES });
        }
        let mut r = Reader { bytes, at: 0 };
        if r.take(MAGIC.len())? != MAGIC {
            return Err(BundleError::BadMagic);
        }
        let f = r.take(2)?;
        let format = u16::from_le_bytes([f[0], f[1]]);
        if format != FORMAT {
            return Err(BundleError::Format(format));
        }
        let manifest_bytes = r.part("manifest", MAX_MANIFEST_BYTES)?;
        let cfg = bincode::config::standard().with_limit::<MAX_MANIFEST_BYTES>();
        let (manifest, used): (BundleManifest, usize) = bincode::serde::decode_from_slice(manifest_bytes, cfg).map_err(|e| BundleError::Manifest(e.to_string()))?;
        if used != manifest_bytes.len() {
            return Err(BundleError::Manifest(format!("{} bytes after the manifest", manifest_bytes.len() - used)));
        }
        let router = r.part("router", MAX_BUNDLE_BYTES)?;
        let sig = r.take(SIGNATURE_BYTES)?;
        let left = bytes.len() - r.at;
        if left > 0 {
            return Err(BundleError::Trailing(left));
        }
        let mut signature = [0u8; SIGNATURE_BYTES];
        signature.copy_from_slice(sig);
        Ok(Self { manifest, router: router.to_vec(), manifest_bytes: manifest_bytes.to_vec(), signature })
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAGIC.len() + 2 + 8 + self.manifest_bytes.len() + self.router.len() + SIGNATURE_BYTES);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT.to_le_bytes());
        out.extend_from_slice(&u32::try_from(self.manifest_bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&self.manifest_bytes);
        out.extend_from_slice(&u32::try_from(self.router.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&self.router);
        out.extend_from_slice(&self.signature);
        out
    }

    /// Make and sign a bundle of `router` with `manifest` (its `router_sha256` and `key_id`
    /// are filled in here). Refuses a bad version or settings, or a router over the cap.
    pub fn sign(mut manifest: BundleManifest, router: Vec<u8>, key: &SigningKey) -> Result<Self, BundleError> {
        check_manifest(&manifest)?;
        if router.len() > MAX_BUNDLE_BYTES - MAX_MANIFEST_BYTES {
            return Err(BundleError::TooLarge { part: "router", len: router.len(), max: MAX_BUNDLE_BYTES - MAX_MANIFEST_BYTES });
        }
        manifest.router_sha256 = Sha256Digest::of(&router);
        manifest.key_id = key.verifying_key().key_id();
        let manifest_bytes = bincode::serde::encode_to_vec(&manifest, bincode::config::standard()).map_err(|e| BundleError::Manifest(e.to_string()))?;
        if manifest_bytes.len() > MAX_MANIFEST_BYTES {
            return Err(BundleError::TooLarge { part: "manifest", len: manifest_bytes.len(), max: MAX_MANIFEST_BYTES });
        }
        let mut signature = [0u8; SIGNATURE_BYTES];
        signature.copy_from_slice(key.0.sign(&signed_message(&manifest_bytes)).as_ref());
        Ok(Self { manifest, router, manifest_bytes, signature })
    }

    /// Check the signature with `key`, then that the router is the one signed and the
    /// manifest's fields are in range. Only a bundle that passes may be used.
    pub fn verify(&self, key: &VerifyingKey) -> Result<(), BundleError> {
        if self.manifest.key_id != key.key_id() {
            return Err(BundleError::WrongKey { signed_by: hex::encode(self.manifest.key_id), trusted: hex::encode(key.key_id()) });
        }
        UnparsedPublicKey::new(&ED25519, &key.0).verify(&signed_message(&self.manifest_bytes), &self.signature).map_err(|_| BundleError::BadSignature)?;
        if Sha256Digest::of(&self.router) != self.manifest.router_sha256 {
            return Err(BundleError::RouterDigest);
        }
        check_manifest(&self.manifest)
    }

    /// The same bundle with `f` applied to its parts, signature unchanged: for tests that
    /// tamper with a bundle.
    #[doc(hidden)]
    pub fn tampered(mut self, f: impl FnOnce(&mut Vec<u8>, &mut Vec<u8>, &mut [u8; SIGNATURE_BYTES])) -> Self {
        f(&mut self.manifest_bytes, &mut self.router, &mut self.signature);
        self
    }
}

fn check_manifest(m: &BundleManifest) -> Result<(), BundleError> {
    if !valid_version(&m.version) {
        return Err(BundleError::Invalid(format!("version `{}` must be 1..=64 bytes of [A-Za-z0-9._+-]", m.version.escape_default())));
    }
    // The SLM id follows the rule of the `Hello`s it is matched against, and neither it nor the
    // fingerprint can carry a character a log line would print raw.
    let slm_ok = !m.slm_id.is_empty() && crate::protocol::text::check_model_id(&m.slm_id).is_ok();
    let fp_ok = m.tokenizer_fingerprint.len() <= 256 && crate::protocol::text::first_unsafe(&m.tokenizer_fingerprint).is_none();
    if !slm_ok || !fp_ok {
        return Err(BundleError::Invalid("slm_id must be a model id (1..=128 bytes of [A-Za-z0-9._/:+@-]) and the fingerprint at most 256 printable bytes".into()));
    }
    m.settings.validate()
}

/// The operator's Ed25519 key that signs bundles. Kept off the gateways (they serve bundles,
/// they never make them) and apart from the fleet CA's key (a leak of one does not give the
/// other: device identities and what devices run are separate trusts).
pub struct SigningKey(Ed25519KeyPair);

/// First line of a signing key file; the second is the PKCS#8 document in hex.
const SIGNING_KEY_HEADER: &str = "duet-bundle-signing-key v1";
/// Prefix of a public key file's one line.
const PUBLIC_KEY_PREFIX: &str = "ed25519:";

impl SigningKey {
    /// A new random key, and its PKCS#8 document (what [`Self::to_file_text`] stores).
    pub fn generate() -> Result<(Self, Vec<u8>), BundleError> {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).map_err(|_| BundleError::Key("generating a key failed".into()))?;
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).map_err(|e| BundleError::Key(e.to_string()))?;
        Ok((Self(pair), pkcs8.as_ref().to_vec()))
    }

    /// The text of a key file holding `pkcs8`.
    pub fn to_file_text(pkcs8: &[u8]) -> String {
        format!("{SIGNING_KEY_HEADER}\n{}\n", hex::encode(pkcs8))
    }

    /// Read a key file's text.
    pub fn from_file_text(text: &str) -> Result<Self, BundleError> {
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'));
        if lines.next() != Some(SIGNING_KEY_HEADER) {
            return Err(BundleError::Key(format!("not a bundle signing key (first line must be `{SIGNING_KEY_HEADER}`)")));
        }
        let der = lines.next().and_then(|l| hex::decode(l).ok()).ok_or_else(|| BundleError::Key("the key's hex line is missing or not hex".into()))?;
        Ed25519KeyPair::from_pkcs8(&der).map(Self).map_err(|e| BundleError::Key(e.to_string()))
    }

    /// Its public half, which devices trust.
    pub fn verifying_key(&self) -> VerifyingKey {
        let mut k = [0u8; 32];
        k.copy_from_slice(self.0.public_key().as_ref());
        VerifyingKey(k)
    }
}

/// The public key devices check bundles with (edge-node's `--bundle-key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyingKey(pub [u8; 32]);

impl VerifyingKey {
    /// Short id: the first 8 bytes of the key's SHA-256, recorded in each bundle it signs.
    pub fn key_id(&self) -> [u8; 8] {
        let d = Sha256Digest::of(&self.0);
        let mut id = [0u8; 8];
        id.copy_from_slice(&d.0[..8]);
        id
    }

    /// The one-line text of a public key file: `ed25519:<64 hex digits>`.
    pub fn to_file_text(&self) -> String {
        format!("{PUBLIC_KEY_PREFIX}{}\n", hex::encode(self.0))
    }

    /// Read a public key file's text (`#` comments and blank lines allowed).
    pub fn from_file_text(text: &str) -> Result<Self, BundleError> {
        let line = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')).unwrap_or("");
        let hexed = line.strip_prefix(PUBLIC_KEY_PREFIX).ok_or_else(|| BundleError::Key(format!("a public key file holds one line `{PUBLIC_KEY_PREFIX}<64 hex digits>`")))?;
        let mut k = [0u8; 32];
        hex::decode_to_slice(hexed, &mut k).map_err(|e| BundleError::Key(format!("public key: {e}")))?;
        Ok(Self(k))
    }
}
