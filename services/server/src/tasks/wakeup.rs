//! The server's one `LISTEN` hub: one connection per process hears every
//! commit-ordered log (`tally_store::event_log`) and bumps that log's
//! counter, which every open watch stream of the log follows.
//!
//! A notification is only a hint that something was committed; streams
//! read the tables themselves and also poll on a timer ([`crate::tasks::tail`]),
//! because notifications are lost while the listening connection
//! reconnects. So the hub never has to be right, only early: on any
//! trouble it wakes every stream of every log and reconnects.

use std::time::Duration;
use tally_store::Store;
use tally_store::event_log::{Log, Wake};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What streams subscribe to: per log, a counter bumped on every wake-up
/// (its value means nothing, only that it changed). Cheap to clone.
#[derive(Clone)]
pub struct Wakeups {
    jobs: watch::Receiver<u64>,
    operations: watch::Receiver<u64>,
}

impl Wakeups {
    /// A receiver that reports a change on the next wake-up for `log`.
    pub fn subscribe(&self, log: Log) -> watch::Receiver<u64> {
        let mut rx = match log {
            Log::Jobs => self.jobs.clone(),
            Log::Operations => self.operations.clone(),
        };
        rx.mark_unchanged();
        rx
    }
}

/// The senders behind [`Wakeups`].
struct Bump {
    jobs: watch::Sender<u64>,
    operations: watch::Sender<u64>,
}

impl Bump {
    fn log(&self, log: Log) {
        let tx = match log {
            Log::Jobs => &self.jobs,
            Log::Operations => &self.operations,
        };
        tx.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn all(&self) {
        Log::ALL.into_iter().for_each(|log| self.log(log));
    }
}

/// Starts the hub; it listens until `stop` fires, and streams see their
/// counter's sender go away then.
pub fn spawn(store: Store, stop: CancellationToken) -> (Wakeups, JoinHandle<()>) {
    let (jobs, jobs_rx) = watch::channel(0u64);
    let (operations, operations_rx) = watch::channel(0u64);
    let bump = Bump { jobs, operations };
    let task = tokio::spawn(async move {
        let mut backoff = Duration::from_millis(100);
        loop {
            match listen(&store, &bump, &stop, &mut backoff).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "notification listener lost; watch streams poll until it is back");
                    bump.all();
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(10));
        }
    });
    let wakeups = Wakeups {
        jobs: jobs_rx,
        operations: operations_rx,
    };
    (wakeups, task)
}

/// Listens until `stop` (then `Ok`) or until the connection fails; a
/// connection made resets the back-off.
async fn listen(
    store: &Store,
    bump: &Bump,
    stop: &CancellationToken,
    backoff: &mut Duration,
) -> Result<(), tally_store::StoreError> {
    let mut listener = tokio::select! {
        _ = stop.cancelled() => return Ok(()),
        l = store.listen() => l?,
    };
    *backoff = Duration::from_millis(100);
    // Whatever was committed while nobody listened is in the tables.
    bump.all();
    loop {
        let wake = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            w = listener.next() => w?,
        };
        match wake {
            Wake::Appended(log) => bump.log(log),
            Wake::Reconnected => {
                tracing::info!("notification connection dropped; reconnecting");
                bump.all();
            }
        }
    }
}
