//! ReportOutcomes: per-row outcomes for a claim, fenced by its token.
//!
//! One pipeline: load, decide, write.
//! - **Load** the rows the report names: from the claim cache (module
//!   `claim_cache`) when this process granted the claim and every item
//!   names a row it took and has not settled, else read in a transaction
//!   that locks the claim.
//! - **Decide** once, in core: [`tally_core::report::judge`] gives each
//!   item's verdict and what to write (STALE and DUPLICATE write nothing).
//! - **Write** rows from the cache in one guarded statement, which checks
//!   that the claim is still as this process last saw it (in a transaction
//!   with the results log entry of the rows it finished); rows read under
//!   the lock with the shared settle writer in that transaction, where a
//!   capped ledger's spend and a job's counts (with a PROGRESS event) move
//!   too. When the guarded statement finds the claim moved on, nothing was
//!   written: the cache entry is forgotten and the report is loaded again
//!   under the lock.

use crate::claim_cache::CachedClaim;
use crate::fence::{self, LockedClaim, ROW_SNAPSHOT_COLUMNS, RowSnapshot};
use crate::results::Finished;
use crate::settle::{self, NewAttempt, RowWrite, Settler};
use crate::types::{
    JobEventKind, LedgerRecord, ReportItem, ReportSummary, RowVerdict, Time, Usage, Verdict,
    attempted_usage,
};
use crate::{Result, Store, StoreError, codes, events, jitter_sample};
use chrono::TimeDelta;
use sqlx::{Postgres, Transaction};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tally_core::lane::Lane;
use tally_core::report::{self, ClaimView, Judgement, RowView, Settle};
use tally_core::status::RowStatus;
use uuid::Uuid;

/// One ReportOutcomes call.
struct Report<'a> {
    ledger: &'a LedgerRecord,
    token: Uuid,
    items: &'a [ReportItem],
    /// Recorded with each attempt.
    actor: &'a str,
}

/// The rows a report names, loaded.
enum Loaded {
    /// What the claim took and has not settled through this process, as it
    /// found it; nothing is locked (the guarded write checks the claim).
    Cached(Arc<CachedClaim>),
    /// Read in a transaction that holds the claim's lock.
    Locked(Locked),
}

struct Locked {
    tx: Transaction<'static, Postgres>,
    claim: LockedClaim,
    /// The rows named, by key (whoever holds them).
    rows: HashMap<String, RowSnapshot>,
}

/// A report written (and committed).
struct Written {
    verdicts: Vec<RowVerdict>,
    held: i32,
    /// The claim's model and lane.
    model: String,
    lane: Lane,
}

