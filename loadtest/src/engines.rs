//! The gateway in front of external engines: what it costs and what its routing buys
//! (docs/src/benchmarks/engines.md).
//!
//! Questions this answers, each against a baseline measured the same way:
//! - How much does the gateway add over calling the engine directly? `--direct` sends the same
//!   request sequence (whole context, next token) straight to the engine(s) with the gateway's
//!   own [`EngineClient`], at the same concurrency and with the same per-session worker choice.
//! - What does sticky routing buy over round-robin? Engines prefill only what their prefix cache
//!   lacks, and only the worker that saw a session's last escalation holds it.
//! - How do the engines compare with the embedded ONNX LLM (no `--engine`)?
//!
//! Simulated devices escalate over real QUIC on loopback (a few [`Link`]s, several sessions
//! each) to a gateway in this process, in closed loop: each session sends a `Full` of the
//! prompt, then after every answer appends the answer and a delta of text tokens and escalates
//! again (delta-synced by [`ContextTracker`], as a device does). Token ids are real English text
//! from the devices' tokenizer, so the engine does real work; every session reads the text from
//! another offset, so no two sessions share a prefix (a shared prefix would flatter
//! round-robin; the report's `max_shared_prefix_tokens` checks it). Deadlines are long (30 s by
//! default, the protocol's maximum) so that nothing should fall back: a `Busy` or an error here
//! is a finding, and the report counts and quotes them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use cloud_gateway::batcher::backend::{Backend, EmbeddedBackend, EmbeddedOptions};
use cloud_gateway::config::{BatcherConfig, GatewayConfig, SessionsConfig};
use cloud_gateway::engine::client::EngineClient;
use cloud_gateway::engine::connect::{connect, expected_vocabulary, tokenizer_path};
use cloud_gateway::engine::llamacpp::LlamaCppDialect;
use cloud_gateway::engine::pool::health::HealthConfig;
use cloud_gateway::engine::pool::pick::{rendezvous_order, PickPolicy, Routing};
use cloud_gateway::engine::pool::PoolConfig;
use cloud_gateway::engine::{EngineKind, EngineSpec, HttpCall, NextTokenRequest};
use cloud_gateway::Gateway;
use common::protocol::{ContextTracker, Frame, WireSampling};
use common::sampling::SamplingParams;
use edge_node::link::{Link, LinkConfig};
use model_runtime::model_files::DEFAULT_LLM;
use model_runtime::tokenizer::Tokenizer;
use serde::Serialize;

use common::stats::percentile;

/// Options of `loadtest engines`.
#[derive(Debug, Args)]
pub struct EnginesArgs {
    /// Engine worker, KIND=URL (repeatable); none = the embedded ONNX LLM in this process.
    #[arg(long = "engine")]
    pub engines: Vec<EngineSpec>,
    /// Concurrent sessions (each has one escalation in flight at a time).
    #[arg(long, default_value_t = 16)]
    pub sessions: usize,
    /// Escalations per session.
    #[arg(long, default_value_t = 8)]
    pub escalations: usize,
    /// Tokens of the first escalation (a `Full`).
    #[arg(long, default_value_t = 96)]
    pub prompt_tokens: usize,
    /// Text tokens appended between escalations (after the answer token).
    #[arg(long, default_value_t = 14)]
    pub delta: usize,
    /// Worker choice with several engines: sticky or round-robin.
    #[arg(long, default_value = "sticky")]
    pub routing: Routing,
    /// No gateway: send the same requests straight to the engine(s) (the baseline).
    #[arg(long)]
    pub direct: bool,
    /// Picks the text offsets of the sessions.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the JSON report here instead of stdout.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Sessions per simulated device (one QUIC connection each).
    #[arg(long, default_value_t = 8)]
    pub sessions_per_device: usize,
    /// Escalation deadline, ms (the gateway caps it at 30 000).
    #[arg(long, default_value_t = common::protocol::MAX_DEADLINE_MS)]
    pub deadline_ms: u32,
    /// Most requests in flight per engine worker (the gateway's `--engine-max-in-flight`).
    #[arg(long, default_value_t = PoolConfig::default().max_in_flight_per_worker)]
    pub max_in_flight: usize,
    /// Most attempts per escalation (the gateway's `--engine-max-attempts`); with more than one
    /// and several workers, an attempt gets only half the time left.
    #[arg(long, default_value_t = PoolConfig::default().max_attempts)]
    pub max_attempts: u32,
    /// Timeout of the gateway's health checks of its workers, ms (default: the gateway's).
    #[arg(long, default_value_t = PoolConfig::default().health.timeout.as_millis() as u64)]
    pub health_timeout_ms: u64,
    /// The devices' tokenizer: a prepared model id, a directory or a tokenizer.json.
    #[arg(long, default_value = DEFAULT_LLM)]
    pub tokenizer: String,
    /// Embedded LLM: model id or directory.
    #[arg(long, default_value = DEFAULT_LLM)]
    pub model: String,
    /// Embedded LLM: ONNX Runtime threads (0 = all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Embedded LLM: most escalations per batch.
    #[arg(long, default_value_t = BatcherConfig::default().max_batch)]
    pub max_batch: usize,
    /// Free-form name copied into the report (e.g. "2 workers, -np 8").
    #[arg(long, default_value = "")]
    pub label: String,
    /// Admission to engine workers, as the gateway's `--engine-admission`: `cost` refuses `Busy`
    /// when no worker's queue lets an escalation be answered in time; `off` sends it while a
    /// worker has room (the behaviour before admission by cost, for same-run comparisons).
    #[arg(long, default_value = "cost", value_parser = ["cost", "off"])]
    pub engine_admission: String,
}

