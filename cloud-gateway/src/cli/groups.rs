//! The binary's flags in groups, one per section of [`GatewayConfig`] (and of a `--config`
//! file); each group maps itself onto its section. Every flag has a `DUET_*` environment twin.
//! Defaults come from the configuration's own `Default`s, so the binary, the tests and the
//! load tester agree on them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::batcher::backend::EmbeddedOptions;
use crate::config::{BatcherConfig, CertSource, DrainConfig, DraftVerify, EngineAdmission, EnginesConfig, FairShareMode, FleetConfig, GatewayConfig, IdentityConfig, OverloadConfig, RateLimit, SessionsConfig, TransportConfig};
use crate::engine::pool::breaker::BreakerConfig;
use crate::engine::pool::health::HealthConfig;
use crate::engine::pool::pick::{PickPolicy, Routing};
use crate::engine::pool::PoolConfig;
use crate::engine::EngineSpec;

/// An on/off flag (`--fair-line`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    /// On.
    On,
    /// Off.
    Off,
}

fn gateway() -> GatewayConfig {
    GatewayConfig::default()
}

fn embedded() -> EmbeddedOptions {
    EmbeddedOptions::default()
}

fn pool() -> PoolConfig {
    PoolConfig::default()
}

fn default_http_listen() -> String {
    gateway().transport.http_listen.map_or_else(|| "off".to_string(), |a| a.to_string())
}

/// `[transport]`: the QUIC listener, TLS and the HTTP side port.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Transport")]
pub struct TransportArgs {
    /// UDP address for QUIC.
    #[arg(long, env = "DUET_LISTEN", default_value_t = gateway().transport.listen)]
    pub listen: SocketAddr,
    /// TCP address of the HTTP side port (/metrics, /healthz, /readyz); "off" disables it.
    #[arg(long, env = "DUET_HTTP_LISTEN", default_value_t = default_http_listen())]
    pub http_listen: String,
    /// TLS certificate chain (PEM). Without it a self-signed certificate is generated.
    #[arg(long, env = "DUET_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, env = "DUET_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Where to write the self-signed certificate (PEM) for devices' --ca-cert
    /// [default: $DUET_HOME/gateway-cert.pem]. Its key is kept beside it (gateway-key.pem) and
    /// both are reused on restart, so devices that pinned it reconnect.
    #[arg(long, env = "DUET_WRITE_CERT")]
    pub write_cert: Option<PathBuf>,
    /// Largest accepted frame, bytes.
    #[arg(long, env = "DUET_MAX_FRAME_BYTES", default_value_t = gateway().transport.max_frame_bytes)]
    pub max_frame_bytes: usize,
    /// Connected devices at most; beyond it devices are refused as overloaded.
    #[arg(long, env = "DUET_MAX_CONNECTIONS", default_value_t = gateway().transport.max_connections)]
    pub max_connections: usize,
}

impl TransportArgs {
    pub(super) fn config(&self) -> anyhow::Result<TransportConfig> {
        let http_listen = match self.http_listen.as_str() {
            "off" | "" => None,
            s => Some(s.parse().map_err(|e| anyhow::anyhow!("--http-listen `{s}`: {e}"))?),
        };
        let cert = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => CertSource::Files { cert: cert.clone(), key: key.clone() },
            _ => {
                let mut cert = CertSource::self_signed_local();
                if let (CertSource::SelfSigned { write_to, .. }, Some(path)) = (&mut cert, &self.write_cert) {
                    *write_to = Some(path.clone());
                }
                cert
            }
        };
        Ok(TransportConfig { listen: self.listen, http_listen, cert, max_frame_bytes: self.max_frame_bytes, max_connections: self.max_connections, ..TransportConfig::default() })
    }
}

