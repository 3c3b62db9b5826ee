//! Command-line options shared by the `edge-node` binary and the router lab (every flag has a
//! `DUET_*` twin), and what they build: the model, the routing policy, the link, the deadlines.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use common::exchange::DeadlinePolicy;
use common::sampling::SamplingParams;
use model_runtime::model_files::{duet_home, ModelFiles, ModelManifest, DEFAULT_SLM};
use model_runtime::tokenizer::Tokenizer;
use model_runtime::{CausalLm, LmOptions};

use crate::decode::{DraftMode, RateControl};
use crate::link::{Link, LinkConfig};
use crate::routing::router::{ConfidenceRouter, MlpRouter, Router};
use crate::routing::router_file::{Calibration, MlpRouterModel};
use crate::routing::shipped_router::{shipped_name, shipped_router, DEFAULT_ESCALATION_RATE};
use common::exchange::LinkHealth;

/// Which model to load and how to run it.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// Model id prepared under $DUET_HOME/models, or a model directory.
    #[arg(long, env = "DUET_MODEL", default_value = DEFAULT_SLM)]
    pub model: String,
    /// ONNX Runtime intra-op threads (0 = one per core).
    #[arg(long, env = "DUET_THREADS", default_value_t = 0)]
    pub threads: usize,
    /// Largest context (prompt + generated tokens); sizes the KV cache.
    #[arg(long, env = "DUET_MAX_CONTEXT", default_value_t = 4096, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(16..=131072))]
    pub max_context: usize,
    /// Back the model's weights with transparent huge pages once loaded (faster decoding where
    /// the kernel allows them); `off` to measure the difference.
    #[arg(long, env = "DUET_HUGE_PAGES", default_value = "on", value_parser = ["on", "off"])]
    pub huge_pages: String,
}

impl ModelArgs {
    /// Load the model and its tokenizer (checked against the recorded fingerprint).
    pub fn load(&self) -> anyhow::Result<(CausalLm, Tokenizer)> {
        let files = ModelFiles::locate(&self.model)?;
        let tok = Tokenizer::load(&files.tokenizer, Some(&files.manifest.tokenizer_fingerprint))?;
        let lm = CausalLm::load(files, &LmOptions { threads: self.threads, max_context: self.max_context, huge_pages: self.huge_pages == "on" })?;
        Ok((lm, tok))
    }
}

