//! Tokenizer loading and fingerprinting.
//!
//! Only token ids cross the network, so the edge and the cloud must agree on what every id
//! means. The fingerprint hashes exactly that mapping (id -> token string, including added and
//! special tokens) and is compared in the protocol handshake.

use std::path::Path;

/// Tokenizer problems.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// `tokenizer.json` could not be loaded.
    #[error("loading tokenizer {path}: {message}")]
    Load { path: String, message: String },
    /// Encoding or decoding failed.
    #[error("tokenizer: {0}")]
    Codec(String),
    /// The file does not match the fingerprint recorded when the model was prepared.
    #[error("tokenizer fingerprint {actual} does not match the model's recorded {expected}; re-run deploy/models/prepare")]
    FingerprintMismatch { expected: String, actual: String },
}

/// A loaded HF tokenizer plus its fingerprint.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    fingerprint: String,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer").field("fingerprint", &self.fingerprint).finish()
    }
}

impl Tokenizer {
    /// Load `tokenizer.json`; if `expected_fingerprint` is given, refuse a file that differs.
    pub fn load(path: &Path, expected_fingerprint: Option<&str>) -> Result<Self, TokenizerError> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| TokenizerError::Load { path: path.display().to_string(), message: e.to_string() })?;
        let fingerprint = fingerprint(&inner);
        if let Some(expected) = expected_fingerprint {
            if expected != fingerprint {
                return Err(TokenizerError::FingerprintMismatch { expected: expected.to_string(), actual: fingerprint });
            }
        }
        Ok(Self { inner, fingerprint })
    }

    /// Hex sha256 of the id -> token mapping.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Encode text to ids. Special tokens written in the text (e.g. `<|im_start|>`) are recognised.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let enc = self.inner.encode(text, false).map_err(|e| TokenizerError::Codec(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decode ids to text, dropping special tokens.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner.decode(ids, true).map_err(|e| TokenizerError::Codec(e.to_string()))
    }

    /// The id of a token string, if it is in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Number of ids (vocabulary plus added tokens).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

/// The fingerprint of a loaded tokenizer ([`common::fingerprint::tokenizer_fingerprint`] of its
/// id -> token mapping).
pub fn fingerprint(tok: &tokenizers::Tokenizer) -> String {
    common::fingerprint::tokenizer_fingerprint(tok.get_vocab(true).into_iter().map(|(t, i)| (i, t)))
}