/// `[identity]`: who devices are and how much each may ask.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Identity")]
pub struct IdentityArgs {
    /// Gateway name announced to devices.
    #[arg(long, env = "DUET_GATEWAY_ID", default_value_t = gateway().identity.gateway_id)]
    pub gateway_id: String,
    /// Shared secret devices must present; unset accepts any device. Without --client-ca or
    /// --device-token-secret this is a development mode: any device knowing it may claim any
    /// device id.
    #[arg(long, env = "DUET_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// The fleet CA's certificate (PEM, `cloud-gateway ca init-ca`): devices must present a
    /// certificate it issued (mutual TLS), and their id is the certificate's subject common
    /// name, never what they claim.
    #[arg(long, env = "DUET_CLIENT_CA")]
    pub client_ca: Option<PathBuf>,
    /// File with the secret per-device tokens are issued from (`cloud-gateway ca
    /// init-token-secret`; `ca issue-token` issues one): a device's --auth-token must be the
    /// token of its own id. For devices that cannot hold a certificate.
    #[arg(long, env = "DUET_DEVICE_TOKEN_SECRET", conflicts_with = "client_ca")]
    pub device_token_secret: Option<PathBuf>,
    /// Listen beyond loopback although devices are not verified (no --client-ca or
    /// --device-token-secret): any device may then act as any other. Without it the gateway
    /// refuses to start that way.
    #[arg(long, env = "DUET_INSECURE_UNVERIFIED_DEVICES")]
    pub insecure_unverified_devices: bool,
    /// Deny list: device ids and serial:HEX certificate serials, one per line
    /// (`cloud-gateway ca revoke` appends). Reloaded on change and on SIGHUP; revoked
    /// devices are refused and disconnected.
    #[arg(long, env = "DUET_REVOKED_FILE")]
    pub revoked_file: Option<PathBuf>,
    /// How often the deny list's and the CRLs' files are checked for changes, ms.
    #[arg(long, env = "DUET_REVOKED_POLL_MS", default_value_t = gateway().identity.revoked_poll.as_millis() as u64)]
    pub revoked_poll_ms: u64,
    /// Certificate revocation lists signed by the fleet CA (PEM or DER; `cloud-gateway ca
    /// revoke --crl` writes one), checked in the TLS handshake with --client-ca. Several:
    /// repeat the flag or separate with commas. Reloaded on change and on SIGHUP.
    #[arg(long = "client-crl", env = "DUET_CLIENT_CRL", value_delimiter = ',')]
    pub client_crls: Vec<PathBuf>,
    /// Escalations per second each device may sustain (0 = no limit); beyond it `Busy`.
    #[arg(long, env = "DUET_DEVICE_RATE_LIMIT", default_value_t = gateway().identity.device_rate.per_second)]
    pub device_rate_limit: u32,
    /// Escalations a device may make at once above its rate.
    #[arg(long, env = "DUET_DEVICE_RATE_BURST", default_value_t = gateway().identity.device_rate.burst)]
    pub device_rate_burst: u32,
}

impl IdentityArgs {
    pub(super) fn config(&self) -> IdentityConfig {
        IdentityConfig {
            gateway_id: self.gateway_id.clone(),
            auth_token: self.auth_token.clone(),
            client_ca: self.client_ca.clone(),
            device_token_secret: self.device_token_secret.clone(),
            insecure_unverified_devices: self.insecure_unverified_devices,
            revoked_file: self.revoked_file.clone(),
            revoked_poll: Duration::from_millis(self.revoked_poll_ms),
            client_crls: self.client_crls.clone(),
            device_rate: RateLimit { per_second: self.device_rate_limit, burst: self.device_rate_burst },
        }
    }
}

/// `[sessions]`: sessions per device and their expiry.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Sessions")]
pub struct SessionsArgs {
    /// Sessions one device may hold.
    #[arg(long, env = "DUET_MAX_SESSIONS_PER_DEVICE", default_value_t = gateway().sessions.max_per_device)]
    pub max_sessions_per_device: usize,
    /// Idle seconds after which a session is dropped.
    #[arg(long, env = "DUET_SESSION_IDLE_SECS", default_value_t = gateway().sessions.idle.as_secs())]
    pub session_idle_secs: u64,
}

