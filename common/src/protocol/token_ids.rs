//! Token id lists in a compact wire form: unsigned LEB128 varints packed into one byte string.
//!
//! bincode's own varint spends 3 bytes on ids of 251..65535 and 5 bytes on anything larger,
//! and real vocabularies (Qwen2.5: 151k entries) put most ids above 16k. LEB128 spends 1 byte
//! below 128, 2 below 16384 and 3 below 2^21, which is what keeps a typical delta escalation
//! under the 64-byte budget. Decoding is strict (canonical, bounded) so that one id list has
//! exactly one encoding and hostile input only ever produces an error.

use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The most bytes a canonical LEB128 `u32` can take (5 x 7 bits >= 32 bits).
const MAX_VARINT_BYTES: usize = 5;

/// A list of token ids, serialized as one LEB128 byte string so it is small on the wire.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TokenIds(pub Vec<u32>);

impl TokenIds {
    /// Wrap ids; exists so call sites read as intent rather than as a tuple constructor.
    pub fn new(ids: Vec<u32>) -> Self {
        Self(ids)
    }

    /// Borrow the ids, for appending to a context without copying.
    pub fn as_slice(&self) -> &[u32] {
        &self.0
    }

    /// Number of ids, which is what context-length limits count.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no ids (a delta that adds nothing is legal: a retry at the same position).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Take the ids out without copying.
    pub fn into_vec(self) -> Vec<u32> {
        self.0
    }
}

impl From<Vec<u32>> for TokenIds {
    fn from(ids: Vec<u32>) -> Self {
        Self(ids)
    }
}

impl From<&[u32]> for TokenIds {
    fn from(ids: &[u32]) -> Self {
        Self(ids.to_vec())
    }
}

/// Why a LEB128 byte string is not a valid id list. Offsets point at the first byte of the
/// offending varint, to make a fuzz or protocol failure easy to locate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VarintError {
    /// The bytes ended while a varint still had its continuation bit set.
    #[error("token id varint at byte {offset} is truncated")]
    Truncated {
        /// Start of the varint.
        offset: usize,
    },
    /// A varint ended with a zero byte after the first: a longer spelling of a smaller number.
    /// Rejected so every id list has exactly one encoding.
    #[error("token id varint at byte {offset} is not in its shortest form")]
    Overlong {
        /// Start of the varint.
        offset: usize,
    },
    /// The value does not fit in a `u32`.
    #[error("token id varint at byte {offset} exceeds u32")]
    Overflow {
        /// Start of the varint.
        offset: usize,
    },
}

/// Append the LEB128 encoding of `ids` to `out`; split out so callers can size-check cheaply.
pub fn encode_varints(ids: &[u32], out: &mut Vec<u8>) {
    out.reserve(ids.len());
    for &id in ids {
        let mut v = id;
        loop {
            let low = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(low);
                break;
            }
            out.push(low | 0x80);
        }
    }
}

/// The number of bytes [`encode_varints`] would write, for size estimates without allocating.
pub fn encoded_len(ids: &[u32]) -> usize {
    ids.iter()
        .map(|&id| match id {
            0..=0x7f => 1,
            0x80..=0x3fff => 2,
            0x4000..=0x1f_ffff => 3,
            0x20_0000..=0x0fff_ffff => 4,
            _ => 5,
        })
        .sum()
}

/// Decode a LEB128 byte string strictly: canonical varints only, each fitting in a `u32`.
pub fn decode_varints(bytes: &[u8]) -> Result<Vec<u32>, VarintError> {
    // Every id takes at least one byte, so the byte count bounds the allocation.
    let mut ids = Vec::with_capacity(bytes.len());
    let mut iter = bytes.iter().enumerate();
    while let Some((offset, &first)) = iter.next() {
        let mut value = u32::from(first & 0x7f);
        let mut last = first;
        let mut used = 1usize;
        while last & 0x80 != 0 {
            let Some((_, &b)) = iter.next() else {
                return Err(VarintError::Truncated { offset });
            };
            used += 1;
            if used > MAX_VARINT_BYTES {
                return Err(VarintError::Overflow { offset });
            }
            let shift = 7 * (used - 1) as u32;
            // The 5th byte may only carry the top 4 bits of a u32.
            if used == MAX_VARINT_BYTES && b & 0x7f > 0x0f {
                return Err(VarintError::Overflow { offset });
            }
            value |= u32::from(b & 0x7f) << shift;
            last = b;
        }
        if used > 1 && last == 0 {
            return Err(VarintError::Overlong { offset });
        }
        ids.push(value);
    }
    Ok(ids)
}

