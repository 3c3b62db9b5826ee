//! An in-process gateway on the tiny model, and the clients that talk to it: the edge's own
//! link (what real devices run) and raw QUIC streams (to send what no honest device would).
//!
//! The tiny model (`tiny-qwen2`: random weights, the real vocabulary and tokenizer) is
//! prepared under `$DUET_HOME` by `deploy/models/prepare`; it makes the gateway's answers
//! meaningless but its behaviour real, in about a second.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cloud_gateway::batcher::backend::{EmbeddedBackend, EmbeddedOptions};
use cloud_gateway::config::{CertSource, GatewayConfig, TransportConfig};
use cloud_gateway::Gateway;
use common::protocol::{decode_frame, Frame};
use edge_node::link::{Link, LinkConfig, LinkState};
use model_runtime::model_files::{ModelFiles, TINY_MODEL};

/// Largest reply a test reads.
const MAX_REPLY: usize = 1 << 16;

/// A gateway on loopback with ephemeral ports, serving a certificate written into `dir`
/// (clients trust [`ca_cert`]`(dir)`); the rest is the default configuration.
pub fn test_config(dir: &Path) -> GatewayConfig {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (ca_cert(dir), dir.join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let transport = TransportConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: Some("127.0.0.1:0".parse().unwrap()),
        cert: CertSource::Files { cert, key },
        ..TransportConfig::default()
    };
    GatewayConfig { transport, ..GatewayConfig::default() }
}

/// `config` with `tune` applied (for the nested sections of a test's configuration).
pub fn tuned(mut config: GatewayConfig, tune: impl FnOnce(&mut GatewayConfig)) -> GatewayConfig {
    tune(&mut config);
    config
}

/// The certificate clients of a [`test_config`] gateway trust.
pub fn ca_cert(dir: &Path) -> PathBuf {
    dir.join("cert.pem")
}

/// Start a gateway with `config` in this process, on the tiny model (one thread, contexts of
/// up to 512 tokens).
pub async fn start_gateway(config: GatewayConfig) -> Gateway {
    let options = EmbeddedOptions { model: TINY_MODEL.into(), threads: 1, max_context: 512, ..EmbeddedOptions::default() };
    let backend = tokio::task::spawn_blocking(move || EmbeddedBackend::load(&options)).await.unwrap().expect("the tiny model (deploy/models/prepare slm tiny)");
    Gateway::start(config, Box::new(backend)).await.unwrap()
}

/// The tokenizer fingerprint of the prepared models (the tiny one shares the real tokenizer).
pub fn fingerprint() -> String {
    ModelFiles::locate(TINY_MODEL).unwrap().manifest.tokenizer_fingerprint
}

/// A device's link with the real tokenizer's fingerprint.
pub fn link(addr: SocketAddr, ca: &Path, device: &str, auth: &str) -> Link {
    link_with(addr, ca, device, auth, &fingerprint())
}

/// A device's link with an explicit tokenizer fingerprint.
pub fn link_with(addr: SocketAddr, ca: &Path, device: &str, auth: &str, fingerprint: &str) -> Link {
    Link::start(LinkConfig {
        auth_token: auth.into(),
        slm_id: "test".into(),
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(500),
        ..LinkConfig::new(addr.to_string(), Some(ca.to_path_buf()), device, fingerprint)
    })
    .unwrap()
}

/// Send `frame` over `link` and wait (10 s at most) for the reply.
pub async fn ask(link: &Link, frame: &Frame) -> Frame {
    link.request(frame, Instant::now() + Duration::from_secs(10)).await.expect("reply").0
}

/// The QUIC connection of a link that is up.
pub fn connection(link: &Link) -> quinn::Connection {
    let LinkState::Up(c) = link.state() else { panic!("link down: {:?}", link.state()) };
    c.conn
}

/// Send raw bytes on a new stream of an established link (ending the stream) and read the
/// one-frame reply. A write error is ignored: the gateway may refuse the rest of a stream it
/// already answered.
pub async fn raw(link: &Link, bytes: &[u8]) -> Frame {
    let (mut send, mut recv) = connection(link).open_bi().await.unwrap();
    let _ = send.write_all(bytes).await;
    let _ = send.finish();
    read_reply(&mut recv).await
}

/// Read a one-frame reply to its end (10 s at most).
pub async fn read_reply(recv: &mut quinn::RecvStream) -> Frame {
    let bytes = tokio::time::timeout(Duration::from_secs(10), recv.read_to_end(MAX_REPLY)).await.expect("a reply in time").unwrap();
    decode_frame(&bytes, MAX_REPLY).unwrap()
}

/// A bare QUIC connection to the gateway, before any `Hello`.
pub async fn quic_connection(addr: SocketAddr, ca: &Path) -> quinn::Connection {
    let client = edge_node::link::tls::client_config(Some(ca), false, Duration::from_secs(5)).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(client);
    endpoint.connect(addr, "localhost").unwrap().await.unwrap()
}

/// Wait (5 s at most) until the gateway refuses `link`, and return why, as the edge words it.
pub async fn rejected(link: &Link) -> String {
    for _ in 0..100 {
        if let LinkState::Rejected(why) = link.state() {
            return why;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not rejected: {:?}", link.state());
}

/// A QUIC client endpoint on `local` (e.g. 127.0.0.2 for a second source address) trusting the
/// test gateway's certificate.
pub fn client_on(local: &str, ca: &Path) -> quinn::Endpoint {
    let client = edge_node::link::tls::client_config(Some(ca), false, Duration::from_secs(5)).unwrap();
    let mut endpoint = quinn::Endpoint::client(local.parse().unwrap()).unwrap();
    endpoint.set_default_client_config(client);
    endpoint
}

/// A connection from `endpoint` that sent `Hello` as `device` with `auth`, and the gateway's
/// answer (`Welcome` or `Reject`).
pub async fn hello_with(endpoint: &quinn::Endpoint, addr: SocketAddr, device: &str, auth: &str) -> (quinn::Connection, Frame) {
    let conn = endpoint.connect(addr, "localhost").unwrap().await.unwrap();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let frame = Frame::Hello { protocol_version: common::protocol::PROTOCOL_VERSION, device_id: device.into(), auth: auth.into(), tokenizer_fingerprint: fingerprint(), slm_id: "test".into() };
    send.write_all(&common::protocol::encode_frame(&frame, MAX_REPLY).unwrap()).await.unwrap();
    send.finish().unwrap();
    let reply = read_reply(&mut recv).await;
    (conn, reply)
}

/// A connection from `endpoint` past `Hello` as `device` (no credential).
pub async fn hello(endpoint: &quinn::Endpoint, addr: SocketAddr, device: &str) -> quinn::Connection {
    let (conn, reply) = hello_with(endpoint, addr, device, "").await;
    assert!(matches!(reply, Frame::Welcome { .. }), "{reply:?}");
    conn
}

/// Send `frame` on a new stream of `conn` and read its one-frame reply.
pub async fn request(conn: &quinn::Connection, frame: &Frame) -> Frame {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(&common::protocol::encode_frame(frame, MAX_REPLY).unwrap()).await.unwrap();
    send.finish().unwrap();
    read_reply(&mut recv).await
}
