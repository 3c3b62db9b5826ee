//! Every setting of a gateway, in sections: [`GatewayConfig`] holds one struct per part of the
//! gateway (transport, identity, sessions, batcher, overload, engines, drain, fleet), which is also
//! how the binary's flags are grouped in `--help` and how `--config FILE` is laid out
//! (`[batcher] max-batch = 16`; see [`crate::cli`]).
//!
//! Tests and the load tester write `GatewayConfig { batcher: .., ..GatewayConfig::default() }`
//! directly, so there is one definition of each setting and of its default. The defaults run a
//! gateway on one machine: loopback addresses and a self-signed certificate written where a
//! local edge node looks for it. [`GatewayConfig::validated`] (`validate.rs`) is the one place
//! values are refused or brought into range; what connections derive from the settings
//! together with the model's facts is computed once, in [`crate::state::Shared::new`].

mod validate;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use common::protocol::DEFAULT_MAX_FRAME_BYTES;
use model_runtime::model_files::duet_home;

pub use crate::dispatch::draft::DraftVerify;
pub use crate::dispatch::fair::FairShareMode;
pub use crate::engine::pool::PoolConfig;
pub use crate::identity::rate::RateLimit;
pub use crate::identity::IdentityConfig;

/// Everything needed to run a gateway, apart from its LLM (an embedded backend, or engines
/// found with [`EnginesConfig`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GatewayConfig {
    /// QUIC listener, TLS, HTTP side port, connection limits.
    pub transport: TransportConfig,
    /// Who devices are, and how much each may ask.
    pub identity: IdentityConfig,
    /// Sessions per device and their idle expiry.
    pub sessions: SessionsConfig,
    /// Batching and the queue's capacity (the embedded LLM path).
    pub batcher: BatcherConfig,
    /// Bounds under abuse and overload (cost cap, readiness, totals, per-source, buffers).
    pub overload: OverloadConfig,
    /// External engines (the other LLM path), when configured.
    pub engines: EnginesConfig,
    /// Graceful drain.
    pub drain: DrainConfig,
    /// Router rollout: the bundle store and the operator's fleet view.
    pub fleet: FleetConfig,
}

/// Where the QUIC listener's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertSource {
    /// PEM files (chain and private key): production, where devices trust a real CA.
    Files {
        /// Certificate chain (PEM).
        cert: PathBuf,
        /// Private key (PEM).
        key: PathBuf,
    },
    /// Generate a self-signed certificate for these names (development); its PEM is written
    /// to `write_to` so that devices can pin it with `--ca-cert`.
    SelfSigned {
        /// DNS names and IP addresses the certificate covers.
        names: Vec<String>,
        /// Where to write the certificate's PEM, if anywhere.
        write_to: Option<PathBuf>,
    },
}

impl CertSource {
    /// The development default: a self-signed certificate for loopback, written to
    /// `$DUET_HOME/gateway-cert.pem`, where a local edge node finds it without flags.
    pub fn self_signed_local() -> Self {
        Self::SelfSigned { names: vec!["localhost".into(), "127.0.0.1".into()], write_to: Some(duet_home().join("gateway-cert.pem")) }
    }
}

/// The QUIC listener and the HTTP side port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportConfig {
    /// UDP address of the QUIC listener.
    pub listen: SocketAddr,
    /// TCP address of the HTTP side port (`/metrics`, `/healthz`, `/readyz`); `None` = off.
    pub http_listen: Option<SocketAddr>,
    /// TLS certificate source.
    pub cert: CertSource,
    /// Largest accepted frame payload, bytes; bounds what one stream can make us buffer.
    pub max_frame_bytes: usize,
    /// Most connected devices; beyond it a device is refused with `Reject { Overloaded }`.
    pub max_connections: usize,
    /// QUIC idle timeout (devices keep alive below it).
    pub idle_timeout: Duration,
}

impl Default for TransportConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 4433)),
            http_listen: Some(SocketAddr::from((Ipv4Addr::LOCALHOST, 9464))),
            cert: CertSource::self_signed_local(),
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_connections: 10_000,
            idle_timeout: Duration::from_secs(30),
        }
    }
}

/// The session store's per-device bound and expiry (its total bound is an overload bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionsConfig {
    /// Most sessions one device may hold; bounds one device's share of the session store.
    pub max_per_device: usize,
    /// Sessions idle this long are dropped (a device that vanished frees its memory).
    pub idle: Duration,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        Self { max_per_device: 64, idle: Duration::from_secs(300) }
    }
}

/// How escalations are gathered into backend calls, and how many may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatcherConfig {
    /// Most escalations per backend call.
    pub max_batch: usize,
    /// Longest an escalation waits for others before its batch is cut: the latency a device
    /// pays for batching when traffic is light. The batcher waits at most half a backend step
    /// of it (`batcher::queue::batch_window`), and not at all once the tokens waiting fill a
    /// batch.
    pub max_wait: Duration,
    /// Most escalations queued or running; beyond it devices get `Busy` at once instead of
    /// waiting out their deadlines.
    pub queue_capacity: usize,
}

impl Default for BatcherConfig {
    fn default() -> Self {
        Self { max_batch: 16, max_wait: Duration::from_millis(3), queue_capacity: 256 }
    }
}

