//! Router rollout over real QUIC on loopback: gateways in this process serving a bundle store,
//! devices that are the edge's own link and bundle agent (the code `edge-node serve` runs),
//! bundles made and published with the same library calls as `cloud-gateway fleet bundle` and
//! `fleet publish`.
//!
//! Publish reaches a connected device within a poll; `--to 50` gives the bundle to the devices
//! in the first half of the stable hash, the same after a gateway restart; tampered, unsigned
//! and wrong-tokenizer bundles are refused while the device keeps being answered; rollback is
//! publishing the previous bundle; a device offline at publish picks it up on reconnect;
//! `/v1/fleet` lists the devices only with the operator token.

mod support;
#[path = "support/replicas.rs"]
mod replicas;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cloud_gateway::config::{CertSource, FleetConfig, GatewayConfig};
use cloud_gateway::fleet::store::{self, BUNDLES_DIR, ROLLOUT_FILE};
use cloud_gateway::Gateway;
use common::fleet::{bucket, Bundle, BundleManifest, BundleRef, DeviceSettings, SigningKey, VerifyingKey};
use common::protocol::{ContextSync, Frame, WireSampling};
use edge_node::fleet::{self as agent, ActiveBundle, AgentConfig, DeviceCounters, DeviceTarget};
use edge_node::link::{Link, LinkConfig};
use edge_node::routing::router_file::{Calibration, MlpRouterModel};
use replicas::HashBackend;
use support::*;
use tokio::sync::watch;

const OPERATOR_TOKEN: &str = "operator-secret";
/// The bundles' SLM (what the devices say in `Hello`), with a small hidden size for the router.
const SLM_ID: &str = "tiny-qwen2";
const HIDDEN: usize = 8;

struct World {
    dir: tempfile::TempDir,
    key: SigningKey,
    public: VerifyingKey,
}

impl World {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (key_path, pub_path) = store::init_signing_key(&dir.path().join("keys")).unwrap();
        std::fs::create_dir_all(dir.path().join("certs")).unwrap();
        cert_pair(&dir.path().join("certs"));
        Self { key: store::load_signing_key(&key_path).unwrap(), public: store::load_verifying_key(&pub_path).unwrap(), dir }
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// A gateway serving the store, listening on `listen` (port 0: any).
    async fn gateway(&self, listen: Option<SocketAddr>) -> Gateway {
        let token = self.dir.path().join("operator-token");
        std::fs::write(&token, format!("{OPERATOR_TOKEN}\n")).unwrap();
        // Every gateway of the test presents the same certificate, which the devices pin.
        let scratch = tempfile::tempdir_in(self.dir.path()).unwrap();
        let mut config = test_config(scratch.path());
        let certs = self.dir.path().join("certs");
        config.transport.cert = CertSource::Files { cert: certs.join("cert.pem"), key: certs.join("key.pem") };
        if let Some(addr) = listen {
            config.transport.listen = addr;
        }
        let fleet = FleetConfig { bundle_store: Some(self.store()), bundle_poll: Duration::from_millis(100), operator_token_file: Some(token) };
        Gateway::start(GatewayConfig { fleet, ..config }, Box::new(HashBackend::new(TINY, Duration::ZERO))).await.unwrap()
    }

    /// A signed bundle of a small router for `SLM_ID` (or as `tweak` changes its manifest).
    fn bundle(&self, version: &str, key: &SigningKey, tweak: impl FnOnce(&mut BundleManifest)) -> Vec<u8> {
        let mut manifest = BundleManifest {
            version: version.into(),
            slm_id: SLM_ID.into(),
            tokenizer_fingerprint: fingerprint(),
            settings: DeviceSettings { escalation_rate: Some(0.1), ..DeviceSettings::default() },
            router_sha256: Default::default(),
            key_id: [0; 8],
            created_unix: 0,
        };
        tweak(&mut manifest);
        let router = router_file(&manifest.slm_id.clone(), &manifest.tokenizer_fingerprint.clone(), self.dir.path());
        Bundle::sign(manifest, router, key).unwrap().encode()
    }

    fn publish(&self, bytes: &[u8], percent: u8) -> BundleRef {
        store::publish(&self.store(), bytes, percent, Some(&self.public)).unwrap().rollout.current
    }

    /// A device `id` connected to `addr`: its link and its bundle agent polling every `poll`.
    fn device(&self, addr: SocketAddr, id: &str, poll: Duration) -> Device {
        let link = Link::start(LinkConfig {
            slm_id: SLM_ID.into(),
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_millis(300),
            ..LinkConfig::new(addr.to_string(), Some(self.dir.path().join("certs").join("cert.pem")), id, fingerprint())
        })
        .unwrap();
        let target = DeviceTarget { slm_id: SLM_ID.into(), tokenizer_fingerprint: fingerprint(), hidden_size: HIDDEN };
        let dir = self.dir.path().join("devices").join(id);
        let initial = agent::load_last_good(&dir, Some(&self.public), &target);
        let config = AgentConfig { key: Some(self.public), dir, poll, target };
        let running = agent::spawn(link.clone(), config, initial, Arc::new(DeviceCounters::default()));
        Device { link, running }
    }
}

