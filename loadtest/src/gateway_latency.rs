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
use cloud_gateway::config::{BatcherConfig, FairShareMode, GatewayConfig, OverloadConfig};
use cloud_gateway::Gateway;
use common::protocol::{encode_frame, ContextTracker, Frame, TraceContext, WireSampling};
use edge_node::link::{Link, LinkConfig};
use rand::Rng;
use model_runtime::model_files::{ModelFiles, DEFAULT_SLM};
use serde::Serialize;

use crate::fixed_backend::FixedCostBackend;
use common::stats::{percentile, process_cpu_s};

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
    /// Gateway cost cap: most tokens of prefill one backend call may carry. The fixed-cost
    /// backend costs the same per call whatever it carries, so the gateway's default cap (which
    /// bounds a real model's call time) would only split each batch into more calls of the same
    /// fixed cost and measure that; by default the cap is off here, as before it existed.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_batch_tokens: usize,
    /// Share the batcher's queue between devices by the tokens each was served (the gateway's
    /// `--fair-share device`, its default), or `off`: oldest first, as before fair sharing
    /// existed (for same-run comparisons with older builds).
    #[arg(long, value_enum, default_value_t = FairShareMode::Device)]
    pub fair_share: FairShareMode,
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
    let traces = TraceExport::start(sample, &mut builder)?;
    let rt = builder.build()?;
    let result = rt.block_on(measure(args));
    drop(rt);
    let (mut report, cpu_started) = result?;
    traces.finish(&mut report, cpu_started);
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// `--trace-sample`: the OTLP receiver on a thread of its own and the exporter that every
/// thread of the measured runtime reports to. Empty when tracing is off.
struct TraceExport {
    sink: Option<crate::otlp_sink::OtlpSink>,
    /// Stops the receiver's thread.
    sink_thread: Option<(tokio::sync::oneshot::Sender<()>, std::thread::JoinHandle<()>)>,
    telemetry: Option<common::telemetry::Telemetry>,
}

impl TraceExport {
    /// Starts the receiver and installs the exporter on `builder`'s threads when `sample` is set.
    fn start(sample: Option<f32>, builder: &mut tokio::runtime::Builder) -> anyhow::Result<Self> {
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
        Ok(Self { sink, sink_thread, telemetry })
    }

    /// Flushes the exporter, fills in the CPU cost per escalation (less the receiver's decoding)
    /// and what the receiver got, and stops it.
    fn finish(self, report: &mut Report, cpu_started: f64) {
        if let Some(mut t) = self.telemetry {
            t.shutdown(); // the last batch reaches the receiver before it is read
        }
        let mut cpu_s = process_cpu_s() - cpu_started;
        if let Some(sink) = &self.sink {
            let got = sink.received();
            cpu_s -= got.decode_s;
            report.gateway_escalation_spans = got.spans.get("gateway.escalation").copied().unwrap_or(0);
            report.spans_exported = got.spans.values().sum();
            report.spans_by_name = got.spans.into_iter().collect();
            (report.export_requests, report.export_bytes) = (got.requests, got.bytes);
        }
        report.cpu_us_per_escalation = cpu_s * 1e6 / report.escalations.max(1) as f64;
        if let Some((stop, thread)) = self.sink_thread {
            let _ = stop.send(());
            let _ = thread.join();
        }
    }
}

/// The gateway with its fixed-cost backend, every device connected, every session run; the
/// report without the tracing figures, and the process CPU time when the sessions started.
async fn measure(args: LatencyArgs) -> anyhow::Result<(Report, f64)> {
    let dir = tempfile::tempdir()?;
    let (base, cert) = crate::loopback::loopback_config(dir.path())?;
    let config = GatewayConfig {
        batcher: BatcherConfig {
            max_batch: args.max_batch as usize,
            max_wait: Duration::from_millis(args.max_wait_ms),
            queue_capacity: 100_000,
        },
        overload: OverloadConfig { max_batch_tokens: args.max_batch_tokens, fair_share: args.fair_share, ..base.overload },
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
            let session = Session { link: link.clone(), device: d, session: s, escalations: args.escalations, delta: args.delta, sample: args.trace_sample };
            tasks.push(tokio::spawn(session.run()));
        }
    }
    let mut all = SessionSamples::default();
    for t in tasks {
        let one = t.await??;
        all.latency_ms.extend(one.latency_ms);
        all.ping_ms.extend(one.ping_ms);
        all.later_bytes.extend(one.later_bytes);
        all.traced += one.traced;
    }
    let report = Report::new(&args, all, started.elapsed().as_secs_f64());
    gw.shutdown().await;
    Ok((report, cpu_started))
}

