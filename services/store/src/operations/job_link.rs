//! Moving the job behind an operation on, in the ingesting transaction.
//!
//! An operation is linked to the job whose `batch` is its normalized name
//! (`jobs.batch` is UNIQUE; MarkSubmitted records it before the worker does
//! anything else with the batch). When the reducer applies a state, the job
//! follows, only ever forward and guarded by the job state read under lock:
//!
//! - RUNNING: a SUBMITTED job becomes RUNNING;
//! - SUCCEEDED: the job becomes SUCCEEDED, i.e. ready to reconcile (the
//!   worker downloads the output and reports rows; rows missing from it are
//!   settled by FinishJob), with the operation's output file if the job had
//!   none;
//! - FAILED / CANCELLED / EXPIRED: the job takes that state with the
//!   operation's error, and every row its claim still holds comes back
//!   through the row state machine's `Event::JobFailed` (RETRYABLE with rule
//!   `job_failed`, counted against the infra budget; PERMANENT at its cap),
//!   written by the shared row writer, in the same transaction as the
//!   operation's own change: either both happen or neither does.
//!
//! Lock order is the one the rest of the store uses: job, then claim, then
//! rows.
//!
//! This is written against the `jobs` table of migration 0002 directly,
//! because JobService's store module is being built in parallel; when it
//! lands, this function should call its job settlement (the FinishJob path
//! for a failed job) and emit its job event instead of repeating them.

use crate::apply;
use crate::claims::{self, LockedRow};
use crate::ledgers;
use crate::{Result, StoreError};
use sqlx::{Postgres, Transaction};
use tally_core::operation::OpState;
use tally_core::status::RowStatus;
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
/// it. `None` when no job is linked or the job does not move (it is already
/// at or past where the operation would take it).
pub(super) async fn move_linked_job(
    tx: &mut Transaction<'static, Postgres>,
    name: &str,
    state: OpState,
) -> Result<Option<JobMove>> {
    let (target, movable_from): (i16, &[i16]) = match state {
        OpState::Running => (RUNNING, &[SUBMITTED]),
        OpState::Succeeded => (SUCCEEDED, &[1, SUBMITTED, RUNNING]),
        OpState::Failed => (FAILED, &[1, SUBMITTED, RUNNING]),
        OpState::Cancelled => (CANCELLED, &[1, SUBMITTED, RUNNING]),
        OpState::Expired => (EXPIRED, &[1, SUBMITTED, RUNNING]),
        OpState::Pending | OpState::Unknown => return Ok(None),
    };
    let job = sqlx::query_as::<_, LinkedJob>(
        "SELECT j.id, j.public_id, j.ledger_id, l.name AS ledger, j.claim_token, j.state
         FROM jobs j JOIN ledgers l ON l.id = j.ledger_id
         WHERE j.batch = $1
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
    let moved = sqlx::query(
        "UPDATE jobs j SET state = $3,
                output_file = CASE WHEN $3 = 4 AND j.output_file = '' THEN o.output_file
                                   ELSE j.output_file END,
                error = CASE WHEN $3 IN (5, 6, 7) THEN
                            coalesce(nullif(concat_ws(': ', nullif(o.error_code, ''),
                                                      nullif(o.error_message, '')), ''),
                                     'the batch ended ' || lower($4))
                        ELSE j.error END,
                end_time = CASE WHEN $3 >= 4 THEN now() ELSE j.end_time END,
                update_time = now()
         FROM operations o
         WHERE j.id = $1 AND j.state = $2 AND o.name = j.batch",
    )
    .bind(job.id)
    .bind(job.state)
    .bind(target)
    .bind(state.as_str())
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if moved != 1 {
        return Err(StoreError::Internal(format!(
            "job {} changed under its lock",
            job.public_id
        )));
    }
    let (rows_retryable, rows_permanent) = match state {
        OpState::Failed | OpState::Cancelled | OpState::Expired => {
            return_rows_of_failed_job(tx, &job).await?
        }
        OpState::Running | OpState::Succeeded | OpState::Pending | OpState::Unknown => (0, 0),
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

/// Every row the failed job's claim still holds goes through
/// `Event::JobFailed`; the claim then holds nothing. Returns how many rows
/// became RETRYABLE and PERMANENT.
async fn return_rows_of_failed_job(
    tx: &mut Transaction<'static, Postgres>,
    job: &LinkedJob,
) -> Result<(i64, i64)> {
    // Claim before rows, as reports lock them.
    sqlx::query("SELECT 1 FROM claims WHERE token = $1 FOR UPDATE")
        .bind(job.claim_token)
        .execute(&mut **tx)
        .await?;
    let rows: Vec<LockedRow> = claims::lock_held_rows(tx, job.claim_token, None).await?;
    if rows.is_empty() {
        return Ok((0, 0));
    }
    let ledger = ledgers::load(&mut **tx, &job.ledger).await?;
    let mut writes = claims::transitions(&rows, &Event::JobFailed, &ledger.policy, |_| {
        Some("system".to_string())
    })?;
    for write in &mut writes {
        if let Some(attempt) = write.attempt.as_mut() {
            attempt.job_id = Some(job.id);
        }
    }
    apply::settle(tx, job.ledger_id, job.claim_token, &writes).await?;
    claims::drop_held(tx, job.claim_token, writes.len() as i32).await?;
    let count = |status| writes.iter().filter(|w| w.status == status).count() as i64;
    let (retryable, permanent) = (count(RowStatus::Retryable), count(RowStatus::Permanent));
    sqlx::query(
        "UPDATE jobs SET retryable = retryable + $2, permanent = permanent + $3 WHERE id = $1",
    )
    .bind(job.id)
    .bind(retryable as i32)
    .bind(permanent as i32)
    .execute(&mut **tx)
    .await?;
    Ok((retryable, permanent))
}
