//! Between a `tracing` span and the [`TraceContext`] an escalation carries (the `otlp`
//! feature): what a device puts in its `Escalate`, and how a gateway hangs its spans under it.
//!
//! Both sides create their spans with [`TRACE_TARGET`](crate::telemetry::TRACE_TARGET); with
//! no exporter installed those are disabled, every function here sees `Span::none()`, and an
//! escalation carries nothing.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::protocol::TraceContext;

/// The trace context to send with work done under `span`: its ids when the span is sampled
/// (exported), `None` otherwise (tracing off, or not sampled: nothing is sent).
pub fn outgoing(span: &tracing::Span) -> Option<TraceContext> {
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    if !sc.is_valid() || !sc.is_sampled() {
        return None;
    }
    TraceContext::sampled(sc.trace_id().to_bytes(), sc.span_id().to_bytes())
}

/// `span` if its trace is sampled (exported), else a disabled span: an unsampled escalation then
/// costs no further spans (children of a disabled span must not be created at all: they would
/// start traces of their own, so callers check [`tracing::Span::is_disabled`] first). Decides
/// the sampling now: set the span's parent first.
pub fn keep_if_sampled(span: tracing::Span) -> tracing::Span {
    if span.is_disabled() || span.context().span().span_context().is_sampled() {
        span
    } else {
        tracing::Span::none()
    }
}

/// Make `span` a child of the remote span `tc` names (the device's escalation), so that the
/// gateway's spans join the device's trace. Call before `span` is entered or has children;
/// a no-op with tracing off.
pub fn set_remote_parent(span: &tracing::Span, tc: &TraceContext) {
    if span.is_disabled() {
        return;
    }
    let flags = if tc.is_sampled() { TraceFlags::SAMPLED } else { TraceFlags::default() };
    let remote = SpanContext::new(TraceId::from_bytes(tc.trace_id), SpanId::from_bytes(tc.span_id), flags, true, TraceState::default());
    if let Err(e) = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote)) {
        tracing::debug!("trace context not applied: {e}");
    }
}

/// Make `child` (created with `parent: None`) a child of `parent`: for a span that had to
/// exist before its parent knew its own parent (see [`set_remote_parent`]).
pub fn set_local_parent(child: &tracing::Span, parent: &tracing::Span) {
    if child.is_disabled() || parent.is_disabled() {
        return;
    }
    let _ = child.set_parent(parent.context());
}

/// The `traceparent` header for an HTTP request made under `span`, when it is sampled: an
/// engine that traces (SGLang, vLLM) then joins the same trace.
pub fn traceparent_header(span: &tracing::Span) -> Option<String> {
    outgoing(span).map(|tc| tc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use tracing_subscriber::layer::SubscriberExt;

    use crate::telemetry::TRACE_TARGET;

    fn traced<R>(f: impl FnOnce() -> R) -> (R, Vec<opentelemetry_sdk::trace::SpanData>) {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
        let subscriber = tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let out = tracing::subscriber::with_default(subscriber, f);
        provider.force_flush().unwrap();
        (out, exporter.get_finished_spans().unwrap())
    }

    #[test]
    fn a_sampled_span_sends_its_ids_and_the_receiver_hangs_its_spans_under_them() {
        let ((sent, _), spans) = traced(|| {
            let device = tracing::info_span!(target: TRACE_TARGET, "escalation");
            let tc = outgoing(&device).expect("sampled");
            let gateway = tracing::info_span!(target: TRACE_TARGET, parent: None, "gateway.escalation");
            set_remote_parent(&gateway, &tc);
            let stage = tracing::info_span!(target: TRACE_TARGET, parent: None, "decode");
            set_local_parent(&stage, &gateway);
            drop((stage, gateway, device));
            (tc, ())
        });
        let by_name = |n: &str| spans.iter().find(|s| s.name == n).unwrap();
        let (device, gateway, stage) = (by_name("escalation"), by_name("gateway.escalation"), by_name("decode"));
        assert_eq!(device.span_context.trace_id().to_bytes(), sent.trace_id);
        assert_eq!(device.span_context.span_id().to_bytes(), sent.span_id);
        assert_eq!(gateway.span_context.trace_id(), device.span_context.trace_id());
        assert_eq!(gateway.parent_span_id, device.span_context.span_id());
        assert_eq!(stage.parent_span_id, gateway.span_context.span_id());
        assert_eq!(traceparent_header_of(&sent), sent.to_string());
    }

    fn traceparent_header_of(tc: &TraceContext) -> String {
        format!("00-{}-{}-01", hex::encode(tc.trace_id), hex::encode(tc.span_id))
    }

    #[test]
    fn an_unsampled_span_is_dropped_at_once_and_a_sampled_one_kept() {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_sampler(opentelemetry_sdk::trace::Sampler::ParentBased(Box::new(opentelemetry_sdk::trace::Sampler::AlwaysOff))).with_simple_exporter(exporter.clone()).build();
        let subscriber = tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, || {
            let root = keep_if_sampled(tracing::info_span!(target: TRACE_TARGET, parent: None, "gateway.escalation"));
            assert!(root.is_disabled(), "no sampled parent: dropped");
            let child = tracing::info_span!(target: TRACE_TARGET, parent: None, "gateway.escalation");
            set_remote_parent(&child, &TraceContext::sampled([1; 16], [2; 8]).unwrap());
            assert!(!keep_if_sampled(child).is_disabled(), "the device sampled it: kept");
        });
    }

    #[test]
    fn without_an_exporter_nothing_is_sent() {
        let span = tracing::info_span!(target: TRACE_TARGET, "escalation");
        assert_eq!(outgoing(&span), None);
        assert_eq!(traceparent_header(&tracing::Span::none()), None);
        let tc = TraceContext::sampled([1; 16], [2; 8]).unwrap();
        set_remote_parent(&span, &tc); // no subscriber: a no-op, no panic
    }

    #[test]
    fn an_unsampled_trace_sends_nothing() {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_sampler(opentelemetry_sdk::trace::Sampler::AlwaysOff).with_simple_exporter(exporter.clone()).build();
        let subscriber = tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(target: TRACE_TARGET, "escalation");
            assert_eq!(outgoing(&span), None);
        });
    }
}