/// A fixed English text the sessions read their tokens from (public-domain style prose written
/// for this benchmark): long enough that every session starts at another token.
const TEXT: &str = "The harbour town woke slowly in winter. Before dawn the fishing boats went out past the \
breakwater, their lamps swinging in the swell, and the lighthouse keeper climbed the hundred and twelve steps to \
trim the wick one last time before the sun made it useless. He had kept the light for thirty years and knew every \
sound the tower made: the groan of the iron door when the wind came from the north, the tick of the clockwork that \
turned the lens, the hiss of rain on the gallery glass. In the village below, the baker lit her ovens at four, and \
by six the smell of bread reached the quay where the first carts were waiting for the catch. Children walked to \
school along the sea wall, counting the gulls, arguing about whether the old wreck beyond the point had been a \
smuggler's schooner or a navy supply ship. Nobody really knew. The records had burned with the customs house in the \
great fire, along with the ledgers of every cargo landed in the town for a century. What remained were stories, and \
the stories changed with whoever told them. The schoolmaster, who had studied history in the city, said the ship was \
neither: it was a grain barge that had broken its tow in a storm and drifted onto the rocks with nobody aboard. He had \
found a letter in the parish archive that described it, written by a curate who had watched the barge go aground. \
The children did not like this version, because there was no treasure in it and no one was hanged. In spring the \
town changed. Painters arrived with their easels and set them up on the headland, trying to catch the colour of the \
water between the green of the shallows and the grey of the deep channel. The hotel opened its shutters, the ferry \
ran twice a day instead of twice a week, and the market square filled with stalls selling honey, wool, rope, and \
carved wooden boats. The keeper's daughter, who had left for the university years before, came back every April to \
help her father paint the tower. They worked from a cradle hung on ropes, a band of white and a band of red, and the \
whole town watched from the harbour to see whether they would finish before the weather turned. Usually they did. \
Once, a sudden squall caught them halfway, and they spent the night inside the lamp room, drinking tea from a flask \
and listening to the waves break against the rock, talking about the engineers who had built the tower, the ships it \
had saved, and the ones it had not.";

/// Runs the benchmark: one configuration, one JSON report.
pub fn run(args: EnginesArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.sessions > 0 && args.escalations > 0 && args.prompt_tokens > 0, "--sessions, --escalations and --prompt-tokens must be > 0");
    anyhow::ensure!(!args.direct || !args.engines.is_empty(), "--direct needs at least one --engine");
    let tokenizer_file = tokenizer_path(&args.tokenizer);
    let tokenizer = Tokenizer::load(&tokenizer_file, None).with_context(|| format!("loading the tokenizer {}", tokenizer_file.display()))?;
    let windows = session_windows(&tokenizer.encode(TEXT)?, args.sessions, args.prompt_tokens + args.delta * (args.escalations - 1), args.seed)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let report = rt.block_on(measure(&args, &windows, &tokenizer_file))?;
    eprintln!(
        "{}: {} sessions, {:.2} escalations/s, p50 {:.0} ms (first {:.0}, later {:.0}), busy {}, errors {}, cache share {}",
        report.mode,
        report.sessions,
        report.escalations_per_s,
        report.latency_ms.all.p50,
        report.latency_ms.first.p50,
        report.latency_ms.later.p50,
        report.busy,
        report.errors,
        report.engine_cache.as_ref().or(report.reply_cache.as_ref()).map_or("-".into(), |c| format!("{:.2}", c.share)),
    );
    let text = serde_json::to_string_pretty(&report)?;
    match &args.json {
        Some(path) => std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?,
        None => println!("{text}"),
    }
    Ok(())
}

/// One session's tokens: `len` tokens of `ids` (read cyclically) from a per-session offset.
/// Offsets are spread evenly over the text (and rotated by `seed`), so sessions start at
/// distinct tokens; refuses more sessions than the text has tokens.
fn session_windows(ids: &[u32], sessions: usize, len: usize, seed: u64) -> anyhow::Result<Vec<Vec<u32>>> {
    let n = ids.len();
    anyhow::ensure!(sessions <= n, "the benchmark text has {n} tokens: at most {n} sessions");
    let rotate = (seed.wrapping_mul(7919) % n as u64) as usize;
    Ok((0..sessions).map(|s| (0..len).map(|i| ids[(rotate + s * n / sessions + i) % n]).collect()).collect())
}

