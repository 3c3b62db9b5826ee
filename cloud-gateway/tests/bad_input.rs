//! Bad input over real QUIC: each malformed, oversize, wrong-version, wrong-fingerprint,
//! wrong-auth, unknown-session, replayed or out-of-order frame, and each device beyond a
//! limit, gets a typed answer, and the gateway goes on serving other devices.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::protocol::{encode_frame, ContextSync, ErrorCode, Frame, RejectReason, TokenIds, WireSampling};
use support::*;

fn escalate(session_id: u64, seq: u32, context: ContextSync) -> Frame {
    Frame::Escalate { session_id, seq, context, sampling: WireSampling::default(), deadline_ms: 5000 }
}

fn full(tokens: &[u32]) -> ContextSync {
    ContextSync::Full { tokens: TokenIds(tokens.to_vec()) }
}

fn error_code(f: &Frame) -> ErrorCode {
    match f {
        Frame::Error { code, .. } => *code,
        other => panic!("expected an Error frame, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_get_typed_errors_and_the_gateway_keeps_serving_others() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(tuned(test_config(dir.path()), |c| c.identity.auth_token = Some("sesame".into()))).await;
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));

    let bad = link(addr, &ca, "bad-device", "sesame");
    bad.wait_up(Duration::from_secs(5)).await.unwrap();
    // Bytes that are not a frame; a length prefix that promises more than the stream holds;
    // a valid frame with a byte after it.
    assert_eq!(error_code(&raw(&bad, b"\x05\x00\x00\x00garbage!!").await), ErrorCode::Malformed);
    assert_eq!(error_code(&raw(&bad, &[10, 0, 0, 0, 1, 2, 3]).await), ErrorCode::Malformed);
    let mut trailing = encode_frame(&Frame::Ping { nonce: 1 }, 1 << 16).unwrap();
    trailing.push(0);
    assert_eq!(error_code(&raw(&bad, &trailing).await), ErrorCode::Malformed);
    // Oversize: a length prefix beyond the limit, with or without the bytes behind it.
    assert_eq!(error_code(&raw(&bad, &[0xff, 0xff, 0xff, 0x7f, 1, 2, 3]).await), ErrorCode::Oversize);
    assert_eq!(error_code(&raw(&bad, &vec![7u8; 100_000]).await), ErrorCode::Oversize);
    // Unknown session: a delta against nothing held.
    let missing = ask(&bad, &escalate(42, 0, ContextSync::Delta { base_len: 10, tokens: TokenIds(vec![1]) })).await;
    assert!(matches!(missing, Frame::ContextMissing { session_id: 42, held_len: 0, .. }), "{missing:?}");
    // Token id outside the vocabulary.
    assert_eq!(error_code(&ask(&bad, &escalate(43, 0, full(&[1, 999_999]))).await), ErrorCode::InvalidToken);
    // Replayed and out-of-order seqs.
    assert!(matches!(ask(&bad, &escalate(7, 5, full(&[1, 2]))).await, Frame::Token { seq: 5, .. }));
    assert_eq!(error_code(&ask(&bad, &escalate(7, 5, ContextSync::Delta { base_len: 2, tokens: TokenIds(vec![3]) })).await), ErrorCode::Replayed);
    assert_eq!(error_code(&ask(&bad, &escalate(7, 4, ContextSync::Delta { base_len: 2, tokens: TokenIds(vec![3]) })).await), ErrorCode::OutOfOrder);
    // Frames that only the gateway may send.
    assert_eq!(error_code(&ask(&bad, &Frame::Pong { nonce: 1 }).await), ErrorCode::Malformed);

    // The same gateway still serves a good device, and the bad one's valid sessions.
    let good = link(addr, &ca, "good-device", "sesame");
    good.wait_up(Duration::from_secs(5)).await.unwrap();
    assert!(matches!(ask(&good, &escalate(1, 0, full(&[9, 8, 7]))).await, Frame::Token { .. }));
    assert!(matches!(ask(&bad, &escalate(7, 6, ContextSync::Delta { base_len: 2, tokens: TokenIds(vec![3]) })).await, Frame::Token { seq: 6, .. }));
    assert!(matches!(ask(&good, &Frame::Ping { nonce: 9 }).await, Frame::Pong { nonce: 9 }));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_length_prefix_is_refused_before_its_body_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(test_config(dir.path())).await;
    let device = link(gw.local_addr().unwrap(), &ca_cert(dir.path()), "device", "");
    device.wait_up(Duration::from_secs(5)).await.unwrap();
    // Announce 1 MiB and send nothing more, without ending the stream: the answer cannot
    // depend on the body.
    let (mut send, mut recv) = connection(&device).open_bi().await.unwrap();
    send.write_all(&(1u32 << 20).to_le_bytes()).await.unwrap();
    let reply = read_reply(&mut recv).await;
    assert_eq!(error_code(&reply), ErrorCode::Oversize, "{reply:?}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_auth_token_or_tokenizer_is_rejected_with_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(tuned(test_config(dir.path()), |c| c.identity.auth_token = Some("sesame".into()))).await;
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));
    let wrong_auth = link(addr, &ca, "intruder", "guess");
    assert!(rejected(&wrong_auth).await.contains("authentication"));
    let wrong_tokenizer = link_with(addr, &ca, "other-model", "sesame", &"ab".repeat(32));
    assert!(rejected(&wrong_tokenizer).await.contains("tokenizer mismatch"));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_with_another_protocol_version_is_rejected_with_the_supported_one() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(test_config(dir.path())).await;
    let conn = quic_connection(gw.local_addr().unwrap(), &ca_cert(dir.path())).await;
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let hello = Frame::Hello { protocol_version: 99, device_id: "old".into(), auth: String::new(), tokenizer_fingerprint: fingerprint(), slm_id: "x".into() };
    send.write_all(&encode_frame(&hello, 1 << 16).unwrap()).await.unwrap();
    send.finish().unwrap();
    let reply = read_reply(&mut recv).await;
    assert!(matches!(reply, Frame::Reject { reason: RejectReason::Version { supported } } if supported == common::protocol::PROTOCOL_VERSION), "{reply:?}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_over_its_session_limit_gets_too_many_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(tuned(test_config(dir.path()), |c| c.sessions.max_per_device = 2)).await;
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));
    let greedy = link(addr, &ca, "greedy", "");
    greedy.wait_up(Duration::from_secs(5)).await.unwrap();
    for session in [1, 2] {
        assert!(matches!(ask(&greedy, &escalate(session, 0, full(&[5, 6]))).await, Frame::Token { .. }));
    }
    let third = ask(&greedy, &escalate(3, 0, full(&[5, 6]))).await;
    assert!(matches!(third, Frame::Error { code: ErrorCode::TooManySessions, session_id: Some(3), seq: Some(0), .. }), "{third:?}");
    // Ending a session frees its place; other devices were never limited by this one.
    let (mut send, mut recv) = connection(&greedy).open_bi().await.unwrap();
    send.write_all(&encode_frame(&Frame::EndSession { session_id: 1 }, 1 << 16).unwrap()).await.unwrap();
    send.finish().unwrap();
    assert_eq!(read_reply(&mut recv).await, Frame::SessionEnded { session_id: 1 }, "a v6 device's EndSession is answered once it is applied");
    assert!(matches!(ask(&greedy, &escalate(3, 0, full(&[5, 6]))).await, Frame::Token { .. }));
    let other = link(addr, &ca, "other", "");
    other.wait_up(Duration::from_secs(5)).await.unwrap();
    assert!(matches!(ask(&other, &escalate(1, 0, full(&[5, 6]))).await, Frame::Token { .. }));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_over_the_connection_limit_is_rejected_for_the_connection_limit() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(tuned(test_config(dir.path()), |c| c.transport.max_connections = 1)).await;
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));
    let first = link(addr, &ca, "first", "");
    first.wait_up(Duration::from_secs(5)).await.unwrap();
    for _ in 0..100 {
        if gw.shared.connections.load(Ordering::Relaxed) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second = link(addr, &ca, "second", "");
    let why = rejected(&second).await;
    assert!(why.contains("connection limit"), "{why}");
    // The device inside the limit is served as before.
    assert!(matches!(ask(&first, &Frame::Ping { nonce: 3 }).await, Frame::Pong { nonce: 3 }));
    gw.shutdown().await;
}
