//! `cloud-gateway`: QUIC server that answers escalations from many devices with an LLM
//! (embedded and batched, or external engines); `cloud-gateway ca ...`, the admin commands for
//! device identity; and `cloud-gateway fleet ...`, the router rollout's commands.

use std::time::Duration;

use cloud_gateway::cli::GatewayArgs;
use cloud_gateway::engine::connect::{connect, expected_vocabulary};
use cloud_gateway::Gateway;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if let Some(dir) = common::reference::requested() {
        let command = <GatewayArgs as clap::CommandFactory>::command().subcommand(cloud_gateway::ca_command::command()).subcommand(cloud_gateway::fleet_command::command());
        return common::reference::write(command, cloud_gateway::cli::SECTIONS, &dir);
    }
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // The admin commands: no gateway is started.
    if argv.get(1).is_some_and(|a| a == cloud_gateway::ca_command::NAME) {
        return cloud_gateway::ca_command::run(argv[1..].to_vec());
    }
    if argv.get(1).is_some_and(|a| a == cloud_gateway::fleet_command::NAME) {
        return cloud_gateway::fleet_command::run(argv[1..].to_vec());
    }
    let args = GatewayArgs::from_argv(argv)?;
    if common::config_file::parse_only() {
        return Ok(());
    }
    if args.check {
        print!("{}", args.check_report()?);
        return Ok(());
    }
    // Kept to the end: shutting it down exports the spans still buffered.
    let mut telemetry = common::telemetry::init(&args.telemetry.log, args.telemetry.otlp_endpoint.as_deref(), "cloud-gateway")?;
    for warning in &args.config_warnings {
        tracing::warn!("{warning}");
    }
    let config = args.gateway_config()?;
    // The recorder first: the engine pool sets each worker's gauges as it connects, and a gauge
    // set before the recorder exists is lost (its panel would stay empty until a transition).
    cloud_gateway::http::prometheus();
    let gateway = if config.engines.pool.engines.is_empty() {
        let backend = tokio::task::spawn_blocking({
            let args = args.clone();
            move || args.load_backend()
        })
        .await??;
        Gateway::start(config, backend).await?
    } else {
        let expected = expected_vocabulary(&args.engine_tokenizer())?;
        let (pool, facts) = connect(config.engines.pool.clone(), &expected, config.engines.startup_wait).await?;
        let pool = pool.sharing(config.overload.fair_share);
        Gateway::start_with_engines(config, pool, facts).await?
    };
    eprintln!("cloud-gateway ready on quic://{} (http {:?})", gateway.local_addr()?, gateway.http_addr);
    // SIGTERM (Kubernetes, systemd) or ctrl-c drains; POST /drain too. A second signal stops at once.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = terminate.recv() => {}
        _ = gateway.drained() => {}
    }
    gateway.drain();
    tokio::select! {
        _ = gateway.drained() => tracing::info!("drained; stopping"),
        _ = tokio::signal::ctrl_c() => tracing::warn!("second signal: stopping now"),
        _ = terminate.recv() => tracing::warn!("second signal: stopping now"),
    }
    // Connections are closed by now: stopping the rest gets a quarter of the drain's close
    // margin, so the process is gone before its grace period ends.
    let stop_within = gateway.shared.draining().map_or(Duration::from_millis(500), |d| d.close_margin() / 4);
    let _ = tokio::time::timeout(stop_within, gateway.shutdown()).await;
    telemetry.shutdown();
    // A backend call still running on a blocking thread (cut off at the drain's close) would
    // hold the runtime's teardown past the grace period: the process ends here.
    std::process::exit(0)
}
