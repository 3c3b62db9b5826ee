//! Real `llama-server` engines for the tests (built by `deploy/engines/llamacpp/build`), and a
//! fault-injecting HTTP proxy in front of one: the engine is real, the proxy breaks answers on
//! demand (HTTP 500, a body that is not JSON, a token id outside the vocabulary, no answer).

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cloud_gateway::engine::client::EngineClient;
use cloud_gateway::engine::llamacpp::LlamaCppDialect;
use cloud_gateway::engine::{EngineKind, EngineSpec, NextTokenRequest};
use model_runtime::model_files::duet_home;

/// The llama-server binary: `$DUET_LLAMA_SERVER`, else the one the build script caches.
pub fn llama_server_exe() -> PathBuf {
    if let Some(p) = std::env::var_os("DUET_LLAMA_SERVER") {
        return PathBuf::from(p);
    }
    let engines = duet_home().join("engines");
    let found = std::fs::read_dir(&engines).ok().and_then(|dir| {
        dir.filter_map(|e| e.ok()).map(|e| e.path().join("bin/llama-server")).filter(|p| p.exists()).max()
    });
    found.unwrap_or_else(|| panic!("no llama-server under {}: run deploy/engines/llamacpp/build (deploy/test does)", engines.display()))
}

/// The LLM's GGUF, which `deploy/models/prepare` keeps.
pub fn llm_gguf() -> PathBuf {
    duet_home().join("gguf").join(format!("{}.gguf", super::LLM))
}

fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `llama-server` child process serving the LLM; killed when dropped.
pub struct LlamaServer {
    child: Option<Child>,
    host: std::net::IpAddr,
    port: u16,
    parallel: usize,
}

impl LlamaServer {
    /// Start one with `parallel` slots of 2048 tokens each, on a free port, and wait until it
    /// is healthy.
    pub async fn start(parallel: usize) -> Self {
        Self::start_at("127.0.0.1".parse().unwrap(), free_tcp_port(), parallel).await
    }

    /// Start one on `host:port` (pods behind a headless Service share a port and differ by
    /// address: loopback has 127.0.0.0/8 for that), and wait until it is healthy.
    pub async fn start_at(host: std::net::IpAddr, port: u16, parallel: usize) -> Self {
        let mut server = Self { child: None, host, port, parallel };
        server.spawn();
        server.wait_healthy(Duration::from_secs(120)).await;
        server
    }

    /// A TCP port free on loopback now.
    pub fn free_port() -> u16 {
        free_tcp_port()
    }

    fn spawn(&mut self) {
        let child = Command::new(llama_server_exe())
            .args(["-m", llm_gguf().to_str().unwrap(), "--host", &self.host.to_string(), "--port", &self.port.to_string()])
            .args(["-np", &self.parallel.to_string(), "-c", &(2048 * self.parallel).to_string(), "-t", "1", "--threads-http", "128", "--metrics", "--log-disable"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn llama-server");
        self.child = Some(child);
    }

    /// Its base URL.
    pub fn url(&self) -> String {
        format!("http://{}", std::net::SocketAddr::new(self.host, self.port))
    }

    /// Its `--engine` value.
    pub fn spec(&self) -> EngineSpec {
        EngineSpec::fixed(EngineKind::LlamaCpp, self.url())
    }

    /// The address it listens on.
    pub fn host(&self) -> std::net::IpAddr {
        self.host
    }

    /// Wait for `/health` to answer 200.
    pub async fn wait_healthy(&self, timeout: Duration) {
        let client = self.client();
        let t = Instant::now();
        while !client.is_healthy(Duration::from_secs(1)).await {
            assert!(t.elapsed() < timeout, "llama-server on port {} not healthy after {timeout:?}", self.port);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A client speaking to it directly (not through the gateway).
    pub fn client(&self) -> EngineClient {
        EngineClient::new(&self.spec(), Arc::new(LlamaCppDialect)).unwrap()
    }

    /// The engine's own greedy continuation of `prompt`, `n` tokens, asked for directly.
    pub async fn greedy(&self, prompt: &[u32], n: u32) -> Vec<u32> {
        let sampling = Default::default();
        let request = NextTokenRequest { context: prompt, sampling: &sampling, seed: None, max_new_tokens: n, top_logprobs: 0, slot: None };
        self.client().next_token(&request, Duration::from_secs(120)).await.unwrap().tokens.iter().map(|t| t.id).collect()
    }

    /// The engine's top candidates for the token after `context`, as (id, logprob), best first.
    pub async fn top(&self, context: &[u32], k: u32) -> Vec<(u32, f64)> {
        let body = serde_json::json!({"prompt": context, "n_predict": 1, "top_k": 1, "temperature": 0.0, "n_probs": k, "cache_prompt": false, "return_tokens": true});
        let raw = self.client().call(&cloud_gateway::engine::HttpCall::post("/completion", body), Duration::from_secs(120)).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&raw).unwrap();
        v["completion_probabilities"][0]["top_logprobs"].as_array().unwrap().iter().map(|e| (e["id"].as_u64().unwrap() as u32, e["logprob"].as_f64().unwrap())).collect()
    }

    /// Kill it like a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start it again on the same port (after [`LlamaServer::kill`]) and wait until healthy.
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn();
        self.wait_healthy(Duration::from_secs(120)).await;
    }

    /// Freeze (SIGSTOP) or thaw (SIGCONT) the process: a worker that hangs.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let status = Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]).status().unwrap();
        assert!(status.success());
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A frozen process must be thawed to die cleanly.
            let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
        }
        self.kill();
    }
}