impl SessionsArgs {
    pub(super) fn config(&self) -> SessionsConfig {
        SessionsConfig { max_per_device: self.max_sessions_per_device, idle: Duration::from_secs(self.session_idle_secs) }
    }
}

/// `[embedded]`: the in-process LLM the batcher serves when no engine is given.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Embedded LLM")]
pub struct EmbeddedArgs {
    /// LLM for the embedded backend: prepared model id or directory.
    #[arg(long, env = "DUET_LLM_MODEL", default_value_t = embedded().model)]
    pub model: String,
    /// ONNX Runtime intra-op threads (0 = all cores).
    #[arg(long, env = "DUET_THREADS", default_value_t = embedded().threads)]
    pub threads: usize,
    /// Longest session context, tokens.
    #[arg(long, env = "DUET_MAX_CONTEXT", default_value_t = embedded().max_context)]
    pub max_context: usize,
    /// Sessions whose LLM KV cache is kept (LRU).
    #[arg(long, env = "DUET_KV_CACHE_SESSIONS", default_value_t = embedded().max_cached_sessions)]
    pub kv_cache_sessions: usize,
    /// Extra service time added to every backend call, ms (simulates a slow or remote LLM).
    #[arg(long, env = "DUET_BACKEND_DELAY_MS", default_value_t = 0)]
    pub backend_delay_ms: u64,
    /// Extra service time per token of prefill, µs (simulates a large LLM's prefill cost).
    #[arg(long, env = "DUET_BACKEND_TOKEN_DELAY_US", default_value_t = 0)]
    pub backend_token_delay_us: u64,
    /// Extra service time per draft token checked, µs (a draft runs in the same pass as the
    /// prefill; simulates a large LLM's cost of checking it).
    #[arg(long, env = "DUET_BACKEND_DRAFT_TOKEN_DELAY_US", default_value_t = 0)]
    pub backend_draft_token_delay_us: u64,
    /// Write every greedy answer of the embedded LLM (and each draft position it accepted) to
    /// this file, for --replay-answers; an existing recording of the same model is extended.
    #[arg(long, env = "DUET_RECORD_ANSWERS", conflicts_with = "replay_answers")]
    pub record_answers: Option<PathBuf>,
    /// Answer from a recording (--record-answers) instead of running the LLM: no model is
    /// loaded, and the --backend-*delay* flags are the service time (a latency-model
    /// projection of another deployment answering with the recorded LLM's tokens). A context
    /// never recorded is answered with an error the device falls back on, logged as a miss.
    #[arg(long, env = "DUET_REPLAY_ANSWERS")]
    pub replay_answers: Option<PathBuf>,
}

impl EmbeddedArgs {
    /// The embedded backend's options.
    pub fn options(&self) -> EmbeddedOptions {
        EmbeddedOptions { model: self.model.clone(), threads: self.threads, max_context: self.max_context, max_cached_sessions: self.kv_cache_sessions }
    }
}

/// `[batcher]`: how escalations are batched for the embedded LLM.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Batcher")]
pub struct BatcherArgs {
    /// Most escalations per backend call (1..=1024).
    #[arg(long, env = "DUET_MAX_BATCH", default_value_t = gateway().batcher.max_batch)]
    pub max_batch: usize,
    /// Longest wait for a batch to fill, milliseconds (at most half a learned backend step).
    #[arg(long, env = "DUET_MAX_WAIT_MS", default_value_t = gateway().batcher.max_wait.as_millis() as u64)]
    pub max_wait_ms: u64,
    /// Escalations queued or running before new ones get `Busy`.
    #[arg(long, env = "DUET_QUEUE_CAPACITY", default_value_t = gateway().batcher.queue_capacity)]
    pub queue_capacity: usize,
}

