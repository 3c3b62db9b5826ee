//! Bad input over real QUIC: each malformed, oversize, wrong-version, wrong-fingerprint,
//! wrong-auth, unknown-session, replayed or out-of-order frame gets a typed answer, and the
//! gateway goes on serving other devices.

mod support;

use std::time::{Duration, Instant};

use common::protocol::{ContextSync, ErrorCode, Frame, RejectReason, TokenIds, WireSampling};
use edge_node::link::{Link, LinkState};
use support::*;

fn escalate(session_id: u64, seq: u32, context: ContextSync) -> Frame {
    Frame::Escalate { session_id, seq, context, sampling: WireSampling::default(), deadline_ms: 5000 }
}

async fn ask(link: &Link, frame: &Frame) -> Frame {
    link.request(frame, Instant::now() + Duration::from_secs(10)).await.expect("reply").0
}

async fn raw(link: &Link, bytes: &[u8]) -> Frame {
    let LinkState::Up(c) = link.state() else { panic!("link down") };
    let (mut send, mut recv) = c.conn.open_bi().await.unwrap();
    send.write_all(bytes).await.unwrap();
    send.finish().unwrap();
    let reply = recv.read_to_end(1 << 20).await.unwrap();
    common::protocol::decode_frame(&reply, 1 << 16).unwrap()
}

fn error_code(f: &Frame) -> ErrorCode {
    match f {
        Frame::Error { code, .. } => *code,
        other => panic!("expected an Error frame, got {other:?}"),
    }
}

async fn rejected(link: &Link) -> String {
    for _ in 0..100 {
        if let LinkState::Rejected(why) = link.state() {
            return why;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not rejected: {:?}", link.state());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_get_typed_errors_and_others_are_still_served() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(dir.path(), TINY, &["--auth-token=sesame"]).await;
    let addr = gw.local_addr().unwrap();
    let ca = dir.path().join("cert.pem");

    // Handshake refusals.
    let wrong_auth = raw_link(addr, &ca, "intruder", "guess");
    assert!(rejected(&wrong_auth).await.contains("authentication"));
    let wrong_tok = link_with(addr, &ca, "other-model", "sesame", &"ab".repeat(32));
    assert!(rejected(&wrong_tok).await.contains("tokenizer mismatch"));

    let bad = raw_link(addr, &ca, "bad-device", "sesame");
    bad.wait_up(Duration::from_secs(5)).await.unwrap();
    // Malformed bytes, and a length prefix that lies.
    assert_eq!(error_code(&raw(&bad, b"\x05\x00\x00\x00garbage!!").await), ErrorCode::Malformed);
    assert_eq!(error_code(&raw(&bad, &[0xff, 0xff, 0xff, 0x7f, 1, 2, 3]).await), ErrorCode::Malformed);
    // Oversize: more bytes than the gateway accepts for one frame.
    assert_eq!(error_code(&raw(&bad, &vec![7u8; 100_000]).await), ErrorCode::Oversize);
    // Unknown session: a delta against nothing held.
    let missing = ask(&bad, &escalate(42, 0, ContextSync::Delta { base_len: 10, tokens: TokenIds(vec![1]) })).await;
    assert!(matches!(missing, Frame::ContextMissing { session_id: 42, held_len: 0, .. }), "{missing:?}");
    // Token id outside the vocabulary.
    assert_eq!(error_code(&ask(&bad, &escalate(43, 0, ContextSync::Full { tokens: TokenIds(vec![1, 999_999]) })).await), ErrorCode::InvalidToken);
    // Replayed and out-of-order seqs.
    assert!(matches!(ask(&bad, &escalate(7, 5, ContextSync::Full { tokens: TokenIds(vec![1, 2]) })).await, Frame::Token { seq: 5, .. }));
    assert_eq!(error_code(&ask(&bad, &escalate(7, 5, ContextSync::Delta { base_len: 2, tokens: TokenIds(vec![3]) })).await), ErrorCode::Replayed);
    assert_eq!(error_code(&ask(&bad, &escalate(7, 4, ContextSync::Delta { base_len: 2, tokens: TokenIds(vec![3]) })).await), ErrorCode::OutOfOrder);
    // Frames that only the gateway may send.
    assert_eq!(error_code(&ask(&bad, &Frame::Pong { nonce: 1 }).await), ErrorCode::Malformed);

    // The same gateway still serves a good device, and the bad one's valid sessions.
    let good = raw_link(addr, &ca, "good-device", "sesame");
    good.wait_up(Duration::from_secs(5)).await.unwrap();
    assert!(matches!(ask(&good, &escalate(1, 0, ContextSync::Full { tokens: TokenIds(vec![9, 8, 7]) })).await, Frame::Token { .. }));
    assert!(matches!(ask(&bad, &escalate(7, 6, ContextSync::Delta { base_len: 2, tokens: TokenIds(vec![3]) })).await, Frame::Token { seq: 6, .. }));
    assert!(matches!(ask(&good, &Frame::Ping { nonce: 9 }).await, Frame::Pong { nonce: 9 }));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_protocol_version_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(dir.path(), TINY, &[]).await;
    let addr = gw.local_addr().unwrap();
    let client = edge_node::tls::client_config(Some(&dir.path().join("cert.pem")), false, Duration::from_secs(5)).unwrap();
    let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    ep.set_default_client_config(client);
    let conn = ep.connect(addr, "localhost").unwrap().await.unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let hello = Frame::Hello { protocol_version: 99, device_id: "old".into(), auth: String::new(), tokenizer_fingerprint: fingerprint(), slm_id: "x".into() };
    send.write_all(&common::protocol::encode_frame(&hello, 1 << 16).unwrap()).await.unwrap();
    send.finish().unwrap();
    let reply = common::protocol::decode_frame(&recv.read_to_end(1 << 16).await.unwrap(), 1 << 16).unwrap();
    assert!(matches!(reply, Frame::Reject { reason: RejectReason::Version { supported: 1 } }), "{reply:?}");
    gw.shutdown().await;
}
