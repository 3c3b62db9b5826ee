//! The device's side of the fleet rollout: the last good router bundle kept on disk, the agent
//! that reports to the gateway and fetches what the rollout offers, and how a bundle's settings
//! become a generation's routing (docs/ARCHITECTURE.md, "Fleet rollout").
//!
//! Why above both [`crate::link`] and [`crate::routing`]: the agent rides the link and hands
//! routing a new router, so it uses both and neither uses it. The agent runs beside the link. Right after each welcome (v4 gateways only) and every
//! `--bundle-poll-ms` it sends `BundleReport` (the bundle it runs, its escalation and fallback
//! counts) and gets the `BundleOffer` its rollout gives it; a bundle it neither runs nor
//! refused is fetched chunk by chunk on request streams, checked (size, digest, signature
//! against `--bundle-key`, SLM, tokenizer, the router's own compatibility check), written to
//! `--bundle-dir` and published to the server's worker, which switches between generations
//! (never inside one). A refused bundle is logged with its reason; the device keeps serving
//! with what it has. At start-up the last good bundle on disk is used before any gateway is
//! reachable. The decisions themselves are `common::fleet::device`'s pure rules.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use common::fleet::{check_bundle, BundleChoice, BundleRef, DeviceSettings, Download, Progress, Refusal, VerifyingKey};
use common::protocol::{understands_bundles, Frame};
use tokio::sync::watch;

use crate::routing::rate::RateControl;
use crate::link::{Link, LinkState};
use crate::routing::router_file::{Calibration, MlpRouterModel};

/// The file under `--bundle-dir` holding the last good bundle.
pub const CURRENT_FILE: &str = "current.bundle";

/// Device options for router bundles (every flag has a `DUET_*` twin).
#[derive(Debug, Clone, Args)]
pub struct BundleArgs {
    /// Public key (bundle-signing.pub from `cloud-gateway ca signing-key`) that router bundles
    /// must be signed with; without it no bundle is fetched or used.
    #[arg(long, env = "DUET_BUNDLE_KEY")]
    pub bundle_key: Option<PathBuf>,
    /// Where the last good bundle is kept (the device starts from it offline); default
    /// $DUET_HOME/bundles.
    #[arg(long, env = "DUET_BUNDLE_DIR")]
    pub bundle_dir: Option<PathBuf>,
    /// How often the device reports its bundle and asks for the rollout's, ms (also at once
    /// after every reconnect).
    #[arg(long, env = "DUET_BUNDLE_POLL_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(50..))]
    pub bundle_poll_ms: u64,
}

impl BundleArgs {
    /// The bundle directory in force.
    pub fn dir(&self) -> PathBuf {
        self.bundle_dir.clone().unwrap_or_else(|| model_runtime::model_files::duet_home().join("bundles"))
    }

    /// The trusted key, read from `--bundle-key`.
    pub fn key(&self) -> anyhow::Result<Option<VerifyingKey>> {
        let Some(path) = &self.bundle_key else { return Ok(None) };
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading --bundle-key {}: {e}", path.display()))?;
        Ok(Some(VerifyingKey::from_file_text(&text).map_err(|e| anyhow::anyhow!("--bundle-key {}: {e}", path.display()))?))
    }
}

/// A verified bundle the device can switch to.
#[derive(Debug, Clone)]
pub struct ActiveBundle {
    /// Which bundle (what the device reports).
    pub reference: BundleRef,
    /// Its settings.
    pub settings: DeviceSettings,
    /// Its router, checked against this SLM.
    pub router: MlpRouterModel,
}

/// What a bundle is checked against on this device.
#[derive(Debug, Clone)]
pub struct DeviceTarget {
    /// The SLM's id.
    pub slm_id: String,
    /// Its tokenizer fingerprint.
    pub tokenizer_fingerprint: String,
    /// Its hidden size (the router's feature width follows from it).
    pub hidden_size: usize,
}