/// What the fault proxy does to `/completion` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Fault {
    /// Forward to the engine unchanged.
    None = 0,
    /// Answer HTTP 500.
    Http500 = 1,
    /// Answer 200 with a body that is not JSON.
    Garbage = 2,
    /// Answer the engine's body with the token id replaced by one outside the vocabulary.
    BadToken = 3,
}

/// An HTTP proxy in front of a real engine that injects [`Fault`]s into `/completion`.
pub struct FaultProxy {
    /// Its address.
    pub addr: SocketAddr,
    fault: Arc<AtomicU8>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Start one in front of `upstream` (a base URL), passing everything through.
    pub async fn start(upstream: String) -> Self {
        use axum::body::Bytes;
        use axum::extract::State;
        use axum::http::{Method, StatusCode, Uri};
        use axum::response::IntoResponse;

        let fault = Arc::new(AtomicU8::new(Fault::None as u8));
        let http = reqwest::Client::new();
        let state = (fault.clone(), http, upstream);
        let handler = |State((fault, http, upstream)): State<(Arc<AtomicU8>, reqwest::Client, String)>, method: Method, uri: Uri, body: Bytes| async move {
            let f = fault.load(Ordering::Relaxed);
            let completion = uri.path() == "/completion";
            if completion && f == Fault::Http500 as u8 {
                return (StatusCode::INTERNAL_SERVER_ERROR, b"{\"error\":\"injected\"}".to_vec()).into_response();
            }
            if completion && f == Fault::Garbage as u8 {
                return (StatusCode::OK, b"<html>this is not json".to_vec()).into_response();
            }
            let url = format!("{upstream}{}", uri.path());
            let req = if method == Method::POST { http.post(url).header("content-type", "application/json").body(body.to_vec()) } else { http.get(url) };
            match req.send().await {
                Ok(r) => {
                    let status = StatusCode::from_u16(r.status().as_u16()).unwrap();
                    let mut bytes = r.bytes().await.unwrap_or_default().to_vec();
                    if completion && f == Fault::BadToken as u8 {
                        let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
                        v["tokens"] = serde_json::json!([999_999]);
                        v["completion_probabilities"] = serde_json::json!([{"id": 999_999, "logprob": -0.1}]);
                        bytes = serde_json::to_vec(&v).unwrap();
                    }
                    (status, bytes).into_response()
                }
                Err(_) => (StatusCode::BAD_GATEWAY, Vec::new()).into_response(),
            }
        };
        let app = axum::Router::new().fallback(handler).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, fault, task }
    }

    /// Change what it does from now on.
    pub fn set(&self, fault: Fault) {
        self.fault.store(fault as u8, Ordering::Relaxed);
    }

    /// Its `--engine` value.
    pub fn spec(&self) -> EngineSpec {
        EngineSpec::fixed(EngineKind::LlamaCpp, format!("http://{}", self.addr))
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
