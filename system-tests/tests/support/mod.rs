//! Shared helpers for the end-to-end tests: gateways in-process or as child processes, a
//! certificate pair both sides trust, raw clients.

#![allow(dead_code)]

pub mod engines;
pub mod raw;

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cloud_gateway::batcher::backend::{Backend, DelayBackend, EmbeddedBackend, EmbeddedOptions};
use cloud_gateway::config::{CertSource, GatewayConfig, TransportConfig};
use cloud_gateway::Gateway;
use edge_node::link::{Link, LinkConfig};

pub const TINY: &str = "tiny-qwen2";
pub const SLM: &str = "qwen2.5-coder-0.5b-instruct";
pub const LLM: &str = "qwen2.5-coder-1.5b-instruct";

/// A self-signed certificate and key written as PEM into `dir`.
pub fn cert_pair(dir: &Path) -> (PathBuf, PathBuf) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    (cert, key)
}

/// A UDP port free right now on loopback.
pub fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A gateway configuration for tests: loopback on free ports, the certificate pair written
/// into `dir` (devices pin `dir/cert.pem`).
pub fn test_config(dir: &Path) -> GatewayConfig {
    let (cert, key) = cert_pair(dir);
    let transport = TransportConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: Some("127.0.0.1:0".parse().unwrap()),
        cert: CertSource::Files { cert, key },
        ..TransportConfig::default()
    };
    GatewayConfig { transport, ..GatewayConfig::default() }
}

/// Start a gateway in this process with `config`, its embedded backend on `model` (one thread,
/// 512-token contexts), every backend call `delay` slower.
pub async fn start_gateway_with(config: GatewayConfig, model: &str, delay: Duration) -> Gateway {
    let options = EmbeddedOptions { model: model.into(), threads: 1, max_context: 512, ..EmbeddedOptions::default() };
    let backend = tokio::task::spawn_blocking(move || EmbeddedBackend::load(&options)).await.unwrap().unwrap();
    let backend: Box<dyn Backend> = if delay.is_zero() { Box::new(backend) } else { Box::new(DelayBackend::new(backend, delay)) };
    Gateway::start(config, backend).await.unwrap()
}

/// Start a gateway in this process with the test defaults.
pub async fn start_gateway(dir: &Path, model: &str) -> Gateway {
    start_gateway_with(test_config(dir), model, Duration::ZERO).await
}

/// A child gateway process, killed when dropped (also when a test panics).
pub struct GatewayProcess(Child);

impl GatewayProcess {
    /// Its process id (to signal it).
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// Own a child process started some other way (killed when dropped).
    pub fn from_child(child: Child) -> Self {
        Self(child)
    }

    /// Wait up to `timeout` for it to exit by itself; its exit status, `None` if it did not.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// Kill it now (like a crash: no connection close is sent) and reap it.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Start `cloud-gateway` as a child process (so a test can kill it) on a fixed port.
pub fn spawn_gateway_process(port: u16, cert: &Path, key: &Path, model: &str, extra: &[&str]) -> GatewayProcess {
    let exe = gateway_exe();
    let mut cmd = Command::new(exe);
    cmd.args([
        format!("--listen=127.0.0.1:{port}"),
        "--http-listen=off".into(),
        format!("--tls-cert={}", cert.display()),
        format!("--tls-key={}", key.display()),
        format!("--model={model}"),
        "--threads=1".into(),
        "--max-context=4096".into(),
        "--log=warn".into(),
    ]);
    cmd.args(extra).stdout(Stdio::null()).stderr(Stdio::inherit());
    GatewayProcess(cmd.spawn().expect("spawn cloud-gateway"))
}

/// Path of one of the workspace's binaries, built into the same target directory as this test
/// (`deploy/test` builds them first; a missing one is built here).
pub fn bin(name: &str) -> PathBuf {
    let test = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let exe = test.parent().and_then(Path::parent).expect("target dir").join(name);
    if !exe.exists() {
        let package = if name == "edge-node" || name == "cloud-gateway" || name == "router-lab" { name } else { panic!("unknown binary {name}") };
        let status = Command::new(env!("CARGO")).args(["build", "--release", "-p", package]).status().expect("cargo build");
        assert!(status.success(), "building {package}");
    }
    exe
}

/// Path of the gateway binary.
pub fn gateway_exe() -> PathBuf {
    bin("cloud-gateway")
}

/// Wait until a QUIC gateway answers a handshake on `addr`.
pub async fn wait_for_gateway(addr: SocketAddr, ca: &Path, timeout: Duration) {
    let link = raw_link(addr, ca, "waiter", "");
    assert!(link.wait_up(timeout).await.is_some(), "gateway at {addr} did not come up");
}

/// A link with this test suite's defaults and the real tokenizer's fingerprint.
pub fn raw_link(addr: SocketAddr, ca: &Path, device: &str, auth: &str) -> Link {
    link_with(addr, ca, device, auth, &fingerprint())
}

/// A link with an explicit tokenizer fingerprint.
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

/// The tokenizer fingerprint of the prepared models.
pub fn fingerprint() -> String {
    model_runtime::model_files::ModelFiles::locate(TINY).unwrap().manifest.tokenizer_fingerprint
}

/// Run `edge-node` with arguments; returns (parsed --json stdout, elapsed).
pub fn edge_json(args: &[&str]) -> (serde_json::Value, Duration) {
    let t = Instant::now();
    let out = Command::new(bin("edge-node")).args(args).env_remove("DUET_MODEL").output().unwrap();
    let elapsed = t.elapsed();
    assert!(out.status.success(), "edge-node {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    (serde_json::from_slice(&out.stdout).expect("json"), elapsed)
}

/// Token ids of a `--json` report.
pub fn ids(v: &serde_json::Value) -> Vec<u64> {
    v["token_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}
