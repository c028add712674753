//! Background upkeep of the database: the runnable queue is vacuumed as soon
//! as its dead entries pile up, and the fastest-growing tables are analyzed
//! as soon as their statistics go stale (see `tally_store::maintenance` for
//! why autovacuum alone is too slow for either).

use crate::metrics::{Metrics, TableLabels};
use std::time::Duration;
use tally_store::Store;
use tokio_util::sync::CancellationToken;

/// Dead queue entries below which vacuuming is not worth it.
const MIN_DEAD: i64 = 20_000;

/// Every `every`: the queue's vacuum, then the hot tables' statistics.
pub async fn run(store: Store, every: Duration, metrics: Metrics, stop: CancellationToken) {
    loop {
        if !crate::tasks::every::wait(every, &stop).await {
            return;
        }
        vacuum_queue(&store, &metrics).await;
        analyze_stale(&store, &metrics).await;
    }
}

async fn vacuum_queue(store: &Store, metrics: &Metrics) {
    let stats = match store.queue_stats().await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "reading queue statistics failed");
            return;
        }
    };
    metrics.queue_dead_entries.set(stats.dead);
    if !stats.needs_vacuum(MIN_DEAD) {
        return;
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

async fn analyze_stale(store: &Store, metrics: &Metrics) {
    let tables = match store.hot_table_stats().await {
        Ok(t) => t,
        Err(e) => {
            tracing::debug!(error = %e, "reading table statistics failed");
            return;
        }
    };
    for stats in tables.into_iter().filter(|t| t.stale()) {
        let started = std::time::Instant::now();
        match store.analyze(stats.table).await {
            Ok(true) => {
                metrics
                    .table_analyzes
                    .get_or_create(&TableLabels { table: stats.table })
                    .inc();
                tracing::debug!(table = stats.table, estimated = stats.estimated, live = stats.live, took = ?started.elapsed(), "analyzed a table whose statistics went stale");
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(table = stats.table, error = %e, "analyzing a table failed"),
        }
    }
}
