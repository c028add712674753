//! Moving the job behind an operation on, in the ingesting transaction.
//!
//! An operation is linked to the job whose `batch` is its normalized name
//! (`jobs.batch` is UNIQUE; MarkSubmitted records it before the worker does
//! anything else with the batch). When the reducer applies a state, the job
//! follows, only forward, guarded by the job state read under lock, and
//! only while the job is open and submitted:
//!
//! - RUNNING: a SUBMITTED job becomes RUNNING;
//! - SUCCEEDED: the job becomes SUCCEEDED, i.e. ready to reconcile: it
//!   stays open, its rows untouched, until the worker downloads the output,
//!   reports the rows and closes it with FinishJob (rows missing from the
//!   output are settled there). The operation's output file is recorded if
//!   the job had none;
//! - FAILED / CANCELLED / EXPIRED: there is nothing to reconcile, so the job
//!   is settled here as FinishJob would settle it: every row its claim
//!   still holds goes through the row state machine's `Event::JobFailed`
//!   (RETRYABLE with rule `job_failed`, an infra attempt recorded with the
//!   job; PERMANENT at the infra cap), written by the shared row writer;
//!   the job takes the batch's final state with the operation's error, its
//!   counts and summary line, and an end time; its claim is done. All of it
//!   in the transaction that changes the operation: both happen or neither.
//!
//! Lock order is the store's usual one: job, then claim, then rows (the
//! operation row, locked by the compare-and-swap, is taken before all of
//! them and nothing locks a job before an operation).
//!
//! This is written against the `jobs` table of migration 0002 directly,
//! because JobService's store module is being built in parallel; when it
//! lands, [`move_linked_job`] should step the job with its state machine
//! (`ProviderRunning` / `ProviderFinished`), settle a failed batch through
//! its FinishJob path (which closes the job RECONCILED with the final state
//! beside it) and append the job event, instead of repeating them here.

use crate::apply;
use crate::claims::{self, LockedRow};
use crate::ledgers;
use crate::{Result, StoreError};
use sqlx::{Postgres, Transaction};
use tally_core::operation::OpState;
use tally_core::status::RowStatus;
use tally_core::summary::{JobCounts, job_line};
use tally_core::transition::Event;
use uuid::Uuid;

/// What an applied operation state did to its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobMove {
    /// `ledgers/{ledger}/jobs/{job}`.
    pub job: String,
    /// Job state codes (the `tally.v1.JobState` numbers).
    pub from: i16,
    pub to: i16,
    /// Rows the job's claim still held that came back RETRYABLE, and those
    /// that hit their infra cap and became PERMANENT.
    pub rows_retryable: i64,
    pub rows_permanent: i64,
}

/// Job states (migration 0002).
const SUBMITTED: i16 = 2;
const RUNNING: i16 = 3;
const SUCCEEDED: i16 = 4;
const FAILED: i16 = 5;
const CANCELLED: i16 = 6;
const EXPIRED: i16 = 7;

#[derive(sqlx::FromRow)]
struct LinkedJob {
    id: i64,
    public_id: String,
    ledger_id: i64,
    ledger: String,
    claim_token: Uuid,
    state: i16,
}

/// Moves the job linked to operation `name` after `state` was applied to
/// it. `None` when no job is linked or the job does not move (not yet
/// submitted, already at or past where the operation would take it, or
/// closed).
pub(super) async fn move_linked_job(
    tx: &mut Transaction<'static, Postgres>,
    name: &str,
    state: OpState,
) -> Result<Option<JobMove>> {
    let (target, movable_from): (i16, &[i16]) = match state {
        OpState::Running => (RUNNING, &[SUBMITTED]),
        OpState::Succeeded => (SUCCEEDED, &[SUBMITTED, RUNNING]),
        OpState::Failed => (FAILED, &[SUBMITTED, RUNNING]),
        OpState::Cancelled => (CANCELLED, &[SUBMITTED, RUNNING]),
        OpState::Expired => (EXPIRED, &[SUBMITTED, RUNNING]),
        OpState::Pending | OpState::Unknown => return Ok(None),
    };
    let job = sqlx::query_as::<_, LinkedJob>(
        "SELECT j.id, j.public_id, j.ledger_id, l.name AS ledger, j.claim_token, j.state
         FROM jobs j JOIN ledgers l ON l.id = j.ledger_id
         WHERE j.batch = $1 AND j.end_time IS NULL
         FOR UPDATE OF j",
    )
    .bind(name)
    .fetch_optional(&mut **tx)
    .await?;
    let Some(job) = job else {
        return Ok(None);
    };
    if !movable_from.contains(&job.state) {
        return Ok(None);
    }
    let (rows_retryable, rows_permanent) = match state {
        OpState::Running | OpState::Succeeded => {
            advance(tx, &job, target).await?;
            (0, 0)
        }
        OpState::Failed | OpState::Cancelled | OpState::Expired => {
            settle_failed_job(tx, &job, target, state).await?
        }
        OpState::Pending | OpState::Unknown => return Ok(None),
    };
    let moved = JobMove {
        job: format!("ledgers/{}/jobs/{}", job.ledger, job.public_id),
        from: job.state,
        to: target,
        rows_retryable,
        rows_permanent,
    };
    tracing::info!(
        operation = %name,
        job = %moved.job,
        from = moved.from,
        to = moved.to,
        rows_retryable,
        rows_permanent,
        "job moved by its operation"
    );
    Ok(Some(moved))
}

