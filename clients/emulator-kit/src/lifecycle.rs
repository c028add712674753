//! The timed part of a batch's life, whatever its states are called: each
//! live batch has a stop token (a child of the emulator's shutdown) and
//! maybe a webhook queue, its task waits out each state's dwell time unless
//! stopped, and a cancel ends it after the cancelling dwell unless the
//! emulator shuts down first.

use std::collections::HashMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::delivery::EventQueue;

/// Waits `dwell`; false if `stop` came first (the batch was cancelled or
/// the emulator is shutting down).
pub async fn dwell(dwell: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        () = tokio::time::sleep(dwell) => true,
        () = stop.cancelled() => false,
    }
}

/// Runs `end` on `tasks` after `delay`, unless `shutdown` comes first: a
/// cancelled batch's `cancelling` dwell before it ends.
pub fn end_after(
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
    delay: Duration,
    end: impl FnOnce() + Send + 'static,
) {
    let shutdown = shutdown.clone();
    tasks.spawn(async move {
        if dwell(delay, &shutdown).await {
            end();
        }
    });
}

/// What a live batch has besides its data.
#[derive(Debug)]
struct Live {
    stop: CancellationToken,
    events: Option<EventQueue>,
}

/// The live batches by id: their stop tokens and webhook queues.
#[derive(Debug, Default)]
pub struct Lives {
    live: HashMap<String, Live>,
}

impl Lives {
    /// Registers a new batch; its task waits on the token returned.
    pub fn start(
        &mut self,
        id: &str,
        shutdown: &CancellationToken,
        events: Option<EventQueue>,
    ) -> CancellationToken {
        let stop = shutdown.child_token();
        self.live.insert(
            id.to_owned(),
            Live {
                stop: stop.clone(),
                events,
            },
        );
        stop
    }

    /// Stops the batch's task (a cancel); the batch stays live until it ends.
    pub fn stop(&self, id: &str) {
        if let Some(live) = self.live.get(id) {
            live.stop.cancel();
        }
    }

    /// The batch ended: its task stops and its webhook queue, if it has
    /// one, is handed back for the last event.
    pub fn end(&mut self, id: &str) -> Option<EventQueue> {
        let live = self.live.remove(id)?;
        live.stop.cancel();
        live.events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_dwell_ends_early_when_stopped() {
        let stop = CancellationToken::new();
        assert!(dwell(Duration::from_millis(5), &stop).await);
        stop.cancel();
        assert!(!dwell(Duration::from_secs(5), &stop).await);
    }

    #[tokio::test]
    async fn a_batch_is_stopped_by_a_cancel_its_end_or_shutdown() {
        let shutdown = CancellationToken::new();
        let mut lives = Lives::default();
        let a = lives.start("a", &shutdown, None);
        let b = lives.start("b", &shutdown, None);
        let c = lives.start("c", &shutdown, None);
        lives.stop("a");
        assert!(a.is_cancelled() && !b.is_cancelled());
        assert!(lives.end("b").is_none());
        assert!(b.is_cancelled() && !c.is_cancelled());
        shutdown.cancel();
        assert!(c.is_cancelled());
    }

    #[tokio::test]
    async fn an_end_after_a_delay_does_not_run_after_shutdown() {
        let tasks = TaskTracker::new();
        let shutdown = CancellationToken::new();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let first = tx.clone();
        end_after(&tasks, &shutdown, Duration::from_millis(10), move || {
            first.send("ended").unwrap();
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(rx.recv().await, Some("ended"));
        end_after(&tasks, &shutdown, Duration::from_secs(10), move || {
            tx.send("too late").unwrap();
        });
        shutdown.cancel();
        tasks.close();
        tasks.wait().await;
        assert!(rx.try_recv().is_err());
    }
}