impl Serialize for TokenIds {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut bytes = Vec::with_capacity(encoded_len(&self.0));
        encode_varints(&self.0, &mut bytes);
        serializer.serialize_bytes(&bytes)
    }
}

impl<'de> Deserialize<'de> for TokenIds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_byte_buf(TokenIdsVisitor)
    }
}

/// Accepts the byte string from binary formats and a sequence of bytes from self-describing
/// ones (JSON renders `serialize_bytes` as an array), so logs and fixtures can round-trip too.
struct TokenIdsVisitor;

impl<'de> Visitor<'de> for TokenIdsVisitor {
    type Value = TokenIds;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a byte string of LEB128 token ids")
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<TokenIds, E> {
        decode_varints(v).map(TokenIds).map_err(E::custom)
    }

    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<TokenIds, E> {
        self.visit_bytes(&v)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TokenIds, A::Error> {
        // Never trust a size hint from the input for the allocation.
        let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(b) = seq.next_element::<u8>()? {
            bytes.push(b);
        }
        self.visit_bytes(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(ids: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_varints(ids, &mut out);
        out
    }

    #[test]
    fn known_encodings() {
        assert_eq!(enc(&[0]), [0x00]);
        assert_eq!(enc(&[127]), [0x7f]);
        assert_eq!(enc(&[128]), [0x80, 0x01]);
        assert_eq!(enc(&[16383]), [0xff, 0x7f]);
        assert_eq!(enc(&[16384]), [0x80, 0x80, 0x01]);
        assert_eq!(enc(&[u32::MAX]), [0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(enc(&[1, 300]), [0x01, 0xac, 0x02]);
    }

    #[test]
    fn encoded_len_matches_encoding() {
        let ids = [0, 127, 128, 16383, 16384, 0x1f_ffff, 0x20_0000, 0x0fff_ffff, 0x1000_0000, u32::MAX];
        for id in ids {
            assert_eq!(encoded_len(&[id]), enc(&[id]).len(), "id {id}");
        }
    }

    #[test]
    fn decodes_what_it_encodes() {
        let ids = vec![0, 1, 127, 128, 151_643, 65_535, 65_536, u32::MAX];
        assert_eq!(decode_varints(&enc(&ids)), Ok(ids));
        assert_eq!(decode_varints(&[]), Ok(vec![]));
    }

    #[test]
    fn rejects_truncated() {
        assert_eq!(decode_varints(&[0x80]), Err(VarintError::Truncated { offset: 0 }));
        assert_eq!(decode_varints(&[0x05, 0xff, 0xff]), Err(VarintError::Truncated { offset: 1 }));
    }

    #[test]
    fn rejects_overlong() {
        assert_eq!(decode_varints(&[0x80, 0x00]), Err(VarintError::Overlong { offset: 0 }));
        assert_eq!(decode_varints(&[0x01, 0x81, 0x80, 0x00]), Err(VarintError::Overlong { offset: 1 }));
    }

    #[test]
    fn rejects_overflow() {
        // 2^32 needs a 5th byte of 0x10.
        assert_eq!(decode_varints(&[0x80, 0x80, 0x80, 0x80, 0x10]), Err(VarintError::Overflow { offset: 0 }));
        // A sixth byte is never allowed.
        assert_eq!(decode_varints(&[0xff, 0xff, 0xff, 0xff, 0x8f, 0x01]), Err(VarintError::Overflow { offset: 0 }));
    }

    #[test]
    fn serde_json_round_trip_via_seq() {
        let ids = TokenIds::new(vec![3, 40_000, 151_000]);
        let json = serde_json::to_string(&ids).unwrap();
        assert_eq!(serde_json::from_str::<TokenIds>(&json).unwrap(), ids);
        assert!(serde_json::from_str::<TokenIds>("[128]").is_err());
    }
}
