//! Background upkeep of the database: the runnable queue is vacuumed as soon
//! as its dead entries pile up (see `tally_store::maintenance` for why
//! autovacuum alone is too slow for it).

use crate::metrics::Metrics;
use std::time::Duration;
use tally_store::Store;
use tokio_util::sync::CancellationToken;

/// Dead queue entries below which vacuuming is not worth it.
const MIN_DEAD: i64 = 20_000;

pub async fn vacuum_queue(
    store: Store,
    every: Duration,
    metrics: Metrics,
    stop: CancellationToken,
) {
    loop {
        if !crate::tasks::every::wait(every, &stop).await {
            return;
        }
        let stats = match store.queue_stats().await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "reading queue statistics failed");
                continue;
            }
        };
        metrics.queue_dead_entries.set(stats.dead);
        if !stats.needs_vacuum(MIN_DEAD) {
            continue;
        }
        let started = std::time::Instant::now();
        match store.vacuum_queue().await {
            Ok(true) => {
                metrics.queue_vacuums.inc();
                tracing::debug!(dead = stats.dead, live = stats.live, took = ?started.elapsed(), "vacuumed the runnable queue");
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "vacuuming the runnable queue failed"),
        }
    }
}
