//! `loadtest fleet`: thousands of simulated devices on real, impaired links against one real
//! gateway, each checking its own token stream (docs/src/benchmarks/fleet.md, "Fleet load
//! test").
//!
//! What runs: a gateway in its own process ([`gateway`]: the fixed-cost backend, the embedded
//! LLM or external engines; or an external gateway), one impairment relay per network profile
//! ([`relay`]) in this process, and N devices ([`device`]) that each run the real edge
//! stack — QUIC link with reconnect, the exchange's deadlines and fallbacks, the routed decode
//! loop — with the SLM replaced by a recorded trace ([`trace`]). Devices connect over the
//! ramp-up, then run sessions with think time for the duration; at the end every device is
//! still connected (the gateway holds them all at once) and the run stops by itself.
//!
//! What comes out: one JSON report ([`report`]) and a self-contained HTML page with the plots
//! ([`html`]); progress on stderr meanwhile. The correctness counts ([`check`]) must show zero
//! violations in every run.
//!
//! Against a gateway that verifies devices (`--client-ca`, the production mode) every device
//! presents a certificate of its own ([`identity`]): issued at start from the fleet CA
//! (`--fleet-ca-dir`), or issued beforehand (`--client-cert-dir`).

pub mod check;
pub mod device;
pub mod gateway;
pub mod group;
pub mod hist;
pub mod html;
pub mod identity;
pub mod metrics_scrape;
pub mod options;
pub mod report;
pub mod svg;
pub mod trace;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use common::exchange::DeadlinePolicy;
use edge_node::decode::DraftMode;

use self::device::{BlackoutSchedule, DeviceSpec, Env, Group};
use self::gateway::{GatewayArgs, GatewayProcess};
use self::group::{Checks, GroupStats};
use self::identity::DeviceCerts;
use self::metrics_scrape::{Sample, Targets};
use self::options::{Mix, DIRECT};
use self::trace::Trace;
use relay::{Profile, Profiles, Relay, RelayConfig, RelayStats};

/// Name of the local-only baseline group (devices that never escalate).
pub const LOCAL_ONLY: &str = "local-only";