impl Store {
    /// Applies `items` for claim `token`; `actor` is recorded with each
    /// attempt. Answers one verdict per item, in order.
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.report",
        skip_all
    )]
    pub async fn report(
        &self,
        ledger: &str,
        token: Uuid,
        items: &[ReportItem],
        actor: &str,
    ) -> Result<ReportSummary> {
        let record = self.ledger(ledger).await?;
        let report = Report {
            ledger: &record,
            token,
            items,
            actor,
        };
        let loaded = match self.load_cached(&report) {
            Some(claim) => Loaded::Cached(claim),
            None => self.load_locked(&report).await?,
        };
        let written = match self.decide_and_write(&report, loaded).await? {
            Some(written) => written,
            // The cache was behind the claim (it was settled elsewhere, ran
            // out of lease or got a job): nothing was written.
            None => {
                let loaded = self.load_locked(&report).await?;
                self.decide_and_write(&report, loaded)
                    .await?
                    .ok_or_else(|| {
                        StoreError::Internal(format!("claim {token} moved under its lock"))
                    })?
            }
        };
        if record.policy.result_cache.is_some() {
            // After the report: an answer not kept is a later miss, never a
            // lost row.
            let price = record.policy.price_in(&written.model, written.lane);
            let cost = |u: &Usage| price.as_ref().map_or(0.0, |p| p.cost_of(u));
            if let Err(e) = keep_answers(
                &self.pool,
                record.id,
                ledger,
                token,
                items,
                &written.verdicts,
                cost,
            )
            .await
            {
                tracing::warn!(ledger, error = %e, "answers not kept in the result cache");
            }
        }
        Ok(ReportSummary {
            verdicts: written.verdicts,
            held: written.held,
            price: record.policy.price_in(&written.model, written.lane),
            model: written.model,
        })
    }

    /// Load, from the claim cache: when this process granted the claim,
    /// the ledger is not capped (a capped ledger's spend moves in the
    /// report's transaction) and every item names a row the claim took and
    /// has not settled here.
    fn load_cached(&self, r: &Report<'_>) -> Option<Arc<CachedClaim>> {
        if r.items.is_empty() || r.ledger.policy.cap().is_some() {
            return None;
        }
        let claim = self.claim_cache.get(r.token)?;
        let found = claim.ledger_id == r.ledger.id
            && r.items.iter().all(|i| claim.rows.contains_key(&i.key));
        found.then_some(claim)
    }

    /// Load, from the database: locks the claim, then reads the rows named.
    async fn load_locked(&self, r: &Report<'_>) -> Result<Loaded> {
        let mut tx = self.begin().await?;
        let claim = fence::lock_claim(&mut tx, r.ledger.id, &r.ledger.name, r.token).await?;
        let keys: Vec<&str> = r.items.iter().map(|i| i.key.as_str()).collect();
        // No row locks: every writer of a row held by a claim (reports,
        // releases, rescue, adoption, job settlement) locks the claim first,
        // and we hold it; the settling UPDATE re-checks the fence anyway.
        // Rows held by other claims are only read, to answer STALE or
        // DUPLICATE.
        let sql = format!(
            "SELECT {ROW_SNAPSHOT_COLUMNS} FROM rows WHERE ledger_id = $1 AND key = ANY($2)"
        );
        let rows = sqlx::query_as::<_, RowSnapshot>(sqlx::AssertSqlSafe(sql))
            .bind(r.ledger.id)
            .bind(&keys)
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .map(|row| (row.key.clone(), row))
            .collect();
        Ok(Loaded::Locked(Locked { tx, claim, rows }))
    }

    /// Decides (in core, once) and writes. `None`: the rows came from the
    /// claim cache and the claim had moved on; nothing was written.
    async fn decide_and_write(&self, r: &Report<'_>, loaded: Loaded) -> Result<Option<Written>> {
        let judged = loaded.judge(r)?;
        let writes = r
            .items
            .iter()
            .zip(&judged)
            .filter_map(|(item, j)| match j {
                Judgement::Settle(s) => Some(row_write(item, s)),
                Judgement::Unchanged { .. } => None,
            })
            .collect::<Result<Vec<_>>>()?;
        match loaded {
            Loaded::Cached(claim) => self.write_guarded(r, claim, &judged, &writes).await,
            Loaded::Locked(locked) => self
                .write_locked(r, locked, &judged, &writes)
                .await
                .map(Some),
        }
    }

    /// Write, rows from the claim cache: one guarded statement. `None` when
    /// it finds the claim not as this process last saw it (then it wrote
    /// nothing, and the claim is forgotten here).
    async fn write_guarded(
        &self,
        r: &Report<'_>,
        claim: Arc<CachedClaim>,
        judged: &[Judgement],
        writes: &[RowWrite],
    ) -> Result<Option<Written>> {
        // The settle statement with the claim as this process last saw it:
        // it writes nothing unless the claim is still just so. In a
        // transaction only so that the rows it finishes are logged with it
        // (the statement alone would commit before the log's lock).
        let mut tx = self.begin().await?;
        let done = match settle::run(
            &mut *tx,
            r.ledger.id,
            r.token,
            writes,
            Settler::report(r.actor),
            Some(claim.held),
        )
        .await
        {
            Ok(done) => done,
            Err(e) => return crate::end_tx(tx, Err(e)).await,
        };
        if !done.all {
            tx.rollback().await?;
            self.claim_cache.forget(r.token);
            self.claim_cache.missed();
            return Ok(None);
        }
        let logged = async {
            let mut finished = Finished::default();
            finished.add(r.ledger.id, done.finished, done.versions);
            finished.log(&mut tx).await?;
            Ok(())
        }
        .await;
        crate::end_tx(tx, logged).await?;
        let (held, now) = (done.held, done.now);
        let (model, lane) = (claim.model.clone(), claim.lane);
        // Let go of the entry first, so that the cache can update it in
        // place.
        drop(claim);
        self.claim_cache
            .settled(r.token, r.items.iter().map(|i| i.key.as_str()), held);
        Ok(Some(Written {
            verdicts: answers(r.items, judged, now),
            held,
            model,
            lane,
        }))
    }

    /// Write, rows read under the claim's lock: the shared settle writer,
    /// a capped ledger's spend and the job's counts, in one transaction.
    async fn write_locked(
        &self,
        r: &Report<'_>,
        locked: Locked,
        judged: &[Judgement],
        writes: &[RowWrite],
    ) -> Result<Written> {
        let Locked { mut tx, claim, .. } = locked;
        let verdicts = answers(r.items, judged, claim.now);
        let mut finished = Finished::default();
        let held = settle::settle_logged(
            &mut tx,
            r.ledger.id,
            r.token,
            writes,
            Settler::report(r.actor),
            &mut finished,
        )
        .await?;
        let policy = &r.ledger.policy;
        if policy.cap().is_some() {
            let usage = attempted_usage(r.items, &verdicts);
            let lane = Lane::from_code(claim.lane).unwrap_or_default();
            let spent = spend_of(&usage, policy.price_in(&claim.model, lane).as_ref());
            crate::spend::add_spent(&mut tx, r.ledger.id, spent).await?;
        }
        if let Some(job_id) = claim.job_id.filter(|_| !writes.is_empty()) {
            count_into_job(&mut tx, job_id, r.token, writes).await?;
            events::append(&mut tx, &[(job_id, JobEventKind::Progress)], r.actor).await?;
        }
        finished.log(&mut tx).await?;
        tx.commit().await?;
        // What this process remembers of the claim is out of date now.
        self.claim_cache.forget(r.token);
        Ok(Written {
            verdicts,
            held,
            lane: Lane::from_code(claim.lane).unwrap_or_default(),
            model: claim.model,
        })
    }
}

