//! The binary's flags (every one has a `DUET_*` environment twin, for containers and systemd
//! units), mapped onto [`GatewayConfig`] and the embedded backend's options.
//!
//! Nothing here is a setting of its own: defaults come from [`GatewayConfig::default`] and
//! [`EmbeddedOptions::default`], so the binary, the tests and the load tester agree on them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::batcher::backend::{Backend, DelayBackend, EmbeddedBackend, EmbeddedOptions};
use crate::config::{BatcherConfig, CertSource, GatewayConfig, OverloadConfig, RateLimit};
use crate::engine::pool::breaker::BreakerConfig;
use crate::engine::pool::health::HealthConfig;
use crate::engine::pool::pick::{PickPolicy, Routing};
use crate::engine::pool::PoolConfig;
use crate::engine::EngineSpec;

fn gateway() -> GatewayConfig {
    GatewayConfig::default()
}

fn overload() -> OverloadConfig {
    OverloadConfig::default()
}

fn embedded() -> EmbeddedOptions {
    EmbeddedOptions::default()
}

fn pool() -> PoolConfig {
    PoolConfig::default()
}

fn default_http_listen() -> String {
    gateway().http_listen.map_or_else(|| "off".to_string(), |a| a.to_string())
}

/// Duet cloud gateway: batches escalated tokens from many devices into the LLM.
#[derive(Debug, Clone, Parser)]
#[command(name = "cloud-gateway", version, about, after_help = "Fleet identity (CA, device certificates, revocation): cloud-gateway ca --help")]
pub struct GatewayArgs {
    /// UDP address for QUIC.
    #[arg(long, env = "DUET_LISTEN", default_value_t = gateway().listen)]
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
    /// Shared secret devices must present; unset accepts any device. Without --client-ca
    /// this is a development mode: any device knowing it may claim any device id.
    #[arg(long, env = "DUET_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// The fleet CA's certificate (PEM, `cloud-gateway ca init-ca`): devices must present a
    /// certificate it issued (mutual TLS), and their id is the certificate's subject common
    /// name, never what they claim.
    #[arg(long, env = "DUET_CLIENT_CA")]
    pub client_ca: Option<PathBuf>,
    /// Deny list: device ids and serial:HEX certificate serials, one per line
    /// (`cloud-gateway ca revoke` appends). Reloaded on change and on SIGHUP; revoked
    /// devices are refused and disconnected.
    #[arg(long, env = "DUET_REVOKED_FILE")]
    pub revoked_file: Option<PathBuf>,
    /// How often the deny list's file is checked for changes, ms.
    #[arg(long, env = "DUET_REVOKED_POLL_MS", default_value_t = gateway().revoked_poll.as_millis() as u64)]
    pub revoked_poll_ms: u64,
    /// Escalations per second each device may sustain (0 = no limit); beyond it `Busy`.
    #[arg(long, env = "DUET_DEVICE_RATE_LIMIT", default_value_t = gateway().device_rate.per_second)]
    pub device_rate_limit: u32,
    /// Escalations a device may make at once above its rate.
    #[arg(long, env = "DUET_DEVICE_RATE_BURST", default_value_t = gateway().device_rate.burst)]
    pub device_rate_burst: u32,
    /// Gateway name announced to devices.
    #[arg(long, env = "DUET_GATEWAY_ID", default_value_t = gateway().gateway_id)]
    pub gateway_id: String,
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
    /// Most escalations per backend call.
    #[arg(long, env = "DUET_MAX_BATCH", default_value_t = gateway().batcher.max_batch as u32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_batch: u32,
    /// Longest wait for a batch to fill, milliseconds.
    #[arg(long, env = "DUET_MAX_WAIT_MS", default_value_t = gateway().batcher.max_wait.as_millis() as u64)]
    pub max_wait_ms: u64,
    /// Escalations queued or running before new ones get `Busy`.
    #[arg(long, env = "DUET_QUEUE_CAPACITY", default_value_t = gateway().batcher.queue_capacity)]
    pub queue_capacity: usize,
    /// Largest accepted frame, bytes.
    #[arg(long, env = "DUET_MAX_FRAME_BYTES", default_value_t = gateway().max_frame_bytes)]
    pub max_frame_bytes: usize,
    /// Sessions one device may hold.
    #[arg(long, env = "DUET_MAX_SESSIONS_PER_DEVICE", default_value_t = gateway().max_sessions_per_device)]
    pub max_sessions_per_device: usize,
    /// Connected devices at most; beyond it devices are refused as overloaded.
    #[arg(long, env = "DUET_MAX_CONNECTIONS", default_value_t = gateway().max_connections)]
    pub max_connections: usize,
    /// Idle seconds after which a session is dropped.
    #[arg(long, env = "DUET_SESSION_IDLE_SECS", default_value_t = gateway().session_idle.as_secs())]
    pub session_idle_secs: u64,
    /// Extra service time added to every backend call, ms (simulates a slow or remote LLM).
    #[arg(long, env = "DUET_BACKEND_DELAY_MS", default_value_t = 0)]
    pub backend_delay_ms: u64,
    /// Extra service time per token of prefill, µs (simulates a large LLM's prefill cost).
    #[arg(long, env = "DUET_BACKEND_TOKEN_DELAY_US", default_value_t = 0)]
    pub backend_token_delay_us: u64,
    /// Most tokens of prefill one backend call may cost; a longer prefill runs in steps of
    /// this size between other sessions' batches.
    #[arg(long, env = "DUET_MAX_BATCH_TOKENS", default_value_t = overload().max_batch_tokens)]
    pub max_batch_tokens: usize,
    /// /readyz turns false after the queue has refused work this long without catching up, ms.
    #[arg(long, env = "DUET_READY_SATURATED_MS", default_value_t = overload().ready_saturated_after.as_millis() as u64)]
    pub ready_saturated_ms: u64,
    /// /readyz turns false while one backend call has run longer than this, ms.
    #[arg(long, env = "DUET_READY_STALLED_MS", default_value_t = overload().ready_stalled_after.as_millis() as u64)]
    pub ready_stalled_ms: u64,
    /// Sessions held in all, every device together; beyond it new sessions are refused.
    #[arg(long, env = "DUET_MAX_SESSIONS", default_value_t = overload().max_sessions)]
    pub max_sessions: usize,
    /// Connections from one IP address at most (raise it to --max-connections behind a NAT or
    /// proxy that hides devices' addresses).
    #[arg(long, env = "DUET_MAX_CONNECTIONS_PER_SOURCE", default_value_t = overload().max_connections_per_source)]
    pub max_connections_per_source: usize,
    /// A request stream must deliver its frame within this time or it is reset, ms.
    #[arg(long, env = "DUET_STREAM_READ_TIMEOUT_MS", default_value_t = overload().stream_read_timeout.as_millis() as u64)]
    pub stream_read_timeout_ms: u64,
    /// Bytes one connection may hold in unfinished frames.
    #[arg(long, env = "DUET_MAX_BUFFERED_BYTES_PER_CONNECTION", default_value_t = overload().max_buffered_bytes_per_connection)]
    pub max_buffered_bytes_per_connection: usize,
    /// Bytes all connections together may hold in unfinished frames.
    #[arg(long, env = "DUET_MAX_BUFFERED_BYTES", default_value_t = overload().max_buffered_bytes)]
    pub max_buffered_bytes: usize,
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
    #[arg(long, env = "DUET_ENGINE_STARTUP_SECS", default_value_t = 300)]
    pub engine_startup_secs: u64,
    /// How often dns+ engines' names are resolved again (new addresses are checked, then
    /// serve; vanished ones are drained), ms.
    #[arg(long, env = "DUET_ENGINE_RESOLVE_INTERVAL_MS", default_value_t = pool().resolve_interval.as_millis() as u64, value_parser = clap::value_parser!(u64).range(100..))]
    pub engine_resolve_interval_ms: u64,
    /// How a session's escalations pick a worker: sticky (rendezvous hashing, keeps the
    /// engine's prefix cache) or round-robin (for comparison).
    #[arg(long, env = "DUET_ENGINE_ROUTING", default_value = "sticky", value_parser = ["sticky", "round-robin"])]
    pub engine_routing: String,
    /// Requests in flight per worker before devices get `Busy`.
    #[arg(long, env = "DUET_ENGINE_MAX_IN_FLIGHT", default_value_t = pool().max_in_flight_per_worker)]
    pub engine_max_in_flight: usize,
    /// Attempts per escalation, on different workers, while its deadline allows.
    #[arg(long, env = "DUET_ENGINE_MAX_ATTEMPTS", default_value_t = pool().max_attempts, value_parser = clap::value_parser!(u32).range(1..=16))]
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
    /// Longest graceful drain (SIGTERM or POST /drain) from start to exit, seconds. Keep it
    /// below the orchestrator's limit: Kubernetes' terminationGracePeriodSeconds must cover
    /// any preStop sleep + this + a few seconds (the default 20 fits its default 30).
    #[arg(long, env = "DUET_DRAIN_GRACE_SECS", default_value_t = gateway().drain_grace.as_secs())]
    pub drain_grace_secs: u64,
    /// Where a drain sends devices (host:port in GoAway); default: to their own gateway list.
    #[arg(long, env = "DUET_DRAIN_REDIRECT")]
    pub drain_redirect: Option<String>,
    /// Bearer token for the HTTP side port's POST /drain; without one /drain is refused.
    #[arg(long, env = "DUET_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// TOML file of settings: keys are these flags' long names (`engine` takes an array);
    /// unknown keys are refused by name. Flags and DUET_* variables override it.
    #[arg(long, env = "DUET_CONFIG")]
    pub config: Option<PathBuf>,
    /// Check the settings (flags, environment, --config) and print them, then exit without
    /// loading a model or contacting an engine.
    #[arg(long)]
    pub check: bool,
    /// Log filter (tracing EnvFilter syntax).
    #[arg(long, env = "DUET_LOG", default_value = "info")]
    pub log: String,
    /// Export traces (per escalation: decode/validate, queue wait, batch, backend call, under
    /// the device's span when it sent its trace context) over OTLP/HTTP to this collector,
    /// e.g. http://127.0.0.1:4318. Off by default; the standard OTEL_* variables apply too
    /// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER[_ARG], ...).
    #[arg(long, env = "DUET_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
}