/// The longest prefix any two sessions' full token sequences share.
fn max_shared_prefix(windows: &[Vec<u32>]) -> usize {
    let mut best = 0;
    for (i, a) in windows.iter().enumerate() {
        for b in &windows[i + 1..] {
            best = best.max(a.iter().zip(b).take_while(|(x, y)| x == y).count());
        }
    }
    best
}

/// Percentiles of a set of latencies.
#[derive(Debug, Default, Serialize)]
struct Latency {
    n: usize,
    p50: f64,
    p99: f64,
    max: f64,
}

impl Latency {
    fn of(mut samples: Vec<f64>) -> Self {
        let max = samples.iter().copied().fold(0.0, f64::max);
        Self { n: samples.len(), p50: percentile(&mut samples, 0.5), p99: percentile(&mut samples, 0.99), max }
    }
}

#[derive(Debug, Default, Serialize)]
struct Latencies {
    /// Every answered escalation.
    all: Latency,
    /// The first (`Full`) escalation of each session.
    first: Latency,
    /// The later (delta) escalations.
    later: Latency,
}

/// Prompt tokens and how many came from the prefix cache.
#[derive(Debug, Serialize)]
struct CacheFigures {
    source: &'static str,
    prompt_tokens: u64,
    cached_tokens: u64,
    share: f64,
}

impl CacheFigures {
    fn new(source: &'static str, prompt_tokens: u64, cached_tokens: u64) -> Self {
        Self { source, prompt_tokens, cached_tokens, share: cached_tokens as f64 / prompt_tokens.max(1) as f64 }
    }
}

#[derive(Debug, Serialize)]
struct Report {
    mode: &'static str,
    label: String,
    engines: Vec<String>,
    routing: String,
    /// `cost` or `off` (the gateway's `--engine-admission`).
    engine_admission: String,
    sessions: usize,
    devices: usize,
    escalations_per_session: usize,
    prompt_tokens: usize,
    delta: usize,
    deadline_ms: u32,
    /// The gateway's most attempts per escalation.
    max_attempts: u32,
    /// The gateway's health-check timeout of its workers, ms.
    health_timeout_ms: u64,
    seed: u64,
    max_shared_prefix_tokens: usize,
    /// Escalations answered with a token.
    answered: usize,
    busy: usize,
    errors: usize,
    /// A few error messages, as received.
    error_samples: Vec<String>,
    wall_s: f64,
    /// Answered escalations per second of wall time (first escalation to last answer).
    escalations_per_s: f64,
    latency_ms: Latencies,
    /// From each engine answer (`timings.cache_n` / `tokens_evaluated` for llama-server): the
    /// gateway's `duet_gateway_engine_{cached,prompt}_tokens_total`, or the direct client's sum.
    reply_cache: Option<CacheFigures>,
    /// From llama-server's own `/metrics` before and after the run (needs `--metrics`).
    engine_cache: Option<CacheFigures>,
    /// What the engines did, from their `/metrics`.
    engine_work: Option<EngineWork>,
    /// The gateway's engine attempts by outcome (`duet_gateway_engine_requests_total`).
    gateway_engine_attempts: BTreeMap<String, u64>,
    /// Successful engine requests per worker: how sessions spread.
    worker_requests_ok: BTreeMap<String, u64>,
    /// Gateway runs with engines and no failed attempt: what the gateway added per escalation,
    /// measured in the same run (immune to how fast the machine happened to be).
    gateway_added: Option<GatewayAdded>,
    /// The machine during the run.
    host_cpu: Option<HostCpu>,
}

/// What the whole machine did during the run (`/proc/stat`): a busy machine or a hypervisor
/// taking cycles (steal) moves every figure.
#[derive(Debug, Serialize)]
struct HostCpu {
    /// Share of all cores' time not idle.
    busy: f64,
    /// Share taken by the hypervisor for other guests.
    steal: f64,
}

/// Time the gateway added to answered escalations, beyond its engine requests.
#[derive(Debug, Serialize)]
struct GatewayAdded {
    /// Mean escalation round trip seen by the devices, ms.
    escalation_ms_mean: f64,
    /// Mean successful engine request, ms (`duet_gateway_engine_latency_seconds` sum / count).
    engine_request_ms_mean: f64,
    /// The difference: QUIC both ways, the session store, the pool, the HTTP client.
    added_ms_mean: f64,
}

/// How the engines spent the run (llama-server's `/metrics`, after minus before).
#[derive(Debug, Serialize)]
struct EngineWork {
    /// `llama_decode` calls: fewer for the same tokens means larger batches.
    decode_calls: u64,
    /// Prompt tokens computed (not reused from the cache).
    prompt_tokens_computed: u64,
    /// Time spent on prompts, summed over requests (overlapping requests each count).
    prompt_seconds: f64,
}

/// What one session saw.
#[derive(Debug, Default)]
struct SessionLog {
    first_ms: Vec<f64>,
    later_ms: Vec<f64>,
    busy: usize,
    errors: usize,
    error_samples: Vec<String>,
    prompt_tokens: u64,
    cached_tokens: u64,
    /// Direct mode: answered requests per worker index.
    per_worker: BTreeMap<usize, u64>,
}

