//! The request-metrics layer: every gRPC call counted by service, method and
//! status code, and timed, without code in any handler; it also opens each
//! counted call's trace span ([`crate::edge::rpc_trace`]).
//!
//! - `tally_grpc_requests_total{service,method,code}` (counter).
//! - `tally_grpc_request_duration_seconds{service,method}` (histogram,
//!   [`BUCKETS`]).
//!
//! Unary calls are recorded when they end: the code is the `grpc-status` of
//! the response headers (tonic answers errors "trailers-only", in headers)
//! or else of the trailers; a call whose body ends without one is `OK`, and
//! one whose body is dropped before it ends (the client went away) is
//! `CANCELLED`. The duration runs from the request to the end of the body.
//!
//! Streams (watches, health Watch, reflection) are recorded when they start:
//! the code is the headers' `grpc-status` if the call was refused at once,
//! otherwise `OK`, and the duration is the time to the response headers (a
//! stream's whole life would swamp the buckets). How a stream later ends is
//! not counted here.
//!
//! The layer is outermost, so calls refused by the auth and limits layers
//! are counted with their codes too. Paths that are not a known RPC are
//! counted as `service="unknown",method="unknown"`, so a client cannot
//! create series at will. Health checks and reflection are not counted at
//! all: probes every few seconds would dilute the error ratio the alerts
//! watch.

use crate::edge::auth::methods::{Kind, METHODS, Route};
use crate::edge::middleware::{Inner, Middleware, ResponseFuture};
use crate::metrics::{MethodLabels, Metrics, RpcLabels};
use bytes::Bytes;
use http_body::Frame;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Instant;
use tonic::Status;
use tonic::body::Body;

/// Methods outside [`METHODS`] that are served but not counted (probes and
/// tooling).
const UNCOUNTED: &[&str] = &[
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// Whether a call to `path` is counted (health and reflection are not).
pub fn is_counted(path: &str) -> bool {
    !UNCOUNTED.contains(&path)
}

/// The `(service, method)` labels of a request path such as
/// `/tally.v1.LedgerService/ClaimRows`; `("unknown", "unknown")` for a path
/// that is not a method this server serves. The labels are the method
/// table's own strings: nothing is allocated per call.
pub fn method_labels(path: &str) -> (&'static str, &'static str) {
    METHODS
        .iter()
        .map(|m| m.path)
        .chain(UNCOUNTED.iter().copied())
        .find(|p| *p == path)
        .and_then(|p| p.strip_prefix('/')?.split_once('/'))
        .unwrap_or(("unknown", "unknown"))
}

/// The canonical name (`OK`, `NOT_FOUND`, …) of the `grpc-status` in
/// `headers` (response headers or trailers), if there is one. A value that
/// is not a known code is `UNKNOWN`, as gRPC clients read it.
pub fn code_of(headers: &http::HeaderMap) -> Option<&'static str> {
    let value = headers.get("grpc-status")?;
    let n: i32 = value
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2);
    Some(code_name(n))
}

fn code_name(n: i32) -> &'static str {
    match u32::try_from(n) {
        Ok(0) => "OK",
        Ok(code) => tally_core::classify::grpc_status_name(code).unwrap_or("UNKNOWN"),
        Err(_) => "UNKNOWN",
    }
}

/// The request-metrics layer's work (a tower layer as
/// [`crate::edge::middleware::Wrap`]).
#[derive(Clone)]
pub struct RpcMetrics {
    metrics: Metrics,
}

impl RpcMetrics {
    pub fn new(metrics: Metrics) -> Self {
        Self { metrics }
    }
}

impl<B: Send + 'static> Middleware<B> for RpcMetrics {
    fn call<S: Inner<B>>(&self, req: http::Request<B>, mut inner: S) -> ResponseFuture<S::Error> {
        let path = req.uri().path();
        if !is_counted(path) {
            return Box::pin(inner.call(req));
        }
        let kind = Route::of(path).kind();
        let (service, method) = method_labels(path);
        let call = Call {
            metrics: self.metrics.clone(),
            service,
            method,
            start: Instant::now(),
        };
        let span = crate::edge::rpc_trace::span(&req, service, method);
        Box::pin(tracing::Instrument::instrument(
            async move {
                let response = match inner.call(req).await {
                    Ok(response) => response,
                    Err(e) => {
                        call.record("UNKNOWN");
                        return Err(e);
                    }
                };
                let at_once = code_of(response.headers());
                match (kind, at_once) {
                    (_, Some(code)) => {
                        call.record(code);
                        Ok(response)
                    }
                    (Kind::Stream, None) => {
                        call.record("OK");
                        Ok(response)
                    }
                    (Kind::Unary, None) => Ok(response.map(|body| {
                        Body::new(Recorded {
                            inner: body,
                            call: Some(call),
                        })
                    })),
                }
            },
            span,
        ))
    }
}

/// One call's labels and start, recorded once.
struct Call {
    metrics: Metrics,
    service: &'static str,
    method: &'static str,
    start: Instant,
}