impl GatewayArgs {
    /// Parse the process's arguments, applying `--config FILE` (or `DUET_CONFIG`) under them.
    pub fn from_env() -> anyhow::Result<Self> {
        Self::from_argv(std::env::args_os().collect())
    }

    /// Parse `argv` (program name first), applying its `--config FILE` under it.
    pub fn from_argv(argv: Vec<std::ffi::OsString>) -> anyhow::Result<Self> {
        use clap::CommandFactory;
        Ok(match common::config_file::find(&argv) {
            Some(file) => Self::parse_from(common::config_file::strip(common::config_file::expand(&Self::command(), argv, &file)?)),
            None => Self::parse_from(argv),
        })
    }

    /// What `--check` prints: the settings the gateway would run with, one per line.
    pub fn check_report(&self) -> anyhow::Result<String> {
        let mut config = self.gateway_config()?;
        // Secrets are said to be set, never printed.
        for secret in [&mut config.auth_token, &mut config.admin_token] {
            if secret.is_some() {
                *secret = Some("<set>".into());
            }
        }
        let pool = self.pool_config();
        let mut out = format!("{config:#?}\n");
        out.push_str(&format!("otlp endpoint: {}\n", self.otlp_endpoint.as_deref().unwrap_or("none (or the OTEL_* variables)")));
        if pool.engines.is_empty() {
            out.push_str(&format!("{:#?}\n", self.embedded_options()));
        } else {
            let tokenizer = self.engine_tokenizer();
            anyhow::ensure!(tokenizer.exists(), "the devices' tokenizer {} does not exist (--engine-tokenizer)", tokenizer.display());
            out.push_str(&format!("{pool:#?}\ndevices' tokenizer: {}\n", tokenizer.display()));
        }
        Ok(out)
    }