impl SessionLog {
    fn error(&mut self, message: String) {
        self.errors += 1;
        if self.error_samples.len() < 3 {
            self.error_samples.push(message);
        }
    }
}

/// Token a session appends when it got no answer (a device would take its SLM's token).
const FALLBACK_TOKEN: u32 = 13;

/// The request plan of one session: prompt, then answer + delta before each later escalation.
struct Plan {
    window: Vec<u32>,
    prompt: usize,
    delta: usize,
    escalations: usize,
}

impl Plan {
    /// The context of escalation `k` given the context of escalation `k - 1` and its answer.
    fn advance(&self, context: &mut Vec<u32>, k: usize, answer: u32) {
        context.push(answer);
        let start = self.prompt + (k - 1) * self.delta;
        context.extend_from_slice(&self.window[start..start + self.delta]);
    }
}

async fn measure(args: &EnginesArgs, windows: &[Vec<u32>], tokenizer_file: &std::path::Path) -> anyhow::Result<Report> {
    let setup = Setup::new(args, windows);
    let started = if args.direct { start_direct(args, &setup, tokenizer_file).await? } else { start_gateway(args, &setup, tokenizer_file).await? };
    let mut logs = Vec::new();
    for t in started.tasks {
        logs.push(t.await?);
    }
    let wall_s = started.at.elapsed().as_secs_f64();
    let host_cpu = host_cpu(started.host_before, host_jiffies());
    let engine_after = engine_metrics(&args.engines).await;
    let mut tally = Tally::of(logs, &args.engines);
    let all: Vec<f64> = tally.first.iter().chain(&tally.later).copied().collect();
    let answered = all.len();
    let gateway = match started.gateway {
        Some(gateway) => gateway.finish(args, answered, all.iter().sum(), &mut tally.per_worker).await,
        None => GatewayFigures {
            reply_cache: Some(CacheFigures::new("engine replies, summed by the direct client", tally.prompt, tally.cached)),
            attempts: BTreeMap::new(),
            added: None,
        },
    };
    let (engine_cache, engine_work) = engine_work(started.engine_before, engine_after);
    Ok(Report {
        mode: if args.direct {
            "direct"
        } else if args.engines.is_empty() {
            "embedded"
        } else {
            "gateway"
        },
        label: args.label.clone(),
        engines: args.engines.iter().map(ToString::to_string).collect(),
        routing: args.routing.to_string(),
        engine_admission: args.engine_admission.clone(),
        sessions: args.sessions,
        devices: if args.direct { 0 } else { setup.devices },
        escalations_per_session: args.escalations,
        prompt_tokens: args.prompt_tokens,
        delta: args.delta,
        deadline_ms: args.deadline_ms,
        max_attempts: args.max_attempts,
        health_timeout_ms: args.health_timeout_ms,
        seed: args.seed,
        max_shared_prefix_tokens: max_shared_prefix(windows),
        answered,
        busy: tally.busy,
        errors: tally.errors,
        error_samples: tally.samples,
        wall_s,
        escalations_per_s: answered as f64 / wall_s,
        latency_ms: Latencies { all: Latency::of(all), first: Latency::of(tally.first), later: Latency::of(tally.later) },
        reply_cache: gateway.reply_cache,
        engine_cache,
        engine_work,
        gateway_engine_attempts: gateway.attempts,
        worker_requests_ok: tally.per_worker,
        gateway_added: gateway.added,
        host_cpu,
    })
}

/// What both modes share: who the sessions are and what they send.
struct Setup {
    deadline: Duration,
    per_device: usize,
    devices: usize,
    /// (device id, session id) of each session. Session `i` is session `i % per_device + 1` of
    /// device `i / per_device`, in both modes: the sticky worker of a session is the same with
    /// and without the gateway.
    keys: Vec<(String, u64)>,
    plans: Vec<Arc<Plan>>,
}

impl Setup {
    fn new(args: &EnginesArgs, windows: &[Vec<u32>]) -> Self {
        let per_device = args.sessions_per_device.max(1);
        Self {
            deadline: Duration::from_millis(u64::from(args.deadline_ms)),
            per_device,
            devices: args.sessions.div_ceil(per_device),
            keys: (0..args.sessions).map(|i| (format!("bench-{}", i / per_device), (i % per_device) as u64 + 1)).collect(),
            plans: windows.iter().map(|w| Arc::new(Plan { window: w.clone(), prompt: args.prompt_tokens, delta: args.delta, escalations: args.escalations })).collect(),
        }
    }
}

/// The engine pool the options describe (the gateway's, or the direct baseline's clients).
fn pool_config(args: &EnginesArgs) -> PoolConfig {
    PoolConfig {
        engines: args.engines.clone(),
        max_in_flight_per_worker: args.max_in_flight.max(1),
        max_attempts: args.max_attempts.max(1),
        pick: PickPolicy { routing: args.routing, ..PickPolicy::default() },
        health: HealthConfig { timeout: Duration::from_millis(args.health_timeout_ms.max(1)), ..HealthConfig::default() },
        admit_by_cost: args.engine_admission != "off",
        ..PoolConfig::default()
    }
}

