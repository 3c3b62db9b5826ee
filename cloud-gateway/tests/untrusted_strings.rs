//! A device's strings and figures over real QUIC: a `Hello` whose `slm_id` or `device_id` could
//! forge a log line or garble a terminal is refused before the gateway logs or lists it, a
//! bundle report whose figures cannot be true is refused and the fleet listing keeps the last
//! good one, and v6's answers reach v6 devices while a v5 device gets what it always got.

mod support;

use std::time::Duration;

use common::fleet::Sha256Digest;
use common::protocol::{encode_frame, ErrorCode, Frame, RejectReason};
use support::*;

/// Say `Hello` on a bare connection (at `version`, as `device_id` running `slm_id`); the
/// gateway's answer and the connection.
async fn hello(addr: std::net::SocketAddr, ca: &std::path::Path, version: u16, device_id: &str, slm_id: &str) -> (Frame, quinn::Connection) {
    let conn = quic_connection(addr, ca).await;
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let hello = Frame::Hello { protocol_version: version, device_id: device_id.into(), auth: String::new(), tokenizer_fingerprint: fingerprint(), slm_id: slm_id.into() };
    send.write_all(&encode_frame(&hello, 1 << 16).unwrap()).await.unwrap();
    send.finish().unwrap();
    (read_reply(&mut recv).await, conn)
}

/// One request on its own stream of `conn`; the raw bytes of the answer (empty: none).
async fn request(conn: &quinn::Connection, frame: &Frame) -> Vec<u8> {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(&encode_frame(frame, 1 << 16).unwrap()).await.unwrap();
    send.finish().unwrap();
    tokio::time::timeout(Duration::from_secs(10), recv.read_to_end(1 << 16)).await.expect("an answer in time").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hellos_whose_names_could_forge_a_log_line_are_refused_and_never_listed() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(test_config(dir.path())).await;
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));
    let forged = "slm\n2099-01-01T00:00:00Z ERROR forged line";
    let oversize = "x".repeat(200);
    let hostile = ["a\nb", "a\rb", "a\u{1b}[2Jb", "a\0b", "a\u{202E}b", "a\u{2028}b", "a\u{200B}b", forged, oversize.as_str()];
    for bad in hostile {
        for (device_id, slm_id) in [("device-ok", bad), (bad, "slm-ok")] {
            let (reply, _conn) = hello(addr, &ca, common::protocol::PROTOCOL_VERSION, device_id, slm_id).await;
            let Frame::Reject { reason: RejectReason::Other(why) } = &reply else { panic!("{device_id:?}/{slm_id:?} got {reply:?}") };
            assert!(!why.contains(bad) && common::protocol::text::first_unsafe(why).is_none(), "the refusal echoes {bad:?}: {why:?}");
        }
    }
    let listed = gw.shared.fleet.devices();
    assert!(listed.is_empty(), "nothing refused is listed: {listed:?}");
    // A real model id passes as it is.
    let (reply, _conn) = hello(addr, &ca, common::protocol::PROTOCOL_VERSION, "device-ok", "Qwen/Qwen2.5-0.5B-Instruct").await;
    assert!(matches!(reply, Frame::Welcome { .. }), "{reply:?}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_report_that_cannot_be_true_is_refused_and_the_listing_keeps_the_last_good_one() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(test_config(dir.path())).await;
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));
    let device = link(addr, &ca, "reporter", "");
    device.wait_up(Duration::from_secs(5)).await.unwrap();
    let report = |escalations: u64, fallbacks: u64| Frame::BundleReport { running: None, escalations, fallbacks };
    assert_eq!(ask(&device, &report(10, 4)).await, Frame::BundleOffer { bundle: None });
    for (escalations, fallbacks, why) in [(10, 11, "more fallbacks than escalations"), (9, 4, "escalations went back"), (10, 3, "fallbacks went back"), (u64::MAX, 4, "beyond any device's count")] {
        let reply = ask(&device, &report(escalations, fallbacks)).await;
        assert!(matches!(reply, Frame::Error { code: ErrorCode::Malformed, .. }), "{why}: {reply:?}");
    }
    let listed = gw.shared.fleet.devices();
    assert_eq!(listed.iter().map(|v| (v.device.as_str(), v.escalations, v.fallbacks)).collect::<Vec<_>>(), [("reporter", 10, 4)]);
    assert_eq!(ask(&device, &report(12, 5)).await, Frame::BundleOffer { bundle: None });
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v6_device_gets_typed_answers_and_a_v5_device_what_it_always_got() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(test_config(dir.path())).await;
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));
    let fetch = Frame::FetchBundle { sha256: Sha256Digest([9; 32]), offset: 0 };
    let decode = |bytes: &[u8]| common::protocol::decode_frame(bytes, 1 << 16).unwrap();

    let (welcome, v6) = hello(addr, &ca, 6, "device-v6", "slm").await;
    assert!(matches!(welcome, Frame::Welcome { .. }), "{welcome:?}");
    assert_eq!(decode(&request(&v6, &Frame::EndSession { session_id: 3 }).await), Frame::SessionEnded { session_id: 3 });
    assert!(matches!(decode(&request(&v6, &fetch).await), Frame::Error { code: ErrorCode::BundleNotOffered, .. }));

    let (welcome, v5) = hello(addr, &ca, 5, "device-v5", "slm").await;
    assert!(matches!(welcome, Frame::Welcome { .. }), "{welcome:?}");
    assert!(request(&v5, &Frame::EndSession { session_id: 3 }).await.is_empty(), "a v5 device's EndSession stream ends with no frame");
    assert!(matches!(decode(&request(&v5, &fetch).await), Frame::Error { code: ErrorCode::UnknownSession, .. }));
    gw.shutdown().await;
}
