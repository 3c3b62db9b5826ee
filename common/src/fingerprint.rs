//! The tokenizer fingerprint: what makes two ends agree on what every token id means.
//!
//! Only token ids cross the network, so the device's SLM and the cloud's LLM must share one
//! tokenizer. `Hello` carries this hash and the gateway refuses a device whose hash differs.
//! It hashes exactly the id → token mapping (added and special tokens included), so two
//! tokenizer files that differ only in normalisation settings or formatting still agree.

use sha2::{Digest, Sha256};

/// Lowercase hex sha256 over, for every id ascending: u32-le id, u32-le byte length, token
/// bytes. An id listed twice keeps its smallest token. `deploy/models/prepare.py` computes the same
/// hash from `tokenizer.json`; the two must agree.
pub fn tokenizer_fingerprint<S: AsRef<str>>(vocab: impl IntoIterator<Item = (u32, S)>) -> String {
    let mut entries: Vec<(u32, S)> = vocab.into_iter().collect();
    entries.sort_by(|(a, s), (b, t)| (a, s.as_ref()).cmp(&(b, t.as_ref())));
    entries.dedup_by_key(|(id, _)| *id);
    let mut h = Sha256::new();
    for (id, token) in &entries {
        let token = token.as_ref().as_bytes();
        h.update(id.to_le_bytes());
        h.update(u32::try_from(token.len()).unwrap_or(u32::MAX).to_le_bytes());
        h.update(token);
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_depends_on_the_mapping_not_the_order_given() {
        let a = tokenizer_fingerprint([(1, "b"), (0, "a")]);
        assert_eq!(a, tokenizer_fingerprint([(0, "a"), (1, "b")]));
        assert_ne!(a, tokenizer_fingerprint([(0, "a"), (1, "c")]));
        assert_ne!(a, tokenizer_fingerprint([(0, "a"), (2, "b")]));
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    }
}
