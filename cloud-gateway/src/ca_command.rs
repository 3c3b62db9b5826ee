//! `cloud-gateway ca ...`: the operator's admin commands for device identity: create the
//! fleet CA, issue a device its certificate, revoke one; and, for devices that cannot hold a
//! certificate, make the per-device token secret and issue a device its token. They live in the gateway's binary (not
//! a separate tool) because they share its code for what a device id and a deny list are, so
//! what `ca` writes is exactly what the gateway accepts.
//!
//! `fleet` is the router rollout's command group ([`crate::fleet_command`]), dispatched on its
//! own; `cloud-gateway fleet init-ca|issue|revoke`, this command's old name, is passed on here
//! (with a warning) for one release. Its environment variables are `DUET_CA_*` for the same
//! reason: `DUET_FLEET_*`, their old names, are no longer read (a warning names any that is
//! set). `signing-key` makes the key that signs router bundles: an Ed25519 key of its own, not
//! the CA's, so that issuing identities and deciding what devices run are separate trusts.
//!
//! None of them needs a running gateway; `revoke` edits the deny-list file a running gateway
//! watches (`--revoked-file`), which takes effect at its next poll.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use common::device_token::DeviceTokenKey;

use crate::identity::ca::{init_ca, FleetCa, CA_CERT_FILE};
use crate::identity::revoked;

/// Device identity administration: the fleet CA, device certificates, revocation.
#[derive(Debug, Parser)]
#[command(name = "cloud-gateway ca", bin_name = "cloud-gateway ca")]
struct CaArgs {
    #[command(subcommand)]
    command: CaCommand,
}

/// The command's name (`cloud-gateway ca ...`).
pub const NAME: &str = "ca";

/// The command's definition as a subcommand of `cloud-gateway`, for its reference pages.
pub fn command() -> clap::Command {
    <CaArgs as clap::CommandFactory>::command().name(NAME).bin_name(format!("cloud-gateway {NAME}"))
}

/// The environment variables the subcommands read under their old `DUET_FLEET_*` names, with
/// their new ones: a set old one is warned about, never read.
const RENAMED_ENV: [(&str, &str); 8] = [
    ("DUET_FLEET_CA_DIR", "DUET_CA_DIR"),
    ("DUET_FLEET_CA_NAME", "DUET_CA_NAME"),
    ("DUET_FLEET_CA_DAYS", "DUET_CA_VALID_DAYS"),
    ("DUET_FLEET_DEVICE", "DUET_CA_DEVICE"),
    ("DUET_FLEET_DAYS", "DUET_CA_DEVICE_DAYS"),
    ("DUET_FLEET_OUT", "DUET_CA_OUT"),
    ("DUET_FLEET_CRL", "DUET_CA_CRL"),
    ("DUET_FLEET_REVOKE_REASON", "DUET_CA_REVOKE_REASON"),
];