/// Options of `loadtest fleet`.
#[derive(Debug, Clone, Args)]
pub struct FleetArgs {
    /// Simulated devices (one QUIC connection each).
    #[arg(long, env = "DUET_FLEET_DEVICES", default_value_t = 100)]
    pub devices: usize,
    /// Seconds over which devices connect (evenly spread).
    #[arg(long, env = "DUET_FLEET_RAMP_UP_S", default_value_t = 10.0)]
    pub ramp_up_s: f64,
    /// Seconds of load after the ramp-up; then every device stops (the run ends by itself).
    #[arg(long, env = "DUET_FLEET_DURATION_S", default_value_t = 60.0)]
    pub duration_s: f64,
    /// Most sessions per device.
    #[arg(long, env = "DUET_FLEET_SESSIONS", default_value_t = 20)]
    pub sessions: usize,
    /// Mean think time between a device's sessions, s (exponential); the first session starts
    /// at a random point of the first think period.
    #[arg(long, env = "DUET_FLEET_THINK_TIME_S", default_value_t = 5.0)]
    pub think_time_s: f64,
    /// Session kinds of the trace and their shares.
    #[arg(long, env = "DUET_FLEET_MIX", default_value = "cqa=60,code=20,chat=20")]
    pub mix: Mix,
    /// Share of tokens to escalate: the tau is taken from the trace's confidences to hit it.
    #[arg(long, env = "DUET_FLEET_ESCALATION_RATE", default_value_t = 0.1, conflicts_with = "tau")]
    pub escalation_rate: f64,
    /// Instead of --escalation-rate: the confidence router's threshold itself.
    #[arg(long, env = "DUET_FLEET_TAU")]
    pub tau: Option<f32>,
    /// Seeds device choices, think times and the relays' impairments.
    #[arg(long, env = "DUET_FLEET_SEED", default_value_t = 1)]
    pub seed: u64,
    /// Devices per network profile: NAME=SHARE,... (`direct`: no relay).
    #[arg(long, env = "DUET_FLEET_PROFILES", default_value = "4g")]
    pub profiles: Mix,
    /// More network profiles (TOML, read on top of the shipped ones).
    #[arg(long, env = "DUET_FLEET_PROFILES_FILE")]
    pub profiles_file: Option<PathBuf>,
    /// An external gateway (host:port) instead of starting one; `--backend` then says what
    /// stands behind it (fixed-cost: cloud tokens are checked).
    #[arg(long = "gateway", env = "DUET_FLEET_GATEWAY")]
    pub external_gateway: Option<String>,
    /// The external gateway's certificate (PEM).
    #[arg(long, env = "DUET_FLEET_CA_CERT", requires = "external_gateway")]
    pub ca_cert: Option<PathBuf>,
    /// The external gateway's HTTP side port (host:port), to scrape /metrics.
    #[arg(long, env = "DUET_FLEET_GATEWAY_METRICS", requires = "external_gateway")]
    pub gateway_metrics: Option<SocketAddr>,
    /// The external gateway's process id on this machine, for its CPU and RSS.
    #[arg(long, env = "DUET_FLEET_GATEWAY_PID", requires = "external_gateway")]
    pub gateway_pid: Option<u32>,
    /// The gateway the fleet starts (ignored with --gateway, except --backend and --trace).
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// Shortest wait for a cloud token, ms.
    #[arg(long, env = "DUET_FLEET_DEADLINE_MIN_MS", default_value_t = 50)]
    pub deadline_min_ms: u64,
    /// Longest wait for a cloud token, ms (the edge's default).
    #[arg(long, env = "DUET_FLEET_DEADLINE_MAX_MS", default_value_t = 3000)]
    pub deadline_max_ms: u64,
    /// Expected LLM time per context token sent, ms, until measured.
    #[arg(long, env = "DUET_FLEET_DEADLINE_PER_TOKEN_MS", default_value_t = 25)]
    pub deadline_per_token_ms: u64,
    /// Do not send the prompt ahead of the first hard token.
    #[arg(long, env = "DUET_FLEET_NO_PRESYNC")]
    pub no_presync: bool,
    /// Escalations carry drafts (`adaptive`: the trace's continuation, at the length the edge's
    /// draft rule chooses) or none (`off`, one token per escalation).
    #[arg(long, env = "DUET_FLEET_DRAFT", value_enum, default_value_t = DraftMode::Off)]
    pub draft: DraftMode,
    /// Seconds between a device's pings (the transport baseline).
    #[arg(long, env = "DUET_FLEET_PING_INTERVAL_S", default_value_t = 5.0)]
    pub ping_interval_s: f64,
    /// Local-only devices run beside the fleet (same sessions, no cloud): the tokens/s baseline.
    /// Default: 2 % of --devices, at least 2.
    #[arg(long, env = "DUET_FLEET_BASELINE_DEVICES")]
    pub baseline_devices: Option<usize>,
    /// Seconds a device waits for its first connection.
    #[arg(long, env = "DUET_FLEET_CONNECT_TIMEOUT_S", default_value_t = 15.0)]
    pub connect_timeout_s: f64,
    /// Seconds between progress lines on stderr (0: none).
    #[arg(long, env = "DUET_FLEET_PROGRESS_S", default_value_t = 5.0)]
    pub progress_s: f64,
    /// Write the JSON report here (default: stdout).
    #[arg(long, env = "DUET_FLEET_JSON")]
    pub json: Option<PathBuf>,
    /// Write the HTML report here.
    #[arg(long, env = "DUET_FLEET_HTML")]
    pub html: Option<PathBuf>,
    /// A name for the run, copied into the reports.
    #[arg(long, env = "DUET_FLEET_LABEL", default_value = "")]
    pub label: String,
    /// Device ids are PREFIX-N: fleets sharing gateways need distinct prefixes (a gateway keys
    /// sessions by device id, so two devices with one id would share sessions).
    #[arg(long, env = "DUET_FLEET_DEVICE_PREFIX", default_value = "fleet")]
    pub device_prefix: String,
    /// The fleet CA's directory (`cloud-gateway ca init-ca`): each device presents a
    /// certificate of its own, issued from it at start (mutual TLS, for a gateway with
    /// --client-ca). The fleet's own gateway then verifies them against its ca-cert.pem.
    #[arg(long, env = "DUET_FLEET_CA_DIR", conflicts_with = "client_cert_dir")]
    pub fleet_ca_dir: Option<PathBuf>,
    /// Certificates issued beforehand: DIR/<device id>/device-cert.pem and device-key.pem
    /// (`cloud-gateway ca issue --out DIR/<device id>`), one per device.
    #[arg(long, env = "DUET_FLEET_CLIENT_CERT_DIR")]
    pub client_cert_dir: Option<PathBuf>,
}