impl BatcherArgs {
    pub(super) fn config(&self) -> BatcherConfig {
        BatcherConfig { max_batch: self.max_batch, max_wait: Duration::from_millis(self.max_wait_ms), queue_capacity: self.queue_capacity }
    }
}

/// `[overload]`: the bounds that keep the gateway serving under abuse and overload.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Overload")]
pub struct OverloadArgs {
    /// Most tokens of prefill one backend call may cost; a longer prefill runs in steps of
    /// this size between other sessions' batches.
    #[arg(long, env = "DUET_MAX_BATCH_TOKENS", default_value_t = gateway().overload.max_batch_tokens)]
    pub max_batch_tokens: usize,
    /// /readyz turns false after the queue has refused work this long without catching up, ms.
    #[arg(long, env = "DUET_READY_SATURATED_MS", default_value_t = gateway().overload.ready_saturated_after.as_millis() as u64)]
    pub ready_saturated_ms: u64,
    /// /readyz turns false while one backend call has run longer than this, ms.
    #[arg(long, env = "DUET_READY_STALLED_MS", default_value_t = gateway().overload.ready_stalled_after.as_millis() as u64)]
    pub ready_stalled_ms: u64,
    /// Sessions held in all, every device together; beyond it new sessions are refused.
    #[arg(long, env = "DUET_MAX_SESSIONS", default_value_t = gateway().overload.max_sessions)]
    pub max_sessions: usize,
    /// Connections from one IP address at most (raise it to --max-connections behind a NAT or
    /// proxy that hides devices' addresses).
    #[arg(long, env = "DUET_MAX_CONNECTIONS_PER_SOURCE", default_value_t = gateway().overload.max_connections_per_source)]
    pub max_connections_per_source: usize,
    /// A request stream must deliver its frame within this time or it is reset, ms.
    #[arg(long, env = "DUET_STREAM_READ_TIMEOUT_MS", default_value_t = gateway().overload.stream_read_timeout.as_millis() as u64)]
    pub stream_read_timeout_ms: u64,
    /// Bytes one connection may hold in unfinished frames.
    #[arg(long, env = "DUET_MAX_BUFFERED_BYTES_PER_CONNECTION", default_value_t = gateway().overload.max_buffered_bytes_per_connection)]
    pub max_buffered_bytes_per_connection: usize,
    /// Bytes all connections together may hold in unfinished frames.
    #[arg(long, env = "DUET_MAX_BUFFERED_BYTES", default_value_t = gateway().overload.max_buffered_bytes)]
    pub max_buffered_bytes: usize,
    /// Between devices under overload: `device` serves the device served the fewest LLM tokens
    /// first and refuses a device over its share first; `off` serves oldest first.
    #[arg(long, env = "DUET_FAIR_SHARE", value_enum, default_value_t = FairShareMode::Device)]
    pub fair_share: FairShareMode,
    /// How much of each draft the LLM checks: `whole`, or `by-load`, a prefix that shortens
    /// while the queue is older than two batches (verifier time for more devices' hard tokens).
    #[arg(long, env = "DUET_DRAFT_VERIFY", value_enum, default_value_t = gateway().overload.draft_verify)]
    pub draft_verify: DraftVerify,
}

impl OverloadArgs {
    pub(super) fn config(&self) -> OverloadConfig {
        OverloadConfig {
            max_batch_tokens: self.max_batch_tokens,
            ready_saturated_after: Duration::from_millis(self.ready_saturated_ms),
            ready_stalled_after: Duration::from_millis(self.ready_stalled_ms),
            max_sessions: self.max_sessions,
            max_connections_per_source: self.max_connections_per_source,
            stream_read_timeout: Duration::from_millis(self.stream_read_timeout_ms),
            max_buffered_bytes_per_connection: self.max_buffered_bytes_per_connection,
            max_buffered_bytes: self.max_buffered_bytes,
            fair_share: self.fair_share,
            draft_verify: self.draft_verify,
        }
    }
}

