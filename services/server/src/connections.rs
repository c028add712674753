//! Slow readers: a client that stops reading its responses is disconnected
//! after `--write-timeout`, freeing every slot its calls held.
//!
//! HTTP/2 flow control stops the server from sending once the client's
//! receive window is full, and hyper then stops asking the response body
//! for more: nothing inside the call notices that it hangs. So the limits
//! layer marks each response message it hands to hyper ([`Tracker::mark`])
//! and clears the mark when hyper asks for the next frame (which it does
//! only once the message went out). A reaper task ([`run`]) finds marks
//! older than the timeout and cuts the connection they belong to: every
//! accepted connection is wrapped in [`Watched`], whose reads and writes
//! fail once it is cut, so hyper closes it and drops its calls (their
//! slots are freed as the response bodies drop). The cut is logged and
//! counted (reason SLOW_READER); the client sees its connection reset
//! (UNAVAILABLE), which its retry policy already handles.
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
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// The marks and the connections they can cut.
pub struct Tracker {
    timeout: Duration,
    next: AtomicU64,
    marks: Mutex<HashMap<u64, Mark>>,
    connections: Mutex<HashMap<SocketAddr, CancellationToken>>,
    metrics: Metrics,
}

struct Mark {
    since: Instant,
    peer: SocketAddr,
    method: Arc<str>,
}

impl Tracker {
    pub fn new(timeout: Duration, metrics: Metrics) -> Arc<Self> {
        let _ = metrics.rpc_refused.get_or_create(&ReasonLabels {
            reason: "SLOW_READER",
        });
        Arc::new(Self {
            timeout,
            next: AtomicU64::new(1),
            marks: Mutex::new(HashMap::new()),
            connections: Mutex::new(HashMap::new()),
            metrics,
        })
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

    /// Wraps an accepted connection so that it can be cut.
    pub fn watch<IO: Connected<ConnectInfo = TcpConnectInfo>>(
        self: &Arc<Self>,
        io: IO,
    ) -> Watched<IO> {
        let cut = CancellationToken::new();
        let peer = io.connect_info().remote_addr();
        if let Some(peer) = peer {
            self.connections
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(peer, cut.clone());
        }
        Watched {
            inner: io,
            cut: Box::pin(cut.cancelled_owned()),
            peer,
            tracker: self.clone(),
        }
    }

    /// Cuts the connections of marks older than the timeout; returns how
    /// many it cut.
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
                .cloned();
            if let Some(token) = token {
                tracing::warn!(
                    method = %method,
                    %peer,
                    waited = ?waited,
                    reason = "SLOW_READER",
                    "client stopped reading its response; closing its connection (--write-timeout)"
                );
                self.metrics
                    .rpc_refused
                    .get_or_create(&ReasonLabels {
                        reason: "SLOW_READER",
                    })
                    .inc();
                token.cancel();
                cut += 1;
            }
        }
        cut
    }
}

/// Checks for stalled responses until `stop`, a few times per timeout.
pub async fn run(tracker: Arc<Tracker>, stop: CancellationToken) {
    let every = (tracker.timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
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
                "the client did not read its response within --write-timeout",
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

    /// A mark older than the timeout cuts its connection; a mark cleared
    /// in time, or younger, does not.
    #[tokio::test(start_paused = true)]
    async fn stale_marks_cut_their_connection() {
        let t = Tracker::new(Duration::from_secs(5), Metrics::new());
        let peer: SocketAddr = "10.0.0.1:1000".parse().unwrap();
        let token = CancellationToken::new();
        t.connections.lock().unwrap().insert(peer, token.clone());
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
}