/// What the options resolve to, checked before anything starts.
pub struct Plan {
    /// The options.
    pub args: FleetArgs,
    /// The trace.
    pub trace: Trace,
    /// The profile of each group (None: direct), with its device count.
    pub groups: Vec<(String, Option<Profile>, usize)>,
    /// Local-only baseline devices.
    pub baseline_devices: usize,
    /// The router's threshold.
    pub tau: f32,
    /// Deadlines.
    pub policy: DeadlinePolicy,
    /// Each device's certificate, where devices present one.
    pub client_certs: Option<Arc<DeviceCerts>>,
}

/// Check the options and resolve them; every error names the option and what would be right.
pub fn plan(args: FleetArgs) -> anyhow::Result<Plan> {
    anyhow::ensure!(args.devices > 0, "--devices must be at least 1");
    anyhow::ensure!(args.duration_s > 0.0 && args.duration_s.is_finite(), "--duration-s must be > 0 (the run stops by itself after it)");
    anyhow::ensure!(args.ramp_up_s >= 0.0 && args.ramp_up_s.is_finite(), "--ramp-up-s must be >= 0");
    anyhow::ensure!(args.think_time_s >= 0.0 && args.think_time_s.is_finite(), "--think-time-s must be >= 0");
    anyhow::ensure!(args.sessions > 0, "--sessions must be at least 1");
    anyhow::ensure!((0.0..=1.0).contains(&args.escalation_rate), "--escalation-rate {} is outside [0, 1]", args.escalation_rate);
    if let Some(tau) = args.tau {
        anyhow::ensure!((0.0..=1.0).contains(&tau), "--tau {tau} is outside [0, 1]");
    }
    anyhow::ensure!(args.ping_interval_s > 0.0, "--ping-interval-s must be > 0");
    anyhow::ensure!(args.deadline_min_ms <= args.deadline_max_ms, "--deadline-min-ms ({}) is above --deadline-max-ms ({})", args.deadline_min_ms, args.deadline_max_ms);
    anyhow::ensure!(args.deadline_max_ms > 0, "--deadline-max-ms must be > 0");
    if args.external_gateway.is_some() {
        anyhow::ensure!(args.ca_cert.is_some(), "--gateway needs --ca-cert (the gateway's certificate, PEM)");
    }
    let trace = Trace::load(args.gateway.trace.as_deref())?;
    let kinds = trace.kinds();
    for name in args.mix.names() {
        anyhow::ensure!(kinds.iter().any(|k| k == name), "--mix: the trace has no `{name}` sessions (it has {})", kinds.join(", "));
    }
    let profiles = match &args.profiles_file {
        Some(path) => Profiles::load(path)?,
        None => Profiles::builtin(),
    };
    let mut groups = Vec::new();
    for (name, count) in args.profiles.split(args.devices) {
        let profile = if name == DIRECT {
            None
        } else {
            Some(profiles.get(&name).map_err(|e| anyhow::anyhow!("--profiles: {e} (or `{DIRECT}` for no relay)"))?.clone())
        };
        groups.push((name, profile, count));
    }
    let baseline_devices = args.baseline_devices.unwrap_or((args.devices / 50).max(2));
    let relayed: usize = groups.iter().filter(|g| g.1.is_some()).map(|g| g.2).sum();
    // Each device has a socket, each relayed device one more at its relay; plus some slack.
    let need = args.devices + relayed + 256;
    if let Some(limit) = open_files_limit() {
        anyhow::ensure!(
            need <= limit,
            "{} devices ({relayed} behind relays) need about {need} file descriptors but this process may open {limit}: raise it (`ulimit -n {}`) or run fewer devices",
            args.devices,
            need.next_power_of_two()
        );
    }
    let tau = args.tau.unwrap_or_else(|| trace.tau_for_rate(args.escalation_rate));
    let policy = DeadlinePolicy {
        min: Duration::from_millis(args.deadline_min_ms),
        max: Duration::from_millis(args.deadline_max_ms),
        per_token: Duration::from_millis(args.deadline_per_token_ms),
        ..DeadlinePolicy::default()
    };
    let client_certs = device_certs(&args)?.map(Arc::new);
    Ok(Plan { args, trace, groups, baseline_devices, tau, policy, client_certs })
}