/// The bounds that keep a gateway serving under abuse and overload, beyond the queue's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverloadConfig {
    /// Most tokens of prefill one backend call may cost: a longer prefill runs in steps of
    /// this size between other sessions' batches, so one long `Full` cannot stall everyone.
    pub max_batch_tokens: usize,
    /// `/readyz` turns false once the batcher has refused work for this long without
    /// catching up since.
    pub ready_saturated_after: Duration,
    /// `/readyz` turns false while one backend call has run for longer than this.
    pub ready_stalled_after: Duration,
    /// Most sessions held in all (every device together); beyond it a new session is refused
    /// with `TooManySessions` (the per-device limit alone is bypassed by inventing ids).
    pub max_sessions: usize,
    /// Most connections (handshaking or connected) from one IP address; beyond it the
    /// address's new connections are refused at the QUIC level. Behind a proxy or NAT that
    /// hides devices' addresses, raise it to the connection limit.
    pub max_connections_per_source: usize,
    /// A request stream must deliver its frame within this time, or it is reset (a partial
    /// frame cannot pin memory).
    pub stream_read_timeout: Duration,
    /// Most bytes one connection may hold in unfinished frames; a stream that would exceed it
    /// is reset.
    pub max_buffered_bytes_per_connection: usize,
    /// Most bytes every connection together may hold in unfinished frames.
    pub max_buffered_bytes: usize,
    /// Share the LLM fairly between devices when more work waits than it can run at once:
    /// the device served the fewest LLM tokens goes next, and a device over its share hears
    /// `Busy` first (`dispatch::fair`). Off: oldest first, every device's work weighed alike.
    /// Both LLM paths read it here: the batcher and the engine pool.
    pub fair_share: FairShareMode,
    /// How much of each draft the LLM checks: all of it, or a prefix that shortens while the
    /// queue is older than two batches (`dispatch::draft::verify_len`): under load, verifier
    /// time goes to more devices' hard tokens instead of one device's draft tail.
    pub draft_verify: DraftVerify,
}

impl Default for OverloadConfig {
    fn default() -> Self {
        Self {
            max_batch_tokens: 32,
            ready_saturated_after: Duration::from_secs(2),
            ready_stalled_after: Duration::from_secs(15),
            max_sessions: 16_384,
            max_connections_per_source: 1_024,
            stream_read_timeout: Duration::from_secs(10),
            max_buffered_bytes_per_connection: 1 << 20,
            max_buffered_bytes: 256 << 20,
            fair_share: FairShareMode::Device,
            draft_verify: DraftVerify::Whole,
        }
    }
}

/// `--engine-admission`: what refuses an escalation to the engine workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[value(rename_all = "kebab-case")]
pub enum EngineAdmission {
    /// `Busy` at once when no worker's queue lets the escalation be answered before its deadline.
    #[default]
    Cost,
    /// Sent while a worker has room (the in-flight bound alone), to time out.
    Off,
}

impl EngineAdmission {
    /// Whether escalations are admitted by their cost.
    pub fn by_cost(self) -> bool {
        self == Self::Cost
    }
}

/// External engines: the pool's settings, and how long start-up waits for them.
#[derive(Debug, Clone, PartialEq)]
pub struct EnginesConfig {
    /// The workers and the pool's policies (`pool.engines` empty: the embedded LLM serves).
    pub pool: PoolConfig,
    /// How long to wait for an engine still loading its model: at start-up for the first
    /// worker, later for each new one.
    pub startup_wait: Duration,
}

impl Default for EnginesConfig {
    fn default() -> Self {
        Self { pool: PoolConfig::default(), startup_wait: Duration::from_secs(300) }
    }
}

/// How the gateway drains (SIGTERM, `POST /drain`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainConfig {
    /// How long a graceful drain may take, start to exit: set the orchestrator's own limit
    /// above it (Kubernetes: `terminationGracePeriodSeconds` ≥ a preStop sleep + this + a few
    /// seconds), or it kills the process mid-drain.
    pub grace: Duration,
    /// Where a drain sends devices (`GoAway`'s redirect, `host:port`); `None` = to their own
    /// list of gateways.
    pub redirect: Option<String>,
    /// Bearer token of the HTTP side port's admin endpoints (`POST /drain`); `None` turns
    /// them off.
    pub admin_token: Option<String>,
}

impl Default for DrainConfig {
    fn default() -> Self {
        Self { grace: Duration::from_secs(20), redirect: None, admin_token: None }
    }
}

/// Router rollout to the devices (docs/ARCHITECTURE.md, "Fleet rollout").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetConfig {
    /// The bundle store (`rollout.json` and `bundles/`), shared by every replica; `None` =
    /// no bundles are offered.
    pub bundle_store: Option<PathBuf>,
    /// How often the store is re-read.
    pub bundle_poll: Duration,
    /// File holding the bearer token of `/v1/fleet`; `None` = `/v1/fleet` is refused.
    pub operator_token_file: Option<PathBuf>,
}

impl Default for FleetConfig {
    fn default() -> Self {
        Self { bundle_store: None, bundle_poll: Duration::from_secs(5), operator_token_file: None }
    }
}
