//! Gateway-added latency: simulated devices over real QUIC on loopback escalate against an
//! in-process gateway whose backend costs a fixed, known time. The same run measures `Ping`
//! round trips (QUIC + the connection actor, no batcher or backend) as the transport baseline.
//!
//! `--trace-sample P` measures tracing's cost: the devices attach a sampled trace context to a
//! share P of their escalations (as a device whose sampler keeps P of its traces does), and the
//! gateway exports its spans over OTLP/HTTP (sampler `parentbased_traceidratio`, ratio P) to a
//! receiver in this process ([`crate::otlp_sink`]). Without it tracing is off, the default.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use cloud_gateway::config::{BatcherConfig, GatewayConfig};
use cloud_gateway::Gateway;
use common::protocol::{encode_frame, ContextTracker, Frame, TraceContext, WireSampling};
use edge_node::link::{Link, LinkConfig};
use rand::Rng;
use model_runtime::model_files::{ModelFiles, DEFAULT_SLM};
use serde::Serialize;

use crate::fixed_backend::FixedCostBackend;
use crate::stats::{percentile, process_cpu_s};

/// Options of `loadtest gateway-latency`.
#[derive(Debug, Args)]
pub struct LatencyArgs {
    /// Simulated devices (one QUIC connection each).
    #[arg(long, default_value_t = 50)]
    pub devices: usize,
    /// Concurrent sessions per device.
    #[arg(long, default_value_t = 2)]
    pub sessions: usize,
    /// Escalations per session (sequential, delta-synced).
    #[arg(long, default_value_t = 50)]
    pub escalations: usize,
    /// Fixed backend cost per batch, ms.
    #[arg(long, default_value_t = 0)]
    pub cost_ms: u64,
    /// Gateway batch cut: most escalations per batch.
    #[arg(long, default_value_t = 64)]
    pub max_batch: u32,
    /// Gateway batch cut: longest wait, ms.
    #[arg(long, default_value_t = 1)]
    pub max_wait_ms: u64,
    /// Tokens appended between escalations.
    #[arg(long, default_value_t = 12)]
    pub delta: usize,
    /// Trace this share of escalations (0..=1, e.g. 0.01 or 1): devices send a sampled trace
    /// context with it and the gateway exports spans to an OTLP receiver in this process.
    /// Unset: tracing off.
    #[arg(long, value_parser = edge_node::args::parse_unit)]
    pub trace_sample: Option<f32>,
}

#[derive(Serialize)]
struct Report {
    devices: usize,
    sessions_per_device: usize,
    escalations: usize,
    backend_cost_ms: u64,
    escalation_p50_ms: f64,
    escalation_p99_ms: f64,
    ping_p50_ms: f64,
    ping_p99_ms: f64,
    added_over_backend_p50_ms: f64,
    added_over_backend_p99_ms: f64,
    escalations_per_s: f64,
    /// CPU time of this process (devices, gateway, trace exporter) per escalation, µs, from the
    /// first escalation to the last span exported; the receiver's decoding is taken out.
    cpu_us_per_escalation: f64,
    avg_escalation_frame_bytes_after_first: f64,
    /// The share of escalations sent with a trace context (`--trace-sample`), if tracing.
    trace_sample: Option<f32>,
    /// Escalations that carried a trace context.
    traced_escalations: usize,
    /// `gateway.escalation` spans the receiver got (device-sampled ones, plus those the
    /// gateway's own sampler started).
    gateway_escalation_spans: usize,
    /// Spans exported in all (and by name), and the export requests and bytes they took.
    spans_exported: usize,
    spans_by_name: std::collections::BTreeMap<String, usize>,
    export_requests: usize,
    export_bytes: usize,
}

