//! The limits layer: what one client may take from everyone else.
//!
//! - Unary calls in flight across the server (`max_concurrent_calls`) and
//!   open streams (`max_concurrent_streams`) are separate budgets, so idle
//!   watches cannot starve unary calls. A call over either budget is shed at
//!   once with RESOURCE_EXHAUSTED and a RetryInfo, never queued: queueing
//!   under overload only turns it into timeouts.
//! - Streams of unauthenticated callers (health Watch, open reflection)
//!   take slots of their own (`max_anonymous_streams`), so anyone who can
//!   reach the port cannot take the stream slots of callers with tokens.
//! - A response message the client does not take within `write_timeout`
//!   (it stopped reading) gets its connection cut ([`crate::edge::connections`]).
//! - Calls and streams in flight on one connection
//!   (`max_calls_per_connection`), so one client cannot take the whole
//!   budget; also RESOURCE_EXHAUSTED.
//! - Calls and streams in flight, calls per second and request bytes per
//!   second of one principal, over all its connections
//!   ([`crate::edge::principal`]).
//! - Unary calls end with DEADLINE_EXCEEDED after `request_timeout`; a
//!   stream must have sent its request and been answered its headers
//!   within the same time (a client that sends headers and never its
//!   message does not hold a stream slot for `max_stream_age`).
//! - Server streams end after `max_stream_age`, and at shutdown, with
//!   UNAVAILABLE: the client reconnects and resumes from its last sequence.
//!   Messages the handler already produced are delivered first.
//!
//! A slot is held until the response body has sent its trailers (or is
//! dropped), so for a stream that is the whole life of the stream, and a
//! client that saw a call end can count on its slot being free.
//!
//! Health checks (unary) are exempt: they read memory, and probes must be
//! answered under load. Message sizes are tonic's `max_decoding_message_size`
//! (set per service in [`crate::startup::server`]); rows per call are checked in
//! [`crate::ledger::validate`].

use crate::config::Limits;
use crate::edge::auth::layer::peer_addr;
use crate::edge::auth::methods::{Kind, Route};
use crate::edge::caller::Caller;
use crate::edge::connections::{ConnectionLimits, Tracker};
use crate::edge::middleware::{Inner, Middleware, ResponseFuture, answer};
use crate::edge::principal::{self, Principals};
use crate::edge::status;
use crate::metrics::{Metrics, ReasonLabels};
use bytes::Bytes;
use http_body::Frame;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::body::Body;
use tonic::{Code, Status};

/// How long a shed client is asked to wait before retrying.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// At most this many already-produced messages are flushed when a stream is
/// ended, so a firehose cannot outrun its own end.
const FLUSH: usize = 64;

/// Refuses limits that would make the server unusable.
pub fn check(limits: &Limits) -> Result<(), String> {
    let positive = [
        ("--max-concurrent-calls", limits.max_concurrent_calls),
        ("--max-concurrent-streams", limits.max_concurrent_streams),
        (
            "--max-calls-per-connection",
            limits.max_calls_per_connection,
        ),
        ("--max-message-bytes", limits.max_message_bytes),
        ("--max-rows-per-call", limits.max_rows_per_call),
        ("--max-anonymous-streams", limits.max_anonymous_streams),
    ];
    for (flag, value) in positive {
        if value == 0 {
            return Err(format!("{flag} must be at least 1"));
        }
    }
    if limits.max_claim_rows < 1 {
        return Err("--max-claim-rows must be at least 1".into());
    }
    for (flag, d) in [
        ("--request-timeout", limits.request_timeout),
        ("--max-stream-age", limits.max_stream_age),
        ("--write-timeout", limits.write_timeout),
        (
            "--connection-start-timeout",
            limits.connection_start_timeout,
        ),
        (
            "--http2-keepalive-interval",
            limits.http2_keepalive_interval,
        ),
        ("--http2-keepalive-timeout", limits.http2_keepalive_timeout),
        ("--max-connection-age", limits.max_connection_age),
    ] {
        if d.is_zero() {
            return Err(format!("{flag} must be longer than zero"));
        }
    }
    if limits.max_connections == 0 {
        return Err("--max-connections must be at least 1".into());
    }
    crate::edge::principal::check(limits)
}

/// The limits layer's work (a tower layer as [`crate::edge::middleware::Wrap`]).
#[derive(Clone)]
pub struct Limiter {
    state: Arc<State>,
}

