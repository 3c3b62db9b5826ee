//! The development gateway's self-signed certificate, kept across restarts.
//!
//! A device pins the gateway's certificate (`--ca-cert`, by default the file this writes). A
//! certificate made afresh at every start would make every running device refuse the restarted
//! gateway until someone copied the new file to it; so the certificate and its key are written
//! once, next to each other, and reused for as long as they still cover the names asked for
//! and belong together. Anything else (a missing or unreadable key, other names, an expired
//! certificate) makes a new pair, with a warning that pinned devices need the new file.
//!
//! The key is written beside the certificate as `<name with "cert" replaced by "key">`
//! (`gateway-cert.pem` → `gateway-key.pem`), or `<name>.key` if the name has no "cert", mode
//! 0600.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use x509_parser::extensions::GeneralName;

/// Where the key of the certificate written to `cert` is kept.
pub fn key_path(cert: &Path) -> PathBuf {
    let name = cert.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "gateway-cert.pem".into());
    let key_name = if name.contains("cert") { name.replacen("cert", "key", 1) } else { format!("{name}.key") };
    cert.with_file_name(key_name)
}

/// A certificate chain and its key.
pub type CertAndKey = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// The self-signed certificate for `names`: the one kept at `write_to` (and its key) if it
/// still fits, else a new one, written there. Without `write_to`, a new one every time.
pub fn load_or_create(names: &[String], write_to: Option<&Path>) -> anyhow::Result<CertAndKey> {
    let Some(cert_path) = write_to else { return generate(names).map(|(pair, _, _)| pair) };
    let key_file = key_path(cert_path);
    if cert_path.exists() || key_file.exists() {
        match reuse(names, cert_path, &key_file) {
            Ok(pair) => {
                tracing::info!(path = %cert_path.display(), "reusing the self-signed gateway certificate (devices that pinned it reconnect)");
                return Ok(pair);
            }
            Err(e) => tracing::warn!(path = %cert_path.display(), "making a new self-signed certificate ({e:#}): devices that pinned the old one need the new file"),
        }
    }
    let (pair, cert_pem, key_pem) = generate(names)?;
    if let Some(dir) = cert_path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // The key first, so a certificate on disk always has its key beside it.
    write_atomically(&key_file, &key_pem, true)?;
    write_atomically(cert_path, &cert_pem, false)?;
    tracing::info!(path = %cert_path.display(), key = %key_file.display(), "wrote the self-signed gateway certificate (give it to devices with --ca-cert)");
    Ok(pair)
}

fn generate(names: &[String]) -> anyhow::Result<(CertAndKey, String, String)> {
    let ck = rcgen::generate_simple_self_signed(names.to_vec()).context("generating a self-signed certificate")?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
    Ok(((vec![ck.cert.der().clone()], key), ck.cert.pem(), ck.signing_key.serialize_pem()))
}

/// The kept pair, if it covers `names`, is valid now and its key is the certificate's.
fn reuse(names: &[String], cert_path: &Path, key_file: &Path) -> anyhow::Result<CertAndKey> {
    let cert = CertificateDer::from_pem_file(cert_path).with_context(|| format!("reading {}", cert_path.display()))?;
    let key_pem = std::fs::read_to_string(key_file).with_context(|| format!("reading {}", key_file.display()))?;
    let key_pair = rcgen::KeyPair::from_pem(&key_pem).with_context(|| format!("parsing {}", key_file.display()))?;
    let (_, x509) = x509_parser::parse_x509_certificate(&cert).map_err(|e| anyhow::anyhow!("parsing {}: {e}", cert_path.display()))?;
    anyhow::ensure!(x509.public_key().subject_public_key.data.as_ref() == key_pair.public_key_raw(), "the key does not belong to the certificate");
    anyhow::ensure!(x509.validity().is_valid(), "the certificate is not valid now");
    let san = x509.subject_alternative_name().ok().flatten();
    let sans: &[GeneralName] = san.as_ref().map_or(&[], |e| e.value.general_names.as_slice());
    for name in names {
        let covered = match name.parse::<IpAddr>() {
            Ok(IpAddr::V4(ip)) => sans.iter().any(|g| matches!(g, GeneralName::IPAddress(b) if b[..] == ip.octets()[..])),
            Ok(IpAddr::V6(ip)) => sans.iter().any(|g| matches!(g, GeneralName::IPAddress(b) if b[..] == ip.octets()[..])),
            Err(_) => sans.iter().any(|g| matches!(g, GeneralName::DNSName(d) if d.eq_ignore_ascii_case(name))),
        };
        anyhow::ensure!(covered, "it does not cover `{name}`");
    }
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_pair.serialize_der()));
    Ok((vec![cert], key))
}

/// Write `text` to `path` through a temporary file and a rename, so a reader never sees half of
/// it; `private`: readable by the owner only.
fn write_atomically(path: &Path, text: &str, private: bool) -> anyhow::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    }
    let mut file = options.open(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    file.write_all(text.as_bytes()).with_context(|| format!("writing {}", tmp.display()))?;
    drop(file);
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["localhost".into(), "127.0.0.1".into()]
    }

    #[test]
    fn the_key_lives_beside_the_certificate() {
        assert_eq!(key_path(Path::new("/h/gateway-cert.pem")), Path::new("/h/gateway-key.pem"));
        assert_eq!(key_path(Path::new("/h/tls.pem")), Path::new("/h/tls.pem.key"));
    }

    #[test]
    fn a_restarted_gateway_serves_the_certificate_its_devices_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway-cert.pem");
        let (first, _) = load_or_create(&names(), Some(&path)).unwrap();
        let pinned = std::fs::read(&path).unwrap();
        let (again, _) = load_or_create(&names(), Some(&path)).unwrap();
        assert_eq!(first, again, "the same certificate after a restart");
        assert_eq!(std::fs::read(&path).unwrap(), pinned, "the pinned file is untouched");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(key_path(&path)).unwrap().permissions().mode() & 0o777, 0o600);
        }
    }

    #[test]
    fn a_certificate_that_no_longer_fits_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway-cert.pem");
        let (first, _) = load_or_create(&names(), Some(&path)).unwrap();
        // Another name asked for.
        let (other_names, _) = load_or_create(&["gw.example".to_string()], Some(&path)).unwrap();
        assert_ne!(first, other_names);
        // A key that is not the certificate's (or none at all).
        std::fs::write(key_path(&path), rcgen::KeyPair::generate().unwrap().serialize_pem()).unwrap();
        let (rekeyed, _) = load_or_create(&["gw.example".to_string()], Some(&path)).unwrap();
        assert_ne!(rekeyed, other_names);
        std::fs::remove_file(key_path(&path)).unwrap();
        let (fresh, _) = load_or_create(&["gw.example".to_string()], Some(&path)).unwrap();
        assert_ne!(fresh, rekeyed);
        assert!(key_path(&path).exists());
        // Without a place to keep it, a new one each time.
        assert_ne!(load_or_create(&names(), None).unwrap().0, load_or_create(&names(), None).unwrap().0);
    }
}
