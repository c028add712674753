//! Pausing and resuming ledgers. The rules of a paused ledger are in
//! `tally_core::pause`; here are the writes: the pause on the ledger row,
//! and an event in the job event log so watchers see it in order with the
//! jobs'.
//!
//! Where a pause is enforced: the claim statement reads the ledger row's
//! `pause_reason` (see `claims`), and CreateJob reads it in its transaction
//! (see `jobs`). Nothing else looks at it: every other call finishes work
//! already out.

use crate::ledgers::{COLUMNS, LedgerRow};
use crate::types::{JobEventKind, LedgerRecord, Pause};
use crate::{Result, Store, StoreError, events};
use sqlx::{Postgres, Transaction};
use tally_core::pause::{self, Change, PauseReason, Work};

/// A pause to record.
#[derive(Debug, Clone)]
pub struct PauseLedger<'a> {
    pub ledger: &'a str,
    pub reason: PauseReason,
    /// Free text shown with the pause.
    pub message: &'a str,
    /// Who pauses (the caller's name, or `system`).
    pub actor: &'a str,
    /// When set, the call is ABORTED unless the ledger's etag is still this.
    pub etag: Option<i64>,
}

/// The ledger row locked for a pause or resume: NOT_FOUND when there is no
/// live ledger (a ledger being deleted included), ABORTED on a stale etag.
/// FOR NO KEY UPDATE, the lock the pause's own write takes: pauses, resumes,
/// updates and DeleteLedger (FOR UPDATE) take turns, while enrollments'
/// holds and the foreign-key checks of the ledger's cold tables (FOR KEY
/// SHARE) neither wait for a pause nor make one wait, though MarkNotCreated
/// holds it across the close of a job.
async fn lock(
    tx: &mut Transaction<'static, Postgres>,
    ledger: &str,
    etag: Option<i64>,
) -> Result<LedgerRecord> {
    let sql = format!(
        "SELECT {COLUMNS} FROM ledgers WHERE name = $1 AND delete_time IS NULL FOR NO KEY UPDATE"
    );
    let record: LedgerRecord = sqlx::query_as::<_, LedgerRow>(sqlx::AssertSqlSafe(sql))
        .bind(ledger)
        .fetch_optional(&mut **tx)
        .await?
        .map(Into::into)
        .ok_or_else(|| StoreError::not_found("ledger", format!("ledgers/{ledger}")))?;
    if etag.is_some_and(|e| e != record.etag) {
        return Err(StoreError::Aborted(format!(
            "ledgers/{ledger} changed since it was read (etag mismatch); read it again and retry"
        )));
    }
    Ok(record)
}

