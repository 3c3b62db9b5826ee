//! `cloud-gateway fleet ...`: the operator's commands for rolling a router out to the devices.
//!
//! - `fleet bundle`: make a bundle from a router file (as `router-lab train` writes it) and
//!   device settings, signed with the key `cloud-gateway ca signing-key` made.
//! - `fleet publish BUNDLE --to PERCENT`: make it its SLM's current bundle in the bundle store
//!   the gateways serve (`--bundle-store`), for that share of devices; rollback is publishing
//!   the previous bundle again.
//! - `fleet status`: what the store rolls out.
//!
//! None needs a running gateway: gateways pick up the store's change at their next poll.
//! `cloud-gateway fleet init-ca|issue|revoke` (any word after `fleet` that is not one of its
//! own) is the CA commands' old spelling: passed on to [`crate::ca_command`] with a warning,
//! for one release.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand};
use common::fleet::{Bundle, BundleManifest, DeviceSettings, Sha256Digest};
use common::router_header::RouterHeader;

use crate::fleet::store;

/// Router bundles and their rollout to the fleet.
#[derive(Debug, Parser)]
#[command(name = "cloud-gateway fleet", bin_name = "cloud-gateway fleet")]
struct FleetArgs {
    #[command(subcommand)]
    command: FleetCommand,
}

/// The command's name (`cloud-gateway fleet ...`).
pub const NAME: &str = "fleet";

/// The command's definition as a subcommand of `cloud-gateway`, for its reference pages.
pub fn command() -> clap::Command {
    <FleetArgs as clap::CommandFactory>::command().name(NAME).bin_name(format!("cloud-gateway {NAME}"))
}

/// The words `fleet` answers itself after its name (anything else is a CA command's old
/// spelling).
const SUBCOMMANDS: [&str; 6] = ["bundle", "publish", "status", "help", "--help", "-h"];

#[derive(Debug, Subcommand)]
enum FleetCommand {
    /// Make a signed bundle: a router file and the device settings to run it with, for the SLM
    /// and tokenizer the router file names.
    Bundle {
        /// Router file from `router-lab train` (safetensors).
        #[arg(long, env = "DUET_BUNDLE_ROUTER")]
        router: PathBuf,
        /// The bundle's version label (1..=64 of [A-Za-z0-9._+-]); devices report it.
        #[arg(long = "version", env = "DUET_BUNDLE_VERSION")]
        bundle_version: String,
        /// The signing key (`cloud-gateway ca signing-key` wrote bundle-signing.key).
        #[arg(long, env = "DUET_BUNDLE_SIGNING_KEY")]
        signing_key: PathBuf,
        /// Where to write the bundle.
        #[arg(long, env = "DUET_BUNDLE_OUT")]
        out: PathBuf,
        /// The SLM it is for; default: the router file's. Given, it must agree with the file.
        #[arg(long, env = "DUET_BUNDLE_SLM")]
        slm: Option<String>,
        /// The SLM's tokenizer fingerprint; default: the router file's.
        #[arg(long, env = "DUET_BUNDLE_TOKENIZER_FINGERPRINT")]
        tokenizer_fingerprint: Option<String>,
        /// Devices escalate this share of tokens (through the router's calibration table).
        #[arg(long, env = "DUET_BUNDLE_ESCALATION_RATE", conflicts_with = "tau")]
        escalation_rate: Option<f32>,
        /// Devices escalate below this fixed threshold instead.
        #[arg(long, env = "DUET_BUNDLE_TAU")]
        tau: Option<f32>,
        /// Devices' shortest wait for a cloud token, ms.
        #[arg(long, env = "DUET_BUNDLE_DEADLINE_MIN_MS")]
        deadline_min_ms: Option<u32>,
        /// Devices' longest wait for a cloud token, ms.
        #[arg(long, env = "DUET_BUNDLE_DEADLINE_MAX_MS")]
        deadline_max_ms: Option<u32>,
        /// Tokens devices may decode ahead of an escalation in flight.
        #[arg(long, env = "DUET_BUNDLE_SPECULATE")]
        speculate: Option<u32>,
    },
    /// Publish a bundle to a share of its SLM's devices (stable by device id: the same devices
    /// at every replica and after restarts; raising the share keeps them in).
    Publish {
        /// The bundle file (`fleet bundle` made it).
        bundle: PathBuf,
        /// The bundle store the gateways serve (their --bundle-store).
        #[arg(long, env = "DUET_BUNDLE_STORE")]
        bundle_store: PathBuf,
        /// Share of the SLM's devices, percent (1..=100).
        #[arg(long, env = "DUET_BUNDLE_TO", default_value_t = 100, value_parser = clap::value_parser!(u8).range(1..=100))]
        to: u8,
        /// Check the signature with this public key (bundle-signing.pub) before publishing.
        #[arg(long, env = "DUET_BUNDLE_KEY")]
        bundle_key: Option<PathBuf>,
    },
    /// Show what the bundle store rolls out.
    Status {
        /// The bundle store.
        #[arg(long, env = "DUET_BUNDLE_STORE")]
        bundle_store: PathBuf,
    },
}

