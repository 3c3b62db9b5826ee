//! TLS for the device's QUIC client: trust the system-independent roots a user gives
//! (`--ca-cert`, e.g. the gateway's self-signed certificate) or, for local development only,
//! skip verification.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use common::protocol::ALPN;
use quinn::crypto::rustls::QuicClientConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Build the quinn client config.
pub fn client_config(ca_cert: Option<&Path>, insecure: bool, keep_alive: std::time::Duration) -> anyhow::Result<quinn::ClientConfig> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let builder = rustls::ClientConfig::builder();
    let mut tls = if insecure {
        tracing::warn!("TLS verification of the gateway is OFF (--insecure): development only");
        builder.dangerous().with_custom_certificate_verifier(Arc::new(NoVerify)).with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        let path = ca_cert.context("no --ca-cert given: pass the gateway's certificate (PEM), or --insecure for local development")?;
        for cert in CertificateDer::pem_file_iter(path).with_context(|| format!("reading {}", path.display()))? {
            roots.add(cert.with_context(|| format!("parsing {}", path.display()))?).context("adding CA certificate")?;
        }
        anyhow::ensure!(!roots.is_empty(), "no certificate in {}", path.display());
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let mut cfg = quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(tls).context("QUIC TLS config")?));
    let mut transport = quinn::TransportConfig::default();
    transport.keep_alive_interval(Some(keep_alive));
    transport.max_idle_timeout(Some(std::time::Duration::from_secs(10).try_into().context("idle timeout")?));
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