/// The sessions under way, and the counters read just before they started.
struct Started {
    tasks: Vec<tokio::task::JoinHandle<SessionLog>>,
    at: Instant,
    engine_before: Option<EngineCounters>,
    host_before: Option<(u64, u64, u64)>,
    /// Gateway mode: the gateway the sessions go through.
    gateway: Option<RunningGateway>,
}

/// Direct mode: the gateway's own start-up (dialect, checks against the tokenizer, one warm-up
/// request per worker), without the gateway; its clients are the ones the pool would use.
async fn start_direct(args: &EnginesArgs, setup: &Setup, tokenizer_file: &std::path::Path) -> anyhow::Result<Started> {
    let (pool, _) = connect(pool_config(args), &expected_vocabulary(tokenizer_file)?, Duration::from_secs(120)).await?;
    // The pool serves from its first verified worker; this comparison needs every one.
    anyhow::ensure!(pool.wait_for_workers(args.engines.len(), Duration::from_secs(120)).await, "not every engine passed its start-up check");
    let clients: Arc<Vec<EngineClient>> = Arc::new(pool.workers().iter().map(|w| w.client().clone()).collect());
    let urls: Vec<&str> = args.engines.iter().map(|e| e.url.as_str()).collect();
    let rr = Arc::new(AtomicU64::new(0));
    let engine_before = engine_metrics(&args.engines).await;
    let host_before = host_jiffies();
    let at = Instant::now();
    let mut tasks = Vec::new();
    for ((device, session_id), plan) in setup.keys.iter().zip(&setup.plans) {
        let home = rendezvous_order(&session_hash_key(device, *session_id), &urls)[0];
        tasks.push(tokio::spawn(direct_session(clients.clone(), plan.clone(), args.routing, home, rr.clone(), setup.deadline)));
    }
    Ok(Started { tasks, at, engine_before, host_before, gateway: None })
}

/// Gateway mode: a gateway in this process, one link per simulated device, a task per session.
async fn start_gateway(args: &EnginesArgs, setup: &Setup, tokenizer_file: &std::path::Path) -> anyhow::Result<Started> {
    let gateway = RunningGateway::start(args, setup, tokenizer_file).await?;
    let engine_before = engine_metrics(&args.engines).await;
    let host_before = host_jiffies();
    let at = Instant::now();
    let mut tasks = Vec::new();
    for (i, ((_, session_id), plan)) in setup.keys.iter().zip(&setup.plans).enumerate() {
        tasks.push(tokio::spawn(gateway_session(gateway.links[i / setup.per_device].clone(), *session_id, plan.clone(), setup.deadline)));
    }
    Ok(Started { tasks, at, engine_before, host_before, gateway: Some(gateway) })
}

/// The gateway under test, its devices' links and its metrics before the run.
struct RunningGateway {
    gateway: Gateway,
    links: Vec<Arc<Link>>,
    /// Holds the loopback certificate for as long as the gateway runs.
    dir: tempfile::TempDir,
    metrics_before: String,
}

/// What the gateway's own counters say about the run.
struct GatewayFigures {
    reply_cache: Option<CacheFigures>,
    /// Engine attempts by outcome.
    attempts: BTreeMap<String, u64>,
    added: Option<GatewayAdded>,
}

impl RunningGateway {
    /// Starts the gateway (embedded LLM, or the engine pool once every worker passed its check)
    /// and connects every device.
    async fn start(args: &EnginesArgs, setup: &Setup, tokenizer_file: &std::path::Path) -> anyhow::Result<Self> {
        let prometheus = cloud_gateway::http::prometheus();
        let dir = tempfile::tempdir()?;
        let (base, cert) = crate::loopback::loopback_config(dir.path())?;
        let config = GatewayConfig {
            sessions: SessionsConfig { max_per_device: setup.per_device.max(64), ..SessionsConfig::default() },
            batcher: BatcherConfig { max_batch: args.max_batch.max(1), queue_capacity: args.sessions.max(256), ..BatcherConfig::default() },
            ..base
        };
        let (gateway, fingerprint) = if args.engines.is_empty() {
            let options = EmbeddedOptions {
                model: args.model.clone(),
                threads: args.threads,
                // At least 512: the backend sizes its caches with a floor of 256 tokens and panics below.
                max_context: (args.prompt_tokens + args.escalations * (args.delta + 1) + 64).next_power_of_two().max(512),
                max_cached_sessions: args.sessions,
            };
            let backend = tokio::task::spawn_blocking(move || EmbeddedBackend::load(&options)).await??;
            let fingerprint = backend.facts().tokenizer_fingerprint;
            (Gateway::start(config, Box::new(backend)).await?, fingerprint)
        } else {
            let (pool, facts) = connect(pool_config(args), &expected_vocabulary(tokenizer_file)?, Duration::from_secs(120)).await?;
            anyhow::ensure!(pool.wait_for_workers(args.engines.len(), Duration::from_secs(120)).await, "not every engine passed its start-up check");
            let fingerprint = facts.tokenizer_fingerprint.clone();
            (Gateway::start_with_engines(config, pool, facts).await?, fingerprint)
        };
        let addr = gateway.local_addr()?;
        let mut links = Vec::new();
        for d in 0..setup.devices {
            let link = Link::start(LinkConfig { slm_id: "loadtest".into(), ..LinkConfig::new(addr.to_string(), Some(cert.clone()), format!("bench-{d}"), fingerprint.as_str()) })?;
            anyhow::ensure!(link.wait_up(Duration::from_secs(10)).await.is_some(), "device {d} could not connect");
            links.push(Arc::new(link));
        }
        let metrics_before = prometheus.map(|p| p.render()).unwrap_or_default();
        Ok(Self { gateway, links, dir, metrics_before })
    }

