//! Which bundle a device gets, and what publishing does to an SLM's rollout.
//!
//! Each SLM has at most two bundles in play: `current`, published to `percent` % of the fleet,
//! and `previous`, the bundle the rest keep running (the last one that reached 100 %). A device
//! is in the `percent` % when the stable hash of its id ([`bucket`]) is below `percent`: the
//! same devices at every gateway replica and after every restart, and raising the percentage
//! only adds devices (a canary at 10 % stays in at 50 %). Rollback is publishing the previous
//! bundle again (at 100 %).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::digest::BundleRef;

/// Domain of the rollout hash (so it is not any other hash of the device id).
const BUCKET_CONTEXT: &[u8] = b"duet-rollout/v1\0";

/// The device's place in every rollout, 0..100: the first 8 bytes of SHA-256 over its id,
/// modulo 100. Stable across processes, replicas and releases (no per-process hasher seed).
pub fn bucket(device_id: &str) -> u8 {
    let d = Sha256::new().chain_update(BUCKET_CONTEXT).chain_update(device_id.as_bytes()).finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    // < 100, so it fits.
    (u64::from_be_bytes(first) % 100) as u8
}

/// One SLM's rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlmRollout {
    /// The bundle being rolled out (or fully rolled out at 100 %).
    pub current: BundleRef,
    /// Share of devices, 1..=100, that get `current`.
    pub percent: u8,
    /// What the others get: the last bundle that reached 100 %; `None` before any did (the
    /// others then keep whatever they run).
    pub previous: Option<BundleRef>,
}

impl SlmRollout {
    /// The bundle device `device_id` should run, if any.
    pub fn assign(&self, device_id: &str) -> Option<&BundleRef> {
        if bucket(device_id) < self.percent.min(100) {
            Some(&self.current)
        } else {
            self.previous.as_ref()
        }
    }

    /// The rollout after publishing `bundle` to `percent` % (clamped to 1..=100) over `before`.
    ///
    /// - The same bundle again changes only the percentage (promotion 10 → 100, or back).
    /// - A new bundle over one at 100 % makes that one `previous`; over one still being rolled
    ///   out, the older `previous` stays (the fleet's baseline is what last reached everyone).
    /// - Publishing the baseline again (a rollback) gives it to everyone at 100 %.
    pub fn publish(before: Option<&SlmRollout>, bundle: BundleRef, percent: u8) -> SlmRollout {
        let percent = percent.clamp(1, 100);
        let Some(before) = before else { return SlmRollout { current: bundle, percent, previous: None } };
        if before.current == bundle {
            return SlmRollout { percent, ..before.clone() };
        }
        let baseline = if before.percent >= 100 { Some(before.current.clone()) } else { before.previous.clone() };
        let previous = baseline.filter(|b| *b != bundle);
        SlmRollout { current: bundle, percent, previous }
    }
}