/// Routing to the cloud gateway (off unless --gateway is given).
#[derive(Debug, Clone, Args)]
pub struct CloudArgs {
    /// Gateway address (host:port), or several replicas separated by commas (a,b: a random one
    /// first, the others on connection loss or GoAway; names are re-resolved on every
    /// reconnect, so a DNS name with several records works too); without it generation is
    /// local-only.
    #[arg(long, env = "DUET_GATEWAY")]
    pub gateway: Option<String>,
    /// Escalate a token when the router's confidence is below tau (0 = never, 1 = always).
    /// Default: the trained router's --escalation-rate default, or 0.5 for `confidence`.
    #[arg(long, env = "DUET_TAU", value_parser = parse_unit)]
    pub tau: Option<f32>,
    /// Instead of --tau: the share of tokens to escalate, turned into tau by the trained
    /// router's calibration table. Default 0.1 (the operating point EVALUATION.md reports).
    #[arg(long, env = "DUET_ESCALATION_RATE", value_parser = parse_unit, conflicts_with = "tau")]
    pub escalation_rate: Option<f32>,
    /// How an escalation rate is held (not --tau, which is always fixed): `carry` steers tau
    /// toward the rate from what is actually escalated, carrying what it learned from session
    /// to session in this process (the requests of `serve`, the items of an evaluation);
    /// `session` starts each session afresh at the calibrated tau; `off` keeps the calibrated
    /// tau fixed (docs/ARCHITECTURE.md, "Holding the escalation rate").
    #[arg(long, env = "DUET_RATE_CONTROL", value_enum, default_value_t = RateControlMode::Carry)]
    pub rate_control: RateControlMode,
    /// Routing policy: `default` (the trained router shipped for this SLM, else `confidence`),
    /// `confidence` (the SLM's top probability), or a router file from `router-lab train`
    /// made for this SLM.
    #[arg(long, env = "DUET_ROUTER", default_value = "default")]
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
    /// Shared secret the gateway expects (a gateway without mutual TLS: development).
    #[arg(long, env = "DUET_AUTH_TOKEN", default_value = "", hide_env_values = true)]
    pub auth_token: String,
    /// This device's certificate (PEM, from `cloud-gateway ca issue`), for a gateway that
    /// requires mutual TLS: the gateway knows the device by it.
    #[arg(long, env = "DUET_CLIENT_CERT", requires = "client_key")]
    pub client_cert: Option<std::path::PathBuf>,
    /// This device's private key (PEM), with --client-cert.
    #[arg(long, env = "DUET_CLIENT_KEY", requires = "client_cert")]
    pub client_key: Option<std::path::PathBuf>,
    /// How often the --client-cert and --client-key files are checked for a rotated pair, ms
    /// (0: never; `serve` also reloads them on SIGHUP). The next connection uses the new pair;
    /// the live one keeps its certificate.
    #[arg(long, env = "DUET_CLIENT_CERT_POLL_MS", default_value_t = 2000)]
    pub client_cert_poll_ms: u64,
    /// This device's id (default: host name and process id).
    #[arg(long, env = "DUET_DEVICE_ID")]
    pub device_id: Option<String>,
    /// How long the connection to the gateway may stay silent before it is closed and the link
    /// reconnects, ms (keep-alives go every 2 s, so at least 4000). Longer rides out a path
    /// that drops packets for a while; shorter notices a gone gateway sooner.
    #[arg(long, env = "DUET_QUIC_IDLE_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(4000..=600_000))]
    pub quic_idle_timeout_ms: u64,
    /// How long to wait for the first connection before starting (generation never waits later).
    #[arg(long, env = "DUET_CONNECT_WAIT_MS", default_value_t = 3000)]
    pub connect_wait_ms: u64,
    /// Shortest wait for a cloud token, ms.
    #[arg(long, env = "DUET_DEADLINE_MIN_MS", default_value_t = 50)]
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
    /// While a hard token is at the gateway, let the SLM decode up to this many tokens ahead
    /// from its own token (kept when the cloud agrees, rolled back when not; the output is the
    /// same either way). 0 waits for every answer. 8 by default: on a coding prompt it keeps
    /// 0.67x of local-only speed where waiting keeps 0.59x (0.63x and 0.51x at 50 ms RTT);
    /// neutral on CommonsenseQA (docs/src/benchmarks/end-to-end.md, "Hiding the network").
    #[arg(long, env = "DUET_SPECULATE", default_value_t = 8)]
    pub speculate: usize,
    /// Send the SLM's continuation with each hard token for the LLM to check in the same round
    /// trip (protocol v5; several LLM-checked tokens per escalation): off, or adaptive (the
    /// draft length follows acceptance and answer time, none while the link is degraded).
    /// Gateways older than v5 get plain escalations either way. Off by default until measured
    /// (docs/src/benchmarks/draft-verification.md).
    #[arg(long, env = "DUET_DRAFT", value_enum, default_value_t = DraftMode::Off)]
    pub draft: DraftMode,
    /// Highlight cloud tokens: auto (when stdout is a terminal), always, never (`generate`
    /// only: `serve` prints no tokens and refuses it).
    #[arg(long, env = "DUET_COLOR", default_value = "auto", value_parser = ["auto", "always", "never"])]
    pub color: String,
}

/// `--rate-control`: whether a target escalation rate steers tau, and whether what the
/// controller learned carries from one session to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RateControlMode {
    /// The calibrated tau, fixed (the realized share drifts with the text).
    Off,
    /// Steered within each session, each starting at the calibrated tau.
    Session,
    /// Steered, and carried across the sessions of this process.
    Carry,
}

impl RateControlMode {
    /// The controller a session starts with: `carried` (a previous session's, for the same
    /// target) under `carry`, else `fresh`.
    pub fn session(self, fresh: Option<RateControl>, carried: Option<RateControl>) -> Option<RateControl> {
        match (self, fresh, carried) {
            (RateControlMode::Off, _, _) | (_, None, _) => None,
            (RateControlMode::Carry, Some(f), Some(c)) if c.target() == f.target() => Some(c.next_session()),
            (_, Some(f), _) => Some(f),
        }
    }
}

/// Parse a value in [0, 1].
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

