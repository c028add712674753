//! Locks and fences: how a writer takes a claim, the rows it holds, or a
//! job, and checks it still may write.
//!
//! The order is always the claim, then its job, then its rows; a writer
//! holding a claim that is no longer live, or no longer its job's
//! (`jobs.claim_token`), is refused here before it writes anything.

use crate::types::{ClaimState, ClaimedRow, Time};
use crate::{Result, StoreError};
use sqlx::{Postgres, Transaction};
use std::time::Duration;
use tally_core::job::{self, JobEvent, JobRefusal, JobState};
use tally_core::names;
use tally_core::status::{PerBudget, RowStatus};
use tally_core::transition::RowState;
use uuid::Uuid;

#[derive(sqlx::FromRow)]
pub(crate) struct LockedClaim {
    pub token: Uuid,
    pub state: i16,
    pub live: bool,
    pub job_id: Option<i64>,
    pub now: Time,
    /// The rows the claim holds.
    pub row_ids: Vec<i64>,
    pub model: String,
    /// The lane's code.
    pub lane: i16,
}

impl LockedClaim {
    /// Active and within its lease.
    pub fn is_live(&self) -> bool {
        ClaimState::from_code(self.state) == ClaimState::Active && self.live
    }
}

/// A row as read for a decision: its counters and the claim that settled it
/// last. Locked when [`lock_held_rows`] read it; only read when a report
/// looks at rows its claim does not hold (to answer STALE or DUPLICATE), or
/// when the claim cache remembers it as the claim found it.
#[derive(sqlx::FromRow, Clone, Debug)]
pub(crate) struct RowSnapshot {
    pub id: i64,
    pub key: String,
    pub provider_failures: i32,
    pub content_failures: i32,
    pub infra_failures: i32,
    pub attempts: i32,
    pub last_claim_id: Option<Uuid>,
}

impl RowSnapshot {
    /// A row as the claim statement took it (no claim before this one).
    pub fn taken(id: i64, row: &ClaimedRow) -> Self {
        RowSnapshot {
            id,
            key: row.key.clone(),
            provider_failures: row.failures.provider as i32,
            content_failures: row.failures.content as i32,
            infra_failures: row.failures.infra as i32,
            attempts: row.total as i32,
            last_claim_id: None,
        }
    }

    /// The row as the claim holding it sees it: RUNNING.
    pub fn held_state(&self) -> RowState {
        RowState {
            status: RowStatus::Running,
            failures: PerBudget::new(
                self.provider_failures as u32,
                self.content_failures as u32,
                self.infra_failures as u32,
            ),
            total: self.attempts as u32,
        }
    }
}

pub(crate) const ROW_SNAPSHOT_COLUMNS: &str = "id, key, provider_failures, content_failures, \
     infra_failures, attempts, last_claim_id";

/// Loads and locks a claim of a ledger; NOT_FOUND when there is none.
pub(crate) async fn lock_claim(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    ledger: &str,
    token: Uuid,
) -> Result<LockedClaim> {
    sqlx::query_as::<_, LockedClaim>(
        "SELECT token, state, expire_time > now() AS live, job_id, now() AS now, row_ids, model,
                lane
         FROM claims WHERE token = $1 AND ledger_id = $2 FOR UPDATE",
    )
    .bind(token)
    .bind(ledger_id)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or_else(|| StoreError::not_found("claim", format!("ledgers/{ledger}/claims/{token}")))
}

/// Loads and locks the rows a claim still holds (optionally only `keys`).
/// The caller holds the claim's lock.
pub(crate) async fn lock_held_rows(
    tx: &mut Transaction<'static, Postgres>,
    token: Uuid,
    keys: Option<&[String]>,
) -> Result<Vec<RowSnapshot>> {
    let sql = format!(
        "SELECT {ROW_SNAPSHOT_COLUMNS} FROM rows
         WHERE id = ANY((SELECT row_ids FROM claims WHERE token = $1)::int8[])
           AND ($2::text[] IS NULL OR key = ANY($2))
         ORDER BY id FOR UPDATE"
    );
    Ok(sqlx::query_as::<_, RowSnapshot>(sqlx::AssertSqlSafe(sql))
        .bind(token)
        .bind(keys)
        .fetch_all(&mut **tx)
        .await?)
}

