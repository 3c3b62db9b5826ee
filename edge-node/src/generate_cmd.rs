//! `edge-node generate`: local generation with streamed output.

use std::io::Write;
use std::ops::ControlFlow;

use anyhow::{bail, Context};
use clap::Args;
use common::chat::{render, Message, Role};
use common::detokenize::StreamDecoder;
use common::runtime::{fit_prompt, generate, GenerationStats, PromptPolicy};
use common::sampling::{Sampler, SamplingParams};
use serde::Serialize;

use crate::model_args::ModelArgs;
use crate::proc_stats::peak_rss_mib;

/// Options of `edge-node generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt text.
    #[arg(long, env = "DUET_PROMPT")]
    pub prompt: String,
    /// Wrap the prompt in the model's chat template (a user turn, assistant to answer).
    #[arg(long, env = "DUET_CHAT")]
    pub chat: bool,
    /// System prompt for --chat (default: the model's own).
    #[arg(long, env = "DUET_SYSTEM", requires = "chat")]
    pub system: Option<String>,
    /// Most tokens to generate.
    #[arg(long, env = "DUET_MAX_NEW_TOKENS", default_value_t = 256)]
    pub max_new_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Keep the last tokens of a prompt that does not fit the context instead of refusing it.
    #[arg(long, env = "DUET_TRUNCATE")]
    pub truncate: bool,
    /// Print one JSON object (text, token ids, stats) instead of streaming text.
    #[arg(long, env = "DUET_JSON")]
    pub json: bool,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

/// Routing to the cloud gateway (off unless --gateway is given).
#[derive(Debug, Clone, Args)]
pub struct CloudArgs {
    /// Gateway address (host:port); without it generation is local-only.
    #[arg(long, env = "DUET_GATEWAY")]
    pub gateway: Option<String>,
    /// Escalate a token when the router's confidence is below tau (0 = never, 1 = always).
    #[arg(long, env = "DUET_TAU", default_value_t = 0.5, value_parser = parse_unit)]
    pub tau: f32,
    /// Instead of --tau: the share of tokens to escalate, turned into tau by the router file's
    /// calibration table (needs --router FILE).
    #[arg(long, env = "DUET_ESCALATION_RATE", value_parser = parse_unit, conflicts_with = "tau")]
    pub escalation_rate: Option<f32>,
    /// Routing policy: `confidence` (the SLM's top probability) or a trained router file
    /// (from `edge-node router-train`) made for this SLM.
    #[arg(long, env = "DUET_ROUTER", default_value = "confidence")]
    pub router: String,
    /// The gateway's certificate (PEM); default: $DUET_HOME/gateway-cert.pem, which a local gateway writes.
    #[arg(long, env = "DUET_CA_CERT")]
    pub ca_cert: Option<std::path::PathBuf>,
    /// Skip TLS verification of the gateway (development only).
    #[arg(long, env = "DUET_INSECURE")]
    pub insecure: bool,
    /// TLS name of the gateway.
    #[arg(long, env = "DUET_SERVER_NAME", default_value = "localhost")]
    pub server_name: String,
    /// Shared secret the gateway expects.
    #[arg(long, env = "DUET_AUTH_TOKEN", default_value = "", hide_env_values = true)]
    pub auth_token: String,
    /// This device's id (default: host name and process id).
    #[arg(long, env = "DUET_DEVICE_ID")]
    pub device_id: Option<String>,
    /// How long to wait for the first connection before starting (generation never waits later).
    #[arg(long, env = "DUET_CONNECT_WAIT_MS", default_value_t = 3000)]
    pub connect_wait_ms: u64,
    /// Shortest wait for a cloud token, ms.
    #[arg(long, env = "DUET_DEADLINE_MIN_MS", default_value_t = 30)]
    pub deadline_min_ms: u64,
    /// Longest wait for a cloud token, ms: past it the SLM's token is used.
    #[arg(long, env = "DUET_DEADLINE_MAX_MS", default_value_t = 3000)]
    pub deadline_max_ms: u64,
    /// Expected LLM time per context token sent, ms, until the gateway's answers measure it
    /// (lengthens the deadline of long deltas).
    #[arg(long, env = "DUET_DEADLINE_PER_TOKEN_MS", default_value_t = 25)]
    pub deadline_per_token_ms: u64,
    /// Do not send the prompt to the gateway ahead of the first hard token.
    #[arg(long, env = "DUET_NO_PRESYNC")]
    pub no_presync: bool,
    /// Highlight cloud tokens: auto (when stdout is a terminal), always, never.
    #[arg(long, env = "DUET_COLOR", default_value = "auto", value_parser = ["auto", "always", "never"])]
    pub color: String,
}

