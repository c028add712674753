//! The job read model: one job as GetJob, ListJobs and the job event log
//! show it (its ledger's name and its claim's lease joined in).

use crate::types::{JobRecord, Time};
use crate::{Result, StoreError};
use sqlx::{Executor, Postgres};
use tally_core::job::{FinalState, JobState};
use tally_core::summary::JobCounts;
use uuid::Uuid;

/// A job with its ledger's name and its claim's lease, as one row.
pub(crate) const JOB_SELECT: &str = "SELECT j.id, j.public_id, j.ledger_id, l.name AS ledger, \
     j.claim_token, j.state, j.final_state, j.model, j.owner, j.batch, j.input_file, \
     j.output_file, j.error, j.adoptions, j.row_count, j.succeeded, j.retryable, j.permanent, \
     j.missing, CASE WHEN j.end_time IS NULL THEN coalesce(c.held, 0) ELSE 0 END AS unreported, \
     CASE WHEN j.end_time IS NULL THEN c.expire_time END AS lease_expire_time, \
     j.create_time, j.submit_time, j.end_time, j.update_time, j.create_attempt_time, \
     j.provider_account, j.create_unresolved, j.create_unresolved_time \
     FROM jobs j JOIN ledgers l ON l.id = j.ledger_id LEFT JOIN claims c ON c.token = j.claim_token";

/// The columns of [`JOB_SELECT`] with their types, for reading a stored
/// snapshot (`to_jsonb` of that row) back with `jsonb_to_record`.
pub(crate) const JOB_RECORD_COLUMNS: &str = "id int8, public_id text, ledger_id int8, \
     ledger text, claim_token uuid, state int2, final_state int2, model text, owner text, \
     batch text, input_file text, output_file text, error text, adoptions int4, row_count int4, \
     succeeded int4, retryable int4, permanent int4, missing int4, unreported int4, \
     lease_expire_time timestamptz, create_time timestamptz, submit_time timestamptz, \
     end_time timestamptz, update_time timestamptz, create_attempt_time timestamptz, \
     provider_account text, create_unresolved text, create_unresolved_time timestamptz";

#[derive(sqlx::FromRow)]
pub(crate) struct JobRow {
    id: i64,
    public_id: String,
    ledger: String,
    claim_token: Uuid,
    state: i16,
    final_state: Option<i16>,
    model: String,
    owner: String,
    batch: Option<String>,
    input_file: String,
    output_file: String,
    error: String,
    adoptions: i32,
    row_count: i32,
    succeeded: i32,
    retryable: i32,
    permanent: i32,
    missing: i32,
    unreported: i32,
    lease_expire_time: Option<Time>,
    create_time: Time,
    submit_time: Option<Time>,
    end_time: Option<Time>,
    update_time: Time,
    create_attempt_time: Option<Time>,
    /// NULL in snapshots stored before the column existed.
    provider_account: Option<String>,
    create_unresolved: Option<String>,
    create_unresolved_time: Option<Time>,
}

impl JobRow {
    pub(crate) fn into_record(self) -> Result<JobRecord> {
        let state = JobState::from_code(self.state).ok_or_else(|| {
            StoreError::Internal(format!("job {} has state {}", self.public_id, self.state))
        })?;
        Ok(JobRecord {
            id: self.id,
            public_id: self.public_id,
            ledger: self.ledger,
            claim: self.claim_token,
            state,
            final_state: self
                .final_state
                .and_then(JobState::from_code)
                .and_then(FinalState::from_state),
            model: self.model,
            owner: self.owner,
            batch: self.batch,
            input_file: self.input_file,
            output_file: self.output_file,
            error: self.error,
            adoptions: self.adoptions,
            counts: JobCounts {
                rows: i64::from(self.row_count),
                succeeded: i64::from(self.succeeded),
                retryable: i64::from(self.retryable),
                permanent: i64::from(self.permanent),
                missing: i64::from(self.missing),
            },
            unreported: self.unreported,
            create_time: self.create_time,
            submit_time: self.submit_time,
            end_time: self.end_time,
            update_time: self.update_time,
            lease_expire_time: self.lease_expire_time,
            create_attempt_time: self.create_attempt_time,
            provider_account: self.provider_account.unwrap_or_default(),
            create_unresolved: self.create_unresolved,
            create_unresolved_time: self.create_unresolved_time,
            golden: Vec::new(),
            closed_now: false,
        })
    }
}

pub(crate) async fn load_job<'e, E: Executor<'e, Database = Postgres>>(
    exec: E,
    id: i64,
) -> Result<JobRecord> {
    let sql = format!("{JOB_SELECT} WHERE j.id = $1");
    sqlx::query_as::<_, JobRow>(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(exec)
        .await?
        .ok_or_else(|| StoreError::Internal(format!("job {id} vanished")))?
        .into_record()
}
