//! Logs and traces for tally's binaries.
//!
//! Logs go to stderr (pretty or JSON), filtered by an `EnvFilter`. Traces
//! are off unless an OTLP endpoint is given (`--otlp-endpoint`, or the
//! standard `OTEL_EXPORTER_OTLP_ENDPOINT`): then spans are exported over
//! OTLP/gRPC in batches, and the W3C trace context (`traceparent`) is the
//! global propagator, so a worker's calls carry their span to the server
//! (`tally-client` injects it, the server's RPC layer extracts it) and one
//! provider job is one trace from its claim to its FinishJob.
//!
//! The spans tally makes (each RPC, each group of store statements, each
//! job in the worker) have the target [`TARGET`] (`tally::trace`) at DEBUG
//! level: the log filter does not enable them, so without a trace exporter
//! they cost nothing on the hot paths. With one, [`trace_filter`] adds
//! `tally::trace=debug` to the filter. One filter for the whole subscriber
//! (no per-layer filters): exported spans carry the INFO-and-above log lines
//! made inside them as span events.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::field::MakeExt as _;
use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{Layer, Registry};

/// The target of the spans tally exports (`#[instrument]` attributes spell
/// it out: they take a literal).
pub const TARGET: &str = "tally::trace";

/// How a binary logs and traces.
pub struct Logs {
    /// JSON lines instead of pretty text.
    pub json: bool,
    pub filter: EnvFilter,
    /// OTLP/gRPC collector (for example `http://otel-collector:4317`);
    /// `None`: no traces.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported spans (`OTEL_SERVICE_NAME` wins).
    pub service: &'static str,
}

/// Keeps the trace exporter; [`Tracing::shutdown`] sends what is buffered.
#[must_use = "dropping it without shutdown loses the last spans"]
pub struct Tracing(Option<SdkTracerProvider>);

impl Tracing {
    /// Flushes and stops the exporter (a no-op without one). Blocking work
    /// runs off the async threads.
    pub async fn shutdown(self) {
        if let Some(provider) = self.0 {
            let _ = tokio::task::spawn_blocking(move || {
                if let Err(e) = provider.shutdown() {
                    eprintln!("trace exporter shutdown: {e}");
                }
            })
            .await;
        }
    }
}

/// `filter` with tally's spans enabled (`tally::trace=debug`).
pub fn trace_filter(filter: EnvFilter) -> EnvFilter {
    filter.add_directive(
        "tally::trace=debug"
            .parse()
            .expect("a constant directive parses"),
    )
}

/// The layer that turns spans into OpenTelemetry spans of `provider`; also
/// makes W3C trace context the global propagator. For [`init`] (under
/// [`trace_filter`]), and for tests with an in-memory exporter.
pub fn otel_layer<S>(provider: &SdkTracerProvider, service: &'static str) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(service))
        .with_threads(false)
}

/// Longest field value written in a pretty log line, in characters.
const MAX_FIELD_CHARS: usize = 4096;

/// How pretty log lines write their fields: caller-supplied text (a worker
/// name, a pause message, a model version, a provider's error) has its
/// control and bidirectional characters written out and its length
/// bounded ([`tally_core::text::escape`]), so no value can forge a log
/// line or drive the terminal. (JSON lines are escaped by JSON itself.)
pub fn escaping_fields() -> impl for<'w> FormatFields<'w> + Send + Sync + 'static {
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let text = format!("{value:?}");
        let text = tally_core::text::escape(&text, MAX_FIELD_CHARS);
        if field.name() == "message" {
            write!(w, "{text}")
        } else {
            write!(w, "{}={text}", field.name())
        }
    })
    .delimited(" ")
}

/// Installs the global subscriber: logs, and traces when an endpoint is
/// set. Call it inside a Tokio runtime (the gRPC exporter needs one).
pub fn init(logs: Logs) -> Result<Tracing, String> {
    // Colours only for a person at a terminal: a log redirected to a file
    // or collected by a platform stays plain text (NO_COLOR also turns
    // them off).
    let colour = std::io::IsTerminal::is_terminal(&std::io::stdout())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let fmt = tracing_subscriber::fmt::layer().with_ansi(colour);
    let fmt = if logs.json {
        fmt.json().boxed()
    } else {
        fmt.fmt_fields(escaping_fields()).boxed()
    };
    let Some(endpoint) = logs.otlp_endpoint.filter(|e| !e.trim().is_empty()) else {
        Registry::default()
            .with(logs.filter)
            .with(fmt)
            .try_init()
            .map_err(|e| e.to_string())?;
        return Ok(Tracing(None));
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.clone())
        .build()
        .map_err(|e| format!("--otlp-endpoint {endpoint}: {e}"))?;
    let service = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| logs.service.to_string());
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(service).build())
        .build();
    Registry::default()
        .with(trace_filter(logs.filter))
        .with(fmt)
        .with(otel_layer(&provider, logs.service))
        .try_init()
        .map_err(|e| e.to_string())?;
    tracing::info!(%endpoint, "exporting traces over OTLP/gRPC");
    Ok(Tracing(Some(provider)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariant: a field or message holding a newline or a terminal
    /// escape is written on one line with the character spelled out.
    #[test]
    fn pretty_lines_escape_caller_text() {
        use std::sync::{Arc, Mutex};
        let out = Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || Sink(sink.clone()))
            .with_ansi(false)
            .fmt_fields(escaping_fields())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let version = "v2\nINFO forged\x1b[2J";
            tracing::warn!(version = %version, worker = "w\r1", "drift {}", "x\ny");
        });
        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains('\x1b'), "{text}");
        assert!(
            text.contains("version=v2\\nINFO forged\\u{1b}[2J"),
            "{text}"
        );
        assert!(text.contains("drift x\\ny"), "{text}");
    }

    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Without an exporter tally's spans are off at the default level;
    /// with one they are on, and no log line is widened.
    #[test]
    fn the_trace_filter_enables_tallys_spans_only() {
        let on = |filter: EnvFilter| {
            let subscriber = Registry::default().with(filter);
            tracing::subscriber::with_default(subscriber, || {
                (
                    !tracing::debug_span!(target: "tally::trace", "probe").is_disabled(),
                    tracing::enabled!(target: "tally_store::claims", tracing::Level::DEBUG),
                    tracing::enabled!(target: "h2::proto", tracing::Level::DEBUG),
                )
            })
        };
        assert_eq!(on(EnvFilter::new("info")), (false, false, false));
        assert_eq!(
            on(trace_filter(EnvFilter::new("info"))),
            (true, false, false)
        );
    }
}
