//! Who may act as which device, over real QUIC on loopback: a per-device token opens its own id
//! only, and a connection that cannot prove an id never takes it from the device holding it.

mod support;

use common::device_token::DeviceTokenKey;
use common::protocol::{ContextSync, Frame, RejectReason, TokenIds, WireSampling};
use support::*;

fn escalate(session_id: u64, seq: u32, tokens: Vec<u32>) -> Frame {
    Frame::Escalate { session_id, seq, context: ContextSync::Full { tokens: TokenIds(tokens) }, sampling: WireSampling::default(), deadline_ms: 5000 }
}

fn refused(reply: &Frame) -> bool {
    matches!(reply, Frame::Reject { .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_device_token_opens_its_own_id_and_a_forged_claim_neither_connects_nor_evicts() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("device-token.secret");
    std::fs::write(&secret, DeviceTokenKey::generate_secret().unwrap()).unwrap();
    let key = DeviceTokenKey::load(&secret).unwrap();
    let gw = start_gateway(tuned(test_config(dir.path()), |c| c.identity.device_token_secret = Some(secret.clone()))).await;
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));

    let device = client_on("127.0.0.2:0", &ca);
    let (victim, welcome) = hello_with(&device, addr, "victim", &key.issue("victim")).await;
    assert!(matches!(welcome, Frame::Welcome { .. }), "{welcome:?}");
    assert!(matches!(request(&victim, &escalate(1, 0, vec![5, 6])).await, Frame::Token { .. }));

    let attacker = client_on("127.0.0.1:0", &ca);
    let forged = DeviceTokenKey::from_hex(&DeviceTokenKey::generate_secret().unwrap()).unwrap();
    let own_token = key.issue("attacker");
    for auth in ["", "sesame", forged.issue("victim").as_str(), own_token.as_str()] {
        let (_, reply) = hello_with(&attacker, addr, "victim", auth).await;
        assert_eq!(reply, Frame::Reject { reason: RejectReason::Auth }, "a claim of `victim` with {auth:?}");
    }
    // The attacker's own token opens its own id, and nothing of the victim's.
    let (_, reply) = hello_with(&attacker, addr, "attacker", &own_token).await;
    assert!(matches!(reply, Frame::Welcome { .. }), "{reply:?}");
    assert!(victim.close_reason().is_none(), "the victim's connection was not evicted");
    let delta = Frame::Escalate { session_id: 1, seq: 1, context: ContextSync::Delta { base_len: 2, tokens: TokenIds(vec![7]) }, sampling: WireSampling::default(), deadline_ms: 5000 };
    assert!(matches!(request(&victim, &delta).await, Frame::Token { seq: 1, .. }), "its session is intact");

    // The device itself reconnecting with its token replaces its older connection.
    let (again, reply) = hello_with(&client_on("127.0.0.3:0", &ca), addr, "victim", &key.issue("victim")).await;
    assert!(matches!(reply, Frame::Welcome { .. }), "{reply:?}");
    victim.closed().await;
    assert!(again.close_reason().is_none());
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_id_is_not_taken_from_its_live_connection_by_a_claim_from_another_address() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_gateway(tuned(test_config(dir.path()), |c| c.identity.auth_token = Some("shared".into()))).await;
    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));
    let (holder, reply) = hello_with(&client_on("127.0.0.2:0", &ca), addr, "device-1", "shared").await;
    assert!(matches!(reply, Frame::Welcome { .. }), "{reply:?}");
    // The shared token lets anyone claim an id, but not one a live connection elsewhere holds.
    let (_, reply) = hello_with(&client_on("127.0.0.1:0", &ca), addr, "device-1", "shared").await;
    assert!(refused(&reply) && format!("{reply:?}").contains("in use"), "{reply:?}");
    assert!(holder.close_reason().is_none(), "not evicted");
    assert!(matches!(request(&holder, &escalate(1, 0, vec![5, 6])).await, Frame::Token { .. }));
    // The same host reconnecting takes its id over, as after a network change.
    let (_, reply) = hello_with(&client_on("127.0.0.2:0", &ca), addr, "device-1", "shared").await;
    assert!(matches!(reply, Frame::Welcome { .. }), "{reply:?}");
    holder.closed().await;
    gw.shutdown().await;
}
