//! OpenTelemetry traces end to end: a real OTLP receiver (support/otlp.rs, on the official
//! protobuf definitions) receives the spans of a real `cloud-gateway` process and a real routed
//! `edge-node generate` run, and every escalation is one connected piece of the generation's
//! trace: device escalation → gateway escalation → validate, apply_context, queue wait, batch
//! → backend. The same generation without tracing sends exactly 26 bytes less per escalation.

mod support;
#[path = "support/otlp.rs"]
mod otlp;

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use otlp::{OtlpReceiver, ReceivedSpan, KIND_CLIENT, KIND_SERVER};
use support::*;

/// Every token escalated (tau 1) on the tiny model at both ends, with a fixed deadline and no
/// prompt pre-sync (whose race with the first escalation may cost a `Full` resend), so that
/// both runs send the same frames apart from the trace context.
fn generate(addr: &str, ca: &str, otlp: Option<&str>) -> serde_json::Value {
    let mut args = vec![
        "generate", "--model", TINY, "--prompt", "def fibonacci(n):", "--max-new-tokens", "6", "--json", "--gateway", addr, "--ca-cert", ca, "--tau", "1",
        "--deadline-min-ms", "5000", "--deadline-max-ms", "5000", "--no-presync",
    ];
    if let Some(endpoint) = otlp {
        args.extend(["--otlp-endpoint", endpoint]);
    }
    edge_json(&args).0
}

/// A child process killed when dropped (also when the test panics).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn children<'a>(spans: &'a [ReceivedSpan], parent: &ReceivedSpan, name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.parent_span_id == parent.span_id && s.trace_id == parent.trace_id && s.name == name).collect()
}

