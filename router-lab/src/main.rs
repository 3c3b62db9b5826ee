//! `router-lab`: the offline router pipeline, away from the device. It labels training data
//! with both models, trains the router MLP and calibrates it, and evaluates routing policies on
//! CommonsenseQA, in-process or against a real gateway. Every generation it runs goes through
//! the device's own decode loop (`edge_node::decode`), so what it measures is what serves users.
//! The LLM is the in-process ONNX one or, with `--llm-engine`, the one an engine serves
//! (`teacher`, `engine_llm`).

mod check_served_cmd;
mod compare_cmd;
mod calibration;
mod cqa;
mod cqa_args;
mod curves;
mod curves_cmd;
mod engine_llm;
mod eval_cmd;
mod eval_item;
mod eval_report;
mod labels_cmd;
mod labels_file;
mod pool_cmd;
mod rate_choice;
mod served_check;
mod served_tokens;
mod tasks;
mod teacher;
mod train_cmd;

use clap::{Parser, Subcommand};

/// Duet router lab: labels, training and evaluation of the token router.
#[derive(Debug, Parser)]
#[command(name = "router-lab", version, about)]
struct Cli {
    /// Log filter (tracing's EnvFilter syntax), e.g. `info` or `router_lab=debug`.
    #[arg(long, global = true, env = "DUET_LOG", default_value = "warn")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Label router training data: teacher-force the SLM and LLM over reference chains of
    /// thought, or roll out the SLM's own answers (`--on-policy`).
    Labels(Box<labels_cmd::LabelsArgs>),
    /// Train the router MLP on labels files and calibrate tau to escalation rates.
    Train(Box<train_cmd::TrainArgs>),
    /// Pool a trained router's score with the SLM's own top probability (in log-odds, a weight
    /// on each) and recalibrate tau: a router that leans on the SLM's confidence, not retrained.
    Pool(Box<pool_cmd::PoolArgs>),
    /// Evaluate routing policies on a task (CommonsenseQA by default; `--task humaneval`,
    /// `bigbench:NAME`): accuracy vs share of tokens escalated.
    #[command(alias = "eval")]
    EvalCqa(Box<eval_cmd::EvalArgs>),
    /// Compare the teacher-forced choices of the in-process LLM and an engine serving the same
    /// LLM: share of positions that agree, and the log-probability margins where they differ.
    CompareTeachers(Box<compare_cmd::CompareArgs>),
    /// Check a served run (`eval --gateway`) against the position-by-position reference: every
    /// token the LLM chose or accepted must be its choice there, every other one the SLM's.
    CheckServed(Box<check_served_cmd::CheckServedArgs>),
    /// Curves of an evaluation's results: gap recovered against share escalated per policy,
    /// with paired bootstrap intervals, and the router's lead over the SLM's confidence.
    Curves(curves_cmd::CurvesArgs),
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
        Command::Labels(args) => labels_cmd::run(*args),
        Command::Train(args) => train_cmd::run(*args),
        Command::Pool(args) => pool_cmd::run(*args),
        Command::EvalCqa(args) => eval_cmd::run(*args),
        Command::CompareTeachers(args) => compare_cmd::run(*args),
        Command::CheckServed(args) => check_served_cmd::run(*args),
        Command::Curves(args) => curves_cmd::run(args),
    }
}
