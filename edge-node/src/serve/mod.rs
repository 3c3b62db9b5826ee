//! `edge-node serve`: the device's SLM (and its route to the cloud) behind the OpenAI API on a
//! local port, so that apps on the device use Duet the way they already use an LLM server.
//!
//! `POST /v1/chat/completions` and `POST /v1/completions` (streamed as server-sent events or
//! not), `GET /v1/models`, `/healthz`, `/metrics`, `/v1/duet/status` (the link), and a web
//! playground at `/`. Routing is per request through a `duet`
//! extension object (`{"mode": "local" | "routed" | "cloud", "escalation_rate": r}` or
//! `"tau": t`), with the server's flags as defaults. Requests share the one SLM in arrival
//! order through a bounded queue ([`worker`]); beyond it a request gets 429. What one request
//! may generate is bounded (`--max-request-tokens`, [`handlers`]), and so are the HTTP
//! connections: how many are open, how long a header may take to arrive and how long a
//! connection may sit idle ([`conn`]), so that no client, slow or greedy, keeps the others out.
//!
//! Bodies are read field by field ([`request`], [`messages`]) so that what clients send is
//! accepted (content parts, `developer`, tool history, prompt lists, `n`, logprobs) and what the
//! server cannot do is refused with an OpenAI error naming the parameter ([`error`]); the
//! compatibility table in docs/src/serve.md lists both.

mod api;
mod conn;
mod error;
mod handlers;
mod http;
mod logprobs;
mod messages;
mod request;
mod respond;
mod state;
mod stop;
mod worker;

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use common::exchange::LinkHealth;
use edge_node::args::{build_router_with_calibration, connect_reloading_on_sighup, deadline_policy, rate_controller, CloudArgs, ModelArgs};
use edge_node::fleet::{self as agent, AgentConfig, BundleArgs, DeviceCounters, DeviceTarget};
use edge_node::routing::shipped_router::DEFAULT_ESCALATION_RATE;
use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::sync::mpsc;

pub use worker::Mode;

/// Options of `edge-node serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address of the HTTP server (loopback by default: apps on this device).
    #[arg(long, env = "DUET_SERVE_LISTEN", default_value = "127.0.0.1:8088")]
    pub listen: SocketAddr,
    /// Requests waiting for the SLM at most; beyond it a request gets 429.
    #[arg(long, env = "DUET_SERVE_QUEUE", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub queue: u16,
    /// `max_tokens` when a request does not say.
    #[arg(long, env = "DUET_SERVE_MAX_TOKENS", default_value_t = 256)]
    pub max_tokens: usize,
    /// Tokens one request may generate at most, all its choices together (prompts × `n` ×
    /// `max_tokens`); beyond it a request gets 400. It also bounds one choice, and so how long
    /// a request waits behind another's.
    #[arg(long, env = "DUET_SERVE_MAX_REQUEST_TOKENS", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_request_tokens: u64,
    /// HTTP connections open at most. At the cap a new one takes the place of the connection
    /// waiting longest with no request in progress; when every one has a request in progress,
    /// it gets 503 (`Connection: close`).
    #[arg(long, env = "DUET_SERVE_MAX_CONNECTIONS", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_connections: u32,
    /// A request's header must arrive within it (from the accept, or from its first byte on a
    /// kept-alive connection), and its body within it again; else the connection is closed.
    #[arg(long, env = "DUET_SERVE_HEADER_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_ms: u64,
    /// A connection with no request in progress is closed after it (keep-alive), and so is one
    /// whose response the client stops reading for that long.
    #[arg(long, env = "DUET_SERVE_IDLE_TIMEOUT_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_ms: u64,
    /// Routing when a request does not say: `local`, `routed` (needs --gateway) or `cloud`.
    #[arg(long, env = "DUET_SERVE_MODE", value_enum, default_value_t = ModeArg::Routed)]
    pub mode: ModeArg,
    #[command(flatten)]
    pub cloud: CloudArgs,
    #[command(flatten)]
    pub bundles: BundleArgs,
}

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// The SLM alone.
    Local,
    /// Hard tokens to the cloud (local when no gateway is configured).
    Routed,
    /// Every token from the cloud.
    Cloud,
}

/// Refuse the flags `serve` shares with `generate` but has no use for: `--color` highlights a
/// terminal's text, and the server writes none (its clients get each token's source instead).
fn refuse_unused(args: &ServeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.cloud.color == "auto", "--color (DUET_COLOR) is for `generate`'s terminal output: `serve` prints no tokens (each streamed chunk says its source); drop it");
    anyhow::ensure!(
        args.max_tokens as u64 <= args.max_request_tokens,
        "--max-tokens {} is over --max-request-tokens {}: every request that gives no `max_tokens` would be refused",
        args.max_tokens,
        args.max_request_tokens
    );
    Ok(())
}