impl Loaded {
    /// Decide: core's judgement of every item, from the rows loaded.
    fn judge(&self, r: &Report<'_>) -> Result<Vec<Judgement>> {
        let policy = &r.ledger.policy;
        let overrides = policy.overrides();
        let items = r.items.iter().map(|i| (i.key.as_str(), &i.outcome));
        let view = |row: &RowSnapshot, held: bool| {
            let state = row.held_state();
            RowView {
                id: row.id,
                failures: state.failures,
                total: state.total,
                held,
                reported_by_claim: row.last_claim_id == Some(r.token),
            }
        };
        let judged = match self {
            // Every cached row is held, and the claim live, as long as the
            // claim is as this process last saw it: the guarded write
            // checks that (and writes nothing otherwise).
            Loaded::Cached(claim) => report::judge(
                items,
                |key| claim.rows.get(key).map(|row| view(row, true)),
                ClaimView { live: true },
                policy,
                &overrides,
                jitter_sample,
            ),
            Loaded::Locked(l) => {
                let holds: HashSet<i64> = l.claim.row_ids.iter().copied().collect();
                report::judge(
                    items,
                    |key| {
                        l.rows
                            .get(key)
                            .map(|row| view(row, holds.contains(&row.id)))
                    },
                    ClaimView {
                        live: l.claim.is_live(),
                    },
                    policy,
                    &overrides,
                    jitter_sample,
                )
            }
        };
        judged.map_err(|broken| StoreError::Internal(broken.to_string()))
    }
}

/// A duration in whole milliseconds, as statements take it (a backoff, as
/// the settle statement takes it and the answer's next attempt time shows
/// it; the result cache's ages).
pub(crate) fn millis(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

/// The row write of a settled item.
fn row_write(item: &ReportItem, s: &Settle) -> Result<RowWrite> {
    let t = &s.transition;
    Ok(RowWrite {
        id: s.id,
        status: t.status,
        failures: t.failures,
        total: t.total,
        rule: t.rule.as_ref().map(|r| r.name()),
        last_error: Some(s.error.clone()),
        // A result is kept for a success only.
        result: item
            .result
            .clone()
            .filter(|_| s.verdict == Verdict::Succeeded),
        response: item
            .response
            .clone()
            .filter(|_| s.verdict == Verdict::Succeeded),
        usage: item.usage,
        retry_after_ms: t.retry_after.map_or(0, millis),
        attempt: NewAttempt::of(t)?,
        request_id: item
            .request_id
            .clone()
            .filter(|_| s.transition.attempt.is_some()),
        tier: item.tier.clone().filter(|_| s.transition.attempt.is_some()),
        cached: item
            .cached
            .as_ref()
            .filter(|_| s.transition.attempt.is_some())
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| StoreError::Internal(e.to_string()))?,
    })
}

