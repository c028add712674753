//! Golden rows (rules in `tally_core::golden`): a ledger's set, the choice
//! of the jobs that carry it (made in CreateJob's transaction), and the
//! results: compared, recorded apart from rows (`golden_results`, one per
//! job and key), and read as drift, which sends one `model_drift` alert per
//! model version and pauses the ledger when the set says so.

use crate::fence;
use crate::pause::{self, PauseLedger};
use crate::types::LedgerRecord;
use crate::{Result, Store, StoreError};
use sqlx::{Postgres, Transaction};
use tally_core::golden::{self, Drift, GoldenPolicy};
use tally_core::pause::PauseReason;
use uuid::Uuid;

pub use crate::types::GoldenRow;

/// A ledger's golden set.
#[derive(Debug, Clone, PartialEq)]
pub struct GoldenSet {
    pub rows: Vec<GoldenRow>,
    pub policy: GoldenPolicy,
}

/// What the latest results of a ledger say, with the model that answered
/// the latest.
#[derive(Debug, Clone, PartialEq)]
pub struct DriftView {
    pub drift: Drift,
    pub model: String,
    pub model_version: String,
}

/// A golden answer as the worker reports it.
#[derive(Debug, Clone)]
pub struct Answer {
    pub key: String,
    pub text: String,
    pub model_version: String,
    pub error: String,
}

/// What recording answers did.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub matched: usize,
    pub mismatched: usize,
    pub drift: DriftView,
}

/// Who pauses a ledger for drift.
const ACTOR: &str = "tally (golden rows)";

/// The pause a drift asks for.
fn drift_pause<'a>(ledger: &'a str, message: &'a str) -> PauseLedger<'a> {
    PauseLedger {
        ledger,
        reason: PauseReason::ModelDrift,
        message,
        actor: ACTOR,
        etag: None,
    }
}

type SetRow = (sqlx::types::Json<Vec<GoldenRow>>, i32, i32, f64, bool);

/// A ledger's set as [`SetRow`] (`$1`: the ledger id).
const SET_SELECT: &str =
    "SELECT rows, every_nth_job, window_size, max_mismatch_fraction, pause_on_drift
     FROM golden_sets WHERE ledger_id = $1";

fn set_of(row: SetRow) -> GoldenSet {
    let (rows, every_nth_job, window, max_mismatch_fraction, pause_on_drift) = row;
    GoldenSet {
        rows: rows.0,
        policy: GoldenPolicy {
            every_nth_job: every_nth_job.max(0) as u32,
            window: window.max(1) as u32,
            max_mismatch_fraction,
            pause_on_drift,
        },
    }
}

/// The golden rows the job being made in `tx` carries: counts the job
/// against the ledger's set and answers its rows when the policy picks
/// this job (and marks the job), nothing otherwise.
pub(crate) async fn for_new_job(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    job_id: i64,
) -> Result<Vec<GoldenRow>> {
    let row: Option<(i64, SetRow)> = sqlx::query_as::<_, (i64, sqlx::types::Json<Vec<GoldenRow>>, i32, i32, f64, bool)>(
        "UPDATE golden_sets SET jobs_seen = jobs_seen + 1 WHERE ledger_id = $1
         RETURNING jobs_seen, rows, every_nth_job, window_size, max_mismatch_fraction, pause_on_drift",
    )
    .bind(ledger_id)
    .fetch_optional(&mut **tx)
    .await?
    .map(|(n, rows, e, w, f, p)| (n, (rows, e, w, f, p)));
    let Some((n, set)) = row else {
        return Ok(Vec::new());
    };
    let set = set_of(set);
    if set.rows.is_empty() || !set.policy.carries(n.max(0) as u64) {
        return Ok(Vec::new());
    }
    sqlx::query("UPDATE jobs SET golden = true WHERE id = $1")
        .bind(job_id)
        .execute(&mut **tx)
        .await?;
    Ok(set.rows)
}

/// The golden rows job `job_id` was made to carry (none when it was not).
pub(crate) async fn of_job(
    tx: &mut Transaction<'static, Postgres>,
    job_id: i64,
) -> Result<Vec<GoldenRow>> {
    let rows: Option<sqlx::types::Json<Vec<GoldenRow>>> = sqlx::query_scalar(
        "SELECT s.rows FROM jobs j JOIN golden_sets s ON s.ledger_id = j.ledger_id
         WHERE j.id = $1 AND j.golden",
    )
    .bind(job_id)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(rows.map(|r| r.0).unwrap_or_default())
}

