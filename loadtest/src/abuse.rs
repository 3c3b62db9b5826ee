//! `loadtest abuse`: hostile probe scenarios against a real `cloud-gateway` process on loopback
//! (the bounds they test: ARCHITECTURE.md, "Gateway"), and after each what a well-behaved
//! device sees and what the gateway holds.
//!
//! The gateway serves the tiny model behind a simulated cost (`--backend-delay-ms` per batch,
//! `--backend-token-delay-us` per token of prefill: by default about the 1.5B's on these 2
//! cores), so a long `Full` costs what it would cost the real LLM without loading it. It runs
//! in dev mode (shared-token identity: a device's id is what it claims); under mutual TLS
//! claimed ids are ignored, so the id-squatting scenario measures only the dev mode.
//!
//! Attackers connect from 127.0.0.1; the well-behaved "probe" device from 127.0.0.2 (loopback
//! answers for all of 127/8), so the per-address bound applies to the attacker alone, as it
//! would to a hostile host. Each scenario reports, after the abuse stops: the probe's
//! escalations served within their deadline (and their latency), the gateway's RSS against its
//! baseline, and Busy against expired counts.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use common::device_token::DeviceTokenKey;
use common::protocol::{decode_frame, encode_frame, ContextSync, ErrorCode, Frame, TokenIds, WireSampling, PROTOCOL_VERSION};
use model_runtime::model_files::ModelFiles;
use serde::Serialize;
use serde_json::json;

use common::stats::percentile;

mod bundle_flood;
mod engine_overload;
mod flood;

/// Options of `loadtest abuse`.
#[derive(Debug, Args)]
pub struct AbuseArgs {
    /// The `cloud-gateway` binary [default: the one next to this program].
    #[arg(long)]
    pub gateway_bin: Option<PathBuf>,
    /// Model the gateway serves (its answers do not matter; its tokenizer must be the devices').
    #[arg(long, default_value = "tiny-qwen2")]
    pub model: String,
    /// Simulated backend time per batch, ms (the 1.5B's decode step here: ~60 ms).
    #[arg(long, default_value_t = 60)]
    pub backend_delay_ms: u64,
    /// Simulated backend time per token of prefill, µs (the 1.5B's here: ~18 ms).
    #[arg(long, default_value_t = 18_000)]
    pub backend_token_delay_us: u64,
    /// How long the timed scenarios (overload, huge Full) run, seconds.
    #[arg(long, default_value_t = 15)]
    pub scenario_secs: u64,
    /// The well-behaved device's deadline per escalation, ms.
    #[arg(long, default_value_t = 1000)]
    pub probe_deadline_ms: u32,
    /// Only these scenarios (squat, claim: ids claimed without their per-device tokens,
    /// session-flood, unfinished-streams, idle-flood, huge-full, overload, bundle-flood: a
    /// signed bundle downloaded during the overload's flood, fair-flood: one device floods, 20
    /// behave; engine-overload: 3x what the --engine answers); default all
    /// but engine-overload (which needs an engine).
    #[arg(long, value_delimiter = ',')]
    pub scenarios: Vec<String>,
    /// fair-flood on the engine path: the well-behaved devices together offer this fraction of
    /// the engine's capacity, measured first in their shape (their pause between escalations
    /// follows from it, at least 0.5 s); without --engine they pause 0.5 s.
    #[arg(long, default_value_t = 0.5)]
    pub fair_behaved_load: f64,
    /// Engine worker the gateway relays to instead of serving the model itself, KIND=URL
    /// (repeatable), e.g. llamacpp=http://127.0.0.1:8090; --model is then the devices'
    /// tokenizer it is checked against.
    #[arg(long = "engine")]
    pub engines: Vec<String>,
    /// Extra flag for the gateway (repeatable), e.g. --gateway-arg=--max-sessions=100000.
    #[arg(long = "gateway-arg", allow_hyphen_values = true)]
    pub gateway_args: Vec<String>,
    /// The gateway's log filter (tracing's EnvFilter syntax), e.g.
    /// `warn,cloud_gateway::engine::pool=debug` for every engine admission decision.
    #[arg(long, default_value = "warn")]
    pub gateway_log: String,
    /// Append every line the gateway logs to this file (otherwise only its errors are shown).
    #[arg(long)]
    pub gateway_log_file: Option<PathBuf>,
    /// Write the JSON report here too.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Largest reply read.
const MAX_REPLY: usize = 1 << 16;
/// How long sessions idle before the gateway drops them (short, so a flood's memory comes
/// back within the run).
const SESSION_IDLE_SECS: u64 = 10;
/// Stream read timeout given to the gateway (its default is 10 s).
const STREAM_READ_TIMEOUT_MS: u64 = 3000;

/// A `cloud-gateway` child process.
struct GatewayProcess {
    child: Child,
    quic: SocketAddr,
    http: SocketAddr,
    cert: PathBuf,
}

impl GatewayProcess {
    fn start(args: &AbuseArgs, dir: &Path) -> anyhow::Result<Self> {
        Self::start_with(args, dir, &[])
    }

