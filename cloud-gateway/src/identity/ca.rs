//! The fleet CA: the key that vouches for every device, and the device certificates it issues
//! (rcgen). `cloud-gateway ca` drives it ([`crate::ca_command`]); the gateway itself only needs
//! the CA's certificate (`--client-ca`), never its key.
//!
//! A device certificate names its device in the subject's common name, the one place the
//! gateway reads the id from; it is an ECDSA P-256 key (cheap handshakes on small devices),
//! marked for TLS client authentication only, with a random 128-bit serial so a deny list can
//! name one certificate without naming the device. Every issue is appended to the CA
//! directory's `issued.tsv` (serial, device, expiry) so an operator can find a serial to revoke.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use common::device_id::check_device_id;
use rcgen::{BasicConstraints, CertificateParams, CertificateRevocationListParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose, RevokedCertParams, SerialNumber};
use time::OffsetDateTime;

use super::cert::Serial;
use super::revoked::SERIAL_PREFIX;

/// The CA certificate's file in a CA directory (what the gateway's `--client-ca` names).
pub const CA_CERT_FILE: &str = "ca-cert.pem";
/// The CA's private key in a CA directory (keep it off the gateway).
pub const CA_KEY_FILE: &str = "ca-key.pem";
/// The log of issued certificates in a CA directory.
pub const ISSUED_LOG: &str = "issued.tsv";
/// A device certificate's file in an enrolment directory (the edge's `--client-cert`).
pub const DEVICE_CERT_FILE: &str = "device-cert.pem";
/// A device key's file in an enrolment directory (the edge's `--client-key`).
pub const DEVICE_KEY_FILE: &str = "device-key.pem";

const DAY_SECONDS: i64 = 86_400;
/// Certificates start a little in the past, so a device whose clock is slightly behind the
/// issuing machine's can use one at once.
const BACKDATE_SECONDS: i64 = 3_600;

/// A loaded fleet CA, ready to issue.
pub struct FleetCa {
    issuer: Issuer<'static, KeyPair>,
    dir: PathBuf,
}

/// A device certificate just issued.
#[derive(Debug, Clone)]
pub struct IssuedCert {
    /// The device id (subject common name).
    pub device_id: String,
    /// Its serial, for a deny list (`serial:HEX`).
    pub serial: Serial,
    /// Certificate, PEM.
    pub cert_pem: String,
    /// Private key, PEM (PKCS#8).
    pub key_pem: String,
    /// Not valid after this time.
    pub not_after: OffsetDateTime,
}

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn at(unix: i64) -> anyhow::Result<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp(unix).map_err(|e| anyhow::anyhow!("time {unix} out of range: {e}"))
}

/// Write `text` to `path` readable by its owner only (a private key), refusing to overwrite.
pub(crate) fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).with_context(|| format!("creating {} (it must not exist yet)", path.display()))?;
    file.write_all(text.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Create a fleet CA in `dir` (created if needed): `ca-cert.pem` and `ca-key.pem` (mode 0600),
/// named `name`, valid for `days`. Refuses to overwrite an existing CA: every device
/// certificate it issued would stop being trusted.
pub fn init_ca(dir: &Path, name: &str, days: u32) -> anyhow::Result<PathBuf> {
    let (cert_path, key_path) = (dir.join(CA_CERT_FILE), dir.join(CA_KEY_FILE));
    anyhow::ensure!(!cert_path.exists() && !key_path.exists(), "a fleet CA already exists in {} (replacing it would orphan every device)", dir.display());
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn.push(DnType::OrganizationName, "Duet fleet");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params.serial_number = Some(random_serial());
    let now = unix_now();
    params.not_before = at(now - BACKDATE_SECONDS)?;
    params.not_after = at(now + i64::from(days.max(1)) * DAY_SECONDS)?;
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    write_private(&key_path, &key.serialize_pem())?;
    std::fs::write(&cert_path, cert.pem()).with_context(|| format!("writing {}", cert_path.display()))?;
    Ok(cert_path)
}

/// A random positive 128-bit serial (RFC 5280 asks for at most 20 bytes, unpredictable).
fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] = (bytes[0] & 0x7f) | 0x40; // positive, and 16 bytes long in DER
    SerialNumber::from(bytes.to_vec())
}