    /// The gateway configuration these flags describe, validated (so that a bad flag fails
    /// before the model loads).
    pub fn gateway_config(&self) -> anyhow::Result<GatewayConfig> {
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
        anyhow::ensure!(self.queue_capacity > 0, "--queue-capacity must be > 0");
        GatewayConfig {
            listen: self.listen,
            http_listen,
            cert,
            auth_token: self.auth_token.clone(),
            client_ca: self.client_ca.clone(),
            revoked_file: self.revoked_file.clone(),
            revoked_poll: Duration::from_millis(self.revoked_poll_ms),
            device_rate: RateLimit { per_second: self.device_rate_limit, burst: self.device_rate_burst },
            gateway_id: self.gateway_id.clone(),
            max_frame_bytes: self.max_frame_bytes,
            max_sessions_per_device: self.max_sessions_per_device,
            max_connections: self.max_connections,
            session_idle: Duration::from_secs(self.session_idle_secs),
            drain_grace: Duration::from_secs(self.drain_grace_secs),
            drain_redirect: self.drain_redirect.clone(),
            admin_token: self.admin_token.clone(),
            batcher: BatcherConfig {
                max_batch: self.max_batch as usize,
                max_wait: Duration::from_millis(self.max_wait_ms),
                queue_capacity: self.queue_capacity,
            },
            overload: OverloadConfig {
                max_batch_tokens: self.max_batch_tokens,
                ready_saturated_after: Duration::from_millis(self.ready_saturated_ms),
                ready_stalled_after: Duration::from_millis(self.ready_stalled_ms),
                max_sessions: self.max_sessions,
                max_connections_per_source: self.max_connections_per_source,
                stream_read_timeout: Duration::from_millis(self.stream_read_timeout_ms),
                max_buffered_bytes_per_connection: self.max_buffered_bytes_per_connection,
                max_buffered_bytes: self.max_buffered_bytes,
            },
            ..gateway()
        }
        .validated()
    }

