//! `loadtest`: measures Duet's gateway and backends. Each subcommand runs its baseline in the
//! same process and prints one JSON report (docs/src/benchmarks/ quotes the commands).

use loadtest::{abuse, batching, capacity, engines, fleet, gateway_latency, handshake};

use clap::{Parser, Subcommand};

/// Duet load tester.
#[derive(Debug, Parser)]
#[command(name = "loadtest", version, about)]
struct Cli {
    /// Log filter.
    #[arg(long, global = true, env = "DUET_LOG", default_value = "warn")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Tokens/s of the embedded backend at several batch sizes (batch 1 is the baseline).
    Batching(batching::BatchingArgs),
    /// Latency the gateway adds per escalation: simulated devices over real QUIC on loopback
    /// against a gateway whose backend has a fixed, known cost.
    GatewayLatency(gateway_latency::LatencyArgs),
    /// The gateway in front of external engines (or the embedded LLM), or `--direct` the same
    /// requests straight to the engines: throughput, latency, prefix-cache share.
    Engines(engines::EnginesArgs),
    /// A UDP impairment relay between devices and a gateway: delay, jitter, loss, bandwidth
    /// cap, duplication and blackouts of a named network profile (`--list`, `--bench`).
    Relay(relay::cmd::RelayArgs),
    /// Thousands of simulated devices (the real edge stack, a recorded SLM trace) on impaired
    /// links against one gateway; every device checks its token stream. JSON + HTML report.
    Fleet(Box<fleet::FleetArgs>),
    /// Devices per LLM server at a service level: fleet runs (recorded SLM traces, real
    /// drafts) searched over the fleet's size, per way of escalating (one token, drafts,
    /// drafts checked by load). JSON + markdown + HTML report.
    Capacity(Box<capacity::CapacityArgs>),
    /// Handshake cost of device identity: connections/s with mutual TLS against the
    /// shared-token handshake, same run.
    Handshake(handshake::HandshakeArgs),
    /// A gateway for fleet tests (fixed-cost backend, embedded LLM or engines): prints its
    /// addresses as one JSON line and serves until its standard input closes.
    Gateway(fleet::gateway::GatewayArgs),
    /// Hostile probe scenarios against a real cloud-gateway process (id squatting,
    /// invented-id session flood, unfinished streams, idle-connection flood, a huge Full from a
    /// device that leaves, sustained overload): after each, a well-behaved device's service,
    /// the gateway's RSS against its baseline, Busy against expired.
    Abuse(abuse::AbuseArgs),
}

fn main() -> anyhow::Result<()> {
    if let Some(dir) = common::reference::requested() {
        return common::reference::write(<Cli as clap::CommandFactory>::command(), &[], &dir);
    }
    let cli = Cli::parse();
    if common::config_file::parse_only() {
        return Ok(());
    }
    common::telemetry::init_logging(&cli.log)?;
    match cli.command {
        Command::Batching(a) => batching::run(a),
        Command::GatewayLatency(a) => gateway_latency::run(a),
        Command::Engines(a) => engines::run(a),
        Command::Relay(a) => relay::cmd::run(a),
        Command::Fleet(a) => fleet::run(*a),
        Command::Capacity(a) => capacity::run(*a),
        Command::Gateway(a) => fleet::gateway::run(a),
        Command::Handshake(a) => handshake::run(a),
        Command::Abuse(a) => abuse::run(a),
    }
}