impl FleetCa {
    /// Load the CA in `dir` (as [`init_ca`] wrote it).
    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        let (cert_path, key_path) = (dir.join(CA_CERT_FILE), dir.join(CA_KEY_FILE));
        let cert = std::fs::read_to_string(&cert_path).with_context(|| format!("reading {} (create a CA with `cloud-gateway ca init-ca`)", cert_path.display()))?;
        let key = std::fs::read_to_string(&key_path).with_context(|| format!("reading {}", key_path.display()))?;
        let key = KeyPair::from_pem(&key).with_context(|| format!("parsing {}", key_path.display()))?;
        let issuer = Issuer::from_ca_cert_pem(&cert, key).with_context(|| format!("parsing {}", cert_path.display()))?;
        Ok(Self { issuer, dir: dir.to_path_buf() })
    }

    /// Issue a certificate for `device_id`, valid for `days` from now.
    pub fn issue(&self, device_id: &str, days: u32) -> anyhow::Result<IssuedCert> {
        let now = unix_now();
        self.issue_between(device_id, now - BACKDATE_SECONDS, now + i64::from(days.max(1)) * DAY_SECONDS)
    }

    /// Issue a certificate for `device_id` valid between two Unix times (tests make expired
    /// ones with this).
    pub fn issue_between(&self, device_id: &str, not_before: i64, not_after: i64) -> anyhow::Result<IssuedCert> {
        check_device_id(device_id).with_context(|| format!("device id {device_id:?}"))?;
        anyhow::ensure!(!device_id.starts_with(SERIAL_PREFIX), "a device id may not begin with `{SERIAL_PREFIX}` (a deny list would read it as a serial)");
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, device_id);
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let serial = random_serial();
        params.serial_number = Some(serial.clone());
        params.not_before = at(not_before)?;
        params.not_after = at(not_after)?;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(IssuedCert {
            device_id: device_id.to_string(),
            serial: Serial::from_bytes(serial.as_ref()),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_after: params.not_after,
        })
    }

    /// Write `issued` into `out` (created if needed) as `device-cert.pem` and `device-key.pem`
    /// (mode 0600), and log it in the CA directory. Refuses to overwrite an enrolment.
    pub fn write(&self, issued: &IssuedCert, out: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let (cert_path, key_path) = (out.join(DEVICE_CERT_FILE), out.join(DEVICE_KEY_FILE));
        anyhow::ensure!(!cert_path.exists(), "{} exists: issue into another directory (rotation keeps the old certificate until it is revoked or expires)", cert_path.display());
        write_private(&key_path, &issued.key_pem)?;
        std::fs::write(&cert_path, &issued.cert_pem).with_context(|| format!("writing {}", cert_path.display()))?;
        let log = self.dir.join(ISSUED_LOG);
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&log).with_context(|| format!("opening {}", log.display()))?;
        let until = issued.not_after.format(&time::format_description::well_known::Rfc3339).unwrap_or_else(|_| issued.not_after.unix_timestamp().to_string());
        writeln!(file, "{}\t{}\t{until}", issued.serial, issued.device_id).with_context(|| format!("writing {}", log.display()))?;
        Ok((cert_path, key_path))
    }
}