struct State {
    calls: Arc<Semaphore>,
    streams: Arc<Semaphore>,
    anonymous_streams: Arc<Semaphore>,
    stalls: Arc<Tracker>,
    per_connection: Mutex<HashMap<SocketAddr, usize>>,
    limits: Limits,
    principals: Principals,
    end_streams: CancellationToken,
    metrics: Metrics,
}

impl Limiter {
    /// `end_streams`, when cancelled, ends every open stream (shutdown).
    pub fn new(
        limits: &Limits,
        principals: Principals,
        metrics: Metrics,
        end_streams: CancellationToken,
    ) -> Self {
        for reason in [
            "PRINCIPAL_CALL_LIMIT",
            "RATE_LIMITED",
            "TOO_MANY_CALLS",
            "TOO_MANY_STREAMS",
            "TOO_MANY_ANONYMOUS_STREAMS",
            "CONNECTION_LIMIT",
            "REQUEST_TIMEOUT",
        ] {
            let _ = metrics.rpc_refused.get_or_create(&ReasonLabels { reason });
        }
        Self {
            state: Arc::new(State {
                calls: Arc::new(Semaphore::new(limits.max_concurrent_calls)),
                streams: Arc::new(Semaphore::new(limits.max_concurrent_streams)),
                anonymous_streams: Arc::new(Semaphore::new(limits.max_anonymous_streams)),
                stalls: Tracker::new(
                    ConnectionLimits {
                        write_timeout: limits.write_timeout,
                        start_timeout: limits.connection_start_timeout,
                        max_connections: limits.max_connections,
                    },
                    metrics.clone(),
                ),
                per_connection: Mutex::new(HashMap::new()),
                limits: limits.clone(),
                principals,
                end_streams,
                metrics,
            }),
        }
    }
}

impl Limiter {
    /// The slow-reader tracker: wrap accepted connections with it and run
    /// its reaper ([`crate::edge::connections::run`]).
    pub fn stalls(&self) -> Arc<Tracker> {
        self.state.stalls.clone()
    }
}

impl<B: Send + 'static> Middleware<B> for Limiter {
    fn call<S: Inner<B>>(&self, req: http::Request<B>, mut inner: S) -> ResponseFuture<S::Error> {
        let path = req.uri().path().to_string();
        let route = Route::of(&path);
        if let Some(peer) = peer_addr(req.extensions()) {
            self.state.stalls.called(peer);
        }
        if matches!(route, Route::Health(Kind::Unary)) {
            return Box::pin(inner.call(req));
        }
        let kind = route.kind();
        let slot = match (route, kind) {
            (Route::Health(_) | Route::Reflection, Kind::Stream)
                if req.extensions().get::<Caller>().is_none() =>
            {
                Slot::AnonymousStream
            }
            (_, Kind::Stream) => Slot::Stream,
            (_, Kind::Unary) => Slot::Call,
        };
        let peer = peer_addr(req.extensions());
        let principal = match req.extensions().get::<Caller>() {
            Some(caller) => match self.state.principals.admit(&caller.name, &path) {
                Ok(slot) => Some(slot),
                Err(status) => {
                    self.state.count(principal_reason(&status));
                    return answer(status.into_http());
                }
            },
            None => None,
        };
        let held = match self.state.admit(slot, peer) {
            Ok(held) => held.with_principal(principal),
            Err(refusal) => {
                return answer(self.state.refuse(&path, refusal).into_http());
            }
        };
        let state = self.state.clone();
        let watch = peer.map(|peer| Watch::new(&state.stalls, peer, &path));
        match kind {
            Kind::Unary => Box::pin(async move {
                let timeout = state.limits.request_timeout;
                match tokio::time::timeout(timeout, inner.call(req)).await {
                    Ok(Ok(response)) => Ok(response
                        .map(|body| Body::new(Guarded::new(body, held, None).watched(watch)))),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Ok(state.refuse(&path, Refusal::Timeout).into_http()),
                }
            }),
            Kind::Stream => Box::pin(async move {
                let ending = Ending {
                    age: Box::pin(tokio::time::sleep_until(
                        Instant::now() + state.limits.max_stream_age,
                    )),
                    shutdown: Box::pin(state.end_streams.clone().cancelled_owned()),
                    max_age: state.limits.max_stream_age,
                    path: path.clone(),
                };
                // tonic reads a stream's request before it answers the
                // headers: both within the request timeout.
                let timeout = state.limits.request_timeout;
                let response = match tokio::time::timeout(timeout, inner.call(req)).await {
                    Ok(response) => response?,
                    Err(_) => return Ok(state.refuse(&path, Refusal::StreamStart).into_http()),
                };
                Ok(response
                    .map(|body| Body::new(Guarded::new(body, held, Some(ending)).watched(watch))))
            }),
        }
    }
}

