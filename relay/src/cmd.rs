//! `loadtest relay`: the impairment relay on its own, in front of any gateway, so that a person
//! can put a real `edge-node generate --gateway` behind a named network profile; `--list`
//! shows the profiles, `--bench` measures the relay's own cost.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;

use super::bench::{self, BenchOptions};
use super::{Profiles, Relay, RelayConfig, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CLIENTS};

/// Options of `loadtest relay`.
#[derive(Debug, Args)]
pub struct RelayArgs {
    /// Network profile (`--list` shows them).
    #[arg(long, env = "DUET_RELAY_PROFILE", default_value = "lan")]
    pub profile: String,
    /// Where devices send (HOST:PORT).
    #[arg(long, env = "DUET_RELAY_LISTEN", default_value = "127.0.0.1:5433")]
    pub listen: String,
    /// The gateway's QUIC address (HOST:PORT).
    #[arg(long, env = "DUET_RELAY_UPSTREAM", required_unless_present_any = ["bench", "list"])]
    pub upstream: Option<String>,
    /// A TOML file of profiles read on top of the shipped ones (same form as
    /// relay/network-profiles.toml).
    #[arg(long, env = "DUET_RELAY_PROFILES_FILE")]
    pub profiles_file: Option<PathBuf>,
    /// Seeds the random streams (the same seed and traffic give the same fates).
    #[arg(long, env = "DUET_RELAY_SEED", default_value_t = 1)]
    pub seed: u64,
    /// Print a line of statistics this often, seconds (0: only at the end).
    #[arg(long, env = "DUET_RELAY_STATS_EVERY_S", default_value_t = 10)]
    pub stats_every_s: u64,
    /// Stop after this many seconds (default: at Ctrl-C).
    #[arg(long, env = "DUET_RELAY_DURATION_S")]
    pub duration_s: Option<f64>,
    /// Most clients (device addresses) at once.
    #[arg(long, env = "DUET_RELAY_MAX_CLIENTS", default_value_t = DEFAULT_MAX_CLIENTS)]
    pub max_clients: usize,
    /// Forget a client after this many seconds without traffic.
    #[arg(long, env = "DUET_RELAY_IDLE_TIMEOUT_S", default_value_t = DEFAULT_IDLE_TIMEOUT.as_secs())]
    pub idle_timeout_s: u64,
    /// List the profiles and exit.
    #[arg(long, env = "DUET_RELAY_LIST")]
    pub list: bool,
    /// Measure the relay's own cost: UDP round trips to an echo server in this process,
    /// straight and through the relay, alternated; prints a JSON report.
    #[arg(long, env = "DUET_RELAY_BENCH")]
    pub bench: bool,
    /// `--bench`: concurrent clients.
    #[arg(long, env = "DUET_RELAY_BENCH_CLIENTS", default_value_t = 50)]
    pub bench_clients: usize,
    /// `--bench`: round trips per client per phase.
    #[arg(long, env = "DUET_RELAY_BENCH_ROUNDS", default_value_t = 400)]
    pub bench_rounds: usize,
    /// `--bench`: datagram payload, bytes.
    #[arg(long, env = "DUET_RELAY_BENCH_BYTES", default_value_t = 1200)]
    pub bench_bytes: usize,
    /// `--bench`: each client starts a round trip this often, ms (0: closed loop, as fast as
    /// answers come).
    #[arg(long, env = "DUET_RELAY_BENCH_INTERVAL_MS", default_value_t = 0.0)]
    pub bench_interval_ms: f64,
    /// `--bench`: phases of each path, alternated.
    #[arg(long, env = "DUET_RELAY_BENCH_REPEATS", default_value_t = 3)]
    pub bench_repeats: usize,
    /// Write the JSON report (final statistics, or `--bench`'s) here instead of stdout.
    #[arg(long, env = "DUET_RELAY_JSON")]
    pub json: Option<PathBuf>,
}

