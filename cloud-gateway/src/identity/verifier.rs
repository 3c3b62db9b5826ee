//! The TLS client-certificate check under mutual TLS: rustls' WebPKI verifier against the
//! fleet CA (signature chain, validity dates, client-auth usage), then the two checks only
//! Duet knows: the certificate names a valid device id, and the deny list does not refuse it.
//!
//! With `--client-crl` the WebPKI verifier also checks the fleet CA's CRLs (a listed
//! certificate gets `certificate_revocation`'s alert, like a denied one); a reload builds a
//! new verifier over the same roots and swaps it in.
//!
//! Both run inside the TLS handshake, so a forged, expired or revoked certificate never gets
//! as far as a QUIC stream: the device sees a TLS alert (`certificate_revoked` for a denied
//! one), and the gateway spends no actor, stream or session on it.

use std::path::Path;
use std::sync::{Arc, RwLock};

use anyhow::Context;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, OtherError, SignatureScheme};

use super::cert::parse_device_cert;
use super::revoked::DenyCell;

/// Verifies device certificates against the fleet CA and the deny list.
#[derive(Debug)]
pub struct DeviceCertVerifier {
    roots: Arc<rustls::RootCertStore>,
    /// The WebPKI verifier over the roots and the CRLs in force (rebuilt when they change).
    webpki: RwLock<Arc<dyn ClientCertVerifier>>,
    /// The roots' names, offered to clients (they do not change with the CRLs).
    hints: Vec<DistinguishedName>,
    deny: Arc<DenyCell>,
}

impl DeviceCertVerifier {
    /// Trust the CA certificates in the PEM file `client_ca` (several: a CA rotation, old and
    /// new side by side) and refuse what `deny` and the CRLs `crls` list.
    pub fn load(client_ca: &Path, deny: Arc<DenyCell>, crls: Vec<CertificateRevocationListDer<'static>>) -> anyhow::Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(client_ca).with_context(|| format!("reading the client CA {}", client_ca.display()))? {
            roots.add(cert.with_context(|| format!("parsing the client CA {}", client_ca.display()))?).with_context(|| format!("the client CA {}", client_ca.display()))?;
        }
        anyhow::ensure!(!roots.is_empty(), "no certificate in the client CA {}", client_ca.display());
        let roots = Arc::new(roots);
        let webpki = build_webpki(&roots, crls)?;
        let hints = webpki.root_hint_subjects().to_vec();
        Ok(Self { roots, webpki: RwLock::new(webpki), hints, deny })
    }

    /// Check against `crls` from now on (a failed build keeps the CRLs in force).
    pub fn set_crls(&self, crls: Vec<CertificateRevocationListDer<'static>>) -> anyhow::Result<()> {
        let webpki = build_webpki(&self.roots, crls)?;
        *self.webpki.write().unwrap_or_else(|p| p.into_inner()) = webpki;
        Ok(())
    }

    fn webpki(&self) -> Arc<dyn ClientCertVerifier> {
        self.webpki.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The WebPKI verifier over `roots` checking `crls`: the device certificate's own status only
/// (the fleet CA signs devices directly), and a certificate of a CA that has no CRL among
/// them passes (during a CA rotation, one CA may have none yet). A CRL past its next-update
/// time still counts: an old list revokes no less.
fn build_webpki(roots: &Arc<rustls::RootCertStore>, crls: Vec<CertificateRevocationListDer<'static>>) -> anyhow::Result<Arc<dyn ClientCertVerifier>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider);
    let builder = if crls.is_empty() { builder } else { builder.with_crls(crls).only_check_end_entity_revocation().allow_unknown_revocation_status() };
    builder.build().context("building the client certificate verifier")
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
        &self.hints
    }

    fn verify_client_cert(&self, end_entity: &CertificateDer<'_>, intermediates: &[CertificateDer<'_>], now: UnixTime) -> Result<ClientCertVerified, rustls::Error> {
        if let Err(e) = self.webpki().verify_client_cert(end_entity, intermediates, now) {
            let reason = if matches!(e, rustls::Error::InvalidCertificate(CertificateError::Revoked)) {
                tracing::info!("client certificate refused: revoked by the fleet CA's CRL");
                "revoked"
            } else {
                tracing::debug!("client certificate refused: {e}");
                "untrusted"
            };
            metrics::counter!("duet_gateway_client_certs_refused_total", "reason" => reason).increment(1);
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
        self.webpki().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki().supported_verify_schemes()
    }
}