    /// Start one with `extra` flags besides what `args` gives.
    fn start_with(args: &AbuseArgs, dir: &Path, extra: &[String]) -> anyhow::Result<Self> {
        let bin = gateway_bin(args)?;
        let cert = dir.join("gateway-cert.pem");
        let mut cmd = Command::new(&bin);
        cmd.args(["--listen=127.0.0.1:0", "--http-listen=127.0.0.1:0", "--threads=1", "--max-context=4096"])
            .arg(format!("--log={}", args.gateway_log))
            .arg(format!("--write-cert={}", cert.display()))
            .arg(format!("--model={}", args.model))
            .arg(format!("--backend-delay-ms={}", args.backend_delay_ms))
            .arg(format!("--backend-token-delay-us={}", args.backend_token_delay_us))
            .arg(format!("--session-idle-secs={SESSION_IDLE_SECS}"))
            .arg(format!("--stream-read-timeout-ms={STREAM_READ_TIMEOUT_MS}"))
            .args(args.engines.iter().map(|e| format!("--engine={e}")))
            .args(&args.gateway_args)
            .args(extra)
            .env_remove("DUET_CONFIG")
            .env_remove("DUET_DEVICE_TOKEN_SECRET")
            .env_remove("DUET_AUTH_TOKEN")
            .env_remove("DUET_CLIENT_CA")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().with_context(|| format!("starting {}", bin.display()))?;
        let stderr = child.stderr.take().context("the gateway's stderr")?;
        let mut log = match &args.gateway_log_file {
            Some(path) => Some(std::fs::OpenOptions::new().create(true).append(true).open(path).with_context(|| format!("opening {}", path.display()))?),
            None => None,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(file) = &mut log {
                    let _ = writeln!(file, "{line}");
                }
                if !sent && line.contains("cloud-gateway ready on quic://") {
                    let _ = tx.send(line);
                    sent = true;
                } else if line.contains("ERROR") || line.contains("panicked") || line.starts_with("Error:") {
                    eprintln!("gateway: {line}");
                }
            }
        });
        let line = rx.recv_timeout(Duration::from_secs(120)).context("the gateway did not start within 120 s")?;
        let quic = line.split("quic://").nth(1).and_then(|r| r.split_whitespace().next()).context("the gateway's QUIC address")?.parse()?;
        let http = line.split("Some(").nth(1).and_then(|r| r.split(')').next()).context("the gateway's HTTP address")?.parse()?;
        Ok(Self { child, quic, http, cert })
    }

    fn rss_mb(&self) -> f64 {
        rss_kb(self.child.id()) as f64 / 1024.0
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `cloud-gateway` binary: `--gateway-bin`, or the one next to this program.
fn gateway_bin(args: &AbuseArgs) -> anyhow::Result<PathBuf> {
    match &args.gateway_bin {
        Some(b) => Ok(b.clone()),
        None => Ok(std::env::current_exe()?.parent().context("this program's directory")?.join("cloud-gateway")),
    }
}

/// VmRSS of `pid`, KiB (0 if unreadable).
fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// One metric's value (summed over its label sets) from the gateway's `/metrics`.
async fn metric(http: SocketAddr, name: &str) -> f64 {
    let (_, body) = http_get(http, "/metrics").await.unwrap_or((0, String::new()));
    body.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One labelled series of a counter from the gateway's `/metrics` (`reason="..."`).
async fn labelled(http: SocketAddr, name: &str, reason: &str) -> f64 {
    let (_, body) = http_get(http, "/metrics").await.unwrap_or((0, String::new()));
    let needle = format!("reason=\"{reason}\"");
    body.lines().filter(|l| l.starts_with(name) && l.contains(&needle)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// How many times the gateway's circuit breakers to its engine workers opened so far.
async fn breaker_opened(http: SocketAddr) -> f64 {
    let (_, body) = http_get(http, "/metrics").await.unwrap_or((0, String::new()));
    body.lines()
        .filter(|l| l.starts_with("duet_gateway_engine_breaker_transitions_total{") && l.contains("to=\"open\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr)).await??;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).await?;
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out)).await??;
    let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((status, out.split("\r\n\r\n").nth(1).unwrap_or("").to_string()))
}

/// QUIC clients from one local address.
#[derive(Clone)]
struct Client {
    endpoint: quinn::Endpoint,
    gateway: SocketAddr,
    fingerprint: Arc<str>,
    /// Issues each id's per-device token (the gateway's secret for a device, another one for
    /// an attacker forging tokens); none sends no token.
    tokens: Option<Arc<DeviceTokenKey>>,
    /// The SLM it says it runs in `Hello` (what the gateway offers bundles for).
    slm_id: Arc<str>,
}

impl Client {
    fn new(local: &str, gateway: SocketAddr, ca: &Path, fingerprint: &str) -> anyhow::Result<Self> {
        let config = edge_node::link::tls::client_config(Some(ca), false, Duration::from_secs(5))?;
        let mut endpoint = quinn::Endpoint::client(local.parse()?)?;
        endpoint.set_default_client_config(config);
        Ok(Self { endpoint, gateway, fingerprint: Arc::from(fingerprint), tokens: None, slm_id: Arc::from("abuse") })
    }

    /// This client, presenting the per-device tokens `key` issues.
    fn with_tokens(self, key: DeviceTokenKey) -> Self {
        Self { tokens: Some(Arc::new(key)), ..self }
    }

    /// This client, saying in `Hello` that it runs `slm_id`.
    fn with_slm(self, slm_id: &str) -> Self {
        Self { slm_id: Arc::from(slm_id), ..self }
    }

    /// A connection past `Hello` as `device`; `Err` if refused (at the QUIC level or `Reject`).
    async fn connect(&self, device: &str) -> anyhow::Result<quinn::Connection> {
        let conn = tokio::time::timeout(Duration::from_secs(10), self.endpoint.connect(self.gateway, "localhost")?).await??;
        let auth = self.tokens.as_ref().map(|k| k.issue(device)).unwrap_or_default();
        let hello = Frame::Hello { protocol_version: PROTOCOL_VERSION, device_id: device.into(), auth, tokenizer_fingerprint: self.fingerprint.to_string(), slm_id: self.slm_id.to_string() };
        match request(&conn, &hello, Duration::from_secs(10)).await? {
            Frame::Welcome { .. } => Ok(conn),
            other => anyhow::bail!("refused: {other:?}"),
        }
    }
}

/// Send `frame` on a new stream and read the one-frame reply.
async fn request(conn: &quinn::Connection, frame: &Frame, wait: Duration) -> anyhow::Result<Frame> {
    let (mut send, mut recv) = conn.open_bi().await?;
    send.write_all(&encode_frame(frame, MAX_REPLY)?).await?;
    send.finish()?;
    let bytes = tokio::time::timeout(wait, recv.read_to_end(MAX_REPLY)).await??;
    Ok(decode_frame(&bytes, MAX_REPLY)?)
}

fn escalate(session_id: u64, seq: u32, context: ContextSync, deadline_ms: u32) -> Frame {
    Frame::Escalate { session_id, seq, context, sampling: WireSampling::default(), deadline_ms }
}

fn full(n: usize, salt: u32) -> ContextSync {
    ContextSync::Full { tokens: TokenIds((0..n as u32).map(|i| 100 + (i * 7 + salt) % 5000).collect()) }
}

/// What came back for one escalation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
enum Answer {
    Token,
    Busy,
    Expired,
    OtherError,
    Silence,
}

fn classify(reply: &anyhow::Result<Frame>) -> Answer {
    match reply {
        Ok(Frame::Token { .. }) => Answer::Token,
        Ok(Frame::Busy { .. }) => Answer::Busy,
        Ok(Frame::Error { code: ErrorCode::DeadlineExpired, .. }) => Answer::Expired,
        Ok(_) => Answer::OtherError,
        Err(_) => Answer::Silence,
    }
}

/// Counts of answers.
#[derive(Debug, Default, Clone, Serialize)]
struct Tally {
    token: usize,
    busy: usize,
    expired: usize,
    other_error: usize,
    no_answer: usize,
    /// Answers that came after the escalation's deadline (+ 50 ms), any kind.
    late: usize,
    /// The latest of them, ms after the deadline.
    latest_after_deadline_ms: f64,
}

impl Tally {
    fn add(&mut self, a: Answer, took: Duration, deadline_ms: u32) {
        match a {
            Answer::Token => self.token += 1,
            Answer::Busy => self.busy += 1,
            Answer::Expired => self.expired += 1,
            Answer::OtherError => self.other_error += 1,
            Answer::Silence => self.no_answer += 1,
        }
        let after = took.as_secs_f64() * 1e3 - f64::from(deadline_ms);
        if a != Answer::Silence && after > 50.0 {
            self.late += 1;
        }
        if a != Answer::Silence {
            self.latest_after_deadline_ms = self.latest_after_deadline_ms.max(after);
        }
    }
}

/// The well-behaved device: a fresh session, a 32-token `Full`, then 5-token deltas, one at a
/// time, each with the probe deadline, 50 ms apart (after `Busy`, its retry hint apart, at most
/// 2 s, as the edge does).
#[derive(Debug, Serialize)]
struct Probe {
    escalations: usize,
    served_within_deadline: usize,
    p50_ms: f64,
    max_ms: f64,
    answers: Tally,
    connect_error: Option<String>,
}

async fn probe(client: &Client, session_id: u64, n: usize, deadline_ms: u32) -> Probe {
    let mut lat = Vec::new();
    let mut answers = Tally::default();
    let mut served = 0;
    let conn = match client.connect("probe-device").await {
        Ok(c) => c,
        Err(e) => return Probe { escalations: 0, served_within_deadline: 0, p50_ms: 0.0, max_ms: 0.0, answers, connect_error: Some(e.to_string()) },
    };
    let mut held: Option<usize> = None;
    let mut len = 32usize;
    for seq in 0..n as u32 {
        let context = match held {
            Some(h) => {
                len += 5;
                ContextSync::Delta { base_len: h as u32, tokens: TokenIds((h as u32..len as u32).map(|i| 200 + i % 1000).collect()) }
            }
            None => ContextSync::Full { tokens: TokenIds((0..len as u32).map(|i| 200 + i % 1000).collect()) },
        };
        let t = Instant::now();
        let reply = request(&conn, &escalate(session_id, seq, context, deadline_ms), Duration::from_millis(u64::from(deadline_ms) + 30_000)).await;
        let took = t.elapsed();
        let a = classify(&reply);
        answers.add(a, took, deadline_ms);
        held = match a {
            Answer::Token | Answer::Busy => Some(len),
            _ => None,
        };
        lat.push(took.as_secs_f64() * 1e3);
        if a == Answer::Token && took <= Duration::from_millis(u64::from(deadline_ms)) {
            served += 1;
        }
        // As a device does: after Busy, its next escalation waits the hint (at most 2 s).
        let pause = match reply {
            Ok(Frame::Busy { retry_after_ms, .. }) => Duration::from_millis(u64::from(retry_after_ms).clamp(50, 2000)),
            _ => Duration::from_millis(50),
        };
        tokio::time::sleep(pause).await;
    }
    conn.close(0u32.into(), b"done");
    let max = lat.iter().copied().fold(0.0, f64::max);
    Probe { escalations: n, served_within_deadline: served, p50_ms: percentile(&mut lat, 0.5), max_ms: max, answers, connect_error: None }
}

/// What every scenario reports besides its own figures.
#[derive(Debug, Serialize)]
struct After {
    rss_baseline_mb: f64,
    rss_peak_mb: f64,
    rss_after_mb: f64,
    /// Seconds from the end of the abuse until RSS was back within 20 % (or 30 MB) of the
    /// baseline, if it was within the wait.
    rss_recovered_after_s: Option<f64>,
    probe_during: Option<Probe>,
    probe_after: Probe,
    ready_after: bool,
}

struct Run {
    gw: GatewayProcess,
    attacker: Client,
    device: Client,
    args: AbuseArgs,
    baseline_mb: f64,
    next_session: AtomicUsize,
}

impl Run {
    fn session(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed) as u64 + 1
    }

    async fn probe(&self) -> Probe {
        probe(&self.device, self.session(), 10, self.args.probe_deadline_ms).await
    }

    /// Wait (up to `wait`) for RSS to come back near the baseline and the gateway to be ready,
    /// then probe.
    async fn after(&self, peak_mb: f64, probe_during: Option<Probe>, wait: Duration) -> After {
        let t = Instant::now();
        let near = |mb: f64| mb <= (self.baseline_mb * 1.2).max(self.baseline_mb + 30.0);
        let mut recovered = None;
        loop {
            let mb = self.gw.rss_mb();
            let ready = http_get(self.gw.http, "/readyz").await.map(|(s, _)| s == 200).unwrap_or(false);
            if near(mb) && recovered.is_none() {
                recovered = Some(t.elapsed().as_secs_f64());
            }
            if (recovered.is_some() && ready) || t.elapsed() > wait {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let probe_after = self.probe().await;
        let ready_after = http_get(self.gw.http, "/readyz").await.map(|(s, _)| s == 200).unwrap_or(false);
        After { rss_baseline_mb: self.baseline_mb, rss_peak_mb: peak_mb.max(self.gw.rss_mb()), rss_after_mb: self.gw.rss_mb(), rss_recovered_after_s: recovered, probe_during, probe_after, ready_after }
    }
}

/// Sample the gateway's RSS every 100 ms until `stop`; returns the peak, MB.
fn watch_rss(pid: u32) -> (Arc<std::sync::atomic::AtomicBool>, tokio::task::JoinHandle<f64>) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = stop.clone();
    let task = tokio::spawn(async move {
        let mut peak = 0u64;
        while !s.load(Ordering::Relaxed) {
            peak = peak.max(rss_kb(pid));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        peak as f64 / 1024.0
    });
    (stop, task)
}

async fn peak_of(watch: (Arc<std::sync::atomic::AtomicBool>, tokio::task::JoinHandle<f64>)) -> f64 {
    watch.0.store(true, Ordering::Relaxed);
    watch.1.await.unwrap_or(0.0)
}

/// Run `loadtest abuse`.
pub fn run(args: AbuseArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(run_async(args))
}

async fn run_async(args: AbuseArgs) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let fingerprint = ModelFiles::locate(&args.model)?.manifest.tokenizer_fingerprint;
    let gw = GatewayProcess::start(&args, dir.path())?;
    let attacker = Client::new("127.0.0.1:0", gw.quic, &gw.cert, &fingerprint)?;
    let device = Client::new("127.0.0.2:0", gw.quic, &gw.cert, &fingerprint)?;
    let out = args.out.clone();
    let wanted = |name: &str| match args.scenarios.is_empty() {
        true => name != "engine-overload",
        false => args.scenarios.iter().any(|s| s == name),
    };
    let selected: Vec<&str> = ["squat", "claim", "session-flood", "unfinished-streams", "idle-flood", "huge-full", "overload", "bundle-flood", "fair-flood", "engine-overload"].into_iter().filter(|s| wanted(s)).collect();
    let mut run = Run { baseline_mb: 0.0, gw, attacker, device, args, next_session: AtomicUsize::new(0) };
    let warm = run.probe().await;
    run.baseline_mb = run.gw.rss_mb();
    eprintln!("baseline: RSS {:.0} MB; probe {}/{} within {} ms (p50 {:.0} ms)", run.baseline_mb, warm.served_within_deadline, warm.escalations, run.args.probe_deadline_ms, warm.p50_ms);
    let mut report = serde_json::Map::new();
    report.insert("gateway".into(), json!({
        "backend_delay_ms": run.args.backend_delay_ms, "backend_token_delay_us": run.args.backend_token_delay_us,
        "session_idle_secs": SESSION_IDLE_SECS, "stream_read_timeout_ms": STREAM_READ_TIMEOUT_MS, "extra_args": run.args.gateway_args, "engines": run.args.engines,
        "rss_baseline_mb": run.baseline_mb, "probe_baseline": warm,
    }));
    for name in selected {
        let t = Instant::now();
        eprintln!("scenario {name} ...");
        let r = match name {
            "squat" => squat(&run).await,
            "claim" => claim(&run, dir.path()).await,
            "session-flood" => session_flood(&run).await,
            "unfinished-streams" => unfinished_streams(&run).await,
            "idle-flood" => idle_flood(&run).await,
            "huge-full" => huge_full(&run).await,
            "bundle-flood" => bundle_flood::bundle_flood(&run, dir.path()).await,
            "fair-flood" => flood::fair_flood(&run).await,
            "engine-overload" => engine_overload::engine_overload(&run).await,
            _ => overload(&run).await,
        };
        let mut r = r.unwrap_or_else(|e| json!({ "error": format!("{e:#}") }));
        r["scenario_s"] = json!(t.elapsed().as_secs_f64());
        eprintln!("  {name}: {}", summary(&r));
        report.insert(name.into(), r);
    }
    let text = serde_json::to_string_pretty(&serde_json::Value::Object(report))?;
    println!("{text}");
    if let Some(out) = out {
        std::fs::write(&out, &text).with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}

/// One line of a scenario's result for the log.
fn summary(r: &serde_json::Value) -> String {
    let a = &r["after"];
    format!(
        "RSS {:.0} -> peak {:.0} -> {:.0} MB; probe after {}/{} within deadline (p50 {:.0} ms); ready {}",
        a["rss_baseline_mb"].as_f64().unwrap_or(0.0),
        a["rss_peak_mb"].as_f64().unwrap_or(0.0),
        a["rss_after_mb"].as_f64().unwrap_or(0.0),
        a["probe_after"]["served_within_deadline"],
        a["probe_after"]["escalations"],
        a["probe_after"]["p50_ms"].as_f64().unwrap_or(0.0),
        a["ready_after"]
    )
}

/// Dev mode: claim 2,000 device ids (among them the probe's) as fast as possible from one host.
async fn squat(run: &Run) -> anyhow::Result<serde_json::Value> {
    let watch = watch_rss(run.gw.child.id());
    let t = Instant::now();
    let ids: Vec<String> = std::iter::once("probe-device".to_string()).chain((0..1999).map(|i| format!("squatted-{i}"))).collect();
    let results = run_bounded(ids, 64, |id| {
        let c = run.attacker.clone();
        async move { c.connect(&id).await }
    })
    .await;
    let took = t.elapsed().as_secs_f64();
    let accepted = results.iter().filter(|r| r.is_ok()).count();
    let during = run.probe().await;
    let conns: Vec<_> = results.into_iter().filter_map(Result::ok).collect();
    for c in &conns {
        c.close(0u32.into(), b"done");
    }
    drop(conns);
    let peak = peak_of(watch).await;
    let after = run.after(peak, Some(during), Duration::from_secs(20)).await;
    Ok(json!({ "claims": 2000, "accepted": accepted, "refused": 2000 - accepted, "claims_per_s": 2000.0 / took, "after": after,
        "note": "dev mode: a claimed id is trusted; under mutual TLS the id is the certificate's and claims are ignored" }))
}

/// Per-device tokens: a gateway of its own with `--device-token-secret`; a host without the
/// secret claims 2,000 ids (the probe's among them) with forged tokens and with none, while the
/// probe device, holding its own token, connects and escalates.
async fn claim(run: &Run, dir: &Path) -> anyhow::Result<serde_json::Value> {
    let secret = dir.join("device-token.secret");
    if !secret.exists() {
        std::fs::write(&secret, DeviceTokenKey::generate_secret()?)?;
    }
    std::fs::create_dir_all(dir.join("claim"))?;
    let gw = GatewayProcess::start_with(&run.args, &dir.join("claim"), &[format!("--device-token-secret={}", secret.display())])?;
    let fingerprint = &run.device.fingerprint;
    let device = Client::new("127.0.0.2:0", gw.quic, &gw.cert, fingerprint)?.with_tokens(DeviceTokenKey::load(&secret)?);
    let forger = Client::new("127.0.0.1:0", gw.quic, &gw.cert, fingerprint)?.with_tokens(DeviceTokenKey::from_hex(&DeviceTokenKey::generate_secret()?)?);
    let bare = Client::new("127.0.0.1:0", gw.quic, &gw.cert, fingerprint)?;
    let device_conn = device.connect("probe-device").await;
    let t = Instant::now();
    let ids: Vec<(bool, String)> = std::iter::once("probe-device".to_string()).chain((0..999).map(|i| format!("claimed-{i}"))).flat_map(|id| [(true, id.clone()), (false, id)]).collect();
    let results = run_bounded(ids, 64, |(forged, id)| {
        let c = if forged { forger.clone() } else { bare.clone() };
        async move { c.connect(&id).await }
    })
    .await;
    let took = t.elapsed().as_secs_f64();
    let accepted = results.iter().filter(|r| r.is_ok()).count();
    // The device's connection from before the claims is still its own.
    let still_connected = device_conn.as_ref().is_ok_and(|c| c.close_reason().is_none());
    let during = probe(&device, 1, 10, run.args.probe_deadline_ms).await;
    if let Ok(c) = device_conn {
        c.close(0u32.into(), b"done");
    }
    Ok(json!({ "claims": results.len(), "accepted": accepted, "claims_per_s": results.len() as f64 / took,
        "device_connection_kept": still_connected, "after": { "probe_during": during },
        "note": "per-device tokens: a claim without the id's token (forged or none) is refused; the device holding its token is served" }))
}

/// Invented ids: 320 connections x 64 sessions each (20,480 > the 16,384 total), each session
/// opened by an 8-token `Full` with a long deadline that the attacker stops waiting for at once
/// (admitted, then cancelled: the cheapest way to have a session kept). Then a device never
/// seen before, from an address of its own, asks its first escalation.
async fn session_flood(run: &Run) -> anyhow::Result<serde_json::Value> {
    let watch = watch_rss(run.gw.child.id());
    let evicted_before = metric(run.gw.http, "duet_gateway_sessions_evicted_total").await;
    let t = Instant::now();
    let refused = Arc::new(AtomicUsize::new(0));
    let results = run_bounded((0..320).collect::<Vec<usize>>(), 32, |i| {
        let c = run.attacker.clone();
        let refused = refused.clone();
        async move {
            let conn = c.connect(&format!("invented-{i}")).await?;
            for s in 0..64u64 {
                let Ok((mut send, recv)) = conn.open_bi().await else { break };
                let _ = send.write_all(&encode_frame(&escalate(s + 1, 0, full(8, i as u32), 30_000), MAX_REPLY)?).await;
                let _ = send.finish();
                // Read the answer only if it comes at once (a refusal); else leave.
                let mut recv = recv;
                if let Ok(Ok(bytes)) = tokio::time::timeout(Duration::from_millis(2), recv.read_to_end(MAX_REPLY)).await {
                    if matches!(decode_frame(&bytes, MAX_REPLY), Ok(Frame::Error { code: ErrorCode::TooManySessions, .. })) {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            anyhow::Ok(conn)
        }
    })
    .await;
    let took = t.elapsed().as_secs_f64();
    let sessions_peak = metric(run.gw.http, "duet_gateway_sessions").await;
    // A device never seen before: its first escalation, and as a device does, again after each
    // `Busy` once its retry hint has passed, until a token comes (10 tries at most).
    let newcomer = Client::new("127.0.0.3:0", run.gw.quic, &run.gw.cert, &run.device.fingerprint)?;
    let first = match newcomer.connect("new-device").await {
        Ok(conn) => {
            let t = Instant::now();
            let mut answers = Vec::new();
            for seq in 0..10u32 {
                let reply = request(&conn, &escalate(1, seq, full(32, 9), run.args.probe_deadline_ms), Duration::from_secs(30)).await;
                answers.push(classify(&reply));
                match reply {
                    Ok(Frame::Busy { retry_after_ms, .. }) => tokio::time::sleep(Duration::from_millis(u64::from(retry_after_ms).clamp(50, 2000))).await,
                    _ => break,
                }
            }
            conn.close(0u32.into(), b"done");
            json!({ "answer": answers.first(), "answers": answers, "until_last_ms": t.elapsed().as_secs_f64() * 1e3 })
        }
        Err(e) => json!({ "connect_error": e.to_string() }),
    };
    let during = run.probe().await;
    let evicted = metric(run.gw.http, "duet_gateway_sessions_evicted_total").await - evicted_before;
    for c in results.iter().flatten() {
        c.close(0u32.into(), b"done");
    }
    drop(results);
    let peak = peak_of(watch).await;
    // The flood's sessions expire after the idle time.
    let after = run.after(peak, Some(during), Duration::from_secs(SESSION_IDLE_SECS + 15)).await;
    let sessions_after = metric(run.gw.http, "duet_gateway_sessions").await;
    Ok(json!({ "attempted_sessions": 320 * 64, "sessions_held_peak": sessions_peak, "refused_too_many_sessions": refused.load(Ordering::Relaxed),
        "evicted": evicted, "new_device_first_escalation": first, "flood_s": took, "sessions_after": sessions_after, "after": after }))
}

/// 30 connections x 127 streams, each holding 60 KB of a frame that never completes.
async fn unfinished_streams(run: &Run) -> anyhow::Result<serde_json::Value> {
    let watch = watch_rss(run.gw.child.id());
    let given_up_before = metric(run.gw.http, "duet_gateway_streams_given_up_total").await;
    let mut held = Vec::new();
    let mut conns = Vec::new();
    let mut opened = 0;
    for i in 0..30 {
        let Ok(conn) = run.attacker.connect(&format!("pinner-{i}")).await else { continue };
        for _ in 0..127 {
            let Ok(Ok((mut send, recv))) = tokio::time::timeout(Duration::from_millis(500), conn.open_bi()).await else { break };
            let mut partial = 65_000u32.to_le_bytes().to_vec();
            partial.extend(std::iter::repeat_n(0u8, 60_000));
            let _ = tokio::time::timeout(Duration::from_millis(500), send.write_all(&partial)).await;
            held.push((send, recv));
            opened += 1;
        }
        conns.push(conn);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let during = run.probe().await;
    let rss_while_held = run.gw.rss_mb();
    // The attacker keeps its connections open: the gateway's read timeout frees the streams.
    tokio::time::sleep(Duration::from_millis(STREAM_READ_TIMEOUT_MS + 1000)).await;
    let rss_after_timeout = run.gw.rss_mb();
    let given_up = metric(run.gw.http, "duet_gateway_streams_given_up_total").await - given_up_before;
    drop(held);
    for c in &conns {
        c.close(0u32.into(), b"done");
    }
    let peak = peak_of(watch).await;
    let after = run.after(peak, Some(during), Duration::from_secs(20)).await;
    Ok(json!({ "streams_opened": opened, "bytes_sent_mb": opened as f64 * 60_004.0 / 1e6, "rss_while_held_mb": rss_while_held,
        "rss_after_read_timeout_mb": rss_after_timeout, "streams_given_up": given_up, "after": after }))
}

/// 3,000 idle connections from one host, then a new device connects from another.
async fn idle_flood(run: &Run) -> anyhow::Result<serde_json::Value> {
    let watch = watch_rss(run.gw.child.id());
    let t = Instant::now();
    let results = run_bounded((0..3000).collect::<Vec<usize>>(), 64, |i| {
        let c = run.attacker.clone();
        async move { c.connect(&format!("idle-{i}")).await }
    })
    .await;
    let took = t.elapsed().as_secs_f64();
    let accepted = results.iter().filter(|r| r.is_ok()).count();
    let during = run.probe().await;
    for c in results.iter().flatten() {
        c.close(0u32.into(), b"done");
    }
    drop(results);
    let peak = peak_of(watch).await;
    let after = run.after(peak, Some(during), Duration::from_secs(20)).await;
    Ok(json!({ "attempted": 3000, "accepted": accepted, "refused": 3000 - accepted, "flood_s": took, "after": after }))
}

/// One device sends a 4,095-token `Full`, another a 1,000-token one (30 s deadlines), and both
/// leave 0.5 s later; the probe escalates meanwhile.
async fn huge_full(run: &Run) -> anyhow::Result<serde_json::Value> {
    let watch = watch_rss(run.gw.child.id());
    let cancelled_before = metric(run.gw.http, "duet_gateway_escalations_cancelled_total").await;
    let mut replies = serde_json::Map::new();
    let mut tasks = Vec::new();
    for (name, n) in [("full_4095", 4095usize), ("full_1000", 1000)] {
        let conn = run.attacker.connect(&format!("huge-{n}")).await?;
        let c2 = conn.clone();
        tasks.push((name, tokio::spawn(async move {
            let t = Instant::now();
            let r = tokio::time::timeout(Duration::from_millis(500), request(&c2, &escalate(1, 0, full(n, 3), 30_000), Duration::from_secs(31))).await;
            (r.map(|r| r.map(|f| format!("{f:?}").chars().take(80).collect::<String>()).unwrap_or_else(|e| format!("error: {e}"))).unwrap_or_else(|_| "no answer before leaving".into()), t.elapsed())
        }), conn));
    }
    for (name, task, conn) in tasks {
        let (reply, took) = task.await?;
        conn.close(0u32.into(), b"left");
        replies.insert(name.into(), json!({ "reply": reply, "after_ms": took.as_secs_f64() * 1e3 }));
    }
    let t = Instant::now();
    let during = probe(&run.device, run.session(), (run.args.scenario_secs as usize * 10).min(100), run.args.probe_deadline_ms).await;
    let probe_s = t.elapsed().as_secs_f64();
    let cancelled = metric(run.gw.http, "duet_gateway_escalations_cancelled_total").await - cancelled_before;
    let peak = peak_of(watch).await;
    let after = run.after(peak, Some(during), Duration::from_secs(20)).await;
    Ok(json!({ "attackers": replies, "probe_during_s": probe_s, "cancelled_at_gateway": cancelled, "after": after }))
}

/// 200 sessions (20 connections x 10), each a 16-token `Full` then 5-token deltas with 1 s
/// deadlines, 30 ms of think time after each answer (honouring `Busy`'s retry hint, as devices do), for the
/// scenario's time: about 20 times what the simulated backend can prefill.
async fn overload(run: &Run) -> anyhow::Result<serde_json::Value> {
    let watch = watch_rss(run.gw.child.id());
    let secs = run.args.scenario_secs;
    let stop_at = Instant::now() + Duration::from_secs(secs);
    let tally = Arc::new(std::sync::Mutex::new(Tally::default()));
    let (conns, tasks) = escalation_load(&run.attacker, stop_at, tally.clone()).await?;
    // Readiness while overloaded, and the probe.
    let mut not_ready_s = 0.0;
    let mut first_not_ready = None;
    let t0 = Instant::now();
    let during = tokio::spawn({
        let device = run.device.clone();
        let (session, deadline) = (run.session(), run.args.probe_deadline_ms);
        async move { probe(&device, session, 20, deadline).await }
    });
    while Instant::now() < stop_at {
        if let Ok((s, _)) = http_get(run.gw.http, "/readyz").await {
            if s != 200 {
                not_ready_s += 0.25;
                first_not_ready.get_or_insert(t0.elapsed().as_secs_f64());
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for t in tasks {
        let _ = t.await;
    }
    let stopped = Instant::now();
    let during = during.await?;
    for c in &conns {
        c.close(0u32.into(), b"done");
    }
    // How long until the gateway is ready and its queue empty again.
    let mut recovered_s = None;
    while stopped.elapsed() < Duration::from_secs(60) {
        let ready = http_get(run.gw.http, "/readyz").await.map(|(s, _)| s == 200).unwrap_or(false);
        if ready && metric(run.gw.http, "duet_gateway_queue_depth").await == 0.0 {
            recovered_s = Some(stopped.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let peak = peak_of(watch).await;
    let after = run.after(peak, Some(during), Duration::from_secs(20)).await;
    let tally = tally.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok(json!({ "sessions": 200, "secs": secs, "answers": tally, "first_not_ready_s": first_not_ready, "not_ready_s": not_ready_s,
        "ready_and_idle_after_stop_s": recovered_s, "after": after }))
}

/// The overload's load: 20 connections of the attacker's, 10 sessions each, escalating until
/// `stop_at` with 30 ms of think time (a 16-token `Full`, then 5-token deltas up to 3,000
/// tokens; after `Busy` the hint, at most 5 s), every answer added to `tally`. Returns the
/// connections (to close) and the sessions' tasks (to await).
async fn escalation_load(attacker: &Client, stop_at: Instant, tally: Arc<std::sync::Mutex<Tally>>) -> anyhow::Result<(Vec<quinn::Connection>, Vec<tokio::task::JoinHandle<()>>)> {
    let mut conns = Vec::new();
    for i in 0..20 {
        conns.push(attacker.connect(&format!("load-{i}")).await?);
    }
    let mut tasks = Vec::new();
    for (i, conn) in conns.iter().enumerate() {
        for s in 0..10u64 {
            let (conn, tally) = (conn.clone(), tally.clone());
            tasks.push(tokio::spawn(async move {
                let mut held: Option<usize> = None;
                let mut len = 16usize;
                let mut seq = 0u32;
                while Instant::now() < stop_at {
                    let context = match held {
                        Some(h) => {
                            len += 5;
                            ContextSync::Delta { base_len: h as u32, tokens: TokenIds((h as u32..len as u32).map(|t| 300 + (t + i as u32) % 900).collect()) }
                        }
                        None => ContextSync::Full { tokens: TokenIds((0..len as u32).map(|t| 300 + (t + i as u32) % 900).collect()) },
                    };
                    if len > 3000 {
                        len = 16;
                        held = None;
                        continue;
                    }
                    let t = Instant::now();
                    let reply = request(&conn, &escalate(s + 1, seq, context, 1000), Duration::from_secs(40)).await;
                    seq += 1;
                    let a = classify(&reply);
                    tally.lock().unwrap_or_else(|p| p.into_inner()).add(a, t.elapsed(), 1000);
                    // A held session grows before admission; a new one refused keeps nothing.
                    held = match a {
                        Answer::Token => Some(len),
                        Answer::Busy if held.is_some() => Some(len),
                        _ => None,
                    };
                    let pause = match reply {
                        Ok(Frame::Busy { retry_after_ms, .. }) => Duration::from_millis(u64::from(retry_after_ms).min(5000)),
                        _ => Duration::from_millis(30),
                    };
                    tokio::time::sleep(pause).await;
                }
            }));
        }
    }
    Ok((conns, tasks))
}

/// Run `f` over `items` on tasks, at most `concurrency` at once; results in order.
async fn run_bounded<T, R, F, Fut>(items: Vec<T>, concurrency: usize, f: F) -> Vec<R>
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = R> + Send + 'static,
    R: Send + 'static,
{
    let n = items.len();
    let mut pending = items.into_iter().enumerate();
    let mut running = tokio::task::JoinSet::new();
    let mut out: Vec<Option<R>> = (0..n).map(|_| None).collect();
    loop {
        while running.len() < concurrency.max(1) {
            let Some((i, item)) = pending.next() else { break };
            let fut = f(item);
            running.spawn(async move { (i, fut.await) });
        }
        match running.join_next().await {
            Some(Ok((i, r))) => out[i] = Some(r),
            Some(Err(_)) => {}
            None => break,
        }
    }
    out.into_iter().flatten().collect()
}
