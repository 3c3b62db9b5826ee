//! Gateway replicas as child processes with their HTTP side port on, for the drain tests:
//! start one, read its metrics and readiness, SIGTERM it and time its exit.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::support::gateway_exe;

/// A TCP port free right now on loopback.
pub fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `cloud-gateway` process: QUIC on `quic`, HTTP side port on `http`; killed when dropped.
pub struct Replica {
    child: Child,
    /// QUIC port.
    pub quic: u16,
    /// HTTP side port.
    pub http: u16,
}

impl Replica {
    /// Start `cloud-gateway` named `id` on free ports with the certificate pair, the LLM
    /// `model` (one thread) and `extra` flags.
    pub fn start(id: &str, cert: &Path, key: &Path, model: &str, extra: &[&str]) -> Self {
        let (quic, http) = (super::support::free_udp_port(), free_tcp_port());
        let child = Command::new(gateway_exe())
            .args([
                format!("--listen=127.0.0.1:{quic}"),
                format!("--http-listen=127.0.0.1:{http}"),
                format!("--tls-cert={}", cert.display()),
                format!("--tls-key={}", key.display()),
                format!("--gateway-id={id}"),
                format!("--model={model}"),
                "--threads=1".into(),
                "--max-context=4096".into(),
                "--log=warn".into(),
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn cloud-gateway");
        Self { child, quic, http }
    }

    /// `127.0.0.1:<quic>`, for `--gateway`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.quic)
    }

    /// Send SIGTERM (what Kubernetes sends before its grace period's SIGKILL).
    pub fn terminate(&self) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Wait up to `timeout` for the process to exit; its status and when it exited.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<(ExitStatus, Instant)> {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some((status, Instant::now()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// `GET path` on the side port: status and body.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let r = reqwest::get(format!("http://127.0.0.1:{}{path}", self.http)).await.expect("GET");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    }

    /// `POST /drain` with `token` as the bearer token (none if `None`): status and body.
    pub async fn post_drain(&self, token: Option<&str>) -> (u16, String) {
        post_drain(self.http, token).await
    }

    /// The value of metric `name` (without labels), if exported.
    pub async fn metric(&self, name: &str) -> Option<f64> {
        metric_in(&self.get("/metrics").await.1, name)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `POST /drain` on a side port.
pub async fn post_drain(http_port: u16, token: Option<&str>) -> (u16, String) {
    let mut req = reqwest::Client::new().post(format!("http://127.0.0.1:{http_port}/drain"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.expect("POST /drain");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

/// The value of metric `name` (a line `name value`, no labels) in a Prometheus text page.
pub fn metric_in(page: &str, name: &str) -> Option<f64> {
    page.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}
