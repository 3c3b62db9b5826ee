//! Certificate revocation lists from the fleet CA, beside the deny list: `cloud-gateway ca
//! revoke --crl` signs one with the CA's key, and the gateway (`--client-crl`) gives it to
//! rustls' WebPKI verifier, which refuses a listed certificate in the TLS handshake. A CRL is
//! what other TLS tooling already understands and it is signed, so it can be shipped through
//! channels the gateway does not trust; the deny list stays for what a CRL cannot say (a device
//! id, every certificate of it, without the CA key at hand).
//!
//! Files are PEM (`-----BEGIN X509 CRL-----`, several per file allowed) or one DER CRL. The
//! serials they list are also kept here, so a reload can close the live connections of
//! certificates it now revokes.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateRevocationListDer;

use super::cert::Serial;

/// The CRLs in force: what rustls checks, and the serials they revoke.
#[derive(Debug, Clone, Default)]
pub struct CrlSet {
    /// The CRLs, DER, for the verifier.
    pub ders: Vec<CertificateRevocationListDer<'static>>,
    /// Every serial they list.
    pub serials: HashSet<Serial>,
}

/// Why CRL files could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CrlError {
    /// A file could not be read.
    #[error("reading the CRL {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no CRL, or one that does not parse.
    #[error("the CRL {path}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

impl CrlSet {
    /// Read and parse every file in `paths`. One bad file refuses the whole set, so a broken
    /// file never silently un-revokes a device (a reload then keeps the set in force).
    pub fn load(paths: &[PathBuf]) -> Result<Self, CrlError> {
        let mut set = Self::default();
        for path in paths {
            for der in read_crls(path)? {
                let (_, crl) = x509_parser::parse_x509_crl(der.as_ref()).map_err(|e| CrlError::Invalid { path: path.clone(), why: e.to_string() })?;
                set.serials.extend(crl.iter_revoked_certificates().map(|r| Serial::from_bytes(r.raw_serial())));
                set.ders.push(der);
            }
        }
        Ok(set)
    }

    /// Whether a certificate with this serial is revoked.
    pub fn revokes(&self, serial: Option<&Serial>) -> bool {
        serial.is_some_and(|s| self.serials.contains(s))
    }
}

/// The CRLs in `path`: PEM blocks, or the whole file as one DER CRL.
fn read_crls(path: &Path) -> Result<Vec<CertificateRevocationListDer<'static>>, CrlError> {
    let bytes = std::fs::read(path).map_err(|source| CrlError::Io { path: path.to_path_buf(), source })?;
    let invalid = |why: String| CrlError::Invalid { path: path.to_path_buf(), why };
    if bytes.trim_ascii_start().starts_with(b"-----BEGIN") {
        let crls = CertificateRevocationListDer::pem_slice_iter(&bytes).collect::<Result<Vec<_>, _>>().map_err(|e| invalid(e.to_string()))?;
        if crls.is_empty() {
            return Err(invalid("no `X509 CRL` PEM block".into()));
        }
        Ok(crls)
    } else if bytes.is_empty() {
        Err(invalid("empty file".into()))
    } else {
        Ok(vec![CertificateRevocationListDer::from(bytes)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::ca::{init_ca, FleetCa};

    #[test]
    fn a_crl_the_fleet_ca_signed_lists_its_serials_and_a_broken_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        init_ca(dir.path(), "ca", 30).unwrap();
        let ca = FleetCa::load(dir.path()).unwrap();
        let (a, b) = (ca.issue("device-a", 1).unwrap(), ca.issue("device-b", 1).unwrap());
        let crl = dir.path().join("fleet.crl.pem");
        assert_eq!(ca.revoke_into_crl(&crl, std::slice::from_ref(&a.serial)).unwrap(), 1);
        let set = CrlSet::load(std::slice::from_ref(&crl)).unwrap();
        assert!(set.revokes(Some(&a.serial)) && !set.revokes(Some(&b.serial)) && !set.revokes(None));
        // Revoking again keeps what was revoked and adds to it.
        assert_eq!(ca.revoke_into_crl(&crl, &[a.serial.clone(), b.serial.clone()]).unwrap(), 1);
        let set = CrlSet::load(std::slice::from_ref(&crl)).unwrap();
        assert_eq!(set.serials.len(), 2);
        std::fs::write(&crl, "-----BEGIN X509 CRL-----\nnot base64\n-----END X509 CRL-----\n").unwrap();
        assert!(CrlSet::load(std::slice::from_ref(&crl)).is_err());
        std::fs::write(&crl, b"\x30\x03\x02\x01\x00").unwrap();
        assert!(CrlSet::load(std::slice::from_ref(&crl)).is_err(), "DER that is no CRL");
        assert!(CrlSet::load(&[dir.path().join("missing.pem")]).is_err());
    }
}
