//! Moving the job behind an operation on, in the ingesting transaction.
//!
//! An operation is linked to the job whose `batch` is its normalized name
//! (`jobs.batch` is UNIQUE and normalized by MarkSubmitted, which records it
//! before the worker does anything else with the batch). When the reducer
//! applies a state, JobService's own [`follow_provider`] moves the
//! job with its state machine, inside the operation's transaction, so the
//! operation and its job change together or not at all:
//!
//! - RUNNING (`ProviderRunning`): a SUBMITTED job becomes RUNNING;
//! - SUCCEEDED (`ProviderFinished(Succeeded)`): the job becomes SUCCEEDED,
//!   ready to reconcile; its rows wait for the worker's reports and
//!   FinishJob (which settles any missing from the output);
//! - FAILED / CANCELLED / EXPIRED: the job takes that state and keeps its
//!   rows. The provider's first word on a batch that did not succeed says
//!   nothing about which rows it answered (a documented `batch.failed`
//!   webhook carries only the id and an error; `batch.cancelled` and
//!   `batch.expired` only the id), so no row is failed here: the owner
//!   reads the batch (GET), reports what its responses file answered, and
//!   its FinishJob returns the rest (`job_failed`). An owner that died is
//!   replaced by adoption, which does the same.
//!
//! Each move appends a STATE_CHANGED job event (WatchJobs). Locks: the
//! operation row (the compare-and-swap) first, then JobService's order
//! (claim, job, rows), then the job event lock, and the operation event
//! lock last; every ingest takes them in this order and nothing takes the
//! operation row after a job's, so they cannot deadlock.

use crate::fence::lock_job_by_id;
use crate::types::JobEventKind;
use crate::{Result, StoreError, events, operations::EventSource};
use sqlx::{Postgres, Transaction};
use tally_core::job::{self, FinalState, JobEvent, JobState};
use tally_core::names;
use tally_core::operation::OpState;
use uuid::Uuid;

/// Moves the job linked to operation `name` after `state` was applied to
/// it. `None` when no job is linked or it does not move (not submitted,
/// already there, closed, or another terminal state came first).
pub(super) async fn move_linked_job(
    tx: &mut Transaction<'static, Postgres>,
    name: &str,
    state: OpState,
    source: EventSource,
) -> Result<Option<ProviderMove>> {
    let event = match state {
        OpState::Running => JobEvent::ProviderRunning,
        OpState::Succeeded => JobEvent::ProviderFinished(FinalState::Succeeded),
        OpState::Failed => JobEvent::ProviderFinished(FinalState::Failed),
        OpState::Cancelled => JobEvent::ProviderFinished(FinalState::Cancelled),
        OpState::Expired => JobEvent::ProviderFinished(FinalState::Expired),
        OpState::Pending | OpState::Unknown => return Ok(None),
    };
    let unsuccessful = state.is_terminal() && state != OpState::Succeeded;
    let error = if unsuccessful {
        operation_error(tx, name, state).await?
    } else {
        String::new()
    };
    follow_provider(tx, name, event, &error, source.as_str()).await
}

/// Catches a job just recorded with `batch` (MarkSubmitted) up with what
/// the provider already reported about it: a batch made by a create whose
/// answer was lost, or by an owner that died, may have run (even finished)
/// before it was recorded, and its events then moved no job. Called in
/// MarkSubmitted's transaction, which holds the job's claim and the job.
///
/// The operation row is locked here, after the job, against the usual
/// order; this cannot deadlock: an ingest that holds the operation finds
/// its job by `jobs.batch`, which is not visible until this transaction
/// commits, so it never waits for this job's locks. With the row locked,
/// an ingest either committed before (its state is read here) or waits and
/// then finds the job linked and moves it itself.
///
/// One order escapes the lock: the batch's first event, whose ingest
/// creates the operation row while this transaction is open. Neither sees
/// the other (no row to lock here; no link visible there), and the job
/// stays behind its operation. Every later event of that batch (the
/// owner's next poll, a repeated webhook) is then dropped as stale or
/// duplicate, and a drop catches the linked job up with the operation's
/// state ([`move_linked_job`]): the job moves a poll late instead of
/// never.
pub(crate) async fn catch_up(
    tx: &mut Transaction<'static, Postgres>,
    batch: &str,
) -> Result<Option<ProviderMove>> {
    let code: Option<i16> =
        sqlx::query_scalar("SELECT state FROM operations WHERE name = $1 FOR UPDATE")
            .bind(batch)
            .fetch_optional(&mut **tx)
            .await?;
    let Some(code) = code else {
        return Ok(None);
    };
    // What was learned then, by webhook or poll: recorded as the poller's.
    move_linked_job(tx, batch, super::state_from_code(code), EventSource::Poller).await
}