/// Which budget a call takes its slot from.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Call,
    Stream,
    AnonymousStream,
}

impl From<Kind> for Slot {
    fn from(kind: Kind) -> Slot {
        match kind {
            Kind::Unary => Slot::Call,
            Kind::Stream => Slot::Stream,
        }
    }
}

/// Why a call was shed or cut short.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    Calls,
    Streams,
    AnonymousStreams,
    Connection,
    Timeout,
    /// A stream's request did not arrive (and the stream start) in time.
    StreamStart,
}

/// What a call holds while it runs; dropping it frees the slots.
struct Held {
    _permit: OwnedSemaphorePermit,
    _connection: Option<ConnectionSlot>,
    _principal: Option<principal::Slot>,
}

impl Held {
    fn with_principal(mut self, slot: Option<principal::Slot>) -> Self {
        self._principal = slot;
        self
    }
}

/// The reason of a per-principal refusal, for the refusal counter.
fn principal_reason(status: &Status) -> &'static str {
    use tonic_types::StatusExt as _;
    match status
        .get_error_details()
        .error_info()
        .map(|i| i.reason.as_str())
    {
        Some("PRINCIPAL_CALL_LIMIT") => "PRINCIPAL_CALL_LIMIT",
        _ => "RATE_LIMITED",
    }
}

struct ConnectionSlot {
    state: Arc<State>,
    addr: SocketAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut map = self
            .state
            .per_connection
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get_mut(&self.addr) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.addr);
            }
        }
    }
}

impl State {
    fn admit(
        self: &Arc<Self>,
        slot: impl Into<Slot>,
        peer: Option<SocketAddr>,
    ) -> Result<Held, Refusal> {
        let connection = match peer {
            Some(addr) => {
                let mut map = self
                    .per_connection
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                let n = map.entry(addr).or_insert(0);
                if *n >= self.limits.max_calls_per_connection {
                    return Err(Refusal::Connection);
                }
                *n += 1;
                Some(ConnectionSlot {
                    state: self.clone(),
                    addr,
                })
            }
            None => None,
        };
        let (budget, refusal) = match slot.into() {
            Slot::Call => (&self.calls, Refusal::Calls),
            Slot::Stream => (&self.streams, Refusal::Streams),
            Slot::AnonymousStream => (&self.anonymous_streams, Refusal::AnonymousStreams),
        };
        let permit = budget.clone().try_acquire_owned().map_err(|_| refusal)?;
        Ok(Held {
            _permit: permit,
            _connection: connection,
            _principal: None,
        })
    }