fn one<'a>(spans: &'a [ReceivedSpan], parent: &ReceivedSpan, name: &str) -> &'a ReceivedSpan {
    let found = children(spans, parent, name);
    assert_eq!(found.len(), 1, "one {name} under {} {}: {found:#?}", parent.name, parent.span_id);
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_escalation_is_one_trace_from_the_device_through_the_gateways_queue_and_batch_into_the_backend() {
    let receiver = OtlpReceiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = cert_pair(dir.path());
    let port = free_udp_port();
    let _gateway = Killed(
        Command::new(gateway_exe())
            .args([
                format!("--listen=127.0.0.1:{port}"),
                "--http-listen=off".into(),
                format!("--tls-cert={}", cert.display()),
                format!("--tls-key={}", key.display()),
                format!("--model={TINY}"),
                "--threads=1".into(),
                "--log=warn".into(),
                format!("--otlp-endpoint={}", receiver.endpoint()),
            ])
            // Export every 100 ms: the test kills the process rather than waiting for its flush.
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn cloud-gateway"),
    );
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_for_gateway(addr, &cert, Duration::from_secs(60)).await;
    let (addr, ca, endpoint) = (addr.to_string(), cert.to_str().unwrap().to_string(), receiver.endpoint());

    // The same generation untraced, then traced (the device exports when it exits).
    let plain = tokio::task::spawn_blocking({
        let (addr, ca) = (addr.clone(), ca.clone());
        move || generate(&addr, &ca, None)
    });
    let plain = plain.await.unwrap();
    let traced = tokio::task::spawn_blocking(move || generate(&addr, &ca, Some(&endpoint))).await.unwrap();
    let escalated = traced["escalated"].as_u64().unwrap() as usize;
    assert!(escalated >= 6, "every token escalated: {traced}");
    assert_eq!(traced["cloud_tokens"], traced["escalated"], "no fallback expected: {traced}");
    assert_eq!(ids(&traced), ids(&plain), "tracing changes no token");

    // The trace context costs exactly 26 bytes per escalation, and nothing when off.
    let sizes = |v: &serde_json::Value| (v["first_escalation_bytes"].as_f64().unwrap(), v["later_escalation_bytes_avg"].as_f64().unwrap());
    let ((plain_first, plain_later), (traced_first, traced_later)) = (sizes(&plain), sizes(&traced));
    assert_eq!(traced_first, plain_first + 26.0, "first escalation: {plain_first} B untraced, {traced_first} B traced");
    assert!((traced_later - (plain_later + 26.0)).abs() < 1e-9, "later escalations: {plain_later} B untraced, {traced_later} B traced");
    assert!(plain_later <= 64.0, "later escalations within 64 B untraced: {plain_later}");

    // The device's spans arrive when it exits; the gateway's within its export interval.
    let spans = receiver
        .wait_for(Duration::from_secs(20), |spans| {
            let gateway_traced = spans.iter().filter(|s| s.name == "gateway.escalation" && s.attr("traced") == Some("true")).count();
            gateway_traced >= escalated
        })
        .await;
    let edge: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.service == "edge-node").collect();
    let generations: Vec<&&ReceivedSpan> = edge.iter().filter(|s| s.name == "generation").collect();
    assert_eq!(generations.len(), 1, "one generation: {edge:#?}");
    let generation = *generations[0];
    assert!(generation.parent_span_id.is_empty(), "the generation is the trace's root");
    assert_eq!(generation.num("tokens"), Some(traced["tokens"].as_f64().unwrap()));
    assert_eq!(generation.num("cloud_tokens"), Some(traced["cloud_tokens"].as_f64().unwrap()));

    let escalations = children(&spans, generation, "escalation");
    assert_eq!(escalations.len(), escalated, "a span per escalation under the generation");
    let by_start = {
        let mut e = escalations.clone();
        e.sort_by_key(|s| s.start_ns);
        e
    };
    let sent: Vec<f64> = by_start.iter().map(|s| s.num("bytes").unwrap_or(0.0)).collect();
    assert_eq!(sent[0], traced_first, "the spans say what was sent: {sent:?}");
    assert!((sent[1..].iter().sum::<f64>() / (sent.len() - 1) as f64 - traced_later).abs() < 1e-9, "{sent:?}");
    for esc in &by_start {
        assert_eq!(esc.kind, KIND_CLIENT);
        assert_eq!(esc.attr("outcome"), Some("cloud"), "{esc:#?}");
        assert!(esc.num("wait_ms").is_some_and(|ms| ms > 0.0));

        // The gateway's side, in the same trace, under the device's span.
        let gw = one(&spans, esc, "gateway.escalation");
        assert_eq!((gw.service.as_str(), gw.kind), ("cloud-gateway", KIND_SERVER));
        assert_eq!(gw.attr("outcome"), Some("token"));
        assert_eq!(gw.attr("traced"), Some("true"));
        assert!(esc.start_ns <= gw.start_ns && gw.end_ns <= esc.end_ns, "the gateway's work lies within the device's wait");
        one(&spans, gw, "validate");
        one(&spans, gw, "apply_context");
        let queue = one(&spans, gw, "queue_wait");
        let batch = one(&spans, gw, "batch");
        assert!(queue.end_ns <= batch.start_ns, "queued, then batched");
        assert!(batch.num("batch_size").is_some_and(|n| n >= 1.0), "{batch:#?}");
        let backend = one(&spans, batch, "backend");
        assert_eq!(backend.attr("backend"), Some("embedded"));
        assert_eq!(backend.attr("ok"), Some("true"));
        assert!(backend.num("backend_ms").is_some());
    }
    // Whatever the gateway traced for the untraced run is its own trace (no device parent).
    let ours: HashMap<&str, ()> = spans.iter().filter(|s| s.trace_id == generation.trace_id).map(|s| (s.span_id.as_str(), ())).collect();
    for s in spans.iter().filter(|s| s.name == "gateway.escalation" && s.attr("traced") == Some("false")) {
        assert!(s.parent_span_id.is_empty() && !ours.contains_key(s.span_id.as_str()), "{s:#?}");
    }
}
