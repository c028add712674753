//! A lost create that cannot be resolved within its search's bound, on the
//! job for operators to see (FlagCreateUnresolved), and the count of such
//! jobs for the metrics.

use crate::fence::lock_fenced;
use crate::job_view::load_job;
use crate::types::JobRecord;
use crate::{Result, Store, StoreError};
use tally_core::job::JobState;
use uuid::Uuid;

impl Store {
    /// Marks CREATING job `public_id` (fenced by `token`) as a lost create
    /// its search cannot resolve, with `reason`; the first time is kept.
    /// FAILED_PRECONDITION for a job that is not CREATING (or is closed).
    pub async fn flag_create_unresolved(
        &self,
        ledger: &str,
        public_id: &str,
        token: Uuid,
        reason: &str,
    ) -> Result<JobRecord> {
        let record = self.ledger(ledger).await?;
        let mut tx = self.begin().await?;
        let out = async {
            let (_, job) = lock_fenced(&mut tx, record.id, ledger, public_id, token).await?;
            let state = job.state()?;
            if job.closed || state != JobState::Creating {
                return Err(StoreError::precondition(
                    "JOB_NOT_CREATING",
                    format!(
                        "ledgers/{ledger}/jobs/{public_id} is {state}: only a CREATING job's create can be unresolved"
                    ),
                ));
            }
            sqlx::query(
                "UPDATE jobs SET create_unresolved = $2,
                        create_unresolved_time = coalesce(create_unresolved_time, now()),
                        update_time = now()
                 WHERE id = $1",
            )
            .bind(job.id)
            .bind(reason)
            .execute(&mut *tx)
            .await?;
            tracing::warn!(ledger, job = public_id, reason, "a lost create cannot be resolved within its search's bound; its rows stay held");
            load_job(&mut *tx, job.id).await
        }
        .await;
        crate::end_tx(tx, out).await
    }
}

/// Clears a job's unresolved mark: its search has ended.
pub(crate) async fn clear(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    job_id: i64,
) -> Result<()> {
    sqlx::query(
        "UPDATE jobs SET create_unresolved = NULL, create_unresolved_time = NULL
         WHERE id = $1 AND create_unresolved IS NOT NULL",
    )
    .bind(job_id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
