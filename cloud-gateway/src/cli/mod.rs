//! The binary's flags, in groups that are the sections of [`GatewayConfig`]: `--help` shows
//! them under one heading per section, and `--config FILE` takes a TOML file with one table
//! per section (`[batcher] max-batch = 16`; keys are the flags' long names). Every flag has a
//! `DUET_*` environment twin, for containers and systemd units.
//!
//! Nothing here is a setting of its own: defaults come from [`GatewayConfig::default`] and
//! [`EmbeddedOptions::default`], and every check is [`GatewayConfig::validated`]'s, so the
//! binary, a file, the tests and the load tester agree.

mod groups;
#[cfg(test)]
mod tests;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory, Parser};
use common::config_file::{self, Section};

pub use self::groups::{BatcherArgs, DrainArgs, EmbeddedArgs, EnginesArgs, FleetArgs, IdentityArgs, OverloadArgs, SessionsArgs, TelemetryArgs, TransportArgs};
use crate::batcher::backend::{Backend, DelayBackend, EmbeddedBackend, EmbeddedOptions, RecordingBackend, ReplayBackend};
use crate::config::GatewayConfig;

/// The sections of a `--config` file, each the flags of one help heading.
pub const SECTIONS: &[Section] = &[
    Section { name: "transport", heading: "Transport" },
    Section { name: "identity", heading: "Identity" },
    Section { name: "sessions", heading: "Sessions" },
    Section { name: "embedded", heading: "Embedded LLM" },
    Section { name: "batcher", heading: "Batcher" },
    Section { name: "overload", heading: "Overload" },
    Section { name: "engines", heading: "Engines" },
    Section { name: "drain", heading: "Drain" },
    Section { name: "fleet", heading: "Fleet" },
    Section { name: "telemetry", heading: "Telemetry" },
];

/// Duet cloud gateway: answers escalated tokens from many devices with an LLM (embedded and
/// batched, or external engines).
#[derive(Debug, Clone, Parser)]
#[command(name = "cloud-gateway", version, about, after_help = "Device identity (CA, device certificates, revocation): cloud-gateway ca --help\nRouter bundles and their rollout: cloud-gateway fleet --help")]
pub struct GatewayArgs {
    /// TOML file of settings, one table per section below (`[transport]`, `[identity]`,
    /// `[sessions]`, `[embedded]`, `[batcher]`, `[overload]`, `[engines]`, `[drain]`,
    /// `[fleet]`, `[telemetry]`); keys are the flags' long names (`engine` takes an array). Unknown
    /// sections and keys are refused by name. Flags and DUET_* variables override it.
    #[arg(long, env = "DUET_CONFIG")]
    pub config: Option<PathBuf>,
    /// Check the settings (flags, environment, --config) and print them, then exit without
    /// loading a model or contacting an engine.
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub transport: TransportArgs,
    #[command(flatten)]
    pub identity: IdentityArgs,
    #[command(flatten)]
    pub sessions: SessionsArgs,
    #[command(flatten)]
    pub embedded: EmbeddedArgs,
    #[command(flatten)]
    pub batcher: BatcherArgs,
    #[command(flatten)]
    pub overload: OverloadArgs,
    #[command(flatten)]
    pub engines: EnginesArgs,
    #[command(flatten)]
    pub drain: DrainArgs,
    #[command(flatten)]
    pub fleet: FleetArgs,
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
    /// Deprecation warnings from the `--config` file (keys outside a section), to be logged
    /// once logging is up.
    #[arg(skip)]
    pub config_warnings: Vec<String>,
}

impl GatewayArgs {
    /// Parse `argv` (program name first), applying its `--config FILE` (or `DUET_CONFIG`)
    /// under it.
    pub fn from_argv(argv: Vec<OsString>) -> anyhow::Result<Self> {
        let Some(file) = config_file::find(&argv) else { return Ok(Self::parse_from(argv)) };
        let (argv, warnings) = config_file::expand_sectioned(&Self::command(), argv, &file, SECTIONS)?;
        Ok(Self { config_warnings: warnings, ..Self::parse_from(config_file::strip(argv)) })
    }

    /// The gateway configuration these flags describe, validated (so that a bad flag fails
    /// before the model loads).
    pub fn gateway_config(&self) -> anyhow::Result<GatewayConfig> {
        GatewayConfig {
            transport: self.transport.config()?,
            identity: self.identity.config(),
            sessions: self.sessions.config(),
            batcher: self.batcher.config(),
            overload: self.overload.config(),
            engines: self.engines.config(),
            drain: self.drain.config(),
            fleet: self.fleet.config(),
        }
        .validated()
    }

    /// What `--check` prints: the settings the gateway would run with, one per line.
    pub fn check_report(&self) -> anyhow::Result<String> {
        let mut config = self.gateway_config()?;
        // Secrets are said to be set, never printed.
        for secret in [&mut config.identity.auth_token, &mut config.drain.admin_token] {
            if secret.is_some() {
                *secret = Some("<set>".into());
            }
        }
        let mut out = format!("{config:#?}\n");
        out.push_str(&format!("otlp endpoint: {}\n", self.telemetry.otlp_endpoint.as_deref().unwrap_or("none (or the OTEL_* variables)")));
        if config.engines.pool.engines.is_empty() {
            out.push_str(&format!("{:#?}\n", self.embedded.options()));
        } else {
            let tokenizer = self.engine_tokenizer();
            anyhow::ensure!(tokenizer.exists(), "the devices' tokenizer {} does not exist (--engine-tokenizer)", tokenizer.display());
            out.push_str(&format!("devices' tokenizer: {}\n", tokenizer.display()));
        }
        Ok(out)
    }

    /// The embedded backend's options these flags describe.
    pub fn embedded_options(&self) -> EmbeddedOptions {
        self.embedded.options()
    }

    /// The devices' tokenizer engines are checked against.
    pub fn engine_tokenizer(&self) -> PathBuf {
        crate::engine::connect::tokenizer_path(self.engines.engine_tokenizer.as_deref().unwrap_or(&self.embedded.model))
    }

    /// Load the backend these flags describe: the embedded LLM (recording its answers with
    /// `--record-answers`) or a recording's answers (`--replay-answers`), slowed down by the
    /// `--backend-*delay*` flags if set. Blocking (it loads the model).
    pub fn load_backend(&self) -> anyhow::Result<Box<dyn Backend>> {
        let e = &self.embedded;
        let inner: Box<dyn Backend> = match (&e.replay_answers, &e.record_answers) {
            (Some(file), _) => Box::new(ReplayBackend::open(file)?),
            (None, Some(file)) => Box::new(RecordingBackend::create(EmbeddedBackend::load(&e.options())?, file)?),
            (None, None) => Box::new(EmbeddedBackend::load(&e.options())?),
        };
        let (us, ms) = (Duration::from_micros, Duration::from_millis);
        Ok(match (e.backend_delay_ms, e.backend_token_delay_us, e.backend_draft_token_delay_us) {
            (0, 0, 0) => inner,
            (a, b, c) => Box::new(DelayBackend::new(inner, ms(a)).with_token_delay(us(b)).with_draft_token_delay(us(c))),
        })
    }
}
