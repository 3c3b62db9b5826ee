//! The bundle store: a directory every gateway replica reads and `cloud-gateway fleet publish`
//! writes.
//!
//! ```text
//! DIR/rollout.json                 which bundle each SLM rolls out, to what share, over which baseline
//! DIR/bundles/<sha256>.bundle      the bundle files, named by their content (never rewritten)
//! ```
//!
//! Publishing writes the bundle file first and `rollout.json` last, each to a temporary name
//! renamed into place, so a reader sees the old rollout or the new one, never half of one, and
//! every file the rollout names is already there. A Kubernetes volume gives replicas the same
//! view: a ReadWriteMany volume written by `fleet publish`, or a ConfigMap (a ConfigMap's
//! files change by an atomic swap of its `..data` link, within the kubelet's sync period).
//! Gateways re-read `rollout.json` every poll and reload when its bytes change.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use common::fleet::{Bundle, BundleRef, Sha256Digest, SigningKey, SlmRollout, VerifyingKey, MAX_BUNDLE_BYTES};
use serde::{Deserialize, Serialize};

/// The rollout file's name in the store.
pub const ROLLOUT_FILE: &str = "rollout.json";
/// The bundles' directory in the store.
pub const BUNDLES_DIR: &str = "bundles";
/// Largest `rollout.json` read, bytes.
const MAX_ROLLOUT_FILE_BYTES: u64 = 1024 * 1024;
/// Most SLMs one store rolls out to (bounds what a gateway holds in memory: two bundles each).
pub const MAX_SLMS: usize = 32;
/// The signing key's file name (written by `cloud-gateway ca signing-key`).
pub const SIGNING_KEY_FILE: &str = "bundle-signing.key";
/// The public key's file name: what devices get as `--bundle-key`.
pub const PUBLIC_KEY_FILE: &str = "bundle-signing.pub";

/// `rollout.json`: each SLM's rollout.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RolloutFile {
    /// By SLM id.
    pub slms: std::collections::BTreeMap<String, SlmRollout>,
}

/// One SLM's rollout with its bundles' bytes, as a gateway serves it.
#[derive(Debug, Clone)]
pub struct LoadedRollout {
    /// Which bundle goes to which device.
    pub rollout: SlmRollout,
    /// The bundle files it names, by digest.
    pub files: HashMap<Sha256Digest, Arc<Vec<u8>>>,
}

/// What a gateway serves: every SLM's rollout whose bundles loaded, and the `rollout.json`
/// bytes it came from (to notice a change).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// By SLM id.
    pub slms: HashMap<String, LoadedRollout>,
    /// Digest of the `rollout.json` read.
    pub source: Option<Sha256Digest>,
}

impl Snapshot {
    /// The bundle `device_id` running `slm_id` should run.
    pub fn assign(&self, slm_id: &str, device_id: &str) -> Option<BundleRef> {
        self.slms.get(slm_id)?.rollout.assign(device_id).cloned()
    }

    /// The bytes of a bundle of `slm_id`'s rollout.
    pub fn file(&self, slm_id: &str, sha256: &Sha256Digest) -> Option<Arc<Vec<u8>>> {
        self.slms.get(slm_id)?.files.get(sha256).cloned()
    }
}

fn bundle_path(dir: &Path, sha256: &Sha256Digest) -> PathBuf {
    dir.join(BUNDLES_DIR).join(format!("{}.bundle", sha256.to_hex()))
}

/// Read `rollout.json`'s bytes (`None` if the store has none yet).
pub fn read_rollout_bytes(dir: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    let path = dir.join(ROLLOUT_FILE);
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_ROLLOUT_FILE_BYTES + 1), &mut bytes).with_context(|| format!("reading {}", path.display()))?;
    anyhow::ensure!(bytes.len() as u64 <= MAX_ROLLOUT_FILE_BYTES, "{} is larger than {MAX_ROLLOUT_FILE_BYTES} bytes", path.display());
    Ok(Some(bytes))
}

/// Parse `rollout.json`'s bytes.
pub fn parse_rollout(bytes: &[u8]) -> anyhow::Result<RolloutFile> {
    let file: RolloutFile = serde_json::from_slice(bytes).context("rollout.json")?;
    anyhow::ensure!(file.slms.len() <= MAX_SLMS, "rollout.json names {} SLMs, at most {MAX_SLMS}", file.slms.len());
    Ok(file)
}

/// Read a bundle file the rollout names and check it is that bundle: its digest, its size,
/// and its manifest's version and SLM. (Its signature is the devices' to check.)
fn load_bundle(dir: &Path, slm_id: &str, r: &BundleRef) -> anyhow::Result<Vec<u8>> {
    let path = bundle_path(dir, &r.sha256);
    let len = std::fs::metadata(&path).with_context(|| format!("{}", path.display()))?.len();
    anyhow::ensure!(len <= MAX_BUNDLE_BYTES as u64, "{} is {len} bytes, more than {MAX_BUNDLE_BYTES}", path.display());
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    anyhow::ensure!(Sha256Digest::of(&bytes) == r.sha256 && u64::from(r.size) == bytes.len() as u64, "{} does not match its digest or size (damaged or truncated)", path.display());
    let b = Bundle::decode(&bytes).with_context(|| format!("{}", path.display()))?;
    anyhow::ensure!(b.manifest.version == r.version, "{} is version `{}`, the rollout says `{}`", path.display(), b.manifest.version, r.version);
    anyhow::ensure!(b.manifest.slm_id == slm_id, "{} is made for SLM `{}`, the rollout lists it under `{slm_id}`", path.display(), b.manifest.slm_id);
    Ok(bytes)
}

