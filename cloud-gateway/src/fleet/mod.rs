//! Router rollout to the fleet, the gateway's side (docs/ARCHITECTURE.md, "Fleet rollout"):
//! the bundle store it serves from ([`store`]), the devices connected with the bundle each
//! reports, and what the operator sees of them (`/v1/fleet`, `duet_gateway_fleet_devices`).
//!
//! The rules themselves are `common::fleet`'s: which bundle a device gets
//! ([`common::fleet::SlmRollout::assign`]), how a bundle is chunked, which reported figures
//! can be true ([`common::fleet::ReportedCounts`]). A gateway never needs the signing key;
//! devices verify what it serves.
//!
//! What `/v1/fleet` lists comes from devices, so each part is checked before it is kept: the
//! `slm_id` at the handshake (the model-id rule), a bundle version at validation (its own
//! rule), and a report's figures against the same connection's previous report here (a report
//! that cannot be true is refused and the listing keeps the last good one).

pub mod store;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::fleet::device::chunk_of;
use common::fleet::{BundleRef, ReportedCounts, Sha256Digest, MAX_CHUNK_BYTES};
use common::protocol::Frame;
use dashmap::DashMap;
use serde::Serialize;
use tokio::task::JoinHandle;

use store::Snapshot;

/// Most devices one `/v1/fleet` page lists.
pub const MAX_PAGE: usize = 500;
/// Devices per page when the request does not say.
pub const DEFAULT_PAGE: usize = 100;
/// The label for an SLM or bundle that is not in the store (device-chosen strings never
/// become label values: a device could otherwise grow the metric without bound).
const OTHER: &str = "other";

/// One connected device, as `/v1/fleet` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceView {
    /// Its identity.
    pub device: String,
    /// The SLM it said it runs.
    pub slm: String,
    /// The protocol version it speaks (below 4: it cannot take bundles).
    pub protocol_version: u16,
    /// The bundle version it reports running; `None`: its own router (or a pre-v4 device).
    pub bundle: Option<String>,
    /// Tokens it escalated, as it last reported.
    pub escalations: u64,
    /// Of those, answered by its SLM (timeout, `Busy`, link down), as it last reported.
    pub fallbacks: u64,
    /// Escalations this gateway received from it on this connection.
    pub escalations_received: u64,
    /// When it last sent anything, Unix seconds.
    pub last_seen_unix: u64,
    /// When this connection was welcomed, Unix seconds.
    pub connected_unix: u64,
}

struct DeviceEntry {
    /// Which connection the entry belongs to: an older connection of the same identity,
    /// replaced by a newer one, must not remove the newer one's entry when it closes.
    connection: u64,
    view: DeviceView,
    running: Option<Sha256Digest>,
}

/// The fleet as this gateway sees it: the store it serves, the devices connected to it.
pub struct Fleet {
    snapshot: RwLock<Arc<Snapshot>>,
    devices: DashMap<Arc<str>, DeviceEntry>,
    /// Bearer token of `/v1/fleet`; `None` = refused.
    pub operator_token: Option<String>,
    store_dir: Option<PathBuf>,
    poll: Duration,
    chunk_bytes: usize,
    labels_set: Mutex<Vec<(String, String)>>,
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// One page of devices, sorted by id, after `after` (exclusive), at most `limit` (clamped to
/// 1..=[`MAX_PAGE`]), and the cursor of the next page if there is one.
pub fn page(mut devices: Vec<DeviceView>, after: Option<&str>, limit: usize) -> (Vec<DeviceView>, Option<String>) {
    let limit = limit.clamp(1, MAX_PAGE);
    devices.retain(|d| after.is_none_or(|a| d.device.as_str() > a));
    devices.sort_by(|a, b| a.device.cmp(&b.device));
    let more = devices.len() > limit;
    devices.truncate(limit);
    let next = more.then(|| devices.last().map(|d| d.device.clone())).flatten();
    (devices, next)
}

impl Fleet {
    /// A fleet serving the store at `store_dir` (none: no bundles), re-read every `poll`, with
    /// chunks at most `max_frame_bytes / 2` (so a chunk and its header fit a frame).
    pub fn new(store_dir: Option<PathBuf>, poll: Duration, operator_token: Option<String>, max_frame_bytes: usize) -> Self {
        let fleet = Self {
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
            devices: DashMap::new(),
            operator_token,
            store_dir,
            poll,
            chunk_bytes: (max_frame_bytes / 2).clamp(1, MAX_CHUNK_BYTES),
            labels_set: Mutex::new(Vec::new()),
        };
        fleet.reload();
        fleet
    }