/// Runs the command.
pub fn run(args: RelayArgs) -> anyhow::Result<()> {
    let profiles = match &args.profiles_file {
        Some(path) => Profiles::load(path)?,
        None => Profiles::builtin(),
    };
    if args.list {
        for p in profiles.iter() {
            println!("{:<12} {}", p.name, p.description);
        }
        return Ok(());
    }
    let profile = profiles.get(&args.profile)?.clone();
    anyhow::ensure!(args.idle_timeout_s > 0, "--idle-timeout-s must be > 0");
    anyhow::ensure!(args.max_clients > 0, "--max-clients must be > 0");
    if let Some(d) = args.duration_s {
        anyhow::ensure!(d.is_finite() && d > 0.0, "--duration-s must be > 0, not {d}");
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        if args.bench {
            let opts = BenchOptions {
                clients: args.bench_clients,
                rounds: args.bench_rounds,
                bytes: args.bench_bytes,
                repeats: args.bench_repeats,
                interval: Duration::try_from_secs_f64(args.bench_interval_ms / 1e3).context("--bench-interval-ms must be a number of ms >= 0")?,
                timeout: Duration::from_secs(2) + Duration::from_secs_f64(4.0 * (profile.base_rtt_ms() + 3.0 * (profile.up.jitter_ms + profile.down.jitter_ms)) / 1000.0),
            };
            let report = bench::run(profile, args.seed, &opts).await?;
            eprintln!(
                "relay bench ({}, {} clients): round trip p50 {:.0} us direct, {:.0} us relayed (+{:.0}); p99 {:.0} / {:.0} us; {:.1} us CPU per forwarded packet; {:.1} KiB per client",
                report.profile,
                report.clients,
                report.direct.rtt_p50_us,
                report.relayed.rtt_p50_us,
                report.added_p50_us,
                report.direct.rtt_p99_us,
                report.relayed.rtt_p99_us,
                report.relay_cpu_us_per_packet,
                report.relay_rss_kib_per_client
            );
            return write_json(&args.json, &report);
        }
        let listen = resolve(&args.listen, "--listen").await?;
        let upstream = resolve(args.upstream.as_deref().unwrap_or_default(), "--upstream").await?;
        let config = RelayConfig { seed: args.seed, max_clients: args.max_clients, idle_timeout: Duration::from_secs(args.idle_timeout_s), ..RelayConfig::new(listen, upstream, profile.clone()) };
        let relay = Relay::start(config).await?;
        eprintln!("relay {} -> {upstream}, profile {}: {}", relay.local_addr(), profile.name, profile.description);
        let started = Instant::now();
        let end = args.duration_s.map(|d| tokio::time::Instant::now() + Duration::from_secs_f64(d));
        let every = (args.stats_every_s > 0).then(|| Duration::from_secs(args.stats_every_s));
        let mut next_print = every.map(|e| tokio::time::Instant::now() + e);
        loop {
            let wake = [end, next_print].into_iter().flatten().min();
            tokio::select! {
                r = tokio::signal::ctrl_c() => {
                    r.context("waiting for Ctrl-C")?;
                    break;
                }
                _ = async { match wake { Some(w) => tokio::time::sleep_until(w).await, None => std::future::pending().await } } => {
                    if end.is_some_and(|e| tokio::time::Instant::now() >= e) {
                        break;
                    }
                    eprintln!("{}", relay.stats().summary());
                    next_print = every.map(|e| tokio::time::Instant::now() + e);
                }
            }
        }
        let stats = relay.stats();
        eprintln!("{}", stats.summary());
        tracing::info!(elapsed_s = started.elapsed().as_secs_f64(), "relay stopping");
        relay.shutdown().await;
        write_json(&args.json, &stats)
    })
}

/// `HOST:PORT` to one socket address (the first the resolver gives).
async fn resolve(addr: &str, flag: &str) -> anyhow::Result<SocketAddr> {
    let mut found = tokio::net::lookup_host(addr).await.with_context(|| format!("{flag} {addr}: not a HOST:PORT that resolves"))?;
    found.next().with_context(|| format!("{flag} {addr}: resolves to no address"))
}

fn write_json<T: serde::Serialize>(path: &Option<PathBuf>, value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    match path {
        Some(p) => std::fs::write(p, text + "\n").with_context(|| format!("writing {}", p.display())),
        None => {
            println!("{text}");
            Ok(())
        }
    }
}