/// Check `bytes`, offered as `offered`, all the way to a router this device can run.
pub fn accept(bytes: &[u8], offered: &BundleRef, key: &VerifyingKey, target: &DeviceTarget) -> Result<ActiveBundle, Refusal> {
    let bundle = check_bundle(bytes, offered, key, &target.slm_id, &target.tokenizer_fingerprint)?;
    let origin = PathBuf::from(format!("bundle:{}", offered.version));
    let router = MlpRouterModel::from_bytes(&bundle.router, &origin)
        .and_then(|m| m.check_compatible(&origin, &target.slm_id, &target.tokenizer_fingerprint, target.hidden_size).map(|()| m))
        .map_err(|e| Refusal::Router(e.to_string()))?;
    Ok(ActiveBundle { reference: offered.clone(), settings: bundle.manifest.settings, router })
}

/// The last good bundle in `dir`, checked again as if it were new (a file damaged on disk, or
/// a key that changed, is refused and logged).
pub fn load_last_good(dir: &Path, key: Option<&VerifyingKey>, target: &DeviceTarget) -> Option<ActiveBundle> {
    let key = key?;
    let path = dir.join(CURRENT_FILE);
    let bytes = std::fs::read(&path).ok()?;
    let version = common::fleet::Bundle::decode(&bytes).map(|b| b.manifest.version).unwrap_or_default();
    match accept(&bytes, &BundleRef::of(&version, &bytes), key, target) {
        Ok(b) => {
            tracing::info!(bundle = %b.reference.version, path = %path.display(), "starting from the last good router bundle");
            Some(b)
        }
        Err(why) => {
            tracing::warn!(path = %path.display(), "the bundle on disk is refused: {why}; starting without it");
            None
        }
    }
}

/// Keep `bytes` as the last good bundle in `dir` (written aside and renamed into place).
fn keep(dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{CURRENT_FILE}.tmp-{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(CURRENT_FILE))
}

/// The device's escalation counters the agent reports (the server adds each generation's).
#[derive(Debug, Default)]
pub struct DeviceCounters {
    escalations: AtomicU64,
    fallbacks: AtomicU64,
}

impl DeviceCounters {
    /// Add one generation's counts.
    pub fn add(&self, escalations: usize, fallbacks: usize) {
        self.escalations.fetch_add(escalations as u64, Ordering::Relaxed);
        self.fallbacks.fetch_add(fallbacks as u64, Ordering::Relaxed);
    }

    fn get(&self) -> (u64, u64) {
        (self.escalations.load(Ordering::Relaxed), self.fallbacks.load(Ordering::Relaxed))
    }
}

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The trusted key; `None`: report only, never fetch.
    pub key: Option<VerifyingKey>,
    /// Where the last good bundle is kept.
    pub dir: PathBuf,
    /// Report interval.
    pub poll: Duration,
    /// What bundles are checked against.
    pub target: DeviceTarget,
}

/// How long one report or chunk request may take.
const REQUEST_WAIT: Duration = Duration::from_secs(10);

/// Start the agent on `link`, from `initial` (the last good bundle, if any). The receiver
/// sees every bundle the device switches to.
pub fn spawn(link: Link, config: AgentConfig, initial: Option<ActiveBundle>, counters: Arc<DeviceCounters>) -> watch::Receiver<Option<Arc<ActiveBundle>>> {
    let (tx, rx) = watch::channel(initial.map(Arc::new));
    tokio::spawn(run(link, config, tx, counters));
    rx
}

fn generation(link: &Link) -> Option<u64> {
    match link.state() {
        LinkState::Up(c) => Some(c.generation),
        _ => None,
    }
}

