//! Device certificates for the simulated fleet, for gateways that verify who a device is
//! (mutual TLS, the gateway's `--client-ca`): each simulated device presents a certificate of
//! its own, so the gateway keys sessions, limits and revocation by the certificate as it does
//! for a real fleet, and a run pays the handshakes a production gateway pays.
//!
//! Two sources. The fleet CA's directory (`--fleet-ca-dir`, as `cloud-gateway ca init-ca`
//! wrote it): one certificate per device id is issued at start with the gateway's own issuing
//! code ([`FleetCa::issue`]: ECDSA P-256, a fraction of a millisecond each, so thousands take
//! about a second), on every core, and written into a private temporary directory that lives
//! as long as the run (the edge's link reads its identity from files, as a device does). They
//! are not logged in the CA's `issued.tsv`: nothing outlives the run. Or certificates issued
//! beforehand (`--client-cert-dir`): `DIR/<device id>/device-cert.pem` and `device-key.pem`,
//! what `cloud-gateway ca issue --out DIR/<device id>` writes, every one checked present before
//! a device starts.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cloud_gateway::identity::ca::{FleetCa, DEVICE_CERT_FILE, DEVICE_KEY_FILE};
use edge_node::link::tls::ClientIdentity;
use serde::Serialize;

/// How long a certificate issued for a run is valid, days (the shortest the CA issues).
const RUN_CERT_DAYS: u32 = 1;

/// Why the fleet's certificates could not be made or found.
#[derive(Debug, thiserror::Error)]
pub enum DeviceCertError {
    /// The fleet CA could not be loaded.
    #[error("--fleet-ca-dir {dir}: {why}")]
    Ca {
        /// The CA's directory.
        dir: PathBuf,
        /// What was wrong.
        why: String,
    },
    /// A certificate could not be issued or written.
    #[error("issuing the certificate of device {device}: {why}")]
    Issue {
        /// The device id.
        device: String,
        /// What was wrong.
        why: String,
    },
    /// A pre-issued certificate or key is missing.
    #[error("--client-cert-dir: no {file} for device {device} (issue it with `cloud-gateway ca issue --device {device} --out DIR/{device}`)")]
    Missing {
        /// The device id.
        device: String,
        /// The missing file.
        file: PathBuf,
    },
    /// The temporary directory could not be made.
    #[error("a temporary directory for the device certificates: {0}")]
    Temp(#[from] std::io::Error),
}

/// The simulated devices' certificates: `DIR/<device id>/device-cert.pem` and `device-key.pem`.
#[derive(Debug)]
pub struct DeviceCerts {
    dir: PathBuf,
    /// Holds the directory of certificates issued for this run (removed with it).
    _temp: Option<tempfile::TempDir>,
    /// What the report says about them.
    pub summary: IdentitySummary,
}

/// Where the devices' identities came from, for the report.
#[derive(Debug, Clone, Serialize)]
pub struct IdentitySummary {
    /// `mutual_tls_issued` (from --fleet-ca-dir), `mutual_tls_files` (--client-cert-dir), or
    /// `none` (the gateway does not verify devices).
    pub mode: String,
    /// Devices with a certificate.
    pub certificates: usize,
    /// Wall time to issue and write them all, ms (issued mode).
    pub issue_ms: Option<f64>,
    /// The same per certificate, ms.
    pub issue_ms_each: Option<f64>,
}

impl IdentitySummary {
    /// No certificates: devices are whoever their `Hello` claims.
    pub fn none() -> Self {
        Self { mode: "none".into(), certificates: 0, issue_ms: None, issue_ms_each: None }
    }
}

impl DeviceCerts {
    /// Issue one certificate per id in `ids` from the fleet CA in `ca_dir`, on `threads`
    /// threads, into a new private temporary directory.
    pub fn issue(ca_dir: &Path, ids: &[String], threads: usize) -> Result<Self, DeviceCertError> {
        let ca = FleetCa::load(ca_dir).map_err(|e| DeviceCertError::Ca { dir: ca_dir.to_path_buf(), why: format!("{e:#}") })?;
        let temp = tempfile::Builder::new().prefix("duet-fleet-certs-").tempdir()?;
        let dir = temp.path().to_path_buf();
        let started = Instant::now();
        let chunk = ids.len().div_ceil(threads.max(1)).max(1);
        let (ca, out) = (&ca, dir.as_path());
        std::thread::scope(|scope| {
            let workers: Vec<_> = ids.chunks(chunk).map(|part| scope.spawn(move || part.iter().try_for_each(|id| issue_one(ca, out, id)))).collect();
            workers.into_iter().try_for_each(|w| w.join().unwrap_or_else(|_| Err(DeviceCertError::Issue { device: "?".into(), why: "an issuing thread panicked".into() })))
        })?;
        let took = started.elapsed();
        let summary = IdentitySummary { mode: "mutual_tls_issued".into(), certificates: ids.len(), issue_ms: Some(ms(took)), issue_ms_each: Some(ms(took) / ids.len().max(1) as f64) };
        tracing::info!(certificates = ids.len(), ms = ms(took), threads, "device certificates issued from the fleet CA");
        Ok(Self { dir, _temp: Some(temp), summary })
    }

