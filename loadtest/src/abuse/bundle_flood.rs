//! The `bundle-flood` scenario of `loadtest abuse`: a device downloads a signed router bundle
//! while the overload's flood runs.
//!
//! A rollout must reach devices when the gateway is busiest, since that is when an operator
//! changes the escalation rate. Bundle chunks are answered by the connection, beside the LLM
//! path, not queued behind it; this scenario measures that they stay so. A gateway of its own
//! serves a bundle store holding the shipped router, signed and published with the same
//! commands an operator runs (`cloud-gateway ca signing-key`, `fleet bundle`, `fleet publish`).
//! The device (from the probe's address, saying it runs that router's SLM) reports, is offered
//! the bundle and fetches it chunk by chunk with the device's own download rule
//! ([`common::fleet::Download`]), then checks it as the device does (signature, SLM,
//! tokenizer, router: [`edge_node::fleet::accept`]): once on the idle gateway (the
//! baseline), then three times during the flood (the overload's 200 sessions, 30 ms think
//! time), one after another, beside the probe's escalations.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use common::fleet::{Download, Progress, VerifyingKey};
use common::protocol::Frame;
use edge_node::fleet::{accept, DeviceTarget};
use model_runtime::model_files::ModelFiles;
use serde::Serialize;
use serde_json::json;

use super::{escalation_load, peak_of, probe, request, watch_rss, Client, GatewayProcess, Run, Tally};
use common::stats::percentile;

/// The SLM whose shipped router the bundle carries.
const SLM: &str = "qwen2.5-coder-0.5b-instruct";
/// How long one request of the download may wait for its answer.
const REQUEST_WAIT: Duration = Duration::from_secs(10);

/// One download of the offered bundle.
#[derive(Debug, Serialize)]
struct Fetched {
    ms: f64,
    bytes: usize,
    chunks: usize,
    chunk_p50_ms: f64,
    chunk_max_ms: f64,
    /// Signature, SLM, tokenizer and router checked as the device checks them.
    accepted: bool,
    error: Option<String>,
}

/// The shipped router file in this repository.
fn shipped_router() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../edge-node/routers").join(format!("{SLM}.router.safetensors"))
}

