//! The span of each gRPC call, a child of the caller's span when the
//! request carries W3C trace context (`traceparent`, as tally-client sends
//! it): so a worker's job and the server's handling of its calls are one
//! trace. Opened by the request-metrics layer ([`crate::edge::rpc_metrics`]),
//! which already sees every counted call; its target is
//! `tally::trace`, enabled only when traces are exported (`--otlp-endpoint`).

use opentelemetry::propagation::Extractor;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Reads trace context from HTTP/2 request headers.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// The span of one call to `service`/`method`, parented by the request's
/// trace context if it has one.
pub fn span<B>(
    req: &http::Request<B>,
    service: &'static str,
    method: &'static str,
) -> tracing::Span {
    // A root in this process (not a child of whatever h2 or hyper span is
    // current): its only parent is the caller's, from the headers.
    let span = tracing::debug_span!(
        target: tally_telemetry::traces::TARGET,
        parent: None,
        "rpc",
        otel.name = %format_args!("{service}/{method}"),
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = service,
        rpc.method = method,
    );
    if span.is_disabled() {
        return span;
    }
    let parent =
        opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(req.headers())));
    let _ = span.set_parent(parent);
    span
}
