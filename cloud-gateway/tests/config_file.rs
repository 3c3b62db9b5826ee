//! A gateway built from a sectioned `--config` file, as the binary builds it: the file's
//! sections reach the running gateway (its transport, identity, sessions, embedded LLM and
//! batcher), and a device is served by it.

mod support;

use std::time::Duration;

use cloud_gateway::cli::GatewayArgs;
use cloud_gateway::Gateway;
use common::protocol::{ContextSync, Frame, TokenIds, WireSampling};
use model_runtime::model_files::TINY_MODEL;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_built_from_a_sectioned_config_file_runs_with_its_settings() {
    let dir = tempfile::tempdir().unwrap();
    let base = test_config(dir.path());
    let cloud_gateway::config::CertSource::Files { cert, key } = &base.transport.cert else { unreachable!() };
    let file = dir.path().join("gateway.toml");
    let toml = format!(
        "[transport]\nlisten = \"127.0.0.1:0\"\nhttp-listen = \"off\"\ntls-cert = {cert:?}\ntls-key = {key:?}\n\n\
         [identity]\nauth-token = \"sesame\"\ngateway-id = \"from-the-file\"\n\n\
         [sessions]\nmax-sessions-per-device = 2\n\n\
         [embedded]\nmodel = \"{TINY_MODEL}\"\nthreads = 1\nmax-context = 512\n\n\
         [batcher]\nmax-batch = 4\nmax-wait-ms = 1\n\n\
         [telemetry]\nlog = \"warn\"\n"
    );
    std::fs::write(&file, toml).unwrap();
    let args = GatewayArgs::from_argv(["cloud-gateway", "--config", file.to_str().unwrap()].iter().map(Into::into).collect()).unwrap();
    assert!(args.config_warnings.is_empty(), "{:?}", args.config_warnings);
    let config = args.gateway_config().unwrap();
    let backend = tokio::task::spawn_blocking(move || args.load_backend()).await.unwrap().expect("the tiny model (deploy/models/prepare slm tiny)");
    let gw = Gateway::start(config, backend).await.unwrap();
    assert_eq!((gw.http_addr, gw.shared.max_sessions_per_device, gw.shared.max_context_tokens), (None, 2, 511));
    assert_eq!(gw.shared.handshake.gateway_id, "from-the-file");

    let (addr, ca) = (gw.local_addr().unwrap(), ca_cert(dir.path()));
    assert!(rejected(&link(addr, &ca, "intruder", "guess")).await.contains("authentication"), "the file's auth token is required");
    let device = link(addr, &ca, "device", "sesame");
    device.wait_up(Duration::from_secs(5)).await.unwrap();
    let escalate = Frame::Escalate { session_id: 1, seq: 0, context: ContextSync::Full { tokens: TokenIds(vec![9, 8, 7]) }, sampling: WireSampling::default(), deadline_ms: 5000 };
    assert!(matches!(ask(&device, &escalate).await, Frame::Token { .. }));
    gw.shutdown().await;
}
