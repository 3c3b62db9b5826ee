//! The device's side of a rollout, without I/O: whether to fetch the bundle it is offered,
//! the chunked download, and the accept/refuse decision on what arrived.
//!
//! A device never fetches the bundle it runs, nor one it refused for its content (a refusal
//! is final for that digest: a tampered bundle stays tampered), but retries one whose download
//! failed (the link, not the bundle). Whatever it refuses, it keeps running what it has.

use std::collections::VecDeque;

use super::bundle::{Bundle, BundleError, VerifyingKey};
use super::digest::{BundleRef, Sha256Digest};
use super::{MAX_BUNDLE_BYTES, MAX_CHUNK_BYTES};
use crate::protocol::Frame;

/// Most refused digests a device remembers (oldest forgotten first): bounds the memory a
/// gateway offering ever new bad bundles can take.
pub const MAX_REFUSED: usize = 16;

/// Why a device does not switch to an offered bundle. Logged; the device keeps what it runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No `--bundle-key`: this device trusts no bundle signer.
    #[error("no bundle key is configured (--bundle-key): bundles are not accepted")]
    NoKey,
    /// The offer is not one a device can fetch (empty, over the size cap, bad version).
    #[error("offer refused: {0}")]
    Offer(String),
    /// What arrived is not the size the offer announced.
    #[error("bundle of {got} bytes, {offered} offered")]
    Size {
        /// Offered size.
        offered: u32,
        /// Bytes received.
        got: usize,
    },
    /// What arrived is not what was offered.
    #[error("bundle bytes do not match the offered digest {offered:?}")]
    Digest {
        /// The offered digest.
        offered: Sha256Digest,
    },
    /// The file is not a valid bundle, or does not verify.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// Made for another SLM.
    #[error("bundle made for SLM `{bundle}`, this device runs `{device}`")]
    WrongSlm {
        /// The bundle's SLM.
        bundle: String,
        /// The device's.
        device: String,
    },
    /// Made for another tokenizer.
    #[error("bundle made for tokenizer {bundle}, this device's is {device}")]
    WrongTokenizer {
        /// The bundle's fingerprint.
        bundle: String,
        /// The device's.
        device: String,
    },
    /// The signed version is not the one offered.
    #[error("bundle says version `{bundle}`, `{offered}` was offered")]
    Version {
        /// Offered.
        offered: String,
        /// Signed.
        bundle: String,
    },
    /// The router inside does not load on this device (features, width).
    #[error("bundle router: {0}")]
    Router(String),
    /// A chunk that does not continue the download (wrong digest, offset or total, oversize).
    #[error("bad bundle chunk: {0}")]
    Chunk(String),
    /// The gateway could not serve it, or the link failed: retried at the next poll.
    #[error("bundle unavailable: {0}")]
    Unavailable(String),
}

impl Refusal {
    /// Whether the bundle itself is bad (remembered, never fetched again) rather than its
    /// delivery (retried).
    pub fn is_final(&self) -> bool {
        !matches!(self, Refusal::Unavailable(_) | Refusal::Chunk(_) | Refusal::NoKey)
    }
}

/// Check downloaded `bytes` against the `offered` reference, the trusted `key` and this
/// device's SLM and tokenizer; the verified bundle, or why not.
pub fn check_bundle(bytes: &[u8], offered: &BundleRef, key: &VerifyingKey, slm_id: &str, tokenizer_fingerprint: &str) -> Result<Bundle, Refusal> {
    if usize::try_from(offered.size).ok() != Some(bytes.len()) {
        return Err(Refusal::Size { offered: offered.size, got: bytes.len() });
    }
    if Sha256Digest::of(bytes) != offered.sha256 {
        return Err(Refusal::Digest { offered: offered.sha256 });
    }
    let bundle = Bundle::decode(bytes)?;
    bundle.verify(key)?;
    let m = &bundle.manifest;
    if m.version != offered.version {
        return Err(Refusal::Version { offered: offered.version.clone(), bundle: m.version.clone() });
    }
    if m.slm_id != slm_id {
        return Err(Refusal::WrongSlm { bundle: m.slm_id.clone(), device: slm_id.to_string() });
    }
    if m.tokenizer_fingerprint != tokenizer_fingerprint {
        return Err(Refusal::WrongTokenizer { bundle: m.tokenizer_fingerprint.clone(), device: tokenizer_fingerprint.to_string() });
    }
    Ok(bundle)
}

/// What a device runs and what it refused: decides whether an offer is worth fetching.
#[derive(Debug, Clone, Default)]
pub struct BundleChoice {
    running: Option<BundleRef>,
    refused: VecDeque<Sha256Digest>,
}

impl BundleChoice {
    /// A device running `running` (none: the router it was started with).
    pub fn new(running: Option<BundleRef>) -> Self {
        Self { running, refused: VecDeque::new() }
    }

    /// The bundle it runs.
    pub fn running(&self) -> Option<&BundleRef> {
        self.running.as_ref()
    }

