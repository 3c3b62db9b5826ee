//! TLS for the QUIC listener: certificate and key from PEM files in production, or a
//! self-signed certificate (rcgen) for development, written out so devices can trust it and
//! kept across restarts (`transport::dev_cert`); with a client CA, mutual TLS
//! ([`crate::identity`]).
//! Also the QUIC transport settings devices rely on (idle timeout, one stream per request).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use common::protocol::ALPN;
use quinn::crypto::rustls::QuicServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;

use crate::config::CertSource;

/// Install ring as rustls' process-wide crypto provider (idempotent): rustls refuses to pick
/// one itself when several are compiled in.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Most request streams a device may have open at once. quinn reserves state for every stream
/// a peer may open when the connection starts (two hash-map entries each), so this is paid by
/// every connected device, idle or not: at 1024 it was ~85 KiB of the gateway's ~120 KiB per
/// idle device (`loadtest fleet`, heaptrack). A device needs one stream per session's waiting
/// escalation plus a pre-sync, a ping and an `EndSession` now and then; 96 leaves room for
/// every session `Welcome` allows (64) with a third of them pre-syncing at once, and a request
/// beyond it waits for a free stream (at 128 the fleet measured 50.6 KiB per idle device
/// against the < 50 KiB goal; each allowed stream costs about 85 bytes).
pub const MAX_STREAMS_PER_DEVICE: u32 = 96;

/// Build the quinn server config with ALPN `duet/1`: up to [`MAX_STREAMS_PER_DEVICE`] request
/// streams open at once per device, no unidirectional streams. With `client_auth` (mutual TLS)
/// every device must present a certificate it accepts.
pub fn server_config(source: &CertSource, client_auth: Option<Arc<dyn ClientCertVerifier>>, idle_timeout: std::time::Duration) -> anyhow::Result<quinn::ServerConfig> {
    install_crypto_provider();
    let (chain, key) = match source {
        CertSource::Files { cert, key } => load_pem(cert, key)?,
        CertSource::SelfSigned { names, write_to } => super::dev_cert::load_or_create(names, write_to.as_deref())?,
    };
    let builder = rustls::ServerConfig::builder();
    let mutual = client_auth.is_some();
    let builder = match client_auth {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let mut tls = builder.with_single_cert(chain, key).context("TLS certificate/key")?;
    if mutual {
        // No session resumption: a resumed handshake skips the certificate check, and every
        // connection must show a certificate that is in date and not revoked now.
        tls.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        tls.send_tls13_tickets = 0;
    }
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = QuicServerConfig::try_from(tls).context("QUIC TLS config")?;
    let mut cfg = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(idle_timeout.try_into().context("idle timeout")?));
    transport.max_concurrent_bidi_streams(MAX_STREAMS_PER_DEVICE.into());
    transport.max_concurrent_uni_streams(0u32.into());
    cfg.transport_config(Arc::new(transport));
    Ok(cfg)
}

fn load_pem(cert: &Path, key: &Path) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let chain = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading certificate {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing certificate {}", cert.display()))?;
    anyhow::ensure!(!chain.is_empty(), "no certificate found in {}", cert.display());
    let key = PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading private key {}", key.display()))?;
    Ok((chain, key))
}
