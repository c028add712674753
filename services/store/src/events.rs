//! The job event log: appending events inside the transaction that changed
//! the job (or paused the ledger), and reading them back by sequence number.
//! Why sequence order is commit order, and the `NOTIFY` hint every append
//! sends, are [`crate::event_log`]'s.

use crate::codes;
use crate::event_log::{self, Log};
use crate::job_view::{JOB_RECORD_COLUMNS, JOB_SELECT, JobRow};
use crate::types::{JobEventKind, JobEventRecord, Pause, Time};
use crate::{Result, Store, StoreError};
use sqlx::{FromRow, Postgres, Transaction};
use std::sync::LazyLock;
use tally_core::pause::PauseReason;

/// Appends events for jobs changed in `tx`, in order, as of their current
/// state in `tx`. Call it as the last statement before committing. The
/// jobs' snapshots are read first; the ordering lock is then held for the
/// insert and the commit only (every job event waits for it).
pub(crate) async fn append(
    tx: &mut Transaction<'static, Postgres>,
    events: &[(i64, JobEventKind)],
    actor: &str,
) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let (ids, kinds): (Vec<i64>, Vec<i16>) =
        events.iter().map(|(id, kind)| (*id, kind.code())).unzip();
    static RENDER: LazyLock<String> = LazyLock::new(|| {
        codes::render_with(
            include_str!("queries/events/render.sql"),
            &[("JOB_SELECT", &JOB_SELECT)],
        )
    });
    type Columns = (
        Option<Vec<i64>>,
        Option<Vec<i64>>,
        Option<Vec<i16>>,
        Option<Vec<String>>,
    );
    let (ledger_ids, job_ids, types, jobs): Columns =
        sqlx::query_as(sqlx::AssertSqlSafe(RENDER.as_str()))
            .bind(&ids)
            .bind(&kinds)
            .fetch_one(&mut **tx)
            .await?;
    event_log::order(tx, Log::Jobs).await?;
    static SQL: LazyLock<String> = LazyLock::new(|| {
        codes::render_with(
            include_str!("queries/events/append.sql"),
            &[("CHANNEL", &Log::Jobs.channel())],
        )
    });
    sqlx::query(sqlx::AssertSqlSafe(SQL.as_str()))
        .bind(ledger_ids.unwrap_or_default())
        .bind(job_ids.unwrap_or_default())
        .bind(types.unwrap_or_default())
        .bind(jobs.unwrap_or_default())
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
    event_log::order(tx, Log::Jobs).await?;
    let (reason, message) = pause.map_or((None, None), |(r, m)| (Some(r.as_str()), Some(m)));
    let sql = format!(
        "WITH ins AS (
             INSERT INTO job_events (ledger_id, type, actor, ledger)
             VALUES ($1, $2, $3, jsonb_build_object('reason', $4::text, 'message', $5::text))
             RETURNING seq
         )
         SELECT pg_notify('{channel}', seq::text) FROM ins",
        channel = Log::Jobs.channel()
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

impl Store {
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