    /// Use the certificates issued beforehand in `dir`; every id in `ids` must have its pair.
    pub fn pre_issued(dir: &Path, ids: &[String]) -> Result<Self, DeviceCertError> {
        let certs = Self { dir: dir.to_path_buf(), _temp: None, summary: IdentitySummary { mode: "mutual_tls_files".into(), certificates: ids.len(), issue_ms: None, issue_ms_each: None } };
        for id in ids {
            let identity = certs.identity(id);
            for file in [identity.cert, identity.key] {
                if !file.is_file() {
                    return Err(DeviceCertError::Missing { device: id.clone(), file });
                }
            }
        }
        Ok(certs)
    }

    /// The certificate and key files of device `device_id`.
    pub fn identity(&self, device_id: &str) -> ClientIdentity {
        let dir = self.dir.join(device_id);
        ClientIdentity { cert: dir.join(DEVICE_CERT_FILE), key: dir.join(DEVICE_KEY_FILE) }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Issue `id`'s certificate and write it as `dir/<id>/device-cert.pem` and `device-key.pem`.
fn issue_one(ca: &FleetCa, dir: &Path, id: &str) -> Result<(), DeviceCertError> {
    let fail = |why: String| DeviceCertError::Issue { device: id.to_string(), why };
    let issued = ca.issue(id, RUN_CERT_DAYS).map_err(|e| fail(format!("{e:#}")))?;
    let out = dir.join(id);
    std::fs::create_dir(&out).map_err(|e| fail(format!("creating {}: {e}", out.display())))?;
    std::fs::write(out.join(DEVICE_CERT_FILE), &issued.cert_pem).map_err(|e| fail(format!("writing its certificate: {e}")))?;
    std::fs::write(out.join(DEVICE_KEY_FILE), &issued.key_pem).map_err(|e| fail(format!("writing its key: {e}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloud_gateway::identity::ca::init_ca;
    use quinn::rustls;
    use rustls::pki_types::pem::PemObject;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("fleet-{i}")).collect()
    }

    /// Whether the certificate in `path` names `id` as its subject's common name: the DER of
    /// the attribute (OID 2.5.4.3, a UTF8String of the id) is in it.
    fn names(path: &Path, id: &str) -> bool {
        let der = rustls::pki_types::CertificateDer::from_pem_file(path).expect("a PEM certificate");
        let mut attribute = vec![0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, u8::try_from(id.len()).expect("a short id")];
        attribute.extend_from_slice(id.as_bytes());
        der.as_ref().windows(attribute.len()).any(|w| w == attribute.as_slice())
    }

    #[test]
    fn every_simulated_device_gets_a_certificate_naming_it_in_milliseconds() {
        let dir = tempfile::tempdir().expect("temp dir");
        init_ca(dir.path(), "Test fleet CA", 1).expect("a CA");
        let n = 1000;
        let certs = DeviceCerts::issue(dir.path(), &ids(n), 2).expect("issued");
        for i in [0, 499, 999] {
            let id = format!("fleet-{i}");
            let identity = certs.identity(&id);
            assert!(names(&identity.cert, &id), "{id}");
            assert!(!names(&identity.cert, "fleet-1"), "{id}");
            assert!(identity.key.is_file());
        }
        let each = certs.summary.issue_ms_each.expect("timed");
        eprintln!("issued {n} device certificates in {:.0} ms: {each:.3} ms each", certs.summary.issue_ms.unwrap_or_default());
        // A fraction of a millisecond each (0.1-0.3 ms measured on 2 loaded cores); generous here.
        assert!(each < 20.0, "{each} ms per certificate");
        assert!(!std::fs::read_to_string(dir.path().join("issued.tsv")).is_ok_and(|log| log.contains("fleet-0")), "a run's certificates are not logged as enrolments");
    }

    #[test]
    fn the_issued_certificates_are_removed_with_the_run() {
        let dir = tempfile::tempdir().expect("temp dir");
        init_ca(dir.path(), "Test fleet CA", 1).expect("a CA");
        let certs = DeviceCerts::issue(dir.path(), &ids(3), 1).expect("issued");
        let file = certs.identity("fleet-2").cert;
        assert!(file.is_file());
        drop(certs);
        assert!(!file.exists());
    }

    #[test]
    fn a_missing_ca_or_pre_issued_certificate_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("temp dir");
        let err = DeviceCerts::issue(&dir.path().join("no-ca"), &ids(1), 1).expect_err("no CA there");
        assert!(err.to_string().starts_with("--fleet-ca-dir"), "{err}");
        init_ca(&dir.path().join("ca"), "Test fleet CA", 1).expect("a CA");
        let ca = FleetCa::load(&dir.path().join("ca")).expect("loads");
        let issued = ca.issue("fleet-0", 1).expect("issued");
        ca.write(&issued, &dir.path().join("certs/fleet-0")).expect("written");
        assert!(DeviceCerts::pre_issued(&dir.path().join("certs"), &ids(1)).is_ok());
        let err = DeviceCerts::pre_issued(&dir.path().join("certs"), &ids(2)).expect_err("fleet-1 has none");
        assert!(err.to_string().contains("device fleet-1") && err.to_string().contains("cloud-gateway ca issue"), "{err}");
    }

    #[test]
    fn an_id_the_ca_refuses_stops_the_issue_with_its_name() {
        let dir = tempfile::tempdir().expect("temp dir");
        init_ca(dir.path(), "Test fleet CA", 1).expect("a CA");
        let err = DeviceCerts::issue(dir.path(), &["ok-1".into(), "serial:0a".into()], 1).expect_err("refused");
        assert!(err.to_string().contains("serial:0a"), "{err}");
    }
}
