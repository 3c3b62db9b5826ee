//! `edge-node generate`: one decode, local (no `--gateway`) or routed to the cloud, streamed
//! to stdout (cloud tokens highlighted) or reported as one JSON object.

use std::io::{IsTerminal, Write};
use std::ops::ControlFlow;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use common::protocol::WireSampling;
use edge_node::args::{build_router_with_calibration, connect, rate_controller, CloudArgs, ModelArgs, SamplingArgs};
use edge_node::decode::{decode, DecodeParams, DecodeStats, Emitted, NoCloud, OnnxSlm, TokenSource};
use edge_node::link::next_session_id;
use edge_node::link::link_cloud::LinkCloud;
use model_runtime::chat::{render, Message, Role};
use model_runtime::detokenize::StreamDecoder;
use model_runtime::tokenizer::Tokenizer;
use model_runtime::{fit_prompt, PromptPolicy};
use serde::Serialize;

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

#[derive(Serialize)]
struct Piece {
    text: String,
    source: TokenSource,
}

#[derive(Serialize)]
struct Report<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway: Option<&'a str>,
    router: &'a str,
    /// The threshold the session started at (with rate control, `rate_control` below says where
    /// it went).
    tau: f32,
    text: String,
    prompt_token_ids: &'a [u32],
    token_ids: Vec<u32>,
    sources: Vec<TokenSource>,
    /// Per token: the SLM's top probability at that position (null where it was not computed:
    /// escalated at tau >= 1 and answered), what the fleet simulator's traces replay.
    top_probs: Vec<Option<f32>>,
    /// Per token: ms since the previous one (the first: since decoding started, prefill included).
    token_ms: Vec<f64>,
    /// Per escalation the cloud answered: ms from asking to the answer, in order.
    escalation_ms: Vec<f64>,
    pieces: Vec<Piece>,
    #[serde(flatten)]
    stats: DecodeStats,
    peak_rss_mib: Option<f64>,
}

/// Streams committed tokens to stdout as text, cloud tokens highlighted.
struct Printer<'a> {
    tok: &'a Tokenizer,
    decoder: StreamDecoder,
    color: bool,
    quiet: bool,
    stop: Vec<u32>,
    ids: Vec<u32>,
    sources: Vec<TokenSource>,
    top_probs: Vec<Option<f32>>,
    token_ms: Vec<f64>,
    last: Instant,
    pieces: Vec<Piece>,
    write_error: Option<std::io::Error>,
}

impl<'a> Printer<'a> {
    /// A printer that has printed nothing yet; `quiet` (`--json`) records without printing.
    fn new(tok: &'a Tokenizer, color: bool, quiet: bool, stop: Vec<u32>) -> Self {
        Self {
            tok,
            decoder: StreamDecoder::new(),
            color,
            quiet,
            stop,
            ids: Vec::new(),
            sources: Vec::new(),
            top_probs: Vec::new(),
            token_ms: Vec::new(),
            last: Instant::now(),
            pieces: Vec::new(),
            write_error: None,
        }
    }

