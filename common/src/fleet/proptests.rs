//! Property tests of the bundle decoder and the chunked download: any bytes, and any bytes
//! laid out like a bundle, are answered with `Ok` or `Err`, never a panic (the same property
//! `fuzz/fuzz_targets/bundle_decoder.rs` explores with coverage guidance); every truncation and
//! every single-byte change of a signed bundle is refused; a download never holds more than the
//! size offered.

use proptest::prelude::*;

use super::device::{chunk_of, Download, Progress};
use super::*;
use crate::protocol::Frame;

fn key() -> SigningKey {
    SigningKey::generate().unwrap().0
}

fn manifest(version: String, slm_id: String) -> BundleManifest {
    BundleManifest {
        version,
        slm_id,
        tokenizer_fingerprint: "f".repeat(64),
        settings: DeviceSettings::default(),
        router_sha256: Sha256Digest::default(),
        key_id: [0; 8],
        created_unix: 0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_bytes_decode_or_fail_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let _ = Bundle::decode(&bytes);
        let mut with_magic = bundle::MAGIC.to_vec();
        with_magic.extend_from_slice(&bundle::FORMAT.to_le_bytes());
        with_magic.extend_from_slice(&bytes);
        let _ = Bundle::decode(&with_magic);
    }

    /// Bytes laid out like a bundle (magic, format, any lengths, any parts) reach the manifest
    /// decoder and the length checks: never a panic, and what decodes re-encodes to exactly
    /// the bytes it came from (nothing is dropped or invented on the way).
    #[test]
    fn bundle_shaped_bytes_decode_to_what_they_hold_or_fail_cleanly(
        manifest_len in prop_oneof![0u32..300, any::<u32>()],
        manifest in prop::collection::vec(any::<u8>(), 0..300),
        router_len in prop_oneof![0u32..300, any::<u32>()],
        router in prop::collection::vec(any::<u8>(), 0..300),
        tail in prop::collection::vec(any::<u8>(), 0..80),
    ) {
        let mut bytes = bundle::MAGIC.to_vec();
        bytes.extend_from_slice(&bundle::FORMAT.to_le_bytes());
        bytes.extend_from_slice(&manifest_len.to_le_bytes());
        bytes.extend_from_slice(&manifest);
        bytes.extend_from_slice(&router_len.to_le_bytes());
        bytes.extend_from_slice(&router);
        bytes.extend_from_slice(&tail);
        if let Ok(b) = Bundle::decode(&bytes) {
            prop_assert_eq!(b.encode(), bytes);
        }
    }

    /// Every prefix of a signed bundle (a truncated download) is refused at decode.
    #[test]
    fn every_truncation_of_a_signed_bundle_is_refused(router in prop::collection::vec(any::<u8>(), 1..256), cut in any::<prop::sample::Index>()) {
        let bytes = Bundle::sign(manifest("v1".into(), "slm".into()), router, &key()).unwrap().encode();
        let at = cut.index(bytes.len());
        prop_assert!(Bundle::decode(&bytes[..at]).is_err(), "a bundle cut at {} of {} decoded", at, bytes.len());
    }

    #[test]
    fn every_byte_flip_of_a_signed_bundle_is_refused(
        version in "[a-z0-9.]{1,20}",
        slm in "[a-z0-9-]{1,30}",
        router in prop::collection::vec(any::<u8>(), 1..512),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let k = key();
        let bytes = Bundle::sign(manifest(version, slm), router, &k).unwrap().encode();
        let decoded = Bundle::decode(&bytes).unwrap();
        prop_assert_eq!(decoded.encode(), bytes.clone());
        prop_assert!(decoded.verify(&k.verifying_key()).is_ok());
        let mut bad = bytes;
        let i = at.index(bad.len());
        bad[i] ^= flip;
        let verdict = Bundle::decode(&bad).and_then(|b| b.verify(&k.verifying_key()));
        prop_assert!(verdict.is_err(), "a flip at byte {} passed", i);
    }

    #[test]
    fn chunks_reassemble_any_file_in_any_chunk_size(
        file in prop::collection::vec(any::<u8>(), 1..5000),
        chunk in 1usize..700,
    ) {
        let offered = BundleRef::of("v", &file);
        let (mut dl, mut request) = Download::start(offered.clone()).unwrap();
        let mut rounds = 0;
        let done = loop {
            rounds += 1;
            prop_assert!(rounds <= file.len() + 1);
            let Frame::FetchBundle { sha256, offset } = request else { panic!("a fetch") };
            let reply = chunk_of(&file, sha256, offset, chunk).unwrap();
            match dl.on_reply(reply).unwrap() {
                Progress::More(next) => request = next,
                Progress::Done(bytes) => break bytes,
            }
        };
        prop_assert_eq!(done, file);
    }

    #[test]
    fn hostile_chunks_never_grow_a_download_past_its_offer(
        size in 1u32..10_000,
        chunks in prop::collection::vec((any::<u32>(), any::<u32>(), prop::collection::vec(any::<u8>(), 0..3000)), 1..20),
    ) {
        let offered = BundleRef { version: "v".into(), sha256: Sha256Digest([7; 32]), size };
        let (mut dl, _) = Download::start(offered.clone()).unwrap();
        let mut held = 0usize;
        for (offset, total, bytes) in chunks {
            let n = bytes.len();
            match dl.on_reply(Frame::BundleChunk { sha256: offered.sha256, offset, total, bytes }) {
                Ok(Progress::More(_)) => held += n,
                Ok(Progress::Done(all)) => { prop_assert_eq!(all.len(), size as usize); break; }
                Err(_) => break,
            }
            prop_assert!(held <= size as usize);
        }
    }
}
