//! The metrics reference (`docs/src/metrics.md`) against a live gateway: every `duet_*` metric a
//! gateway serving devices exports on `/metrics` is documented there, with the type it has.
//! (`deploy/check/docs-drift` checks the other way: every documented name is recorded by the code.)

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use cloud_gateway::batcher::backend::{DelayBackend, EmbeddedBackend, EmbeddedOptions};
use common::protocol::{ContextSync, Frame, TokenIds, WireSampling};
use model_runtime::model_files::TINY_MODEL;
use support::*;

/// The reference's tables: metric name -> type (first two columns).
fn documented() -> BTreeMap<String, String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/src/metrics.md");
    let text = std::fs::read_to_string(path).expect("docs/src/metrics.md");
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("| `duet_")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        out.insert(cells[1].trim_matches('`').to_string(), cells[2].to_string());
    }
    out
}

/// `/metrics` as metric family -> type, from its `# TYPE` lines.
async fn exported(http: SocketAddr) -> BTreeMap<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(http).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").await.unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .filter(|(name, _)| name.starts_with("duet_"))
        .map(|(name, kind)| (name.to_string(), kind.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_a_serving_gateway_exports_is_in_the_reference_with_its_type() {
    let dir = tempfile::tempdir().unwrap();
    let options = EmbeddedOptions { model: TINY_MODEL.into(), threads: 1, max_context: 512, ..EmbeddedOptions::default() };
    let tiny = tokio::task::spawn_blocking(move || EmbeddedBackend::load(&options)).await.unwrap().expect("the tiny model (deploy/models/prepare slm tiny)");
    let gateway = cloud_gateway::Gateway::start(test_config(dir.path()), Box::new(DelayBackend::new(tiny, Duration::from_millis(1)))).await.unwrap();
    let (addr, http) = (gateway.local_addr().unwrap(), gateway.http_addr.unwrap());
    let conn = quic_connection(addr, &ca_cert(dir.path())).await;
    let hello = Frame::Hello { protocol_version: common::protocol::PROTOCOL_VERSION, device_id: "metrics".into(), auth: String::new(), tokenizer_fingerprint: fingerprint(), slm_id: "test".into() };
    assert!(matches!(request(&conn, &hello).await, Frame::Welcome { .. }));
    // Three escalations answered: the series of the common path exist.
    for seq in 0..3 {
        let tokens = TokenIds((0..8 + seq).map(|i| 100 + i).collect());
        let frame = Frame::Escalate { session_id: 1, seq, context: ContextSync::Full { tokens }, sampling: WireSampling::default(), deadline_ms: 10_000 };
        assert!(matches!(request(&conn, &frame).await, Frame::Token { .. }));
    }
    let exported = exported(http).await;
    let documented = documented();
    assert!(exported.len() >= 10, "a serving gateway exports its metrics: {exported:?}");
    for (name, kind) in &exported {
        let doc = documented.get(name).unwrap_or_else(|| panic!("{name} ({kind}) is exported but not in docs/src/metrics.md"));
        assert_eq!(doc, kind, "{name}: docs/src/metrics.md says {doc}, /metrics says {kind}");
    }
    gateway.shutdown().await;
}
