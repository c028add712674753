//! Closing a job that never reached the provider (its owner went away, or
//! a search found no batch): its rows go back without an attempt.

use crate::Result;
use crate::fence::{self, LockedJob};
use crate::settle::{self};
use crate::types::{ClaimState, LedgerRecord};
use sqlx::{Postgres, Transaction};
use tally_core::job::JobEvent;
use uuid::Uuid;

/// Closes a PREPARING job whose owner went away: its claim's rows go back
/// without an attempt (the batch was never sent), the claim expires, the
/// job is CANCELLED with `why`. The caller holds the claim's and the job's
/// locks and appends the returned event. Returns the rows released.
pub(crate) async fn abandon(
    tx: &mut Transaction<'static, Postgres>,
    ledger: &LedgerRecord,
    token: Uuid,
    job: &LockedJob,
    claim_state: ClaimState,
    why: &str,
) -> Result<usize> {
    close_unsent(tx, ledger, token, job, JobEvent::Abandon, claim_state, why).await
}

/// Closes a job whose batch does not exist (`Abandon`, or `NotCreated`
/// after a search): rows back without an attempt, claim to `claim_state`,
/// job CANCELLED with `why`. Returns the rows released.
pub(crate) async fn close_unsent(
    tx: &mut Transaction<'static, Postgres>,
    ledger: &LedgerRecord,
    token: Uuid,
    job: &LockedJob,
    event: JobEvent,
    claim_state: ClaimState,
    why: &str,
) -> Result<usize> {
    let t = job.step(event, &ledger.name)?;
    let rows = fence::lock_held_rows(tx, token, None).await?;
    let writes = settle::transitions(
        &rows,
        &tally_core::transition::Event::LeaseExpired { counted: false },
        &ledger.policy,
    )?;
    settle::settle(tx, ledger.id, token, &writes, settle::Settler::SYSTEM).await?;
    sqlx::query("UPDATE claims SET state = $2 WHERE token = $1")
        .bind(token)
        .bind(claim_state.code())
        .execute(&mut **tx)
        .await?;
    let n = sqlx::query(
        "UPDATE jobs SET state = $2, error = $3, end_time = now(), update_time = now()
         WHERE id = $1 AND end_time IS NULL",
    )
    .bind(job.id)
    .bind(t.state.code())
    .bind(why)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    job.wrote_open(n)?;
    Ok(writes.len())
}
