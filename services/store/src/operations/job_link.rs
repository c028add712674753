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
    let error = if state.is_terminal() && state != OpState::Succeeded {
        operation_error(tx, name, state).await?
    } else {
        String::new()
    };
    jobs::follow_provider(tx, name, event, &error, source.as_str()).await
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