/// The answers to `items`, written at `now` (the writing transaction's
/// time, from which a RETRYABLE row's next attempt is counted).
fn answers(items: &[ReportItem], judged: &[Judgement], now: Time) -> Vec<RowVerdict> {
    items
        .iter()
        .zip(judged)
        .map(|(item, j)| RowVerdict {
            key: item.key.clone(),
            verdict: j.verdict(),
            rule: j.rule(),
            budget: j.budget(),
            next_attempt_time: j
                .retry_after()
                .map(|d| now + TimeDelta::milliseconds(millis(d))),
            failures: j.failures(),
            total: j.total(),
        })
        .collect()
}

/// Adds a report's settled rows to its job's counts. Only a live claim
/// writes rows, and a live claim with a job is that job's current fence, so
/// the guard below failing would be a bug.
async fn count_into_job(
    tx: &mut Transaction<'static, Postgres>,
    job_id: i64,
    token: Uuid,
    writes: &[RowWrite],
) -> Result<()> {
    let count = |s: RowStatus| writes.iter().filter(|w| w.status == s).count() as i32;
    let n = sqlx::query(
        "UPDATE jobs SET succeeded = succeeded + $3, retryable = retryable + $4,
                permanent = permanent + $5, update_time = now()
         WHERE id = $1 AND claim_token = $2 AND end_time IS NULL",
    )
    .bind(job_id)
    .bind(token)
    .bind(count(RowStatus::Succeeded))
    .bind(count(RowStatus::Retryable))
    .bind(count(RowStatus::Permanent))
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if n == 1 {
        Ok(())
    } else {
        Err(StoreError::Internal(format!(
            "claim {token} settled rows of job {job_id}, which it does not fence"
        )))
    }
}

/// What reported usage spends, in a cap's measures: thinking tokens count
/// as output (as they are billed), cost at the model's price (0 without
/// one).
fn spend_of(u: &Usage, price: Option<&tally_core::policy::Price>) -> tally_core::spend::Amount {
    tally_core::spend::Amount {
        cost_usd: price.map_or(0.0, |p| p.cost_of(u)),
        input_tokens: u.input,
        output_tokens: u.output.saturating_add(u.thinking),
    }
}

/// After a report by claim `token` on a ledger that uses the result cache
/// (`crate::cache`): keeps the answers of rows it settled SUCCEEDED whose
/// lookup missed (`queries/cache/keep.sql`). `cost` prices an item's usage.
async fn keep_answers(
    pool: &sqlx::PgPool,
    ledger_id: i64,
    ledger: &str,
    token: Uuid,
    items: &[ReportItem],
    verdicts: &[RowVerdict],
    cost: impl Fn(&Usage) -> f64,
) -> Result<()> {
    let kept: Vec<&ReportItem> = items
        .iter()
        .zip(verdicts)
        .filter(|(i, v)| v.verdict == Verdict::Succeeded && i.cached.is_none())
        .map(|(i, _)| i)
        .collect();
    if kept.is_empty() {
        return Ok(());
    }
    static SQL: LazyLock<String> =
        LazyLock::new(|| codes::render(include_str!("queries/cache/keep.sql")));
    let col = |f: fn(&Usage) -> i64| -> Vec<i64> { kept.iter().map(|i| f(&i.usage)).collect() };
    sqlx::query(sqlx::AssertSqlSafe(SQL.as_str()))
        .bind(ledger_id)
        .bind(token)
        .bind(ledger)
        .bind(kept.iter().map(|i| i.key.as_str()).collect::<Vec<_>>())
        .bind(
            kept.iter()
                .map(|i| i.model_version.as_deref().unwrap_or(""))
                .collect::<Vec<_>>(),
        )
        .bind(col(|u| u.input))
        .bind(col(|u| u.output))
        .bind(col(|u| u.thinking))
        .bind(col(|u| u.cached))
        .bind(kept.iter().map(|i| cost(&i.usage)).collect::<Vec<f64>>())
        .execute(pool)
        .await?;
    Ok(())
}