impl Call {
    fn record(self, code: &'static str) {
        let (service, method) = (self.service, self.method);
        self.metrics
            .grpc_requests
            .get_or_create(&RpcLabels {
                service,
                method,
                code,
            })
            .inc();
        self.metrics
            .grpc_duration
            .get_or_create(&MethodLabels { service, method })
            .observe(self.start.elapsed().as_secs_f64());
    }
}

/// A unary response body that records its call when it ends (or is dropped
/// before ending).
struct Recorded {
    inner: Body,
    call: Option<Call>,
}

impl http_body::Body for Recorded {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        let code = match &frame {
            Some(Ok(f)) => f.trailers_ref().map(|t| code_of(t).unwrap_or("OK")),
            Some(Err(status)) => Some(code_name(i32::from(status.code()))),
            None => Some("OK"),
        };
        if let Some(code) = code
            && let Some(call) = self.call.take()
        {
            call.record(code);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            call.record("CANCELLED");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_labelled_from_the_path() {
        assert_eq!(
            method_labels("/tally.v1.LedgerService/ClaimRows"),
            ("tally.v1.LedgerService", "ClaimRows")
        );
        assert_eq!(
            method_labels("/tally.v1.JobService/WatchJobs"),
            ("tally.v1.JobService", "WatchJobs")
        );
        assert_eq!(
            method_labels("/grpc.health.v1.Health/Check"),
            ("grpc.health.v1.Health", "Check")
        );
        for unknown in [
            "/tally.v1.LedgerService/NoSuchMethod",
            "/evil/1234",
            "/",
            "",
            "/tally.v1.LedgerService/ClaimRows/extra",
        ] {
            assert_eq!(method_labels(unknown), ("unknown", "unknown"), "{unknown}");
        }
    }

    /// Probes and reflection are served but never counted; every other
    /// path is.
    #[test]
    fn health_and_reflection_are_not_counted() {
        assert!(!is_counted("/grpc.health.v1.Health/Check"));
        assert!(!is_counted("/grpc.health.v1.Health/Watch"));
        assert!(!is_counted(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
        ));
        assert!(is_counted("/tally.v1.LedgerService/ClaimRows"));
        assert!(is_counted("/evil/1234"));
    }

    #[test]
    fn codes_are_named_from_grpc_status() {
        let mut h = http::HeaderMap::new();
        assert_eq!(code_of(&h), None);
        for (value, name) in [
            ("0", "OK"),
            ("5", "NOT_FOUND"),
            ("8", "RESOURCE_EXHAUSTED"),
            ("16", "UNAUTHENTICATED"),
            ("2", "UNKNOWN"),
            ("99", "UNKNOWN"),
            ("x", "UNKNOWN"),
        ] {
            h.insert("grpc-status", http::HeaderValue::from_static(value));
            assert_eq!(code_of(&h), Some(name), "{value}");
        }
        // Every tonic code has its canonical name.
        for n in 0..=16 {
            let code = tonic::Code::from_i32(n);
            assert_eq!(code_name(n) == "UNKNOWN", code == tonic::Code::Unknown);
        }
    }

    #[tokio::test]
    async fn unary_bodies_record_their_trailers_once() {
        use http_body_util::BodyExt as _;
        let m = Metrics::new();
        let layer = RpcMetrics::new(m.clone());
        let call = |layer: &RpcMetrics| Call {
            metrics: layer.metrics.clone(),
            service: "s",
            method: "m",
            start: Instant::now(),
        };
        let count = |code| {
            m.grpc_requests
                .get_or_create(&RpcLabels {
                    service: "s",
                    method: "m",
                    code,
                })
                .get()
        };

        // Trailers with a status.
        let mut trailers = http::HeaderMap::new();
        Status::not_found("gone").add_header(&mut trailers).unwrap();
        let inner = http_body_util::StreamBody::new(futures::stream::iter(vec![
            Ok::<_, Status>(Frame::data(Bytes::from_static(b"x"))),
            Ok(Frame::trailers(trailers)),
        ]));
        let body = Recorded {
            inner: Body::new(inner),
            call: Some(call(&layer)),
        };
        body.collect().await.unwrap();
        assert_eq!(count("NOT_FOUND"), 1);

        // No status at all: OK.
        let body = Recorded {
            inner: Body::empty(),
            call: Some(call(&layer)),
        };
        body.collect().await.unwrap();
        assert_eq!(count("OK"), 1);

        // Dropped before its end: CANCELLED.
        drop(Recorded {
            inner: Body::empty(),
            call: Some(call(&layer)),
        });
        assert_eq!(count("CANCELLED"), 1);
        let scrape = tally_telemetry::exposition::parse(&m.render()).unwrap();
        let timed = scrape.sample(
            "tally_grpc_request_duration_seconds_count",
            &[("service", "s"), ("method", "m")],
        );
        assert_eq!(timed, Some(3.0));
    }
}
