//! Moving the job behind an operation on, in the ingesting transaction.
//!
//! An operation is linked to the job whose `batch` is its normalized name
//! (`jobs.batch` is UNIQUE and normalized by MarkSubmitted, which records it
//! before the worker does anything else with the batch). When the reducer
//! applies a state, JobService's own [`jobs::follow_provider`] moves the
//! job with its state machine, inside the operation's transaction, so the
//! operation and its job change together or not at all:
//!
//! - RUNNING (`ProviderRunning`): a SUBMITTED job becomes RUNNING;
//! - SUCCEEDED (`ProviderFinished(Succeeded)`): the job becomes SUCCEEDED,
//!   ready to reconcile; its rows wait for the worker's reports and
//!   FinishJob (which settles any missing from the output);
//! - FAILED / CANCELLED / EXPIRED: the job takes that state and every row
//!   its claim still holds comes back through `Event::JobFailed`
//!   (RETRYABLE with rule `job_failed`, an infra attempt recorded with the
//!   job; PERMANENT at the infra cap), with the operation's error; the
//!   owner's FinishJob later closes the job with nothing left to settle.
//!   When the operation names a responses file (partial output), the rows
//!   stay with the job instead: the owner reports the answered ones and
//!   its FinishJob returns the rest.
//!
//! Each move appends a STATE_CHANGED job event (WatchJobs). Locks: the
//! operation row (the compare-and-swap) first, then JobService's order
//! (claim, job, rows), then the job event lock, and the operation event
//! lock last; every ingest takes them in this order and nothing takes the
//! operation row after a job's, so they cannot deadlock.

use crate::jobs::{self, ProviderMove};
use crate::{Result, operations::EventSource};
use sqlx::{Postgres, Transaction};
use tally_core::job::{FinalState, JobEvent};
use tally_core::operation::OpState;

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
    let (error, partial_output) = if unsuccessful {
        (
            operation_error(tx, name, state).await?,
            has_output(tx, name).await?,
        )
    } else {
        (String::new(), false)
    };
    jobs::follow_provider(tx, name, event, &error, source.as_str(), partial_output).await
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

/// Whether the operation names a responses file (a batch that failed or
/// was cancelled part-way may have answered some rows).
async fn has_output(tx: &mut Transaction<'static, Postgres>, name: &str) -> Result<bool> {
    Ok(
        sqlx::query_scalar("SELECT output_file <> '' FROM operations WHERE name = $1")
            .bind(name)
            .fetch_optional(&mut **tx)
            .await?
            .unwrap_or(false),
    )
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
