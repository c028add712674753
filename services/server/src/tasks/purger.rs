//! The background purge of deleted ledgers: batch after batch through
//! `Store::purge_step` (one short transaction each, see
//! `tally_store::purge`) while there is work, then a wait for the next
//! interval or for a DeleteLedger through this replica. Every replica runs
//! one; they share purges through the store's SKIP LOCKED, and a purge that
//! a crash cut short is resumed by whichever replica looks next.

use crate::config::PurgeArgs;
use crate::metrics::{Metrics, TableLabels};
use std::collections::HashSet;
use std::sync::Arc;
use tally_store::Store;
use tally_store::purge::PurgeStep;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Wakes the purger now (after a delete) instead of at its next interval.
#[derive(Clone, Default)]
pub struct Wake(Arc<Notify>);

impl Wake {
    pub fn now(&self) {
        self.0.notify_one();
    }
}

pub async fn run(
    store: Store,
    args: PurgeArgs,
    wake: Wake,
    metrics: Metrics,
    stop: CancellationToken,
) {
    let mut last_cache_purge: Option<std::time::Instant> = None;
    loop {
        // Batches while there is work; each is its own transaction. A
        // ledger waiting out its settle time moves to the back of the
        // round; once every one left is waiting, so does this task.
        let mut settling = HashSet::new();
        loop {
            if stop.is_cancelled() {
                return;
            }
            match store.purge_step(args.purge_batch, args.purge_settle).await {
                Ok(PurgeStep::Idle) => break,
                Ok(PurgeStep::Settling { ledger }) => {
                    if !settling.insert(ledger) {
                        break;
                    }
                }
                Ok(step) => record(&metrics, &step),
                Err(e) => {
                    tracing::warn!(error = %e, "purging a deleted ledger failed; retrying later");
                    break;
                }
            }
            if !args.purge_pause.is_zero() {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(args.purge_pause) => {}
                }
            }
        }
        if last_cache_purge.is_none_or(|t| t.elapsed() >= CACHE_PURGE_EVERY) {
            purge_cache(&store, &args, &metrics, &stop).await;
            last_cache_purge = Some(std::time::Instant::now());
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = wake.0.notified() => {}
            _ = tokio::time::sleep(args.purge_interval) => {}
        }
    }
}

/// How often the result cache's bounds are checked: its size is summed over
/// an index of every answer, so not at every purge round.
const CACHE_PURGE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Keeps the result cache within its bounds (age, entries, bytes), a batch
/// at a time, and shows what it holds.
async fn purge_cache(store: &Store, args: &PurgeArgs, metrics: &Metrics, stop: &CancellationToken) {
    let bounds = args.cache_bounds();
    while !stop.is_cancelled() {
        match store.purge_cache(&bounds, args.purge_batch).await {
            Ok(deleted) => {
                metrics
                    .purged_entries
                    .get_or_create(&TableLabels {
                        table: "result_cache",
                    })
                    .inc_by(deleted);
                if deleted < args.purge_batch as u64 {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "purging the result cache failed; retrying later");
                break;
            }
        }
    }
    match store.cache_size().await {
        Ok(size) => {
            metrics.cache_entries.set(size.entries);
            metrics.cache_bytes.set(size.bytes);
        }
        Err(e) => tracing::debug!(error = %e, "reading the result cache's size failed"),
    }
}

fn record(metrics: &Metrics, step: &PurgeStep) {
    match step {
        PurgeStep::Batch {
            ledger,
            table,
            deleted,
            attempts,
        } => {
            metrics
                .purged_entries
                .get_or_create(&TableLabels { table })
                .inc_by(u64::try_from(*deleted).unwrap_or(0));
            if *attempts > 0 {
                metrics
                    .purged_entries
                    .get_or_create(&TableLabels { table: "attempts" })
                    .inc_by(u64::try_from(*attempts).unwrap_or(0));
            }
            tracing::debug!(ledger = %ledger, table, deleted, attempts, "purged a batch");
        }
        PurgeStep::Counted { ledger, rows } => {
            tracing::info!(ledger = %ledger, rows, "purging a deleted ledger");
        }
        PurgeStep::Finished { ledger } => {
            metrics.ledgers_purged.inc();
            metrics.forget_ledger(ledger);
            tracing::info!(ledger = %ledger, "deleted ledger purged; its name is free");
        }
        PurgeStep::Settling { .. } | PurgeStep::Idle => {}
    }
}