/// RUNNING or SUCCEEDED: the job's state (and the output file), nothing
/// else; the job stays open.
async fn advance(tx: &mut Transaction<'static, Postgres>, job: &LinkedJob, to: i16) -> Result<()> {
    let moved = sqlx::query(
        "UPDATE jobs j SET state = $3,
                output_file = CASE WHEN $3 = 4 AND j.output_file = '' THEN o.output_file
                                   ELSE j.output_file END,
                update_time = now()
         FROM operations o
         WHERE j.id = $1 AND j.state = $2 AND j.end_time IS NULL AND o.name = j.batch",
    )
    .bind(job.id)
    .bind(job.state)
    .bind(to)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if moved != 1 {
        return Err(StoreError::Internal(format!(
            "job {} changed under its lock",
            job.public_id
        )));
    }
    Ok(())
}

/// FAILED, CANCELLED or EXPIRED: every row the job's claim still holds goes
/// through `Event::JobFailed`, the claim is done, and the job ends with the
/// batch's state, error, counts and summary. Returns how many rows became
/// RETRYABLE and PERMANENT.
async fn settle_failed_job(
    tx: &mut Transaction<'static, Postgres>,
    job: &LinkedJob,
    to: i16,
    state: OpState,
) -> Result<(i64, i64)> {
    let error: String = sqlx::query_scalar(
        "SELECT coalesce(nullif(concat_ws(': ', nullif(error_code, ''), nullif(error_message, '')),
                                ''),
                         'the batch ended ' || lower($2))
         FROM operations o JOIN jobs j ON j.batch = o.name WHERE j.id = $1",
    )
    .bind(job.id)
    .bind(state.as_str())
    .fetch_one(&mut **tx)
    .await?;

    // Claim before rows, as reports lock them.
    sqlx::query("SELECT 1 FROM claims WHERE token = $1 FOR UPDATE")
        .bind(job.claim_token)
        .execute(&mut **tx)
        .await?;
    let rows: Vec<LockedRow> = claims::lock_held_rows(tx, job.claim_token, None).await?;
    let mut writes = Vec::new();
    if !rows.is_empty() {
        let ledger = ledgers::load(&mut **tx, &job.ledger).await?;
        writes = claims::transitions(&rows, &Event::JobFailed, &ledger.policy, |_| {
            Some("system".to_string())
        })?;
        let why = format!(
            "the job carrying the row ended {}: {error}",
            state.as_str().to_lowercase()
        );
        for write in &mut writes {
            write.last_error = Some(why.clone());
            if let Some(attempt) = write.attempt.as_mut() {
                attempt.job_id = Some(job.id);
                attempt.error = why.clone();
            }
        }
        apply::settle(tx, job.ledger_id, job.claim_token, &writes).await?;
    }
    sqlx::query("UPDATE claims SET state = 2, held = 0 WHERE token = $1 AND state = 1")
        .bind(job.claim_token)
        .execute(&mut **tx)
        .await?;
    let count = |status| writes.iter().filter(|w| w.status == status).count() as i32;
    let (retryable, permanent) = (count(RowStatus::Retryable), count(RowStatus::Permanent));
    let ended: Option<(i32, i32, i32, i32, i32)> = sqlx::query_as(
        "UPDATE jobs SET state = $3, error = $4, retryable = retryable + $5,
                permanent = permanent + $6, end_time = now(), update_time = now()
         WHERE id = $1 AND state = $2 AND end_time IS NULL
         RETURNING row_count, succeeded, retryable, permanent, missing",
    )
    .bind(job.id)
    .bind(job.state)
    .bind(to)
    .bind(&error)
    .bind(retryable)
    .bind(permanent)
    .fetch_optional(&mut **tx)
    .await?;
    let Some((rows_n, succeeded, retryable_n, permanent_n, missing)) = ended else {
        return Err(StoreError::Internal(format!(
            "job {} changed under its lock",
            job.public_id
        )));
    };
    let summary = job_line(&JobCounts {
        rows: i64::from(rows_n),
        succeeded: i64::from(succeeded),
        retryable: i64::from(retryable_n),
        permanent: i64::from(permanent_n),
        missing: i64::from(missing),
    });
    sqlx::query("UPDATE jobs SET summary = $2 WHERE id = $1")
        .bind(job.id)
        .bind(&summary)
        .execute(&mut **tx)
        .await?;
    Ok((i64::from(retryable), i64::from(permanent)))
}
