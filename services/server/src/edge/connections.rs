//! The gRPC port's connections: how many may be open, and the ones that
//! hold the server without using it are cut off.
//!
//! - **A cap** (`--max-connections`): a connection accepted over it is
//!   closed at once, logged and counted (`TOO_MANY_CONNECTIONS`).
//! - **Silent connections.** A connection that has not finished its TLS
//!   handshake and made its first call within `--connection-start-timeout`
//!   is cut (`SILENT_CONNECTION`): a client that connects and says nothing
//!   holds no slot for long. (tonic does TLS handshakes in tasks of their
//!   own, without a deadline; the cut ends them too, because it is made
//!   below TLS.) After that, HTTP/2 keepalive pings find dead peers and
//!   `--max-connection-age` recycles connections (both tonic's).
//! - **Slow readers**: a client that stops reading its responses is
//!   disconnected after `--write-timeout`, freeing every slot its calls
//!   held.
//!
//! HTTP/2 flow control stops the server from sending once the client's
//! receive window is full, and hyper then stops asking the response body
//! for more: nothing inside the call notices that it hangs. So the limits
//! layer marks each response message it hands to hyper ([`Tracker::mark`])
//! and clears the mark when hyper asks for the next frame (which it does
//! only once the message went out). A reaper task ([`run`]) finds marks
//! older than the timeout, and connections silent past their start
//! deadline, and cuts them: every accepted connection is wrapped in
//! [`Watched`], whose reads and writes fail once it is cut, so hyper
//! closes it and drops its calls (their slots are freed as the response
//! bodies drop). The cut is logged and counted (reason SLOW_READER); the
//! client sees its connection reset (UNAVAILABLE), which its retry policy
//! already handles.
//!
//! The whole connection goes, not just the stalled stream: the stream
//! cannot be reached from outside hyper, and a client that leaves one
//! stream unread soon exhausts the connection's shared window as well.

use crate::metrics::{Metrics, ReasonLabels};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// The marks, the connections they can cut, and the connection cap.
pub struct Tracker {
    timeout: Duration,
    start_timeout: Duration,
    slots: Arc<Semaphore>,
    max_connections: usize,
    next: AtomicU64,
    marks: Mutex<HashMap<u64, Mark>>,
    connections: Mutex<HashMap<SocketAddr, Connection>>,
    metrics: Metrics,
}

struct Mark {
    since: Instant,
    peer: SocketAddr,
    method: Arc<str>,
}

/// One open connection.
struct Connection {
    cut: CancellationToken,
    accepted: Instant,
    /// Whether a call has arrived on it.
    called: bool,
}

/// The limits a [`Tracker`] enforces.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// How long a response message may wait for its client.
    pub write_timeout: Duration,
    /// How long a connection may go without its first call.
    pub start_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
}

impl Tracker {
    pub fn new(limits: ConnectionLimits, metrics: Metrics) -> Arc<Self> {
        for reason in ["SLOW_READER", "SILENT_CONNECTION", "TOO_MANY_CONNECTIONS"] {
            let _ = metrics.rpc_refused.get_or_create(&ReasonLabels { reason });
        }
        Arc::new(Self {
            timeout: limits.write_timeout,
            start_timeout: limits.start_timeout,
            slots: Arc::new(Semaphore::new(limits.max_connections)),
            max_connections: limits.max_connections,
            next: AtomicU64::new(1),
            marks: Mutex::new(HashMap::new()),
            connections: Mutex::new(HashMap::new()),
            metrics,
        })
    }

    fn count(&self, reason: &'static str) {
        self.metrics
            .rpc_refused
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// A new id for one response's marks.
    pub fn id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// A message of response `id` was handed to hyper now.
    pub fn mark(&self, id: u64, peer: SocketAddr, method: &Arc<str>) {
        self.marks.lock().unwrap_or_else(|e| e.into_inner()).insert(
            id,
            Mark {
                since: Instant::now(),
                peer,
                method: method.clone(),
            },
        );
    }

    /// Hyper asked response `id` for more (or it ended).
    pub fn clear(&self, id: u64) {
        self.marks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    /// A call arrived on the connection of `peer`: it is no longer silent.
    pub fn called(&self, peer: SocketAddr) {
        if let Some(c) = self
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&peer)
        {
            c.called = true;
        }
    }

    /// Wraps an accepted connection so that it can be cut; `None` (the
    /// connection is dropped, so closed) when `--max-connections` are open.
    pub fn watch<IO: Connected<ConnectInfo = TcpConnectInfo>>(
        self: &Arc<Self>,
        io: IO,
    ) -> Option<Watched<IO>> {
        let peer = io.connect_info().remote_addr();
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            tracing::warn!(
                peer = ?peer,
                max = self.max_connections,
                reason = "TOO_MANY_CONNECTIONS",
                "connection closed: too many open (--max-connections)"
            );
            self.count("TOO_MANY_CONNECTIONS");
            return None;
        };
        let cut = CancellationToken::new();
        if let Some(peer) = peer {
            self.connections
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(
                    peer,
                    Connection {
                        cut: cut.clone(),
                        accepted: Instant::now(),
                        called: false,
                    },
                );
        }
        Some(Watched {
            inner: io,
            cut: Box::pin(cut.cancelled_owned()),
            peer,
            tracker: self.clone(),
            _slot: slot,
        })
    }

