//! The one place settings are checked: values that would make the gateway useless are refused
//! with the setting's name, the others brought into their sensible range. The binary's flags,
//! a `--config` file and a test's struct literal all pass through it
//! ([`GatewayConfig::validated`], called by `Gateway::start`).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::ensure;
use common::protocol::{Frame, ValidationLimits, HARD_MAX_FRAME_BYTES, LENGTH_PREFIX_BYTES};

use super::{GatewayConfig, IdentityConfig};

/// Smallest frame limit a gateway accepts: below it an honest `Escalate` with a short context
/// would not fit.
pub(crate) const MIN_FRAME_BYTES: usize = 1024;

/// Largest batch a backend call may take.
const MAX_BATCH: usize = 1024;

/// Most attempts an escalation may make on engine workers.
const MAX_ENGINE_ATTEMPTS: u32 = 16;

impl GatewayConfig {
    /// The configuration a gateway actually runs with: limits that would make it useless are
    /// refused (an empty queue, a batch outside 1..=1024, engine attempts outside 1..=16, DNS
    /// re-resolution more often than every 100 ms, a drain redirect that is not a `host:port`),
    /// the others are brought into their sensible range (a frame limit within 1 KiB..=16 MiB,
    /// at least one session, connection, engine request in flight and second of idle time and
    /// of drain), and an empty auth or admin token means none.
    pub fn validated(mut self) -> anyhow::Result<Self> {
        ensure!(self.batcher.queue_capacity > 0, "the queue capacity (--queue-capacity) must be > 0");
        ensure!((1..=MAX_BATCH).contains(&self.batcher.max_batch), "the batch size (--max-batch) must be within 1..={MAX_BATCH}");
        let pool = &mut self.engines.pool;
        ensure!((1..=MAX_ENGINE_ATTEMPTS).contains(&pool.max_attempts), "engine attempts (--engine-max-attempts) must be within 1..={MAX_ENGINE_ATTEMPTS}");
        ensure!(pool.resolve_interval >= Duration::from_millis(100), "engine re-resolution (--engine-resolve-interval-ms) must be at least 100 ms");
        pool.max_in_flight_per_worker = pool.max_in_flight_per_worker.max(1);
        pool.breaker.failure_threshold = pool.breaker.failure_threshold.max(1);
        pool.health.interval = pool.health.interval.max(Duration::from_millis(50));
        let identity = &mut self.identity;
        identity.auth_token = identity.auth_token.take().filter(|t| !t.is_empty());
        identity.revoked_poll = identity.revoked_poll.max(Duration::from_millis(10));
        ensure!(identity.client_crls.is_empty() || identity.client_ca.is_some(), "a CRL (--client-crl) needs the fleet CA it comes from (--client-ca)");
        ensure!(identity.client_ca.is_none() || identity.device_token_secret.is_none(), "devices prove their id with a certificate (--client-ca) or a per-device token (--device-token-secret), not both");
        exposure(self.transport.listen, identity)?;
        identity.device_rate.burst = identity.device_rate.burst.max(1);
        let drain = &mut self.drain;
        drain.admin_token = drain.admin_token.take().filter(|t| !t.is_empty());
        drain.redirect = drain.redirect.take().filter(|r| !r.is_empty());
        if let Some(r) = &drain.redirect {
            let frame = Frame::GoAway { redirect: Some(r.clone()) };
            frame.validate(&ValidationLimits::default()).map_err(|e| anyhow::anyhow!("drain redirect `{r}`: {e}"))?;
        }
        drain.grace = drain.grace.max(Duration::from_secs(1));
        ensure!(self.fleet.bundle_poll >= Duration::from_millis(50), "the bundle store poll (--bundle-poll-ms) must be at least 50 ms");
        let transport = &mut self.transport;
        transport.max_frame_bytes = transport.max_frame_bytes.clamp(MIN_FRAME_BYTES, HARD_MAX_FRAME_BYTES);
        transport.max_connections = transport.max_connections.max(1);
        self.sessions.max_per_device = self.sessions.max_per_device.max(1);
        self.sessions.idle = self.sessions.idle.max(Duration::from_secs(1));
        let o = &mut self.overload;
        o.max_batch_tokens = o.max_batch_tokens.max(1);
        o.max_sessions = o.max_sessions.max(1);
        o.max_connections_per_source = o.max_connections_per_source.max(1);
        o.stream_read_timeout = o.stream_read_timeout.max(Duration::from_millis(100));
        // One frame must fit, or no stream could ever be read.
        let one_frame = self.transport.max_frame_bytes + LENGTH_PREFIX_BYTES;
        o.max_buffered_bytes_per_connection = o.max_buffered_bytes_per_connection.max(one_frame);
        o.max_buffered_bytes = o.max_buffered_bytes.max(o.max_buffered_bytes_per_connection);
        Ok(self)
    }
}