#[derive(Debug, Subcommand)]
enum CaCommand {
    /// Create the fleet CA (ca-cert.pem, ca-key.pem) in a new directory. Give the gateway
    /// ca-cert.pem as --client-ca; keep ca-key.pem off the gateway.
    InitCa {
        /// Directory for the CA.
        #[arg(long, env = "DUET_CA_DIR")]
        dir: PathBuf,
        /// The CA's name (its certificate's common name).
        #[arg(long, env = "DUET_CA_NAME", default_value = "Duet fleet CA")]
        name: String,
        /// How long the CA is valid, days.
        #[arg(long, env = "DUET_CA_VALID_DAYS", default_value_t = 3650)]
        days: u32,
    },
    /// Issue a device its certificate and key (device-cert.pem, device-key.pem in --out): the
    /// device id is the certificate's subject common name. Install them on the device as
    /// edge-node's --client-cert and --client-key.
    Issue {
        /// The fleet CA's directory.
        #[arg(long, env = "DUET_CA_DIR")]
        ca_dir: PathBuf,
        /// The device id (1..=128 bytes, no control characters).
        #[arg(long, env = "DUET_CA_DEVICE")]
        device: String,
        /// How long the certificate is valid, days.
        #[arg(long, env = "DUET_CA_DEVICE_DAYS", default_value_t = 365)]
        days: u32,
        /// Directory to write the certificate and key into (must not hold an enrolment yet).
        #[arg(long, env = "DUET_CA_OUT")]
        out: PathBuf,
    },
    /// Create the secret per-device tokens are issued from (hex, mode 0600) at --out. Give the
    /// gateway --device-token-secret FILE; keep it as secret as a CA key.
    InitTokenSecret {
        /// The file to create (must not exist yet).
        #[arg(long, env = "DUET_DEVICE_TOKEN_SECRET")]
        out: PathBuf,
    },
    /// Print a device's token, issued from the secret: the device presents it as edge-node's
    /// --auth-token (DUET_AUTH_TOKEN), and it opens that device id only.
    IssueToken {
        /// The secret file (the gateway's --device-token-secret).
        #[arg(long, env = "DUET_DEVICE_TOKEN_SECRET")]
        secret: PathBuf,
        /// The device id (1..=128 bytes, no control characters).
        #[arg(long, env = "DUET_CA_DEVICE")]
        device: String,
    },
    /// Create the Ed25519 key that signs router bundles (bundle-signing.key, mode 0600, and
    /// bundle-signing.pub) in --dir. Devices trust bundle-signing.pub (edge-node
    /// --bundle-key); keep the private key where bundles are made, off gateways and devices.
    SigningKey {
        /// Directory for the key (may be the CA's).
        #[arg(long, env = "DUET_BUNDLE_KEY_DIR")]
        dir: PathBuf,
    },
    /// Revoke a device (all its certificates) or one certificate (serial:HEX, as `issue`
    /// printed it): in the deny list the gateway reloads (--revoked-file), in a CRL the fleet
    /// CA signs (--crl with --ca-dir; a device id revokes the certificates issued to it so
    /// far), or both.
    #[command(group = clap::ArgGroup::new("into").required(true).multiple(true).args(["revoked_file", "crl"]))]
    Revoke {
        /// The gateway's deny list (its --revoked-file); created if missing.
        #[arg(long, env = "DUET_REVOKED_FILE")]
        revoked_file: Option<PathBuf>,
        /// The CRL to add to (the gateway's --client-crl); created if missing, signed again.
        #[arg(long, env = "DUET_CA_CRL", requires = "ca_dir")]
        crl: Option<PathBuf>,
        /// The fleet CA's directory, to sign the CRL (with --crl).
        #[arg(long, env = "DUET_CA_DIR")]
        ca_dir: Option<PathBuf>,
        /// A device id, or serial:HEX for one certificate.
        entry: String,
        /// Why, for the file's comment.
        #[arg(long, env = "DUET_CA_REVOKE_REASON", default_value = "revoked")]
        reason: String,
    },
}

