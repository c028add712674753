//! The job event log: appending events inside the transaction that changed
//! the job, reading them back by sequence number, and the LISTEN side of the
//! wake-up hint.
//!
//! # Why readers never miss an event
//!
//! A watcher keeps the last sequence number it delivered and asks for
//! `seq > last`. That is only safe if no event with a smaller number can
//! become visible after a larger one did. Identity values are drawn when a
//! row is inserted, not when its transaction commits, so two writers could
//! commit out of order (5 drawn first but committed after 6 was read), and
//! a reader would skip 5 for ever.
//!
//! So every writer takes one transaction-scoped advisory lock
//! ([`EVENTS_LOCK`]) right before it draws its numbers, as the last
//! statement of its transaction, and PostgreSQL releases it only after the
//! commit is visible to others. The next writer draws its numbers after
//! that. Hence sequence order is commit order: once a reader sees N, every
//! number below N is committed (or rolled back, and never appears). The
//! cost is that event-writing commits queue on one lock for the time of an
//! insert and a commit; writers take it last, after every row lock they
//! need, so it cannot be part of a deadlock.
//!
//! The same statement calls `pg_notify`, delivered at commit to every
//! listening server: a hint to read the table, never the data itself.

use crate::jobs::{JOB_RECORD_COLUMNS, JOB_SELECT, JobRow};
use crate::types::{JobEventKind, JobEventRecord, Time};
use crate::{Result, Store, StoreError};
use sqlx::postgres::PgListener;
use sqlx::{Postgres, Transaction};

/// The channel `pg_notify` wakes listeners on.
pub const CHANNEL: &str = "tally_job_events";

/// The advisory lock that orders event sequence numbers by commit.
const EVENTS_LOCK: i64 = 0x7461_6c6c_7945_7631;

/// Appends events for jobs changed in `tx`, in order, as of their current
/// state in `tx`. Call it as the last statement before committing.
pub(crate) async fn append(
    tx: &mut Transaction<'static, Postgres>,
    events: &[(i64, JobEventKind)],
    actor: &str,
) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = events.iter().map(|(id, _)| *id).collect();
    let kinds: Vec<i16> = events.iter().map(|(_, k)| k.code()).collect();
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(EVENTS_LOCK)
        .execute(&mut **tx)
        .await?;
    let sql = format!(
        "WITH e AS (
             SELECT * FROM unnest($1::int8[], $2::int2[]) WITH ORDINALITY AS e(job_id, type, n)
         ),
         ins AS (
             INSERT INTO job_events (ledger_id, job_id, type, actor, job)
             SELECT x.ledger_id, x.id, e.type, $3, to_jsonb(x)
             FROM e JOIN ({JOB_SELECT}) x ON x.id = e.job_id
             ORDER BY e.n
             RETURNING seq
         )
         SELECT pg_notify('{CHANNEL}', coalesce(max(seq), 0)::text) FROM ins"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(&ids)
        .bind(&kinds)
        .bind(actor)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

#[derive(sqlx::FromRow)]
struct EventRow {
    seq: i64,
    kind: i16,
    actor: String,
    time: Time,
    #[sqlx(flatten)]
    job: JobRow,
}

/// What woke a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// An event was committed (the hint carries its sequence number).
    Notified(i64),
    /// The connection was lost and re-established: notifications sent in
    /// between are gone, so readers must look at the table.
    Reconnected,
}

/// A LISTEN connection on [`CHANNEL`] (one per server process).
pub struct JobEventListener {
    inner: PgListener,
}

impl JobEventListener {
    /// Waits for the next wake-up. Reconnects by itself; an error means it
    /// could not (the caller backs off and calls again).
    pub async fn next(&mut self) -> Result<Wake> {
        match self.inner.try_recv().await? {
            Some(n) => Ok(Wake::Notified(n.payload().parse().unwrap_or(0))),
            None => Ok(Wake::Reconnected),
        }
    }
}

impl Store {
    /// Opens a LISTEN connection for job events.
    pub async fn listen_job_events(&self) -> Result<JobEventListener> {
        let mut inner = PgListener::connect_with(&self.pool).await?;
        inner.listen(CHANNEL).await?;
        Ok(JobEventListener { inner })
    }

    /// The highest sequence number committed so far (0 when none): the
    /// position "from now" starts after.
    pub async fn last_job_event(&self) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT coalesce(max(seq), 0)::int8 FROM job_events")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// The ledger's internal id, for filtering events (NOT_FOUND if none).
    pub async fn ledger_id(&self, ledger: &str) -> Result<i64> {
        sqlx::query_scalar("SELECT id FROM ledgers WHERE name = $1 AND delete_time IS NULL")
            .bind(ledger)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::not_found("ledger", format!("ledgers/{ledger}")))
    }

    /// Up to `limit` events after `after`, oldest first, of one ledger
    /// (`Some(id)`) or all.
    pub async fn job_events_after(
        &self,
        ledger_id: Option<i64>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<JobEventRecord>> {
        let sql = format!(
            "SELECT e.seq, e.type AS kind, e.actor, e.time, x.*
             FROM job_events e, jsonb_to_record(e.job) AS x({JOB_RECORD_COLUMNS})
             WHERE e.seq > $1 AND ($2::int8 IS NULL OR e.ledger_id = $2)
             ORDER BY e.seq LIMIT $3"
        );
        let rows = sqlx::query_as::<_, EventRow>(sqlx::AssertSqlSafe(sql))
            .bind(after)
            .bind(ledger_id)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter()
            .map(|r| {
                Ok(JobEventRecord {
                    seq: r.seq,
                    kind: JobEventKind::from_code(r.kind).ok_or_else(|| {
                        StoreError::Internal(format!("job event {} has type {}", r.seq, r.kind))
                    })?,
                    actor: r.actor,
                    time: r.time,
                    job: r.job.into_record()?,
                })
            })
            .collect()
    }
}