/// Deletes a ledger's results older than the newest
/// [`golden::results_kept`] (through the `golden_results_latest` index).
async fn trim_results(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    policy: &GoldenPolicy,
) -> Result<()> {
    sqlx::query(
        "DELETE FROM golden_results WHERE ledger_id = $1 AND id <= (
             SELECT id FROM golden_results WHERE ledger_id = $1
             ORDER BY id DESC OFFSET $2 LIMIT 1)",
    )
    .bind(ledger_id)
    .bind(golden::results_kept(policy.window))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The latest `window` results of a ledger, newest first, read as drift.
async fn read_drift<'e, E: sqlx::Executor<'e, Database = Postgres>>(
    exec: E,
    ledger_id: i64,
    policy: &GoldenPolicy,
) -> Result<DriftView> {
    let rows: Vec<(Vec<String>, String, String)> = sqlx::query_as(
        "SELECT mismatched, model, model_version FROM golden_results
         WHERE ledger_id = $1 ORDER BY id DESC LIMIT $2",
    )
    .bind(ledger_id)
    .bind(i64::from(policy.window))
    .fetch_all(exec)
    .await?;
    let (model, model_version) = rows
        .first()
        .map(|r| (r.1.clone(), r.2.clone()))
        .unwrap_or_default();
    let results: Vec<golden::Result> = rows
        .into_iter()
        .map(|(mismatched, _, _)| golden::Result { mismatched })
        .collect();
    Ok(DriftView {
        drift: golden::drift(policy, &results),
        model,
        model_version,
    })
}

impl Store {
    /// Replaces a ledger's golden set (checked by the caller); results
    /// already recorded stay, and the job count starts again (the next job
    /// carries the new rows).
    pub async fn set_golden(&self, ledger: &str, set: &GoldenSet) -> Result<DriftView> {
        let record = self.ledger(ledger).await?;
        let p = &set.policy;
        sqlx::query(
            "INSERT INTO golden_sets (ledger_id, rows, every_nth_job, window_size, max_mismatch_fraction, pause_on_drift)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (ledger_id) DO UPDATE SET rows = excluded.rows,
                 every_nth_job = excluded.every_nth_job, window_size = excluded.window_size,
                 max_mismatch_fraction = excluded.max_mismatch_fraction,
                 pause_on_drift = excluded.pause_on_drift, jobs_seen = 0, update_time = now()",
        )
        .bind(record.id)
        .bind(sqlx::types::Json(&set.rows))
        .bind(i32::try_from(p.every_nth_job).unwrap_or(i32::MAX))
        .bind(i32::try_from(p.window).unwrap_or(i32::MAX))
        .bind(p.max_mismatch_fraction)
        .bind(p.pause_on_drift)
        .execute(&self.pool)
        .await?;
        read_drift(&self.pool, record.id, p).await
    }

    /// A ledger's golden set (`None`: never set) and its drift.
    pub async fn get_golden(&self, ledger: &str) -> Result<Option<(GoldenSet, DriftView)>> {
        let record = self.ledger(ledger).await?;
        let row: Option<SetRow> = sqlx::query_as(SET_SELECT)
            .bind(record.id)
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let set = set_of(row);
        let drift = read_drift(&self.pool, record.id, &set.policy).await?;
        Ok(Some((set, drift)))
    }