    /// The embedded backend's options these flags describe.
    pub fn embedded_options(&self) -> EmbeddedOptions {
        EmbeddedOptions {
            model: self.model.clone(),
            threads: self.threads,
            max_context: self.max_context,
            max_cached_sessions: self.kv_cache_sessions,
        }
    }

    /// The engine pool these flags describe (its `engines` empty when none was given).
    pub fn pool_config(&self) -> PoolConfig {
        let defaults = pool();
        PoolConfig {
            engines: self.engines.clone(),
            max_in_flight_per_worker: self.engine_max_in_flight.max(1),
            max_attempts: self.engine_max_attempts,
            pick: PickPolicy { routing: if self.engine_routing == "round-robin" { Routing::RoundRobin } else { Routing::Sticky }, ..defaults.pick },
            breaker: BreakerConfig { failure_threshold: self.engine_breaker_failures.max(1), open_for: Duration::from_millis(self.engine_breaker_open_ms), ..defaults.breaker },
            health: HealthConfig { interval: Duration::from_millis(self.engine_health_interval_ms.max(50)), ..defaults.health },
            resolve_interval: Duration::from_millis(self.engine_resolve_interval_ms),
            ..defaults
        }
    }

    /// The devices' tokenizer engines are checked against.
    pub fn engine_tokenizer(&self) -> std::path::PathBuf {
        crate::engine::connect::tokenizer_path(self.engine_tokenizer.as_deref().unwrap_or(&self.model))
    }

