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
    /// `None` once handed to [`Replica::watch_exit`].
    child: Option<Child>,
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
                "--log=warn,cloud_gateway::drain=info,cloud_gateway=info".into(),
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn cloud-gateway");
        Self { child: Some(child), quic, http }
    }

    /// [`Self::start`], then wait up to `timeout` until it answers a handshake (trusting
    /// `cert`). A process that exits first (its free port was taken meanwhile) is started
    /// again on other ports.
    pub async fn start_ready(id: &str, cert: &Path, key: &Path, model: &str, extra: &[&str], timeout: Duration) -> Self {
        let until = Instant::now() + timeout;
        'start: loop {
            let mut r = Self::start(id, cert, key, model, extra);
            let link = super::support::raw_link(r.addr().parse().unwrap(), cert, "waiter", "");
            while Instant::now() < until {
                if link.wait_up(Duration::from_millis(200)).await.is_some() {
                    return r;
                }
                if r.child.as_mut().and_then(|c| c.try_wait().expect("try_wait")).is_some() {
                    continue 'start;
                }
            }
            panic!("gateway {id} did not come up within {timeout:?}");
        }
    }

    /// `127.0.0.1:<quic>`, for `--gateway`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.quic)
    }

    /// Send SIGTERM (what Kubernetes sends before its grace period's SIGKILL).
    pub fn terminate(&self) {
        let pid = self.child.as_ref().expect("running").id();
        let status = Command::new("kill").args(["-TERM", &pid.to_string()]).status().expect("kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Wait up to `timeout` for the process to exit; its status and when it exited.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<(ExitStatus, Instant)> {
        wait_exit(self.child.as_mut().expect("running"), timeout)
    }

    /// Watch for the process's exit on a thread of its own (so that its time is measured while
    /// the test does something else): its status and when it exited, within `timeout`, else
    /// `None` (the process is then killed).
    pub fn watch_exit(&mut self, timeout: Duration) -> std::thread::JoinHandle<Option<(ExitStatus, Instant)>> {
        let mut child = self.child.take().expect("running");
        std::thread::spawn(move || {
            let exit = wait_exit(&mut child, timeout);
            if exit.is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
            exit
        })
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
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn wait_exit(child: &mut Child, timeout: Duration) -> Option<(ExitStatus, Instant)> {
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some((status, Instant::now()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
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

/// A backend whose token is a fixed function of the context (FNV-1a of the ids modulo the
/// vocabulary), `cost` per batch, counting what it answered: "the same tokens as one gateway"
/// is then exact whatever the sync pattern (a real model's prefill of a long `Full` and its
/// one-token steps can round differently and flip a near-tie).
pub struct HashBackend {
    cost: Duration,
    facts: cloud_gateway::batcher::backend::ModelFacts,
    /// Escalations answered so far.
    pub answered: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl HashBackend {
    /// Standing in for the prepared model `model` (its tokenizer and vocabulary).
    pub fn new(model: &str, cost: Duration) -> Self {
        let manifest = model_runtime::model_files::ModelFiles::locate(model).unwrap().manifest;
        let facts = cloud_gateway::batcher::backend::ModelFacts { llm_id: "hash".into(), ..cloud_gateway::batcher::backend::ModelFacts::of_manifest(&manifest, 4096) };
        Self { cost, facts, answered: Default::default() }
    }

    /// The token answered after `context`.
    pub fn token(context: &[u32], vocab: usize) -> u32 {
        let h = context.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &t| (h ^ u64::from(t)).wrapping_mul(0x100_0000_01b3));
        (h % vocab.max(1) as u64) as u32
    }
}

impl cloud_gateway::batcher::backend::Backend for HashBackend {
    fn name(&self) -> &str {
        "hash"
    }
    fn facts(&self) -> cloud_gateway::batcher::backend::ModelFacts {
        self.facts.clone()
    }
    fn next_tokens(&mut self, batch: &[cloud_gateway::batcher::backend::LlmRequest]) -> Vec<Result<cloud_gateway::batcher::backend::LlmToken, cloud_gateway::batcher::backend::LlmError>> {
        std::thread::sleep(self.cost);
        self.answered.fetch_add(batch.len(), std::sync::atomic::Ordering::Relaxed);
        batch.iter().map(|r| Ok(cloud_gateway::batcher::backend::LlmToken { token_id: Self::token(&r.context, self.facts.vocab_size), logprob: -1.0, accepted: 0 })).collect()
    }
}
