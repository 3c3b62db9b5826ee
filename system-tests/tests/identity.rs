//! Per-device identity under mutual TLS, over real QUIC on loopback: a fleet CA issues each
//! device its certificate (the admin code `cloud-gateway ca` runs), the gateway takes the
//! device id from the verified certificate and never from `Hello`, refuses forged, expired and
//! revoked certificates in the TLS handshake, closes a device's live connection when its
//! certificate is revoked (the deny list reloaded while running), keeps one connection per
//! identity (the newest wins), and limits each identity's escalation rate. A device's rotated
//! certificate is used from its next connection on without restarting the edge, and a
//! certificate the fleet CA revoked in a CRL is refused like a denied one.
//!
//! The gateways run in this process with a backend whose token is a fixed function of the
//! context ([`replicas::HashBackend`]), so "A's context is intact" is checked exactly: A's next
//! token is the one for exactly the tokens A sent.

mod support;
#[path = "support/replicas.rs"]
mod replicas;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cloud_gateway::config::{GatewayConfig, IdentityConfig, RateLimit};
use cloud_gateway::identity::ca::{init_ca, FleetCa, CA_CERT_FILE};
use cloud_gateway::identity::registry::{CLOSE_REPLACED, CLOSE_REVOKED, REPLACED_REASON};
use cloud_gateway::identity::revoked;
use cloud_gateway::sessions::SessionKey;
use cloud_gateway::Gateway;
use common::protocol::{decode_frame, encode_frame, ContextSync, ErrorCode, Frame, RejectReason, WireSampling, DEFAULT_MAX_FRAME_BYTES, PROTOCOL_VERSION};
use edge_node::link::tls::ClientIdentity;
use replicas::HashBackend;
use support::raw::ask;
use support::*;

/// TLS alerts a refused certificate gets (RFC 8446 §6).
const ALERT_BAD_CERTIFICATE: u8 = 42;
const ALERT_CERTIFICATE_REVOKED: u8 = 44;
const ALERT_CERTIFICATE_EXPIRED: u8 = 45;
const ALERT_UNKNOWN_CA: u8 = 48;
const ALERT_CERTIFICATE_REQUIRED: u8 = 116;

/// A fleet CA in a temporary directory, and where the gateway's own certificate lives.
struct Fleet {
    dir: tempfile::TempDir,
    ca: FleetCa,
}

impl Fleet {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        init_ca(&dir.path().join("ca"), "Test fleet CA", 30).unwrap();
        let ca = FleetCa::load(&dir.path().join("ca")).unwrap();
        Self { dir, ca }
    }

    fn ca_cert(&self) -> PathBuf {
        self.dir.path().join("ca").join(CA_CERT_FILE)
    }

    /// The gateway's server certificate, which devices pin.
    fn server_cert(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    fn revoked_file(&self) -> PathBuf {
        self.dir.path().join("revoked.txt")
    }

    /// Enrol `device` (as `ca issue` does) into a directory of its own.
    fn enrol(&self, device: &str) -> (ClientIdentity, String) {
        let issued = self.ca.issue(device, 30).unwrap();
        self.install(&issued)
    }

    fn install(&self, issued: &cloud_gateway::identity::ca::IssuedCert) -> (ClientIdentity, String) {
        let out = self.dir.path().join(format!("device-{}", issued.serial));
        let (cert, key) = self.ca.write(issued, &out).unwrap();
        (ClientIdentity { cert, key }, issued.serial.to_hex())
    }

    /// A gateway requiring certificates from this fleet's CA, with `tune` applied.
    async fn gateway(&self, tune: impl FnOnce(GatewayConfig) -> GatewayConfig) -> Gateway {
        let identity = IdentityConfig { client_ca: Some(self.ca_cert()), revoked_file: Some(self.revoked_file()), revoked_poll: Duration::from_millis(50), ..IdentityConfig::default() };
        let config = GatewayConfig { identity, ..test_config(self.dir.path()) };
        Gateway::start(tune(config), Box::new(HashBackend::new(TINY, Duration::ZERO))).await.unwrap()
    }
}