    /// Reads the gateway's counters after the run (its successful requests per worker go into
    /// `per_worker`), then shuts it down. `answered` escalations took `device_ms_sum` in all.
    async fn finish(self, args: &EnginesArgs, answered: usize, device_ms_sum: f64, per_worker: &mut BTreeMap<String, u64>) -> GatewayFigures {
        let Self { gateway, links, dir, metrics_before: before_text } = self;
        let mut attempts = BTreeMap::new();
        let mut added = None;
        let after = cloud_gateway::http::prometheus().map(|p| p.render()).unwrap_or_default();
        let before = counter_by_label(&before_text, "duet_gateway_engine_requests_total", "outcome", None);
        for (outcome, n) in counter_by_label(&after, "duet_gateway_engine_requests_total", "outcome", None) {
            let n = (n - before.get(&outcome).copied().unwrap_or(0.0)).round() as u64;
            if n > 0 {
                attempts.insert(outcome, n);
            }
        }
        let ok_before = counter_by_label(&before_text, "duet_gateway_engine_requests_total", "worker", Some("outcome=\"ok\""));
        for (worker, n) in counter_by_label(&after, "duet_gateway_engine_requests_total", "worker", Some("outcome=\"ok\"")) {
            per_worker.insert(worker.clone(), (n - ok_before.get(&worker).copied().unwrap_or(0.0)).round() as u64);
        }
        let delta_f = |after: &str, name: &str| counter_sum(after, name) - counter_sum(&before_text, name);
        let delta = |name: &str| delta_f(&after, name).round().max(0.0) as u64;
        let (engine_s, engine_n) = (delta_f(&after, "duet_gateway_engine_latency_seconds_sum"), delta_f(&after, "duet_gateway_engine_latency_seconds_count"));
        if !args.engines.is_empty() && answered > 0 && attempts.keys().all(|k| k == "ok") && engine_n > 0.0 {
            let escalation = device_ms_sum / answered as f64;
            let engine = engine_s * 1e3 / engine_n;
            added = Some(GatewayAdded { escalation_ms_mean: escalation, engine_request_ms_mean: engine, added_ms_mean: escalation - engine });
        }
        let reply_cache = (!args.engines.is_empty()).then(|| CacheFigures::new("gateway duet_gateway_engine_*_tokens_total", delta("duet_gateway_engine_prompt_tokens_total"), delta("duet_gateway_engine_cached_tokens_total")));
        drop(links);
        gateway.shutdown().await;
        drop(dir);
        GatewayFigures { reply_cache, attempts, added }
    }
}

/// Every session's log added up.
struct Tally {
    first: Vec<f64>,
    later: Vec<f64>,
    busy: usize,
    errors: usize,
    prompt: u64,
    cached: u64,
    /// Successful requests per worker URL.
    per_worker: BTreeMap<String, u64>,
    /// The first few error messages.
    samples: Vec<String>,
}

impl Tally {
    fn of(logs: Vec<SessionLog>, engines: &[EngineSpec]) -> Self {
        let mut tally = Self { first: Vec::new(), later: Vec::new(), busy: 0, errors: 0, prompt: 0, cached: 0, per_worker: BTreeMap::new(), samples: Vec::new() };
        for log in logs {
            tally.first.extend(log.first_ms);
            tally.later.extend(log.later_ms);
            tally.busy += log.busy;
            tally.errors += log.errors;
            tally.prompt += log.prompt_tokens;
            tally.cached += log.cached_tokens;
            for (worker, n) in log.per_worker {
                if let Some(spec) = engines.get(worker) {
                    *tally.per_worker.entry(spec.url.clone()).or_insert(0) += n;
                }
            }
            tally.samples.extend(log.error_samples.into_iter().take(3usize.saturating_sub(tally.samples.len())));
        }
        tally
    }
}

/// The machine's load between two [`host_jiffies`] readings.
fn host_cpu(before: Option<(u64, u64, u64)>, after: Option<(u64, u64, u64)>) -> Option<HostCpu> {
    match (before, after) {
        (Some(b), Some(a)) if a.0 > b.0 => {
            let all = (a.0 - b.0) as f64;
            Some(HostCpu { busy: 1.0 - (a.1 - b.1) as f64 / all, steal: (a.2 - b.2) as f64 / all })
        }
        _ => None,
    }
}