/// One simulated session: `escalations` sequential, delta-synced escalations over its device's
/// link, each followed by a `Ping`.
struct Session {
    link: Arc<Link>,
    device: usize,
    session: usize,
    escalations: usize,
    /// Tokens appended before each escalation.
    delta: usize,
    /// Share of escalations sent with a sampled trace context.
    sample: Option<f32>,
}

/// What sessions measured.
#[derive(Default)]
struct SessionSamples {
    latency_ms: Vec<f64>,
    ping_ms: Vec<f64>,
    /// Bytes sent per escalation after the first.
    later_bytes: Vec<f64>,
    traced: usize,
}

impl Session {
    async fn run(self) -> anyhow::Result<SessionSamples> {
        let (d, s, n) = (self.device, self.session, self.escalations);
        let mut tracker = ContextTracker::new();
        let mut ctx: Vec<u32> = (0..64).map(|i| (1000 + i * 17 + d * 7 + s) as u32).collect();
        let mut out = SessionSamples { latency_ms: Vec::with_capacity(n), ping_ms: Vec::with_capacity(n), ..SessionSamples::default() };
        for k in 0..n {
            for j in 0..self.delta {
                ctx.push((3000 + (k * 31 + j * 7 + s) % 20000) as u32);
            }
            let sync = tracker.sync_for(&ctx);
            let frame = Frame::Escalate { session_id: s as u64 + 1, seq: sync.seq, context: sync.context, sampling: WireSampling::default(), deadline_ms: 10_000 };
            let bytes = encode_frame(&frame, 1 << 16)?;
            // A device that sampled this escalation's trace sends its context.
            let trace = self.sample.filter(|&p| rand::rng().random::<f32>() < p).and_then(|_| {
                let mut rng = rand::rng();
                TraceContext::sampled(rng.random(), rng.random())
            });
            out.traced += usize::from(trace.is_some());
            let t = Instant::now();
            let (reply, sent) = self.link.request_escalation(&bytes, trace.as_ref(), Instant::now() + Duration::from_secs(10)).await;
            if k > 0 {
                out.later_bytes.push(sent as f64);
            }
            match reply {
                Ok(Frame::Token { token_id, .. }) => {
                    out.latency_ms.push(t.elapsed().as_secs_f64() * 1e3);
                    ctx.push(token_id);
                }
                other => anyhow::bail!("unexpected reply: {other:?}"),
            }
            let t = Instant::now();
            if let Ok((Frame::Pong { .. }, _)) = self.link.request(&Frame::Ping { nonce: k as u64 }, Instant::now() + Duration::from_secs(10)).await {
                out.ping_ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        Ok(out)
    }
}

impl Report {
    /// The figures of the run that took `elapsed` seconds; the tracing ones are filled in later.
    fn new(args: &LatencyArgs, samples: SessionSamples, elapsed: f64) -> Self {
        let SessionSamples { latency_ms: mut lat, ping_ms: mut pings, later_bytes: bytes, traced } = samples;
        let cost = args.cost_ms as f64;
        Self {
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
            cpu_us_per_escalation: 0.0, // once the spans are exported (TraceExport::finish)
            avg_escalation_frame_bytes_after_first: bytes.iter().sum::<f64>() / bytes.len().max(1) as f64,
            trace_sample: args.trace_sample,
            traced_escalations: traced,
            gateway_escalation_spans: 0,
            spans_exported: 0,
            spans_by_name: Default::default(),
            export_requests: 0,
            export_bytes: 0,
        }
    }
}