/// `[engines]`: external engines instead of the embedded LLM.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Engines")]
pub struct EnginesArgs {
    /// External engine worker, KIND=URL (sglang, vllm or llamacpp), repeatable or
    /// comma-separated; KIND=dns+URL is one worker per address the URL's host resolves to (a
    /// Kubernetes headless Service), re-resolved every --engine-resolve-interval-ms. Without
    /// one the embedded LLM serves.
    #[arg(long = "engine", env = "DUET_ENGINES", value_delimiter = ',')]
    pub engines: Vec<EngineSpec>,
    /// The devices' tokenizer that engines are checked against: tokenizer.json, a directory
    /// holding one, or a prepared model id [default: --model].
    #[arg(long, env = "DUET_ENGINE_TOKENIZER")]
    pub engine_tokenizer: Option<String>,
    /// How long to wait for an engine still loading its model, seconds: at start-up for the
    /// first worker (the gateway serves once one has passed its check), later for each new one.
    #[arg(long, env = "DUET_ENGINE_STARTUP_SECS", default_value_t = gateway().engines.startup_wait.as_secs())]
    pub engine_startup_secs: u64,
    /// How often dns+ engines' names are resolved again (new addresses are checked, then
    /// serve; vanished ones are drained), ms (at least 100).
    #[arg(long, env = "DUET_ENGINE_RESOLVE_INTERVAL_MS", default_value_t = pool().resolve_interval.as_millis() as u64)]
    pub engine_resolve_interval_ms: u64,
    /// How a session's escalations pick a worker: sticky (rendezvous hashing, keeps the
    /// engine's prefix cache) or round-robin (for comparison).
    #[arg(long, env = "DUET_ENGINE_ROUTING", value_enum, default_value_t = Routing::Sticky)]
    pub engine_routing: Routing,
    /// Requests in flight per worker before devices get `Busy`.
    #[arg(long, env = "DUET_ENGINE_MAX_IN_FLIGHT", default_value_t = pool().max_in_flight_per_worker)]
    pub engine_max_in_flight: usize,
    /// Admission to engine workers: `cost` refuses `Busy` at once when no worker's queue (its
    /// requests in flight, in tokens, at its learned time per token) lets an escalation be
    /// answered before its deadline; `off` sends it while a worker has room, to time out.
    #[arg(long, env = "DUET_ENGINE_ADMISSION", value_enum, default_value_t = EngineAdmission::Cost)]
    pub engine_admission: EngineAdmission,
    /// With --fair-share=device: `on` lets a device refused for cost while within its share
    /// wait in line, the head of the line's work kept for it; `off` refuses it like any other
    /// (the default: the line lowers what the engine serves in all).
    #[arg(long, env = "DUET_FAIR_LINE", value_enum, default_value_t = Switch::Off)]
    pub fair_line: Switch,
    /// Attempts per escalation, on different workers, while its deadline allows (1..=16).
    #[arg(long, env = "DUET_ENGINE_MAX_ATTEMPTS", default_value_t = pool().max_attempts)]
    pub engine_max_attempts: u32,
    /// Consecutive failures that open a worker's circuit breaker.
    #[arg(long, env = "DUET_ENGINE_BREAKER_FAILURES", default_value_t = pool().breaker.failure_threshold)]
    pub engine_breaker_failures: u32,
    /// How long an open breaker stays open before a trial request, ms.
    #[arg(long, env = "DUET_ENGINE_BREAKER_OPEN_MS", default_value_t = pool().breaker.open_for.as_millis() as u64)]
    pub engine_breaker_open_ms: u64,
    /// Interval between health checks of each worker, ms.
    #[arg(long, env = "DUET_ENGINE_HEALTH_INTERVAL_MS", default_value_t = pool().health.interval.as_millis() as u64)]
    pub engine_health_interval_ms: u64,
}

