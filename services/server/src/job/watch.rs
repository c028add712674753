//! WatchJobs fan-out: one LISTEN connection per server process, any number
//! of watch streams.
//!
//! The event table is the truth; notifications are only a hint. The
//! [`Hub`] task holds the process's one `LISTEN` connection and turns every
//! notification (and every reconnect, after which notifications may have
//! been lost) into a bump of a `tokio::sync::watch` counter. Each stream
//! has its own task that keeps the last sequence number it delivered and
//! reads `seq > last` pages from the table itself: when the counter moves,
//! when its poll interval passes (the fallback for lost notifications), and
//! until a page comes back short.
//!
//! Memory is bounded per stream: one page plus a small channel. A slow
//! consumer fills the channel and its task waits on `send`, reading nothing
//! more; the wake-up counter coalesces however many notifications arrive
//! meanwhile into one. Commit-ordered sequence numbers (see
//! `tally_store::events`) make `seq > last` miss nothing, so a client that
//! reconnects with its last sequence number gets every event once.
//!
//! Every stream task also watches the server's stop token and the client's
//! going away: on shutdown it returns, which ends the stream cleanly, so
//! graceful shutdown does not wait on open streams.

use super::convert::event_to_proto;
use crate::metrics::Metrics;
use crate::status::from_store;
use std::sync::Arc;
use std::time::Duration;
use tally_core::scope::Scope;
use tally_proto::v1 as pb;
use tally_store::Store;
use tally_store::events::Wake;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Status;

/// Events read per query.
pub const PAGE: i64 = 100;
/// Events buffered per stream between its reader task and the client.
pub const BUFFER: usize = 16;

/// The process's wake-up source for watch streams. Cheap to clone.
#[derive(Clone)]
pub struct Hub {
    wake: watch::Receiver<u64>,
    poll: Duration,
    metrics: Metrics,
}

/// Counts a stream while its task runs.
struct Open(Metrics);

impl Open {
    fn new(metrics: Metrics) -> Self {
        metrics.watch_streams.inc();
        Open(metrics)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.watch_streams.dec();
    }
}

impl Hub {
    /// Starts the LISTEN task; it runs until `stop` fires.
    pub fn start(
        store: Store,
        poll: Duration,
        metrics: Metrics,
        stop: CancellationToken,
    ) -> (Hub, JoinHandle<()>) {
        let (tx, rx) = watch::channel(0u64);
        let task = tokio::spawn(listen(store, tx, stop));
        (
            Hub {
                wake: rx,
                poll,
                metrics,
            },
            task,
        )
    }

    /// A stream of events after `after`, of one ledger or all (only those
    /// of ledgers inside `scope`, when given), until the client goes away or
    /// `stop` fires.
    pub fn stream(
        &self,
        store: Store,
        ledger_id: Option<i64>,
        scope: Option<Arc<Scope>>,
        after: i64,
        stop: CancellationToken,
    ) -> ReceiverStream<Result<pb::JobEvent, Status>> {
        let (tx, rx) = mpsc::channel(BUFFER);
        let open = Open::new(self.metrics.clone());
        let (wake, poll) = (self.wake.clone(), self.poll);
        tokio::spawn(async move {
            let _open = open;
            let filter = Filter { ledger_id, scope };
            follow(store, filter, after, wake, poll, tx, stop).await;
        });
        ReceiverStream::new(rx)
    }
}

async fn listen(store: Store, tx: watch::Sender<u64>, stop: CancellationToken) {
    let bump = |tx: &watch::Sender<u64>| tx.send_modify(|n| *n = n.wrapping_add(1));
    let mut backoff = Duration::from_millis(100);
    loop {
        let opened = tokio::select! {
            _ = stop.cancelled() => return,
            r = store.listen_job_events() => r,
        };
        let mut listener = match opened {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "cannot listen for job events; watchers fall back to polling");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        backoff = Duration::from_millis(100);
        // Whatever was committed while nobody listened is in the table.
        bump(&tx);
        loop {
            let next = tokio::select! {
                _ = stop.cancelled() => return,
                r = listener.next() => r,
            };
            match next {
                Ok(Wake::Notified(_)) => bump(&tx),
                Ok(Wake::Reconnected) => {
                    tracing::info!("job event listener reconnected");
                    bump(&tx);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "job event listener failed; reopening");
                    bump(&tx);
                    break;
                }
            }
        }
    }
}

/// Which events one stream shows.
struct Filter {
    /// One ledger (read in the query), or all.
    ledger_id: Option<i64>,
    /// Of all, only the ledgers inside this scope (checked per event; the
    /// sequence still moves past the others).
    scope: Option<Arc<Scope>>,
}

impl Filter {
    fn shows(&self, ledger: &str) -> bool {
        self.scope.as_ref().is_none_or(|s| s.ledger(ledger))
    }
}

async fn follow(
    store: Store,
    filter: Filter,
    mut last: i64,
    mut wake: watch::Receiver<u64>,
    poll: Duration,
    tx: mpsc::Sender<Result<pb::JobEvent, Status>>,
    stop: CancellationToken,
) {
    loop {
        // Mark the current wake-up seen before reading, so a notification
        // that arrives during the read wakes the next wait at once.
        wake.borrow_and_update();
        loop {
            let page = tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                _ = tx.closed() => return,
                r = store.job_events_after(filter.ledger_id, last, PAGE) => r,
            };
            let page = match page {
                Ok(p) => p,
                Err(e) => {
                    // The client resumes from its last sequence number.
                    let _ = tx.send(Err(from_store(e))).await;
                    return;
                }
            };
            let full = page.len() as i64 == PAGE;
            for e in &page {
                if !filter.shows(&e.ledger) {
                    last = e.seq;
                    continue;
                }
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => return,
                    sent = tx.send(Ok(event_to_proto(e))) => if sent.is_err() { return },
                }
                last = e.seq;
            }
            if !full {
                break;
            }
        }
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = tx.closed() => return,
            changed = wake.changed() => if changed.is_err() {
                // The hub is gone: the server is stopping.
                return;
            },
            _ = tokio::time::sleep(poll) => {}
        }
    }
}