/// Load what `rollout_bytes` (the store's `rollout.json`) names. An SLM whose bundles do not
/// load is left out, with its reason in the returned warnings: its devices keep what they run.
pub fn load_snapshot(dir: &Path, rollout_bytes: &[u8]) -> anyhow::Result<(Snapshot, Vec<String>)> {
    let file = parse_rollout(rollout_bytes)?;
    let mut slms = HashMap::new();
    let mut warnings = Vec::new();
    for (slm_id, rollout) in file.slms {
        let mut files = HashMap::new();
        let mut ok = true;
        for r in std::iter::once(&rollout.current).chain(rollout.previous.as_ref()) {
            match load_bundle(dir, &slm_id, r) {
                Ok(bytes) => {
                    files.insert(r.sha256, Arc::new(bytes));
                }
                Err(e) => {
                    warnings.push(format!("SLM `{slm_id}` left out of the rollout: {e:#}"));
                    ok = false;
                }
            }
        }
        if ok {
            slms.insert(slm_id, LoadedRollout { rollout, files });
        }
    }
    Ok((Snapshot { slms, source: Some(Sha256Digest::of(rollout_bytes)) }, warnings))
}

/// Write `bytes` to `path` through a temporary file renamed into place.
fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path.parent().context("a path with a parent")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(".{}.tmp-{}", path.file_name().and_then(|n| n.to_str()).unwrap_or("file"), std::process::id()));
    let mut f = std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes).and_then(|()| f.sync_all()).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    Ok(())
}

/// What `publish` did.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// The SLM's rollout now.
    pub rollout: SlmRollout,
    /// The SLM.
    pub slm_id: String,
}

/// Publish the bundle file `bundle_bytes` to `percent` % of its SLM's devices in the store at
/// `dir` (see [`SlmRollout::publish`]); checked first with `key` when given. One publisher at
/// a time per store.
pub fn publish(dir: &Path, bundle_bytes: &[u8], percent: u8, key: Option<&VerifyingKey>) -> anyhow::Result<Published> {
    anyhow::ensure!(bundle_bytes.len() <= MAX_BUNDLE_BYTES, "the bundle is {} bytes, more than {MAX_BUNDLE_BYTES}", bundle_bytes.len());
    let bundle = Bundle::decode(bundle_bytes).context("not a valid bundle")?;
    if let Some(key) = key {
        bundle.verify(key).context("the bundle does not verify with --bundle-key")?;
    }
    let slm_id = bundle.manifest.slm_id.clone();
    let r = BundleRef::of(&bundle.manifest.version, bundle_bytes);
    let path = bundle_path(dir, &r.sha256);
    if !path.exists() {
        write_atomic(&path, bundle_bytes)?;
    }
    let mut file = match read_rollout_bytes(dir)? {
        Some(bytes) => parse_rollout(&bytes)?,
        None => RolloutFile::default(),
    };
    if let Some(before) = file.slms.get(&slm_id) {
        anyhow::ensure!(
            before.current.version != r.version || before.current.sha256 == r.sha256,
            "version `{}` of `{slm_id}` is already published with other contents: give the new bundle a new version",
            r.version
        );
    }
    anyhow::ensure!(file.slms.contains_key(&slm_id) || file.slms.len() < MAX_SLMS, "the store already rolls out to {MAX_SLMS} SLMs");
    let rollout = SlmRollout::publish(file.slms.get(&slm_id), r, percent);
    file.slms.insert(slm_id.clone(), rollout.clone());
    write_atomic(&dir.join(ROLLOUT_FILE), &serde_json::to_vec_pretty(&file)?)?;
    Ok(Published { rollout, slm_id })
}

/// Create the bundle signing key in `dir`: the private key (mode 0600, kept where bundles are
/// made, never on a gateway or device) and the public key devices trust. Refuses to replace
/// an existing key: every device trusting it would refuse the next bundle.
pub fn init_signing_key(dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let (key_path, pub_path) = (dir.join(SIGNING_KEY_FILE), dir.join(PUBLIC_KEY_FILE));
    anyhow::ensure!(!key_path.exists() && !pub_path.exists(), "a signing key already exists in {} (replacing it would make every device refuse new bundles)", dir.display());
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (key, pkcs8) = SigningKey::generate()?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options.open(&key_path).with_context(|| format!("creating {}", key_path.display()))?;
    f.write_all(SigningKey::to_file_text(&pkcs8).as_bytes()).with_context(|| format!("writing {}", key_path.display()))?;
    std::fs::write(&pub_path, key.verifying_key().to_file_text()).with_context(|| format!("writing {}", pub_path.display()))?;
    Ok((key_path, pub_path))
}

/// Read a signing key file.
pub fn load_signing_key(path: &Path) -> anyhow::Result<SigningKey> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    SigningKey::from_file_text(&text).with_context(|| format!("{}", path.display()))
}

/// Read a public key file (`ed25519:<hex>`).
pub fn load_verifying_key(path: &Path) -> anyhow::Result<VerifyingKey> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    VerifyingKey::from_file_text(&text).with_context(|| format!("{}", path.display()))
}
