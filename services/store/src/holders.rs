//! Who holds a ledger's claims: the process behind each worker name, the
//! take-over of a gone holder's claims, and the jobs a worker would wait
//! for. A take-over only ends leases early: what follows (rescue of
//! PREPARING claims, adoption of submitted jobs) is what a lease running
//! out leads to, so a holder that still runs is fenced and loses nothing.

use crate::codes::CLAIM_ACTIVE;
use crate::fence::lock_fenced;
use crate::job_view::load_job;
use crate::types::{HeldJob, JobRecord, WorkerProcess};
use crate::{Result, Store};
use std::sync::LazyLock;
use tally_core::job::JobState;
use uuid::Uuid;

/// Most holders one call may name gone, and most held jobs one answer lists.
pub const MAX_HOLDERS: usize = 100;

impl Store {
    /// Records `process` under `worker` in the ledger and ends the leases
    /// of what a gone process held: with `starting`, the claims of `worker`
    /// itself (a previous process of that name); and the claims of each
    /// worker name whose recorded process is exactly one of `gone`.
    /// Returns how many claims' leases it ended.
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.take_over",
        skip_all
    )]
    pub async fn take_over(
        &self,
        ledger: &str,
        worker: &str,
        process: &WorkerProcess,
        starting: bool,
        gone: &[WorkerProcess],
    ) -> Result<i64> {
        let record = self.ledger(ledger).await?;
        let mut tx = self.begin().await?;
        let mut names: Vec<String> = Vec::new();
        if !gone.is_empty() {
            let gone = &gone[..gone.len().min(MAX_HOLDERS)];
            let gone_names: Vec<String> = sqlx::query_scalar(
                "DELETE FROM worker_processes w
                 USING unnest($2::text[], $3::text[], $4::int8[], $5::int8[])
                       AS g(host, boot_id, pid, start_ticks)
                 WHERE w.ledger_id = $1 AND w.host = g.host AND w.boot_id = g.boot_id
                   AND w.pid = g.pid AND w.start_ticks = g.start_ticks AND w.worker <> $6
                 RETURNING w.worker",
            )
            .bind(record.id)
            .bind(gone.iter().map(|g| g.host.clone()).collect::<Vec<_>>())
            .bind(gone.iter().map(|g| g.boot_id.clone()).collect::<Vec<_>>())
            .bind(gone.iter().map(|g| g.pid).collect::<Vec<_>>())
            .bind(gone.iter().map(|g| g.start_ticks).collect::<Vec<_>>())
            .bind(worker)
            .fetch_all(&mut *tx)
            .await?;
            names.extend(gone_names);
        }
        // The previous process of this name, if another one was recorded.
        let previous: Option<bool> = sqlx::query_scalar(
            "WITH old AS (
                 SELECT host, boot_id, pid, start_ticks FROM worker_processes
                 WHERE ledger_id = $1 AND worker = $2 FOR UPDATE)
             , put AS (
                 INSERT INTO worker_processes (ledger_id, worker, host, boot_id, pid, start_ticks)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (ledger_id, worker) DO UPDATE
                     SET host = excluded.host, boot_id = excluded.boot_id, pid = excluded.pid,
                         start_ticks = excluded.start_ticks, record_time = now()
                     WHERE (worker_processes.host, worker_processes.boot_id,
                            worker_processes.pid, worker_processes.start_ticks)
                           IS DISTINCT FROM (excluded.host, excluded.boot_id,
                                             excluded.pid, excluded.start_ticks))
             SELECT (host, boot_id, pid, start_ticks) IS DISTINCT FROM ($3, $4, $5, $6)
             FROM old",
        )
        .bind(record.id)
        .bind(worker)
        .bind(&process.host)
        .bind(&process.boot_id)
        .bind(process.pid)
        .bind(process.start_ticks)
        .fetch_optional(&mut *tx)
        .await?;
        if starting && previous != Some(false) {
            names.push(worker.to_string());
        }
        let ended = if names.is_empty() {
            0
        } else {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE claims SET expire_time = now()
                 WHERE ledger_id = $1 AND worker = ANY($2) AND state = {CLAIM_ACTIVE}
                   AND expire_time > now()"
            )))
            .bind(record.id)
            .bind(&names)
            .execute(&mut *tx)
            .await?
            .rows_affected() as i64
        };
        tx.commit().await?;
        if ended > 0 {
            tracing::info!(ledger = %ledger, worker = %worker, holders = ?names, claims = ended, "leases of gone holders ended");
        }
        Ok(ended)
    }

    /// Up to `limit` open jobs of the ledger whose claims are live and not
    /// `worker`'s, the soonest lease to end first, with each holder's
    /// recorded process.
    pub async fn held_jobs(&self, ledger: &str, worker: &str, limit: i64) -> Result<Vec<HeldJob>> {
        let record = self.ledger(ledger).await?;
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT j.public_id, j.state, c.worker AS owner, c.expire_time,
                        w.host, w.boot_id, w.pid, w.start_ticks
                 FROM claims c JOIN jobs j ON j.id = c.job_id
                 LEFT JOIN worker_processes w ON w.ledger_id = c.ledger_id AND w.worker = c.worker
                 WHERE c.ledger_id = $1 AND c.state = {CLAIM_ACTIVE} AND c.expire_time > now()
                   AND j.end_time IS NULL AND c.worker <> $2 AND j.claim_token = c.token
                 ORDER BY c.expire_time LIMIT $3"
            )
        });
        let rows: Vec<HeldRow> = sqlx::query_as(sqlx::AssertSqlSafe(SQL.as_str()))
            .bind(record.id)
            .bind(worker)
            .bind(limit.clamp(0, MAX_HOLDERS as i64))
            .fetch_all(self.pool())
            .await?;
        Ok(rows.into_iter().filter_map(HeldRow::into_held).collect())
    }

    /// Ends the lease of job `public_id` now, fenced by its claim `token`:
    /// the next AdoptJobs of any worker adopts it (a PREPARING job's rows
    /// are released instead, as when a lease runs out).
    pub async fn hand_over_job(
        &self,
        ledger: &str,
        public_id: &str,
        token: Uuid,
        actor: &str,
    ) -> Result<JobRecord> {
        let record = self.ledger(ledger).await?;
        let mut tx = self.begin().await?;
        let out = async {
            let (claim, job) = lock_fenced(&mut tx, record.id, ledger, public_id, token).await?;
            crate::fence::check_live(&claim, ledger)?;
            if job.closed {
                return load_job(&mut *tx, job.id).await;
            }
            sqlx::query("UPDATE claims SET expire_time = now() WHERE token = $1")
                .bind(token)
                .execute(&mut *tx)
                .await?;
            tracing::info!(ledger = %ledger, job = %public_id, actor = %actor, "job handed over: its lease ended now");
            load_job(&mut *tx, job.id).await
        }
        .await;
        crate::end_tx(tx, out).await
    }
}

#[derive(sqlx::FromRow)]
struct HeldRow {
    public_id: String,
    state: i16,
    owner: String,
    expire_time: crate::types::Time,
    host: Option<String>,
    boot_id: Option<String>,
    pid: Option<i64>,
    start_ticks: Option<i64>,
}

impl HeldRow {
    fn into_held(self) -> Option<HeldJob> {
        let state = JobState::from_code(self.state)?;
        let process = match (self.host, self.boot_id, self.pid, self.start_ticks) {
            (Some(host), Some(boot_id), Some(pid), Some(start_ticks)) => Some(WorkerProcess {
                host,
                boot_id,
                pid,
                start_ticks,
            }),
            _ => None,
        };
        Some(HeldJob {
            public_id: self.public_id,
            state,
            owner: self.owner,
            process,
            lease_expire_time: self.expire_time,
        })
    }
}