/// A router file (safetensors) for `slm` and `fp`, as `router-lab train` writes one.
fn router_file(slm: &str, fp: &str, dir: &Path) -> Vec<u8> {
    let grid: Vec<f32> = (0..100).map(|k| k as f32 / 100.0).collect();
    let calibration = Calibration::from_confidences(&grid, &Calibration::default_rates());
    let path = dir.join("router.safetensors");
    // A hidden layer wide enough that the bundle takes several chunks.
    MlpRouterModel::constant(slm, fp, HIDDEN, 2048, calibration).unwrap().save(&path).unwrap();
    std::fs::read(path).unwrap()
}

struct Device {
    link: Link,
    running: watch::Receiver<Option<Arc<ActiveBundle>>>,
}

impl Device {
    fn version(&self) -> Option<String> {
        self.running.borrow().as_ref().map(|b| b.reference.version.clone())
    }

    /// Wait until the device runs `version` (`None`: none), at most `within`.
    async fn runs(&self, version: Option<&str>, within: Duration) {
        let until = Instant::now() + within;
        while self.version().as_deref() != version {
            assert!(Instant::now() < until, "the device runs {:?}, not {version:?}, after {within:?}", self.version());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The device escalates once and is answered with a token.
    async fn escalates(&self, session_id: u64) {
        let frame = Frame::Escalate { session_id, seq: 1, context: ContextSync::Full { tokens: vec![1, 2, 3].into() }, sampling: WireSampling::default(), deadline_ms: 5000 };
        match self.link.request(&frame, Instant::now() + Duration::from_secs(5)).await {
            Ok((Frame::Token { .. }, _)) => {}
            other => panic!("expected a token, got {other:?}"),
        }
    }
}

/// `GET /v1/fleet` on `gw`'s side port with `token`: status and body.
async fn fleet_view(gw: &Gateway, token: Option<&str>) -> (u16, String) {
    let mut req = reqwest::Client::new().get(format!("http://{}/v1/fleet?limit=500", gw.http_addr.unwrap()));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// The bundle version `/v1/fleet` shows for `device`, once it shows `want`.
async fn fleet_shows(gw: &Gateway, device: &str, want: Option<&str>) {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, body) = fleet_view(gw, Some(OPERATOR_TOKEN)).await;
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let shown = v["devices"].as_array().unwrap().iter().find(|d| d["device"] == device).map(|d| d["bundle"].as_str().map(str::to_string));
        if shown == Some(want.map(str::to_string)) {
            return;
        }
        assert!(Instant::now() < until, "/v1/fleet shows {shown:?} for {device}, not {want:?}: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_reaches_a_connected_device_within_a_poll_and_rollback_returns_it() {
    let w = World::new();
    let gw = w.gateway(None).await;
    let d = w.device(gw.local_addr().unwrap(), "device-a", Duration::from_millis(200));
    assert!(d.link.wait_up(Duration::from_secs(5)).await.is_some());
    fleet_shows(&gw, "device-a", None).await;
    let v1 = w.bundle("v1", &w.key, |_| {});
    assert!(v1.len() > common::fleet::MAX_CHUNK_BYTES, "fetched in several chunks");
    w.publish(&v1, 100);
    d.runs(Some("v1"), Duration::from_secs(3)).await;
    fleet_shows(&gw, "device-a", Some("v1")).await;
    let v2 = w.bundle("v2", &w.key, |m| m.settings.speculate = Some(2));
    w.publish(&v2, 100);
    d.runs(Some("v2"), Duration::from_secs(3)).await;
    assert_eq!(d.running.borrow().as_ref().unwrap().settings.speculate, Some(2));
    // Rollback: publish the previous bundle again.
    w.publish(&v1, 100);
    d.runs(Some("v1"), Duration::from_secs(3)).await;
    fleet_shows(&gw, "device-a", Some("v1")).await;
    d.escalates(1).await;
    // The operator's view and metric.
    let (status, body) = fleet_view(&gw, None).await;
    assert_eq!(status, 401, "no device data without the token: {body}");
    assert!(!body.contains("device-a"));
    assert_eq!(fleet_view(&gw, Some("wrong")).await.0, 401);
    let metrics = reqwest::get(format!("http://{}/metrics", gw.http_addr.unwrap())).await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l.starts_with("duet_gateway_fleet_devices{") && l.contains("bundle=\"v1\"") && l.contains(SLM_ID)), "{metrics}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staged_rollout_reaches_the_first_half_of_the_stable_hash_and_the_same_after_a_restart() {
    let w = World::new();
    let v1 = w.bundle("v1", &w.key, |_| {});
    let v2 = w.bundle("v2", &w.key, |_| {});
    w.publish(&v1, 100);
    w.publish(&v2, 50);
    let ids: Vec<String> = (0..8).map(|i| format!("staged-{i}")).collect();
    let expect = |id: &str| if bucket(id) < 50 { "v2" } else { "v1" };
    assert!(ids.iter().any(|i| expect(i) == "v2") && ids.iter().any(|i| expect(i) == "v1"), "both halves are represented");
    for round in 0..2 {
        let gw = w.gateway(None).await;
        // Fresh device state each round: the assignment comes from the gateway, not from disk.
        let devices: Vec<Device> = ids.iter().map(|id| w.device(gw.local_addr().unwrap(), id, Duration::from_millis(200))).collect();
        for (id, d) in ids.iter().zip(&devices) {
            d.runs(Some(expect(id)), Duration::from_secs(5)).await;
        }
        for id in &ids {
            fleet_shows(&gw, id, Some(expect(id))).await;
        }
        drop(devices);
        gw.shutdown().await;
        let _ = std::fs::remove_dir_all(w.dir.path().join("devices"));
        eprintln!("round {round}: assignment as expected");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_unsigned_and_wrong_tokenizer_bundles_are_refused_while_the_device_keeps_being_served() {
    let w = World::new();
    let gw = w.gateway(None).await;
    let d = w.device(gw.local_addr().unwrap(), "device-b", Duration::from_millis(150));
    let good = w.bundle("v1", &w.key, |_| {});
    w.publish(&good, 100);
    d.runs(Some("v1"), Duration::from_secs(3)).await;
    // Tampered in the store: one router byte flipped, the store's index pointing at it.
    let mut tampered = w.bundle("v2", &w.key, |_| {});
    let n = tampered.len();
    tampered[n - 200] ^= 0x40;
    let r = BundleRef::of("v2", &tampered);
    std::fs::write(w.store().join(BUNDLES_DIR).join(format!("{}.bundle", r.sha256.to_hex())), &tampered).unwrap();
    let mut file = store::parse_rollout(&std::fs::read(w.store().join(ROLLOUT_FILE)).unwrap()).unwrap();
    file.slms.get_mut(SLM_ID).unwrap().current = r;
    std::fs::write(w.store().join(ROLLOUT_FILE), serde_json::to_vec(&file).unwrap()).unwrap();
    // Signed with another key (to this device: unsigned).
    let stranger = SigningKey::generate().unwrap().0;
    let unsigned = w.bundle("v3", &stranger, |_| {});
    // Made for another tokenizer.
    let wrong_tok = w.bundle("v4", &w.key, |m| m.tokenizer_fingerprint = "0".repeat(64));
    for (i, publish) in [None, Some(unsigned), Some(wrong_tok)].into_iter().enumerate() {
        if let Some(bytes) = publish {
            store::publish(&w.store(), &bytes, 100, None).unwrap();
        }
        // Several polls pass: the offer is refused, the device keeps v1 and is answered.
        for k in 0..4 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            d.escalates((i * 10 + k) as u64 + 1).await;
        }
        assert_eq!(d.version().as_deref(), Some("v1"), "bad bundle {i} refused");
        fleet_shows(&gw, "device-b", Some("v1")).await;
    }
    // A good bundle after the bad ones is taken.
    w.publish(&w.bundle("v5", &w.key, |_| {}), 100);
    d.runs(Some("v5"), Duration::from_secs(3)).await;
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_offline_at_publish_picks_the_bundle_up_on_reconnect_and_starts_from_disk() {
    let w = World::new();
    let gw = w.gateway(None).await;
    let addr = gw.local_addr().unwrap();
    // A long poll: only the reconnect can make it ask again in time.
    let d = w.device(addr, "device-c", Duration::from_secs(600));
    assert!(d.link.wait_up(Duration::from_secs(5)).await.is_some());
    fleet_shows(&gw, "device-c", None).await;
    gw.shutdown().await;
    w.publish(&w.bundle("v1", &w.key, |_| {}), 100);
    let gw = w.gateway(Some(addr)).await;
    d.runs(Some("v1"), Duration::from_secs(10)).await;
    fleet_shows(&gw, "device-c", Some("v1")).await;
    drop(d);
    gw.shutdown().await;
    // Offline start: the last good bundle from disk, before any gateway answers.
    let offline = w.device("127.0.0.1:9".parse().unwrap(), "device-c", Duration::from_secs(600));
    assert_eq!(offline.version().as_deref(), Some("v1"));
}