/// The operation's error as one line (`CODE: message`), or a plain account
/// of how the batch ended when the provider gave none.
async fn operation_error(
    tx: &mut Transaction<'static, Postgres>,
    name: &str,
    state: OpState,
) -> Result<String> {
    Ok(sqlx::query_scalar(
        "SELECT coalesce(nullif(concat_ws(': ', nullif(error_code, ''), nullif(error_message, '')),
                                ''),
                         'the batch ended ' || lower($2))
         FROM operations WHERE name = $1",
    )
    .bind(name)
    .bind(state.as_str())
    .fetch_one(&mut **tx)
    .await?)
}

/// What a provider state did to the job whose batch it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderMove {
    /// `ledgers/{ledger}/jobs/{job}`.
    pub job: String,
    pub from: JobState,
    pub to: JobState,
}

/// Moves the job whose batch is `batch` (normalized `batches/{id}`) after
/// the provider reported `event` (`ProviderRunning` or `ProviderFinished`),
/// inside the caller's transaction (the operations reducer's, so the
/// operation and its job change together). `None` when no job has that
/// batch or the job does not move (closed, already there, or a different
/// terminal state came first).
///
/// A batch that FAILED, was CANCELLED or EXPIRED keeps its rows with the
/// job (its error recorded): they are settled by the owner's FinishJob,
/// after the owner read the batch and reported what it answered. Locks are
/// taken in JobService's order: the job's claim, the job; a STATE_CHANGED
/// event is appended.
pub async fn follow_provider(
    tx: &mut Transaction<'static, Postgres>,
    batch: &str,
    event: JobEvent,
    error: &str,
    actor: &str,
) -> Result<Option<ProviderMove>> {
    for _ in 0..3 {
        let found: Option<(i64, Uuid, i16, bool)> =
            // A deleting ledger's jobs no longer move (they are purged).
            sqlx::query_as(
                "SELECT j.id, j.claim_token, j.state, j.end_time IS NOT NULL
                 FROM jobs j JOIN ledgers l ON l.id = j.ledger_id
                 WHERE j.batch = $1 AND l.delete_time IS NULL",
            )
                .bind(batch)
                .fetch_optional(&mut **tx)
                .await?;
        let Some((job_id, token, state, closed)) = found else {
            return Ok(None);
        };
        // Without a lock first: a job that would not move as it was last
        // committed never will (its states only go forward, and a closed
        // job stays closed), which spares the locks on every repeated poll.
        let moves = JobState::from_code(state)
            .and_then(|from| job::step(from, closed, event).ok().map(|t| t.state != from));
        if moves == Some(false) {
            return Ok(None);
        }
        sqlx::query("SELECT 1 FROM claims WHERE token = $1 FOR UPDATE")
            .bind(token)
            .execute(&mut **tx)
            .await?;
        let job = lock_job_by_id(tx, job_id).await?;
        if job.claim_token != token {
            // Adopted between the read and the lock: lock the new claim.
            continue;
        }
        let from = job.state()?;
        let Ok(t) = job::step(from, job.closed, event) else {
            return Ok(None);
        };
        if t.state == from {
            return Ok(None);
        }
        let ledger_name: String = sqlx::query_scalar(
            "SELECT l.name FROM jobs j JOIN ledgers l ON l.id = j.ledger_id WHERE j.id = $1",
        )
        .bind(job_id)
        .fetch_one(&mut **tx)
        .await?;
        let n = sqlx::query(
            "UPDATE jobs SET state = $2, error = CASE WHEN $3 <> '' THEN $3 ELSE error END,
                    update_time = now()
             WHERE id = $1 AND end_time IS NULL",
        )
        .bind(job_id)
        .bind(t.state.code())
        .bind(error)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        job.wrote_open(n)?;
        events::append(tx, &[(job_id, JobEventKind::StateChanged)], actor).await?;
        let moved = ProviderMove {
            job: names::job_name(&ledger_name, &job.public_id),
            from,
            to: t.state,
        };
        tracing::info!(job = %moved.job, batch = %batch, from = %from, to = %t.state, "job moved by its batch");
        return Ok(Some(moved));
    }
    Err(StoreError::Aborted(format!(
        "the job of {batch} kept changing hands; retry"
    )))
}
