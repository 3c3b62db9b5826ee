//! Every setting of a gateway, in one struct.
//!
//! The binary maps its flags into [`GatewayConfig`] (see [`crate::cli`]); tests and the load
//! tester write `GatewayConfig { .., ..GatewayConfig::default() }` directly, so there is one
//! definition of each setting and of its default. The defaults run a gateway on one machine:
//! loopback addresses and a self-signed certificate written where a local edge node looks for
//! it. What connections derive from these settings together with the model's facts is
//! computed once, in [`crate::state::Shared::new`].

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use common::protocol::{DEFAULT_MAX_FRAME_BYTES, HARD_MAX_FRAME_BYTES};
use model_runtime::model_files::duet_home;

pub use crate::identity::rate::RateLimit;

/// Smallest frame limit a gateway accepts: below it an honest `Escalate` with a short context
/// would not fit.
const MIN_FRAME_BYTES: usize = 1024;

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

/// How escalations are gathered into backend calls, and how many may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatcherConfig {
    /// Most escalations per backend call.
    pub max_batch: usize,
    /// Longest an escalation waits for others before its batch is cut: the latency a device
    /// pays for batching when traffic is light.
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
    /// hides devices' addresses, raise it to `max_connections`.
    pub max_connections_per_source: usize,
    /// A request stream must deliver its frame within this time, or it is reset (a partial
    /// frame cannot pin memory).
    pub stream_read_timeout: Duration,
    /// Most bytes one connection may hold in unfinished frames; a stream that would exceed it
    /// is reset.
    pub max_buffered_bytes_per_connection: usize,
    /// Most bytes every connection together may hold in unfinished frames.
    pub max_buffered_bytes: usize,
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
        }
    }
}

/// Everything needed to run a gateway, apart from its backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    /// UDP address of the QUIC listener.
    pub listen: SocketAddr,
    /// TCP address of the HTTP side port (`/metrics`, `/healthz`, `/readyz`); `None` = off.
    pub http_listen: Option<SocketAddr>,
    /// TLS certificate source.
    pub cert: CertSource,
    /// Shared secret devices present in `Hello`; `None` accepts any device (development only).
    pub auth_token: Option<String>,
    /// The fleet CA (PEM) that device certificates must chain to: mutual TLS, and the device
    /// id comes from the certificate. `None`: identity is what `Hello` claims (dev mode).
    pub client_ca: Option<PathBuf>,
    /// Deny list of device ids and certificate serials (see [`crate::identity::revoked`]),
    /// reloaded while running.
    pub revoked_file: Option<PathBuf>,
    /// How often the deny list's file is checked for changes (SIGHUP reloads at once).
    pub revoked_poll: Duration,
    /// Escalations per second (and burst) each device identity may make; beyond it `Busy`.
    pub device_rate: RateLimit,
    /// Name announced in `Welcome`, so a device's logs say which gateway answered.
    pub gateway_id: String,
    /// Largest accepted frame payload, bytes; bounds what one stream can make us buffer.
    pub max_frame_bytes: usize,
    /// Most sessions one device may hold; bounds one device's share of the session store.
    pub max_sessions_per_device: usize,
    /// Most connected devices; beyond it a device is refused with `Reject { Overloaded }`.
    pub max_connections: usize,
    /// Sessions idle this long are dropped (a device that vanished frees its memory).
    pub session_idle: Duration,
    /// QUIC idle timeout (devices keep alive below it).
    pub idle_timeout: Duration,
    /// Batching and admission.
    pub batcher: BatcherConfig,
    /// Bounds under abuse and overload (cost cap, readiness, totals, per-source, buffers).
    pub overload: OverloadConfig,
    /// How long a graceful drain (SIGTERM, `POST /drain`) may take, start to exit: set the
    /// orchestrator's own limit above it (Kubernetes: `terminationGracePeriodSeconds` ≥ a
    /// preStop sleep + this + a few seconds), or it kills the process mid-drain.
    pub drain_grace: Duration,
    /// Where a drain sends devices (`GoAway`'s redirect, `host:port`); `None` = to their own
    /// list of gateways.
    pub drain_redirect: Option<String>,
    /// Bearer token of the HTTP side port's admin endpoints (`POST /drain`); `None` turns
    /// them off.
    pub admin_token: Option<String>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 4433)),
            http_listen: Some(SocketAddr::from((Ipv4Addr::LOCALHOST, 9464))),
            cert: CertSource::self_signed_local(),
            auth_token: None,
            client_ca: None,
            revoked_file: None,
            revoked_poll: Duration::from_secs(2),
            device_rate: RateLimit::default(),
            gateway_id: "duet-gateway".into(),
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_sessions_per_device: 64,
            max_connections: 10_000,
            session_idle: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(30),
            batcher: BatcherConfig::default(),
            overload: OverloadConfig::default(),
            drain_grace: Duration::from_secs(20),
            drain_redirect: None,
            admin_token: None,
        }
    }
}