/// FAILED_PRECONDITION unless the claim is active and within its lease.
/// The message names the claim as logs show it: callers log these
/// refusals, and the whole id authorizes the claim's reports.
pub(crate) fn check_live(claim: &LockedClaim, ledger: &str) -> Result<()> {
    let name =
        tally_core::names::claim_for_logs(&format!("ledgers/{ledger}/claims/{}", claim.token));
    match (ClaimState::from_code(claim.state), claim.live) {
        (ClaimState::Active, true) => Ok(()),
        (ClaimState::Done, _) => Err(StoreError::precondition(
            "CLAIM_DONE",
            format!("{name} holds no rows any more (every row was reported or released)"),
        )),
        _ => Err(StoreError::precondition(
            "CLAIM_EXPIRED",
            format!("{name} lost its lease; its rows were or will be rescued"),
        )),
    }
}

/// A job as the store locks it for a change.
#[derive(sqlx::FromRow)]
pub(crate) struct LockedJob {
    pub id: i64,
    pub public_id: String,
    pub claim_token: Uuid,
    pub state: i16,
    pub closed: bool,
    pub batch: Option<String>,
    pub input_file: String,
    pub final_state: Option<i16>,
}

impl LockedJob {
    pub fn state(&self) -> Result<JobState> {
        JobState::from_code(self.state).ok_or_else(|| {
            StoreError::Internal(format!("job {} has state {}", self.public_id, self.state))
        })
    }

    /// Checks that an update of this job guarded by `end_time IS NULL`
    /// wrote it (`n` rows): under the job's lock it cannot have closed, so
    /// anything else is a bug.
    pub fn wrote_open(&self, n: u64) -> Result<()> {
        if n == 1 {
            return Ok(());
        }
        Err(StoreError::Internal(format!(
            "job {} closed under its lock",
            self.public_id
        )))
    }

    pub fn step(&self, event: JobEvent, ledger: &str) -> Result<job::JobTransition> {
        job::step(self.state()?, self.closed, event)
            .map_err(|r| refused(&r, &names::job_name(ledger, &self.public_id)))
    }
}

const LOCKED_JOB: &str = "SELECT id, public_id, claim_token, state, end_time IS NOT NULL AS closed, \
     batch, input_file, final_state FROM jobs";

/// Locks a job by its id.
pub(crate) async fn lock_job_by_id(
    tx: &mut Transaction<'static, Postgres>,
    id: i64,
) -> Result<LockedJob> {
    let sql = format!("{LOCKED_JOB} WHERE id = $1 FOR UPDATE");
    sqlx::query_as::<_, LockedJob>(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?
        .ok_or_else(|| StoreError::Internal(format!("job {id} vanished")))
}

async fn lock_job(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    ledger: &str,
    public_id: &str,
) -> Result<LockedJob> {
    let sql = format!("{LOCKED_JOB} WHERE ledger_id = $1 AND public_id = $2 FOR UPDATE");
    sqlx::query_as::<_, LockedJob>(sqlx::AssertSqlSafe(sql))
        .bind(ledger_id)
        .bind(public_id)
        .fetch_optional(&mut **tx)
        .await?
        .ok_or_else(|| StoreError::not_found("job", names::job_name(ledger, public_id)))
}

/// Locks a job's claim, then the job (JobService's order), and checks that
/// the claim presented is the one fencing the job now.
pub(crate) async fn lock_fenced(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    ledger: &str,
    public_id: &str,
    token: Uuid,
) -> Result<(LockedClaim, LockedJob)> {
    let claim = lock_claim(tx, ledger_id, ledger, token).await?;
    let job = lock_job(tx, ledger_id, ledger, public_id).await?;
    if job.claim_token != token {
        return Err(not_the_jobs_claim(ledger, token, &job));
    }
    Ok((claim, job))
}

/// The id of job `public_id`, locked, when `token` is its claim (see
/// `lock_fenced`).
pub(crate) async fn lock_fenced_job(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    ledger: &str,
    public_id: &str,
    token: Uuid,
) -> Result<i64> {
    Ok(lock_fenced(tx, ledger_id, ledger, public_id, token)
        .await?
        .1
        .id)
}

/// A refusal of the job state machine as FAILED_PRECONDITION.
pub(crate) fn refused(r: &JobRefusal, job: &str) -> StoreError {
    StoreError::precondition(r.reason(), format!("{job}: {r}"))
}

/// The claim presented is not the one fencing the job now.
fn not_the_jobs_claim(ledger: &str, token: Uuid, job: &LockedJob) -> StoreError {
    StoreError::precondition(
        "NOT_JOB_CLAIM",
        format!(
            "{} does not fence {} (the job was adopted by another worker, or the claim is another job's)",
            names::claim_name(ledger, &token.to_string()),
            names::job_name(ledger, &job.public_id)
        ),
    )
}
/// A lease asked for (or the default), in milliseconds for SQL.
pub(crate) fn lease_ms(lease: Option<Duration>, default: Duration) -> i64 {
    lease.unwrap_or(default).as_millis().min(i64::MAX as u128) as i64
}