    /// The bundle to fetch for this offer, if any: not when nothing is offered (keep what
    /// runs), not the one running, not one refused for its content.
    pub fn on_offer(&self, offer: Option<&BundleRef>) -> Option<BundleRef> {
        let offer = offer?;
        let running = self.running.as_ref().is_some_and(|r| r.sha256 == offer.sha256);
        (!running && !self.refused.contains(&offer.sha256)).then(|| offer.clone())
    }

    /// The device switched to `bundle` (at a generation boundary).
    pub fn accepted(&mut self, bundle: BundleRef) {
        self.refused.retain(|d| *d != bundle.sha256);
        self.running = Some(bundle);
    }

    /// The device refused `bundle` for `why`: a final refusal is remembered (bounded).
    pub fn refused(&mut self, bundle: &BundleRef, why: &Refusal) {
        if !why.is_final() || self.refused.contains(&bundle.sha256) {
            return;
        }
        if self.refused.len() >= MAX_REFUSED {
            self.refused.pop_front();
        }
        self.refused.push_back(bundle.sha256);
    }

    /// How many refused digests are remembered.
    pub fn refused_len(&self) -> usize {
        self.refused.len()
    }
}

/// A bundle being fetched chunk by chunk: each reply must continue exactly where the last one
/// ended, and the whole is never more than the size offered (itself capped).
#[derive(Debug)]
pub struct Download {
    offered: BundleRef,
    buf: Vec<u8>,
}

/// What to do after a chunk.
#[derive(Debug, PartialEq)]
pub enum Progress {
    /// Send this request for the next chunk.
    More(Frame),
    /// Every byte is there: check it with [`check_bundle`].
    Done(Vec<u8>),
}

impl Download {
    /// Start fetching `offered`: the download and its first request.
    pub fn start(offered: BundleRef) -> Result<(Self, Frame), Refusal> {
        let size = usize::try_from(offered.size).unwrap_or(usize::MAX);
        if size == 0 || size > MAX_BUNDLE_BYTES {
            return Err(Refusal::Offer(format!("size {} is outside 1..={MAX_BUNDLE_BYTES}", offered.size)));
        }
        if !super::valid_version(&offered.version) {
            return Err(Refusal::Offer("bad version label".into()));
        }
        let first = Frame::FetchBundle { sha256: offered.sha256, offset: 0 };
        Ok((Self { offered, buf: Vec::new() }, first))
    }

    /// What is being fetched.
    pub fn offered(&self) -> &BundleRef {
        &self.offered
    }

    /// Take the reply to the last request.
    pub fn on_reply(&mut self, reply: Frame) -> Result<Progress, Refusal> {
        let (sha256, offset, total, bytes) = match reply {
            Frame::BundleChunk { sha256, offset, total, bytes } => (sha256, offset, total, bytes),
            Frame::Error { message, .. } => return Err(Refusal::Unavailable(message)),
            other => return Err(Refusal::Chunk(format!("expected a bundle chunk, got {}", other.kind()))),
        };
        let at = self.buf.len();
        if sha256 != self.offered.sha256 {
            return Err(Refusal::Chunk("a chunk of another bundle".into()));
        }
        if total != self.offered.size {
            return Err(Refusal::Chunk(format!("chunk says the bundle is {total} bytes, {} offered", self.offered.size)));
        }
        if usize::try_from(offset).ok() != Some(at) {
            return Err(Refusal::Chunk(format!("chunk at offset {offset}, {at} expected")));
        }
        let size = usize::try_from(self.offered.size).unwrap_or(usize::MAX);
        if bytes.is_empty() || bytes.len() > MAX_CHUNK_BYTES || at + bytes.len() > size {
            return Err(Refusal::Chunk(format!("chunk of {} bytes at {at} of {size}", bytes.len())));
        }
        self.buf.extend_from_slice(&bytes);
        if self.buf.len() == size {
            return Ok(Progress::Done(std::mem::take(&mut self.buf)));
        }
        Ok(Progress::More(Frame::FetchBundle { sha256: self.offered.sha256, offset: u32::try_from(self.buf.len()).unwrap_or(u32::MAX) }))
    }
}

/// The gateway's answer to `FetchBundle { offset }` for `file` (the bundle's bytes): the chunk
/// from `offset`, at most `chunk_bytes` (itself at most [`MAX_CHUNK_BYTES`]), or `None` when
/// `offset` is at or past the end.
pub fn chunk_of(file: &[u8], sha256: Sha256Digest, offset: u32, chunk_bytes: usize) -> Option<Frame> {
    let start = usize::try_from(offset).ok().filter(|&o| o < file.len())?;
    let end = start.saturating_add(chunk_bytes.clamp(1, MAX_CHUNK_BYTES)).min(file.len());
    Some(Frame::BundleChunk { sha256, offset, total: u32::try_from(file.len()).ok()?, bytes: file[start..end].to_vec() })
}
