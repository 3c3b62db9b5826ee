//! Logging and trace set-up shared by every Duet binary: `tracing` to stderr, filtered by
//! `--log` / `DUET_LOG` (EnvFilter syntax), so stdout stays clean for generated text and JSON
//! reports; and, when an OTLP endpoint is configured, the spans of [`TRACE_TARGET`] exported
//! as OpenTelemetry traces (OTLP over HTTP/protobuf, the `otlp` feature).
//!
//! Traces are off by default and then cost nothing: the trace spans have a target of their
//! own that the log output never enables, so without an exporter `tracing` disables them at
//! their call sites (a `Span::none()`, no allocation) and an escalation carries no trace
//! context. With one, the standard variables apply: `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) turns export on like `--otlp-endpoint` does,
//! `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` name the process, `OTEL_TRACES_SAMPLER` /
//! `OTEL_TRACES_SAMPLER_ARG` choose the sampler (default `parentbased_always_on`: a gateway
//! follows the device's decision), `OTEL_EXPORTER_OTLP_HEADERS` / `_TIMEOUT` and `OTEL_BSP_*`
//! tune the exporter, and `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn it off.
//! Spans are exported in batches from the SDK's own thread; [`Telemetry::shutdown`] flushes
//! them before the process exits.

/// Target of the spans that make up Duet's traces (escalations, generations, the gateway's
/// stages). Only the OTLP exporter enables it, never the log output.
pub const TRACE_TARGET: &str = "duet_trace";

/// An invalid `--log` filter.
#[derive(Debug, thiserror::Error)]
#[error("invalid --log filter `{filter}`: {message}")]
pub struct LogFilterError {
    /// The filter as given.
    pub filter: String,
    /// What the parser said.
    pub message: String,
}

/// Why logging or trace export could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The `--log` filter does not parse.
    #[error(transparent)]
    Filter(#[from] LogFilterError),
    /// The OTLP endpoint is not an http(s) URL.
    #[error("invalid OTLP endpoint `{endpoint}`: {why} (e.g. http://127.0.0.1:4318)")]
    Endpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        why: String,
    },
    /// A standard `OTEL_*` variable asks for something this build does not do.
    #[error("{0}")]
    Unsupported(String),
    /// The exporter could not be built.
    #[error("OTLP exporter: {0}")]
    Exporter(String),
}

/// The log filter with the trace spans taken out of the log output.
fn log_filter(filter: &str) -> Result<tracing_subscriber::EnvFilter, LogFilterError> {
    let bad = |message: String| LogFilterError { filter: filter.to_string(), message };
    let env_filter = tracing_subscriber::EnvFilter::try_new(filter).map_err(|e| bad(e.to_string()))?;
    let off = format!("{TRACE_TARGET}=off").parse().map_err(|e: tracing_subscriber::filter::ParseError| bad(e.to_string()))?;
    Ok(env_filter.add_directive(off))
}

/// Install the global subscriber (logs only; trace spans stay disabled). Call once, at the
/// start of `main`.
pub fn init_logging(filter: &str) -> Result<(), LogFilterError> {
    let env_filter = log_filter(filter)?;
    // A second call (e.g. from a test harness) keeps the first subscriber.
    let _ = tracing_subscriber::fmt().with_env_filter(env_filter).with_writer(std::io::stderr).try_init();
    Ok(())
}

#[cfg(feature = "otlp")]
pub use otlp::{init, otlp_dispatch, Telemetry};

#[cfg(feature = "otlp")]
mod otlp {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::WithExportConfig;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;

    use super::{log_filter, TelemetryError, TRACE_TARGET};

    /// Trace export of a running process: flush it with [`Self::shutdown`] (or by dropping it)
    /// before the process exits, or the last batch of spans is lost.
    #[derive(Debug, Default)]
    pub struct Telemetry {
        provider: Option<SdkTracerProvider>,
    }

    impl Telemetry {
        /// Whether spans are exported.
        pub fn exporting(&self) -> bool {
            self.provider.is_some()
        }

        /// Export the spans still buffered and stop the exporter (waits for the collector, up
        /// to the exporter's timeout).
        pub fn shutdown(&mut self) {
            if let Some(provider) = self.provider.take() {
                if let Err(e) = provider.shutdown() {
                    tracing::warn!("flushing traces: {e}");
                }
            }
        }
    }

    impl Drop for Telemetry {
        fn drop(&mut self) {
            self.shutdown();
        }
    }

