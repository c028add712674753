//! Deleting ledgers: the mark and the purge (`ledger_purges`).
//!
//! [`Store::delete_ledger`] marks a ledger DELETING in one short
//! transaction: from its commit every work path answers NOT_FOUND (they load
//! ledgers through `ledgers::load`, which skips deleting ones; other
//! replicas' ledger caches within `ledgers::CACHE_TTL`), its claims and jobs
//! are closed, and a `ledger_purges` row queues the purge. Without force it
//! refuses while the ledger has live claims or open jobs.
//!
//! [`Store::purge_step`] is one bounded batch of some deleting ledger's
//! purge, in its own short transaction (the first step of a purge counts
//! the ledger's rows instead, for its progress): at most `batch` entries of one table
//! (rows go with their attempts and dependency edges; jobs with their
//! provider operations). The ledger's `ledger_purges` row is locked for the
//! batch with SKIP LOCKED, so replicas share purges without waiting on each
//! other, and everything a batch did is committed with its progress, so a
//! crash loses at most the batch in flight. When nothing of the ledger is
//! left, and the ledger was marked at least `settle` ago (so that a call
//! that read the ledger just before the mark has finished), the ledger row
//! itself goes and the name is free again.

use crate::codes::{self, CLAIM_ACTIVE};
use crate::types::LedgerRecord;
use std::sync::LazyLock;

/// The mark (purge/mark.sql) with its codes filled in.
static MARK: LazyLock<String> = LazyLock::new(|| codes::render(include_str!("purge/mark.sql")));
use crate::{Result, Store, StoreError};
use sqlx::{Postgres, Transaction};
use std::time::Duration;

/// A delete as the caller asked for it.
#[derive(Debug, Clone)]
pub struct DeleteLedger<'a> {
    /// The ledger id.
    pub ledger: &'a str,
    /// Delete even with live claims and open jobs (they are expired and
    /// abandoned).
    pub force: bool,
    /// Refuse (ABORTED) unless the ledger's etag is still this.
    pub etag: Option<i64>,
    /// Refuse (FAILED_PRECONDITION, LEDGER_CHANGED) unless the ledger's
    /// content etag ([`crate::types::LedgerSummary::content_etag`]) is
    /// still this: nothing enrolled, reported, rescued or redriven since it
    /// was read.
    pub content_etag: Option<&'a str>,
    pub actor: &'a str,
}

/// What one [`Store::purge_step`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PurgeStep {
    /// No ledger is waiting to be purged (or every one is locked by
    /// another replica's batch right now).
    Idle,
    /// Deleted `deleted` entries of `table` (and, for rows, `attempts`
    /// attempts; for jobs, their operations) from `ledger`.
    Batch {
        ledger: String,
        table: &'static str,
        deleted: i64,
        attempts: i64,
    },
    /// Counted the `rows` of `ledger` (its purge's first step).
    Counted { ledger: String, rows: i64 },
    /// Nothing of `ledger` is left, but it was marked less than `settle`
    /// ago; its row stays until then.
    Settling { ledger: String },
    /// The ledger is gone, its name free.
    Finished { ledger: String },
}

impl PurgeStep {
    /// Whether another step right away may find work.
    pub fn busy(&self) -> bool {
        match self {
            PurgeStep::Batch { .. } | PurgeStep::Counted { .. } | PurgeStep::Finished { .. } => {
                true
            }
            PurgeStep::Idle | PurgeStep::Settling { .. } => false,
        }
    }
}

/// Small tables keyed by the ledger: deleted by physical address, at most
/// a batch at a time, through an index that leads with `ledger_id`.
const SIMPLE: &[(&str, &str)] = &[
    (
        "runnable",
        "DELETE FROM runnable WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM runnable WHERE ledger_id = $1 LIMIT $2))",
    ),
    (
        "ledger_models",
        "DELETE FROM ledger_models WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM ledger_models WHERE ledger_id = $1 LIMIT $2))",
    ),
    (
        "claims",
        "DELETE FROM claims WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM claims WHERE ledger_id = $1 LIMIT $2))",
    ),
    (
        "job_events",
        "DELETE FROM job_events WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM job_events WHERE ledger_id = $1 LIMIT $2))",
    ),
    (
        "redrives",
        "DELETE FROM redrives WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM redrives WHERE ledger_id = $1 LIMIT $2))",
    ),
    (
        "ledger_alerts",
        "DELETE FROM ledger_alerts WHERE ledger_id = $1 AND $2 > 0",
    ),
    (
        "alert_outbox",
        "DELETE FROM alert_outbox WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM alert_outbox WHERE ledger_id = $1 LIMIT $2))",
    ),
    // Consumers: what each holds first (a dead-letter list can be long),
    // then the consumers themselves, then the results log.
    (
        "consumer_dead_letters",
        "DELETE FROM consumer_dead_letters WHERE ctid = ANY(ARRAY(
             SELECT d.ctid FROM consumers c JOIN consumer_dead_letters d ON d.consumer_id = c.id
             WHERE c.ledger_id = $1 LIMIT $2))",
    ),
    (
        "consumer_leases",
        "DELETE FROM consumer_leases WHERE ctid = ANY(ARRAY(
             SELECT x.ctid FROM consumers c JOIN consumer_leases x ON x.consumer_id = c.id
             WHERE c.ledger_id = $1 LIMIT $2))",
    ),
    (
        "webhook_deliveries",
        "DELETE FROM webhook_deliveries WHERE ctid = ANY(ARRAY(
             SELECT w.ctid FROM consumers c JOIN webhook_deliveries w ON w.consumer_id = c.id
             WHERE c.ledger_id = $1 LIMIT $2))",
    ),
    (
        "consumers",
        "DELETE FROM consumers WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM consumers WHERE ledger_id = $1 LIMIT $2))",
    ),
    // An entry holds up to 10,000 results (usually a report's hundreds).
    (
        "result_log",
        "DELETE FROM result_log WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM result_log WHERE ledger_id = $1 LIMIT greatest($2 / 100, 1)))",
    ),
];