/// The trained router `--router` names for this SLM: the shipped one (`default`, when one
/// ships for it), a router file, or none (`confidence`, or `default` for an SLM without one).
/// Returns the model and the name it goes by in reports.
pub fn trained_router(router: &str, slm: &ModelManifest, tokenizer_fingerprint: &str) -> anyhow::Result<Option<(MlpRouterModel, String)>> {
    match router {
        "confidence" => Ok(None),
        "default" => match shipped_router(&slm.id, tokenizer_fingerprint, slm.hidden_size) {
            Some(model) => Ok(Some((model?, shipped_name(&slm.id)))),
            None => {
                tracing::info!(slm = %slm.id, "no trained router ships for this SLM: routing on the SLM's confidence");
                Ok(None)
            }
        },
        path => {
            let path = std::path::Path::new(path);
            let model = MlpRouterModel::load(path)?;
            model.check_compatible(path, &slm.id, tokenizer_fingerprint, slm.hidden_size)?;
            Ok(Some((model, path.display().to_string())))
        }
    }
}

/// The threshold the command line asks for with this router: `--tau`, else `--escalation-rate`
/// (default [`DEFAULT_ESCALATION_RATE`]) through a trained router's calibration table, else
/// 0.5 on the confidence baseline.
pub fn routing_tau(cloud: &CloudArgs, trained: Option<&MlpRouterModel>) -> anyhow::Result<f32> {
    match (cloud.tau, trained, cloud.escalation_rate) {
        (Some(tau), _, _) => Ok(tau),
        (None, Some(m), rate) => Ok(m.meta().calibration.tau_for_rate(rate.unwrap_or(DEFAULT_ESCALATION_RATE))?),
        (None, None, Some(rate)) => anyhow::bail!(
            "--escalation-rate {rate} needs a trained router (--router default or FILE): its calibration table maps rates to tau, and `--router {}` has none",
            cloud.router
        ),
        (None, None, None) => Ok(DEFAULT_CONFIDENCE_TAU),
    }
}

/// The rate controller a session starts from, as the command line asks: one for the target
/// rate (`--escalation-rate`, or its default) when tau comes from a trained router's
/// calibration table, unless `--tau` is given or `--rate-control off`.
pub fn rate_controller(cloud: &CloudArgs, calibration: Option<&Calibration>) -> anyhow::Result<Option<RateControl>> {
    match (cloud.tau, calibration, cloud.rate_control) {
        (None, Some(cal), RateControlMode::Session | RateControlMode::Carry) => {
            Ok(RateControl::for_target(cal, cloud.escalation_rate.unwrap_or(DEFAULT_ESCALATION_RATE))?)
        }
        _ => Ok(None),
    }
}

/// tau of the confidence baseline when none is given: escalate when the SLM's top
/// probability is below one half.
pub const DEFAULT_CONFIDENCE_TAU: f32 = 0.5;

/// The routing policy and threshold the command line asks for (see [`trained_router`] and
/// [`routing_tau`]), and the trained router's calibration table when there is one.
pub fn build_router(cloud: &CloudArgs, lm: &CausalLm, tok: &Tokenizer) -> anyhow::Result<(Box<dyn Router>, f32)> {
    let (router, tau, _) = build_router_with_calibration(cloud, lm, tok)?;
    Ok((router, tau))
}

/// [`build_router`], also returning the trained router's rate → tau table (for servers that
/// take a rate per request).
pub fn build_router_with_calibration(cloud: &CloudArgs, lm: &CausalLm, tok: &Tokenizer) -> anyhow::Result<(Box<dyn Router>, f32, Option<Calibration>)> {
    let trained = trained_router(&cloud.router, lm.manifest(), tok.fingerprint())?;
    let tau = routing_tau(cloud, trained.as_ref().map(|(m, _)| m))?;
    Ok(match trained {
        Some((model, name)) => {
            tracing::info!(router = %name, tau, "trained router loaded");
            let calibration = model.meta().calibration.clone();
            (Box::new(MlpRouter::from_model(model)), tau, Some(calibration))
        }
        None => (Box::new(ConfidenceRouter), tau, None),
    })
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
        server_name: cloud.server_name.clone(),
        insecure: cloud.insecure,
        auth_token: cloud.auth_token.clone(),
        client_identity: match (&cloud.client_cert, &cloud.client_key) {
            (Some(cert), Some(key)) => Some(crate::link::tls::ClientIdentity { cert: cert.clone(), key: key.clone() }),
            _ => None,
        },
        slm_id: slm_id.to_string(),
        cert_poll: Duration::from_millis(cloud.client_cert_poll_ms),
        idle_timeout: Duration::from_millis(cloud.quic_idle_timeout_ms),
        ..LinkConfig::new(gateway, ca_cert, device_id, tok.fingerprint())
    })
}