/// The id of the fleet's device `index` (`PREFIX-N`).
pub fn device_id(prefix: &str, index: usize) -> String {
    format!("{prefix}-{index}")
}

/// The devices' certificates, as the options ask: issued now from the fleet CA, found in a
/// directory, or none.
fn device_certs(args: &FleetArgs) -> anyhow::Result<Option<DeviceCerts>> {
    let ids: Vec<String> = (0..args.devices).map(|i| device_id(&args.device_prefix, i)).collect();
    Ok(match (&args.fleet_ca_dir, &args.client_cert_dir) {
        (Some(ca), _) => Some(DeviceCerts::issue(ca, &ids, std::thread::available_parallelism().map_or(1, |n| n.get()))?),
        (None, Some(dir)) => Some(DeviceCerts::pre_issued(dir, &ids)?),
        (None, None) => None,
    })
}

/// This process's limit on open files (the soft limit), from /proc.
fn open_files_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Where the fleet's gateway is and how to watch it.
struct GatewayHandle {
    quic: SocketAddr,
    cert: PathBuf,
    targets: Targets,
    llm_id: String,
    _process: Option<GatewayProcess>,
}

async fn start_gateway(plan: &Plan, exe: &Path) -> anyhow::Result<GatewayHandle> {
    let args = &plan.args;
    if let Some(addr) = &args.external_gateway {
        let quic = tokio::net::lookup_host(addr.as_str()).await.with_context(|| format!("--gateway {addr}"))?.next().with_context(|| format!("--gateway {addr} resolves to nothing"))?;
        let cert = args.ca_cert.clone().context("--gateway needs --ca-cert")?;
        return Ok(GatewayHandle { quic, cert, targets: Targets { metrics: args.gateway_metrics, gateway_pid: args.gateway_pid }, llm_id: "external".into(), _process: None });
    }
    let wait = match args.gateway.backend {
        options::BackendSpec::FixedCost { .. } => Duration::from_secs(30),
        _ => Duration::from_secs(300),
    };
    // The fleet's own gateway verifies the devices against the CA they were issued from.
    let mut gateway_args = args.gateway.clone();
    if let (None, Some(ca)) = (&gateway_args.client_ca, &args.fleet_ca_dir) {
        gateway_args.client_ca = Some(ca.join(cloud_gateway::identity::ca::CA_CERT_FILE));
    }
    let argv = gateway::to_argv(&gateway_args);
    let exe = exe.to_path_buf();
    let process = tokio::task::spawn_blocking(move || GatewayProcess::start(&exe, &argv, wait)).await??;
    let info = process.info.clone();
    anyhow::ensure!(
        info.tokenizer_fingerprint == plan.trace.tokenizer_fingerprint,
        "the gateway's LLM ({}) has tokenizer {}, but the trace was recorded with {} ({}): its token ids would mean other words",
        info.llm_id,
        info.tokenizer_fingerprint,
        plan.trace.slm_id,
        plan.trace.tokenizer_fingerprint
    );
    Ok(GatewayHandle { quic: info.quic, cert: info.cert.clone(), targets: Targets { metrics: Some(info.http), gateway_pid: Some(info.pid) }, llm_id: info.llm_id.clone(), _process: Some(process) })
}

/// Everything a run measured, for the report.
pub struct RunResult {
    /// What was planned.
    pub plan: Plan,
    /// The devices' environment (groups, checks) after the run.
    pub env: Arc<Env>,
    /// Gateway and fleet samples over time.
    pub samples: Vec<Sample>,
    /// The gateway before any device connected, and when all had connected (before load).
    pub before: Sample,
    pub idle: Sample,
    /// Per relayed group: its relay's counters.
    pub relays: Vec<RelayStats>,
    /// The gateway's LLM id.
    pub llm_id: String,
    /// Wall time of the whole run, s.
    pub wall_s: f64,
}