/// Run the server until interrupted.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    refuse_unused(&args)?;
    let (lm, tok) = args.model.load()?;
    let (router, tau, calibration) = build_router_with_calibration(&args.cloud, &lm, &tok)?;
    let default_rate_control = rate_controller(&args.cloud, calibration.as_ref())?;
    let model_id = lm.manifest().id.clone();
    // With --bundle-key, the rollout's router bundle replaces --router: the last good one on
    // disk from the first generation, a newer one as soon as the agent accepts it.
    let bundle_key = args.bundles.key()?;
    let target = DeviceTarget { slm_id: model_id.clone(), tokenizer_fingerprint: tok.fingerprint().to_string(), hidden_size: lm.manifest().hidden_size };
    let initial_bundle = agent::load_last_good(&args.bundles.dir(), bundle_key.as_ref(), &target);
    let max_context = lm.max_context();
    let cache = lm.new_cache(None)?;
    let tok = Arc::new(tok);
    let default_mode = match (args.mode, args.cloud.gateway.is_some()) {
        (_, false) | (ModeArg::Local, _) => Mode::Local,
        (ModeArg::Routed, true) => Mode::Routed,
        (ModeArg::Cloud, true) => Mode::Cloud,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let prometheus = PrometheusBuilder::new().install_recorder().map_err(|e| tracing::warn!("metrics recorder not installed: {e}")).ok();
        let (link, health) = match &args.cloud.gateway {
            Some(_) => {
                let (link, health) = connect_reloading_on_sighup(&args.cloud, &tok, &model_id).await?;
                (Some(link), health)
            }
            None => (None, LinkHealth::new(deadline_policy(&args.cloud), Duration::ZERO)),
        };
        let (jobs, queue) = mpsc::channel(usize::from(args.queue));
        let gateway = args.cloud.gateway.clone().zip(link.clone());
        let leaving = link.clone();
        let counters = Arc::new(DeviceCounters::default());
        let updates = link.clone().map(|link| {
            let config = AgentConfig { key: bundle_key, dir: args.bundles.dir(), poll: Duration::from_millis(args.bundles.bundle_poll_ms), target };
            agent::spawn(link, config, initial_bundle.clone(), counters.clone())
        });
        let bundles = worker::Bundles {
            updates,
            active: None,
            speculate: args.cloud.speculate,
            policy: deadline_policy(&args.cloud),
            default_rate: args.cloud.escalation_rate.unwrap_or(DEFAULT_ESCALATION_RATE),
            counters,
        };
        let mut worker = worker::Worker {
            lm,
            cache,
            tok: tok.clone(),
            router,
            link,
            health,
            speculate: args.cloud.speculate,
            draft: args.cloud.draft,
            presync: !args.cloud.no_presync,
            rate_mode: args.cloud.rate_control,
            carried: None,
            bundles,
        };
        if let Some(b) = initial_bundle {
            worker.use_bundle(Arc::new(b));
        }
        tokio::spawn(worker.run(queue));
        let state = Arc::new(state::AppState {
            jobs,
            tok,
            model_id,
            max_context,
            default_max_tokens: args.max_tokens,
            max_request_tokens: usize::try_from(args.max_request_tokens).unwrap_or(usize::MAX),
            default_mode,
            default_tau: tau,
            default_rate_control,
            rate_mode: args.cloud.rate_control,
            calibration,
            has_gateway: args.cloud.gateway.is_some(),
            gateway,
            prometheus,
            next_id: AtomicU64::new(1),
        });
        let listener = tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("binding {}", args.listen))?;
        eprintln!("edge-node serving the OpenAI API on http://{} (mode {:?})", listener.local_addr()?, default_mode);
        let limits = conn::Limits {
            max_connections: args.max_connections as usize,
            header_timeout: Duration::from_millis(args.header_timeout_ms),
            idle_timeout: Duration::from_millis(args.idle_timeout_ms),
        };
        conn::serve(listener, http::routes(state), limits, stop_requested()).await;
        // Close the gateway connections before the runtime goes, or the gateway holds them
        // until its idle timeout (and a draining gateway waits that long for them).
        if let Some(link) = leaving {
            link.close().await;
        }
        Ok(())
    })
}

/// Resolves on Ctrl-C or SIGTERM, what `kill`, systemd and Kubernetes send to stop a service:
/// either ends the server the same way, its gateway connections closed.
async fn stop_requested() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            // Without a SIGTERM handler the default one ends the process; Ctrl-C still works.
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn serve_refuses_color_and_takes_no_presync() {
        let colored = Cli::parse_from(["serve", "--color", "always"]).serve;
        assert!(refuse_unused(&colored).unwrap_err().to_string().contains("--color"));
        let no_presync = Cli::parse_from(["serve", "--no-presync"]).serve;
        assert!(refuse_unused(&no_presync).is_ok() && no_presync.cloud.no_presync, "passed on to every routed request's link");
    }

    #[test]
    fn the_connection_and_request_limits_are_config_keys_with_device_safe_defaults() {
        let defaults = Cli::parse_from(["serve"]).serve;
        assert_eq!((defaults.max_connections, defaults.header_timeout_ms, defaults.idle_timeout_ms, defaults.max_request_tokens), (256, 10_000, 60_000, 4096));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("edge.toml");
        std::fs::write(&file, "max-connections = 64\nheader-timeout-ms = 2000\nidle-timeout-ms = 5000\nmax-request-tokens = 1024\n").unwrap();
        let command = <Cli as clap::CommandFactory>::command();
        let serve = Cli::parse_from(common::config_file::expand(&command, vec!["serve".into()], &file).unwrap()).serve;
        assert_eq!((serve.max_connections, serve.header_timeout_ms, serve.idle_timeout_ms, serve.max_request_tokens), (64, 2000, 5000, 1024));
        std::fs::write(&file, "max-conections = 64\n").unwrap();
        let err = common::config_file::expand(&command, vec!["serve".into()], &file).unwrap_err().to_string();
        assert!(err.contains("unknown key `max-conections`") && err.contains("max-connections"), "{err}");
    }

    #[test]
    fn serve_refuses_limits_that_would_refuse_every_request() {
        let over = Cli::parse_from(["serve", "--max-tokens", "512", "--max-request-tokens", "256"]).serve;
        assert!(refuse_unused(&over).unwrap_err().to_string().contains("--max-request-tokens"));
        for zero in ["--max-connections", "--header-timeout-ms", "--idle-timeout-ms", "--max-request-tokens"] {
            assert!(Cli::try_parse_from(["serve", zero, "0"]).is_err(), "{zero} 0");
        }
    }
}