    /// Cuts the connections of marks older than the timeout, and those
    /// without a call past the start deadline; returns how many it cut.
    fn reap(&self) -> usize {
        let now = Instant::now();
        let stalled: Vec<(u64, SocketAddr, Arc<str>, Duration)> = {
            let marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
            marks
                .iter()
                .filter(|(_, m)| now.duration_since(m.since) >= self.timeout)
                .map(|(id, m)| (*id, m.peer, m.method.clone(), now.duration_since(m.since)))
                .collect()
        };
        let mut cut = 0;
        for (id, peer, method, waited) in stalled {
            self.clear(id);
            let token = self
                .connections
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&peer)
                .map(|c| c.cut.clone());
            if let Some(token) = token {
                tracing::warn!(
                    method = %method,
                    %peer,
                    waited = ?waited,
                    reason = "SLOW_READER",
                    "client stopped reading its response; closing its connection (--write-timeout)"
                );
                self.count("SLOW_READER");
                token.cancel();
                cut += 1;
            }
        }
        let silent: Vec<(SocketAddr, CancellationToken)> = self
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, c)| {
                !c.called
                    && !c.cut.is_cancelled()
                    && now.duration_since(c.accepted) >= self.start_timeout
            })
            .map(|(peer, c)| (*peer, c.cut.clone()))
            .collect();
        for (peer, token) in silent {
            tracing::warn!(
                %peer,
                timeout = ?self.start_timeout,
                reason = "SILENT_CONNECTION",
                "connection made no call in time; closing it (--connection-start-timeout)"
            );
            self.count("SILENT_CONNECTION");
            token.cancel();
            cut += 1;
        }
        cut
    }
}

/// Checks for stalled responses until `stop`, a few times per timeout.
pub async fn run(tracker: Arc<Tracker>, stop: CancellationToken) {
    let every = (tracker.timeout.min(tracker.start_timeout) / 4)
        .clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        tracker.reap();
    }
}

/// An accepted connection that fails its reads and writes once cut.
pub struct Watched<IO> {
    inner: IO,
    cut: Pin<Box<WaitForCancellationFutureOwned>>,
    peer: Option<SocketAddr>,
    tracker: Arc<Tracker>,
    _slot: OwnedSemaphorePermit,
}

impl<IO> Drop for Watched<IO> {
    fn drop(&mut self) {
        if let Some(peer) = self.peer {
            self.tracker
                .connections
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&peer);
        }
    }
}

impl<IO> Watched<IO> {
    fn check(&mut self, cx: &mut Context<'_>) -> std::io::Result<()> {
        if self.cut.as_mut().poll(cx).is_ready() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the connection was cut (--write-timeout or --connection-start-timeout)",
            ));
        }
        Ok(())
    }
}

impl<IO: Connected<ConnectInfo = TcpConnectInfo>> Connected for Watched<IO> {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.inner.connect_info()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(start: Duration) -> Arc<Tracker> {
        Tracker::new(
            ConnectionLimits {
                write_timeout: Duration::from_secs(5),
                start_timeout: start,
                max_connections: 2,
            },
            Metrics::new(),
        )
    }

    fn connection(t: &Tracker, peer: SocketAddr, called: bool) -> CancellationToken {
        let token = CancellationToken::new();
        t.connections.lock().unwrap().insert(
            peer,
            Connection {
                cut: token.clone(),
                accepted: Instant::now(),
                called,
            },
        );
        token
    }

    /// A mark older than the timeout cuts its connection; a mark cleared
    /// in time, or younger, does not.
    #[tokio::test(start_paused = true)]
    async fn stale_marks_cut_their_connection() {
        let t = tracker(Duration::from_secs(3600));
        let peer: SocketAddr = "10.0.0.1:1000".parse().unwrap();
        let token = connection(&t, peer, true);
        let method: Arc<str> = Arc::from("/m");
        let (a, b) = (t.id(), t.id());
        t.mark(a, peer, &method);
        t.mark(b, peer, &method);
        t.clear(a);
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(t.reap(), 0, "younger than the timeout");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(t.reap(), 1);
        assert!(token.is_cancelled());
        assert_eq!(t.reap(), 0, "a mark is reaped once");
    }

    /// Invariant: a connection that made no call by the start deadline is
    /// cut (once); one that called is left alone.
    #[tokio::test(start_paused = true)]
    async fn silent_connections_are_cut_at_the_start_deadline() {
        let t = tracker(Duration::from_secs(10));
        let silent: SocketAddr = "10.0.0.1:1000".parse().unwrap();
        let talking: SocketAddr = "10.0.0.1:1001".parse().unwrap();
        let s = connection(&t, silent, false);
        let c = connection(&t, talking, false);
        t.called(talking);
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(t.reap(), 0);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(t.reap(), 1);
        assert!(s.is_cancelled() && !c.is_cancelled());
        assert_eq!(t.reap(), 0, "cut once");
    }
}