/// Attempts whose row was already purged: only a report that committed
/// after its row's batch leaves these.
const STRAY_ATTEMPTS: &str = "DELETE FROM attempts WHERE ctid = ANY(ARRAY(
     SELECT ctid FROM attempts WHERE ledger_id = $1 LIMIT $2))";

/// Jobs per batch: each carries an operation with its events (a handful
/// each), so a batch of jobs stays near `batch` deleted entries.
const ENTRIES_PER_JOB: i64 = 20;

impl Store {
    /// Marks a ledger DELETING and queues its purge; answers the ledger as
    /// GetLedger will show it. Deleting a ledger that is already being
    /// deleted changes nothing and answers it again (a retried call
    /// succeeds).
    pub async fn delete_ledger(&self, req: &DeleteLedger<'_>) -> Result<LedgerRecord> {
        let name = format!("ledgers/{}", req.ledger);
        let found: Option<(i64, i64, bool)> =
            sqlx::query_as("SELECT id, etag, delete_time IS NOT NULL FROM ledgers WHERE name = $1")
                .bind(req.ledger)
                .fetch_optional(&self.pool)
                .await?;
        let Some((id, _, deleting)) = found else {
            return Err(StoreError::not_found("ledger", name));
        };
        if deleting {
            return self.describe_ledger(req.ledger).await;
        }
        let mut tx = self.begin().await?;
        let out = mark(&mut tx, req, &name).await;
        let marked = crate::end_tx(tx, out).await?;
        self.ledgers.forget(req.ledger);
        if let Some((claims, jobs)) = marked {
            tracing::info!(ledger = %req.ledger, ledger_id = id, force = req.force, claims_expired = claims, jobs_abandoned = jobs, actor = %req.actor, "ledger marked for deletion");
        }
        self.describe_ledger(req.ledger).await
    }

    /// One bounded batch of the purge of the deleting ledger worked on least
    /// recently (see the module documentation).
    pub async fn purge_step(&self, batch: i64, settle: Duration) -> Result<PurgeStep> {
        let batch = batch.max(1);
        let mut tx = self.begin().await?;
        let out = step(&mut tx, batch, settle).await;
        crate::end_tx(tx, out).await
    }
}

/// The mark, inside its transaction. `None` when another call marked the
/// ledger first (nothing to do).
async fn mark(
    tx: &mut Transaction<'static, Postgres>,
    req: &DeleteLedger<'_>,
    name: &str,
) -> Result<Option<(i32, i32)>> {
    let locked: Option<(i64, i64, bool)> = sqlx::query_as(
        "SELECT id, etag, delete_time IS NOT NULL FROM ledgers WHERE name = $1 FOR UPDATE",
    )
    .bind(req.ledger)
    .fetch_optional(&mut **tx)
    .await?;
    let Some((id, etag, deleting)) = locked else {
        return Err(StoreError::not_found("ledger", name));
    };
    if deleting {
        return Ok(None);
    }
    if req.etag.is_some_and(|e| e != etag) {
        return Err(StoreError::Aborted(format!(
            "{name} changed since it was read (etag mismatch); read it again and retry"
        )));
    }
    // Under the ledger's row lock: enrollments and redrives take it too
    // (FOR KEY SHARE), so none commits between this read and the mark, and
    // those waiting find the ledger deleting.
    if let Some(expected) = req.content_etag {
        let now = crate::rows::content_etag(&mut **tx, id).await?;
        if now != expected {
            return Err(StoreError::FailedPrecondition {
                reason: "LEDGER_CHANGED",
                description: format!(
                    "{name} changed since its content etag {expected} was read (now {now}): \
                     rows were enrolled, reported, rescued or redriven; export it again"
                ),
            });
        }
    }
    let (live_claims, open_jobs): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT (SELECT count(*) FROM claims
                 WHERE ledger_id = $1 AND state = {CLAIM_ACTIVE} AND expire_time > now()),
                (SELECT count(*) FROM jobs WHERE ledger_id = $1 AND end_time IS NULL)"
    )))
    .bind(id)
    .fetch_one(&mut **tx)
    .await?;
    if !req.force && (live_claims > 0 || open_jobs > 0) {
        return Err(StoreError::LedgerActive {
            name: name.to_string(),
            live_claims,
            open_jobs,
        });
    }
    let closed: (i32, i32) = sqlx::query_as(sqlx::AssertSqlSafe(MARK.as_str()))
        .bind(id)
        .bind(req.force)
        .bind(req.actor)
        .fetch_one(&mut **tx)
        .await?;
    Ok(Some(closed))
}

