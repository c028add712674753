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

use crate::codes;
use crate::job_view::{JOB_RECORD_COLUMNS, JOB_SELECT, JobRow};
use crate::types::{JobEventKind, JobEventRecord, Pause, Time};
use crate::{Result, Store, StoreError};
use sqlx::postgres::PgListener;
use sqlx::{FromRow, Postgres, Transaction};
use std::sync::LazyLock;
use tally_core::pause::PauseReason;

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
    lock_sequence(tx).await?;
    static SQL: LazyLock<String> = LazyLock::new(|| {
        codes::render_with(
            include_str!("queries/events/append.sql"),
            &[("JOB_SELECT", &JOB_SELECT), ("CHANNEL", &CHANNEL)],
        )
    });
    sqlx::query(sqlx::AssertSqlSafe(SQL.as_str()))
        .bind(&ids)
        .bind(&kinds)
        .bind(actor)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Appends an event about a ledger itself (a pause or a resume; `reason`
/// and `message` are the pause's, `None` for a resume). Call it as the last
/// statement before committing, like [`append`].
pub(crate) async fn append_ledger(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    kind: JobEventKind,
    pause: Option<(PauseReason, &str)>,
    actor: &str,
) -> Result<()> {
    debug_assert!(kind.is_ledger_event());
    lock_sequence(tx).await?;
    let (reason, message) = pause.map_or((None, None), |(r, m)| (Some(r.as_str()), Some(m)));
    let sql = format!(
        "WITH ins AS (
             INSERT INTO job_events (ledger_id, type, actor, ledger)
             VALUES ($1, $2, $3, jsonb_build_object('reason', $4::text, 'message', $5::text))
             RETURNING seq
         )
         SELECT pg_notify('{CHANNEL}', seq::text) FROM ins"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(ledger_id)
        .bind(kind.code())
        .bind(actor)
        .bind(reason)
        .bind(message)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Takes [`EVENTS_LOCK`] (see the module documentation).
async fn lock_sequence(tx: &mut Transaction<'static, Postgres>) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(EVENTS_LOCK)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// What every event has; job events also carry the job's columns (read with
/// [`JobRow`]), ledger events the pause's.
#[derive(sqlx::FromRow)]
struct EventHead {
    seq: i64,
    kind: i16,
    actor: String,
    time: Time,
    event_ledger: String,
    pause_reason: Option<String>,
    pause_message: Option<String>,
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
        // One statement, so job and ledger events come from one snapshot
        // (sequence order is commit order only within a snapshot).
        let sql = format!(
            "SELECT e.seq, e.type AS kind, e.actor, e.time, l.name AS event_ledger,
                    e.ledger->>'reason' AS pause_reason, e.ledger->>'message' AS pause_message,
                    x.*
             FROM job_events e
             JOIN ledgers l ON l.id = e.ledger_id
             LEFT JOIN LATERAL jsonb_to_record(e.job) AS x({JOB_RECORD_COLUMNS}) ON true
             WHERE e.seq > $1 AND ($2::int8 IS NULL OR e.ledger_id = $2)
             ORDER BY e.seq LIMIT $3"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(after)
            .bind(ledger_id)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let head = EventHead::from_row(row)?;
                let kind = JobEventKind::from_code(head.kind).ok_or_else(|| {
                    StoreError::Internal(format!("job event {} has type {}", head.seq, head.kind))
                })?;
                let job = if kind.is_ledger_event() {
                    None
                } else {
                    Some(JobRow::from_row(row)?.into_record()?)
                };
                let pause = match (kind, head.pause_reason.as_deref()) {
                    (JobEventKind::LedgerPaused, Some(r)) => Some(Pause {
                        reason: PauseReason::parse(r).ok_or_else(|| {
                            StoreError::Internal(format!(
                                "job event {} has pause reason {r}",
                                head.seq
                            ))
                        })?,
                        message: head.pause_message.unwrap_or_default(),
                        actor: head.actor.clone(),
                        time: head.time,
                    }),
                    _ => None,
                };
                Ok(JobEventRecord {
                    seq: head.seq,
                    kind,
                    actor: head.actor,
                    time: head.time,
                    ledger: head.event_ledger,
                    job,
                    pause,
                })
            })
            .collect()
    }
}
