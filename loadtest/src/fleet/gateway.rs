//! The gateway a fleet run measures, in its own process.
//!
//! `loadtest gateway` starts a real gateway with the chosen backend and prints one JSON line
//! with its addresses; `loadtest fleet` starts it as a child ([`GatewayProcess`]). Its own
//! process, not the fleet's, so that its CPU time and RSS (read from `/proc/<pid>`) are the
//! gateway's alone and not those of the thousands of simulated devices beside it. It stops when
//! its standard input closes, so a fleet that dies never leaves one behind.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use cloud_gateway::batcher::backend::{Backend, EmbeddedBackend, EmbeddedOptions, ModelFacts};
use cloud_gateway::config::{BatcherConfig, DraftVerify, GatewayConfig, IdentityConfig, OverloadConfig, TransportConfig};
use cloud_gateway::engine::connect::{connect, expected_vocabulary, tokenizer_path};
use cloud_gateway::engine::pool::PoolConfig;
use cloud_gateway::Gateway;
use serde::{Deserialize, Serialize};

use super::options::BackendSpec;
use super::trace::Trace;
use crate::fixed_backend::FixedCostBackend;

/// Options of `loadtest gateway`.
#[derive(Debug, Clone, Args)]
pub struct GatewayArgs {
    /// What answers escalations: fixed-cost[:MS] (MS per batch), embedded[:MODEL] or
    /// engine=KIND=URL[,KIND=URL...].
    #[arg(long, env = "DUET_FLEET_BACKEND", default_value = "fixed-cost")]
    pub backend: BackendSpec,
    /// The recorded SLM trace the devices replay; the fixed-cost backend announces its tokenizer
    /// (default: the built-in trace of qwen2.5-coder-0.5b, `loadtest/traces/`).
    #[arg(long, env = "DUET_FLEET_TRACE")]
    pub trace: Option<PathBuf>,
    /// QUIC address.
    #[arg(long, env = "DUET_FLEET_GATEWAY_LISTEN", default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// HTTP side port (/metrics).
    #[arg(long, env = "DUET_FLEET_GATEWAY_HTTP", default_value = "127.0.0.1:0")]
    pub http_listen: SocketAddr,
    /// Where to write the self-signed certificate devices pin (default: a temporary directory).
    #[arg(long, env = "DUET_FLEET_GATEWAY_CERT_DIR")]
    pub cert_dir: Option<PathBuf>,
    /// Most escalations per backend call.
    #[arg(long, env = "DUET_FLEET_MAX_BATCH", default_value_t = BatcherConfig::default().max_batch)]
    pub max_batch: usize,
    /// Longest wait for a batch to fill, ms.
    #[arg(long, env = "DUET_FLEET_MAX_WAIT_MS", default_value_t = BatcherConfig::default().max_wait.as_millis() as u64)]
    pub max_wait_ms: u64,
    /// Most escalations queued or running; beyond it devices get `Busy`.
    #[arg(long, env = "DUET_FLEET_QUEUE_CAPACITY", default_value_t = BatcherConfig::default().queue_capacity)]
    pub queue_capacity: usize,
    /// Most connected devices.
    #[arg(long, env = "DUET_FLEET_MAX_CONNECTIONS", default_value_t = GatewayConfig::default().transport.max_connections)]
    pub max_connections: usize,
    /// Embedded LLM: ONNX Runtime threads (0 = all cores).
    #[arg(long, env = "DUET_FLEET_LLM_THREADS", default_value_t = 0)]
    pub llm_threads: usize,
    /// Verify devices (mutual TLS) against this fleet CA certificate, as a production gateway
    /// does with --client-ca (`loadtest fleet --fleet-ca-dir` sets it to the CA's ca-cert.pem).
    #[arg(long, env = "DUET_FLEET_GATEWAY_CLIENT_CA")]
    pub client_ca: Option<PathBuf>,
    /// How much of each draft the LLM checks (the gateway's `--draft-verify`).
    #[arg(long, env = "DUET_FLEET_DRAFT_VERIFY", value_enum, default_value_t = DraftVerify::Whole)]
    pub draft_verify: DraftVerify,
}

/// What a started gateway tells its parent (one JSON line on stdout).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GatewayInfo {
    /// QUIC address devices dial.
    pub quic: SocketAddr,
    /// HTTP side port.
    pub http: SocketAddr,
    /// The certificate devices pin.
    pub cert: PathBuf,
    /// Its process id.
    pub pid: u32,
    /// The LLM id it announces.
    pub llm_id: String,
    /// The tokenizer it announces.
    pub tokenizer_fingerprint: String,
}

impl GatewayArgs {
    /// How reports name the trace the devices replay.
    pub fn trace_name(&self) -> String {
        self.trace.as_deref().map_or_else(|| super::trace::BUILT_IN_TRACE_NAME.to_string(), |p| p.display().to_string())
    }
}