/// Run `cloud-gateway ca` with `argv` (its first element is the command's name).
pub fn run(argv: Vec<std::ffi::OsString>) -> anyhow::Result<()> {
    for (old, new) in RENAMED_ENV {
        if std::env::var_os(old).is_some() {
            eprintln!("warning: {old} is no longer read by `cloud-gateway ca`; set {new}");
        }
    }
    let args = CaArgs::parse_from(argv);
    if common::config_file::parse_only() {
        return Ok(());
    }
    match args.command {
        CaCommand::InitCa { dir, name, days } => {
            let cert = init_ca(&dir, &name, days)?;
            println!("fleet CA created in {}; give the gateway --client-ca {}", dir.display(), cert.display());
        }
        CaCommand::Issue { ca_dir, device, days, out } => {
            let ca = FleetCa::load(&ca_dir)?;
            let issued = ca.issue(&device, days)?;
            let (cert, key) = ca.write(&issued, &out)?;
            let until = issued.not_after.format(&time::format_description::well_known::Rfc3339).unwrap_or_else(|_| issued.not_after.to_string());
            println!("issued {device}: serial {} valid until {until}", issued.serial);
            println!("install on the device: edge-node ... --client-cert {} --client-key {}", cert.display(), key.display());
            println!("(the gateway trusts it through --client-ca {})", ca_dir.join(CA_CERT_FILE).display());
        }
        CaCommand::InitTokenSecret { out } => {
            crate::identity::ca::write_private(&out, &format!("{}\n", DeviceTokenKey::generate_secret()?))?;
            println!("per-device token secret written to {}; give the gateway --device-token-secret {}", out.display(), out.display());
            println!("issue a device its token: cloud-gateway ca issue-token --secret {} --device ID", out.display());
        }
        CaCommand::IssueToken { secret, device } => {
            common::device_id::check_device_id(&device)?;
            println!("{}", DeviceTokenKey::load(&secret)?.issue(&device));
        }
        CaCommand::SigningKey { dir } => {
            let (key, public) = crate::fleet::store::init_signing_key(&dir)?;
            println!("bundle signing key written to {} (keep it where bundles are made)", key.display());
            println!("give devices the public key: edge-node ... --bundle-key {}", public.display());
        }
        CaCommand::Revoke { revoked_file, crl, ca_dir, entry, reason } => {
            if let Some(revoked_file) = revoked_file {
                let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
                if revoked::append(&revoked_file, &entry, &format!("{reason} (unix time {stamp})"))? {
                    println!("revoked {}: gateways watching {} refuse it and close its connections at their next poll", entry.trim(), revoked_file.display());
                } else {
                    println!("{} was already revoked in {}", entry.trim(), revoked_file.display());
                }
            }
            if let (Some(crl), Some(ca_dir)) = (crl, ca_dir) {
                revoke_into_crl(&crl, &ca_dir, entry.trim())?;
            }
        }
    }
    Ok(())
}