impl EnginesArgs {
    pub(super) fn config(&self) -> EnginesConfig {
        let defaults = pool();
        let pool = PoolConfig {
            engines: self.engines.clone(),
            max_in_flight_per_worker: self.engine_max_in_flight,
            admit_by_cost: self.engine_admission.by_cost(),
            fair_line: self.fair_line == Switch::On,
            max_attempts: self.engine_max_attempts,
            pick: PickPolicy { routing: self.engine_routing, ..defaults.pick },
            breaker: BreakerConfig { failure_threshold: self.engine_breaker_failures, open_for: Duration::from_millis(self.engine_breaker_open_ms), ..defaults.breaker },
            health: HealthConfig { interval: Duration::from_millis(self.engine_health_interval_ms), ..defaults.health },
            resolve_interval: Duration::from_millis(self.engine_resolve_interval_ms),
            ..defaults
        };
        EnginesConfig { pool, startup_wait: Duration::from_secs(self.engine_startup_secs) }
    }
}

/// `[drain]`: graceful shutdown.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Drain")]
pub struct DrainArgs {
    /// Longest graceful drain (SIGTERM or POST /drain) from start to exit, seconds. Keep it
    /// below the orchestrator's limit: Kubernetes' terminationGracePeriodSeconds must cover
    /// any preStop sleep + this + a few seconds (the default 20 fits its default 30).
    #[arg(long, env = "DUET_DRAIN_GRACE_SECS", default_value_t = gateway().drain.grace.as_secs())]
    pub drain_grace_secs: u64,
    /// Where a drain sends devices (host:port in GoAway); default: to their own gateway list.
    #[arg(long, env = "DUET_DRAIN_REDIRECT")]
    pub drain_redirect: Option<String>,
    /// Bearer token for the HTTP side port's POST /drain; without one /drain is refused.
    #[arg(long, env = "DUET_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
}

impl DrainArgs {
    pub(super) fn config(&self) -> DrainConfig {
        DrainConfig { grace: Duration::from_secs(self.drain_grace_secs), redirect: self.drain_redirect.clone(), admin_token: self.admin_token.clone() }
    }
}

/// `[fleet]`: router rollout (the bundle store) and the operator's fleet view.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Fleet")]
pub struct FleetArgs {
    /// Bundle store directory (rollout.json, bundles/), written by `cloud-gateway fleet publish`
    /// and shared by every replica (a volume); without it no bundles are offered.
    #[arg(long, env = "DUET_BUNDLE_STORE")]
    pub bundle_store: Option<PathBuf>,
    /// How often the bundle store is re-read, ms.
    #[arg(long, env = "DUET_BUNDLE_POLL_MS", default_value_t = gateway().fleet.bundle_poll.as_millis() as u64)]
    pub bundle_poll_ms: u64,
    /// File holding the bearer token of the side port's GET /v1/fleet; without it /v1/fleet
    /// is refused.
    #[arg(long, env = "DUET_OPERATOR_TOKEN_FILE")]
    pub operator_token_file: Option<PathBuf>,
}

impl FleetArgs {
    pub(super) fn config(&self) -> FleetConfig {
        FleetConfig { bundle_store: self.bundle_store.clone(), bundle_poll: Duration::from_millis(self.bundle_poll_ms), operator_token_file: self.operator_token_file.clone() }
    }
}

/// `[telemetry]`: logs and traces.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Telemetry")]
pub struct TelemetryArgs {
    /// Log filter (tracing EnvFilter syntax).
    #[arg(long, env = "DUET_LOG", default_value = "info")]
    pub log: String,
    /// Export traces (per escalation: decode/validate, queue wait, batch, backend call, under
    /// the device's span when it sent its trace context) over OTLP/HTTP to this collector,
    /// e.g. http://127.0.0.1:4318. Off by default; the standard OTEL_* variables apply too
    /// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER(_ARG), ...).
    #[arg(long, env = "DUET_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
}
