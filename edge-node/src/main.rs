//! `edge-node`: Duet's device side. Runs the SLM locally and routes hard tokens to the cloud,
//! for one prompt (`generate`) or for the apps on the device (`serve`, the OpenAI API).
//! (The offline router pipeline is the `router-lab` binary.)

mod bench_cmd;
mod generate_cmd;
mod proc_stats;
mod serve;

use clap::{Parser, Subcommand};

/// Duet edge node: token-level edge–cloud LLM inference, device side.
#[derive(Debug, Parser)]
#[command(name = "edge-node", version, about)]
struct Cli {
    /// A TOML file of settings for the subcommand (keys: its long flag names; unknown keys are
    /// refused). Command-line flags and `DUET_*` variables override it.
    #[arg(long, global = true, env = "DUET_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Log filter (tracing's EnvFilter syntax), e.g. `info` or `edge_node=debug`.
    #[arg(long, global = true, env = "DUET_LOG", default_value = "warn")]
    log: String,
    /// Export traces (a span per generation and per escalation; sampled escalations carry
    /// their trace context to the gateway) over OTLP/HTTP to this collector, e.g.
    /// http://127.0.0.1:4318. Off by default; the standard OTEL_* variables apply too.
    #[arg(long, global = true, env = "DUET_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate text for a prompt, streaming tokens to stdout as they are produced.
    Generate(Box<generate_cmd::GenerateArgs>),
    /// Measure prefill and decode speed of a model on this machine.
    Bench(bench_cmd::BenchArgs),
    /// Serve the OpenAI API (chat and text completions, streaming) on a local port for apps on
    /// this device, routing hard tokens to the cloud as `generate` does.
    Serve(Box<serve::ServeArgs>),
}

fn main() -> anyhow::Result<()> {
    if let Some(dir) = common::reference::requested() {
        return common::reference::write(<Cli as clap::CommandFactory>::command(), &[], &dir);
    }
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match common::config_file::find(&argv) {
        Some(file) => Cli::parse_from(common::config_file::strip(common::config_file::expand(&<Cli as clap::CommandFactory>::command(), argv, &file)?)),
        None => Cli::parse_from(argv),
    };
    if common::config_file::parse_only() {
        return Ok(());
    }
    // Kept to the end: dropping it exports the spans still buffered.
    let _telemetry = common::telemetry::init(&cli.log, cli.otlp_endpoint.as_deref(), "edge-node")?;
    match cli.command {
        Command::Generate(args) => generate_cmd::run(*args),
        Command::Bench(args) => bench_cmd::run(args),
        Command::Serve(args) => serve::run(*args),
    }
}