/// Run the measurement (bounded: devices x sessions x escalations requests, then it stops).
pub fn run(args: LatencyArgs) -> anyhow::Result<()> {
    let sample = args.trace_sample;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    let sink_rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let sink = match sample {
        Some(_) => Some(sink_rt.block_on(crate::otlp_sink::OtlpSink::start())?),
        None => None,
    };
    let sink_thread = sink.as_ref().map(|_| {
        // The receiver serves from a thread of its own, outside the measured runtime.
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || sink_rt.block_on(async move { let _ = stopped.await; }));
        (stop, thread)
    });
    let mut telemetry = None;
    if let (Some(p), Some(sink)) = (sample, &sink) {
        // As an operator would set it: follow the device's decision, sample the rest at P.
        std::env::set_var("OTEL_TRACES_SAMPLER", "parentbased_traceidratio");
        std::env::set_var("OTEL_TRACES_SAMPLER_ARG", p.to_string());
        let (dispatch, t) = common::telemetry::otlp_dispatch(Some(&sink.endpoint()), "cloud-gateway")?.ok_or_else(|| anyhow::anyhow!("OTEL_* variables turn trace export off"))?;
        telemetry = Some(t);
        // Every thread of the measured runtime (the gateway's and the devices') reports to it.
        builder.on_thread_start(move || std::mem::forget(tracing::dispatcher::set_default(&dispatch)));
    }
    let rt = builder.build()?;
    let result = rt.block_on(async move {
        let dir = tempfile::tempdir()?;
        let (base, cert) = crate::loopback::loopback_config(dir.path())?;
        let config = GatewayConfig {
            batcher: BatcherConfig {
                max_batch: args.max_batch as usize,
                max_wait: Duration::from_millis(args.max_wait_ms),
                queue_capacity: 100_000,
            },
            ..base
        };
        // Devices run the default SLM; the stand-in LLM shares its tokenizer and vocabulary.
        let slm = ModelFiles::locate(DEFAULT_SLM)?.manifest;
        let fingerprint = slm.tokenizer_fingerprint.clone();
        let backend = Box::new(FixedCostBackend::new(Duration::from_millis(args.cost_ms), &slm));
        let gw = Gateway::start(config, backend).await?;
        let addr = gw.local_addr()?;
        let mut links = Vec::new();
        for d in 0..args.devices {
            let link = Link::start(LinkConfig {
                slm_id: "loadtest".into(),
                backoff_min: Duration::from_millis(50),
                backoff_max: Duration::from_secs(1),
                ..LinkConfig::new(addr.to_string(), Some(cert.clone()), format!("sim-{d}"), fingerprint.as_str())
            })?;
            anyhow::ensure!(link.wait_up(Duration::from_secs(10)).await.is_some(), "device {d} could not connect");
            links.push(Arc::new(link));
        }
        let started = Instant::now();
        let cpu_started = process_cpu_s();
        let mut tasks = Vec::new();
        for (d, link) in links.iter().enumerate() {
            for s in 0..args.sessions {
                let link = link.clone();
                let (n, delta) = (args.escalations, args.delta);
                tasks.push(tokio::spawn(async move {
                    let mut tracker = ContextTracker::new();
                    let mut ctx: Vec<u32> = (0..64).map(|i| (1000 + i * 17 + d * 7 + s) as u32).collect();
                    let mut lat = Vec::with_capacity(n);
                    let mut pings = Vec::with_capacity(n);
                    let mut later_bytes = Vec::new();
                    let mut traced = 0usize;
                    for k in 0..n {
                        for j in 0..delta {
                            ctx.push((3000 + (k * 31 + j * 7 + s) % 20000) as u32);
                        }
                        let sync = tracker.sync_for(&ctx);
                        let frame = Frame::Escalate { session_id: s as u64 + 1, seq: sync.seq, context: sync.context, sampling: WireSampling::default(), deadline_ms: 10_000 };
                        let bytes = encode_frame(&frame, 1 << 16)?;
                        // A device that sampled this escalation's trace sends its context.
                        let trace = sample.filter(|&p| rand::rng().random::<f32>() < p).and_then(|_| {
                            let mut rng = rand::rng();
                            TraceContext::sampled(rng.random(), rng.random())
                        });
                        traced += usize::from(trace.is_some());
                        let t = Instant::now();
                        let (reply, sent) = link.request_escalation(&bytes, trace.as_ref(), Instant::now() + Duration::from_secs(10)).await;
                        if k > 0 {
                            later_bytes.push(sent as f64);
                        }
                        match reply {
                            Ok(Frame::Token { token_id, .. }) => {
                                lat.push(t.elapsed().as_secs_f64() * 1e3);
                                ctx.push(token_id);
                            }
                            other => anyhow::bail!("unexpected reply: {other:?}"),
                        }
                        let t = Instant::now();
                        if let Ok((Frame::Pong { .. }, _)) = link.request(&Frame::Ping { nonce: k as u64 }, Instant::now() + Duration::from_secs(10)).await {
                            pings.push(t.elapsed().as_secs_f64() * 1e3);
                        }
                    }
                    anyhow::Ok((lat, pings, later_bytes, traced))
                }));
            }
        }
        let (mut lat, mut pings, mut bytes, mut traced) = (Vec::new(), Vec::new(), Vec::new(), 0);
        for t in tasks {
            let (l, p, b, n) = t.await??;
            lat.extend(l);
            pings.extend(p);
            bytes.extend(b);
            traced += n;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let cost = args.cost_ms as f64;
        let report = Report {
            devices: args.devices,
            sessions_per_device: args.sessions,
            escalations: lat.len(),
            backend_cost_ms: args.cost_ms,
            escalation_p50_ms: percentile(&mut lat, 0.5),
            escalation_p99_ms: percentile(&mut lat, 0.99),
            ping_p50_ms: percentile(&mut pings, 0.5),
            ping_p99_ms: percentile(&mut pings, 0.99),
            added_over_backend_p50_ms: percentile(&mut lat, 0.5) - cost,
            added_over_backend_p99_ms: percentile(&mut lat, 0.99) - cost,
            escalations_per_s: lat.len() as f64 / elapsed,
            cpu_us_per_escalation: 0.0, // once the spans are exported, below
            avg_escalation_frame_bytes_after_first: bytes.iter().sum::<f64>() / bytes.len().max(1) as f64,
            trace_sample: sample,
            traced_escalations: traced,
            gateway_escalation_spans: 0,
            spans_exported: 0,
            spans_by_name: Default::default(),
            export_requests: 0,
            export_bytes: 0,
        };
        gw.shutdown().await;
        anyhow::Ok((report, cpu_started))
    });
    drop(rt);
    let (mut report, cpu_started) = result?;
    if let Some(mut t) = telemetry {
        t.shutdown(); // the last batch reaches the receiver before it is read
    }
    let mut cpu_s = process_cpu_s() - cpu_started;
    if let Some(sink) = &sink {
        let got = sink.received();
        cpu_s -= got.decode_s;
        report.gateway_escalation_spans = got.spans.get("gateway.escalation").copied().unwrap_or(0);
        report.spans_exported = got.spans.values().sum();
        report.spans_by_name = got.spans.into_iter().collect();
        (report.export_requests, report.export_bytes) = (got.requests, got.bytes);
    }
    report.cpu_us_per_escalation = cpu_s * 1e6 / report.escalations.max(1) as f64;
    if let Some((stop, thread)) = sink_thread {
        let _ = stop.send(());
        let _ = thread.join();
    }
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
