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
    metrics.describe(
        "tally_queue_dead_entries",
        "gauge",
        "dead tuples in the runnable queue table at the last check",
    );
    metrics.describe(
        "tally_queue_vacuums_total",
        "counter",
        "VACUUMs of the runnable queue run by this replica",
    );
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let stats = match store.queue_stats().await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "reading queue statistics failed");
                continue;
            }
        };
        metrics.set("tally_queue_dead_entries", &[], stats.dead as f64);
        if !stats.needs_vacuum(MIN_DEAD) {
            continue;
        }
        let started = std::time::Instant::now();
        match store.vacuum_queue().await {
            Ok(true) => {
                metrics.inc("tally_queue_vacuums_total", &[]);
                tracing::debug!(dead = stats.dead, live = stats.live, took = ?started.elapsed(), "vacuumed the runnable queue");
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "vacuuming the runnable queue failed"),
        }
    }
}