/// Start the backend `spec` (blocking: the embedded LLM loads its model).
async fn backend(args: &GatewayArgs) -> anyhow::Result<BackendChoice> {
    Ok(match &args.backend {
        BackendSpec::FixedCost { cost_ms } => {
            let trace = Trace::load(args.trace.as_deref())?;
            let facts = ModelFacts { llm_id: String::new(), tokenizer_fingerprint: trace.tokenizer_fingerprint, vocab_size: trace.vocab_size, max_context: 32_768 };
            BackendChoice::Batcher(Box::new(FixedCostBackend::with_facts(Duration::from_millis(*cost_ms), facts)))
        }
        BackendSpec::Embedded { model } => {
            let options = EmbeddedOptions { model: model.clone(), threads: args.llm_threads, ..EmbeddedOptions::default() };
            BackendChoice::Batcher(Box::new(tokio::task::spawn_blocking(move || EmbeddedBackend::load(&options)).await??))
        }
        BackendSpec::Engines(engines) => {
            let tokenizer = tokenizer_path(model_runtime::model_files::DEFAULT_LLM);
            let config = PoolConfig { engines: engines.clone(), ..PoolConfig::default() };
            let (pool, facts) = connect(config, &expected_vocabulary(&tokenizer)?, Duration::from_secs(120)).await?;
            BackendChoice::Engines(Box::new(pool), facts)
        }
    })
}

enum BackendChoice {
    Batcher(Box<dyn Backend>),
    Engines(Box<cloud_gateway::engine::pool::EnginePool>, ModelFacts),
}

/// Run `loadtest gateway`: serve until standard input closes (or the process is killed).
pub fn run(args: GatewayArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let temp = tempfile::tempdir()?;
        let dir = args.cert_dir.clone().unwrap_or_else(|| temp.path().to_path_buf());
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let (base, cert) = crate::loopback::loopback_config(&dir)?;
        let transport = TransportConfig { listen: args.listen, http_listen: Some(args.http_listen), max_connections: args.max_connections, ..base.transport.clone() };
        let batcher = BatcherConfig { max_batch: args.max_batch, max_wait: Duration::from_millis(args.max_wait_ms), queue_capacity: args.queue_capacity };
        let identity = IdentityConfig { client_ca: args.client_ca.clone(), ..base.identity.clone() };
        let overload = OverloadConfig { draft_verify: args.draft_verify, ..base.overload };
        let config = GatewayConfig { transport, batcher, identity, overload, ..base };
        let (gw, facts) = match backend(&args).await? {
            BackendChoice::Batcher(b) => {
                let facts = b.facts();
                (Gateway::start(config, b).await?, facts)
            }
            BackendChoice::Engines(pool, facts) => (Gateway::start_with_engines(config, *pool, facts.clone()).await?, facts),
        };
        let info = GatewayInfo {
            quic: gw.local_addr()?,
            http: gw.http_addr.context("the gateway has no HTTP side port")?,
            cert,
            pid: std::process::id(),
            llm_id: facts.llm_id,
            tokenizer_fingerprint: facts.tokenizer_fingerprint,
        };
        println!("{}", serde_json::to_string(&info)?);
        // Until the parent closes our stdin (or dies).
        tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        })
        .await?;
        gw.shutdown().await;
        anyhow::Ok(())
    })
}

/// A `loadtest gateway` child process; killed when dropped.
pub struct GatewayProcess {
    child: Child,
    /// What it announced.
    pub info: GatewayInfo,
}

impl GatewayProcess {
    /// Start `exe gateway ARGS` and wait (up to `wait`) for its announcement.
    pub fn start(exe: &Path, args: &[String], wait: Duration) -> anyhow::Result<Self> {
        let mut child = Command::new(exe)
            .arg("gateway")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting the gateway {}", exe.display()))?;
        let stdout = child.stdout.take().context("the gateway's stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = tx.send(BufReader::new(stdout).read_line(&mut line).map(|_| line));
        });
        let mut process = Self { child, info: placeholder_info() };
        let line = match rx.recv_timeout(wait) {
            Ok(Ok(line)) if !line.trim().is_empty() => line,
            Ok(_) => anyhow::bail!("the gateway exited before it was ready (see its messages above)"),
            Err(_) => anyhow::bail!("the gateway was not ready within {wait:?}"),
        };
        process.info = serde_json::from_str(line.trim()).with_context(|| format!("reading the gateway's announcement `{}`", line.trim()))?;
        Ok(process)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

fn placeholder_info() -> GatewayInfo {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    GatewayInfo { quic: any, http: any, cert: PathBuf::new(), pid: 0, llm_id: String::new(), tokenizer_fingerprint: String::new() }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        // Closing stdin asks it to shut down; a kill makes sure.
        drop(self.child.stdin.take());
        for _ in 0..20 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The command-line arguments that start a gateway like `args` (for [`GatewayProcess::start`]).
pub fn to_argv(args: &GatewayArgs) -> Vec<String> {
    let mut v = vec![
        "--backend".into(),
        args.backend.to_string(),
        "--listen".into(),
        args.listen.to_string(),
        "--http-listen".into(),
        args.http_listen.to_string(),
        "--max-batch".into(),
        args.max_batch.to_string(),
        "--max-wait-ms".into(),
        args.max_wait_ms.to_string(),
        "--queue-capacity".into(),
        args.queue_capacity.to_string(),
        "--max-connections".into(),
        args.max_connections.to_string(),
        "--llm-threads".into(),
        args.llm_threads.to_string(),
        "--draft-verify".into(),
        clap::ValueEnum::to_possible_value(&args.draft_verify).map_or_else(String::new, |v| v.get_name().to_string()),
    ];
    if let Some(t) = &args.trace {
        v.extend(["--trace".into(), t.display().to_string()]);
    }
    if let Some(d) = &args.cert_dir {
        v.extend(["--cert-dir".into(), d.display().to_string()]);
    }
    if let Some(ca) = &args.client_ca {
        v.extend(["--client-ca".into(), ca.display().to_string()]);
    }
    v
}
