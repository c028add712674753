//! Wake-ups for watch streams: one `LISTEN` connection per server, fanned
//! out to every open stream through a `watch` channel.
//!
//! A notification is only a hint that something was committed; streams
//! read the events table itself and also poll on a timer, because
//! notifications are lost while the listening connection reconnects and
//! do not pass a transaction-mode pooler (DESIGN.md §1). So the listener
//! never has to be right, only early: on any trouble it wakes everyone and
//! reconnects.

use std::time::Duration;
use tally_store::Store;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A handle streams subscribe to; the value is a counter bumped on every
/// notification (its value means nothing, only that it changed).
#[derive(Clone)]
pub struct Wakeups {
    rx: watch::Receiver<u64>,
}

impl Wakeups {
    /// A receiver that reports a change on the next wake-up.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        let mut rx = self.rx.clone();
        rx.mark_unchanged();
        rx
    }
}

/// Listens on `channel` until `stop`, waking subscribers on every
/// notification and whenever the connection had trouble.
pub fn spawn(
    store: Store,
    channel: &'static str,
    stop: CancellationToken,
) -> (Wakeups, JoinHandle<()>) {
    let (tx, rx) = watch::channel(0u64);
    let task = tokio::spawn(async move {
        let mut backoff = Duration::from_millis(100);
        while !stop.is_cancelled() {
            match listen(&store, channel, &tx, &stop).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(channel, error = %e, "notification listener lost; polling until it is back");
                    tx.send_modify(|n| *n = n.wrapping_add(1));
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(10));
        }
    });
    (Wakeups { rx }, task)
}

/// Returns `Ok` only when stopped.
async fn listen(
    store: &Store,
    channel: &str,
    tx: &watch::Sender<u64>,
    stop: &CancellationToken,
) -> Result<(), tally_store::StoreError> {
    let mut listener = store.listen(&[channel]).await?;
    // Anything committed while we were not listening is found by this.
    tx.send_modify(|n| *n = n.wrapping_add(1));
    loop {
        let note = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            note = listener.next() => note?,
        };
        // `None`: the connection dropped (and notifications with it); the
        // next call reconnects. Wake everyone either way.
        if note.is_none() {
            tracing::debug!(channel, "notification connection dropped; reconnecting");
        }
        tx.send_modify(|n| *n = n.wrapping_add(1));
    }
}