/// The engines' own cache figures and work between two readings of their counters.
fn engine_work(before: Option<EngineCounters>, after: Option<EngineCounters>) -> (Option<CacheFigures>, Option<EngineWork>) {
    match (before, after) {
        (Some(b), Some(a)) => {
            let (processed, reused) = ((a.processed - b.processed).round() as u64, (a.cached - b.cached).round() as u64);
            let decodes = EngineWork { decode_calls: (a.decodes - b.decodes).round() as u64, prompt_tokens_computed: processed, prompt_seconds: a.prompt_seconds - b.prompt_seconds };
            (Some(CacheFigures::new("llama-server /metrics llamacpp:prompt_tokens_{,cached_}total", processed + reused, reused)), Some(decodes))
        }
        _ => (None, None),
    }
}

/// One session through the gateway: delta-synced escalations over its device's link.
async fn gateway_session(link: Arc<Link>, session_id: u64, plan: Arc<Plan>, deadline: Duration) -> SessionLog {
    let mut log = SessionLog::default();
    let mut tracker = ContextTracker::new();
    let mut context = plan.window[..plan.prompt].to_vec();
    for k in 0..plan.escalations {
        let sync = tracker.sync_for(&context);
        let seq = sync.seq;
        let frame = Frame::Escalate { session_id, seq, context: sync.context, sampling: WireSampling::default(), deadline_ms: deadline.as_millis().min(u128::from(u32::MAX)) as u32 };
        let t = Instant::now();
        // A little past the deadline, so the gateway's own "deadline passed" answer arrives.
        let answer = match link.request(&frame, t + deadline + Duration::from_secs(5)).await {
            Ok((Frame::Token { token_id, .. }, _)) => {
                tracker.acknowledge(seq);
                let ms = t.elapsed().as_secs_f64() * 1e3;
                if k == 0 { &mut log.first_ms } else { &mut log.later_ms }.push(ms);
                token_id
            }
            Ok((Frame::Busy { .. }, _)) => {
                tracker.acknowledge(seq);
                log.busy += 1;
                FALLBACK_TOKEN
            }
            Ok((Frame::ContextMissing { held_len, .. }, _)) => {
                tracker.context_missing(seq, held_len);
                log.error(format!("ContextMissing (held {held_len})"));
                FALLBACK_TOKEN
            }
            Ok((Frame::Error { code, message, .. }, _)) => {
                log.error(format!("{code:?}: {message}"));
                FALLBACK_TOKEN
            }
            Ok((other, _)) => {
                log.error(format!("unexpected reply {}", other.kind()));
                FALLBACK_TOKEN
            }
            Err(e) => {
                log.error(format!("link: {e}"));
                FALLBACK_TOKEN
            }
        };
        if k + 1 < plan.escalations {
            plan.advance(&mut context, k + 1, answer);
        }
    }
    log
}

/// One session straight to the engine(s): the same requests, the same worker choice.
async fn direct_session(clients: Arc<Vec<EngineClient>>, plan: Arc<Plan>, routing: Routing, home: usize, rr: Arc<AtomicU64>, deadline: Duration) -> SessionLog {
    let mut log = SessionLog::default();
    let mut context = plan.window[..plan.prompt].to_vec();
    let sampling = SamplingParams::default();
    for k in 0..plan.escalations {
        let worker = match routing {
            Routing::Sticky => home,
            Routing::RoundRobin => (rr.fetch_add(1, Ordering::Relaxed) % clients.len() as u64) as usize,
        };
        let request = NextTokenRequest { context: &context, sampling: &sampling, seed: None, max_new_tokens: 1, top_logprobs: 0, slot: None };
        let t = Instant::now();
        let answer = match clients[worker].next_token(&request, deadline).await {
            Ok(reply) => {
                let ms = t.elapsed().as_secs_f64() * 1e3;
                if k == 0 { &mut log.first_ms } else { &mut log.later_ms }.push(ms);
                log.prompt_tokens += u64::from(reply.prompt_tokens.unwrap_or(0));
                log.cached_tokens += u64::from(reply.cached_tokens.unwrap_or(0));
                *log.per_worker.entry(worker).or_insert(0) += 1;
                reply.tokens.first().map_or(FALLBACK_TOKEN, |t| t.id)
            }
            Err(e) => {
                log.error(e.to_string());
                FALLBACK_TOKEN
            }
        };
        if k + 1 < plan.escalations {
            plan.advance(&mut context, k + 1, answer);
        }
    }
    log
}

/// The bytes the gateway's pool hashes a session by (its `session_hash_key`): device id, a
/// zero byte, the session id little-endian.
fn session_hash_key(device: &str, session_id: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(device.len() + 9);
    key.extend_from_slice(device.as_bytes());
    key.push(0);
    key.extend_from_slice(&session_id.to_le_bytes());
    key
}