impl FleetCa {
    /// The serials `issued.tsv` logged for `device_id` (every certificate issued to it so far).
    pub fn issued_serials(&self, device_id: &str) -> anyhow::Result<Vec<Serial>> {
        let log = self.dir.join(ISSUED_LOG);
        let text = std::fs::read_to_string(&log).with_context(|| format!("reading {}", log.display()))?;
        Ok(text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split('\t');
                let serial = Serial::from_hex(fields.next()?)?;
                (fields.next()? == device_id).then_some(serial)
            })
            .collect())
    }

    /// Add `serials` to the CRL at `path` (created if missing: the entries already there are
    /// kept) and sign it again with the next CRL number; the file is replaced whole, so a
    /// gateway never reads half of it. Returns how many serials were new.
    pub fn revoke_into_crl(&self, path: &Path, serials: &[Serial]) -> anyhow::Result<usize> {
        let (mut revoked, number) = match std::fs::read(path) {
            Ok(bytes) => read_own_crl(path, &bytes)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Vec::new(), 0),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let now = unix_now();
        let mut added = 0;
        for serial in serials {
            if !revoked.iter().any(|(s, _)| s == serial) {
                revoked.push((serial.clone(), now));
                added += 1;
            }
        }
        let params = CertificateRevocationListParams {
            this_update: at(now - BACKDATE_SECONDS)?,
            next_update: at(now + CRL_VALID_DAYS * DAY_SECONDS)?,
            crl_number: SerialNumber::from(number.saturating_add(1).to_be_bytes().to_vec()),
            issuing_distribution_point: None,
            revoked_certs: revoked
                .iter()
                .map(|(serial, when)| Ok(RevokedCertParams { serial_number: SerialNumber::from(serial.to_bytes()), revocation_time: at(*when)?, reason_code: None, invalidity_date: None }))
                .collect::<anyhow::Result<Vec<_>>>()?,
            key_identifier_method: KeyIdMethod::Sha256,
        };
        let pem = params.signed_by(&self.issuer).context("signing the CRL")?.pem().context("encoding the CRL")?;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, pem).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))?;
        Ok(added)
    }
}

/// How long a CRL says it is current (the gateway does not refuse a CRL past it: a fleet whose
/// operator revokes nothing for a year keeps working).
const CRL_VALID_DAYS: i64 = 365;

/// The entries (serial, revocation time) and CRL number of a CRL this CA wrote before.
fn read_own_crl(path: &Path, bytes: &[u8]) -> anyhow::Result<(Vec<(Serial, i64)>, u64)> {
    use rustls::pki_types::pem::PemObject;
    let der = rustls::pki_types::CertificateRevocationListDer::from_pem_slice(bytes).with_context(|| format!("{} is not a PEM CRL", path.display()))?;
    let (_, crl) = x509_parser::parse_x509_crl(der.as_ref()).map_err(|e| anyhow::anyhow!("parsing the CRL {}: {e}", path.display()))?;
    let entries = crl.iter_revoked_certificates().map(|r| (Serial::from_bytes(r.raw_serial()), r.revocation_date.timestamp())).collect();
    let number = crl.crl_number().map_or(0, |n| n.to_bytes_be().iter().fold(0u64, |acc, &b| acc.saturating_mul(256).saturating_add(u64::from(b))));
    Ok((entries, number))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::cert::parse_device_cert;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;

    #[test]
    fn a_ca_issues_client_certificates_that_name_their_device() {
        let dir = tempfile::tempdir().unwrap();
        let ca_dir = dir.path().join("ca");
        init_ca(&ca_dir, "Test fleet CA", 30).unwrap();
        assert!(init_ca(&ca_dir, "again", 30).is_err(), "an existing CA is never overwritten");
        let ca = FleetCa::load(&ca_dir).unwrap();
        let issued = ca.issue("device-a", 7).unwrap();
        let der = CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).unwrap();
        let parsed = parse_device_cert(&der).unwrap();
        assert_eq!((parsed.device_id.as_str(), &parsed.serial), ("device-a", &issued.serial));
        assert_eq!(issued.serial.to_hex().len(), 32);
        let (cert, key) = ca.write(&issued, &dir.path().join("device-a")).unwrap();
        assert!(cert.exists() && key.exists());
        assert!(ca.write(&issued, &dir.path().join("device-a")).is_err(), "an enrolment is never overwritten");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
            assert_eq!(std::fs::metadata(ca_dir.join(CA_KEY_FILE)).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let log = std::fs::read_to_string(ca_dir.join(ISSUED_LOG)).unwrap();
        assert!(log.starts_with(&format!("{}\tdevice-a\t", issued.serial)), "{log}");
    }

    #[test]
    fn bad_device_ids_are_refused_at_issue() {
        let dir = tempfile::tempdir().unwrap();
        init_ca(dir.path(), "ca", 1).unwrap();
        let ca = FleetCa::load(dir.path()).unwrap();
        for bad in ["", "a\nb", "esc\u{1b}[0m", "serial:0a", &"x".repeat(200)] {
            assert!(ca.issue(bad, 1).is_err(), "{bad:?}");
        }
    }
}