/// `ca revoke --crl`: add `entry`'s serial (`serial:HEX`), or every serial issued to the device
/// `entry`, to the CRL at `crl`, signed by the CA in `ca_dir`.
fn revoke_into_crl(crl: &std::path::Path, ca_dir: &std::path::Path, entry: &str) -> anyhow::Result<()> {
    let ca = FleetCa::load(ca_dir)?;
    let serials = match entry.strip_prefix(revoked::SERIAL_PREFIX) {
        Some(hex) => vec![crate::identity::cert::Serial::from_hex(hex.trim()).ok_or_else(|| anyhow::anyhow!("`{hex}` is not a hex serial number"))?],
        None => {
            let serials = ca.issued_serials(entry)?;
            anyhow::ensure!(!serials.is_empty(), "no certificate issued to `{entry}` in {}", ca_dir.display());
            serials
        }
    };
    let added = ca.revoke_into_crl(crl, &serials)?;
    println!("revoked {entry} in the CRL {} ({added} new serial(s)): gateways with --client-crl {} refuse it at their next poll", crl.display(), crl.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::ca::{DEVICE_CERT_FILE, DEVICE_KEY_FILE, ISSUED_LOG};
    use crate::identity::revoked::DenyList;

    fn ca_cmd(args: &[&str]) -> anyhow::Result<()> {
        run(std::iter::once("ca").chain(args.iter().copied()).map(Into::into).collect())
    }

    #[test]
    fn init_ca_issue_and_revoke_work_from_the_command_line() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, out, revoked) = (dir.path().join("ca"), dir.path().join("enrol"), dir.path().join("revoked.txt"));
        let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
        ca_cmd(&["init-ca", "--dir", &s(&ca), "--days", "30"]).unwrap();
        assert!(ca_cmd(&["init-ca", "--dir", &s(&ca)]).is_err(), "never over an existing CA");
        ca_cmd(&["issue", "--ca-dir", &s(&ca), "--device", "device-7", "--days", "10", "--out", &s(&out)]).unwrap();
        assert!(out.join(DEVICE_CERT_FILE).exists() && out.join(DEVICE_KEY_FILE).exists());
        assert!(ca_cmd(&["issue", "--ca-dir", &s(&ca), "--device", "bad\u{7}id", "--out", &s(&dir.path().join("x"))]).is_err());
        let serial = std::fs::read_to_string(ca.join(ISSUED_LOG)).unwrap().split('\t').next().unwrap().to_string();
        ca_cmd(&["revoke", "--revoked-file", &s(&revoked), "device-9"]).unwrap();
        ca_cmd(&["revoke", "--revoked-file", &s(&revoked), &format!("serial:{serial}"), "--reason", "key leaked"]).unwrap();
        let list = DenyList::load(&revoked).unwrap();
        assert!(list.denies("device-9", None));
        use rustls::pki_types::pem::PemObject;
        let der = rustls::pki_types::CertificateDer::from_pem_file(out.join(DEVICE_CERT_FILE)).unwrap();
        let cert = crate::identity::cert::parse_device_cert(&der).unwrap();
        assert_eq!(cert.device_id, "device-7");
        assert!(list.denies("device-7", Some(&cert.serial)), "revoked by the serial issue logged");
    }

    #[test]
    fn a_token_secret_is_made_once_and_issues_tokens_the_gateway_accepts() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("device-token.secret");
        let s = secret.to_str().unwrap();
        ca_cmd(&["init-token-secret", "--out", s]).unwrap();
        assert!(ca_cmd(&["init-token-secret", "--out", s]).is_err(), "never over an existing secret");
        #[cfg(unix)]
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&secret).unwrap().permissions()) & 0o777, 0o600);
        let key = DeviceTokenKey::load(&secret).unwrap();
        assert!(key.verify("device-7", &key.issue("device-7")));
        ca_cmd(&["issue-token", "--secret", s, "--device", "device-7"]).unwrap();
        assert!(ca_cmd(&["issue-token", "--secret", s, "--device", "bad\nid"]).is_err());
    }

    #[test]
    fn revoke_into_a_crl_signs_the_serials_a_device_was_issued() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, crl) = (dir.path().join("ca"), dir.path().join("fleet-crl.pem"));
        let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
        ca_cmd(&["init-ca", "--dir", &s(&ca)]).unwrap();
        ca_cmd(&["issue", "--ca-dir", &s(&ca), "--device", "device-1", "--out", &s(&dir.path().join("d1"))]).unwrap();
        ca_cmd(&["issue", "--ca-dir", &s(&ca), "--device", "device-1", "--out", &s(&dir.path().join("d1b"))]).unwrap();
        ca_cmd(&["issue", "--ca-dir", &s(&ca), "--device", "device-2", "--out", &s(&dir.path().join("d2"))]).unwrap();
        assert!(CaArgs::try_parse_from(["ca", "revoke", "device-1"]).is_err(), "a deny list or a CRL to revoke into");
        assert!(CaArgs::try_parse_from(["ca", "revoke", "--crl", "x.pem", "device-1"]).is_err(), "a CRL needs the CA to sign it");
        ca_cmd(&["revoke", "--crl", &s(&crl), "--ca-dir", &s(&ca), "device-1"]).unwrap();
        let set = crate::identity::crl::CrlSet::load(std::slice::from_ref(&crl)).unwrap();
        assert_eq!(set.serials.len(), 2, "both certificates issued to device-1");
        assert!(ca_cmd(&["revoke", "--crl", &s(&crl), "--ca-dir", &s(&ca), "never-issued"]).is_err());
        let log = std::fs::read_to_string(ca.join(ISSUED_LOG)).unwrap();
        let d2 = log.lines().find(|l| l.contains("\tdevice-2\t")).unwrap().split('\t').next().unwrap().to_string();
        ca_cmd(&["revoke", "--crl", &s(&crl), "--ca-dir", &s(&ca), &format!("serial:{d2}")]).unwrap();
        assert_eq!(crate::identity::crl::CrlSet::load(std::slice::from_ref(&crl)).unwrap().serials.len(), 3);
    }
}
