//! The TLS client-certificate check under mutual TLS: rustls' WebPKI verifier against the
//! fleet CA (signature chain, validity dates, client-auth usage), then the two checks only
//! Duet knows: the certificate names a valid device id, and the deny list does not refuse it.
//!
//! Both run inside the TLS handshake, so a forged, expired or revoked certificate never gets
//! as far as a QUIC stream: the device sees a TLS alert (`certificate_revoked` for a denied
//! one), and the gateway spends no actor, stream or session on it.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, OtherError, SignatureScheme};

use super::cert::parse_device_cert;
use super::revoked::DenyCell;

/// Verifies device certificates against the fleet CA and the deny list.
#[derive(Debug)]
pub struct DeviceCertVerifier {
    webpki: Arc<dyn ClientCertVerifier>,
    deny: Arc<DenyCell>,
}

impl DeviceCertVerifier {
    /// Trust the CA certificates in the PEM file `client_ca` (several: a CA rotation, old and
    /// new side by side) and refuse what `deny` lists.
    pub fn load(client_ca: &Path, deny: Arc<DenyCell>) -> anyhow::Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(client_ca).with_context(|| format!("reading the client CA {}", client_ca.display()))? {
            roots.add(cert.with_context(|| format!("parsing the client CA {}", client_ca.display()))?).with_context(|| format!("the client CA {}", client_ca.display()))?;
        }
        anyhow::ensure!(!roots.is_empty(), "no certificate in the client CA {}", client_ca.display());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let webpki = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build().context("building the client certificate verifier")?;
        Ok(Self { webpki, deny })
    }
}

fn refused(reason: &'static str, error: CertificateError) -> rustls::Error {
    metrics::counter!("duet_gateway_client_certs_refused_total", "reason" => reason).increment(1);
    rustls::Error::InvalidCertificate(error)
}

impl ClientCertVerifier for DeviceCertVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.webpki.root_hint_subjects()
    }

    fn verify_client_cert(&self, end_entity: &CertificateDer<'_>, intermediates: &[CertificateDer<'_>], now: UnixTime) -> Result<ClientCertVerified, rustls::Error> {
        if let Err(e) = self.webpki.verify_client_cert(end_entity, intermediates, now) {
            tracing::debug!("client certificate refused: {e}");
            metrics::counter!("duet_gateway_client_certs_refused_total", "reason" => "untrusted").increment(1);
            return Err(e);
        }
        let cert = parse_device_cert(end_entity).map_err(|e| {
            tracing::info!("client certificate refused: {e}");
            refused("device_id", CertificateError::Other(OtherError(Arc::new(e))))
        })?;
        if self.deny.get().denies(&cert.device_id, Some(&cert.serial)) {
            tracing::info!(device = %cert.device_id, serial = %cert.serial, "revoked device refused at the TLS handshake");
            return Err(refused("revoked", CertificateError::Revoked));
        }
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}