    /// The fleet `config` describes: its store loaded, its operator token read (trimmed; an
    /// empty file means none).
    pub fn from_config(config: &crate::config::FleetConfig, max_frame_bytes: usize) -> anyhow::Result<Self> {
        let token = match &config.operator_token_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading the operator token file {}: {e}", path.display()))?;
                Some(text.trim().to_string()).filter(|t| !t.is_empty())
            }
            None => None,
        };
        if let Some(dir) = &config.bundle_store {
            tracing::info!(store = %dir.display(), poll_ms = config.bundle_poll.as_millis() as u64, "serving router bundles");
        }
        Ok(Self::new(config.bundle_store.clone(), config.bundle_poll, token, max_frame_bytes))
    }

    /// The store's content now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.read().map(|s| s.clone()).unwrap_or_default()
    }

    /// Re-read the store if `rollout.json` changed; a store that cannot be read keeps what was
    /// served (logged). Returns whether the snapshot changed.
    pub fn reload(&self) -> bool {
        let Some(dir) = &self.store_dir else { return false };
        let bytes = match store::read_rollout_bytes(dir) {
            Ok(Some(b)) => b,
            Ok(None) => return false,
            Err(e) => {
                tracing::warn!("bundle store: {e:#}; serving what was loaded before");
                return false;
            }
        };
        if self.snapshot().source == Some(Sha256Digest::of(&bytes)) {
            return false;
        }
        match store::load_snapshot(dir, &bytes) {
            Ok((snapshot, warnings)) => {
                for w in &warnings {
                    tracing::warn!("bundle store: {w}");
                }
                for (slm, r) in &snapshot.slms {
                    tracing::info!(slm = %slm, bundle = %r.rollout.current.version, percent = r.rollout.percent, previous = ?r.rollout.previous.as_ref().map(|p| &p.version), "bundle rollout loaded");
                }
                if let Ok(mut s) = self.snapshot.write() {
                    *s = Arc::new(snapshot);
                }
                true
            }
            Err(e) => {
                tracing::warn!("bundle store: {e:#}; serving what was loaded before");
                false
            }
        }
    }

    /// Poll the store and refresh the fleet metric until the gateway stops.
    pub fn spawn_poller(self: &Arc<Self>) -> JoinHandle<()> {
        let fleet = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(fleet.poll);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let f = fleet.clone();
                // File reads off the async threads.
                let _ = tokio::task::spawn_blocking(move || f.reload()).await;
                fleet.publish_metrics();
            }
        })
    }

    /// A device was welcomed on connection `connection`.
    pub fn connected(&self, device: &Arc<str>, slm: &str, protocol_version: u16, connection: u64) {
        let now = unix_now();
        let view = DeviceView {
            device: device.to_string(),
            slm: slm.to_string(),
            protocol_version,
            bundle: None,
            escalations: 0,
            fallbacks: 0,
            escalations_received: 0,
            last_seen_unix: now,
            connected_unix: now,
        };
        self.devices.insert(device.clone(), DeviceEntry { connection, view, running: None });
    }

    /// Connection `connection` of `device` closed.
    pub fn disconnected(&self, device: &Arc<str>, connection: u64) {
        self.devices.remove_if(device, |_, e| e.connection == connection);
    }

    /// `device` sent an escalation.
    pub fn escalation(&self, device: &str) {
        if let Some(mut e) = self.devices.get_mut(device) {
            e.view.escalations_received += 1;
            e.view.last_seen_unix = unix_now();
        }
    }

    /// `device` reported; the `BundleOffer` that answers it, or an error if its figures cannot
    /// follow this connection's previous report (then nothing of it is recorded).
    pub fn report(&self, device: &str, running: Option<BundleRef>, escalations: u64, fallbacks: u64) -> Frame {
        let now = ReportedCounts { escalations, fallbacks };
        let slm = match self.devices.get_mut(device) {
            Some(mut e) => {
                let before = ReportedCounts { escalations: e.view.escalations, fallbacks: e.view.fallbacks };
                if let Err(why) = now.follows(&before) {
                    metrics::counter!("duet_gateway_fleet_reports_refused_total").increment(1);
                    return common::exchange::gateway::report_refused(&why);
                }
                e.view.bundle = running.as_ref().map(|r| r.version.clone());
                e.running = running.as_ref().map(|r| r.sha256);
                e.view.escalations = escalations;
                e.view.fallbacks = fallbacks;
                e.view.last_seen_unix = unix_now();
                e.view.slm.clone()
            }
            None => return Frame::BundleOffer { bundle: None },
        };
        Frame::BundleOffer { bundle: self.snapshot().assign(&slm, device) }
    }

    /// The answer to `FetchBundle` from `device`: a chunk of a bundle of its SLM's rollout, or
    /// the refusal its protocol version decodes.
    pub fn fetch(&self, device: &str, sha256: Sha256Digest, offset: u32) -> Frame {
        // An unknown device gets the refusal every version decodes.
        let (slm, protocol_version) = self.devices.get(device).map(|e| (e.view.slm.clone(), e.view.protocol_version)).unwrap_or_default();
        self.snapshot()
            .file(&slm, &sha256)
            .and_then(|file| chunk_of(&file, sha256, offset, self.chunk_bytes))
            .unwrap_or_else(|| common::exchange::gateway::bundle_not_offered(protocol_version, &sha256))
    }

    /// Every connected device.
    pub fn devices(&self) -> Vec<DeviceView> {
        self.devices.iter().map(|e| e.view.clone()).collect()
    }

    /// Set `duet_gateway_fleet_devices{slm,bundle}` from the devices connected now: an SLM not
    /// in the store and a bundle not in its rollout are counted as `other`, no bundle as `none`;
    /// a pair counted before and absent now is set to 0.
    pub fn publish_metrics(&self) {
        let snapshot = self.snapshot();
        let mut counts: BTreeMap<(String, String), u64> = BTreeMap::new();
        for e in self.devices.iter() {
            let rollout = snapshot.slms.get(&e.view.slm);
            let slm = if rollout.is_some() { e.view.slm.clone() } else { OTHER.to_string() };
            let bundle = match (&e.view.bundle, e.running, rollout) {
                (None, _, _) => "none".to_string(),
                (Some(v), Some(sha), Some(r)) if r.files.contains_key(&sha) => v.clone(),
                _ => OTHER.to_string(),
            };
            *counts.entry((slm, bundle)).or_default() += 1;
        }
        let Ok(mut set) = self.labels_set.lock() else { return };
        for (slm, bundle) in set.iter() {
            if !counts.contains_key(&(slm.clone(), bundle.clone())) {
                metrics::gauge!("duet_gateway_fleet_devices", "slm" => slm.clone(), "bundle" => bundle.clone()).set(0.0);
            }
        }
        let mut now_set = Vec::with_capacity(counts.len());
        for ((slm, bundle), n) in counts {
            metrics::gauge!("duet_gateway_fleet_devices", "slm" => slm.clone(), "bundle" => bundle.clone()).set(n as f64);
            now_set.push((slm, bundle));
        }
        // Labels once set stay exported (at 0): bounded by the store's SLMs and bundles.
        let mut merged: HashMap<(String, String), ()> = set.drain(..).map(|k| (k, ())).collect();
        merged.extend(now_set.into_iter().map(|k| (k, ())));
        *set = merged.into_keys().collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(device: &str) -> DeviceView {
        DeviceView {
            device: device.into(),
            slm: "s".into(),
            protocol_version: 4,
            bundle: None,
            escalations: 0,
            fallbacks: 0,
            escalations_received: 0,
            last_seen_unix: 0,
            connected_unix: 0,
        }
    }

    #[test]
    fn pages_are_sorted_bounded_and_resume_after_the_cursor() {
        let devices: Vec<DeviceView> = (0..1234).rev().map(|i| view(&format!("d{i:05}"))).collect();
        let (first, next) = page(devices.clone(), None, 10_000);
        assert_eq!(first.len(), MAX_PAGE, "a page is bounded whatever is asked");
        assert_eq!(first[0].device, "d00000");
        let mut seen = first.len();
        let mut cursor = next;
        while let Some(c) = cursor {
            let (p, n) = page(devices.clone(), Some(&c), MAX_PAGE);
            assert!(p.iter().all(|d| d.device.as_str() > c.as_str()));
            seen += p.len();
            cursor = n;
        }
        assert_eq!(seen, 1234, "every device once");
        let (none, next) = page(devices, Some("zzz"), 5);
        assert!(none.is_empty() && next.is_none());
        assert_eq!(page(Vec::new(), None, 0).0.len(), 0);
    }

    #[test]
    fn a_replaced_connection_does_not_remove_its_successor() {
        let fleet = Fleet::new(None, Duration::from_secs(1), None, 65_536);
        let d: Arc<str> = Arc::from("dev");
        fleet.connected(&d, "s", 4, 1);
        fleet.connected(&d, "s", 4, 2);
        fleet.disconnected(&d, 1);
        assert_eq!(fleet.devices().len(), 1);
        fleet.disconnected(&d, 2);
        assert!(fleet.devices().is_empty());
    }

    #[test]
    fn a_report_is_recorded_and_answered_with_no_bundle_without_a_store() {
        let fleet = Fleet::new(None, Duration::from_secs(1), None, 65_536);
        let d: Arc<str> = Arc::from("dev");
        fleet.connected(&d, "s", 4, 1);
        let r = BundleRef { version: "v1".into(), sha256: Sha256Digest([1; 32]), size: 5 };
        assert_eq!(fleet.report("dev", Some(r), 7, 2), Frame::BundleOffer { bundle: None });
        let v = &fleet.devices()[0];
        assert_eq!((v.bundle.as_deref(), v.escalations, v.fallbacks), (Some("v1"), 7, 2));
        assert!(matches!(fleet.fetch("dev", Sha256Digest([1; 32]), 0), Frame::Error { .. }));
        assert_eq!(fleet.report("unknown", None, 0, 0), Frame::BundleOffer { bundle: None });
    }

    #[test]
    fn a_report_that_cannot_follow_the_last_one_is_refused_and_the_listing_keeps_the_last_good_one() {
        let fleet = Fleet::new(None, Duration::from_secs(1), None, 65_536);
        let d: Arc<str> = Arc::from("dev");
        fleet.connected(&d, "s", 6, 1);
        let r = |v: &str| Some(BundleRef { version: v.into(), sha256: Sha256Digest([1; 32]), size: 5 });
        assert_eq!(fleet.report("dev", r("v1"), 10, 4), Frame::BundleOffer { bundle: None });
        let refused = |f: Frame| matches!(f, Frame::Error { code: common::protocol::ErrorCode::Malformed, .. });
        assert!(refused(fleet.report("dev", r("v2"), 9, 4)), "escalations went back");
        assert!(refused(fleet.report("dev", r("v2"), 12, 3)), "fallbacks went back");
        assert!(refused(fleet.report("dev", r("v2"), 12, 13)), "more fallbacks than escalations");
        assert!(refused(fleet.report("dev", r("v2"), u64::MAX, 5)), "beyond any device's count");
        let v = &fleet.devices()[0];
        assert_eq!((v.bundle.as_deref(), v.escalations, v.fallbacks), (Some("v1"), 10, 4), "nothing of a refused report is kept");
        assert_eq!(fleet.report("dev", r("v2"), 12, 5), Frame::BundleOffer { bundle: None });
        // A new connection is a new run of the device: its counters start again.
        fleet.connected(&d, "s", 6, 2);
        assert_eq!(fleet.report("dev", None, 1, 0), Frame::BundleOffer { bundle: None });
    }

    #[test]
    fn a_bundle_not_offered_is_refused_with_the_code_the_devices_version_decodes() {
        use common::protocol::ErrorCode;
        let fleet = Fleet::new(None, Duration::from_secs(1), None, 65_536);
        let d: Arc<str> = Arc::from("dev");
        let code = |version: u16| {
            fleet.connected(&d, "s", version, u64::from(version));
            match fleet.fetch("dev", Sha256Digest([1; 32]), 0) {
                Frame::Error { code, .. } => code,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(code(4), ErrorCode::UnknownSession);
        assert_eq!(code(5), ErrorCode::UnknownSession);
        assert_eq!(code(6), ErrorCode::BundleNotOffered);
        assert!(matches!(fleet.fetch("unknown", Sha256Digest([1; 32]), 0), Frame::Error { code: ErrorCode::UnknownSession, .. }));
    }
}