    fn on_token(&mut self, e: Emitted<'_>) -> ControlFlow<()> {
        self.ids.push(e.token);
        self.sources.push(e.source);
        self.top_probs.push(e.proposal.map(|p| p.stats.top_prob));
        let now = Instant::now();
        self.token_ms.push(now.duration_since(self.last).as_secs_f64() * 1e3);
        self.last = now;
        if self.stop.contains(&e.token) {
            return ControlFlow::Continue(());
        }
        match self.decoder.push(self.tok, e.token) {
            Ok(Some(text)) => {
                if !self.quiet {
                    let styled = match (self.color, e.source) {
                        (true, TokenSource::Cloud) => format!("\x1b[1;30;42m{text}\x1b[0m"),
                        (true, TokenSource::Fallback) => format!("\x1b[33m{text}\x1b[0m"),
                        _ => text.clone(),
                    };
                    let mut out = std::io::stdout().lock();
                    if let Err(err) = out.write_all(styled.as_bytes()).and_then(|_| out.flush()) {
                        self.write_error = Some(err);
                        return ControlFlow::Break(());
                    }
                }
                self.pieces.push(Piece { text, source: e.source });
            }
            Ok(None) => {}
            Err(err) => tracing::warn!("detokenizing: {err}"),
        }
        ControlFlow::Continue(())
    }
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
    let (mut router, tau, calibration) = build_router_with_calibration(&args.cloud, &lm, &tok)?;
    // One session per process: `carry` and `session` are the same here.
    let rate_control = rate_controller(&args.cloud, calibration.as_ref())?;
    let router_name = router.name().to_string();
    let model_id = lm.manifest().id.clone();
    let color = match args.cloud.color.as_str() {
        "always" => true,
        "never" => false,
        _ => std::io::stdout().is_terminal(),
    };
    let mut printer = Printer::new(&tok, color, args.json, lm.stop_tokens().to_vec());
    let mut cache = lm.new_cache(None)?;
    let mut slm = OnnxSlm::new(&mut lm, &mut cache, sampling)?;
    let gateway = args.cloud.gateway.clone();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut stats = rt.block_on(async {
        printer.last = Instant::now();
        match &gateway {
            None => {
                let params = DecodeParams { max_new_tokens: args.max_new_tokens, tau: 0.0, rate_control: None };
                Ok(decode(&mut slm, router.as_mut(), &mut NoCloud, prompt, params, |e| printer.on_token(e)).await?)
            }
            Some(_) => {
                let (link, health) = connect(&args.cloud, &tok, &model_id).await?;
                let mut cloud = LinkCloud::new(&link, next_session_id(), WireSampling::from(sampling), health, !args.cloud.no_presync)
                    .with_speculation(args.cloud.speculate)
                    .with_draft(args.cloud.draft);
                let params = DecodeParams { max_new_tokens: args.max_new_tokens, tau, rate_control };
                anyhow::Ok(link.close_after(decode(&mut slm, router.as_mut(), &mut cloud, prompt, params, |e| printer.on_token(e))).await?)
            }
        }
    })?;
    stats.truncated_tokens = dropped;
    if let Some(e) = printer.write_error.take() {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return Ok(());
        }
        return Err(e).context("writing to stdout");
    }
    let mut out = std::io::stdout().lock();
    if let Ok(Some(rest)) = printer.decoder.flush(&tok) {
        if !args.json {
            out.write_all(rest.as_bytes())?;
        }
        printer.pieces.push(Piece { text: rest, source: TokenSource::Slm });
    }
    if args.json {
        let report = Report {
            model: &model_id,
            gateway: gateway.as_deref(),
            router: &router_name,
            tau: if gateway.is_some() { tau } else { 0.0 },
            text: tok.decode(&printer.ids)?,
            prompt_token_ids: prompt,
            token_ids: printer.ids,
            sources: printer.sources,
            top_probs: printer.top_probs,
            token_ms: printer.token_ms,
            escalation_ms: stats.escalation_latencies().to_vec(),
            pieces: printer.pieces,
            stats,
            peak_rss_mib: peak_rss_mib(),
        };
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(out)?;
        if gateway.is_some() {
            let s = &stats;
            eprintln!(
                "[{} tokens: {} from the cloud, {} escalated, {} fell back; {:.1} tokens/s; {} B sent, {} B received]",
                s.tokens, s.routing.cloud_tokens, s.routing.escalated, s.routing.fallbacks, s.tokens_per_s, s.bytes_sent, s.bytes_received
            );
            if let Some(r) = s.rate_control.map(|c| c.report()) {
                eprintln!("[tau steered toward {:.1} % escalated: {:.4} -> {:.4}]", r.target_rate * 100.0, r.tau_start, r.tau_final);
            }
        } else {
            tracing::info!(?stats, "generation finished");
        }
    }
    Ok(())
}