/// How a connection attempt ended when it was not welcomed.
#[derive(Debug, PartialEq)]
enum Refusal {
    /// Refused by the TLS handshake with this alert.
    Tls(u8),
    /// Answered `Reject`.
    Reject(RejectReason),
    /// Something else.
    Other(String),
}

fn tls_alert(e: &quinn::ConnectionError) -> Option<u8> {
    let code = match e {
        quinn::ConnectionError::ConnectionClosed(c) => u64::from(c.error_code),
        quinn::ConnectionError::TransportError(t) => u64::from(t.code),
        _ => return None,
    };
    (0x100..0x200).contains(&code).then_some((code & 0xff) as u8)
}

fn refusal(conn: Option<&quinn::Connection>, e: impl std::fmt::Display) -> Refusal {
    match conn.and_then(|c| c.close_reason()) {
        Some(reason) => tls_alert(&reason).map_or_else(|| Refusal::Other(reason.to_string()), Refusal::Tls),
        None => Refusal::Other(e.to_string()),
    }
}

/// Connect with `identity` (none: no client certificate), say `Hello` claiming `claimed`.
async fn connect(addr: SocketAddr, server_cert: &Path, identity: Option<&ClientIdentity>, claimed: &str) -> Result<quinn::Connection, Refusal> {
    let client = edge_node::link::tls::client_config_with_identity(Some(server_cert), false, edge_node::link::tls::QuicTimers { keep_alive: Duration::from_secs(1), idle_timeout: edge_node::link::tls::DEFAULT_IDLE_TIMEOUT }, identity).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(client);
    let conn = match endpoint.connect(addr, "localhost").unwrap().await {
        Ok(c) => c,
        Err(e) => return Err(tls_alert(&e).map_or_else(|| Refusal::Other(e.to_string()), Refusal::Tls)),
    };
    let hello = Frame::Hello { protocol_version: PROTOCOL_VERSION, device_id: claimed.into(), auth: String::new(), tokenizer_fingerprint: fingerprint(), slm_id: "identity-test".into() };
    let reply = async {
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
        send.write_all(&encode_frame(&hello, DEFAULT_MAX_FRAME_BYTES).unwrap()).await.map_err(|e| e.to_string())?;
        send.finish().map_err(|e| e.to_string())?;
        let bytes = recv.read_to_end(DEFAULT_MAX_FRAME_BYTES + 4).await.map_err(|e| e.to_string())?;
        decode_frame(&bytes, DEFAULT_MAX_FRAME_BYTES).map_err(|e| e.to_string())
    };
    match tokio::time::timeout(Duration::from_secs(5), reply).await {
        Ok(Ok(Frame::Welcome { .. })) => Ok(conn),
        Ok(Ok(Frame::Reject { reason })) => Err(Refusal::Reject(reason)),
        Ok(Ok(other)) => Err(Refusal::Other(format!("unexpected {other:?}"))),
        Ok(Err(e)) => {
            // The server's verdict on the certificate arrives after the client's handshake ends.
            let _ = tokio::time::timeout(Duration::from_secs(1), conn.closed()).await;
            Err(refusal(Some(&conn), e))
        }
        Err(_) => Err(Refusal::Other("no answer to Hello".into())),
    }
}

/// One frame on a new stream that gets no answer (`EndSession`).
async fn tell(conn: &quinn::Connection, frame: &Frame) {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(&encode_frame(frame, DEFAULT_MAX_FRAME_BYTES).unwrap()).await.unwrap();
    send.finish().unwrap();
    let _ = recv.read_to_end(16).await;
}

fn escalate(session_id: u64, seq: u32, context: ContextSync) -> Frame {
    Frame::Escalate { session_id, seq, context, sampling: WireSampling::default(), deadline_ms: 5000 }
}

