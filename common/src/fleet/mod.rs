//! Router bundles and their rollout to a fleet of devices, without I/O
//! (docs/ARCHITECTURE.md, "Fleet rollout").
//!
//! A *bundle* is one signed file: a router file (safetensors, as `router-lab train` writes it),
//! the device settings it was calibrated with, a version, and the SLM id and tokenizer
//! fingerprint it is made for. The operator signs it with a dedicated Ed25519 key
//! (`cloud-gateway ca signing-key`); devices trust that key's public half and nothing else, so
//! a gateway or a bundle store that is compromised can withhold bundles but not forge one.
//!
//! Layout, one job per file:
//! - [`digest`]: [`BundleRef`], how a bundle is named on the wire (version, SHA-256, size).
//! - [`bundle`]: the file format, signing and verification ([`Bundle`], [`SigningKey`],
//!   [`VerifyingKey`]).
//! - [`rollout`]: which bundle a device gets (a percentage of the stable hash of its id) and
//!   what publishing a bundle does to an SLM's rollout.
//! - [`device`]: the device's side: whether to fetch what it is offered, the chunked download
//!   and the accept/refuse decision on the bytes.
//! - [`report`]: the figures a device reports, and which ones a gateway takes as possible.
//!
//! The frames that carry them (`BundleReport`, `BundleOffer`, `FetchBundle`, `BundleChunk`)
//! are protocol v4 ([`crate::protocol::understands_bundles`]).
#![cfg_attr(not(test), deny(clippy::disallowed_methods))]

pub mod bundle;
pub mod device;
pub mod digest;
pub mod report;
pub mod rollout;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use bundle::{Bundle, BundleError, BundleManifest, DeviceSettings, SigningKey, VerifyingKey};
pub use device::{check_bundle, BundleChoice, Download, Progress, Refusal};
pub use digest::{BundleRef, Sha256Digest};
pub use report::{ReportError, ReportedCounts, MAX_REPORTED_COUNT};
pub use rollout::{bucket, SlmRollout};

/// Largest bundle file, bytes: a router file is about 0.5 MB (an 898x128 MLP in f32); this
/// leaves room for an SLM with a wider hidden state while bounding what a device buffers.
pub const MAX_BUNDLE_BYTES: usize = 8 * 1024 * 1024;

/// Largest `BundleChunk` payload, bytes: with its header it stays under the default frame
/// limit (64 KiB), so a chunk is one frame on one request stream.
pub const MAX_CHUNK_BYTES: usize = 32 * 1024;

/// Longest bundle version, bytes (`[A-Za-z0-9._+-]`, as in a file name or a metrics label).
pub const MAX_VERSION_BYTES: usize = 64;

/// Whether `version` is a usable bundle version: 1..=64 bytes of `[A-Za-z0-9._+-]`, so it is
/// safe in a file name, a log line and a Prometheus label.
pub fn valid_version(version: &str) -> bool {
    (1..=MAX_VERSION_BYTES).contains(&version.len()) && version.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'+' | b'-'))
}