/// The SLM id and tokenizer fingerprint a router file says it was trained for: read from its
/// safetensors header's `duet_router` metadata ([`RouterHeader`]), without loading the weights.
pub fn router_file_target(path: &Path) -> anyhow::Result<(String, String)> {
    let header = RouterHeader::from_file(path).with_context(|| format!("router file {}", path.display()))?;
    Ok((header.slm_id, header.tokenizer_fingerprint))
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Run `cloud-gateway fleet` with `argv` (its first element is the command's name).
pub fn run(argv: Vec<std::ffi::OsString>) -> anyhow::Result<()> {
    if argv.get(1).is_some_and(|a| !SUBCOMMANDS.iter().any(|s| a == s)) {
        eprintln!("warning: `cloud-gateway fleet {}` is now `cloud-gateway ca {}`; the old spelling goes in the next release", argv[1].to_string_lossy(), argv[1].to_string_lossy());
        let ca = std::iter::once(crate::ca_command::NAME.into()).chain(argv.into_iter().skip(1)).collect();
        return crate::ca_command::run(ca);
    }
    let args = FleetArgs::parse_from(argv);
    if common::config_file::parse_only() {
        return Ok(());
    }
    match args.command {
        FleetCommand::Bundle { router, bundle_version, signing_key, out, slm, tokenizer_fingerprint, escalation_rate, tau, deadline_min_ms, deadline_max_ms, speculate } => {
            let (file_slm, file_fp) = router_file_target(&router)?;
            for (flag, given, file) in [("--slm", &slm, &file_slm), ("--tokenizer-fingerprint", &tokenizer_fingerprint, &file_fp)] {
                if let Some(given) = given {
                    anyhow::ensure!(given == file, "{flag} `{given}` disagrees with the router file, which was trained for `{file}`");
                }
            }
            let key = store::load_signing_key(&signing_key)?;
            let bytes = std::fs::read(&router).with_context(|| format!("reading {}", router.display()))?;
            let manifest = BundleManifest {
                version: bundle_version,
                slm_id: file_slm,
                tokenizer_fingerprint: file_fp,
                settings: DeviceSettings { escalation_rate, tau, deadline_min_ms, deadline_max_ms, speculate },
                router_sha256: Sha256Digest::default(),
                key_id: [0; 8],
                created_unix: unix_now(),
            };
            let bundle = Bundle::sign(manifest, bytes, &key)?;
            let encoded = bundle.encode();
            std::fs::write(&out, &encoded).with_context(|| format!("writing {}", out.display()))?;
            let m = &bundle.manifest;
            println!("bundle {} for {} ({} bytes, sha256 {}) written to {}", m.version, m.slm_id, encoded.len(), Sha256Digest::of(&encoded), out.display());
            println!("publish it: cloud-gateway fleet publish {} --bundle-store DIR --to 10", out.display());
        }
        FleetCommand::Publish { bundle, bundle_store, to, bundle_key } => {
            let key = bundle_key.as_deref().map(store::load_verifying_key).transpose()?;
            let bytes = std::fs::read(&bundle).with_context(|| format!("reading {}", bundle.display()))?;
            let published = store::publish(&bundle_store, &bytes, to, key.as_ref())?;
            let r = &published.rollout;
            let baseline = r.previous.as_ref().map_or("their own router".to_string(), |p| format!("bundle {}", p.version));
            println!("{}: bundle {} to {} % of devices, the others on {}; gateways serving {} pick it up at their next poll", published.slm_id, r.current.version, r.percent, baseline, bundle_store.display());
        }
        FleetCommand::Status { bundle_store } => {
            let Some(bytes) = store::read_rollout_bytes(&bundle_store)? else {
                println!("{}: nothing published yet", bundle_store.display());
                return Ok(());
            };
            let (snapshot, warnings) = store::load_snapshot(&bundle_store, &bytes)?;
            let file = store::parse_rollout(&bytes)?;
            for (slm, r) in &file.slms {
                let state = if snapshot.slms.contains_key(slm) { "served" } else { "NOT SERVED" };
                let previous = r.previous.as_ref().map_or("-".to_string(), |p| p.version.clone());
                println!("{slm}: current {} ({} %), previous {previous}: {state}", r.current.version, r.percent);
            }
            for w in warnings {
                println!("warning: {w}");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use edge_node::routing::router_file::{Calibration, MlpRouterModel};

    use super::*;
    use crate::fleet::store::{load_snapshot, read_rollout_bytes, PUBLIC_KEY_FILE, SIGNING_KEY_FILE};

    /// A router file for `slm` (hidden size 8) written to `path`.
    pub(crate) fn write_router(path: &Path, slm: &str, fp: &str) {
        let calibration = Calibration::from_confidences(&[0.1, 0.2, 0.3, 0.9], &[0.25, 0.5]);
        MlpRouterModel::constant(slm, fp, 8, 4, calibration).unwrap().save(path).unwrap();
    }

    /// `cloud-gateway ARGS...` for the two admin commands, dispatched as `main` does.
    fn cmd(args: &[&str]) -> anyhow::Result<()> {
        let argv = args.iter().map(Into::into).collect();
        match args[0] {
            NAME => run(argv),
            _ => crate::ca_command::run(argv),
        }
    }

    #[test]
    fn a_router_file_with_a_bad_header_is_refused_by_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let router = dir.path().join("r.safetensors");
        std::fs::write(&router, b"not a router").unwrap();
        let e = router_file_target(&router).unwrap_err();
        assert!(format!("{e:#}").contains("not a safetensors file"), "{e:#}");
        assert!(router_file_target(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn signing_key_bundle_publish_status_and_rollback_from_the_command_line() {
        let dir = tempfile::tempdir().unwrap();
        let s = |p: &Path| p.to_str().unwrap().to_string();
        let keys = dir.path().join("keys");
        cmd(&["ca", "signing-key", "--dir", &s(&keys)]).unwrap();
        assert!(cmd(&["ca", "signing-key", "--dir", &s(&keys)]).is_err(), "never over an existing key");
        let router = dir.path().join("r.safetensors");
        let fp = "ab".repeat(32);
        write_router(&router, "slm-x", &fp);
        assert_eq!(router_file_target(&router).unwrap(), ("slm-x".to_string(), fp.clone()));
        let store = dir.path().join("store");
        let (b1, b2) = (dir.path().join("v1.bundle"), dir.path().join("v2.bundle"));
        let key = s(&keys.join(SIGNING_KEY_FILE));
        cmd(&["fleet", "bundle", "--router", &s(&router), "--version", "v1", "--signing-key", &key, "--out", &s(&b1), "--escalation-rate", "0.1"]).unwrap();
        cmd(&["fleet", "bundle", "--router", &s(&router), "--version", "v2", "--signing-key", &key, "--out", &s(&b2), "--speculate", "4"]).unwrap();
        assert!(cmd(&["fleet", "bundle", "--router", &s(&router), "--version", "v3", "--signing-key", &key, "--out", &s(&b2), "--slm", "another"]).is_err(), "--slm must agree with the router file");
        assert!(cmd(&["fleet", "bundle", "--router", &s(&router), "--version", "v3", "--signing-key", &key, "--out", &s(&b2), "--tau", "2"]).is_err(), "settings are checked");
        let public = s(&keys.join(PUBLIC_KEY_FILE));
        cmd(&["fleet", "publish", &s(&b1), "--bundle-store", &s(&store), "--bundle-key", &public]).unwrap();
        cmd(&["fleet", "publish", &s(&b2), "--bundle-store", &s(&store), "--to", "50"]).unwrap();
        cmd(&["fleet", "status", "--bundle-store", &s(&store)]).unwrap();
        let (snapshot, warnings) = load_snapshot(&store, &read_rollout_bytes(&store).unwrap().unwrap()).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let r = &snapshot.slms["slm-x"].rollout;
        assert_eq!((r.current.version.as_str(), r.percent, r.previous.as_ref().map(|p| p.version.as_str())), ("v2", 50, Some("v1")));
        // Rollback.
        cmd(&["fleet", "publish", &s(&b1), "--bundle-store", &s(&store)]).unwrap();
        let (snapshot, _) = load_snapshot(&store, &read_rollout_bytes(&store).unwrap().unwrap()).unwrap();
        assert!((0..100).all(|i| snapshot.assign("slm-x", &format!("d{i}")).map(|b| b.version) == Some("v1".into())));
    }

    #[test]
    fn the_old_spelling_fleet_still_runs_the_ca_commands() {
        let dir = tempfile::tempdir().unwrap();
        let revoked = dir.path().join("revoked.txt");
        cmd(&["fleet", "revoke", "--revoked-file", revoked.to_str().unwrap(), "device-3"]).unwrap();
        assert!(crate::identity::revoked::DenyList::load(&revoked).unwrap().denies("device-3", None));
    }

    #[test]
    fn publish_refuses_foreign_unsigned_and_relabelled_bundles() {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        let (key_path, pub_path) = store::init_signing_key(&keys).unwrap();
        let key = store::load_signing_key(&key_path).unwrap();
        let public = store::load_verifying_key(&pub_path).unwrap();
        let manifest = |version: &str| BundleManifest {
            version: version.into(),
            slm_id: "s".into(),
            tokenizer_fingerprint: "f".into(),
            settings: DeviceSettings::default(),
            router_sha256: Sha256Digest::default(),
            key_id: [0; 8],
            created_unix: 0,
        };
        let good = Bundle::sign(manifest("v1"), vec![1; 100], &key).unwrap().encode();
        let store_dir = dir.path().join("store");
        assert!(store::publish(&store_dir, b"not a bundle", 100, None).is_err());
        let other = common::fleet::SigningKey::generate().unwrap().0;
        let foreign = Bundle::sign(manifest("v1"), vec![1; 100], &other).unwrap().encode();
        assert!(store::publish(&store_dir, &foreign, 100, Some(&public)).is_err(), "another key");
        store::publish(&store_dir, &good, 100, Some(&public)).unwrap();
        let same_label = Bundle::sign(manifest("v1"), vec![2; 100], &key).unwrap().encode();
        assert!(store::publish(&store_dir, &same_label, 100, None).is_err(), "a version is never reused for other contents");
    }

    #[test]
    fn a_damaged_or_misfiled_bundle_leaves_its_slm_out_and_the_others_served() {
        let dir = tempfile::tempdir().unwrap();
        let (key_path, _) = store::init_signing_key(&dir.path().join("k")).unwrap();
        let key = store::load_signing_key(&key_path).unwrap();
        let bundle = |slm: &str| {
            let m = BundleManifest {
                version: "v1".into(),
                slm_id: slm.into(),
                tokenizer_fingerprint: "f".into(),
                settings: DeviceSettings::default(),
                router_sha256: Sha256Digest::default(),
                key_id: [0; 8],
                created_unix: 0,
            };
            Bundle::sign(m, vec![3; 64], &key).unwrap().encode()
        };
        let store_dir = dir.path().join("store");
        store::publish(&store_dir, &bundle("a"), 100, None).unwrap();
        let b = store::publish(&store_dir, &bundle("b"), 100, None).unwrap();
        // Truncate b's file in place.
        let path = store_dir.join(store::BUNDLES_DIR).join(format!("{}.bundle", b.rollout.current.sha256.to_hex()));
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
        let (snapshot, warnings) = load_snapshot(&store_dir, &read_rollout_bytes(&store_dir).unwrap().unwrap()).unwrap();
        assert!(snapshot.slms.contains_key("a") && !snapshot.slms.contains_key("b"));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        // a's bundle listed under c: refused by its manifest's SLM.
        let mut file = store::parse_rollout(&read_rollout_bytes(&store_dir).unwrap().unwrap()).unwrap();
        let a = file.slms["a"].clone();
        file.slms.insert("c".into(), a);
        let text = serde_json::to_vec(&file).unwrap();
        let (snapshot, warnings) = load_snapshot(&store_dir, &text).unwrap();
        assert!(!snapshot.slms.contains_key("c") && snapshot.slms.contains_key("a"), "{warnings:?}");
    }

    #[test]
    fn the_gateway_reloads_the_store_when_rollout_json_changes() {
        let dir = tempfile::tempdir().unwrap();
        let (key_path, _) = store::init_signing_key(&dir.path().join("k")).unwrap();
        let key = store::load_signing_key(&key_path).unwrap();
        let store_dir = dir.path().join("store");
        let fleet = crate::fleet::Fleet::new(Some(store_dir.clone()), std::time::Duration::from_secs(1), None, 65_536);
        assert!(fleet.snapshot().slms.is_empty() && !fleet.reload(), "an empty store serves nothing");
        let m = BundleManifest {
            version: "v1".into(),
            slm_id: "s".into(),
            tokenizer_fingerprint: "f".into(),
            settings: DeviceSettings::default(),
            router_sha256: Sha256Digest::default(),
            key_id: [0; 8],
            created_unix: 0,
        };
        let bytes = Bundle::sign(m, vec![5; 100_000], &key).unwrap().encode();
        store::publish(&store_dir, &bytes, 100, None).unwrap();
        assert!(fleet.reload());
        assert!(!fleet.reload(), "unchanged: not reloaded");
        let d: std::sync::Arc<str> = std::sync::Arc::from("dev");
        fleet.connected(&d, "s", 4, 1);
        let common::protocol::Frame::BundleOffer { bundle: Some(offered) } = fleet.report("dev", None, 0, 0) else { panic!("offered") };
        let common::protocol::Frame::BundleChunk { bytes: first, total, .. } = fleet.fetch("dev", offered.sha256, 0) else { panic!("a chunk") };
        assert_eq!((first.len(), total as usize), (common::fleet::MAX_CHUNK_BYTES, bytes.len()));
        fleet.connected(&std::sync::Arc::from("other-slm-device"), "t", 4, 2);
        assert!(matches!(fleet.fetch("other-slm-device", offered.sha256, 0), common::protocol::Frame::Error { .. }), "only the device's own SLM's bundles");
        // A store that turns unreadable keeps serving what was loaded.
        std::fs::write(store_dir.join(store::ROLLOUT_FILE), b"{ not json").unwrap();
        assert!(!fleet.reload());
        assert!(fleet.snapshot().slms.contains_key("s"));
    }
}