/// Start the link the command line asks for and wait up to `--connect-wait-ms` for its first
/// connection; what the device knows about the link starts from the gateway's announced
/// service time. An unreachable gateway is not an error: hard tokens fall back until it is up.
pub async fn connect(cloud: &CloudArgs, tok: &Tokenizer, slm_id: &str) -> anyhow::Result<(Link, LinkHealth)> {
    connect_with(cloud, link_config(cloud, tok, slm_id)?).await
}

/// [`connect`] for a long-running process (`serve`): SIGHUP also reloads the client
/// certificate (a one-shot command keeps SIGHUP's default, ending the process).
pub async fn connect_reloading_on_sighup(cloud: &CloudArgs, tok: &Tokenizer, slm_id: &str) -> anyhow::Result<(Link, LinkHealth)> {
    connect_with(cloud, LinkConfig { reload_on_sighup: true, ..link_config(cloud, tok, slm_id)? }).await
}

async fn connect_with(cloud: &CloudArgs, config: LinkConfig) -> anyhow::Result<(Link, LinkHealth)> {
    let gateway = config.gateway.clone();
    let link = Link::start(config)?;
    let service = match link.wait_up(Duration::from_millis(cloud.connect_wait_ms)).await {
        Some(c) => Duration::from_millis(u64::from(c.limits.service_time_ms)),
        None => {
            tracing::warn!("gateway {gateway} not reachable yet; going on (hard tokens fall back until it is)");
            Duration::ZERO
        }
    };
    Ok((link, LinkHealth::new(deadline_policy(cloud), service)))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        cloud: CloudArgs,
    }

    fn cloud(args: &[&str]) -> CloudArgs {
        Cli::parse_from(std::iter::once("x").chain(args.iter().copied())).cloud
    }

    fn calibration() -> Calibration {
        let grid: Vec<f32> = (0..100).map(|i| i as f32 / 100.0).collect();
        Calibration::from_confidences(&grid, &Calibration::default_rates())
    }

    #[test]
    fn the_quic_idle_timeout_is_a_setting_kept_above_the_keep_alives() {
        assert_eq!(cloud(&[]).quic_idle_timeout_ms, 10_000);
        assert_eq!(cloud(&["--quic-idle-timeout-ms", "30000"]).quic_idle_timeout_ms, 30_000);
        let parse = |v: &str| Cli::try_parse_from(["x", "--quic-idle-timeout-ms", v]).map(|c| c.cloud.quic_idle_timeout_ms);
        assert!(parse("3999").is_err(), "within two keep-alives a live connection could time out");
        assert!(parse("600001").is_err());
    }

    #[test]
    fn a_rate_is_steered_by_default_and_an_explicit_tau_never_is() {
        let cal = calibration();
        let c = rate_controller(&cloud(&[]), Some(&cal)).unwrap().expect("the default rate is steered");
        assert_eq!(c.target(), DEFAULT_ESCALATION_RATE);
        assert_eq!(rate_controller(&cloud(&["--escalation-rate", "0.2"]), Some(&cal)).unwrap().map(|c| c.target()), Some(0.2));
        assert!(rate_controller(&cloud(&["--tau", "0.5"]), Some(&cal)).unwrap().is_none());
        assert!(rate_controller(&cloud(&["--rate-control", "off"]), Some(&cal)).unwrap().is_none());
        assert!(rate_controller(&cloud(&[]), None).unwrap().is_none(), "no calibration table, no rate");
        assert!(rate_controller(&cloud(&["--escalation-rate", "0"]), Some(&cal)).unwrap().is_none(), "0 is exact at tau 0");
    }

    #[test]
    fn carry_continues_the_controller_of_the_same_target_and_session_starts_afresh() {
        let cal = calibration();
        let fresh = RateControl::for_target(&cal, 0.1).unwrap();
        let mut used = fresh.unwrap();
        for _ in 0..20 {
            used.observe(0.99, false);
        }
        let carried = Some(used);
        assert_eq!(RateControlMode::Carry.session(fresh, carried).map(|c| c.tau()), Some(used.tau()));
        assert_eq!(RateControlMode::Session.session(fresh, carried), fresh);
        assert_eq!(RateControlMode::Off.session(fresh, carried), None);
        assert_eq!(RateControlMode::Carry.session(None, carried), None, "a fixed tau is never steered");
        let other = RateControl::for_target(&cal, 0.2).unwrap();
        assert_eq!(RateControlMode::Carry.session(other, carried), other, "another target starts afresh");
    }
}