/// The gateway's own refusal to be reachable beyond this machine with identities nobody
/// verifies: on a non-loopback address any device could act as any other, so that takes
/// `--insecure-unverified-devices`, said on purpose.
fn exposure(listen: SocketAddr, identity: &IdentityConfig) -> anyhow::Result<()> {
    if listen.ip().is_loopback() || identity.verifies_devices() || identity.insecure_unverified_devices {
        return Ok(());
    }
    anyhow::bail!(
        "refusing to listen on {listen} with unverified device identity (any device could act as any other): \
         give devices certificates from the fleet CA (--client-ca) or per-device tokens (--device-token-secret), \
         or set --insecure-unverified-devices to accept that risk"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BatcherConfig, CertSource, DrainConfig, EnginesConfig, IdentityConfig, PoolConfig, SessionsConfig, TransportConfig};
    use model_runtime::model_files::duet_home;

    #[test]
    fn the_default_serves_loopback_with_a_certificate_a_local_edge_finds() {
        let c = GatewayConfig::default();
        assert_eq!(c.transport.listen.to_string(), "127.0.0.1:4433");
        assert_eq!(c.transport.http_listen.map(|a| a.to_string()).as_deref(), Some("127.0.0.1:9464"));
        let CertSource::SelfSigned { write_to, .. } = &c.transport.cert else { panic!("{:?}", c.transport.cert) };
        assert_eq!(write_to.as_deref(), Some(duet_home().join("gateway-cert.pem").as_path()));
        assert_eq!(c.clone().validated().unwrap(), c, "the default needs no correction");
    }

    #[test]
    fn validation_refuses_useless_limits_by_name_and_clamps_the_rest() {
        let refused = |c: GatewayConfig| c.validated().unwrap_err().to_string();
        assert!(refused(GatewayConfig { batcher: BatcherConfig { queue_capacity: 0, ..BatcherConfig::default() }, ..GatewayConfig::default() }).contains("--queue-capacity"));
        assert!(refused(GatewayConfig { batcher: BatcherConfig { max_batch: 2000, ..BatcherConfig::default() }, ..GatewayConfig::default() }).contains("--max-batch"));
        let engines = |pool: PoolConfig| GatewayConfig { engines: EnginesConfig { pool, ..EnginesConfig::default() }, ..GatewayConfig::default() };
        assert!(refused(engines(PoolConfig { max_attempts: 0, ..PoolConfig::default() })).contains("--engine-max-attempts"));
        assert!(refused(engines(PoolConfig { resolve_interval: Duration::from_millis(5), ..PoolConfig::default() })).contains("--engine-resolve-interval-ms"));
        let bad_redirect = GatewayConfig { drain: DrainConfig { redirect: Some("no port".into()), ..DrainConfig::default() }, ..GatewayConfig::default() };
        assert!(refused(bad_redirect).contains("no port"));
        let odd = GatewayConfig {
            transport: TransportConfig { max_frame_bytes: 1, max_connections: 0, ..TransportConfig::default() },
            identity: IdentityConfig { auth_token: Some(String::new()), ..IdentityConfig::default() },
            sessions: SessionsConfig { max_per_device: 0, idle: Duration::ZERO },
            drain: DrainConfig { admin_token: Some(String::new()), grace: Duration::ZERO, redirect: None },
            ..engines(PoolConfig { max_in_flight_per_worker: 0, ..PoolConfig::default() })
        }
        .validated()
        .unwrap();
        assert_eq!((odd.identity.auth_token, odd.drain.admin_token), (None, None));
        assert_eq!(odd.drain.grace, Duration::from_secs(1));
        assert_eq!(odd.transport.max_frame_bytes, MIN_FRAME_BYTES);
        assert_eq!((odd.sessions.max_per_device, odd.transport.max_connections), (1, 1));
        assert_eq!(odd.sessions.idle, Duration::from_secs(1));
        assert_eq!(odd.engines.pool.max_in_flight_per_worker, 1);
    }

    #[test]
    fn the_gateway_refuses_to_listen_beyond_loopback_with_unverified_identities() {
        let open = |identity: IdentityConfig| GatewayConfig {
            transport: TransportConfig { listen: "0.0.0.0:4433".parse().unwrap(), ..TransportConfig::default() },
            identity,
            ..GatewayConfig::default()
        };
        let err = open(IdentityConfig { auth_token: Some("shared".into()), ..IdentityConfig::default() }).validated().unwrap_err().to_string();
        assert!(err.contains("0.0.0.0:4433") && err.contains("--client-ca") && err.contains("--insecure-unverified-devices"), "{err}");
        assert!(open(IdentityConfig::default()).validated().is_err(), "no credential at all");
        assert!(open(IdentityConfig { client_ca: Some("ca.pem".into()), ..IdentityConfig::default() }).validated().is_ok());
        assert!(open(IdentityConfig { device_token_secret: Some("secret".into()), ..IdentityConfig::default() }).validated().is_ok());
        assert!(open(IdentityConfig { insecure_unverified_devices: true, ..IdentityConfig::default() }).validated().is_ok(), "said on purpose");
        // Loopback (the default) is one machine's own business.
        assert!(GatewayConfig::default().validated().is_ok());
        let both = IdentityConfig { client_ca: Some("ca.pem".into()), device_token_secret: Some("secret".into()), ..IdentityConfig::default() };
        assert!(open(both).validated().unwrap_err().to_string().contains("not both"));
    }
}