/// Run the fleet as planned. `exe` is the `loadtest` binary (it starts the gateway).
pub async fn run_fleet(plan: Plan, exe: &Path) -> anyhow::Result<RunResult> {
    let args = plan.args.clone();
    let gw = start_gateway(&plan, exe).await?;
    let before = metrics_scrape::sample(&gw.targets, 0.0).await;
    // One relay per relayed group, seeded apart.
    let mut relays: Vec<Option<(Relay, Instant)>> = Vec::new();
    for (i, (_, profile, _)) in plan.groups.iter().enumerate() {
        relays.push(match profile {
            None => None,
            Some(p) => {
                let epoch = Instant::now();
                let config = RelayConfig { seed: args.seed.wrapping_mul(1000).wrapping_add(i as u64), ..RelayConfig::new("127.0.0.1:0".parse()?, gw.quic, p.clone()) };
                Some((Relay::start(config).await?, epoch))
            }
        });
    }
    let started = Instant::now();
    let ramp = Duration::from_secs_f64(args.ramp_up_s);
    let load_start = started + ramp + Duration::from_secs(1);
    let end = load_start + Duration::from_secs_f64(args.duration_s);
    let span_ms = (end - started).as_millis() as u64 + plan.policy.max.as_millis() as u64 + 5_000;
    let mut groups = Vec::new();
    for ((name, profile, _), relay) in plan.groups.iter().zip(&relays) {
        let blackouts = match (profile.as_ref().and_then(|p| p.up.blackout.or(p.down.blackout)), relay) {
            (Some(b), Some((_, epoch))) => Some(BlackoutSchedule {
                epoch: *epoch,
                first: Duration::from_secs_f64(b.first_s()),
                every: Duration::from_secs_f64(b.every_s),
                length: Duration::from_secs_f64(b.for_s),
            }),
            _ => None,
        };
        let target = Some(relay.as_ref().map_or(gw.quic, |r| r.0.local_addr()));
        groups.push(Group { stats: GroupStats::new(name.clone(), span_ms), target, blackouts });
    }
    if plan.baseline_devices > 0 {
        groups.push(Group { stats: GroupStats::new(LOCAL_ONLY, span_ms), target: None, blackouts: None });
    }
    let env = Arc::new(Env {
        trace: plan.trace.clone(),
        mix: args.mix.clone(),
        tau: plan.tau,
        policy: plan.policy,
        presync: !args.no_presync,
        draft: args.draft,
        check_vocab: args.gateway.backend.tokens_checkable().then_some(plan.trace.vocab_size),
        cert: gw.cert.clone(),
        started,
        load_start,
        end,
        sessions_per_device: args.sessions,
        think_mean: Duration::from_secs_f64(args.think_time_s),
        ping_every: Duration::from_secs_f64(args.ping_interval_s),
        connect_timeout: Duration::from_secs_f64(args.connect_timeout_s),
        device_prefix: args.device_prefix.clone(),
        client_certs: plan.client_certs.clone(),
        groups,
        checks: Checks::default(),
        live_sessions: AtomicI64::new(0),
    });
    // Devices, interleaved over the groups so that every stage of the ramp samples the mix.
    let fingerprint: Arc<str> = plan.trace.tokenizer_fingerprint.as_str().into();
    let order = args.profiles.interleave(args.devices);
    let names: Vec<String> = args.profiles.split(args.devices).into_iter().map(|s| s.0).collect();
    let mut tasks = Vec::with_capacity(args.devices + plan.baseline_devices);
    for (index, g) in order.iter().enumerate() {
        let group = plan.groups.iter().position(|p| p.0 == names[*g]).unwrap_or(0);
        let connect_at = started + ramp.mul_f64(index as f64 / args.devices as f64);
        let spec = DeviceSpec { index, group, connect_at, seed: args.seed.wrapping_mul(0x1_0000_0001).wrapping_add(index as u64) };
        tasks.push(tokio::spawn(device::run_device(env.clone(), spec, fingerprint.clone())));
    }
    for k in 0..plan.baseline_devices {
        let index = args.devices + k;
        let spec = DeviceSpec { index, group: plan.groups.len(), connect_at: started, seed: args.seed.wrapping_mul(0x1_0000_0001).wrapping_add(index as u64) };
        tasks.push(tokio::spawn(device::run_device(env.clone(), spec, fingerprint.clone())));
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let sampler = tokio::spawn(metrics_scrape::sample_until(gw.targets.clone(), started, Duration::from_secs(1), stop_rx.clone()));
    let progress = (args.progress_s > 0.0).then(|| tokio::spawn(progress_loop(env.clone(), gw.targets.clone(), Duration::from_secs_f64(args.progress_s), stop_rx)));
    tokio::time::sleep_until(load_start.into()).await;
    let idle = metrics_scrape::sample(&gw.targets, started.elapsed().as_secs_f64()).await;
    for t in tasks {
        if let Err(e) = t.await {
            tracing::error!("a device task failed: {e}");
        }
    }
    let _ = stop_tx.send(true);
    let samples = sampler.await.unwrap_or_default();
    if let Some(p) = progress {
        let _ = p.await;
    }
    let mut relay_stats = Vec::new();
    for (relay, _) in relays.into_iter().flatten() {
        relay_stats.push(relay.stats());
        relay.shutdown().await;
    }
    let wall_s = started.elapsed().as_secs_f64();
    Ok(RunResult { plan, env, samples, before, idle, relays: relay_stats, llm_id: gw.llm_id.clone(), wall_s })
}

/// A line on stderr every `every`: where the run is and what the fleet and the gateway do.
async fn progress_loop(env: Arc<Env>, targets: Targets, every: Duration, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    let mut last = (0u64, Instant::now(), 0.0f64);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let now = Instant::now();
        let s = metrics_scrape::sample(&targets, 0.0).await;
        let sum = |f: &dyn Fn(&GroupStats) -> u64| env.groups.iter().map(|g| f(&g.stats)).sum::<u64>();
        let escalated = sum(&|g| g.escalated.get());
        let cloud = sum(&|g| g.cloud.get());
        let fallbacks = sum(&|g| g.fallbacks());
        let busy = sum(&|g| g.fallback_busy.get());
        let timeouts = sum(&|g| g.fallback_timeout.get());
        let dt = now.duration_since(last.1).as_secs_f64().max(1e-3);
        let gw_cpu = s.gateway.map(|g| g.cpu_s).unwrap_or(0.0);
        let phase = if now < env.load_start {
            "ramp-up"
        } else if now < env.end {
            "load"
        } else {
            "draining"
        };
        eprintln!(
            "[fleet {:>5.0}s {phase}] connected {}/{} (gateway {}) | sessions {} live, {} done | escalations {escalated} ({:.0}/s): cloud {cloud}, fallback {fallbacks} (timeout {timeouts}, busy {busy}) | violations {} | gateway cpu {:.0}% rss {:.0} MiB",
            env.started.elapsed().as_secs_f64(),
            sum(&|g| g.connected.get()),
            sum(&|g| if g.name == LOCAL_ONLY { 0 } else { g.devices.get() }),
            s.connections,
            env.live_sessions.load(Ordering::Relaxed),
            sum(&|g| g.sessions.get()),
            (escalated - last.0) as f64 / dt,
            env.checks.violations.get(),
            (gw_cpu - last.2) / dt * 100.0,
            s.gateway.map(|g| g.rss_mib).unwrap_or(0.0),
        );
        last = (escalated, now, gw_cpu);
    }
}

