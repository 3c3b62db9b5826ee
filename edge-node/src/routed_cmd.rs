//! `edge-node generate --gateway ...`: routed generation with cloud tokens highlighted.

use std::io::{IsTerminal, Write};
use std::ops::ControlFlow;
use std::time::Duration;

use anyhow::Context;
use common::detokenize::StreamDecoder;
use common::model_files::duet_home;
use common::runtime::{CausalLm, KvCache};
use common::sampling::SamplingParams;
use common::tokenizer::Tokenizer;
use serde::Serialize;

use edge_node::deadline::{DeadlinePolicy, LinkHealth};
use edge_node::link::{next_session_id, Link, LinkConfig};
use edge_node::routed::{RoutedParams, RoutedSession, RoutedStats, TokenSource};
use edge_node::router::{ConfidenceRouter, MlpRouter, Router};

use crate::generate_cmd::{CloudArgs, GenerateArgs};
use crate::proc_stats::peak_rss_mib;

#[derive(Serialize)]
struct Piece {
    text: String,
    source: TokenSource,
}

#[derive(Serialize)]
struct RoutedReport<'a> {
    model: &'a str,
    gateway: &'a str,
    router: &'a str,
    tau: f32,
    text: String,
    token_ids: Vec<u32>,
    sources: Vec<TokenSource>,
    pieces: Vec<Piece>,
    truncated_tokens: usize,
    #[serde(flatten)]
    stats: RoutedStats,
    peak_rss_mib: Option<f64>,
}

/// The routing policy and threshold the command line asks for: `--router` picks the policy,
/// `--escalation-rate` (through the router file's calibration table) or `--tau` the threshold.
pub fn build_router(cloud: &CloudArgs, lm: &CausalLm, tok: &Tokenizer) -> anyhow::Result<(Box<dyn Router>, f32)> {
    if cloud.router == "confidence" {
        if let Some(rate) = cloud.escalation_rate {
            anyhow::bail!("--escalation-rate {rate} needs a trained router file (--router FILE): its calibration table maps rates to tau");
        }
        return Ok((Box::new(ConfidenceRouter), cloud.tau));
    }
    let path = std::path::Path::new(&cloud.router);
    let m = lm.manifest();
    let router = MlpRouter::load(path, &m.id, tok.fingerprint(), m.hidden_size)?;
    let tau = match cloud.escalation_rate {
        Some(rate) => router.model().meta().calibration.tau_for_rate(rate)?,
        None => cloud.tau,
    };
    tracing::info!(router = %path.display(), tau, "trained router loaded");
    Ok((Box::new(router), tau))
}

/// The deadline policy the command line asks for.
pub fn deadline_policy(cloud: &CloudArgs) -> DeadlinePolicy {
    DeadlinePolicy {
        min: Duration::from_millis(cloud.deadline_min_ms),
        max: Duration::from_millis(cloud.deadline_max_ms.max(cloud.deadline_min_ms)),
        per_token: Duration::from_millis(cloud.deadline_per_token_ms),
        ..DeadlinePolicy::default()
    }
}

/// Build the link configuration from the command line.
pub fn link_config(cloud: &CloudArgs, tok: &Tokenizer, slm_id: &str) -> anyhow::Result<LinkConfig> {
    let gateway = cloud.gateway.clone().context("--gateway is required")?;
    let ca_cert = cloud.ca_cert.clone().or_else(|| {
        let p = duet_home().join("gateway-cert.pem");
        p.exists().then_some(p)
    });
    let device_id = cloud.device_id.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "device".into());
        format!("{host}-{}", std::process::id())
    });
    Ok(LinkConfig {
        gateway,
        server_name: cloud.server_name.clone(),
        ca_cert,
        insecure: cloud.insecure,
        device_id,
        auth_token: cloud.auth_token.clone(),
        tokenizer_fingerprint: tok.fingerprint().to_string(),
        slm_id: slm_id.to_string(),
        backoff_min: Duration::from_millis(100),
        backoff_max: Duration::from_secs(5),
    })
}

/// Run a routed generation and print it.
pub fn run(args: &GenerateArgs, lm: &mut CausalLm, tok: &Tokenizer, cache: &mut KvCache, prompt: &[u32], dropped: usize, sampling: SamplingParams) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let (mut router, tau) = build_router(&args.cloud, lm, tok)?;
        let router_name = router.name().to_string();
        let config = link_config(&args.cloud, tok, &lm.manifest().id)?;
        let gateway = config.gateway.clone();
        let link = Link::start(config)?;
        let service = match link.wait_up(Duration::from_millis(args.cloud.connect_wait_ms)).await {
            Some(c) => Duration::from_millis(c.limits.service_time_ms as u64),
            None => {
                tracing::warn!("gateway {gateway} not reachable yet; starting anyway (hard tokens fall back until it is)");
                Duration::ZERO
            }
        };
        let params = RoutedParams { max_new_tokens: args.max_new_tokens, tau, sampling, session_id: next_session_id(), presync: !args.cloud.no_presync };
        let policy = deadline_policy(&args.cloud);
        let health = LinkHealth::new(policy, service);
        let mut session = RoutedSession::new(Some(&link), router.as_mut(), health, params);
        let color = match args.cloud.color.as_str() {
            "always" => true,
            "never" => false,
            _ => std::io::stdout().is_terminal(),
        };
        let stop = lm.stop_tokens().to_vec();
        let mut decoder = StreamDecoder::new();
        let mut ids = Vec::new();
        let mut sources = Vec::new();
        let mut pieces = Vec::new();
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        let stats = session
            .generate(lm, cache, prompt, |t, source| {
                ids.push(t);
                sources.push(source);
                if stop.contains(&t) {
                    return ControlFlow::Continue(());
                }
                if let Ok(Some(text)) = decoder.push(tok, t) {
                    if !args.json {
                        let styled = match (color, source) {
                            (true, TokenSource::Cloud) => format!("\x1b[1;30;42m{text}\x1b[0m"),
                            (true, TokenSource::Fallback) => format!("\x1b[33m{text}\x1b[0m"),
                            _ => text.clone(),
                        };
                        if out.write_all(styled.as_bytes()).and_then(|_| out.flush()).is_err() {
                            return ControlFlow::Break(());
                        }
                    }
                    pieces.push(Piece { text, source });
                }
                ControlFlow::Continue(())
            })
            .await?;
        if let Ok(Some(rest)) = decoder.flush(tok) {
            if !args.json {
                let _ = out.write_all(rest.as_bytes());
            }
            pieces.push(Piece { text: rest, source: TokenSource::Slm });
        }
        if args.json {
            let report = RoutedReport {
                model: &lm.manifest().id,
                gateway: args.cloud.gateway.as_deref().unwrap_or_default(),
                router: &router_name,
                tau,
                text: tok.decode(&ids)?,
                token_ids: ids,
                sources,
                pieces,
                truncated_tokens: dropped,
                stats,
                peak_rss_mib: peak_rss_mib(),
            };
            serde_json::to_writer_pretty(&mut out, &report)?;
            writeln!(out)?;
        } else {
            writeln!(out)?;
            let s = &stats;
            eprintln!(
                "[{} tokens: {} from the cloud, {} escalated, {} fell back; {:.1} tokens/s; {} B sent, {} B received]",
                s.tokens, s.cloud_tokens, s.escalated, s.fallbacks, s.tokens_per_s, s.bytes_sent, s.bytes_received
            );
        }
        anyhow::Ok(())
    })
}
