//! `edge-node`: Duet's device side. Runs the SLM locally and routes hard tokens to the cloud;
//! also the offline router pipeline (labels, training) and the CommonsenseQA evaluation.

mod bench_cmd;
mod cqa_args;
mod eval_cmd;
mod eval_item;
mod eval_report;
mod generate_cmd;
mod labels_cmd;
mod labels_file;
mod model_args;
mod proc_stats;
mod routed_cmd;
mod train_cmd;

use clap::{Parser, Subcommand};

/// Duet edge node: token-level edge–cloud LLM inference, device side.
#[derive(Debug, Parser)]
#[command(name = "edge-node", version, about)]
struct Cli {
    /// Log filter (tracing's EnvFilter syntax), e.g. `info` or `common=debug`.
    #[arg(long, global = true, env = "DUET_LOG", default_value = "warn")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate text for a prompt, streaming tokens to stdout as they are produced.
    Generate(Box<generate_cmd::GenerateArgs>),
    /// Measure prefill and decode speed of a model on this machine.
    Bench(bench_cmd::BenchArgs),
    /// Label router training data: teacher-force the SLM and LLM over reference chains of thought.
    RouterLabels(Box<labels_cmd::LabelsArgs>),
    /// Train the router MLP on a labels file and calibrate tau to escalation rates.
    RouterTrain(Box<train_cmd::TrainArgs>),
    /// Evaluate routing policies on CommonsenseQA: accuracy vs share of tokens escalated.
    EvalCqa(Box<eval_cmd::EvalArgs>),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    common::telemetry::init_logging(&cli.log)?;
    match cli.command {
        Command::Generate(args) => generate_cmd::run(*args),
        Command::Bench(args) => bench_cmd::run(args),
        Command::RouterLabels(args) => labels_cmd::run(*args),
        Command::RouterTrain(args) => train_cmd::run(*args),
        Command::EvalCqa(args) => eval_cmd::run(*args),
    }
}