/// Writes the pause columns (`None`: clears them) with a new etag.
async fn write(
    tx: &mut Transaction<'static, Postgres>,
    id: i64,
    pause: Option<(PauseReason, &str, &str)>,
) -> Result<LedgerRecord> {
    let (reason, message, actor) = match pause {
        Some((r, m, a)) => (Some(r.as_str()), Some(m), Some(a)),
        None => (None, None, None),
    };
    let sql = format!(
        "UPDATE ledgers SET pause_reason = $2, pause_message = $3, pause_actor = $4,
                pause_time = CASE WHEN $2::text IS NULL THEN NULL ELSE now() END,
                etag = etag + 1, update_time = now()
         WHERE id = $1 RETURNING {COLUMNS}"
    );
    Ok(sqlx::query_as::<_, LedgerRow>(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .bind(reason)
        .bind(message)
        .bind(actor)
        .fetch_one(&mut **tx)
        .await?
        .into())
}

/// LEDGER_PAUSED when the ledger is paused now (read from its row, not
/// the cache) and `work` is not done while paused.
pub(crate) async fn refuse_if_paused(
    tx: &mut Transaction<'static, Postgres>,
    ledger: &LedgerRecord,
    work: Work,
) -> Result<()> {
    if !pause::pause_may_refuse(work) {
        return Ok(());
    }
    let sql = format!("SELECT {COLUMNS} FROM ledgers WHERE id = $1");
    let now: LedgerRecord = sqlx::query_as::<_, LedgerRow>(sqlx::AssertSqlSafe(sql))
        .bind(ledger.id)
        .fetch_one(&mut **tx)
        .await?
        .into();
    match now.pause {
        Some(p) if !pause::allowed_while_paused(work, p.reason) => Err(paused(&now.name, p)),
        _ => Ok(()),
    }
}

/// The error a paused ledger answers new work with.
pub(crate) fn paused(ledger: &str, pause: Pause) -> StoreError {
    StoreError::LedgerPaused {
        name: format!("ledgers/{ledger}"),
        pause: Box::new(pause),
    }
}

/// Pauses the ledger inside `tx` (see [`Store::pause_ledger`]); true when
/// it was not paused before. A caller whose transaction locks more than the
/// ledger calls [`lock_first`] before anything else, so every pause takes
/// the ledger's row before the rows it guards, as ResumeLedger and
/// DeleteLedger do.
pub(crate) async fn pause_in(
    tx: &mut Transaction<'static, Postgres>,
    req: &PauseLedger<'_>,
) -> Result<(LedgerRecord, bool)> {
    let current = lock(tx, req.ledger, req.etag).await?;
    let paused = current.pause.as_ref().map(|p| p.reason);
    match pause::pause(paused) {
        Change::Unchanged => Ok((current, false)),
        Change::Apply => {
            let record = write(tx, current.id, Some((req.reason, req.message, req.actor))).await?;
            events::append_ledger(
                tx,
                record.id,
                JobEventKind::LedgerPaused,
                Some((req.reason, req.message)),
                req.actor,
            )
            .await?;
            Ok((record, true))
        }
    }
}

/// Locks the live ledger's row for a [`pause_in`] later in `tx`.
pub(crate) async fn lock_first(
    tx: &mut Transaction<'static, Postgres>,
    ledger: &str,
) -> Result<()> {
    lock(tx, ledger, None).await.map(drop)
}

impl Store {
    /// Pauses a ledger with a reason: from now on it hands out no claims
    /// and makes no jobs. Pausing a paused ledger changes nothing (the
    /// first pause's reason, actor and time stay) and answers it.
    ///
    /// Operators pause through PauseLedger (`PauseReason::Operator`); spend
    /// caps, quotas and drift checks call this with their own reason.
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.pause_ledger",
        skip_all
    )]
    pub async fn pause_ledger(&self, req: &PauseLedger<'_>) -> Result<LedgerRecord> {
        let mut tx = self.begin().await?;
        let out = pause_in(&mut tx, req).await;
        let (record, changed) = crate::end_tx(tx, out).await?;
        self.paused_now(req, &record, changed);
        Ok(record)
    }

    /// What a committed pause changes outside the database: the cached
    /// ledger, and a log line when it was paused now.
    pub(crate) fn paused_now(&self, req: &PauseLedger<'_>, record: &LedgerRecord, changed: bool) {
        self.ledgers.put(record);
        if changed {
            tracing::info!(ledger = %req.ledger, reason = %req.reason, actor = %req.actor, message = %req.message, "ledger paused");
        }
    }

    /// Resumes a paused ledger: it hands out claims again. Resuming an
    /// active ledger changes nothing and answers it.
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.resume_ledger",
        skip_all
    )]
    pub async fn resume_ledger(
        &self,
        ledger: &str,
        etag: Option<i64>,
        actor: &str,
    ) -> Result<LedgerRecord> {
        let mut tx = self.begin().await?;
        let out = async {
            let current = lock(&mut tx, ledger, etag).await?;
            let paused = current.pause.as_ref().map(|p| p.reason);
            match pause::resume(paused) {
                Change::Unchanged => Ok((current, None)),
                Change::Apply => {
                    let record = write(&mut tx, current.id, None).await?;
                    events::append_ledger(
                        &mut tx,
                        record.id,
                        JobEventKind::LedgerResumed,
                        None,
                        actor,
                    )
                    .await?;
                    Ok((record, paused))
                }
            }
        }
        .await;
        let (record, was) = crate::end_tx(tx, out).await?;
        self.ledgers.put(&record);
        if let Some(reason) = was {
            tracing::info!(ledger = %ledger, was = %reason, actor = %actor, "ledger resumed");
        }
        Ok(record)
    }
}
