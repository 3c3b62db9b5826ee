//! TLS for the device's QUIC client: trust the system-independent roots a user gives
//! (`--ca-cert`, e.g. the gateway's self-signed certificate) or, for local development only,
//! skip verification; and, where the gateway requires mutual TLS, present this device's own
//! certificate (`--client-cert`/`--client-key`, issued by `cloud-gateway ca issue`), which is
//! what the gateway knows the device by. The configuration in force lives in a [`ClientTls`]
//! cell, which certificate rotation ([`super::rotation`]) replaces and the link reads.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use common::protocol::ALPN;
use quinn::crypto::rustls::QuicClientConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// This device's certificate and key (PEM files), presented to a gateway that requires
/// mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// Certificate (chain), PEM.
    pub cert: PathBuf,
    /// Private key, PEM.
    pub key: PathBuf,
}

impl ClientIdentity {
    fn load(&self) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
        let chain = CertificateDer::pem_file_iter(&self.cert)
            .with_context(|| format!("reading the client certificate {}", self.cert.display()))?
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("parsing the client certificate {}", self.cert.display()))?;
        anyhow::ensure!(!chain.is_empty(), "no certificate in {}", self.cert.display());
        let key = PrivateKeyDer::from_pem_file(&self.key).with_context(|| format!("reading the client key {}", self.key.display()))?;
        Ok((chain, key))
    }
}

/// How long a connection may be silent before QUIC closes it, unless the device says otherwise
/// (`--quic-idle-timeout-ms`). Keep-alives go several times within it, so only a gateway
/// that is gone (or a path that stopped carrying packets) reaches it; the link then reconnects.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Build the quinn client config (no client certificate, the default idle timeout).
pub fn client_config(ca_cert: Option<&Path>, insecure: bool, keep_alive: Duration) -> anyhow::Result<quinn::ClientConfig> {
    client_config_with_identity(ca_cert, insecure, QuicTimers { keep_alive, idle_timeout: DEFAULT_IDLE_TIMEOUT }, None)
}

/// The QUIC connection's timers: how often a keep-alive goes, and how long a silent
/// connection lives.
#[derive(Debug, Clone, Copy)]
pub struct QuicTimers {
    /// Interval between keep-alives.
    pub keep_alive: Duration,
    /// Idle timeout.
    pub idle_timeout: Duration,
}

/// Build the quinn client config, presenting `identity` to a gateway that asks for one.
pub fn client_config_with_identity(ca_cert: Option<&Path>, insecure: bool, timers: QuicTimers, identity: Option<&ClientIdentity>) -> anyhow::Result<quinn::ClientConfig> {
    quic_client_config(client_tls(ca_cert, insecure, identity)?, timers)
}

/// The TLS half of [`client_config_with_identity`] (ALPN set), for a caller that tunes it (the
/// handshake benchmark turns session resumption off) before [`quic_client_config`].
pub fn client_tls(ca_cert: Option<&Path>, insecure: bool, identity: Option<&ClientIdentity>) -> anyhow::Result<rustls::ClientConfig> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let builder = rustls::ClientConfig::builder();
    let builder = if insecure {
        tracing::warn!("TLS verification of the gateway is OFF (--insecure): development only");
        builder.dangerous().with_custom_certificate_verifier(Arc::new(NoVerify))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        let path = ca_cert.context("no --ca-cert given: pass the gateway's certificate (PEM), or --insecure for local development")?;
        for cert in CertificateDer::pem_file_iter(path).with_context(|| format!("reading {}", path.display()))? {
            roots.add(cert.with_context(|| format!("parsing {}", path.display()))?).context("adding CA certificate")?;
        }
        anyhow::ensure!(!roots.is_empty(), "no certificate in {}", path.display());
        builder.with_root_certificates(roots)
    };
    let mut tls = match identity {
        Some(id) => {
            let (chain, key) = id.load()?;
            builder.with_client_auth_cert(chain, key).context("the client certificate and key do not match")?
        }
        None => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = vec![ALPN.to_vec()];
    Ok(tls)
}

/// The QUIC client config over `tls` with `timers`.
pub fn quic_client_config(tls: rustls::ClientConfig, timers: QuicTimers) -> anyhow::Result<quinn::ClientConfig> {
    let mut cfg = quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(tls).context("QUIC TLS config")?));
    let mut transport = quinn::TransportConfig::default();
    transport.keep_alive_interval(Some(timers.keep_alive));
    transport.max_idle_timeout(Some(timers.idle_timeout.try_into().context("idle timeout")?));
    cfg.transport_config(Arc::new(transport));
    Ok(cfg)
}

#[derive(Debug)]
struct NoVerify;

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(&self, _: &CertificateDer<'_>, _: &[CertificateDer<'_>], _: &ServerName<'_>, _: &[u8], _: UnixTime) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(&self, _: &[u8], _: &CertificateDer<'_>, _: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(&self, _: &[u8], _: &CertificateDer<'_>, _: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        rustls::crypto::ring::default_provider().signature_verification_algorithms.supported_schemes()
    }
}

/// The QUIC client configuration new connections use, replaced when the device certificate is
/// rotated ([`super::rotation`]); a connection keeps the one it was made with.
pub struct ClientTls(std::sync::RwLock<quinn::ClientConfig>, AtomicU64);

impl ClientTls {
    /// A cell holding `config`.
    pub fn new(config: quinn::ClientConfig) -> Self {
        Self(std::sync::RwLock::new(config), AtomicU64::new(0))
    }

    /// How many times the configuration was replaced (a rotated certificate loaded).
    pub fn replaced(&self) -> u64 {
        self.1.load(Ordering::Relaxed)
    }

    /// The configuration for the next connection.
    pub fn current(&self) -> quinn::ClientConfig {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Use `config` from the next connection on.
    pub fn replace(&self, config: quinn::ClientConfig) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = config;
        self.1.fetch_add(1, Ordering::Relaxed);
    }
}