    fn count(&self, reason: &'static str) {
        self.metrics
            .rpc_refused
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    fn refuse(&self, method: &str, refusal: Refusal) -> Status {
        let l = &self.limits;
        let (code, reason, limit, value, message, retry) = match refusal {
            Refusal::Calls => (
                Code::ResourceExhausted,
                "TOO_MANY_CALLS",
                "max_concurrent_calls",
                l.max_concurrent_calls.to_string(),
                format!(
                    "server overloaded: {} calls in flight (max_concurrent_calls); retry with backoff",
                    l.max_concurrent_calls
                ),
                Some(RETRY_AFTER),
            ),
            Refusal::Streams => (
                Code::ResourceExhausted,
                "TOO_MANY_STREAMS",
                "max_concurrent_streams",
                l.max_concurrent_streams.to_string(),
                format!(
                    "server overloaded: {} streams open (max_concurrent_streams); retry with backoff",
                    l.max_concurrent_streams
                ),
                Some(RETRY_AFTER),
            ),
            Refusal::AnonymousStreams => (
                Code::ResourceExhausted,
                "TOO_MANY_ANONYMOUS_STREAMS",
                "max_anonymous_streams",
                l.max_anonymous_streams.to_string(),
                format!(
                    "{} unauthenticated streams open (max_anonymous_streams); retry with backoff, \
                     or call with a token",
                    l.max_anonymous_streams
                ),
                Some(RETRY_AFTER),
            ),
            Refusal::Connection => (
                Code::ResourceExhausted,
                "CONNECTION_LIMIT",
                "max_calls_per_connection",
                l.max_calls_per_connection.to_string(),
                format!(
                    "{} calls already in flight on this connection (max_calls_per_connection); \
                     wait for one to finish",
                    l.max_calls_per_connection
                ),
                Some(RETRY_AFTER),
            ),
            Refusal::Timeout => (
                Code::DeadlineExceeded,
                "REQUEST_TIMEOUT",
                "request_timeout",
                humantime::format_duration(l.request_timeout).to_string(),
                format!(
                    "the call ran longer than the server's limit of {} (request_timeout)",
                    humantime::format_duration(l.request_timeout)
                ),
                None,
            ),
            Refusal::StreamStart => (
                Code::DeadlineExceeded,
                "REQUEST_TIMEOUT",
                "request_timeout",
                humantime::format_duration(l.request_timeout).to_string(),
                format!(
                    "the stream's request did not arrive within the server's limit of {} \
                     (request_timeout)",
                    humantime::format_duration(l.request_timeout)
                ),
                None,
            ),
        };
        tracing::warn!(method, reason, "call refused");
        self.count(reason);
        let meta = HashMap::from([
            ("method".to_string(), method.to_string()),
            ("limit".to_string(), limit.to_string()),
            ("value".to_string(), value),
        ]);
        status::refused(code, reason, message, meta, retry)
    }
}

/// When a stream is ended by the server.
struct Ending {
    age: Pin<Box<Sleep>>,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    max_age: Duration,
    path: String,
}

impl Ending {
    fn poll(&mut self, cx: &mut Context<'_>) -> Option<Status> {
        let (reason, message) = if self.age.as_mut().poll(cx).is_ready() {
            (
                "STREAM_MAX_AGE",
                format!(
                    "the stream reached the server's maximum age of {} (max_stream_age); \
                     reconnect and resume from the last sequence",
                    humantime::format_duration(self.max_age)
                ),
            )
        } else if self.shutdown.as_mut().poll(cx).is_ready() {
            (
                "SHUTTING_DOWN",
                "the server is shutting down; reconnect and resume from the last sequence"
                    .to_string(),
            )
        } else {
            return None;
        };
        tracing::info!(method = %self.path, reason, "ending stream");
        let meta = HashMap::from([("method".to_string(), self.path.clone())]);
        Some(status::refused(
            Code::Unavailable,
            reason,
            message,
            meta,
            None,
        ))
    }
}

enum Phase {
    Open,
    /// Ending with this status after flushing what is ready.
    Ending(Option<Status>, usize),
    Done,
}

/// A response body that holds its call's slots until it ends and, for
/// streams, ends itself at the maximum age or at shutdown.
struct Guarded {
    inner: Body,
    held: Option<Held>,
    ending: Option<Ending>,
    phase: Phase,
    watch: Option<Watch>,
}

/// The slow-reader marks of one response (see [`crate::edge::connections`]).
struct Watch {
    tracker: Arc<Tracker>,
    id: u64,
    peer: SocketAddr,
    method: Arc<str>,
    marked: bool,
}

impl Watch {
    fn new(tracker: &Arc<Tracker>, peer: SocketAddr, method: &str) -> Self {
        Self {
            tracker: tracker.clone(),
            id: tracker.id(),
            peer,
            method: Arc::from(method),
            marked: false,
        }
    }

    fn mark(&mut self) {
        self.tracker.mark(self.id, self.peer, &self.method);
        self.marked = true;
    }

    fn clear(&mut self) {
        if self.marked {
            self.tracker.clear(self.id);
            self.marked = false;
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.clear();
    }
}

impl Guarded {
    fn new(inner: Body, held: Held, ending: Option<Ending>) -> Self {
        Self {
            inner,
            held: Some(held),
            ending,
            phase: Phase::Open,
            watch: None,
        }
    }

    fn watched(mut self, watch: Option<Watch>) -> Self {
        self.watch = watch;
        self
    }