/// Sign and publish the shipped router into a bundle store under `dir` with the gateway's
/// own commands; returns the store and the devices' public key.
fn publish(gateway: &Path, dir: &Path) -> anyhow::Result<(PathBuf, VerifyingKey)> {
    let (keys, store, bundle) = (dir.join("keys"), dir.join("store"), dir.join("router.bundle"));
    let run = |args: &[&str]| -> anyhow::Result<()> {
        let out = Command::new(gateway).args(args).output().with_context(|| format!("running {} {}", gateway.display(), args.join(" ")))?;
        anyhow::ensure!(out.status.success(), "{} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        Ok(())
    };
    if !keys.join("bundle-signing.key").exists() {
        run(&["ca", "signing-key", "--dir", &keys.to_string_lossy()])?;
    }
    let router = shipped_router();
    run(&["fleet", "bundle", "--router", &router.to_string_lossy(), "--version", "abuse-1", "--signing-key", &keys.join("bundle-signing.key").to_string_lossy(), "--out", &bundle.to_string_lossy()])?;
    run(&["fleet", "publish", "--bundle-store", &store.to_string_lossy(), &bundle.to_string_lossy()])?;
    let public = std::fs::read_to_string(keys.join("bundle-signing.pub")).context("reading bundle-signing.pub")?;
    let key = VerifyingKey::from_file_text(&public).map_err(|e| anyhow::anyhow!("bundle-signing.pub: {e}"))?;
    Ok((store, key))
}

/// Report, take the offer, fetch every chunk and check the bundle, as the device's agent does.
async fn fetch(client: &Client, device: &str, key: &VerifyingKey, target: &DeviceTarget) -> Fetched {
    let t = Instant::now();
    let mut chunk_ms = Vec::new();
    let result = async {
        let conn = client.connect(device).await?;
        let offer = request(&conn, &Frame::BundleReport { running: None, escalations: 0, fallbacks: 0 }, REQUEST_WAIT).await?;
        let Frame::BundleOffer { bundle: Some(offered) } = offer else { anyhow::bail!("no bundle offered: {offer:?}") };
        let (mut download, mut next) = Download::start(offered.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
        let bytes = loop {
            let c = Instant::now();
            let reply = request(&conn, &next, REQUEST_WAIT).await?;
            chunk_ms.push(c.elapsed().as_secs_f64() * 1e3);
            match download.on_reply(reply).map_err(|e| anyhow::anyhow!("{e}"))? {
                Progress::More(frame) => next = frame,
                Progress::Done(bytes) => break bytes,
            }
        };
        conn.close(0u32.into(), b"done");
        let accepted = accept(&bytes, &offered, key, target).map_err(|e| anyhow::anyhow!("{e}"))?;
        anyhow::ensure!(accepted.reference == offered, "accepted another bundle than offered");
        Ok(bytes.len())
    }
    .await;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let chunks = chunk_ms.len();
    let chunk_max_ms = chunk_ms.iter().copied().fold(0.0, f64::max);
    let chunk_p50_ms = percentile(&mut chunk_ms, 0.5);
    match result {
        Ok(bytes) => Fetched { ms, bytes, chunks, chunk_p50_ms, chunk_max_ms, accepted: true, error: None },
        Err(e) => Fetched { ms, bytes: 0, chunks, chunk_p50_ms, chunk_max_ms, accepted: false, error: Some(format!("{e:#}")) },
    }
}

/// Run the scenario (see the module docs).
pub(super) async fn bundle_flood(run: &Run, dir: &Path) -> anyhow::Result<serde_json::Value> {
    let dir = dir.join("bundle-flood");
    std::fs::create_dir_all(&dir)?;
    let (store, key) = publish(&super::gateway_bin(&run.args)?, &dir)?;
    let gw = GatewayProcess::start_with(&run.args, &dir, &[format!("--bundle-store={}", store.display()), "--bundle-poll-ms=200".into()])?;
    let files = ModelFiles::locate(SLM)?;
    let target = DeviceTarget { slm_id: SLM.into(), tokenizer_fingerprint: files.manifest.tokenizer_fingerprint.clone(), hidden_size: files.manifest.hidden_size };
    let device = Client::new("127.0.0.2:0", gw.quic, &gw.cert, &run.device.fingerprint)?.with_slm(SLM);
    let attacker = Client::new("127.0.0.1:0", gw.quic, &gw.cert, &run.device.fingerprint)?;
    let idle = fetch(&device, "bundle-device", &key, &target).await;
    anyhow::ensure!(idle.accepted, "the bundle was not fetched from the idle gateway: {:?}", idle.error);

    let baseline_mb = gw.rss_mb();
    let watch = watch_rss(gw.child.id());
    let stop_at = Instant::now() + Duration::from_secs(run.args.scenario_secs);
    let tally = Arc::new(std::sync::Mutex::new(Tally::default()));
    let (conns, tasks) = escalation_load(&attacker, stop_at, tally.clone()).await?;
    // Let the queue fill before the first download.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during_probe = tokio::spawn({
        let (device, deadline) = (device.clone(), run.args.probe_deadline_ms);
        async move { probe(&device, 1, 10, deadline).await }
    });
    let mut during = Vec::new();
    for _ in 0..3 {
        during.push(fetch(&device, "bundle-device", &key, &target).await);
    }
    let queue_at_last_fetch = super::metric(gw.http, "duet_gateway_queue_depth").await;
    for t in tasks {
        let _ = t.await;
    }
    for c in &conns {
        c.close(0u32.into(), b"done");
    }
    let probe_during = during_probe.await?;
    let peak = peak_of(watch).await;
    let probe_after = probe(&device, 2, 10, run.args.probe_deadline_ms).await;
    let ready_after = super::http_get(gw.http, "/readyz").await.map(|(s, _)| s == 200).unwrap_or(false);
    let tally = tally.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok(json!({
        "bundle": { "bytes": idle.bytes, "chunks": idle.chunks },
        "idle": idle, "during_flood": during, "queue_depth_at_last_fetch": queue_at_last_fetch,
        "flood": { "sessions": 200, "secs": run.args.scenario_secs, "answers": tally },
        "after": { "rss_baseline_mb": baseline_mb, "rss_peak_mb": peak, "rss_after_mb": gw.rss_mb(), "probe_during": probe_during, "probe_after": probe_after, "ready_after": ready_after },
    }))
}
