//! A raw QUIC device: the protocol's frames by hand, for what a real edge never sends (an old
//! protocol version, a frame out of turn).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::protocol::{decode_frame, encode_frame, Frame, DEFAULT_MAX_FRAME_BYTES};

use super::fingerprint;

/// A raw QUIC device that says `Hello` in `version` as `id` and is welcomed.
pub async fn raw_device(addr: SocketAddr, ca: &Path, version: u16, id: &str) -> quinn::Connection {
    let client = edge_node::link::tls::client_config(Some(ca), false, Duration::from_secs(1)).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(client);
    let conn = endpoint.connect(addr, "localhost").unwrap().await.unwrap();
    let hello = Frame::Hello { protocol_version: version, device_id: id.into(), auth: String::new(), tokenizer_fingerprint: fingerprint(), slm_id: "raw".into() };
    let reply = ask(&conn, &hello).await;
    assert!(matches!(reply, Frame::Welcome { .. }), "v{version} device welcomed: {reply:?}");
    conn
}

/// One frame on a new stream, its one-frame answer.
pub async fn ask(conn: &quinn::Connection, frame: &Frame) -> Frame {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(&encode_frame(frame, DEFAULT_MAX_FRAME_BYTES).unwrap()).await.unwrap();
    send.finish().unwrap();
    decode_frame(&recv.read_to_end(DEFAULT_MAX_FRAME_BYTES + 4).await.unwrap(), DEFAULT_MAX_FRAME_BYTES).unwrap()
}
