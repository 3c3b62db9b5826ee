//! The fleet rules, and a device and a gateway doing a rollout together without sockets: the
//! device's report, the gateway's offer by the rollout, the chunked fetch through the codec
//! and the gateway's own classification, the device's verdict.

use super::bundle::SIGNATURE_BYTES;
use super::device::{chunk_of, MAX_REFUSED};
use super::*;
use crate::exchange::gateway::{self, Request};
use crate::protocol::{decode_frame, encode_frame, Frame, ValidationLimits, DEFAULT_MAX_FRAME_BYTES, PROTOCOL_VERSION};

const SLM: &str = "tiny-slm";
const FP: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn key() -> SigningKey {
    SigningKey::generate().unwrap().0
}

fn manifest(version: &str) -> BundleManifest {
    BundleManifest {
        version: version.into(),
        slm_id: SLM.into(),
        tokenizer_fingerprint: FP.into(),
        settings: DeviceSettings { escalation_rate: Some(0.1), speculate: Some(4), ..DeviceSettings::default() },
        router_sha256: Sha256Digest::default(),
        key_id: [0; 8],
        created_unix: 1,
    }
}

fn router(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

fn signed(version: &str, key: &SigningKey) -> Vec<u8> {
    Bundle::sign(manifest(version), router(100_000), key).unwrap().encode()
}

#[test]
fn a_signed_bundle_round_trips_and_verifies() {
    let k = key();
    let bytes = signed("v1", &k);
    let b = Bundle::decode(&bytes).unwrap();
    assert_eq!(b.encode(), bytes);
    b.verify(&k.verifying_key()).unwrap();
    assert_eq!(b.manifest.version, "v1");
    assert_eq!(b.manifest.router_sha256, Sha256Digest::of(&b.router));
}

#[test]
fn tampered_unsigned_and_foreign_bundles_are_refused() {
    let k = key();
    let good = Bundle::decode(&signed("v1", &k)).unwrap();
    let vk = k.verifying_key();
    let router_flip = good.clone().tampered(|_, r, _| r[10] ^= 1);
    assert_eq!(router_flip.verify(&vk), Err(BundleError::RouterDigest));
    let manifest_flip = good.clone().tampered(|m, _, _| *m.last_mut().unwrap() ^= 1);
    assert_eq!(Bundle::decode(&manifest_flip.encode()).map(|b| b.verify(&vk)), Ok(Err(BundleError::BadSignature)));
    let unsigned = good.clone().tampered(|_, _, s| *s = [0; SIGNATURE_BYTES]);
    assert_eq!(unsigned.verify(&vk), Err(BundleError::BadSignature));
    let other = key();
    assert!(matches!(good.verify(&other.verifying_key()), Err(BundleError::WrongKey { .. })));
}

#[test]
fn every_truncation_and_trailing_byte_is_refused() {
    let bytes = signed("v1", &key());
    for cut in [0, 5, 9, 13, 40, bytes.len() / 2, bytes.len() - 1] {
        assert!(matches!(Bundle::decode(&bytes[..cut]), Err(BundleError::Truncated { .. } | BundleError::BadMagic)), "cut at {cut}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(Bundle::decode(&longer), Err(BundleError::Trailing(1)));
    let mut foreign = bytes;
    foreign[0] = b'X';
    assert_eq!(Bundle::decode(&foreign), Err(BundleError::BadMagic));
}

#[test]
fn settings_out_of_range_are_refused_at_signing() {
    let k = key();
    let bad = [
        DeviceSettings { escalation_rate: Some(1.5), ..DeviceSettings::default() },
        DeviceSettings { escalation_rate: Some(0.1), tau: Some(0.5), ..DeviceSettings::default() },
        DeviceSettings { deadline_min_ms: Some(500), deadline_max_ms: Some(100), ..DeviceSettings::default() },
        DeviceSettings { deadline_max_ms: Some(60_000), ..DeviceSettings::default() },
        DeviceSettings { speculate: Some(1000), ..DeviceSettings::default() },
        DeviceSettings { tau: Some(f32::NAN), ..DeviceSettings::default() },
    ];
    for s in bad {
        assert!(Bundle::sign(BundleManifest { settings: s, ..manifest("v1") }, router(10), &k).is_err(), "{s:?}");
    }
    assert!(Bundle::sign(manifest("bad version!"), router(10), &k).is_err());
}

#[test]
fn key_files_round_trip() {
    let (k, pkcs8) = SigningKey::generate().unwrap();
    let again = SigningKey::from_file_text(&SigningKey::to_file_text(&pkcs8)).unwrap();
    assert_eq!(again.verifying_key(), k.verifying_key());
    let vk = k.verifying_key();
    assert_eq!(VerifyingKey::from_file_text(&format!("# fleet key\n{}", vk.to_file_text())).unwrap(), vk);
    assert!(VerifyingKey::from_file_text("ed25519:abcd").is_err());
    assert!(SigningKey::from_file_text("nope").is_err());
}

#[test]
fn the_device_checks_size_digest_signature_slm_and_tokenizer() {
    let k = key();
    let vk = k.verifying_key();
    let bytes = signed("v1", &k);
    let offered = BundleRef::of("v1", &bytes);
    assert!(check_bundle(&bytes, &offered, &vk, SLM, FP).is_ok());
    assert!(matches!(check_bundle(&bytes[..bytes.len() - 1], &offered, &vk, SLM, FP), Err(Refusal::Size { .. })));
    let mut flipped = bytes.clone();
    flipped[200] ^= 1;
    assert!(matches!(check_bundle(&flipped, &offered, &vk, SLM, FP), Err(Refusal::Digest { .. })));
    // A gateway that names the tampered file's own digest: the signature still catches it.
    let re_addressed = BundleRef::of("v1", &flipped);
    assert!(matches!(check_bundle(&flipped, &re_addressed, &vk, SLM, FP), Err(Refusal::Bundle(_))));
    assert!(matches!(check_bundle(&bytes, &offered, &vk, "other-slm", FP), Err(Refusal::WrongSlm { .. })));
    assert!(matches!(check_bundle(&bytes, &offered, &vk, SLM, &"f".repeat(64)), Err(Refusal::WrongTokenizer { .. })));
    let relabelled = BundleRef { version: "v2".into(), ..offered };
    assert!(matches!(check_bundle(&bytes, &relabelled, &vk, SLM, FP), Err(Refusal::Version { .. })));
}

#[test]
fn a_device_fetches_only_what_it_neither_runs_nor_refused() {
    let a = BundleRef { version: "a".into(), sha256: Sha256Digest([1; 32]), size: 10 };
    let b = BundleRef { version: "b".into(), sha256: Sha256Digest([2; 32]), size: 10 };
    let mut choice = BundleChoice::new(None);
    assert_eq!(choice.on_offer(None), None, "nothing offered: keep the started router");
    assert_eq!(choice.on_offer(Some(&a)), Some(a.clone()));
    choice.accepted(a.clone());
    assert_eq!(choice.on_offer(Some(&a)), None, "already running");
    choice.refused(&b, &Refusal::Unavailable("link".into()));
    assert_eq!(choice.on_offer(Some(&b)), Some(b.clone()), "a failed delivery is retried");
    choice.refused(&b, &Refusal::Bundle(BundleError::BadSignature));
    assert_eq!(choice.on_offer(Some(&b)), None, "a bad bundle is not fetched again");
    assert_eq!(choice.running(), Some(&a), "and the device keeps what it runs");
    for i in 0..100u8 {
        let r = BundleRef { version: "x".into(), sha256: Sha256Digest([i.wrapping_add(10); 32]), size: 1 };
        choice.refused(&r, &Refusal::Digest { offered: r.sha256 });
    }
    assert_eq!(choice.refused_len(), MAX_REFUSED, "bounded");
}

#[test]
fn the_rollout_hash_is_stable_and_roughly_uniform() {
    assert_eq!(bucket("device-1"), bucket("device-1"));
    let mut counts = [0u32; 10];
    for i in 0..10_000 {
        counts[usize::from(bucket(&format!("device-{i}")) / 10)] += 1;
    }
    assert!(counts.iter().all(|&c| (800..1200).contains(&c)), "{counts:?}");
}

fn r(v: &str) -> BundleRef {
    BundleRef { version: v.into(), sha256: Sha256Digest::of(v.as_bytes()), size: 1 }
}

#[test]
fn publishing_rolls_out_promotes_and_rolls_back() {
    let v1 = SlmRollout::publish(None, r("v1"), 100);
    assert_eq!(v1.assign("anyone"), Some(&r("v1")));
    let canary = SlmRollout::publish(Some(&v1), r("v2"), 10);
    assert_eq!((canary.percent, canary.previous.clone()), (10, Some(r("v1"))));
    let devices: Vec<String> = (0..1000).map(|i| format!("d{i}")).collect();
    let on_v2 = devices.iter().filter(|d| canary.assign(d) == Some(&r("v2"))).count();
    assert!((60..140).contains(&on_v2), "{on_v2} of 1000 at 10 %");
    assert!(devices.iter().all(|d| canary.assign(d).is_some()), "the rest keep v1");
    // Raising the share keeps the canaries in.
    let half = SlmRollout::publish(Some(&canary), r("v2"), 50);
    assert!(devices.iter().filter(|d| canary.assign(d) == Some(&r("v2"))).all(|d| half.assign(d) == Some(&r("v2"))));
    assert_eq!(half.previous, Some(r("v1")));
    // A third bundle replacing a canary keeps the baseline v1.
    let v3 = SlmRollout::publish(Some(&half), r("v3"), 10);
    assert_eq!(v3.previous, Some(r("v1")));
    // Rollback: v1 for everyone.
    let back = SlmRollout::publish(Some(&v3), r("v1"), 100);
    assert!(devices.iter().all(|d| back.assign(d) == Some(&r("v1"))));
    assert_eq!(back.previous, None);
    // Over a full rollout, the old one becomes the baseline.
    let full = SlmRollout::publish(Some(&SlmRollout::publish(Some(&v1), r("v2"), 100)), r("v3"), 5);
    assert_eq!(full.previous, Some(r("v2")));
    assert_eq!(SlmRollout::publish(None, r("v1"), 0).percent, 1, "clamped");
}

#[test]
fn a_first_rollout_below_100_leaves_the_others_on_their_own_router() {
    let first = SlmRollout::publish(None, r("v1"), 50);
    let devices: Vec<String> = (0..200).map(|i| format!("d{i}")).collect();
    for d in &devices {
        match first.assign(d) {
            Some(b) => assert!(bucket(d) < 50 && *b == r("v1")),
            None => assert!(bucket(d) >= 50),
        }
    }
}

/// The gateway's side of a fetch: classify the request as the gateway does, answer a chunk.
fn serve(request: &Frame, file: &[u8], chunk: usize) -> Frame {
    let bytes = encode_frame(request, DEFAULT_MAX_FRAME_BYTES).unwrap();
    match gateway::classify(decode_frame(&bytes, DEFAULT_MAX_FRAME_BYTES), &ValidationLimits::default()) {
        Request::FetchBundle { sha256, offset } if sha256 == Sha256Digest::of(file) => {
            let reply = chunk_of(file, sha256, offset, chunk).unwrap_or_else(|| gateway::bundle_not_offered(PROTOCOL_VERSION, &sha256));
            let wire = encode_frame(&reply, DEFAULT_MAX_FRAME_BYTES).expect("a chunk fits one frame");
            decode_frame(&wire, DEFAULT_MAX_FRAME_BYTES).unwrap()
        }
        Request::FetchBundle { sha256, .. } => gateway::bundle_not_offered(PROTOCOL_VERSION, &sha256),
        other => panic!("unexpected {other:?}"),
    }
}

/// Fetch `offered` from a gateway holding `file`, as the device does; the device's verdict.
fn fetch(offered: &BundleRef, file: &[u8], key: &VerifyingKey) -> Result<Bundle, Refusal> {
    let (mut dl, mut request) = Download::start(offered.clone())?;
    let mut steps = 0;
    loop {
        steps += 1;
        assert!(steps < 1000, "a download ends");
        match dl.on_reply(serve(&request, file, MAX_CHUNK_BYTES))? {
            Progress::More(next) => request = next,
            Progress::Done(bytes) => return check_bundle(&bytes, offered, key, SLM, FP),
        }
    }
}

#[test]
fn a_device_reports_is_offered_fetches_in_chunks_and_switches() {
    let k = key();
    let file = signed("v1", &k);
    assert!(file.len() > 3 * MAX_CHUNK_BYTES, "several chunks");
    let offered = BundleRef::of("v1", &file);
    let rollout = SlmRollout::publish(None, offered.clone(), 100);
    // Report → offer, through the gateway's classification.
    let report = Frame::BundleReport { running: None, escalations: 3, fallbacks: 1 };
    let wire = encode_frame(&report, DEFAULT_MAX_FRAME_BYTES).unwrap();
    let Request::BundleReport { running: None, escalations: 3, fallbacks: 1 } = gateway::classify(decode_frame(&wire, DEFAULT_MAX_FRAME_BYTES), &ValidationLimits::default()) else {
        panic!("a report is classified as one")
    };
    let offer = rollout.assign("device-1").cloned();
    let mut choice = BundleChoice::new(None);
    let wanted = choice.on_offer(offer.as_ref()).expect("fetch it");
    let bundle = fetch(&wanted, &file, &k.verifying_key()).unwrap();
    assert_eq!(bundle.manifest.settings.speculate, Some(4));
    choice.accepted(wanted);
    assert_eq!(choice.on_offer(offer.as_ref()), None);
}

#[test]
fn a_short_or_wrong_chunk_stream_is_refused_and_retried_later() {
    let k = key();
    let file = signed("v1", &k);
    let offered = BundleRef::of("v1", &file);
    // The gateway holds a truncated copy: its chunks end early or disagree on the total.
    let short = &file[..file.len() - 10];
    let err = fetch(&offered, short, &k.verifying_key()).unwrap_err();
    assert!(matches!(err, Refusal::Unavailable(_)), "{err}");
    assert!(!err.is_final());
    // A gateway whose chunks skip bytes.
    let (mut dl, _) = Download::start(offered.clone()).unwrap();
    let skip = Frame::BundleChunk { sha256: offered.sha256, offset: 5, total: offered.size, bytes: vec![0; 10] };
    assert!(matches!(dl.on_reply(skip), Err(Refusal::Chunk(_))));
    let (mut dl, _) = Download::start(offered.clone()).unwrap();
    let over = Frame::BundleChunk { sha256: offered.sha256, offset: 0, total: offered.size, bytes: vec![0; MAX_CHUNK_BYTES + 1] };
    assert!(matches!(dl.on_reply(over), Err(Refusal::Chunk(_))));
    let huge = BundleRef { size: u32::MAX, ..offered };
    assert!(matches!(Download::start(huge), Err(Refusal::Offer(_))), "an offer over the cap is not started");
}

#[test]
fn bundle_frames_are_never_sent_to_a_pre_v4_device() {
    for v in 1..=3 {
        assert!(gateway::bundles_unsupported(v).is_some(), "v{v}");
    }
    assert!(gateway::bundles_unsupported(crate::protocol::PROTOCOL_VERSION).is_none());
}