impl GatewayConfig {
    /// The configuration a gateway actually runs with: limits that would make it useless are
    /// refused (so is a drain redirect that is not a `host:port`), the others are brought into
    /// their sensible range (a frame limit within 1 KiB..=16 MiB, at least one session,
    /// connection and second of idle time and of drain), and an empty auth or admin token
    /// means none.
    pub fn validated(mut self) -> anyhow::Result<Self> {
        anyhow::ensure!(self.batcher.queue_capacity > 0, "the queue capacity must be > 0");
        anyhow::ensure!(self.batcher.max_batch > 0, "the batch size must be > 0");
        self.auth_token = self.auth_token.filter(|t| !t.is_empty());
        self.admin_token = self.admin_token.filter(|t| !t.is_empty());
        self.drain_redirect = self.drain_redirect.filter(|r| !r.is_empty());
        if let Some(r) = &self.drain_redirect {
            let frame = common::protocol::Frame::GoAway { redirect: Some(r.clone()) };
            frame.validate(&common::protocol::ValidationLimits::default()).map_err(|e| anyhow::anyhow!("drain redirect `{r}`: {e}"))?;
        }
        self.drain_grace = self.drain_grace.max(Duration::from_secs(1));
        self.max_frame_bytes = self.max_frame_bytes.clamp(MIN_FRAME_BYTES, HARD_MAX_FRAME_BYTES);
        self.max_sessions_per_device = self.max_sessions_per_device.max(1);
        self.max_connections = self.max_connections.max(1);
        self.session_idle = self.session_idle.max(Duration::from_secs(1));
        self.revoked_poll = self.revoked_poll.max(Duration::from_millis(10));
        self.device_rate.burst = self.device_rate.burst.max(1);
        let o = &mut self.overload;
        o.max_batch_tokens = o.max_batch_tokens.max(1);
        o.max_sessions = o.max_sessions.max(1);
        o.max_connections_per_source = o.max_connections_per_source.max(1);
        o.stream_read_timeout = o.stream_read_timeout.max(Duration::from_millis(100));
        // One frame must fit, or no stream could ever be read.
        let one_frame = self.max_frame_bytes + common::protocol::LENGTH_PREFIX_BYTES;
        o.max_buffered_bytes_per_connection = o.max_buffered_bytes_per_connection.max(one_frame);
        o.max_buffered_bytes = o.max_buffered_bytes.max(o.max_buffered_bytes_per_connection);
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_serves_loopback_with_a_certificate_a_local_edge_finds() {
        let c = GatewayConfig::default();
        assert_eq!(c.listen.to_string(), "127.0.0.1:4433");
        assert_eq!(c.http_listen.map(|a| a.to_string()).as_deref(), Some("127.0.0.1:9464"));
        let CertSource::SelfSigned { write_to, .. } = &c.cert else { panic!("{:?}", c.cert) };
        assert_eq!(write_to.as_deref(), Some(duet_home().join("gateway-cert.pem").as_path()));
        assert_eq!(c.clone().validated().unwrap(), c, "the default needs no correction");
    }

    #[test]
    fn validation_refuses_an_empty_queue_and_clamps_the_rest() {
        let zero_queue = GatewayConfig { batcher: BatcherConfig { queue_capacity: 0, ..BatcherConfig::default() }, ..GatewayConfig::default() };
        assert!(zero_queue.validated().is_err());
        let bad_redirect = GatewayConfig { drain_redirect: Some("no port".into()), ..GatewayConfig::default() };
        assert!(bad_redirect.validated().unwrap_err().to_string().contains("no port"));
        let odd = GatewayConfig {
            auth_token: Some(String::new()),
            max_frame_bytes: 1,
            max_sessions_per_device: 0,
            max_connections: 0,
            session_idle: Duration::ZERO,
            admin_token: Some(String::new()),
            drain_grace: Duration::ZERO,
            ..GatewayConfig::default()
        }
        .validated()
        .unwrap();
        assert_eq!((odd.auth_token, odd.admin_token), (None, None));
        assert_eq!(odd.drain_grace, Duration::from_secs(1));
        assert_eq!(odd.max_frame_bytes, MIN_FRAME_BYTES);
        assert_eq!((odd.max_sessions_per_device, odd.max_connections), (1, 1));
        assert_eq!(odd.session_idle, Duration::from_secs(1));
    }
}