    /// A variable's value, unset when empty.
    fn var(name: &str) -> Option<String> {
        std::env::var(name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
    }

    /// The traces URL `--otlp-endpoint` names: like `OTEL_EXPORTER_OTLP_ENDPOINT`, a base URL
    /// to which `/v1/traces` is appended (unless it is already there).
    fn traces_url(endpoint: &str) -> Result<String, TelemetryError> {
        let bad = |why: &str| TelemetryError::Endpoint { endpoint: endpoint.to_string(), why: why.to_string() };
        let rest = endpoint.strip_prefix("http://").or_else(|| endpoint.strip_prefix("https://")).ok_or_else(|| bad("not an http:// or https:// URL"))?;
        if rest.is_empty() || rest.starts_with('/') {
            return Err(bad("no host"));
        }
        let base = endpoint.trim_end_matches('/');
        Ok(if base.ends_with("/v1/traces") { base.to_string() } else { format!("{base}/v1/traces") })
    }

    /// Whether, and where, to export: `endpoint` (the binary's `--otlp-endpoint`) or the
    /// standard variables; `None` when neither is set or the standard variables turn it off.
    fn export_target(endpoint: Option<&str>) -> Result<Option<Option<String>>, TelemetryError> {
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        match var("OTEL_TRACES_EXPORTER").as_deref() {
            None | Some("otlp") => {}
            Some("none") => return Ok(None),
            Some(other) => return Err(TelemetryError::Unsupported(format!("OTEL_TRACES_EXPORTER={other}: only `otlp` (or `none`) is built in"))),
        }
        let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"));
        if let Some(p) = protocol.filter(|p| p != "http/protobuf") {
            return Err(TelemetryError::Unsupported(format!("OTLP protocol `{p}`: only http/protobuf is built in (a collector's port 4318)")));
        }
        match endpoint.map(str::trim).filter(|e| !e.is_empty()) {
            // Given explicitly: used as the traces URL.
            Some(e) => Ok(Some(Some(traces_url(e)?))),
            // From the standard variables: the exporter reads them itself.
            None if var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some() || var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() => Ok(Some(None)),
            None => Ok(None),
        }
    }

    /// The trace pipeline for `endpoint` (see [`export_target`]): the provider and the layer
    /// that feeds it the [`TRACE_TARGET`] spans. `service` names the process unless
    /// `OTEL_SERVICE_NAME` does.
    fn pipeline<S>(endpoint: Option<&str>, service: &str) -> Result<Option<(SdkTracerProvider, impl Layer<S>)>, TelemetryError>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        let Some(url) = export_target(endpoint)? else { return Ok(None) };
        // reqwest is built without a crypto provider (the workspace picks ring); an https
        // collector needs one, and the client refuses to build without it.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = opentelemetry_otlp::SpanExporter::builder().with_http();
        if let Some(url) = &url {
            builder = builder.with_endpoint(url.clone());
        }
        let exporter = builder.build().map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let mut resource = opentelemetry_sdk::Resource::builder();
        if var("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(service.to_string());
        }
        // The sampler comes from OTEL_TRACES_SAMPLER(_ARG), parentbased_always_on by default.
        let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.build()).build();
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("duet"))
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            // Parents are explicit or tracing's current span; no OTel context switch per enter.
            .with_context_activation(false)
            .with_filter(tracing_subscriber::filter::Targets::new().with_target(TRACE_TARGET, tracing::Level::TRACE));
        Ok(Some((provider, layer)))
    }

    /// Install the global subscriber: logs filtered by `log`, and traces exported to
    /// `otlp_endpoint` (a base URL such as `http://collector:4318`) or to what the standard
    /// `OTEL_*` variables say; neither set = logs only. `service` is the default
    /// `service.name`. Call once, at the start of `main`, and keep the result until the end.
    pub fn init(log: &str, otlp_endpoint: Option<&str>, service: &str) -> Result<Telemetry, TelemetryError> {
        let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(log_filter(log)?);
        let registry = tracing_subscriber::registry().with(fmt);
        match pipeline(otlp_endpoint, service)? {
            Some((provider, layer)) => {
                let _ = registry.with(layer).try_init();
                tracing::info!(service, "exporting traces over OTLP");
                Ok(Telemetry { provider: Some(provider) })
            }
            None => {
                let _ = registry.try_init();
                Ok(Telemetry::default())
            }
        }
    }

    /// A subscriber that only exports traces (no log output), for a process that measures
    /// several configurations in turn (the load tester): install it with
    /// `tracing::dispatcher::set_default` on the threads concerned. `None` when `otlp_endpoint`
    /// and the standard variables leave export off.
    pub fn otlp_dispatch(otlp_endpoint: Option<&str>, service: &str) -> Result<Option<(tracing::Dispatch, Telemetry)>, TelemetryError> {
        Ok(pipeline(otlp_endpoint, service)?.map(|(provider, layer)| {
            let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
            (dispatch, Telemetry { provider: Some(provider) })
        }))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_endpoint_is_a_base_url_like_the_standard_variable() {
            assert_eq!(traces_url("http://127.0.0.1:4318").unwrap(), "http://127.0.0.1:4318/v1/traces");
            assert_eq!(traces_url("https://otel.example/").unwrap(), "https://otel.example/v1/traces");
            assert_eq!(traces_url("http://c:4318/v1/traces").unwrap(), "http://c:4318/v1/traces");
            for bad in ["127.0.0.1:4318", "grpc://c:4317", "http://", "http:///x"] {
                let err = traces_url(bad).unwrap_err().to_string();
                assert!(err.contains(bad), "{err}");
            }
        }

        #[test]
        fn no_endpoint_means_no_export() {
            // The test environment sets no OTEL_* variable.
            if std::env::vars().any(|(k, _)| k.starts_with("OTEL_")) {
                return;
            }
            assert!(export_target(None).unwrap().is_none());
            assert!(export_target(Some(" ")).unwrap().is_none());
            assert_eq!(export_target(Some("http://c:4318")).unwrap(), Some(Some("http://c:4318/v1/traces".into())));
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_typo_in_the_filter_is_a_clear_error() {
        let err = super::init_logging("info,=[").unwrap_err();
        assert!(err.to_string().contains("invalid --log filter"), "{err}");
        assert!(super::init_logging("warn").is_ok());
    }

    #[test]
    fn the_log_output_never_enables_the_trace_spans() {
        let filter = super::log_filter("trace").unwrap().to_string();
        assert!(filter.contains("duet_trace=off"), "{filter}");
    }
}