async fn run(link: Link, config: AgentConfig, tx: watch::Sender<Option<Arc<ActiveBundle>>>, counters: Arc<DeviceCounters>) {
    let mut choice = BundleChoice::new(tx.borrow().as_ref().map(|b| b.reference.clone()));
    let mut warned_no_key = false;
    loop {
        if tx.is_closed() {
            return;
        }
        let Some(connected) = link.wait_up(config.poll).await else { continue };
        let gen = connected.generation;
        if understands_bundles(connected.protocol_version) {
            let (escalations, fallbacks) = counters.get();
            let report = Frame::BundleReport { running: choice.running().cloned(), escalations, fallbacks };
            match link.request(&report, Instant::now() + REQUEST_WAIT).await {
                Ok((Frame::BundleOffer { bundle }, _)) => {
                    if let Some(wanted) = choice.on_offer(bundle.as_ref()) {
                        match &config.key {
                            None if !warned_no_key => {
                                warned_no_key = true;
                                tracing::warn!(bundle = %wanted.version, "{}", Refusal::NoKey);
                            }
                            None => {}
                            // Switched: say at once which bundle runs now.
                            Some(key) if fetch_and_switch(&link, &config, key, &wanted, &mut choice, &tx).await => continue,
                            Some(_) => {}
                        }
                    }
                }
                Ok((other, _)) => tracing::debug!("bundle report answered with {}", other.kind()),
                Err(e) => tracing::debug!("bundle report: {e}"),
            }
        }
        // Until the next poll, or at once after a reconnect.
        let until = Instant::now() + config.poll;
        while Instant::now() < until && generation(&link).is_none_or(|g| g == gen) {
            tokio::time::sleep(until.saturating_duration_since(Instant::now()).min(Duration::from_millis(100))).await;
        }
    }
}

/// Fetch `wanted`, check it and switch to it; `false` (logged) if it was refused.
async fn fetch_and_switch(link: &Link, config: &AgentConfig, key: &VerifyingKey, wanted: &BundleRef, choice: &mut BundleChoice, tx: &watch::Sender<Option<Arc<ActiveBundle>>>) -> bool {
    let result = async {
        let (mut download, mut request) = Download::start(wanted.clone())?;
        let bytes = loop {
            let (reply, _) = link.request(&request, Instant::now() + REQUEST_WAIT).await.map_err(|e| Refusal::Unavailable(e.to_string()))?;
            match download.on_reply(reply)? {
                Progress::More(next) => request = next,
                Progress::Done(bytes) => break bytes,
            }
        };
        let active = accept(&bytes, wanted, key, &config.target)?;
        if let Err(e) = keep(&config.dir, &bytes) {
            tracing::warn!(dir = %config.dir.display(), "could not keep the bundle on disk ({e}); running it anyway");
        }
        Ok::<_, Refusal>(active)
    }
    .await;
    match result {
        Ok(active) => {
            tracing::info!(bundle = %wanted.version, sha256 = %wanted.sha256.short(), settings = ?active.settings, "router bundle accepted: switching at the next generation");
            metrics::counter!("duet_edge_bundles_accepted_total").increment(1);
            choice.accepted(wanted.clone());
            tx.send_replace(Some(Arc::new(active)));
            true
        }
        Err(why) => {
            tracing::warn!(bundle = %wanted.version, sha256 = %wanted.sha256.short(), "router bundle refused: {why}; keeping the router in use");
            metrics::counter!("duet_edge_bundles_refused_total").increment(1);
            choice.refused(wanted, &why);
            false
        }
    }
}

/// What a request asked for its routing threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RoutingAsk {
    /// The server's defaults.
    Default,
    /// A fixed tau.
    Tau(f32),
    /// A target escalation rate.
    Rate(f32),
}