pub fn parse_unit(s: &str) -> Result<f32, String> {
    let v: f32 = s.parse().map_err(|e| format!("`{s}` is not a number: {e}"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is outside [0, 1]"))
    }
}

/// Sampling options (greedy by default).
#[derive(Debug, Clone, Args)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 = greedy.
    #[arg(long, env = "DUET_TEMPERATURE", default_value_t = 0.0)]
    pub temperature: f32,
    /// Sample only among the k most likely tokens (0 = all).
    #[arg(long, env = "DUET_TOP_K", default_value_t = 0)]
    pub top_k: usize,
    /// Nucleus sampling mass (1.0 = off).
    #[arg(long, env = "DUET_TOP_P", default_value_t = 1.0)]
    pub top_p: f32,
    /// Seed for reproducible sampling.
    #[arg(long, env = "DUET_SEED")]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// As validated sampling parameters.
    pub fn params(&self) -> anyhow::Result<SamplingParams> {
        let p = SamplingParams { temperature: self.temperature, top_k: self.top_k, top_p: self.top_p, seed: self.seed };
        p.validate()?;
        Ok(p)
    }
}

#[derive(Serialize)]
struct JsonReport<'a> {
    model: &'a str,
    text: String,
    prompt_token_ids: &'a [u32],
    token_ids: &'a [u32],
    #[serde(flatten)]
    stats: &'a GenerationStats,
    total_ms: f64,
    peak_rss_mib: Option<f64>,
}

/// Run the command.
pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    if args.prompt.trim().is_empty() {
        bail!("--prompt is empty: give the text to continue or the question to answer");
    }
    let sampling = args.sampling.params()?;
    let (mut lm, tok) = args.model.load()?;
    let text = if args.chat {
        let mut msgs = Vec::new();
        if let Some(s) = &args.system {
            msgs.push(Message { role: Role::System, content: s.clone() });
        }
        msgs.push(Message { role: Role::User, content: args.prompt.clone() });
        render(&msgs)
    } else {
        args.prompt.clone()
    };
    let ids = tok.encode(&text).context("tokenizing the prompt")?;
    let policy = if args.truncate { PromptPolicy::TruncateLeft } else { PromptPolicy::Reject };
    let (prompt, dropped) = fit_prompt(&ids, lm.max_context(), policy)?;
    if dropped > 0 {
        tracing::warn!(dropped, kept = prompt.len(), "prompt truncated on the left to fit the context");
        if !args.json {
            eprintln!("note: prompt truncated: dropped its first {dropped} tokens to fit --max-context {}", lm.max_context());
        }
    }
    let mut cache = lm.new_cache(None)?;
    if args.cloud.gateway.is_some() {
        return crate::routed_cmd::run(&args, &mut lm, &tok, &mut cache, prompt, dropped, sampling);
    }
    let mut sampler = Sampler::new(sampling)?;
    let mut decoder = StreamDecoder::new();
    let mut out_ids = Vec::new();
    let stdout = std::io::stdout();
    let mut stdout = stdout.lock();
    let started = std::time::Instant::now();
    let stop = lm.stop_tokens().to_vec();
    let mut write_err = None;
    let mut stats = generate(&mut lm, &mut cache, prompt, args.max_new_tokens, &mut sampler, |t| {
        out_ids.push(t);
        if !args.json && !stop.contains(&t) {
            match decoder.push(&tok, t) {
                Ok(Some(piece)) => {
                    if let Err(e) = stdout.write_all(piece.as_bytes()).and_then(|_| stdout.flush()) {
                        write_err = Some(e);
                        return ControlFlow::Break(());
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::warn!("detokenizing: {e}"),
            }
        }
        ControlFlow::Continue(())
    })?;
    if let Some(e) = write_err {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return Ok(());
        }
        return Err(e).context("writing to stdout");
    }
    stats.truncated_tokens = dropped;
    let total_ms = started.elapsed().as_secs_f64() * 1e3;
    if args.json {
        let text = tok.decode(&out_ids)?;
        let report = JsonReport {
            model: &lm.manifest().id,
            text,
            prompt_token_ids: prompt,
            token_ids: &out_ids,
            stats: &stats,
            total_ms,
            peak_rss_mib: peak_rss_mib(),
        };
        serde_json::to_writer_pretty(&mut stdout, &report)?;
        writeln!(stdout)?;
    } else {
        if let Some(rest) = decoder.flush(&tok)? {
            stdout.write_all(rest.as_bytes())?;
        }
        writeln!(stdout)?;
        tracing::info!(?stats, "generation finished");
    }
    Ok(())
}
