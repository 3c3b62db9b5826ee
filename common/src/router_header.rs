//! What a router file says it was trained for, read from its header alone.
//!
//! A router file (edge-node's `router_file`) is safetensors: an 8-byte little-endian header
//! length, a JSON header, then the tensors. The header's `__metadata__` holds one JSON string
//! under `duet_router`: the router's metadata, led by the SLM id and the tokenizer fingerprint
//! it was trained for. The device reads it to refuse a router for another model; the gateway's
//! `fleet bundle` reads it to label a bundle with the SLM it is for, without the weights. Both
//! read it here, so a file one accepts the other reads the same way.

use std::io::Read;
use std::path::Path;

/// Key of the router's metadata in the safetensors header's `__metadata__`.
pub const META_KEY: &str = "duet_router";

/// Longest header read, bytes: the safetensors format's own limit.
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Why a router file's header could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RouterHeaderError {
    /// The file could not be opened or read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Not a safetensors file: too short, an implausible header length, or a header that is
    /// not JSON.
    #[error("not a safetensors file: {0}")]
    NotSafetensors(String),
    /// A safetensors file without the router's metadata.
    #[error("no `{META_KEY}` metadata (not a Duet router file)")]
    NotARouter,
    /// The metadata is there but not what a router file writes.
    #[error("`{META_KEY}` metadata: {0}")]
    Metadata(String),
}

/// A router file's metadata as its header holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct RouterHeader {
    /// The SLM whose features the router reads.
    pub slm_id: String,
    /// That SLM's tokenizer fingerprint.
    pub tokenizer_fingerprint: String,
    /// The whole `duet_router` metadata (JSON), for a reader that wants the rest of it.
    pub meta_json: String,
}

impl RouterHeader {
    /// Read the header of the router file at `path`, without reading the weights.
    pub fn from_file(path: &Path) -> Result<Self, RouterHeaderError> {
        Self::from_reader(std::fs::File::open(path)?)
    }

    /// Read the header at the start of `bytes` (a whole router file, or its first bytes).
    pub fn from_bytes(mut bytes: &[u8]) -> Result<Self, RouterHeaderError> {
        Self::from_reader(&mut bytes)
    }

    /// Read the header from the start of `reader`.
    pub fn from_reader(mut reader: impl Read) -> Result<Self, RouterHeaderError> {
        let mut len = [0u8; 8];
        reader.read_exact(&mut len).map_err(|e| short(e, "no header length"))?;
        let len = u64::from_le_bytes(len);
        if len > MAX_HEADER_BYTES {
            return Err(RouterHeaderError::NotSafetensors(format!("a header of {len} bytes")));
        }
        // Read through `take`: what is allocated is what the file holds, not what it claims.
        let mut header = Vec::new();
        reader.take(len).read_to_end(&mut header)?;
        if header.len() as u64 != len {
            return Err(RouterHeaderError::NotSafetensors(format!("a header of {len} bytes, {} there", header.len())));
        }
        let header: serde_json::Value = serde_json::from_slice(&header).map_err(|e| RouterHeaderError::NotSafetensors(format!("header: {e}")))?;
        let meta_json = header.get("__metadata__").and_then(|m| m.get(META_KEY)).and_then(serde_json::Value::as_str).ok_or(RouterHeaderError::NotARouter)?;
        Self::from_meta_json(meta_json)
    }

    /// The SLM id and tokenizer fingerprint of a `duet_router` metadata string.
    pub fn from_meta_json(meta_json: &str) -> Result<Self, RouterHeaderError> {
        let meta: serde_json::Value = serde_json::from_str(meta_json).map_err(|e| RouterHeaderError::Metadata(e.to_string()))?;
        let field = |k: &str| meta.get(k).and_then(serde_json::Value::as_str).map(str::to_string).ok_or_else(|| RouterHeaderError::Metadata(format!("no `{k}`")));
        Ok(Self { slm_id: field("slm_id")?, tokenizer_fingerprint: field("tokenizer_fingerprint")?, meta_json: meta_json.to_string() })
    }
}

/// A read that ran out of bytes is a file too short to be safetensors; other failures are I/O.
fn short(e: std::io::Error, what: &str) -> RouterHeaderError {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => RouterHeaderError::NotSafetensors(what.into()),
        _ => RouterHeaderError::Io(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A safetensors-shaped file: the header's length, then the header.
    fn file(header: &serde_json::Value) -> Vec<u8> {
        let text = header.to_string();
        [(text.len() as u64).to_le_bytes().as_slice(), text.as_bytes()].concat()
    }

    fn router(meta: &serde_json::Value) -> Vec<u8> {
        file(&serde_json::json!({ "__metadata__": { META_KEY: meta.to_string() }, "w": { "dtype": "F32", "shape": [1], "data_offsets": [0, 4] } }))
    }

    #[test]
    fn the_slm_and_tokenizer_are_read_from_the_header() {
        let meta = serde_json::json!({ "format": 1, "slm_id": "slm-a", "tokenizer_fingerprint": "fp", "mlp_hidden": 4 });
        let mut bytes = router(&meta);
        bytes.extend_from_slice(&[0; 4]);
        let h = RouterHeader::from_bytes(&bytes).unwrap();
        assert_eq!((h.slm_id.as_str(), h.tokenizer_fingerprint.as_str()), ("slm-a", "fp"));
        assert_eq!(serde_json::from_str::<serde_json::Value>(&h.meta_json).unwrap(), meta, "the whole metadata for who reads the rest");
    }

    #[test]
    fn a_bad_header_is_a_typed_error() {
        let not = |b: &[u8]| matches!(RouterHeader::from_bytes(b), Err(RouterHeaderError::NotSafetensors(_)));
        assert!(not(b"short"), "no length");
        assert!(not(&u64::MAX.to_le_bytes()), "an implausible length");
        assert!(not(&[16u64.to_le_bytes().as_slice(), b"{}"].concat()), "cut short");
        assert!(not(&[2u64.to_le_bytes().as_slice(), b"{]"].concat()), "not JSON");
        let foreign = file(&serde_json::json!({ "__metadata__": { "format": "pt" } }));
        let e = RouterHeader::from_bytes(&foreign).unwrap_err();
        assert!(matches!(e, RouterHeaderError::NotARouter) && e.to_string().contains("not a Duet router"), "{e}");
        assert!(matches!(RouterHeader::from_bytes(&file(&serde_json::json!({ "__metadata__": { META_KEY: "{ not json" } }))), Err(RouterHeaderError::Metadata(_))));
        let no_fp = router(&serde_json::json!({ "slm_id": "slm-a" }));
        assert!(matches!(RouterHeader::from_bytes(&no_fp), Err(RouterHeaderError::Metadata(m)) if m.contains("tokenizer_fingerprint")));
        let numeric = router(&serde_json::json!({ "slm_id": 7, "tokenizer_fingerprint": "fp" }));
        assert!(matches!(RouterHeader::from_bytes(&numeric), Err(RouterHeaderError::Metadata(_))));
    }

    #[test]
    fn a_missing_file_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(RouterHeader::from_file(&dir.path().join("missing")), Err(RouterHeaderError::Io(_))));
    }
}