/// The tau and rate controller of a generation under a bundle: a request's own tau stands; a
/// rate (the request's, else the bundle's, else `default_rate`) goes through the bundle
/// router's calibration; the bundle's fixed tau replaces the defaults. `steer` = whether rates
/// are steered (`--rate-control` not `off`).
pub fn bundle_routing(ask: RoutingAsk, settings: &DeviceSettings, calibration: &Calibration, default_rate: f32, steer: bool) -> anyhow::Result<(f32, Option<RateControl>)> {
    let rate = match (ask, settings.tau, settings.escalation_rate) {
        (RoutingAsk::Tau(t), _, _) => return Ok((t, None)),
        (RoutingAsk::Rate(r), _, _) => r,
        (RoutingAsk::Default, Some(t), _) => return Ok((t, None)),
        (RoutingAsk::Default, None, r) => r.unwrap_or(default_rate),
    };
    let tau = calibration.tau_for_rate(rate)?;
    let control = if steer { RateControl::for_target(calibration, rate)? } else { None };
    Ok((tau, control))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calibration() -> Calibration {
        let grid: Vec<f32> = (0..100).map(|i| i as f32 / 100.0).collect();
        Calibration::from_confidences(&grid, &Calibration::default_rates())
    }

    fn router_bytes(slm: &str, fp: &str, hidden_size: usize) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.safetensors");
        MlpRouterModel::constant(slm, fp, hidden_size, 4, calibration()).unwrap().save(&path).unwrap();
        std::fs::read(path).unwrap()
    }

    #[test]
    fn the_last_good_bundle_is_kept_checked_again_and_refused_when_damaged() {
        use common::fleet::{Bundle, BundleManifest, SigningKey};
        let fp = "ab".repeat(32);
        let target = DeviceTarget { slm_id: "slm".into(), tokenizer_fingerprint: fp.clone(), hidden_size: 8 };
        let key = SigningKey::generate().unwrap().0;
        let manifest = |version: &str| BundleManifest {
            version: version.into(),
            slm_id: "slm".into(),
            tokenizer_fingerprint: fp.clone(),
            settings: DeviceSettings { speculate: Some(2), ..DeviceSettings::default() },
            router_sha256: Default::default(),
            key_id: [0; 8],
            created_unix: 0,
        };
        let bytes = Bundle::sign(manifest("v1"), router_bytes("slm", &fp, 8), &key).unwrap().encode();
        let vk = key.verifying_key();
        let active = accept(&bytes, &BundleRef::of("v1", &bytes), &vk, &target).unwrap();
        assert_eq!(active.settings.speculate, Some(2));
        // A router for another hidden size passes the signature but not the router's own check.
        let wide = Bundle::sign(manifest("v2"), router_bytes("slm", &fp, 16), &key).unwrap().encode();
        assert!(matches!(accept(&wide, &BundleRef::of("v2", &wide), &vk, &target), Err(Refusal::Router(_))));
        let dir = tempfile::tempdir().unwrap();
        assert!(load_last_good(dir.path(), Some(&vk), &target).is_none(), "nothing kept yet");
        keep(dir.path(), &bytes).unwrap();
        assert_eq!(load_last_good(dir.path(), Some(&vk), &target).map(|b| b.reference.version), Some("v1".into()));
        assert!(load_last_good(dir.path(), None, &target).is_none(), "no key, no bundle");
        let mut damaged = bytes.clone();
        let n = damaged.len();
        damaged[n - 100] ^= 1;
        keep(dir.path(), &damaged).unwrap();
        assert!(load_last_good(dir.path(), Some(&vk), &target).is_none());
    }

    #[test]
    fn a_bundle_sets_the_default_routing_and_a_request_keeps_its_own_tau() {
        let cal = calibration();
        let rate = DeviceSettings { escalation_rate: Some(0.2), ..DeviceSettings::default() };
        let (tau, control) = bundle_routing(RoutingAsk::Default, &rate, &cal, 0.1, true).unwrap();
        assert!((tau - cal.tau_for_rate(0.2).unwrap()).abs() < 1e-6);
        assert_eq!(control.map(|c| c.target()), Some(0.2));
        let fixed = DeviceSettings { tau: Some(0.42), ..DeviceSettings::default() };
        assert_eq!(bundle_routing(RoutingAsk::Default, &fixed, &cal, 0.1, true).unwrap().0, 0.42);
        assert_eq!(bundle_routing(RoutingAsk::Tau(0.7), &rate, &cal, 0.1, true).unwrap().0, 0.7);
        let (_, c) = bundle_routing(RoutingAsk::Rate(0.05), &rate, &cal, 0.1, false).unwrap();
        assert!(c.is_none(), "--rate-control off");
        let (_, c) = bundle_routing(RoutingAsk::Default, &DeviceSettings::default(), &cal, 0.1, true).unwrap();
        assert_eq!(c.map(|c| c.target()), Some(0.1), "no rate in the bundle: the device's default");
    }
}