fn full(tokens: &[u32]) -> ContextSync {
    ContextSync::Full { tokens: tokens.to_vec().into() }
}

fn delta(base_len: u32, tokens: &[u32]) -> ContextSync {
    ContextSync::Delta { base_len, tokens: tokens.to_vec().into() }
}

fn vocab() -> usize {
    model_runtime::model_files::ModelFiles::locate(TINY).unwrap().manifest.vocab_size
}

fn token_of(frame: &Frame) -> u32 {
    match frame {
        Frame::Token { token_id, .. } => *token_id,
        other => panic!("expected a token, got {other:?}"),
    }
}

fn key(device: &str, session_id: u64) -> SessionKey {
    SessionKey { device: device.into(), session_id }
}

/// Wait until `conn` is closed; its close error.
async fn closed_within(conn: &quinn::Connection, within: Duration) -> quinn::ConnectionError {
    tokio::time::timeout(within, conn.closed()).await.expect("the connection is closed in time")
}

fn application_close(e: &quinn::ConnectionError) -> (u32, Vec<u8>) {
    match e {
        quinn::ConnectionError::ApplicationClosed(c) => (u32::try_from(u64::from(c.error_code)).unwrap(), c.reason.to_vec()),
        other => panic!("expected an application close, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_with_its_own_valid_certificate_cannot_read_extend_or_end_another_devices_session() {
    let fleet = Fleet::new();
    let gw = fleet.gateway(|c| c).await;
    let addr = gw.local_addr().unwrap();
    let (a_id, _) = fleet.enrol("device-a");
    let (b_id, _) = fleet.enrol("device-b");
    let vocab = vocab();

    let a = connect(addr, &fleet.server_cert(), Some(&a_id), "device-a").await.unwrap();
    let a_context: Vec<u32> = (1..=20).collect();
    let first = token_of(&ask(&a, &escalate(1, 0, full(&a_context))).await);
    assert_eq!(first, HashBackend::token(&a_context, vocab));

    // B holds its own valid certificate and claims to be A, on A's session id.
    let b = connect(addr, &fleet.server_cert(), Some(&b_id), "device-a").await.unwrap();
    // Reading on from A's context: B's namespace has no session 1.
    let probe = ask(&b, &escalate(1, 0, delta(20, &[first]))).await;
    assert_eq!(probe, Frame::ContextMissing { session_id: 1, seq: 0, held_len: 0 }, "B sees nothing of A's session");
    // Replacing the context and ending the session touch only B's own session 1.
    let own = ask(&b, &escalate(1, 1, full(&[7, 7, 7]))).await;
    assert_eq!(token_of(&own), HashBackend::token(&[7, 7, 7], vocab), "B is answered on its own tokens");
    tell(&b, &Frame::EndSession { session_id: 1 }).await;
    let store = &gw.shared.store;
    assert_eq!(store.held_len(&key("device-b", 1)), None, "B ended its own session 1");
    assert_eq!(store.held_len(&key("device-a", 1)), Some(20), "A's session is untouched");

    // A goes on as if B had never been there: its next token is the one for exactly A's tokens.
    let next = ask(&a, &escalate(1, 1, delta(20, &[first]))).await;
    let mut expected = a_context.clone();
    expected.push(first);
    assert_eq!(token_of(&next), HashBackend::token(&expected, vocab), "A's context is intact");
    assert_eq!(store.held_len(&key("device-a", 1)), Some(21));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_expired_revoked_and_missing_certificates_are_refused_in_the_tls_handshake() {
    let fleet = Fleet::new();
    // A serial revoked before the gateway starts: one certificate, not the device.
    let (leaked, leaked_serial) = fleet.enrol("device-s");
    revoked::append(&fleet.revoked_file(), &format!("serial:{leaked_serial}"), "key leaked").unwrap();
    revoked::append(&fleet.revoked_file(), "device-gone", "lost").unwrap();
    let gw = fleet.gateway(|c| c).await;
    let addr = gw.local_addr().unwrap();
    let server = fleet.server_cert();

    // Another CA's certificate for a real device's id (the "forged" credential).
    let other = tempfile::tempdir().unwrap();
    init_ca(other.path(), "Rogue CA", 30).unwrap();
    let rogue = FleetCa::load(other.path()).unwrap();
    let forged = rogue.issue("device-a", 30).unwrap();
    let (forged_id, _) = fleet.install(&forged);
    assert_eq!(connect(addr, &server, Some(&forged_id), "device-a").await.unwrap_err(), Refusal::Tls(ALERT_UNKNOWN_CA), "another CA's certificate");

    // This CA's certificate, expired yesterday.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let expired = fleet.ca.issue_between("device-a", now - 10 * 86_400, now - 86_400).unwrap();
    let (expired_id, _) = fleet.install(&expired);
    assert_eq!(connect(addr, &server, Some(&expired_id), "device-a").await.unwrap_err(), Refusal::Tls(ALERT_CERTIFICATE_EXPIRED), "an expired certificate");

    // Revoked by serial and by device id.
    assert_eq!(connect(addr, &server, Some(&leaked), "device-s").await.unwrap_err(), Refusal::Tls(ALERT_CERTIFICATE_REVOKED), "a revoked serial");
    let (gone, _) = fleet.enrol("device-gone");
    assert_eq!(connect(addr, &server, Some(&gone), "device-gone").await.unwrap_err(), Refusal::Tls(ALERT_CERTIFICATE_REVOKED), "a revoked device");

    // No certificate at all: the shared-token handshake is not an alternative.
    let none = connect(addr, &server, None, "device-a").await.unwrap_err();
    assert!(matches!(none, Refusal::Tls(ALERT_CERTIFICATE_REQUIRED | ALERT_BAD_CERTIFICATE)), "no certificate: {none:?}");

    // None of them got a connection actor; a rotated certificate of the device whose old
    // serial was revoked is served.
    assert_eq!(gw.shared.connections.load(std::sync::atomic::Ordering::Relaxed), 0);
    let (rotated, _) = fleet.enrol("device-s");
    let conn = connect(addr, &server, Some(&rotated), "device-s").await.expect("a new certificate for the same device");
    assert!(matches!(ask(&conn, &escalate(1, 0, full(&[1, 2, 3]))).await, Frame::Token { .. }));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_connected_device_closes_its_connection_within_a_poll_and_spares_the_others() {
    let fleet = Fleet::new();
    let gw = fleet.gateway(|c| c).await;
    let addr = gw.local_addr().unwrap();
    let server = fleet.server_cert();
    let (a_id, _) = fleet.enrol("device-a");
    let (b_id, _) = fleet.enrol("device-b");
    let (c_id, c_serial) = fleet.enrol("device-c");
    let a = connect(addr, &server, Some(&a_id), "device-a").await.unwrap();
    let b = connect(addr, &server, Some(&b_id), "device-b").await.unwrap();
    let c = connect(addr, &server, Some(&c_id), "device-c").await.unwrap();
    assert!(matches!(ask(&a, &escalate(1, 0, full(&[1, 2]))).await, Frame::Token { .. }));

    // Revoke A by id (as `cloud-gateway ca revoke` does): closed within a few polls.
    let revoked_at = Instant::now();
    revoked::append(&fleet.revoked_file(), "device-a", "stolen").unwrap();
    let closed = closed_within(&a, Duration::from_secs(2)).await;
    assert_eq!(application_close(&closed).0, CLOSE_REVOKED, "{closed:?}");
    eprintln!("revocation took effect in {:?}", revoked_at.elapsed());
    // And C by its certificate's serial.
    revoked::append(&fleet.revoked_file(), &format!("serial:{c_serial}"), "key leaked").unwrap();
    assert_eq!(application_close(&closed_within(&c, Duration::from_secs(2)).await).0, CLOSE_REVOKED);

    // A cannot come back; B never noticed.
    assert_eq!(connect(addr, &server, Some(&a_id), "device-a").await.unwrap_err(), Refusal::Tls(ALERT_CERTIFICATE_REVOKED));
    assert!(b.close_reason().is_none());
    assert_eq!(ask(&b, &Frame::Ping { nonce: 7 }).await, Frame::Pong { nonce: 7 });

    // A typo in the list keeps the previous one in force (revocation fails closed).
    std::fs::write(fleet.revoked_file(), "device-a\nserial:not-hex\n").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(connect(addr, &server, Some(&c_id), "device-c").await.unwrap_err(), Refusal::Tls(ALERT_CERTIFICATE_REVOKED), "C stays revoked");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_device_session_limit_holds_whatever_ids_hello_invents() {
    let fleet = Fleet::new();
    let gw = fleet.gateway(|mut c| {
        c.sessions.max_per_device = 3;
        c
    }).await;
    let addr = gw.local_addr().unwrap();
    let (id, _) = fleet.enrol("device-a");
    let mut conn = connect(addr, &fleet.server_cert(), Some(&id), "invented-0").await.unwrap();
    let mut refused = 0;
    for session in 1..=12u64 {
        if session % 3 == 0 {
            // A new connection claiming yet another id: the certificate's id is what counts.
            conn = connect(addr, &fleet.server_cert(), Some(&id), &format!("invented-{session}")).await.unwrap();
        }
        match ask(&conn, &escalate(session, 0, full(&[1, 2, 3]))).await {
            Frame::Token { .. } => {}
            Frame::Error { code: ErrorCode::TooManySessions, .. } => refused += 1,
            other => panic!("session {session}: {other:?}"),
        }
    }
    assert_eq!(refused, 9, "three sessions, then none, under every claimed id");
    assert_eq!(gw.shared.store.len(), 3);
    for session in 1..=3 {
        assert!(gw.shared.store.held_len(&key("device-a", session)).is_some(), "held under the certificate's id");
    }
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_connection_of_a_device_replaces_the_first_which_is_told_why_and_continues_its_sessions() {
    let fleet = Fleet::new();
    let gw = fleet.gateway(|c| c).await;
    let addr = gw.local_addr().unwrap();
    let (id, _) = fleet.enrol("device-a");
    let vocab = vocab();
    let old = connect(addr, &fleet.server_cert(), Some(&id), "device-a").await.unwrap();
    let context = [5, 6, 7, 8];
    let first = token_of(&ask(&old, &escalate(1, 0, full(&context))).await);

    let new = connect(addr, &fleet.server_cert(), Some(&id), "device-a").await.unwrap();
    let (code, reason) = application_close(&closed_within(&old, Duration::from_secs(2)).await);
    assert_eq!((code, reason.as_slice()), (CLOSE_REPLACED, REPLACED_REASON));
    // The session lives on under the identity: the new connection carries on from it.
    let next = ask(&new, &escalate(1, 1, delta(4, &[first]))).await;
    assert_eq!(token_of(&next), HashBackend::token(&[5, 6, 7, 8, first], vocab));
    let deadline = Instant::now() + Duration::from_secs(2);
    while gw.shared.connections.load(std::sync::atomic::Ordering::Relaxed) != 1 {
        assert!(Instant::now() < deadline, "the replaced connection's actor stops");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(gw.shared.identity.registry.len(), 1);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_over_its_escalation_rate_gets_busy_with_a_retry_time_while_others_are_served() {
    let fleet = Fleet::new();
    let gw = fleet.gateway(|mut c| {
        c.identity.device_rate = RateLimit { per_second: 2, burst: 3 };
        c
    }).await;
    let addr = gw.local_addr().unwrap();
    let (a_id, _) = fleet.enrol("device-a");
    let (b_id, _) = fleet.enrol("device-b");
    let a = connect(addr, &fleet.server_cert(), Some(&a_id), "device-a").await.unwrap();
    let b = connect(addr, &fleet.server_cert(), Some(&b_id), "device-b").await.unwrap();
    let mut answers = Vec::new();
    for seq in 0..5u32 {
        answers.push(ask(&a, &escalate(1, seq, full(&vec![1; seq as usize + 1]))).await);
    }
    assert!(answers[..3].iter().all(|f| matches!(f, Frame::Token { .. })), "the burst: {answers:?}");
    for f in &answers[3..] {
        assert!(matches!(f, Frame::Busy { retry_after_ms: 1..=500, .. }), "over the rate: {f:?}");
    }
    assert!(matches!(ask(&b, &escalate(1, 0, full(&[1]))).await, Frame::Token { .. }), "another device has its own allowance");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_link_with_its_certificate_is_known_by_the_certificate_not_by_its_claimed_id() {
    let fleet = Fleet::new();
    let gw = fleet.gateway(|c| c).await;
    let (id, _) = fleet.enrol("kitchen-tablet");
    let link = edge_node::link::Link::start(edge_node::link::LinkConfig {
        client_identity: Some(id),
        ..edge_node::link::LinkConfig::new(gw.local_addr().unwrap().to_string(), Some(fleet.server_cert()), "whatever-it-claims", fingerprint())
    })
    .unwrap();
    link.wait_up(Duration::from_secs(5)).await.expect("welcomed with its certificate");
    let (answer, _) = link.request(&escalate(9, 0, full(&[1, 2, 3])), Instant::now() + Duration::from_secs(5)).await.unwrap();
    assert!(matches!(answer, Frame::Token { .. }), "{answer:?}");
    assert_eq!(gw.shared.store.held_len(&key("kitchen-tablet", 9)), Some(3));
    assert_eq!(gw.shared.store.held_len(&key("whatever-it-claims", 9)), None);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_dev_mode_a_hello_id_with_control_characters_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start(test_config(dir.path()), Box::new(HashBackend::new(TINY, Duration::ZERO))).await.unwrap();
    let addr = gw.local_addr().unwrap();
    let server = dir.path().join("cert.pem");
    for bad in ["a\nINFO device b welcomed", "esc\u{1b}[2J", "nul\0"] {
        let refused = connect(addr, &server, None, bad).await.unwrap_err();
        assert!(matches!(&refused, Refusal::Reject(RejectReason::Other(m)) if m.contains("control character")), "{bad:?}: {refused:?}");
    }
    assert!(connect(addr, &server, None, "plain-device").await.is_ok());
    gw.shutdown().await;
}

/// Run `cloud-gateway ca ...` (the operator's admin command), asserting success.
fn fleet_cmd(args: &[&str]) -> String {
    let out = std::process::Command::new(gateway_exe()).arg("ca").args(args).output().expect("run cloud-gateway ca");
    assert!(out.status.success(), "cloud-gateway ca {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The operator's path end to end, with the real binary: `fleet init-ca`, `ca issue`, a
/// gateway process with `--client-ca` and `--revoked-file` (polling once an hour, so only the
/// signal can reload it), `fleet revoke`, then SIGHUP: the device's connection is closed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_makes_a_gateway_process_apply_a_fleet_revoke_at_once() {
    cloud_gateway::transport::tls::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let path = |p: &str| dir.path().join(p).to_str().unwrap().to_string();
    fleet_cmd(&["init-ca", "--dir", &path("ca")]);
    let issued = fleet_cmd(&["issue", "--ca-dir", &path("ca"), "--device", "field-unit-1", "--days", "2", "--out", &path("field-unit-1")]);
    assert!(issued.contains("--client-cert"), "{issued}");
    let identity = ClientIdentity { cert: dir.path().join("field-unit-1/device-cert.pem"), key: dir.path().join("field-unit-1/device-key.pem") };
    let (cert, key) = cert_pair(dir.path());
    let port = free_udp_port();
    let child = spawn_gateway_process(
        port,
        &cert,
        &key,
        TINY,
        &[&format!("--client-ca={}", path("ca/ca-cert.pem")), &format!("--revoked-file={}", path("revoked.txt")), "--revoked-poll-ms=3600000"],
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let conn = loop {
        match connect(addr, &cert, Some(&identity), "field-unit-1").await {
            Ok(c) => break c,
            Err(e) => assert!(Instant::now() < deadline, "the gateway process did not welcome the device: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(matches!(ask(&conn, &escalate(1, 0, full(&[1, 2, 3]))).await, Frame::Token { .. }));

    fleet_cmd(&["revoke", "--revoked-file", &path("revoked.txt"), "field-unit-1", "--reason", "stolen"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(conn.close_reason().is_none(), "not reloaded before the signal (polling once an hour)");
    let status = std::process::Command::new("kill").args(["-HUP", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    assert_eq!(application_close(&closed_within(&conn, Duration::from_secs(2)).await).0, CLOSE_REVOKED);
    assert_eq!(connect(addr, &cert, Some(&identity), "field-unit-1").await.unwrap_err(), Refusal::Tls(ALERT_CERTIFICATE_REVOKED));
}

/// A development gateway (self-signed certificate, no `--tls-cert`) as a child process.
fn dev_gateway_process(port: u16, write_cert: &Path) -> GatewayProcess {
    let child = std::process::Command::new(gateway_exe())
        .args([
            format!("--listen=127.0.0.1:{port}"),
            "--http-listen=off".into(),
            format!("--write-cert={}", write_cert.display()),
            format!("--model={TINY}"),
            "--threads=1".into(),
            "--log=warn".into(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("spawn cloud-gateway");
    GatewayProcess::from_child(child)
}

/// The dev gateway's self-signed certificate survives a restart: a running edge that pinned it
/// reconnects by itself (before, a new certificate at every start locked it out until someone
/// copied the new file over).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_edge_reconnects_to_a_restarted_dev_gateway_because_its_certificate_is_kept() {
    cloud_gateway::transport::tls::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let pinned = dir.path().join("gateway-cert.pem");
    let port = free_udp_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut first = dev_gateway_process(port, &pinned);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !pinned.exists() {
        assert!(Instant::now() < deadline, "the gateway wrote its certificate");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The edge reads the pinned certificate once, at start, as a device does.
    let link = raw_link(addr, &pinned, "pinned-device", "");
    let up = link.wait_up(Duration::from_secs(60)).await.expect("connected to the first gateway");
    let written = std::fs::read(&pinned).unwrap();
    first.kill();
    let _second = dev_gateway_process(port, &pinned);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let edge_node::link::LinkState::Up(c) = link.state() {
            if c.generation > up.generation {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the edge reconnected to the restarted gateway: {:?}", link.state());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(std::fs::read(&pinned).unwrap(), written, "the same certificate file");
    assert!(matches!(link.request(&Frame::Ping { nonce: 1 }, Instant::now() + Duration::from_secs(5)).await, Ok((Frame::Pong { nonce: 1 }, _))));
}

/// Wait until `check` holds, at most `within`.
async fn eventually(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let until = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < until, "waited {within:?} for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Certificate rotation without restarting the edge, then revocation by the fleet CA's CRL:
/// the running link picks up the new pair installed over its files and keeps its live
/// connection (still on the old certificate); revoking the old certificate in the CRL closes
/// that connection, the link reconnects with the new certificate by itself, and the old
/// certificate is refused in the TLS handshake, which the link reports as a refusal that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_used_on_the_next_connection_and_a_crl_revoked_one_is_refused() {
    let fleet = Fleet::new();
    let crl = fleet.dir.path().join("fleet-crl.pem");
    let gw = fleet.gateway(|mut c| {
        c.identity.client_crls = vec![crl.clone()];
        c
    }).await;
    let addr = gw.local_addr().unwrap();
    let (old, old_serial) = fleet.enrol("rotor");
    // The files the edge is configured with; an installer later writes the new pair over them.
    let installed = ClientIdentity { cert: fleet.dir.path().join("rotor-cert.pem"), key: fleet.dir.path().join("rotor-key.pem") };
    std::fs::copy(&old.cert, &installed.cert).unwrap();
    std::fs::copy(&old.key, &installed.key).unwrap();
    let link = edge_node::link::Link::start(edge_node::link::LinkConfig {
        client_identity: Some(installed.clone()),
        cert_poll: Duration::from_millis(50),
        backoff_max: Duration::from_millis(300),
        ..edge_node::link::LinkConfig::new(addr.to_string(), Some(fleet.server_cert()), "rotor", fingerprint())
    })
    .unwrap();
    let first = link.wait_up(Duration::from_secs(10)).await.expect("welcomed with the first certificate");
    let registry = &gw.shared.identity.registry;
    assert_eq!(registry.serial_hex("rotor"), Some(old_serial.clone()));

    // Rotate: the new pair goes over the files the edge reads.
    let (new, new_serial) = fleet.enrol("rotor");
    std::fs::copy(&new.key, &installed.key).unwrap();
    std::fs::copy(&new.cert, &installed.cert).unwrap();
    eventually("the edge loading the rotated certificate", Duration::from_secs(10), || link.certificate_reloads() >= 1).await;
    // The live connection is untouched: same connection, still the old certificate.
    assert!(matches!(link.request(&Frame::Ping { nonce: 1 }, Instant::now() + Duration::from_secs(5)).await, Ok((Frame::Pong { nonce: 1 }, ref c)) if c.generation == first.generation));
    assert_eq!(registry.serial_hex("rotor"), Some(old_serial.clone()));

    // Revoke the old certificate in the fleet CA's CRL: its connection is closed within a poll,
    // and the edge comes back by itself on the new certificate.
    let old_serial_parsed = fleet.ca.issued_serials("rotor").unwrap().into_iter().find(|s| s.to_hex() == old_serial).unwrap();
    assert_eq!(fleet.ca.revoke_into_crl(&crl, &[old_serial_parsed]).unwrap(), 1);
    let closed = closed_within(&first.conn, Duration::from_secs(5)).await;
    assert_eq!(application_close(&closed).0, CLOSE_REVOKED, "{closed:?}");
    eventually("the edge reconnecting with the new certificate", Duration::from_secs(10), || registry.serial_hex("rotor").as_deref() == Some(new_serial.as_str())).await;
    let (answer, on) = link.request(&escalate(1, 0, full(&[1, 2, 3])), Instant::now() + Duration::from_secs(5)).await.expect("served on the new certificate");
    assert!(matches!(answer, Frame::Token { .. }), "{answer:?}");
    assert!(on.generation > first.generation);

    // The old certificate is refused in the TLS handshake, and a link holding it says why.
    assert_eq!(connect(addr, &fleet.server_cert(), Some(&old), "rotor").await.unwrap_err(), Refusal::Tls(ALERT_CERTIFICATE_REVOKED));
    let stale = edge_node::link::Link::start(edge_node::link::LinkConfig {
        client_identity: Some(old.clone()),
        ..edge_node::link::LinkConfig::new(addr.to_string(), Some(fleet.server_cert()), "rotor", fingerprint())
    })
    .unwrap();
    let mut refusal = None;
    eventually("the revoked link's refusal", Duration::from_secs(10), || {
        if let edge_node::link::LinkState::Rejected(why) = stale.state() {
            refusal = Some(why);
        }
        refusal.is_some()
    })
    .await;
    let why = refusal.unwrap();
    assert!(why.contains("certificate revoked"), "{why}");
    eprintln!("a revoked device is told: {why}");
    link.close().await;
    stale.close().await;
    gw.shutdown().await;
}
