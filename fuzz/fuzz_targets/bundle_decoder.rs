//! Arbitrary bytes must never panic the signed-bundle decoder (`common::fleet::Bundle::decode`):
//! a device decodes every bundle it downloads and a gateway every file in its bundle store
//! before either trusts it. Whatever decodes must behave like a real bundle: re-encode to the
//! exact bytes it came from, and go through verification and the device's checks without a
//! panic (refused, since no input carries a signature of the key used here).
//!
//! Input layout: byte 0 picks how the rest is used: as the whole file (even), or behind a valid
//! magic and format (odd), so most inputs reach the manifest decoder and the length checks
//! rather than stopping at the magic.

#![no_main]

use common::fleet::bundle::{FORMAT, MAGIC};
use common::fleet::{check_bundle, Bundle, BundleRef, VerifyingKey};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        let _ = Bundle::decode(data);
        return;
    };
    let bytes = if mode % 2 == 0 {
        rest.to_vec()
    } else {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&FORMAT.to_le_bytes());
        b.extend_from_slice(rest);
        b
    };
    let Ok(bundle) = Bundle::decode(&bytes) else { return };
    assert_eq!(bundle.encode(), bytes, "a decoded bundle must re-encode to its own bytes");
    let key = VerifyingKey([7; 32]);
    assert!(bundle.verify(&key).is_err(), "no fuzz input carries a valid signature");
    let _ = bundle.manifest.settings.validate();
    let offered = BundleRef::of(&bundle.manifest.version, &bytes);
    assert!(check_bundle(&bytes, &offered, &key, &bundle.manifest.slm_id, &bundle.manifest.tokenizer_fingerprint).is_err());
});