/// llama-server's own counters, summed over the workers.
#[derive(Debug, Clone, Copy, Default)]
struct EngineCounters {
    /// `llamacpp:prompt_tokens_total`: prompt tokens computed (not from the cache).
    processed: f64,
    /// `llamacpp:prompt_tokens_cached_total`: prompt tokens reused from the prefix cache.
    cached: f64,
    /// `llamacpp:n_decode_total`: `llama_decode` calls (how finely the work was batched).
    decodes: f64,
    /// `llamacpp:prompt_seconds_total`: time spent on prompts, summed over requests.
    prompt_seconds: f64,
}

/// [`EngineCounters`] of every worker, or `None` unless every worker is a llama-server that
/// answers `/metrics` (started with `--metrics`).
async fn engine_metrics(engines: &[EngineSpec]) -> Option<EngineCounters> {
    if engines.is_empty() || engines.iter().any(|e| e.kind != EngineKind::LlamaCpp) {
        return None;
    }
    let mut sum = EngineCounters::default();
    for spec in engines {
        let client = EngineClient::new(spec, Arc::new(LlamaCppDialect)).ok()?;
        let body = client.call(&HttpCall::get("/metrics"), Duration::from_secs(10)).await.ok()?;
        let text = String::from_utf8_lossy(&body);
        sum.processed += counter_sum(&text, "llamacpp:prompt_tokens_total");
        sum.cached += counter_sum(&text, "llamacpp:prompt_tokens_cached_total");
        sum.decodes += counter_sum(&text, "llamacpp:n_decode_total");
        sum.prompt_seconds += counter_sum(&text, "llamacpp:prompt_seconds_total");
    }
    Some(sum)
}

/// Jiffies of the whole machine from `/proc/stat`: (all, idle + iowait, steal); `None` where
/// it cannot be read (not Linux).
fn host_jiffies() -> Option<(u64, u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat.lines().next()?.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    let get = |i: usize| fields.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    Some(((0..8).map(get).sum(), get(3) + get(4), get(7)))
}

/// Sum of every sample of metric `name` in Prometheus text (all label sets).
fn counter_sum(text: &str, name: &str) -> f64 {
    samples(text, name).map(|(_, v)| v).sum()
}

/// Samples of metric `name` summed by the value of `label`, only those whose labels contain
/// `only` (e.g. `outcome="ok"`) if given.
fn counter_by_label(text: &str, name: &str, label: &str, only: Option<&str>) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let pattern = format!("{label}=\"");
    for (labels, v) in samples(text, name).filter(|(labels, _)| only.is_none_or(|o| labels.contains(o))) {
        let value = labels.split_once(&pattern).and_then(|(_, rest)| rest.split_once('"')).map_or("", |(v, _)| v);
        *out.entry(value.to_string()).or_insert(0.0) += v;
    }
    out
}

/// (labels, value) of each sample line of metric `name`.
fn samples<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    text.lines().filter(|l| !l.starts_with('#')).filter_map(move |line| {
        let rest = line.strip_prefix(name)?;
        let (labels, value) = if let Some(labelled) = rest.strip_prefix('{') {
            let (labels, value) = labelled.split_once('}')?;
            (labels, value)
        } else if rest.starts_with(' ') {
            ("", rest)
        } else {
            return None; // another metric whose name starts with `name`
        };
        Some((labels, value.split_whitespace().next()?.parse::<f64>().ok()?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_read_the_text_from_distinct_offsets_and_share_no_prefix() {
        let ids: Vec<u32> = (0..100).collect();
        let w = session_windows(&ids, 10, 30, 0).unwrap();
        assert_eq!(w.len(), 10);
        assert!(w.iter().all(|s| s.len() == 30));
        assert_eq!(w[1][0], 10);
        assert_eq!(w[9][29], (90 + 29) % 100);
        assert_eq!(max_shared_prefix(&w), 0);
        assert!(session_windows(&ids, 101, 30, 0).is_err());
    }

    #[test]
    fn prometheus_samples_are_summed_by_name_and_label() {
        let text = "# HELP x\nduet_a_total{worker=\"u1\",outcome=\"ok\"} 3\nduet_a_total{worker=\"u2\",outcome=\"ok\"} 4\nduet_a_total{worker=\"u2\",outcome=\"timeout\"} 1\nduet_a_total_more 9\nllamacpp:prompt_tokens_total 12\n";
        assert_eq!(counter_sum(text, "duet_a_total"), 8.0);
        assert_eq!(counter_sum(text, "llamacpp:prompt_tokens_total"), 12.0);
        let by = counter_by_label(text, "duet_a_total", "outcome", None);
        assert_eq!((by["ok"], by["timeout"]), (7.0, 1.0));
        let ok = counter_by_label(text, "duet_a_total", "worker", Some("outcome=\"ok\""));
        assert_eq!((ok["u1"], ok["u2"]), (3.0, 4.0));
    }

    #[test]
    fn the_session_key_matches_the_pools_rendezvous_input() {
        assert_eq!(session_hash_key("d", 1), vec![b'd', 0, 1, 0, 0, 0, 0, 0, 0, 0]);
    }
}
