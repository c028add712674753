//! Watch streams: following a commit-ordered log (WatchJobs over job
//! events, WatchOperations over operation transitions) for one client.
//!
//! The table is the truth; notifications are only a hint. Each stream has
//! its own task that keeps the last sequence number it passed and reads
//! `seq > last` pages from the table itself: when the log's wake-up counter
//! moves ([`crate::tasks::wakeup`]), when the poll interval passes (the fallback
//! for lost notifications), and until a page comes back short.
//! Commit-ordered sequence numbers (`tally_store::event_log`) make
//! `seq > last` miss nothing, so a client that reconnects with its last
//! sequence number gets every entry once.
//!
//! Memory is bounded per stream: one page plus a small channel. A slow
//! consumer fills the channel and its task waits on `send`, reading nothing
//! more; the wake-up counter coalesces however many notifications arrive
//! meanwhile into one.
//!
//! Every stream task also watches the server's stop token and the client's
//! going away: on shutdown it returns, which ends the stream cleanly, so
//! graceful shutdown does not wait on open streams. A database error is
//! sent as the stream's status; the client resumes from its last sequence.

use crate::edge::status::{from_store, invalid_field};
use crate::tasks::wakeup::Wakeups;
use std::future::Future;
use std::time::Duration;
use tally_store::Store;
use tally_store::event_log::Log;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Status;

/// Entries read per query.
pub const PAGE: i64 = 100;

/// One log as a stream shows it.
pub trait Source: Send + Sync + 'static {
    type Entry: Send + Sync;
    type Message: Send + 'static;
    /// The log whose wake-ups this follows.
    const LOG: Log;
    /// Messages buffered per stream between its reader task and the client.
    const BUFFER: usize;
    /// Up to `limit` entries after `after`, oldest first.
    fn page(
        &self,
        store: &Store,
        after: i64,
        limit: i64,
    ) -> impl Future<Output = tally_store::Result<Vec<Self::Entry>>> + Send;
    /// The entry's sequence number.
    fn seq(entry: &Self::Entry) -> i64;
    /// What the stream sends for `entry`, if this stream shows it (the
    /// position moves past it either way).
    fn show(&self, entry: &Self::Entry) -> Option<Self::Message>;
}

/// Where a watch starts, from a request's `after_sequence`.
#[derive(Debug, PartialEq, Eq)]
pub enum Start {
    /// 0: after the last entry committed now.
    Now,
    /// -1 (as 0: from the first stored entry) or a sequence number.
    After(i64),
}

/// Reads `after_sequence` (INVALID_ARGUMENT below -1).
pub fn start(after_sequence: i64) -> Result<Start, Status> {
    match after_sequence {
        0 => Ok(Start::Now),
        -1 => Ok(Start::After(0)),
        n if n > 0 => Ok(Start::After(n)),
        _ => Err(invalid_field(
            "after_sequence",
            "must be a sequence number, 0 (from now) or -1 (from the first stored)",
        )),
    }
}

/// What every stream of a server shares.
#[derive(Clone)]
pub struct Tails {
    pub store: Store,
    pub wakeups: Wakeups,
    pub poll: Duration,
    pub stop: CancellationToken,
}

impl Tails {
    /// A stream of `source`'s entries after `after`, until the client goes
    /// away or the server stops. `open` is held for as long as the stream
    /// runs (a gauge's guard, say).
    pub fn stream<S: Source>(
        &self,
        source: S,
        after: i64,
        open: impl Send + 'static,
    ) -> ReceiverStream<Result<S::Message, Status>> {
        let (tx, rx) = mpsc::channel(S::BUFFER);
        let wake = self.wakeups.subscribe(S::LOG);
        let (store, poll, stop) = (self.store.clone(), self.poll, self.stop.clone());
        tokio::spawn(async move {
            let _open = open;
            follow(&store, &source, after, wake, poll, &tx, &stop).await;
        });
        ReceiverStream::new(rx)
    }
}

async fn follow<S: Source>(
    store: &Store,
    source: &S,
    mut last: i64,
    mut wake: watch::Receiver<u64>,
    poll: Duration,
    tx: &mpsc::Sender<Result<S::Message, Status>>,
    stop: &CancellationToken,
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
                r = source.page(store, last, PAGE) => r,
            };
            let page = match page {
                Ok(p) => p,
                Err(e) => {
                    let _ = tx.send(Err(from_store(e))).await;
                    return;
                }
            };
            let full = page.len() as i64 == PAGE;
            for entry in &page {
                if let Some(message) = source.show(entry) {
                    tokio::select! {
                        biased;
                        _ = stop.cancelled() => return,
                        sent = tx.send(Ok(message)) => if sent.is_err() { return },
                    }
                }
                last = S::seq(entry);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_positions() {
        assert_eq!(start(0).unwrap(), Start::Now);
        assert_eq!(start(-1).unwrap(), Start::After(0));
        assert_eq!(start(7).unwrap(), Start::After(7));
        assert!(start(-2).is_err());
    }
}