    fn finish(&mut self) {
        self.phase = Phase::Done;
        self.held = None;
        self.inner = Body::empty();
        self.watch = None;
    }

    /// Passes a frame of the inner body on, finishing at its end.
    fn pass(
        &mut self,
        frame: Option<Result<Frame<Bytes>, Status>>,
    ) -> Option<Result<Frame<Bytes>, Status>> {
        match &frame {
            Some(Ok(f)) if f.is_data() => {
                // Cleared when hyper asks for the next frame, which it does
                // once this one is sent.
                if let Some(w) = &mut self.watch {
                    w.mark();
                }
            }
            _ => self.finish(),
        }
        frame
    }
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if let Some(w) = &mut this.watch {
            w.clear();
        }
        loop {
            match &mut this.phase {
                Phase::Done => return Poll::Ready(None),
                Phase::Open => {
                    if let Some(status) = this.ending.as_mut().and_then(|e| e.poll(cx)) {
                        this.phase = Phase::Ending(Some(status), 0);
                        continue;
                    }
                    let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
                    return Poll::Ready(this.pass(frame));
                }
                Phase::Ending(status, flushed) => {
                    if *flushed < FLUSH
                        && let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx)
                    {
                        *flushed += 1;
                        return Poll::Ready(this.pass(frame));
                    }
                    let status = status.take().expect("ending status is taken once");
                    this.finish();
                    let mut trailers = http::HeaderMap::new();
                    if let Err(e) = status.add_header(&mut trailers) {
                        return Poll::Ready(Some(Err(e)));
                    }
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self.phase {
            Phase::Done => true,
            Phase::Open => self.inner.is_end_stream(),
            Phase::Ending(..) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use http_body_util::BodyExt as _;
    use tonic_types::StatusExt as _;

    fn limits() -> Limits {
        Limits {
            max_concurrent_calls: 2,
            max_concurrent_streams: 1,
            max_calls_per_connection: 2,
            max_stream_age: Duration::from_secs(60),
            ..Limits::default()
        }
    }

    fn state(l: &Limits) -> Arc<State> {
        Limiter::new(
            l,
            Principals::new(l),
            Metrics::new(),
            CancellationToken::new(),
        )
        .state
    }

    fn reason(s: &Status) -> String {
        s.get_error_details()
            .error_info()
            .map(|i| i.reason.clone())
            .unwrap_or_default()
    }

    #[test]
    fn budgets_are_separate_and_freed_on_drop() {
        let s = state(&limits());
        let a = s.admit(Kind::Unary, None).unwrap();
        let _b = s.admit(Kind::Unary, None).unwrap();
        assert!(matches!(
            s.admit(Kind::Unary, None).err(),
            Some(Refusal::Calls)
        ));
        let stream = s.admit(Kind::Stream, None).unwrap();
        assert!(matches!(
            s.admit(Kind::Stream, None).err(),
            Some(Refusal::Streams)
        ));
        drop(a);
        drop(stream);
        s.admit(Kind::Unary, None).unwrap();
        s.admit(Kind::Stream, None).unwrap();
    }

    #[test]
    fn connections_have_their_own_budget() {
        let mut l = limits();
        l.max_concurrent_calls = 10;
        let s = state(&l);
        let one: SocketAddr = "10.0.0.1:1000".parse().unwrap();
        let two: SocketAddr = "10.0.0.1:1001".parse().unwrap();
        let a = s.admit(Kind::Unary, Some(one)).unwrap();
        let _b = s.admit(Kind::Unary, Some(one)).unwrap();
        assert!(matches!(
            s.admit(Kind::Unary, Some(one)).err(),
            Some(Refusal::Connection)
        ));
        let _c = s.admit(Kind::Unary, Some(two)).unwrap();
        drop(a);
        let _d = s.admit(Kind::Unary, Some(one)).unwrap();
        drop(_d);
        drop(_b);
        drop(_c);
        assert!(s.per_connection.lock().unwrap().is_empty(), "no leak");
    }

    #[test]
    fn refusals_name_their_limit() {
        let s = state(&limits());
        let st = s.refuse("/m", Refusal::Calls);
        assert_eq!(st.code(), Code::ResourceExhausted);
        assert!(st.message().contains("max_concurrent_calls"));
        assert_eq!(reason(&st), "TOO_MANY_CALLS");
        assert!(st.get_error_details().retry_info().is_some());
        let st = s.refuse("/m", Refusal::Timeout);
        assert_eq!(st.code(), Code::DeadlineExceeded);
        assert!(st.message().contains("request_timeout"));
    }

    #[test]
    fn checks_refuse_zero_limits() {
        assert!(check(&Limits::default()).is_ok());
        let l = Limits {
            max_concurrent_streams: 0,
            ..Limits::default()
        };
        assert!(check(&l).unwrap_err().contains("--max-concurrent-streams"));
        let l = Limits {
            request_timeout: Duration::ZERO,
            ..Limits::default()
        };
        assert!(check(&l).is_err());
    }

    /// A body fed by a channel, standing in for a handler's stream.
    fn channel_body() -> (
        tokio::sync::mpsc::Sender<Result<Frame<Bytes>, Status>>,
        Body,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        (tx, Body::new(http_body_util::StreamBody::new(stream)))
    }

    fn ending(s: &Arc<State>, age: Duration) -> Ending {
        Ending {
            age: Box::pin(tokio::time::sleep(age)),
            shutdown: Box::pin(s.end_streams.clone().cancelled_owned()),
            max_age: age,
            path: "/grpc.health.v1.Health/Watch".into(),
        }
    }

    fn status_of(trailers: &http::HeaderMap) -> Status {
        Status::from_header_map(trailers).expect("grpc-status in trailers")
    }

    #[tokio::test(start_paused = true)]
    async fn streams_end_at_their_maximum_age_after_flushing() {
        let s = state(&limits());
        let (tx, body) = channel_body();
        let held = s.admit(Kind::Stream, None).unwrap();
        let mut guarded = Guarded::new(body, held, Some(ending(&s, Duration::from_secs(5))));
        tx.send(Ok(Frame::data(Bytes::from_static(b"one"))))
            .await
            .unwrap();
        let first = guarded.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "one");
        // The clock is paused: this waits exactly until the age passes.
        tokio::time::sleep(Duration::from_secs(5)).await;
        tx.send(Ok(Frame::data(Bytes::from_static(b"two"))))
            .await
            .unwrap();
        let second = guarded.frame().await.unwrap().unwrap();
        assert_eq!(
            second.into_data().unwrap(),
            "two",
            "ready messages flush first"
        );
        assert!(
            s.streams.available_permits() == 0,
            "still held while flushing"
        );
        let end = guarded.frame().await.unwrap().unwrap();
        let status = status_of(end.trailers_ref().unwrap());
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(reason(&status), "STREAM_MAX_AGE");
        assert!(status.message().contains("max_stream_age"));
        assert!(guarded.frame().await.is_none());
        assert!(guarded.is_end_stream());
        assert_eq!(s.streams.available_permits(), 1, "slot freed at the end");
        assert!(tx.is_closed(), "the handler's stream was dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_streams() {
        let s = state(&limits());
        let (_tx, body) = channel_body();
        let held = s.admit(Kind::Stream, None).unwrap();
        let mut guarded = Guarded::new(body, held, Some(ending(&s, Duration::from_secs(600))));
        s.end_streams.cancel();
        let end = guarded.frame().await.unwrap().unwrap();
        let status = status_of(end.trailers_ref().unwrap());
        assert_eq!(reason(&status), "SHUTTING_DOWN");
        assert_eq!(s.streams.available_permits(), 1);
    }

    #[tokio::test]
    async fn bodies_that_end_on_their_own_pass_through_and_free_slots() {
        let s = state(&limits());
        let (tx, body) = channel_body();
        let held = s.admit(Kind::Unary, None).unwrap();
        let mut guarded = Guarded::new(body, held, None);
        tx.send(Ok(Frame::data(Bytes::from_static(b"reply"))))
            .await
            .unwrap();
        let mut trailers = http::HeaderMap::new();
        Status::ok("").add_header(&mut trailers).unwrap();
        tx.send(Ok(Frame::trailers(trailers))).await.unwrap();
        assert!(guarded.frame().await.unwrap().unwrap().is_data());
        assert_eq!(s.calls.available_permits(), 1);
        let t = guarded.frame().await.unwrap().unwrap();
        assert!(t.is_trailers());
        assert_eq!(
            s.calls.available_permits(),
            2,
            "freed before the client sees the end"
        );
        assert!(guarded.frame().await.is_none());
    }
}