    /// Load the backend these flags describe: the embedded LLM, slowed down by
    /// `--backend-delay-ms` if set. Blocking (it loads the model).
    pub fn load_backend(&self) -> anyhow::Result<Box<dyn Backend>> {
        let embedded = EmbeddedBackend::load(&self.embedded_options())?;
        Ok(match (self.backend_delay_ms, self.backend_token_delay_us) {
            (0, 0) => Box::new(embedded),
            (ms, us) => Box::new(DelayBackend::new(embedded, Duration::from_millis(ms)).with_token_delay(Duration::from_micros(us))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_flags_mean_the_default_configuration() {
        let args = GatewayArgs::parse_from(["cloud-gateway"]);
        assert_eq!(args.gateway_config().unwrap(), GatewayConfig::default());
        let opts = args.embedded_options();
        let defaults = EmbeddedOptions::default();
        assert_eq!((opts.model, opts.threads, opts.max_context, opts.max_cached_sessions), (defaults.model, defaults.threads, defaults.max_context, defaults.max_cached_sessions));
    }

    #[test]
    fn flags_map_onto_the_configuration() {
        let args = GatewayArgs::parse_from([
            "cloud-gateway",
            "--listen=0.0.0.0:5000",
            "--http-listen=off",
            "--tls-cert=c.pem",
            "--tls-key=k.pem",
            "--auth-token=sesame",
            "--max-batch=4",
            "--max-wait-ms=7",
            "--queue-capacity=9",
            "--max-connections=2",
            "--drain-grace-secs=45",
            "--drain-redirect=gw-b:4433",
            "--admin-token=root",
            "--client-ca=fleet/ca-cert.pem",
            "--revoked-file=revoked.txt",
            "--revoked-poll-ms=250",
            "--device-rate-limit=20",
            "--device-rate-burst=40",
        ]);
        let c = args.gateway_config().unwrap();
        assert_eq!(c.listen.to_string(), "0.0.0.0:5000");
        assert_eq!(c.http_listen, None);
        assert_eq!(c.cert, CertSource::Files { cert: "c.pem".into(), key: "k.pem".into() });
        assert_eq!(c.auth_token.as_deref(), Some("sesame"));
        assert_eq!(c.batcher, BatcherConfig { max_batch: 4, max_wait: Duration::from_millis(7), queue_capacity: 9 });
        assert_eq!(c.max_connections, 2);
        assert_eq!((c.drain_grace, c.drain_redirect.as_deref(), c.admin_token.as_deref()), (Duration::from_secs(45), Some("gw-b:4433"), Some("root")));
        assert_eq!((c.client_ca.as_deref(), c.revoked_file.as_deref()), (Some(std::path::Path::new("fleet/ca-cert.pem")), Some(std::path::Path::new("revoked.txt"))));
        assert_eq!((c.revoked_poll, c.device_rate), (Duration::from_millis(250), RateLimit { per_second: 20, burst: 40 }));
        assert!(GatewayArgs::parse_from(["cloud-gateway", "--queue-capacity=0"]).gateway_config().is_err());
    }

    #[test]
    fn overload_flags_map_onto_the_configuration() {
        let args = GatewayArgs::parse_from([
            "cloud-gateway",
            "--max-batch-tokens=64",
            "--ready-saturated-ms=1500",
            "--ready-stalled-ms=9000",
            "--max-sessions=1000",
            "--max-connections-per-source=8",
            "--stream-read-timeout-ms=2500",
            "--max-buffered-bytes-per-connection=200000",
            "--max-buffered-bytes=9000000",
        ]);
        let o = args.gateway_config().unwrap().overload;
        assert_eq!((o.max_batch_tokens, o.max_sessions, o.max_connections_per_source), (64, 1000, 8));
        assert_eq!((o.ready_saturated_after, o.ready_stalled_after, o.stream_read_timeout), (Duration::from_millis(1500), Duration::from_secs(9), Duration::from_millis(2500)));
        assert_eq!((o.max_buffered_bytes_per_connection, o.max_buffered_bytes), (200_000, 9_000_000));
        let tiny = GatewayArgs::parse_from(["cloud-gateway", "--max-buffered-bytes-per-connection=1"]).gateway_config().unwrap().overload;
        assert!(tiny.max_buffered_bytes_per_connection > GatewayConfig::default().max_frame_bytes, "one frame always fits");
    }

    #[test]
    fn a_config_file_sets_any_flag_and_the_command_line_wins() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("gateway.toml");
        std::fs::write(&f, "engine = [\"llamacpp=http://a:1\", \"llamacpp=http://b:1\"]\nmax-batch = 4\nhttp-listen = \"off\"\nengine-routing = \"round-robin\"\n").unwrap();
        let argv = |extra: &[&str]| -> Vec<std::ffi::OsString> { ["cloud-gateway", "--config", f.to_str().unwrap()].iter().chain(extra).map(Into::into).collect() };
        let args = GatewayArgs::from_argv(argv(&["--max-batch=2"])).unwrap();
        assert_eq!(args.pool_config().engines.len(), 2);
        assert_eq!(args.pool_config().pick.routing, Routing::RoundRobin);
        let c = args.gateway_config().unwrap();
        assert_eq!((c.batcher.max_batch, c.http_listen), (2, None));
        std::fs::write(&f, "max_batch = 4\n").unwrap();
        let err = GatewayArgs::from_argv(argv(&[])).unwrap_err().to_string();
        assert!(err.contains("unknown key `max_batch`") && err.contains("max-batch"), "{err}");
    }

    #[test]
    fn engine_flags_map_onto_the_pool_and_a_bad_engine_is_refused_by_name() {
        let args = GatewayArgs::parse_from([
            "cloud-gateway",
            "--engine=llamacpp=http://a:1",
            "--engine",
            "sglang=http://b:2/,vllm=https://c:3",
            "--engine-routing=round-robin",
            "--engine-max-in-flight=3",
            "--engine-breaker-failures=7",
            "--engine-breaker-open-ms=900",
            "--engine-resolve-interval-ms=2500",
        ]);
        let p = args.pool_config();
        let urls: Vec<String> = p.engines.iter().map(|e| e.to_string()).collect();
        assert_eq!(urls, ["llamacpp=http://a:1", "sglang=http://b:2", "vllm=https://c:3"]);
        assert_eq!((p.pick.routing, p.max_in_flight_per_worker), (Routing::RoundRobin, 3));
        assert_eq!((p.breaker.failure_threshold, p.breaker.open_for), (7, Duration::from_millis(900)));
        assert_eq!(p.resolve_interval, Duration::from_millis(2500));
        assert_eq!(GatewayArgs::parse_from(["cloud-gateway"]).pool_config().resolve_interval, PoolConfig::default().resolve_interval);
        let discovered = GatewayArgs::parse_from(["cloud-gateway", "--engine=llamacpp=dns+http://duet-llama:8080"]).pool_config();
        assert!(discovered.engines[0].discover, "dns+ asks for discovery");
        assert!(GatewayArgs::parse_from(["cloud-gateway"]).pool_config().engines.is_empty(), "no engine: the embedded LLM");
        let err = GatewayArgs::try_parse_from(["cloud-gateway", "--engine=tgi=http://x:1"]).unwrap_err().to_string();
        assert!(err.contains("unknown engine `tgi`"), "{err}");
    }
}