async fn step(
    tx: &mut Transaction<'static, Postgres>,
    batch: i64,
    settle: Duration,
) -> Result<PurgeStep> {
    let settle_ms = settle.as_millis().min(i64::MAX as u128) as i64;
    let picked: Option<(i64, String, String, bool, bool)> = sqlx::query_as(
        "SELECT p.ledger_id, l.name, p.cursor,
                l.delete_time <= now() - $1 * interval '1 millisecond',
                p.rows_total IS NULL
         FROM ledger_purges p JOIN ledgers l ON l.id = p.ledger_id
         ORDER BY p.update_time, p.ledger_id LIMIT 1
         FOR UPDATE OF p SKIP LOCKED",
    )
    .bind(settle_ms)
    .fetch_optional(&mut **tx)
    .await?;
    let Some((id, ledger, cursor, settled, uncounted)) = picked else {
        return Ok(PurgeStep::Idle);
    };
    if uncounted {
        // First, the figure progress is measured against: no batch of this
        // ledger can run meanwhile (this step holds its purge row), so the
        // count and the rows already purged add up exactly.
        let rows: i64 = sqlx::query_scalar(
            "WITH n AS (SELECT count(*) AS n FROM rows WHERE ledger_id = $1)
             UPDATE ledger_purges SET rows_total = rows_purged + (SELECT n FROM n)
             WHERE ledger_id = $1 RETURNING rows_total",
        )
        .bind(id)
        .fetch_one(&mut **tx)
        .await?;
        return Ok(PurgeStep::Counted { ledger, rows });
    }
    let progress = |table, deleted, attempts| PurgeStep::Batch {
        ledger: ledger.clone(),
        table,
        deleted,
        attempts,
    };
    for (table, sql) in SIMPLE {
        let n = sqlx::query(*sql)
            .bind(id)
            .bind(batch)
            .execute(&mut **tx)
            .await?
            .rows_affected() as i64;
        if n > 0 {
            touch(tx, id, 0, None).await?;
            return Ok(progress(table, n, 0));
        }
    }
    let (jobs, _ops, _events, _deliveries): (i64, i64, i64, i64) =
        sqlx::query_as(include_str!("purge/jobs_batch.sql"))
            .bind(id)
            .bind((batch / ENTRIES_PER_JOB).max(1))
            .fetch_one(&mut **tx)
            .await?;
    if jobs > 0 {
        touch(tx, id, 0, None).await?;
        return Ok(progress("jobs", jobs, 0));
    }
    for from in [cursor.as_str(), ""] {
        let (rows, last, attempts): (i64, Option<String>, i64) =
            sqlx::query_as(include_str!("purge/rows_batch.sql"))
                .bind(id)
                .bind(from)
                .bind(batch)
                .fetch_one(&mut **tx)
                .await?;
        if rows > 0 {
            touch(tx, id, rows, last.as_deref()).await?;
            return Ok(progress("rows", rows, attempts));
        }
        if from.is_empty() {
            break;
        }
        // Nothing after the cursor: look once more from the start, for rows
        // a late call enrolled behind it.
    }
    let stray = sqlx::query(STRAY_ATTEMPTS)
        .bind(id)
        .bind(batch)
        .execute(&mut **tx)
        .await?
        .rows_affected() as i64;
    if stray > 0 {
        touch(tx, id, 0, None).await?;
        return Ok(progress("attempts", 0, stray));
    }
    if !settled {
        touch(tx, id, 0, None).await?;
        return Ok(PurgeStep::Settling { ledger });
    }
    sqlx::query("DELETE FROM ledger_purges WHERE ledger_id = $1")
        .bind(id)
        .execute(&mut **tx)
        .await?;
    sqlx::query("DELETE FROM ledgers WHERE id = $1")
        .bind(id)
        .execute(&mut **tx)
        .await?;
    Ok(PurgeStep::Finished { ledger })
}

/// Records a batch's progress (and moves the ledger to the back of the
/// round robin).
async fn touch(
    tx: &mut Transaction<'static, Postgres>,
    id: i64,
    rows: i64,
    cursor: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "UPDATE ledger_purges SET rows_purged = rows_purged + $2,
                cursor = coalesce($3, cursor), batches = batches + 1, update_time = now()
         WHERE ledger_id = $1",
    )
    .bind(id)
    .bind(rows)
    .bind(cursor)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