    /// Records a job's golden answers (fenced by the job's claim; a repeat
    /// adds nothing), and reads the drift after them: at drift, one
    /// `model_drift` alert per model version, and a pause when the set says
    /// so. Answers for keys not in the set are ignored.
    pub async fn report_golden(
        &self,
        ledger: &str,
        public_id: &str,
        token: Uuid,
        answers: &[Answer],
    ) -> Result<Recorded> {
        let record = self.ledger(ledger).await?;
        let mut tx = self.begin().await?;
        let out = async {
            // The pause the drift may ask for commits with the results and
            // the alert mark that say so: once the mark is set, no later
            // report would pause for this model version again. A pause
            // takes the ledger's row before anything it guards.
            pause::lock_first(&mut tx, ledger).await?;
            let job = fence::lock_fenced_job(&mut tx, record.id, ledger, public_id, token).await?;
            let sql = format!("{SET_SELECT} FOR UPDATE");
            let row: Option<SetRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(record.id)
            .fetch_optional(&mut *tx)
            .await?;
            let set = set_of(row.ok_or_else(|| StoreError::FailedPrecondition {
                reason: "NO_GOLDEN_ROWS",
                description: format!("ledgers/{ledger} has no golden rows (SetGoldenRows)"),
            })?);
            let model: String = sqlx::query_scalar("SELECT model FROM jobs WHERE id = $1")
                .bind(job)
                .fetch_one(&mut *tx)
                .await?;
            let (mut matched, mut mismatched) = (0, 0);
            for a in answers {
                let Some(g) = set.rows.iter().find(|g| g.key == a.key) else {
                    continue;
                };
                let fields: Vec<String> = if a.error.is_empty() {
                    golden::compare(&g.expect(), &a.text)
                        .into_iter()
                        .map(|m| m.field)
                        .collect()
                } else {
                    vec![String::new()]
                };
                let answer = if a.error.is_empty() { &a.text } else { &a.error };
                let inserted = sqlx::query(
                    "INSERT INTO golden_results (ledger_id, job_id, key, model, model_version, mismatched, answer)
                     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (job_id, key) DO NOTHING",
                )
                .bind(record.id)
                .bind(job)
                .bind(&a.key)
                .bind(&model)
                .bind(&a.model_version)
                .bind(&fields)
                .bind(answer)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if inserted == 1 {
                    if fields.is_empty() {
                        matched += 1;
                    } else {
                        mismatched += 1;
                    }
                }
            }
            if matched + mismatched > 0 {
                trim_results(&mut tx, record.id, &set.policy).await?;
            }
            let view = read_drift(&mut *tx, record.id, &set.policy).await?;
            let newly = view.drift.drifted && self.note_alert(&mut tx, &record, &view).await?;
            note_snapshot(&mut tx, record.id, &model, &view.model_version, newly).await?;
            let paused = if newly && set.policy.pause_on_drift {
                let message = golden::drift_message(&view.model, &view.model_version, &view.drift);
                let (now, changed) = pause::pause_in(&mut tx, &drift_pause(ledger, &message)).await?;
                Some((now, changed, message))
            } else {
                None
            };
            let recorded = Recorded {
                matched,
                mismatched,
                drift: view,
            };
            Ok((recorded, paused))
        }
        .await;
        let (recorded, paused) = crate::end_tx(tx, out).await?;
        if let Some((now, changed, message)) = paused {
            self.paused_now(&drift_pause(ledger, &message), &now, changed);
        }
        Ok(recorded)
    }

    /// Marks the drift of `view`'s model version alerted; queues the alert
    /// when the policy has an alert URL. False when that version was
    /// alerted already.
    async fn note_alert(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        record: &LedgerRecord,
        view: &DriftView,
    ) -> Result<bool> {
        let changed = sqlx::query(
            "UPDATE golden_sets SET alerted_version = $2
             WHERE ledger_id = $1 AND alerted_version IS DISTINCT FROM $2",
        )
        .bind(record.id)
        .bind(&view.model_version)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        if changed == 0 {
            return Ok(false);
        }
        tracing::warn!(ledger = %record.name, model = %view.model, version = %view.model_version,
            mismatches = view.drift.mismatches, results = view.drift.results, "golden rows: model drift");
        if !record.policy.alert_url.is_empty() {
            let body = golden::alert_body(
                &record.name,
                &view.model,
                &view.model_version,
                &view.drift,
                chrono::Utc::now(),
            );
            crate::spend::queue_alert(tx, record, golden::ALERT_DRIFT, &body).await?;
        }
        Ok(true)
    }
}

/// What golden results say of `model` for the result cache
/// (`model_snapshots`): the version its provider reported last, and, when
/// they `drifted` just now, the time from which answers cached under it
/// before are no longer served.
async fn note_snapshot(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    model: &str,
    version: &str,
    drifted: bool,
) -> Result<()> {
    if version.is_empty() && !drifted {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO model_snapshots (provider, model, version, version_time, drift_time)
         SELECT coalesce(m.provider, ''), $2, $3, now(), CASE WHEN $4 THEN now() END
         FROM (SELECT 1) one
         LEFT JOIN ledger_models m ON m.ledger_id = $1 AND m.model = $2
         ON CONFLICT (provider, model) DO UPDATE SET
             version = CASE WHEN excluded.version <> '' THEN excluded.version
                            ELSE model_snapshots.version END,
             version_time = CASE WHEN excluded.version <> '' THEN excluded.version_time
                                 ELSE model_snapshots.version_time END,
             drift_time = coalesce(excluded.drift_time, model_snapshots.drift_time)",
    )
    .bind(ledger_id)
    .bind(model)
    .bind(version)
    .bind(drifted)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