/// `loadtest fleet`: run, print the JSON report (or write it), write the HTML; fails if any
/// device saw a violation.
pub fn run(args: FleetArgs) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locating the loadtest binary (it starts the gateway)")?;
    let (json_path, html_path) = (args.json.clone(), args.html.clone());
    let plan = plan(args)?;
    if let Some(certs) = &plan.client_certs {
        let s = &certs.summary;
        match (s.issue_ms, s.issue_ms_each) {
            (Some(all), Some(each)) => eprintln!("[fleet] {} device certificates issued from the fleet CA in {all:.0} ms ({each:.3} ms each)", s.certificates),
            _ => eprintln!("[fleet] {} device certificates from {}", s.certificates, plan.args.client_cert_dir.as_ref().map_or_else(String::new, |d| d.display().to_string())),
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = rt.block_on(run_fleet(plan, &exe))?;
    let report = report::build(&result);
    let text = serde_json::to_string_pretty(&report)?;
    match &json_path {
        Some(p) => std::fs::write(p, text + "\n").with_context(|| format!("writing {}", p.display()))?,
        None => println!("{text}"),
    }
    if let Some(p) = &html_path {
        std::fs::write(p, html::render(&result, &report)).with_context(|| format!("writing {}", p.display()))?;
        eprintln!("HTML report: {}", p.display());
    }
    eprintln!("{}", report.headline());
    anyhow::ensure!(report.correctness.violations == 0, "{} correctness violations (see the report's `correctness.samples`)", report.correctness.violations);
    Ok(())
}
