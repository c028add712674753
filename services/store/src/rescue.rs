//! Rescue: rows of claims whose lease ran out go back to the queue (or a
//! never-submitted job is abandoned), so a dead worker loses no row.

use crate::codes::{CLAIM_ACTIVE, Fragment, JOB_PREPARING};
use crate::fence::lock_held_rows;
use crate::results::Finished;
use crate::settle::{self, Settler, transitions};
use crate::types::{ClaimState, JobEventKind, Rescued};
use crate::{Result, Store, abandon, events, fence, ledgers};
use std::sync::LazyLock;
use tally_core::job::JobEvent;
use tally_core::names::claim_for_logs;
use tally_core::transition::Event;
use uuid::Uuid;

/// Claims rescued per call of [`Store::rescue_expired`].
const RESCUE_BATCH: i64 = 50;

/// The condition "claim `c` ran out of lease and waits to be rescued"
/// (claims of submitted jobs wait for adoption instead). The claim
/// statement checks it too, to rescue before it takes.
pub(crate) static RESCUE_DUE: Fragment = Fragment::new(|| {
    format!(
        "c.state = {CLAIM_ACTIVE} AND c.expire_time <= now()
         AND (c.job_id IS NULL OR EXISTS (
             SELECT 1 FROM jobs j WHERE j.id = c.job_id AND j.state = {JOB_PREPARING}
                                    AND j.end_time IS NULL))"
    )
});

impl Store {
    /// Rescues rows of claims whose lease ran out. Rows of a claim without
    /// a job count an infra attempt (`lease_expired`) and become RETRYABLE,
    /// or PERMANENT at the cap. A claim whose job is still PREPARING never
    /// sent its rows: they go back without an attempt and the job is
    /// abandoned (CANCELLED). Claims of submitted jobs are left alone: their
    /// rows are at the provider and wait for AdoptJobs. Claims are taken
    /// with SKIP LOCKED, so replicas share the work.
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.rescue_expired",
        skip_all
    )]
    pub async fn rescue_expired(&self, ledger_id: Option<i64>) -> Result<Rescued> {
        let mut tx = self.begin().await?;
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT c.token, c.ledger_id, l.name, c.job_id
                 FROM claims c JOIN ledgers l ON l.id = c.ledger_id AND l.delete_time IS NULL
                 WHERE {RESCUE_DUE} AND ($1::int8 IS NULL OR c.ledger_id = $1)
                 ORDER BY c.expire_time LIMIT $2
                 FOR UPDATE OF c SKIP LOCKED"
            )
        });
        let expired: Vec<(Uuid, i64, String, Option<i64>)> =
            sqlx::query_as(sqlx::AssertSqlSafe(SQL.as_str()))
                .bind(ledger_id)
                .bind(RESCUE_BATCH)
                .fetch_all(&mut *tx)
                .await?;
        let mut out = Rescued::default();
        let mut abandoned = Vec::new();
        let mut finished = Finished::default();
        for (token, ledger_id, ledger, job_id) in expired {
            let record = ledgers::load(&mut *tx, &ledger).await?;
            if let Some(job_id) = job_id {
                // Re-read under the lock: the job may have been submitted
                // since the candidates were chosen; then it waits for
                // adoption.
                let job = fence::lock_job_by_id(&mut tx, job_id).await?;
                if job.step(JobEvent::Abandon, &ledger).is_err() {
                    continue;
                }
                let n = abandon::abandon(
                    &mut tx,
                    &record,
                    token,
                    &job,
                    ClaimState::Expired,
                    "cancelled before submission: its owner's lease expired; its rows were released without an attempt",
                )
                .await?;
                tracing::info!(ledger = %ledger, job = %job.public_id, rows = n, "abandoned a job that was never submitted");
                out.abandoned_jobs += 1;
                out.released_rows += n;
                abandoned.push((job_id, JobEventKind::StateChanged));
                continue;
            }
            let rows = lock_held_rows(&mut tx, token, None).await?;
            let writes = transitions(
                &rows,
                &Event::LeaseExpired { counted: true },
                &record.policy,
            )?;
            settle::settle_logged(
                &mut tx,
                ledger_id,
                token,
                &writes,
                Settler::SYSTEM,
                &mut finished,
            )
            .await?;
            sqlx::query("UPDATE claims SET state = $2 WHERE token = $1")
                .bind(token)
                .bind(ClaimState::Expired.code())
                .execute(&mut *tx)
                .await?;
            self.claim_cache.forget(token);
            out.rows += writes.len();
            if !writes.is_empty() {
                tracing::info!(ledger = %ledger, claim = %claim_for_logs(&token.to_string()), rows = writes.len(), "rescued rows of an expired claim");
            }
        }
        events::append(&mut tx, &abandoned, "system").await?;
        finished.log(&mut tx).await?;
        tx.commit().await?;
        Ok(out)
    }
}
